/*
 * st_vfs — the file system the FUSE daemon serves, with no FUSE in it.
 *
 * The mount's root holds one directory per job; inside a job directory the
 * trainer uses its own layout. Every file the trainer writes lands in a
 * staging file on local disk (STAGING/data/<sid>); a journal (SQLite,
 * STAGING/journal.db) records the namespace so a restarted daemon finds
 * everything that was acknowledged. Steps are recognised from paths and
 * completion markers (mount/st_steprules.h, docs/STEPS.md); a complete step is sealed
 * and uploaded in the background (chunk, dedup, pack, manifest, commit), and
 * the upload never blocks a writer. Steps that are durable in the store and
 * were written elsewhere appear as remote files, fetched and verified on open.
 *
 * Inode numbers are never reused during a mount; ino 1 is the root, 2 the
 * read-only ".ckptfs" directory holding the control files "status" (ino 3),
 * "commit" (4), "drain" (5) and, when the caller gives a renderer
 * (st_vfs_options.metrics), "metrics" (6).
 *
 * Owners: every entry has a uid and gid. Entries made by st_vfs_mkdir and
 * st_vfs_create get the caller's, kept in the journal; the root, the
 * control entries and what the remote view shows (the store keeps no
 * owners) are the mount's user's (the process that called st_vfs_open).
 * st_vfs checks no permission: the caller (the kernel, with FUSE's
 * default_permissions) does, against these attributes (docs/MOUNT.md,
 * "Other users on the node").
 *
 * Threads: every function may be called from any FUSE worker thread; the
 * namespace is guarded by one mutex inside st_vfs, never held across I/O to
 * the store or large local I/O. Data reads and writes go straight to the
 * handle's fd (st_vfs_handle_fd) without the lock; st_vfs_write_prepare/
 * st_vfs_write_done bracket each write for the staging cap and the file
 * size. One background thread uploads steps (and carries out deletions of
 * steps removed through the mount); one refreshes the remote view; with
 * gc_enabled, one runs GC over the store every gc_interval_seconds.
 */
#ifndef ST_VFS_H
#define ST_VFS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "st_error.h"

#define ST_VFS_ROOT_INO    1
#define ST_VFS_CTL_DIR_INO 2
#define ST_VFS_STATUS_INO  3
#define ST_VFS_COMMIT_INO                                                                          \
    4 /* ".ckptfs/commit": write "JOB STEP RANK WORLD                                              \
" */
#define ST_VFS_DRAIN_INO                                                                           \
    5                         /* ".ckptfs/drain": write "drain                                     \
" (st_vfs_drain) */
#define ST_VFS_METRICS_INO  6 /* ".ckptfs/metrics": st_vfs_options.metrics's text */
#define ST_VFS_WARMUP_INO   7 /* ".ckptfs/warmup": write "JOB [STEP]\n" (st_vfs_warmup) */
#define ST_VFS_LAST_CTL_INO ST_VFS_WARMUP_INO /* inodes 2..this are the control entries */

typedef struct st_vfs st_vfs;
typedef struct st_vfs_handle st_vfs_handle;

struct st_backend; /* st_backend.h */

/*! The text of ".ckptfs/metrics", made by the caller (the daemon renders
 *  Prometheus text from st_vfs_get_stats(), fs/fs_metrics.h). Called on a
 *  FUSE worker thread at each open of the file, without any st_vfs lock
 *  held, so it may call st_vfs_get_stats(v). On ST_OK *text is malloc'd
 *  (st_vfs frees it) and holds *len bytes. */
typedef st_err (*st_vfs_metrics_fn)(void *arg, st_vfs *v, char **text, size_t *len);

/*! What ckptfs keeps of staging files for reuse unless told otherwise:
 *  one 1 GiB to 4 GiB checkpoint's worth. */
#define ST_VFS_DEFAULT_STAGING_SPARE (4ull << 30)
/*! How long ckptfs waits at start for a predecessor on its staging
 *  directory to let go, unless told otherwise (seconds). */
#define ST_VFS_DEFAULT_STAGING_WAIT 10.0

typedef struct st_vfs_options {
    const char *store_url;
    /* An already opened backend to serve instead of opening store_url (which
     * may then be NULL), e.g. tests/support's in-memory store. Borrowed: the
     * caller closes it after st_vfs_close(); it is shared by the vfs threads
     * (st_backend.h: thread-safe), and $CKPT_FAULT does not apply to it
     * (wrap it yourself). NULL, as in the daemon: open store_url. */
    struct st_backend *backend;
    const char *s3_endpoint; /* s3:// endpoint URL; NULL: $CKPT_S3_ENDPOINT, else AWS */
    /* s3:// request signing, addressing and TLS (docs/S3.md); NULL: the
     * environment ($CKPT_S3_SIGNATURE, $AWS_REGION, ...), else the default. */
    const char *s3_signature;  /* "v4" (default) or "v2" */
    const char *s3_region;     /* e.g. "eu-west-1"; default: AWS_REGION, profile, us-east-1 */
    const char *s3_addressing; /* "path" or "virtual"; default: virtual for AWS only */
    const char *s3_ca_file;    /* PEM CA bundle for https; default: the system store */
    const char *s3_sse; /* AES256, aws:kms[:KEY-ID] or c:KEY-FILE; NULL: $CKPT_S3_SSE, else none */
    /* Client-side encryption (docs/ENCRYPTION.md): the key file whose keys
     * seal what the mount writes and open what it reads; NULL:
     * $CKPT_ENCRYPTION_KEY_FILE, else none (a plain store). */
    const char *encryption_key_file;
    const char *staging_dir;  /* created if missing (0700); one mount at a time */
    const char *node;         /* NULL: from the host name */
    const char *step_pattern; /* NULL: built-in step rule */
    uint64_t staging_cap;     /* bytes of staging data; 0: no cap but the disk */
    /* The bytes warm-up may fetch over the mount's life (docs/WARMUP.md,
     * "Warm-up"); a file past it is skipped. 0: half the staging file
     * system's free space at open. */
    uint64_t warmup_max_bytes;
    /* Bytes of staging files kept for reuse (docs/MOUNT.md, "Recycled
     * staging files"); 0: none kept (the daemon's default is
     * ST_VFS_DEFAULT_STAGING_SPARE). */
    uint64_t staging_spare;
    /* How long open waits for another mount to let go of staging_dir (a
     * daemon still draining after a lazy unmount) before it fails with
     * ST_ERR_BUSY; 0: not at all (the daemon's default is
     * ST_VFS_DEFAULT_STAGING_WAIT). docs/MOUNT.md, "The staging directory". */
    double staging_wait_seconds;
    double refresh_seconds; /* how often the remote view is refreshed (default 5) */
    /* The node lease (docs/NODES.md): how long this daemon's claim on its
     * node name stays live without a heartbeat (default 60). */
    double node_lease_ttl_seconds;
    double drain_seconds; /* on close, how long to wait for uploads (default 60) */
    /* When close() of a file of 1 MiB or more returns (docs/MOUNT.md, "When
     * close() waits for the disk"): "disk" (NULL, the default) after its
     * staging file's fdatasync; "background" once the daemon holds its
     * bytes, the fdatasync following at the file's release. */
    const char *close_sync;
    unsigned upload_threads; /* pack PUTs in flight per upload (default 4) */
    unsigned seal_threads;   /* threads encoding new chunks per upload (0: the CPUs less one) */
    /* The codecs new chunks may use (docs/CODEC.md, "zstd per plane: when it is picked"): "auto"
     * (NULL, the default: zstd per byte plane where it wins) or "lz4" (the
     * LZ4 codecs only: less CPU, more bytes). */
    const char *compression;
    /* Peers (docs/PEERS.md). peer_listen: "ADDR:PORT" where this mount
     * keeps and serves replicas of other nodes' parts (NULL: it keeps
     * none; a wildcard address is refused). peers: the other nodes'
     * "HOST:PORT,..." (NULL: parts are not replicated and no pack is read
     * from a peer). peer_secret_file: the cluster secret, required with
     * either (mode 0600, >= 32 bytes). replicas: peers that must hold a
     * part before it is replicated (0 with peers: 1; at most 16).
     * peer_cache_cap: bytes of replicas kept for others (0: a fifth of the
     * staging file system). peer_rate: bytes per second sent to one peer
     * (0: no cap). peer_tls_cert, peer_tls_key: PEM files with which
     * peer_listen serves HTTPS only (both or neither; the key private to
     * the daemon's user). peer_ca_file: the CA an https:// peer's
     * certificate must chain to (NULL: the system's store). */
    const char *peer_listen;
    const char *peers;
    /* This node's failure domain (NULL: its node name): its replicas go to
     * peers of other domains, and it tells writers its own. */
    const char *failure_domain;
    const char *peer_secret_file;
    const char *peer_tls_cert;
    const char *peer_tls_key;
    const char *peer_ca_file;
    uint64_t replicas;
    uint64_t peer_cache_cap;
    uint64_t peer_rate;
    /* Background GC (docs/MOUNT.md): non-zero gc_enabled starts a thread that
     * runs st_gc_run over every job of the store with this policy. */
    int gc_enabled;
    uint64_t gc_keep_last;      /* 0: no keep-last rule */
    uint64_t gc_keep_every;     /* 0: no keep-every rule */
    double gc_grace_seconds;    /* sweep grace period (default 3600) */
    double gc_interval_seconds; /* between runs; the first one interval after start (default 600) */
    /* Who may use the control files (".ckptfs/status", "metrics", "commit",
     * "drain", "warmup"): "owner" (NULL, the default), the mount's user
     * only (modes 0400 and 0200); "all", every user who reaches the mount
     * (0444 and 0222). */
    const char *control_access;
    /* Renderer of ".ckptfs/metrics"; NULL: the file does not exist. */
    st_vfs_metrics_fn metrics;
    void *metrics_arg;
    /* Log sink for daemon messages; may be NULL. level: 0 info, 1 warning, 2 error. */
    void (*log)(void *arg, int level, const char *msg);
    void *log_arg;
} st_vfs_options;

typedef struct st_vfs_attr {
    uint64_t ino;
    uint32_t mode; /* S_IFDIR or S_IFREG | permissions */
    uint32_t nlink;
    uint32_t uid, gid; /* the owner (see the file comment) */
    uint64_t size;
    int64_t atime_ns; /* what utimensat set, while the mount runs; else mtime_ns */
    int64_t mtime_ns;
    int64_t ctime_ns;
} st_vfs_attr;

/*! Opens the store (opts.store_url, or the caller's opts.backend) and
 *  staging, recovers the journal (files whose close() returned are
 *  kept; files still being written at a crash are dropped, since no writer
 *  was told they were safe) and loads the remote view. Starts no thread, so
 *  the caller may still fork (daemonize) before st_vfs_start().
 *  The staging directory is this mount's alone until st_vfs_close: held by
 *  a lock (ST_ERR_BUSY, the message naming the holder's PID, when another
 *  mount holds it past opts.staging_wait_seconds), and refused
 *  (ST_ERR_INVALID) when another user owns it or a group or others may
 *  write it or its data/ (docs/MOUNT.md, "The staging directory"). */
st_err st_vfs_open(const st_vfs_options *opts, st_vfs **out);

/*! Starts the uploader and the remote-view refresher threads, and the GC
 *  thread with opts.gc_enabled; records the calling process's PID as the
 *  staging directory's holder (a daemon forks between open and start). */
st_err st_vfs_start(st_vfs *v);

/*! Unmount: handles never released are released (the kernel drops them
 *  when a SIGTERM ends the connection; st_vfs_release judges each, and
 *  frees it: the caller must not use them any more), a GC run under way is
 *  told to stop, the uploader switches to the draining order
 *  (st_vfs_drain), every step whose files are all closed becomes complete,
 *  the uploader gets up to drain_seconds to make them durable; what is left
 *  (uploads, deletion requests) stays in staging and the journal for the
 *  next start (docs/SHUTDOWN.md). */
void st_vfs_close(st_vfs *v);

/*! A preemption notice: from now on the uploader takes the newest complete
 *  step of each job first (docs/SHUTDOWN.md, "The upload order"); the mount
 *  keeps serving. One-way; idempotent. Any thread; async-signal-unsafe (it
 *  takes the mount's lock): call it from a thread, not a signal handler. */
void st_vfs_drain(st_vfs *v);

/* Namespace operations. Entries returned by lookup/mkdir/create count one
 * kernel reference each, released by st_vfs_forget(). */
st_err st_vfs_lookup(st_vfs *v, uint64_t parent, const char *name, st_vfs_attr *out);
void st_vfs_forget(st_vfs *v, uint64_t ino, uint64_t nlookup);
st_err st_vfs_getattr(st_vfs *v, uint64_t ino, st_vfs_attr *out);

#define ST_VFS_SET_MODE  1
#define ST_VFS_SET_SIZE  2
#define ST_VFS_SET_MTIME 4
#define ST_VFS_SET_ATIME 8
/*! Changes what `which` says; h (may be NULL) is an open handle of ino.
 *  The access time is kept in memory only (docs/MOUNT.md, "Times"). */
st_err st_vfs_setattr(st_vfs *v, uint64_t ino, int which, uint32_t mode, uint64_t size,
                      int64_t atime_ns, int64_t mtime_ns, st_vfs_handle *h, st_vfs_attr *out);

/*! The owner of a new entry: the process that makes it. */
typedef struct st_vfs_owner {
    uint32_t uid, gid;
} st_vfs_owner;
#define ST_VFS_OWNER_KEEP ((uint32_t)-1) /* st_vfs_chown: leave this id as it is */
/*! chown: sets ino's uid and gid (ST_VFS_OWNER_KEEP: unchanged), kept in the
 *  journal (the root's for this mount only). Checks no permission (the
 *  file comment); the control entries: ST_ERR_READ_ONLY unless nothing
 *  changes. */
st_err st_vfs_chown(st_vfs *v, uint64_t ino, uint32_t uid, uint32_t gid, st_vfs_attr *out);
/*! mkdir; mode as the kernel passes it (the umask applied). owner NULL:
 *  the mount's user. */
st_err st_vfs_mkdir(st_vfs *v, uint64_t parent, const char *name, uint32_t mode,
                    const st_vfs_owner *owner, st_vfs_attr *out);
/*! unlink of a single-file step's file, and rmdir of a step directory, when
 *  nothing else in the mount names that step, also request the step's
 *  deletion from the store (docs/MOUNT.md, "Deleting steps"); the request is
 *  in the journal when they return. */
st_err st_vfs_unlink(st_vfs *v, uint64_t parent, const char *name);
st_err st_vfs_rmdir(st_vfs *v, uint64_t parent, const char *name);
#define ST_VFS_RENAME_NOREPLACE 1 /* renameat2's RENAME_NOREPLACE: fail if the target exists */
/*! Replaces an existing target file (or empty directory) atomically; with
 *  ST_VFS_RENAME_NOREPLACE in flags an existing target fails the rename with
 *  ST_ERR_EXISTS instead. Other flags: ST_ERR_UNSUPPORTED. A rename that
 *  would make some path below the entry longer than the manifest's limit
 *  (4096 bytes) fails with ST_ERR_TOO_LONG: that file could not be stored. */
st_err st_vfs_rename(st_vfs *v, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags);

/*! One directory entry for readdir. */
typedef struct st_vfs_dirent {
    uint64_t ino;
    uint32_t mode;
    char *name;
} st_vfs_dirent;
/*! Snapshot of a directory's entries (including "." and ".."); *ents
 *  malloc'd with st_vfs_dirents_free(). */
st_err st_vfs_readdir(st_vfs *v, uint64_t ino, st_vfs_dirent **ents, size_t *n);
void st_vfs_dirents_free(st_vfs_dirent *ents, size_t n);

/* Files. flags are open(2) flags (O_ACCMODE, O_TRUNC, O_APPEND). pid is the
 * calling process (steps written by one writer complete when it moves on);
 * owner the new file's, as st_vfs_mkdir's. */
st_err st_vfs_create(st_vfs *v, uint64_t parent, const char *name, uint32_t mode, int flags,
                     pid_t pid, const st_vfs_owner *owner, st_vfs_attr *out, st_vfs_handle **h);
st_err st_vfs_open_file(st_vfs *v, uint64_t ino, int flags, pid_t pid, st_vfs_handle **h);
/*! Before a read of [off, off + *len) through h's fd: cuts *len at the
 *  file's size when the fd's file may hold bytes past it (a recycled
 *  staging file, docs/MOUNT_MODEL.md, "Recycled staging files"), and waits
 *  until the range has been fetched and verified when h was opened while its
 *  file was being fetched from the store (docs/WARMUP.md); returns at once
 *  otherwise. A failed fetch: its error (the reader gets EIO). h opened on a
 *  torn file (its bytes never reached the staging disk before the machine
 *  stopped, docs/MOUNT.md): ST_ERR_CORRUPT until it is rewritten. Any
 *  thread; may block. */
st_err st_vfs_read_wait(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t *len);

/*! Warm-up (docs/WARMUP.md): fetches every file of step of job into staging
 *  in the background, one file after another, each with parallel ranged
 *  GETs. job NULL: every job of the mount; step UINT64_MAX: the job's newest
 *  listed (consistent) step, looked for again at each refresh while there is
 *  none. Returns once the request is queued; the status file's "warmup"
 *  object follows it. ST_ERR_BUSY: 16 requests are under way already. Any
 *  thread. */
st_err st_vfs_warmup(st_vfs *v, const char *job, uint64_t step);

/*! 1 if name can be a job (a job directory's name), else 0. */
int st_vfs_job_name_ok(const char *name);
/*! The fd reads and writes go to (staging or cache file), or -1 for a
 *  virtual file, whose bytes come from st_vfs_handle_read(). */
int st_vfs_handle_fd(const st_vfs_handle *h);
/*! The process that opened h for writing lacks CAP_FSETID: the first
 *  write through h clears the file's set-user-ID bit, and its set-group-ID
 *  bit when group execution is on, as a local file system does (the kernel
 *  does it itself only for writes through the page cache). */
void st_vfs_handle_drops_setid(st_vfs_handle *h);
/*! Writes to a virtual file (.ckptfs/commit: one or more lines
 *  "JOB STEP RANK WORLD_SIZE\n", each an explicit commit of that step by that
 *  rank, rule 1 of docs/CONSISTENCY.md). ST_ERR_INVALID for a malformed line:
 *  nothing of that write is recorded. .ckptfs/drain: "drain" (a newline
 *  optional) calls st_vfs_drain(); anything else is ST_ERR_INVALID. */
st_err st_vfs_handle_write(st_vfs *v, st_vfs_handle *h, const void *buf, size_t len);
/*! Reads a virtual file's bytes (status). Returns bytes copied. */
size_t st_vfs_handle_read(const st_vfs_handle *h, uint64_t off, void *buf, size_t len);
/*! Before writing len bytes at off: ST_ERR_NOSPACE if the staging cap would
 *  be exceeded (after evicting what is durable), ST_ERR_READ_ONLY for a
 *  handle not open for writing. */
st_err st_vfs_write_prepare(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t len);
/*! The write through h failed (the staging disk full: ST_ERR_NOSPACE; or
 *  ST_ERR_IO): the file's step neither completes nor uploads until the file
 *  is truncated to 0 and written again, or removed; the status file's
 *  last_error names it, and the handle's next flush returns `why`.
 *  st_vfs_write_prepare records its own refusals. */
void st_vfs_write_failed(st_vfs *v, st_vfs_handle *h, st_err why);
/*! The staging disk said ENOSPC: unlinks every recycled staging file kept
 *  for reuse (docs/MOUNT_MODEL.md, "Recycled staging files"), so the write
 *  can be tried again. Returns the bytes freed, 0 when the pool was empty. */
uint64_t st_vfs_drop_spares(st_vfs *v);
/*! After `written` bytes were written at off. */
void st_vfs_write_done(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t written);
/*! flush (every close(2)): data in staging, journal updated; on the staging
 *  disk too unless close_sync is "background" and the file is 1 MiB or more
 *  (then the release syncs it). Returns the error of a write through h that
 *  failed since the last flush (ST_ERR_NOSPACE), so close(2) says the file
 *  is not whole. */
st_err st_vfs_flush(st_vfs *v, st_vfs_handle *h);
/*! fsync: st_vfs_flush with the data on the staging disk in every mode. */
st_err st_vfs_fsync(st_vfs *v, st_vfs_handle *h);
/*! Last close of this handle: syncs what its flush left unsynced, then may
 *  complete the file's step. Writes through h that no flush or fsync
 *  acknowledged (or a file created or truncated through it and never
 *  flushed) mark the file's write failed instead: its step waits until it
 *  is rewritten or removed (docs/SHUTDOWN.md, "Files open at the stop"). */
void st_vfs_release(st_vfs *v, st_vfs_handle *h);

/*! statfs(2) of the mount: the staging file system's, with its blocks
 *  capped by the staging cap (what is left of it is what is free). */
st_err st_vfs_statfs(st_vfs *v, struct statvfs *out);

/*! Marks every step of job whose files are all closed complete: an explicit
 *  commit (rule R7), or with at_unmount the clean-unmount rule R8, which
 *  leaves alone steps that look unfinished (docs/STEPS.md). job NULL: all. */
void st_vfs_complete_all(st_vfs *v, const char *job, int at_unmount);

/*! Blocks until nothing is waiting for upload or timeout_s passed.
 *  ST_OK when idle, ST_ERR_BUSY on timeout. */
st_err st_vfs_wait_idle(st_vfs *v, double timeout_s);

/* ---- figures for monitoring (docs/METRICS.md) ---- */

/*! A step's state as the status file names it (docs/MOUNT.md). */
typedef enum st_vfs_step_state {
    ST_VFS_STEP_WRITING = 0,   /* files of it still being written, no rule fired */
    ST_VFS_STEP_COMPLETE = 1,  /* a completion rule fired, not queued yet */
    ST_VFS_STEP_QUEUED = 2,    /* waiting for the uploader */
    ST_VFS_STEP_UPLOADING = 3, /* being uploaded */
    ST_VFS_STEP_DURABLE = 4,   /* every local file of it is in the store */
    ST_VFS_STEP_STATES = 5
} st_vfs_step_state;

/*! "writing", "complete", "queued", "uploading", "durable"; "?" out of range. */
const char *st_vfs_step_state_name(st_vfs_step_state s);

/* Store requests by kind and result: the same order as st_vfs_request_kind_name
 * and st_vfs_request_result_name give names for. */
#define ST_VFS_REQ_KINDS   6 /* put, get, stat, list, delete, delete_batch */
#define ST_VFS_REQ_RESULTS 4 /* ok, not_found, transient (retries used up), error */
const char *st_vfs_request_kind_name(int kind);
const char *st_vfs_request_result_name(int result);

typedef struct st_vfs_job_stats {
    char name[256];                     /* the job directory's name, as is (any bytes) */
    uint64_t steps[ST_VFS_STEP_STATES]; /* its steps this mount tracks, by state; steps
                                           deleted through the mount are not counted */
} st_vfs_job_stats;

/*! One consistent snapshot of the mount's figures. Counters count since
 *  st_vfs_open (they restart with the daemon); gauges are the value now. */
/*! The peer tier's figures (docs/PEERS.md); all 0 without peer options. */
typedef struct st_vfs_peer_stats {
    int enabled;                 /* a peer option is set */
    uint64_t replicas;           /* gauge: peers each part must reach (--replicas), 0: none */
    uint64_t parts_replicated;   /* this node's parts whose replica record was written */
    uint64_t parts_unreplicated; /* parts fewer peers than --replicas took */
    uint64_t bytes_sent;         /* pack bytes sent to peers (once per peer) */
    uint64_t spool_bytes;        /* gauge: spooled packs not yet in the store */
    uint64_t takeovers;          /* other nodes' replicas this node made durable */
    /* This node's cache of other nodes' replicas (--peer-listen). */
    uint64_t cache_bytes, cache_cap, replicas_held; /* gauges */
    uint64_t evictions, refusals_full, auth_refusals, corrupt_refused;
    /* Reading replicated steps: packs from peers, and what fell back. */
    uint64_t packs_read, bytes_read, store_fallbacks, peer_corrupt;
} st_vfs_peer_stats;

typedef struct st_vfs_stats {
    uint64_t pending_bytes;            /* gauge: bytes of local files not yet durable */
    uint64_t staged_bytes;             /* gauge: bytes of staging files (pending + cached) */
    uint64_t staging_cap;              /* gauge: the staging cap, 0: none */
    uint64_t spare_bytes, spare_files; /* gauges: recycled staging files kept for reuse */
    uint64_t spare_reused_bytes;       /* lengths of the recycled files new files took */
    uint64_t spare_durable_files;      /* of those: durable files of older steps (rule 5) */
    uint64_t unsynced_files;     /* gauge: closed, bytes not yet on the staging disk (close_sync) */
    uint64_t queue;              /* gauge: steps waiting for upload */
    int draining;                /* gauge: newest complete step first (st_vfs_drain) */
    double eta_durable_seconds;  /* gauge: until pending bytes are durable, -1: unknown */
    uint64_t uploaded_bytes;     /* logical bytes made durable by uploads */
    uint64_t new_raw_bytes;      /* of those: raw bytes of chunks dedup did not find */
    uint64_t stored_bytes;       /* bytes of packs PUT (after compression) */
    uint64_t chunks, new_chunks; /* chunk references uploaded / of those stored */
    uint64_t bundles;            /* bundles of small files made by uploads (docs/CHUNKING.md) */
    uint64_t bundled_files;      /* files put in those bundles */
    uint64_t uploads, upload_failures; /* step uploads published / failed (retried) */
    double upload_seconds;             /* time the published uploads took */
    uint64_t requests[ST_VFS_REQ_KINDS][ST_VFS_REQ_RESULTS]; /* store requests */
    uint64_t retries; /* tries the retry wrapper made again */
    uint64_t gc_runs; /* background GC runs finished */
    int gc_running;   /* gauge: a run is under way */
    uint64_t gc_steps_deleted, gc_objects_deleted, gc_bytes_freed;
    uint64_t deleted_steps, deleted_bytes_freed; /* by removals through the mount */
    uint64_t fetches_active; /* gauge: remote files being fetched (docs/WARMUP.md) */
    uint64_t fetched_bytes;  /* verified bytes fetched from the store */
    uint64_t read_back;      /* of those, read back from staging for whole-file digests */
    uint64_t warmup_bytes, warmup_warm_bytes; /* gauges: files of the listed warm-up
                                                 requests, and of those local */
    uint64_t errors;                          /* errors recorded (status last_error, gc) */
    int64_t last_error_unix_ns;               /* wall clock of the newest, 0: none */
    st_vfs_peer_stats peers;
    st_vfs_job_stats *jobs; /* malloc'd, njobs entries, in no set order */
    size_t njobs;
} st_vfs_stats;

/*! Fills *out under the mount's lock (a short hold: no I/O). ST_ERR_NOMEM
 *  leaves *out empty. Free with st_vfs_stats_free. Any thread. */
st_err st_vfs_get_stats(st_vfs *v, st_vfs_stats *out);
void st_vfs_stats_free(st_vfs_stats *s);

#endif
