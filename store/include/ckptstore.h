/*
 * ckptstore.h — the store engine's facade: the only header fs/ and tools/
 * include. It opens a store (object backend + local state) and offers the
 * whole-step operations: store a directory as a step, restore a step into a
 * directory, list jobs and the steps that have part records.
 *
 * Ownership: every pointer returned through an out-parameter is owned by the
 * caller and released with the matching *_free function. Errors: st_err codes
 * (st_error.h) with the detail in st_errmsg() on the calling thread.
 *
 * Threads: an st_store is used by one thread at a time.
 */
#ifndef CKPTSTORE_H
#define CKPTSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "st_gc_policy.h"

/* Chunker parameters (tests and benchmarks set them; NULL is the default). */
typedef struct st_chunker_params st_chunker_params;

typedef struct st_store st_store;

typedef struct st_store_options {
    const char *url;         /* "file:///abs/dir" or "s3://bucket/prefix" */
    const char *s3_endpoint; /* s3:// endpoint URL; NULL: $CKPT_S3_ENDPOINT, else AWS */
    /* s3:// request signing, addressing and TLS (docs/S3.md); NULL: the
     * environment ($CKPT_S3_SIGNATURE, $AWS_REGION, ...), else the default. */
    const char *s3_signature;  /* "v4" (default) or "v2" */
    const char *s3_region;     /* e.g. "eu-west-1"; default: AWS_REGION, profile, us-east-1 */
    const char *s3_addressing; /* "path" or "virtual"; default: virtual for AWS only */
    const char *s3_ca_file;    /* PEM CA bundle for https; default: the system store */
    const char *s3_sse; /* AES256, aws:kms[:KEY-ID] or c:KEY-FILE; NULL: $CKPT_S3_SSE, else none */
    int existing_only;  /* file://: a missing directory is ST_ERR_NOT_FOUND, not made */
    /* Client-side encryption (docs/ENCRYPTION.md): the key file whose keys
     * seal what this store writes and open what it reads; NULL:
     * $CKPT_ENCRYPTION_KEY_FILE, else none (a plain store). */
    const char *encryption_key_file;
    const char *state_dir;            /* local state (dedup index); NULL: $XDG_CACHE_HOME/ckptfs */
    const char *node;                 /* this writer's name; NULL: derived from the host name */
    const st_chunker_params *chunker; /* NULL: defaults */
    /* Threads that encode new chunks on a put (1..8; 0: the online CPUs
     * less one, at least 1);
     * the stored bytes are the same whatever the number. */
    unsigned seal_threads;
    /* The codecs a put stores new chunks with (docs/CODEC.md, "zstd per
     * plane: when it is picked"): "auto" (NULL, the default: zstd per byte plane where it
     * wins) or "lz4" (the LZ4 codecs only: less CPU, more bytes). */
    const char *compression;
    /* The peers' cluster secret (docs/PEERS.md): when set, listings,
     * latest, restore and verify also see steps that are replicated on
     * peers but not yet durable, and read their packs from those peers.
     * NULL: the store's durable steps only. */
    const char *peer_secret_file;
    /* With peer_secret_file: the peers ("HOST:PORT,...") a reader lists
     * from when the store cannot be reached at open (its listing fails as
     * transient past the retries: docs/PEERS.md, "Restoring from peers
     * alone"). Writes and GC never use them. NULL: no such fallback. */
    const char *peers;
    /* With peer_secret_file: the PEM CA file the certificate of a peer
     * named https://HOST:PORT must chain to (docs/PEERS.md, "Transport
     * security"). NULL: the system's CA store. */
    const char *peer_ca_file;
    /* Called for non-fatal problems (a skipped symlink); may be NULL. */
    void (*warn)(void *arg, const char *msg);
    void *warn_arg;
} st_store_options;

/*! Default store URL: file://$XDG_DATA_HOME/ckptfs/store (or ~/.local/share/...).
 *  Writes into buf (cap bytes); returns buf, or NULL if it does not fit. */
char *st_default_store_url(char *buf, size_t cap);

/* The hex digits of a key id (docs/ENCRYPTION.md) and their NUL. */
#define ST_KEY_ID_HEX_LEN 17

/*!
 * `ckptctl keygen`: writes a new client-side encryption key file at path
 * holding one new random key (append 0; ST_ERR_EXISTS when path exists), or
 * adds a new random key as the last line of the key file at path (append 1:
 * the new key seals from now on, the older lines still open; docs/
 * ENCRYPTION.md, "Rotation"). The file is mode 0600 and replaced whole
 * (fsync, then link or rename). key_id: the new key's id in hex; nkeys: the
 * keys the file now holds. ST_OK; ST_ERR_EXISTS; ST_ERR_KEY (append: the
 * file is refused, malformed or full); ST_ERR_IO; ST_ERR_NOSPACE.
 */
st_err st_store_keygen(const char *path, int append, char key_id[ST_KEY_ID_HEX_LEN], size_t *nkeys);

st_err st_store_open(const st_store_options *opts, st_store **out);
void st_store_close(st_store *s);

/*! What a put did. */
typedef struct st_put_result {
    uint64_t files;
    uint64_t skipped;       /* entries that are not regular files or dirs */
    uint64_t logical_bytes; /* bytes of the files */
    uint64_t chunks;
    uint64_t new_chunks;
    uint64_t new_raw_bytes; /* bytes that did not dedup */
    uint64_t stored_bytes;  /* pack bytes uploaded */
    uint64_t packs;
    uint64_t bundles;       /* bundles of small files made (one chunk each, if stored) */
    uint64_t bundled_files; /* files in them */
    uint64_t puts;          /* object PUTs: packs + manifest + part record */
    /* Every request the put made, counted as they returned (retries not
     * counted again): HEADs, GETs and LISTs besides the PUTs above. */
    uint64_t heads;
    uint64_t gets;
    uint64_t lists;
} st_put_result;

/*!
 * Stores every regular file under dir (recursively; symlinks and special
 * files are skipped with a warning) as step `step` of `job`, then writes the
 * manifest and, last, the part record. ST_ERR_EXISTS if this node's part
 * record of the step is already in the store. res may be NULL.
 */
st_err st_store_put_dir(st_store *s, const char *job, uint64_t step, const char *dir,
                        st_put_result *res);

/*! One step as readers see it (docs/CONSISTENCY.md). */
typedef struct st_step_info {
    uint64_t step;
    int64_t created_ns; /* the newest part record's time */
    uint64_t files;
    uint64_t bytes; /* logical bytes of its files */
    uint64_t nodes; /* part records (one per node that wrote it) */
    int consistent; /* complete on every rank, and durable or replicated: restorable */
    /* Some of its parts are replicated on peers and not yet durable
     * (docs/PEERS.md): seen only with st_store_options.peer_secret_file. */
    int replicated;
    int complete;        /* some node saw its completion */
    uint32_t world_size; /* 0: unknown */
    uint32_t ranks;      /* distinct writer ranks among its files */
    int unreadable;      /* a part record or manifest of it cannot be read (why says why) */
    char why[160];       /* "" when consistent, else why not ("missing ranks 2,3") */
} st_step_info;

/*!
 * Every step of job that has at least one part record, consistent or not, in
 * ascending order (*steps malloc'd, free()). A step whose records cannot be
 * read is listed too, as a row with unreadable set, consistent 0, its part
 * records counted in nodes and the error in why (and reported through warn).
 */
st_err st_store_list_steps(st_store *s, const char *job, st_step_info **steps, size_t *n);

/*! The latest consistent step of job, or ST_ERR_NOT_FOUND (message says so). */
st_err st_store_latest(st_store *s, const char *job, uint64_t *step);

/*! 1 if a part of step, as last listed, is replicated on peers and not yet
 *  durable (docs/PEERS.md); 0 if the step is durable or unknown. */
int st_store_step_replicated(st_store *s, const char *job, uint64_t step);

/*! 1 if the store could not be reached at open and s reads from the peers
 *  alone (st_store_options.peers): every step it lists is replicated, none
 *  known to be durable. */
int st_store_peers_alone(const st_store *s);

typedef struct st_restore_opts {
    int rank;         /* -1: every file; else only the files written by this rank */
    int latest;       /* ignore `step`: take the latest consistent step */
    int no_fallback;  /* with latest: fail rather than fall back to an older step */
    unsigned threads; /* parallel downloads; 0: 4 */
    /* Called from the restoring threads (serialised) as bytes arrive; may be NULL. */
    void (*progress)(void *arg, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_arg;
} st_restore_opts;

typedef struct st_restore_result {
    uint64_t step; /* the step restored */
    uint64_t files, bytes;
    uint64_t gets;        /* object GETs issued */
    uint64_t read_back;   /* staged bytes read back for whole-file digests (0 when
                             the chunks came in order: hashed from memory) */
    int fell_back;        /* the latest step failed verification; an older one was restored
                             (the caller reports it: the store does not warn) */
    uint64_t failed_step; /* when fell_back: the step that failed */
    char failure[256];    /* when fell_back: why */
} st_restore_result;

/*!
 * Restores a consistent step (or with opts->latest the latest one) into dest
 * (created if missing): parallel ranged GETs, every chunk and every file
 * verified, each file renamed into place only once whole. A step that is not
 * consistent is refused (ST_ERR_NOT_FOUND, message says why). opts NULL:
 * all files, 4 threads, fallback on.
 */
st_err st_store_restore(st_store *s, const char *job, uint64_t step, const char *dest,
                        const st_restore_opts *opts, st_restore_result *res);

typedef struct st_verify_result {
    uint64_t files, chunks, bytes;
    uint64_t bad_files; /* files with a chunk or digest that failed */
} st_verify_result;

/*! Reads and checks every chunk and file digest of a step (no local writes).
 *  ST_ERR_CORRUPT if anything failed (the message names the first file). */
st_err st_store_verify(st_store *s, const char *job, uint64_t step, st_verify_result *res);

typedef struct st_store_stats {
    uint64_t steps, consistent_steps;
    uint64_t logical_bytes; /* sum over steps of their files' sizes */
    uint64_t stored_bytes;  /* sum of the job's object sizes: packs, manifests, part records */
    uint64_t packs, manifests, part_records;
} st_store_stats;

/*! Space accounting of a job: logical vs stored bytes, object counts. */
st_err st_store_stats_job(st_store *s, const char *job, st_store_stats *out);

/*! Object requests this st_store made so far, by kind: del counts one-key
 *  DELETEs, del_batch the batched ones (S3 DeleteObjects, many keys each). */
typedef struct st_request_counts {
    uint64_t put, get, stat, list, del, del_batch;
} st_request_counts;
void st_store_requests(const st_store *s, st_request_counts *out);

/*! Names of the jobs in the store (malloc'd array of malloc'd strings;
 *  st_store_free_names()). */
st_err st_store_list_jobs(st_store *s, char ***jobs, size_t *n);
void st_store_free_names(char **names, size_t n);

/* The mount's file system model, for the FUSE daemon (fs/). */
#include "st_vfs.h"

/* ---- retention and garbage collection (docs/GC.md; engine/st_gc.c) ---- */

/*!
 * One GC run over job: retention (policy) deletes steps, part records first;
 * then the time-fenced sweep marks unreferenced packs, and deletes packs
 * whose marker is older than the grace period and that a fresh scan still
 * finds unreferenced; referenced packs that are mostly dead are retired
 * (writers store their live chunks anew; policy->repack_dead). dry_run:
 * nothing is written or deleted, and r lists exactly what a real run at
 * this moment would delete. Deletions go in batches (policy->batch); after
 * each, policy->progress hears r on this thread and *policy->stop can end
 * the run between whole units (r->stopped). r is filled also on error (what
 * was done before it); release it with st_gc_report_free(). Safe while
 * writers on other nodes publish (docs/GC.md).
 */
st_err st_store_gc(st_store *s, const char *job, const st_gc_policy *policy, int dry_run,
                   st_gc_report *r);

/*! Pins (pin 1) or unpins (pin 0) a step: a pinned step is never deleted by
 *  retention. Pinning a step that has no part record, or unpinning one that
 *  is not pinned, gives ST_ERR_NOT_FOUND. */
st_err st_store_pin(st_store *s, const char *job, uint64_t step, int pin);
#endif
