/*
 * st_vfs_impl — the internals shared by the st_vfs modules: the state
 * tables, then each module's functions, the modules bottom to top (the list
 * below the tables says what each owns).
 *
 * Locking: v->lock guards every vnode, vjob and vstep field and the journal
 * connection; it is never held across store I/O or bulk file I/O. The
 * uploader and the refresher take it only to snapshot and to merge results.
 *
 * A file's life (vnode.state), drawn once:
 *
 *   state        meaning                                   next
 *   WRITING      created or truncated, not closed since    CLOSED on last close
 *   CLOSED       content acknowledged (close returned),     DURABLE when its step's
 *                in staging and journal, not yet durable    upload took this version
 *   DURABLE      this version is in the store              CLOSED on the next change
 *
 * A step's life (vstep): open → complete (a rule of docs/STEPS.md fired) →
 * queued → uploading → durable (all its local files DURABLE); any change to
 * a file of a complete step queues it again (a new manifest revision).
 */
#ifndef ST_VFS_IMPL_H
#define ST_VFS_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include "backend/st_backend.h"
#include "backend/st_backend_count.h"
#include "format/st_manifest.h"
#include "engine/st_restore.h"
#include "engine/st_state.h"
#include "format/st_lease.h"
#include "format/st_part.h"
#include "mount/st_steprules.h"
#include "st_vfs.h"

#define VFS_JOB_MAX_STEPS_WRITERS 8
#define VFS_NO_STEP               UINT64_MAX

typedef enum vfile_state { VFILE_WRITING = 0, VFILE_CLOSED = 1, VFILE_DURABLE = 2 } vfile_state;

/* Where a file's content lives in the store (a committed manifest entry). */
typedef struct vremote {
    uint64_t step;
    char node[ST_NODE_MAX + 1];
    uint32_t revision;
    char *path;     /* the path inside the job in that manifest */
    int from_peers; /* listed from the peers alone (vfs_peers_alone): read from there
                     * while the store is down (vfs_read_source) */
} vremote;

typedef struct vnode vnode;
struct vnode {
    uint64_t ino;
    vnode *parent; /* NULL when unlinked (or the root) */
    char *name;
    uint32_t mode;
    uint32_t uid, gid; /* the owner: its creator's, else the mount's user's (st_vfs.h) */
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    int64_t atime_ns; /* what utimensat set when atime_set; not stored (docs/MOUNT.md, "Times") */
    int atime_set;    /* else the access time shows the modification time */
    uint64_t nlookup; /* kernel references */

    /* directories: children sorted by name */
    vnode **kids;
    size_t nkids, kids_cap;
    size_t nsubdirs; /* of kids, the directories (its link count is 2 + nsubdirs) */

    /* files */
    uint64_t sid;             /* staging file STAGING/data/<sid>; 0: none */
    int writers;              /* open handles with write access */
    int opens;                /* all open handles */
    uint64_t version;         /* bumped by every change of content or path */
    uint64_t durable_version; /* the version that is in the store, 0: none */
    vfile_state state;
    int from_remote;      /* content fetched from the store, unchanged since */
    uint64_t step;        /* the step the file belongs to, VFS_NO_STEP: none yet */
    int32_t rank;         /* RANK of the process that created it, -1: unknown */
    uint32_t world;       /* its WORLD_SIZE, 0: unknown */
    vremote *remote;      /* where its durable content lives, NULL: nowhere */
    int fetching;         /* a fetch of the remote content is under way */
    struct vfetch *fetch; /* that fetch once laid out (docs/WARMUP.md), NULL: none yet */
    /* A recycled staging file (docs/MOUNT_MODEL.md, "Recycled staging files")
     * holds stale bytes of an earlier file up to stale_end (0: none) until
     * its first flush cuts them; write_front is the end of the furthest
     * write handed to it so far. Read without the lock by the read path
     * (a relaxed check before it locks), hence atomic. */
    _Atomic uint64_t stale_end;
    uint64_t write_front;
    /* Removed while a handle was still open on it (FUSE's RELEASE comes
     * after close() has returned): its staging file enters the pool when
     * the last handle closes (vfs_spare_last_close). */
    int spare_on_close;
    /* A write to the file failed (ST_ERR_NOSPACE: the staging cap or the
     * disk; ST_ERR_IO, also for writes no close() acknowledged: released
     * without a flush, or still open when the daemon stopped) since it was
     * last truncated to 0: its content is not what the writer meant, so its
     * step neither completes nor uploads until the file is rewritten or
     * removed (docs/STEPS.md, "A failed write"). ST_ERR_CORRUPT: torn, its
     * bytes may not be the ones written (a machine crash before the sync of
     * --close-sync background): reads fail too. 0: none. Counted in
     * st_vfs.nfailed while the file is in the tree. */
    st_err write_failed;
    /* close_sync "background" (docs/MOUNT_MODEL.md, "When close() waits for the
     * disk"): a flush returned with bytes of the file not yet on the staging
     * disk (the journal row says so too). sync_gen counts such flushes; a
     * release clears unsynced only if none came after the one it synced for. */
    int unsynced;
    uint64_t sync_gen;
    /* When the remote view added this node (st_mono_ns; 0: made here), and,
     * for a directory, when it was last listed: a remote file added after
     * the listing was never seen by whoever empties the directory. */
    int64_t merged_ns, listed_ns;
};

typedef struct vstep {
    uint64_t step;
    int complete; /* a completion rule fired */
    int queued;   /* waiting in the upload queue */
    int uploading;
    int writers;       /* open writable handles on files of this step */
    uint32_t revision; /* last manifest revision this node published */
    int remote_loaded; /* the store's durable version was merged into the view */
    /* The largest revision among the part records merged (0: not merged
     * from a listing; such a step is not merged again): a refresh that lists
     * another largest manifest revision merges the step again, also while a
     * publish is between its manifest and its part record
     * (docs/CONSISTENCY.md). */
    uint32_t remote_revision;
    /* The last merge left a file out because it was open or being fetched:
     * the next refresh merges the step again (else that file kept its old
     * version until a later revision came). */
    int remote_skipped;
    int64_t durable_ns;
    pid_t writer_pids[VFS_JOB_MAX_STEPS_WRITERS];
    int nwriter_pids;
    int64_t last_activity_ns; /* last writer open or close (eager publishing) */
    int dirty;                /* closed changes not yet queued (eager publishing) */
    int upload_waits;         /* completed while writers were open: queue at the last close */
    int moved_on;             /* a rule fired while files of it were open for writing (R3:
                                 its single file closed; R4: its writer opened a newer
                                 step): complete at the last close */
    int blocked_complete;     /* a rule fired while a file of it had a failed write */
    int blocked_upload;       /* an upload was due while a file of it had a failed write */
    st_rank_commit *commits;  /* explicit per-rank commits made on this node */
    size_t ncommits, commits_cap;
} vstep;

/* A request to delete a step from the store (st_vfs_delete.c draws its life). */
typedef enum vdel_state {
    VDEL_PENDING = 0,     /* not tried yet, or deletable at the next try */
    VDEL_KEPT_NEWEST = 1, /* the job's newest consistent step: waits for a newer one */
    VDEL_KEPT_PINNED = 2, /* pinned in the store */
    VDEL_MOVING = 3       /* files that stay visible are being stored with another step */
} vdel_state;

typedef struct vdeletion {
    uint64_t step;
    char *path;           /* the removed step directory or file (job-relative) */
    int64_t requested_ns; /* wall clock */
    uint64_t id;          /* tells a request from a later one for the same step */
    vdel_state state;
    int64_t next_try_ns; /* monotonic */
    char error[256];     /* the last try's store error, "" if none */
} vdeletion;

typedef struct vjob {
    char name[ST_JOB_MAX + 1];
    vstep *steps; /* sorted by step */
    size_t nsteps, steps_cap;
    vdeletion *dels; /* pending deletion requests */
    size_t ndels, dels_cap;
    uint64_t steps_deleted, objects_deleted, bytes_freed; /* by requests, since start */
    /* Steps removed through the mount (vfs_removal_commit), since start: a
     * refresh that loaded a step of this job while this count moved does
     * not merge what it loaded (st_vfs_remote.c, load_step). */
    uint64_t removals;
} vjob;

/* What the background GC thread reports (status file). */
typedef struct vgc_status {
    uint64_t runs;
    int running;
    int64_t last_start_ns; /* wall clock, 0: no run yet */
    int64_t last_duration_ns;
    uint64_t last_steps, last_objects, last_bytes;
    uint64_t total_steps, total_objects, total_bytes;
    char last_error[256];
} vgc_status;

/* The node lease (docs/NODES.md, st_vfs_lease.c). */
typedef enum vlease_state {
    VLEASE_UNKNOWN = 0, /* not claimed yet (the store could not be read) */
    VLEASE_HELD = 1,    /* this daemon holds its node name */
    VLEASE_TAKEN = 2    /* another live daemon holds it: nothing is published */
} vlease_state;

typedef struct vlease {
    st_lease mine;        /* instance, ttl, pid, origin, host (set at open) */
    vlease_state state;   /* (lock) */
    int64_t next_beat_ns; /* monotonic time of the next heartbeat (refresher only) */
    char error[400];      /* (lock) why TAKEN, or the last store error */
} vlease;

/* The store's health as this mount sees it (st_vfs_health.c). */
typedef struct vhealth {
    st_backend_observer observer; /* handed to the backend at open */
    pthread_mutex_t lock;         /* guards the fields below but the atomics */
    _Atomic int down;             /* the last try failed transiently */
    _Atomic int64_t since_ns;     /* monotonic time of the outage's first failed try */
    _Atomic int stop_all;         /* set at close past the drain: every request stops */
    uint64_t failed_tries;        /* in this outage */
    uint64_t outages;             /* since start */
    char error[400];              /* the last failed try's message */
} vhealth;

/* How long the calling thread waits for the store (vfs_bound_set); 0 fields:
 * no bound. stop_at_ns: a monotonic deadline for every request; a request
 * past it stops. outage_budget_ns: a request stops once the store has been
 * unreachable this long (a read fails rather than hangs). */
typedef struct vfs_bound {
    int64_t stop_at_ns;
    int64_t outage_budget_ns;
} vfs_bound;

/* A fetch of one remote file in runs of chunks (docs/WARMUP.md): the per-file
 * map of verified ranges. Fields above `state` are set before the fetch is
 * published in vnode.fetch and then only read; the rest under v->lock.
 *
 *   run state   meaning                                 next
 *   TODO        not fetched                             BUSY when a worker takes it
 *   BUSY        a worker restores it                    DONE (verified), or TODO on error
 *   DONE        every chunk checked against its id      (final)
 */
typedef enum vrun_state { VRUN_TODO = 0, VRUN_BUSY = 1, VRUN_DONE = 2 } vrun_state;

typedef struct vrun {
    size_t first, count; /* chunks of the file entry */
    uint64_t off, len;   /* the bytes of the file they hold */
    vrun_state state;    /* (lock) */
    uint64_t ready;      /* (lock) while BUSY: bytes of its start verified and written */
    int wanted;          /* (lock) a reader waits for ready to grow */
} vrun;

/* A step's part record and decoded manifest, shared by the fetches of its
 * files (docs/WARMUP.md, "Layout cache"): v->layout_cache keeps the last one
 * loaded; each fetch holds a reference until it ends. */
typedef struct vlayout {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    st_bytes buf; /* the part record, then the manifest it names */
    st_part part;
    st_manifest m;
    int refs; /* (lock) */
} vlayout;

typedef struct vfetch {
    struct st_vfs *v;
    vnode *n;           /* pinned by n->fetching until the fetch ends */
    st_backend *source; /* where it reads (vfs_read_source): the store's view or the peers' */
    char job[ST_JOB_MAX + 1];
    uint64_t sid;           /* the staging file being filled */
    int fd;                 /* on it, O_RDWR; closed when the fetch ends */
    uint64_t size;          /* the file's size */
    struct vlayout *layout; /* the step's part record and manifest (shared) */
    const st_file_entry *f; /* in layout->m */
    vrun *runs;
    size_t nruns;
    vfs_bound bound;            /* of the thread that began it, for its workers */
    pthread_mutex_t write_lock; /* st_restore_to.write_lock */
    st_side_chunks *sides;      /* its side chunks, shared by the workers (NULL: none) */
    size_t front;               /* (lock) no run below it is TODO */
    size_t urgent;              /* (lock) a TODO run a reader waits for, SIZE_MAX: none */
    int tail_taken;             /* (lock) the last run was given out first */
    size_t done;                /* (lock) runs DONE */
    uint64_t done_bytes;        /* (lock) bytes of those */
    int workers;                /* (lock) worker threads not finished */
    int busy;                   /* (lock) of those, restoring a run now */
    int refs;                   /* (lock) n->fetch and the handles that wait on it */
    int ended;                  /* (lock) verified whole, or failed (err) */
    uint64_t reads;             /* (lock) reads of it through the handles that wait on it */
    uint64_t reads_seen;        /* (lock) of those, seen by the whole-file check's pacing */
    int hurry;                  /* (lock) threads that need its end: the check does not wait */
    st_err err;                 /* (lock) */
    char msg[400];              /* (lock) err's text */
} vfetch;

/* A warm-up request (docs/WARMUP.md, "Warm-up"); the status file shows the
 * newest VFS_WARM_MAX. */
typedef enum vwarm_state {
    VWARM_QUEUED = 0,  /* not looked at yet */
    VWARM_WAITING = 1, /* no step listed for it yet: tried again at each refresh */
    VWARM_FETCHING = 2,
    VWARM_DONE = 3,   /* every file looked at; warm, or partial (skipped) */
    VWARM_FAILED = 4, /* a fetch failed: error */
} vwarm_state;

typedef struct vwarm {
    uint64_t id;              /* finds the request again after the lock was dropped */
    char job[ST_JOB_MAX + 1]; /* "": every job (--prefetch latest) */
    uint64_t step;            /* VFS_NO_STEP: the job's newest */
    vwarm_state state;
    uint64_t cursor;  /* the next inode to look at while FETCHING */
    uint64_t skipped; /* files that did not fit under the staging cap */
    int own_part;     /* this node wrote part of the step: only that part is warmed */
    char error[256];
} vwarm;

#define VFS_WARM_MAX 16

/* What last_error and the log say while the store cannot be reached. */
#define VFS_UNREACHABLE "the store is unreachable"

/* docs/MOUNT_MODEL.md, "The store is down": the mount waits this long for the
 * store at start (and 1 s once it failed: a refused connection), and a read
 * of a remote file gives up once the store has been unreachable this long. */
#define VFS_OPEN_STORE_WAIT_NS (5ll * 1000000000)
#define VFS_OPEN_OUTAGE_NS     (1ll * 1000000000)
#define VFS_FETCH_OUTAGE_NS    (10ll * 1000000000)

/* A staging file in the pool: STAGING/spare/<sid>, `size` bytes long. */
typedef struct vspare {
    uint64_t sid;
    uint64_t size;
    int held; /* the running upload may still read it: not handed out yet */
    /* Kept for the running upload whatever the pool's rules (a rewrite of
     * a file it reads, vfs_spare_keep_for_upload); judged by them when that
     * upload ends. */
    int for_upload;
} vspare;

/* A naming marker's version kept for its step (st_vfs_keep.c): the content
 * of `path` that step `step` of `job` must still publish; STAGING/data/<sid>,
 * named by a journal row of table `kept` and by no vnode. */
typedef struct vkept {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    char *path;
    uint64_t sid;
    uint64_t size;
    uint32_t mode;
    int64_t mtime_ns;
    int released; /* stored or superseded: row gone, file unlinked once no upload reads it */
} vkept;

typedef struct upload_item {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
} upload_item;

struct st_vfs {
    st_vfs_options opts;
    char *store_url;
    char *staging;
    int staging_lock_fd; /* STAGING/lock, flock'ed for the mount's life; -1: not held */
    char node[ST_NODE_MAX + 1];
    st_backend *backend; /* the store, wrapped in st_backend_count (requests) */
    /* What that wraps: the replay check (engine/st_replay.h) over the
     * envelope if any over the store; the wrappers are owned, the store
     * unless it is opts.backend. */
    st_backend *store_backend;
    st_backend *retry_backend; /* the retry wrapper in it, for its count; NULL: none */
    /* The encryption keys (opts.encryption_key_file); NULL: a plain store.
     * With them, store_backend holds the st_envelope wrapper (owned, also
     * when it borrows opts.backend). Read-only after open: any thread. */
    struct st_keyring *keyring;
    st_backend_counts requests;
    /* What the remote view reads through: backend, or with peers the view
     * that adds replicated parts and reads their packs from peers
     * (st_peer_read.h), over a count wrapper of its own. Writers, GC and
     * deletes use backend: a replicated part is not durable. */
    st_backend *read_backend;
    struct vfs_peers *peers; /* NULL: no peer option given (st_vfs_peers.c) */
    uint64_t takeovers;      /* (atomic) replicas this node made durable for a lost writer */
    st_steprules *rules;
    /* Decoded bundles of small files (manifest version 3), shared by every
     * fetch and warm-up (ST_BUNDLECACHE_MOUNT slots; docs/MOUNT_MODEL.md):
     * a step's small files are read one after another, a bundle's by
     * several readers at once. Thread-safe on its own. */
    st_bundlecache *bundle_cache;
    st_vfs_owner user;  /* the mount's user: owns the root and what has no owner */
    int control_public; /* control_access "all": control files for every user */

    pthread_mutex_t lock;
    pthread_cond_t changed; /* fetch finished, upload queue changed, idle */

    /* namespace (lock) */
    vnode **inodes; /* indexed by ino; NULL once freed */
    uint64_t ninodes;
    size_t inodes_cap;
    vnode *root;
    void *journal; /* sqlite3*, used under lock */
    uint64_t next_sid;
    uint64_t staged_bytes; /* bytes of staging files */

    /* the pool of recycled staging files (st_vfs_spare.c; lock) */
    vspare *spares; /* oldest first */
    size_t nspares, spares_cap;
    uint64_t spare_bytes;                            /* their lengths */
    uint64_t spare_reused_bytes, spare_reused_files; /* taken since start */
    uint64_t spare_durable_files; /* of those: durable files' staging files (rule 5) */
    uint64_t *upload_sids;        /* what the running upload may read, sorted */
    size_t nupload_sids, upload_sids_cap;
    int upload_sids_unknown; /* that list could not be kept: hold everything */
    /* Rule 5's candidates (st_vfs_spare.c, namesake_candidates): inode
     * numbers of the files that may give their staging file to a namesake;
     * listed again once files or steps may have become durable
     * (vfs_spare_durable_changed clears candidates_listed). */
    uint64_t *candidates;
    size_t ncandidates, candidates_cap;
    int candidates_listed;
    vkept *kept; /* naming markers' versions kept for their step (st_vfs_keep.c) */
    size_t nkept, kept_cap;
    uint64_t nfailed;        /* files in the tree with write_failed set */
    int close_in_background; /* opts.close_sync is "background" */
    int compression_lz4;     /* opts.compression is "lz4" */
    /* The journal's rows were written in another boot of the machine (or the
     * boot is unknown): unsynced rows may hold torn bytes. Set by
     * vfs_journal_open, used by the recovery. */
    int journal_other_boot;
    /* Handles not released yet, files' and control files' (added at open,
     * st_vfs_handles.c and st_vfs_control.c; removed at release,
     * st_vfs_write.c): at a SIGTERM the kernel drops the connection and
     * never releases what is still open, so st_vfs_close releases them
     * itself. */
    struct st_vfs_handle *open_handles;
    vjob *jobs;
    size_t njobs, jobs_cap;

    /* upload queue (lock) */
    upload_item *queue;
    size_t nqueue, queue_cap;
    int stopping;
    int draining; /* newest complete step first (docs/SHUTDOWN.md); set once */
    int uploader_busy;
    /* A file of the running upload's snapshot was opened for writing without
     * O_TRUNC, truncated to another non-zero size, removed or replaced: what
     * the upload read may mix two versions, or hold a file that is gone, so it
     * does not publish (docs/MOUNT_MODEL.md, "A file rewritten while its step
     * uploads"). Cleared when an upload begins. */
    int upload_disturbed;
    char last_error[512];    /* set through vfs_set_error; "" once the cause is gone */
    uint64_t errors;         /* errors recorded since start (vfs_error_seen) */
    int64_t last_error_ns;   /* wall clock of the newest of them, 0: none */
    uint64_t uploaded_bytes; /* logical bytes made durable */
    uint64_t stored_bytes;   /* pack bytes PUT */
    uint64_t new_raw_bytes;  /* raw bytes of the chunks dedup did not find */
    uint64_t chunks, new_chunks;
    uint64_t bundles, bundled_files;   /* bundles of small files made, files in them */
    uint64_t uploads, upload_failures; /* step uploads that published / failed */
    uint64_t fence_waits; /* failed uploads that then waited for a compaction's fence */
    uint64_t fence_looks; /* LISTs of fences made by those waits */
    uint64_t quiet_looks; /* passes over the steps for quiet ones to publish */
    uint64_t refreshes;   /* re-listings of the store's steps, worked or failed */
    int64_t upload_ns;    /* time spent uploading */
    pthread_t uploader;
    int uploader_started;
    pthread_t refresher;
    int refresher_started;

    uint64_t next_deletion_id; /* (lock) */

    vlease lease;
    vhealth health;

    /* background GC (st_vfs_gc.c); gc_status under lock */
    pthread_t gc;
    int gc_started;
    volatile int gc_stop; /* set at close: a run ends after its current batch */
    vgc_status gc_status;

    /* fetches and warm-up (st_vfs_remote.c, st_vfs_warmup.c; lock) */
    int fetch_threads;        /* fetch workers and warm-up threads running */
    int fetch_stop;           /* set at close: workers stop after their run */
    uint64_t fetches_active;  /* fetches laid out and not ended */
    vlayout *layout_cache;    /* (lock) the step layout loaded last, or NULL */
    uint64_t fetched_bytes;   /* verified bytes fetched since start */
    uint64_t fetch_read_back; /* of those, read back for the whole-file digest */
    vwarm warm[VFS_WARM_MAX]; /* oldest first */
    size_t nwarm;
    int warm_thread;             /* the warm-up thread runs */
    vfetch *warm_checking;       /* (warm-up thread) the file it moved past before its
                                  * whole-file check ended, a reference; or NULL */
    uint64_t warm_checking_id;   /* the request that file is of */
    uint64_t warm_started_bytes; /* sizes of the files warm-up began to fetch */
    uint64_t next_warm_id;
};

/* The modules, bottom to top; each calls only those above it in this list
 * (tests/lint/check_cycles.py fails on any cycle between them):
 *   st_vfs_tree.c     vnodes, jobs, steps, the upload queue, logging
 *   st_vfs_staging.c  the staging directory: its lock, its modes, safe opens
 *   st_vfs_health.c   the store's health, bounds on waiting for it
 *   st_vfs_journal.c  the SQLite journal of the namespace
 *   st_vfs_spare.c    the pool of recycled staging files
 *   st_vfs_keep.c     naming markers' versions kept for their step
 *   st_vfs_lease.c    the node lease (docs/NODES.md)
 *   st_vfs_drop.c     files leaving the namespace or staging
 *   st_vfs_peers.c    the peer tier: server, read view, spool, replication
 *   st_vfs_takeover.c replicas made durable for a lost writer (docs/PEERS.md)
 *   st_vfs_remote.c   the remote view and fetch
 *   st_vfs_warmup.c   warm-up requests (docs/WARMUP.md)
 *   st_vfs_delete.c   steps deleted through the mount
 *   st_vfs_upload.c   the uploader thread, the drain
 *   st_vfs_gc.c       the background GC thread
 *   st_vfs_stats.c    the figures for monitoring (st_vfs_get_stats)
 *   st_vfs_local.c    a file's local copy: its own staging file, stale bytes
 *   st_vfs_steps.c    when a step is complete (docs/STEPS.md's rules)
 *   st_vfs_control.c  the control entries in .ckptfs/: status, commit...
 *   st_vfs_names.c    the namespace operations: lookup ... rename, readdir
 *   st_vfs_handles.c  open and create: handles, and reads that wait
 *   st_vfs_write.c    a handle's writes, flush, fsync and release
 *   st_vfs.c          the mount's life: open (recovery), start, close */

/* st_vfs_tree.c — every call under v->lock unless it says otherwise */
/* One message to opts.log, its control bytes escaped ("\\n"): a name with a
 * newline stays on its line. No lock needed. */
void vfs_log(st_vfs *v, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* st_vfs_peers.c: the peer tier (docs/PEERS.md). */
struct st_replication;
/*! At open, once v->backend is set: the secret, the peer server, the read
 *  view and the spool, as the options ask; v->read_backend in any case. */
st_err vfs_peers_open(st_vfs *v);
/*! At close, after the uploader stopped. */
void vfs_peers_close(st_vfs *v);

/* The view over the peers alone (docs/PEERS.md, "Restoring from peers
 * alone"), for a refresh whose listing of the store failed as transient:
 * built at the first such failure (asking every --peers peer once) and kept
 * until the mount closes; NULL without --peers, or when no peer answered
 * (logged). No lock held. */
st_backend *vfs_peers_alone(st_vfs *v);

/* The backend a remote file is read from: the peers-alone view for a file
 * listed from it while the store is down, else the mount's read view. */
st_backend *vfs_read_source(st_vfs *v, const vremote *r);
/*! Before an upload of a part of job: the backend its ingest writes through
 *  (v->backend, or the spool with this part's replication as its hook) and
 *  *rep (NULL when no replication). */
st_backend *vfs_replication_begin(st_vfs *v, const char *job, struct st_replication **rep);
/*! After the ingest, before the publish: the manifest and part to the
 *  peers and the replica record to the store, then every spooled pack to
 *  the store. An error of the store (the spool's PUTs) is returned: the
 *  part is not published then. */
st_err vfs_replication_finish(st_vfs *v, struct st_replication *rep, const st_manifest *m,
                              const st_part *part);
/*! After the upload (published: it succeeded): the peers told, the record
 *  deleted; frees rep (NULL: nothing). */
void vfs_replication_end(st_vfs *v, struct st_replication *rep, int published);
/*! The cache of replicas this node keeps for others, or NULL (no
 *  --peer-listen). */
struct st_peer_cache *vfs_peers_cache(st_vfs *v);
/*! The peer tier's figures into *out (zeros without peers). Any thread;
 *  takes only the peer objects' own locks (v->lock may be held). */
void vfs_peers_stats(st_vfs *v, st_vfs_peer_stats *out);
/*! st_vfs_takeover.c: after a refresh, replicas whose writer is lost are
 *  made durable by this node (docs/PEERS.md, "Takeover"). Refresher only. */
void vfs_takeover_tick(st_vfs *v);
/* An error happened: counts it and stamps its time (the metrics' errors and
 * last error time). vfs_set_error also puts its text in v->last_error. */
void vfs_error_seen(st_vfs *v);
void vfs_set_error(st_vfs *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A new node (owned by the mount's user) linked into parent (NULL: none). */
vnode *vfs_node_new(st_vfs *v, vnode *parent, const char *name, uint32_t mode);
vnode *vfs_child(const vnode *dir, const char *name);
/* The node of inode ino, or NULL (none, or a control entry). */
vnode *vfs_node_at(const st_vfs *v, uint64_t ino);
/* Frees n once nothing refers to it: out of the tree, no kernel reference,
 * no open handle, no fetch. */
void vfs_maybe_free(st_vfs *v, vnode *n);
/* Points n at its content in the store: path in step's manifest revision of
 * node (n->remote made or updated). 0 when out of memory (n unchanged). */
int vfs_set_remote(vnode *n, const char *path, uint64_t step, uint32_t revision, const char *node);
st_err vfs_link(vnode *dir, vnode *child);
void vfs_unlink_node(st_vfs *v, vnode *child);
/* Frees n now, whatever refers to it (st_vfs_close). */
void vfs_node_free(st_vfs *v, vnode *n);
/* Waits on v->changed (lock held) until a signal or the monotonic time due
 * (INT64_MAX: no limit). */
void vfs_timedwait(st_vfs *v, int64_t due);
/* The job a node belongs to (the root's child above it), or NULL. */
vnode *vfs_job_dir(const vnode *n);
/* Path of n relative to its job directory into buf; returns buf or NULL. */
char *vfs_job_path(const vnode *n, char *buf, size_t cap);
/* Walks/creates directories for a job-relative path; returns the parent dir
 * of the final component and sets *base to it. create: mkdir missing dirs. */
vnode *vfs_walk(st_vfs *v, vnode *jobdir, const char *path, int create, const char **base);
vjob *vfs_job(st_vfs *v, const char *name, int create);
vstep *vfs_step(vjob *j, uint64_t step, int create);
/* A step's state as the status file and the metrics name it. */
st_vfs_step_state vfs_step_state(const vstep *s);
/* Bytes of local files not yet durable. */
uint64_t vfs_pending_bytes(const st_vfs *v);
/* Seconds until pending bytes are durable at the upload rate this daemon
 * measured (bytes made durable per second spent uploading); 0 when nothing
 * is pending, -1 while no upload has finished to measure the rate. */
double vfs_eta_durable_seconds(const st_vfs *v, uint64_t pending);
void vfs_staging_path(const st_vfs *v, uint64_t sid, char *buf, size_t cap);
void vfs_enqueue(st_vfs *v, const char *job, uint64_t step);
/* The newest step this node knows of in job j that has no deletion request
 * (rule R6 gives loose files to it), or VFS_NO_STEP. */
uint64_t vfs_newest_step(const vjob *j);
/* Status-file helpers (json-c). vfs_json_add puts val under key of object
 * obj, or appends it to array obj when key is NULL, taking val over; 0, or -1
 * when obj or val is NULL (a json-c constructor ran out of memory) or the
 * insertion failed. vfs_json_fixed: v printed with `decimals` places. */
struct json_object;
int vfs_json_add(struct json_object *obj, const char *key, struct json_object *val);
struct json_object *vfs_json_fixed(double v, int decimals);
/* A file of step of job (in the tree) whose write failed, or NULL: such a
 * step neither completes nor uploads (vnode.write_failed). */
vnode *vfs_failed_file(st_vfs *v, const char *job, uint64_t step);
/* Status: "failed_files", how many files in the tree have a failed write,
 * and "failed", the first VFS_FAILED_LISTED of them (job, path, step if
 * any, torn, error). As vfs_json_add. Lock held. */
#define VFS_FAILED_LISTED 64
int vfs_failed_status(st_vfs *v, struct json_object *root);
/* What last_error says of such a file after its path ("job/path" NOTE...),
 * and what tells that it has gone (retry_blocked_steps). */
#define VFS_FAILED_NOTE ": a write to staging failed ("
#define VFS_TORN_NOTE   ": torn (its bytes did not reach the staging disk before the machine stopped)"
/* Sets or clears n's write_failed, keeping v->nfailed. */
void vfs_set_write_failed(st_vfs *v, vnode *n, st_err why);
/* Puts the first file with a failed write, and why, in v->last_error (the
 * status file says which file blocks which step); nothing if none. */
void vfs_note_failed_files(st_vfs *v);
/* The deletion request for step of job j, or NULL. */
vdeletion *vfs_deletion_find(const vjob *j, uint64_t step);
/* The step n's own path names (a file by its path, a directory as if it
 * held a file), or VFS_NO_STEP; *last is set when n is exactly the step's
 * directory or single file. path: n's job path. */
uint64_t vfs_named_step(const st_vfs *v, const vnode *n, const char *path, int *last);

/* Queues the steps that are quiet (no writer for EAGER_QUIET_NS) and have
 * closed changes, complete or not: a rank's part must become durable even
 * when the marker completing the step lives on another node. */
#define EAGER_QUIET_NS (2ll * 1000000000)
void vfs_publish_quiet_steps(st_vfs *v); /* takes v->lock itself */

/* st_vfs_staging.c — the staging directory (docs/MOUNT_MODEL.md, "The staging
 * directory"); no call needs v->lock */
/* At open, before anything else there: makes STAGING (0700) and refuses it
 * unless private to this user, takes its lock (waiting up to
 * opts.staging_wait_seconds for a holder to let go; ST_ERR_BUSY naming the
 * holder's PID), then makes and checks data/ and spare/. */
st_err vfs_staging_take(st_vfs *v);
/* At start (after a daemon's fork): this process's PID into the lock file. */
void vfs_staging_mark_pid(st_vfs *v);
/* At close, last: lets the lock go. */
void vfs_staging_let_go(st_vfs *v);
/* The bytes this user may still write on the staging file system (0 when
 * it cannot be asked). */
uint64_t vfs_staging_free_bytes(const st_vfs *v);
/* A new staging file at path (st_create_new, 0600), or an existing one
 * reopened (st_open_regular) or truncated: never through a symlink, never
 * anything but a regular file, never blocking on a FIFO; a refusal is
 * logged with the path. *fd: caller closes. */
st_err vfs_staging_create(st_vfs *v, const char *path, int flags, int *fd);
st_err vfs_staging_open(st_vfs *v, const char *path, int flags, int *fd);
st_err vfs_staging_truncate(st_vfs *v, const char *path, uint64_t size);

/* st_vfs_health.c — no call needs v->lock (see the file's comment) */
/* At open, before the backend: sets up v->health and its observer. */
void vfs_health_init(st_vfs *v);
void vfs_health_destroy(st_vfs *v);
/* Sets the calling thread's bound, returning the one it replaces (to be
 * restored by the caller: bounds nest). */
vfs_bound vfs_bound_set(vfs_bound b);
vfs_bound vfs_bound_get(void);
/* Every request of every thread stops now (unmount past its drain). */
void vfs_health_stop_all(st_vfs *v);
int vfs_health_stopping(st_vfs *v);
/* 1 while the store is unreachable. */
int vfs_health_down(st_vfs *v);
/* Status: adds the "store" object to root; while the store is unreachable,
 * writes what last_error shows into last_error[cap] (else leaves it). As
 * vfs_json_add. */
int vfs_health_status(st_vfs *v, struct json_object *root, char *last_error, size_t cap);

/* st_vfs_lease.c — the node lease (docs/NODES.md); no call holds v->lock */
/* At open: the instance id (STAGING/instance); no request. */
st_err vfs_lease_open(st_vfs *v);
/* At open, after vfs_lease_open: a read of the lease. ST_ERR_BUSY: another
 * live daemon holds the name (the mount is refused); a store error only
 * leaves the lease unknown. The first heartbeat writes it. */
st_err vfs_lease_read(st_vfs *v);
/* Refresher thread: renews the lease every ttl/3. */
void vfs_lease_heartbeat(st_vfs *v);
/* Uploader, before a part record: ST_OK if this daemon holds its name
 * (claiming it if nobody does); else the reason, and nothing may be
 * published. */
st_err vfs_lease_check(st_vfs *v);

/* st_vfs_stats.c: files whose close() returned before their bytes were on
 * the staging disk (close_sync "background"), not synced yet. Lock held. */
uint64_t vfs_count_unsynced(const st_vfs *v);

/* st_vfs_journal.c — every call under v->lock */
st_err vfs_journal_open(st_vfs *v);
/* Records this boot of the machine as the journal's, once recovery has
 * judged the unsynced rows of the last one. */
st_err vfs_journal_mark_boot(st_vfs *v);
void vfs_journal_close(st_vfs *v);
/* What recovery found besides the namespace and the steps: the deletion
 * requests, for the caller to hand to st_vfs_delete (recovery itself calls
 * no module above the journal). */
typedef struct vfs_recovered_deletion {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    char *path; /* malloc'd */
    int64_t requested_ns;
} vfs_recovered_deletion;
/* Rebuilds the namespace and the steps from the journal; *dels (malloc'd,
 * vfs_recovered_deletions_free) lists the deletion requests it holds. */
st_err vfs_journal_recover(st_vfs *v, vfs_recovered_deletion **dels, size_t *ndels);
void vfs_recovered_deletions_free(vfs_recovered_deletion *dels, size_t n);
st_err vfs_journal_put_file(st_vfs *v, vnode *n);
/* The same row, committed without waiting for the disk (close_sync
 * "background"): a crash of the daemon keeps it, one of the machine may
 * not. On ext4 the commit's fsync would wait for the file's own bytes
 * (data=ordered), the wait the mode is there to leave out. */
st_err vfs_journal_put_file_lazy(st_vfs *v, vnode *n);
st_err vfs_journal_put_dir(st_vfs *v, vnode *n);
st_err vfs_journal_delete(st_vfs *v, const char *job, const char *path);
st_err vfs_journal_tombstone(st_vfs *v, const char *job, const char *path);
int vfs_journal_is_tombstone(st_vfs *v, const char *job, const char *path);
st_err vfs_journal_rename(st_vfs *v, const char *job, const char *from, const char *to);
st_err vfs_journal_put_step(st_vfs *v, const char *job, const vstep *s);
st_err vfs_journal_drop_step(st_vfs *v, const char *job, uint64_t step);
/* One transaction around several writes (commit makes them durable at once). */
st_err vfs_journal_begin(st_vfs *v);
st_err vfs_journal_commit(st_vfs *v);
void vfs_journal_rollback(st_vfs *v);
/* Deletion requests: the deletions table. */
st_err vfs_journal_put_deletion(st_vfs *v, const char *job, const vdeletion *d);
st_err vfs_journal_drop_deletion(st_vfs *v, const char *job, uint64_t step);
/* Drops the tombstones at path and below it. */
st_err vfs_journal_drop_tombstones(st_vfs *v, const char *job, const char *path);
/* Kept versions of naming markers: the kept table (st_vfs_keep.c). */
st_err vfs_journal_put_kept(st_vfs *v, const vkept *k);
st_err vfs_journal_drop_kept(st_vfs *v, const char *job, uint64_t step, const char *path);
/* Calls each(arg, job, step, path, sid, mode, mtime_ns) for every kept row. */
st_err vfs_journal_each_kept(st_vfs *v,
                             void (*each)(void *arg, const char *job, uint64_t step,
                                          const char *path, uint64_t sid, uint32_t mode,
                                          int64_t mtime_ns),
                             void *arg);

/* st_vfs_drop.c — every call under v->lock */
/* Removes file n from the namespace and frees its staging data; with
 * tombstone, a file whose content is in the store stays hidden here (the
 * journal keeps a tombstone), else its journal row just goes. Returns the
 * journal's error: with keep_on_error the file then stays (an unlink that
 * fails), else it goes all the same (undoing a create). */
st_err vfs_drop_file(st_vfs *v, vnode *n, int tombstone, int keep_on_error);
/* Drops local copies of durable, unopened files until `need` more bytes fit
 * under the staging cap (they become remote again). */
void vfs_evict_durable(st_vfs *v, uint64_t need);
/* The store no longer holds step of job j: unchanged durable files of it leave
 * the namespace (with the step directories they leave empty), and the step's
 * local state goes once no file belongs to it. */
void vfs_forget_step(st_vfs *v, vjob *j, uint64_t step);

/* st_vfs_spare.c — the pool of recycled staging files (docs/MOUNT_MODEL.md,
 * "Recycled staging files"); every call under v->lock */
/* Empties STAGING/spare (what an earlier run left; vfs_staging_take made it). */
st_err vfs_spare_open(st_vfs *v);
/* Unlinks every spare and frees the pool. */
void vfs_spare_close(st_vfs *v);
/* Frees n's staging file (n->sid becomes 0): into the pool when
 * may_recycle and the pool's rules let it in, else unlinked. */
void vfs_staging_release(st_vfs *v, vnode *n, int may_recycle);
/* n's last handle has closed: a staging file its removal left until then
 * (vnode.spare_on_close) is released into the pool now. */
void vfs_spare_last_close(st_vfs *v, vnode *n);
/* Renames the largest spare free to take to STAGING/data/<sid> for the new
 * file `fresh`; with none free, the staging file of a durable namesake of
 * `fresh` of an older step (rule 5 of docs/MOUNT_MODEL.md, "Recycled staging
 * files"). Returns its length (every byte of it stale), 0 when none was
 * taken. */
uint64_t vfs_spare_take(st_vfs *v, const vnode *fresh, uint64_t sid);
/* Unlinks the oldest spares until the pool holds at most keep_bytes. */
void vfs_spare_shrink(st_vfs *v, uint64_t keep_bytes);
/* The staging files the upload starting now may read (sids NULL: any):
 * while it runs, they enter the pool held, and are handed out once
 * vfs_spare_upload_end. */
void vfs_spare_upload_begin(st_vfs *v, const uint64_t *sids, size_t n);
void vfs_spare_upload_end(st_vfs *v);
/* Files or steps may have become durable (an upload ended, a fetch ended,
 * another node's step was merged): rule 5's candidates are looked for
 * again at the next create that needs one. */
void vfs_spare_durable_changed(st_vfs *v);
/* 1 when the running upload may read staging file sid. */
int vfs_spare_in_upload(const st_vfs *v, uint64_t sid);
/* n is about to be rewritten from empty while the running upload may read its
 * staging file: that file is linked into the pool, held for the upload
 * whatever the pool's rules, and n gets none (n->sid 0). *old: the sid whose
 * STAGING/data name the caller unlinks once n's journal row no longer names it
 * (a crash before leaves the old row and its file). docs/MOUNT_MODEL.md, "A
 * file rewritten while its step uploads". */
st_err vfs_spare_keep_for_upload(st_vfs *v, vnode *n, uint64_t *old);
/* Opens, read-only, the staging file sid that the running upload took in
 * its snapshot: STAGING/data/<sid>, or the pool's copy kept for it
 * (vfs_staging_open). */
st_err vfs_spare_upload_open(st_vfs *v, uint64_t sid, int *fd);

/* n (its staging file moved or unlinked) no longer has a staging file. */
void vfs_staging_detach(st_vfs *v, vnode *n);

/* st_vfs_keep.c — naming markers' versions kept for their step
 * (docs/MOUNT_MODEL.md, "A naming marker replaced before its step is stored");
 * every call under v->lock */
/* n is about to be truncated to empty or replaced by a rename. If it is a
 * naming marker's version that its step has not stored yet, its staging
 * file is kept for that step (journal row first) and n has none any more
 * (n->sid 0): returns 1. 0: nothing kept, n unchanged. */
int vfs_keep_marker(st_vfs *v, vnode *n);
/* Gives n back the staging file the last vfs_keep_marker took from it (the
 * change that called for it failed). */
void vfs_keep_undo(st_vfs *v, vnode *n);
/* The next version kept for step of job from *cursor on (start at 0); NULL
 * at the end. Valid until the next call that adds one. */
const vkept *vfs_kept_next(st_vfs *v, const char *job, uint64_t step, size_t *cursor);
/* A live file of the step has path: the version kept for it is outdated. */
void vfs_kept_superseded(st_vfs *v, const char *job, uint64_t step, const char *path);
/* A revision of step holding kept staging file sid was published. */
void vfs_kept_stored(st_vfs *v, const char *job, uint64_t step, uint64_t sid);
/* The step was deleted or forgotten: its kept versions go. */
void vfs_kept_drop_step(st_vfs *v, const char *job, uint64_t step);
/* The running upload ended: released files it may have read go. */
void vfs_kept_upload_ended(st_vfs *v);
/* Recovery, after the steps and deletion requests: a kept row. Returns 1
 * when restored (the caller queues the step), 0 when dropped (its file is
 * gone; a file row still names it, so the replacement never happened; its
 * step is not in the journal or is being deleted). */
int vfs_kept_restore(st_vfs *v, const char *job, uint64_t step, const char *path, uint64_t sid,
                     uint32_t mode, int64_t mtime_ns);
void vfs_kept_close(st_vfs *v);

/* st_vfs_remote.c */
st_err vfs_remote_refresh(st_vfs *v);
/* The refresher thread's body (started by st_vfs_start). */
void *vfs_refresher_main(void *arg);
/* Makes n's content local (fetch and verify, whole); called and returns with
 * lock held, which it drops while it waits. */
st_err vfs_fetch(st_vfs *v, vnode *n);
/* A run holds about vfs_run_bytes() of raw data: the unit of work and of
 * priority, one ranged GET per pack it touches; a run that holds half that
 * ends where the chunks move to another pack (st_restore_ends_at_pack).
 * Small files: VFS_RUN_BYTES; larger ones have fewer, longer runs (fewer GETs: a GET never spans
 * two runs), up to VFS_RUN_MAX, except their last VFS_RUN_BYTES (a zip's directory, read first by
 * torch.load, is a short urgent run). A read waits only for its own bytes of a run being fetched
 * (vrun.ready). */
#define VFS_RUN_BYTES (8ull << 20)
#define VFS_RUN_MAX   (32ull << 20)
/* The run size for a file of size bytes (docs/WARMUP.md). */
uint64_t vfs_run_bytes(uint64_t size);
/* Cuts f's chunks into runs of at most vfs_run_bytes(f->size) (a longer
 * chunk: a run of its own), never splitting a chunk: *runs malloc'd,
 * *nruns of them, states TODO. ST_ERR_CORRUPT if the chunks do not add up
 * to f's size. No lock needed. */
st_err vfs_layout_runs(const st_file_entry *f, vrun **runs, size_t *nruns);
/* Starts the fetch of remote file n, or finds the one under way, and returns
 * once it is laid out (docs/WARMUP.md): *out is then the fetch, one reference
 * taken for the caller (vfs_fetch_put), or NULL when n's content is already
 * local. Lock held on entry and return, dropped meanwhile. */
st_err vfs_fetch_begin(st_vfs *v, vnode *n, vfetch **out);
/* Waits until bytes [off, off + len) of fx are verified (or fx failed: its
 * error), moving the first run not fetched yet to the front. Lock held. */
st_err vfs_fetch_wait_range(st_vfs *v, vfetch *fx, uint64_t off, uint64_t len);
/* Drops a reference from vfs_fetch_begin (lock held). */
void vfs_fetch_put(vfetch *fx);
/* At close, past the drain: fetches stop after their runs in flight and every
 * fetch and warm-up thread has ended on return. Takes v->lock. */
void vfs_fetch_stop_all(st_vfs *v);
/* Forgets the cached step layout (lock held); fetches holding it keep it. */
void vfs_layout_cache_drop(st_vfs *v);

/* st_vfs_warmup.c — warm-up requests (docs/WARMUP.md). Every call under
 * v->lock. */
/* Queues a warm-up of step (VFS_NO_STEP: the newest) of job ("": every
 * job's newest) and starts the warm-up thread if it does not run. */
st_err vfs_warmup_request(st_vfs *v, const char *job, uint64_t step);
/* Status: adds the "warmup" object to root; as vfs_json_add. */
int vfs_warmup_status(st_vfs *v, struct json_object *root);
/* Bytes of the files of the listed requests, and of those warm. */
void vfs_warmup_bytes(st_vfs *v, uint64_t *bytes, uint64_t *warm);

/* st_vfs_delete.c — deleting steps through the mount (docs/MOUNT_MODEL.md).
 * Every call under v->lock. */
typedef struct vfs_removal {
    vnode *jd;                           /* the job directory, NULL: none */
    char path[ST_MANIFEST_MAX_PATH + 1]; /* the removed entry, "" for a job dir */
    uint64_t step;                       /* the step it is the last name of, or VFS_NO_STEP */
} vfs_removal;
/* Before rmdir/unlink removes n: finds whether n is the last name of a step
 * (n itself not counted) and opens the journal transaction that the removal's
 * own journal writes and the request share. */
st_err vfs_removal_begin(st_vfs *v, vnode *n, vfs_removal *rm);
/* rmdir of a step directory that still holds files: drops the files the
 * remote view added after the directory was last listed (the remover never
 * saw them; they go with the step), if that is all it holds. Returns 1 when
 * n is empty now. */
int vfs_rmdir_drop_unseen(st_vfs *v, vnode *n);
/* After the removal's journal writes: adds the request if rm names a step,
 * commits (rolls back on error), then drops the step from this mount. */
st_err vfs_removal_commit(st_vfs *v, vfs_removal *rm);
/* n was created or renamed: a request for the step its path names is
 * cancelled (the step is being written again). */
void vfs_deletion_cancel(st_vfs *v, vnode *n);
/* The uploader's turn: carries out one request that is due (may drop the
 * lock). Returns 1 if it tried one, 0 if none was due. */
int vfs_deletions_run(st_vfs *v);
/* Monotonic time the next request is due, INT64_MAX if none. */
int64_t vfs_deletions_next_due(const st_vfs *v);
/* Adds a request read back from the journal (recovery). */
st_err vfs_deletion_restore(st_vfs *v, const char *job, uint64_t step, const char *path,
                            int64_t requested_ns);
/* Status: adds the "jobs" array (deletions and their totals) to root; as
 * vfs_json_add. */
int vfs_deletions_status(st_vfs *v, struct json_object *root);

/* st_vfs_gc.c: the background GC thread's body (started by st_vfs_start
 * when opts.gc_enabled), and the status file's "gc" object (lock held). */
void *vfs_gc_main(void *arg);
int vfs_gc_status(st_vfs *v, struct json_object *root);

/* st_vfs_upload.c: the uploader thread's body (started by st_vfs_start) */
void *vfs_uploader_main(void *arg);

/* st_vfs_local.c — a file's local copy; every call under v->lock */
/* Gives n a staging file of its own: empty (a rewrite from the start), or
 * (empty 0) with its content fetched when it has none yet. Waits for a
 * fetch of n under way first. */
st_err vfs_make_local(st_vfs *v, vnode *n, int empty);
/* Cuts the stale bytes of n's recycled staging file (rules 3 and 4 of
 * docs/MOUNT_MODEL.md, "Recycled staging files"); fd: an open descriptor of it,
 * or -1. */
st_err vfs_cut_stale(st_vfs *v, vnode *n, int fd);

/* st_vfs_steps.c — the completion rules (docs/STEPS.md); every call under
 * v->lock */
/* A rule fired for step s of job j: s is complete, and queued once no file
 * of it is open for writing (held back by a file whose write failed). */
void vfs_step_complete(st_vfs *v, vjob *j, vstep *s);
/* The step a job-relative path belongs to by name (R1), or VFS_NO_STEP;
 * *single_file (may be NULL): the step is that one file. */
uint64_t vfs_step_of_path(const st_vfs *v, const char *path, int *single_file);
/* A writable handle opens on n (in job j), by pid: counted in n's step
 * (R4: the same writer moving on completes its older steps). */
void vfs_step_writer_open(st_vfs *v, vjob *j, vnode *n, pid_t pid);
/* A file of j stopped being a reason to wait (closed, rewritten, removed):
 * steps held back by a failed write go on once no such file is left. */
void vfs_retry_blocked_steps(st_vfs *v, vjob *j);
/* n's content or name changed and nothing has it open for writing: the
 * rules that look at a closed file (R1, R2, R3, R5, R6). */
void vfs_step_file_settled(st_vfs *v, vjob *j, vnode *n, int modified);
/* A rank's explicit commit of (job, step), from .ckptfs/commit. */
st_err vfs_record_commit(st_vfs *v, const char *job, uint64_t step, uint32_t rank, uint32_t world);

/* st_vfs_control.c — the control entries in .ckptfs/ (no lock needed) */
#define VFS_CTL_DIR_NAME ".ckptfs"
/* The attributes of control inode ino (ST_VFS_CTL_DIR_INO...). */
void vfs_ctl_attr(const st_vfs *v, uint64_t ino, st_vfs_attr *a);
/* Looks name up in .ckptfs/: ST_ERR_NOT_FOUND if it holds no such entry. */
st_err vfs_ctl_lookup(const st_vfs *v, const char *name, st_vfs_attr *out);
/* The listing of .ckptfs/, as st_vfs_readdir. */
st_err vfs_ctl_readdir(const st_vfs *v, st_vfs_dirent **ents, size_t *n);
/* Opens control inode ino (takes v->lock for the status). */
st_err vfs_ctl_open(st_vfs *v, uint64_t ino, int flags, st_vfs_handle **h);

/* st_vfs_names.c — what the opens share with the namespace; lock held */
/* n's attributes as the kernel sees them. */
void vfs_node_attr(const vnode *n, st_vfs_attr *a);
/* A new entry's owner: the caller's, or (NULL) the mount's user's. */
void vfs_set_owner(vnode *n, const st_vfs_owner *owner);
/* Checks that a new entry name may be made in dir (is_dir: a directory;
 * below: bytes of the longest path under it, for a rename). */
st_err vfs_check_new_entry(st_vfs *v, vnode *dir, const char *name, int is_dir, size_t below);
/* After a change of n's attributes: its ctime, its journal row, *out. */
st_err vfs_attr_changed(st_vfs *v, vnode *n, st_vfs_attr *out);

#endif
