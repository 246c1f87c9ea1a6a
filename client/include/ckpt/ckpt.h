/*
 * ckpt.h — libckpt, the public C API of ckptfs. This header is the manual.
 *
 * What it is for: after a preemption, a training script (or a tool) asks the
 * object store which checkpoint step is complete on every rank and durable,
 * and restores it, verified, into a directory. On a running node it tells the
 * local ckptfs mount that a rank has finished a step (ckpt_commit) and waits
 * until that step is durable in the store (ckpt_wait_durable).
 *
 *     ckpt_store *st;
 *     uint64_t step;
 *     if (ckpt_open("file:///srv/ckpt", NULL, &st) == CKPT_OK) {
 *         if (ckpt_latest(st, "llama-ft", &step) == CKPT_OK)
 *             ckpt_restore(st, "llama-ft", step, NULL, "/tmp/resume", NULL);
 *         else
 *             fprintf(stderr, "%s\n", ckpt_errmsg(st));
 *         ckpt_close(st);
 *     }
 *
 * Words (docs/CONSISTENCY.md has the protocol):
 *   job        one training run's namespace inside a store ("llama-ft").
 *   step       one checkpoint of a job, numbered by the trainer.
 *   complete   the trainer finished writing the step (a framework marker, or
 *              ckpt_commit() on every rank).
 *   durable    every byte of it is in the object store.
 *   consistent complete on every rank that was meant to write it *and* durable:
 *              the only steps that ckpt_latest() answers and ckpt_restore()
 *              restores.
 *
 * Conventions for every function below:
 *   - Functions that can fail return a ckpt_code: CKPT_OK (0) or an error. The
 *     numbers are never reused for another meaning. ckpt_strerror(code) gives
 *     a fixed sentence for a code; ckpt_errmsg() gives the detail of the last
 *     failure (which file, key, step, and why).
 *   - Every pointer returned through an out-parameter is owned by the caller
 *     and released with the ckpt_free_* function named in its description.
 *     Free functions accept NULL.
 *   - Out-parameters are written only on CKPT_OK unless said otherwise.
 *   - Strings are NUL-terminated UTF-8 (in practice, job names are ASCII).
 *
 * Threads: a ckpt_store handle may be used by one thread at a time (use one
 * handle per thread, or your own lock); distinct handles are independent.
 * Functions without a handle (ckpt_strerror, ckpt_version*, ckpt_commit,
 * ckpt_wait_durable, ckpt_open) are safe to call from any thread.
 *
 * ABI: the shared library libckpt.so.MAJOR exports only the ckpt_* symbols of
 * this header. Structs in this header change only with a new major version
 * (a new soname); minor versions only add functions.
 *
 * Linking: `pkg-config --cflags --libs ckpt`, or -lckpt.
 */
#ifndef CKPT_CKPT_H
#define CKPT_CKPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ version */

/*! The version of this header. The library's own version is ckpt_version();
 *  the two share the major version whenever the program loaded at all. */
#define CKPT_VERSION_MAJOR 0
#define CKPT_VERSION_MINOR 1
#define CKPT_VERSION_PATCH 0
/*! MAJOR*10000 + MINOR*100 + PATCH, e.g. 100 for 0.1.0. */
#define CKPT_VERSION_NUMBER                                                                        \
    (CKPT_VERSION_MAJOR * 10000 + CKPT_VERSION_MINOR * 100 + CKPT_VERSION_PATCH)

/*! The version of the library actually loaded, as CKPT_VERSION_NUMBER
 *  (compare with the header's to detect a mismatch at run time). */
unsigned ckpt_version(void);

/*! The same as a string, "MAJOR.MINOR.PATCH". Static storage; never NULL. */
const char *ckpt_version_string(void);

/* ------------------------------------------------------------------- errors */

/*! Result codes. 0 is success; numbers are never reused. */
typedef enum ckpt_code {
    CKPT_OK = 0,
    /*! The job, the step, or a file of the store does not exist; or the
     *  step exists but is not consistent (not restorable: the message says
     *  why, e.g. "missing ranks 2,3"); or ckpt_latest() found no consistent
     *  step; or MOUNTPOINT/.ckptfs/ is missing (not a ckptfs mount). */
    CKPT_ENOTFOUND = 1,
    /*! A bad argument: NULL where a value is required, a malformed store URL
     *  (only file:///abs/dir and s3://bucket/prefix are known), an invalid
     *  job name, rank >= world_size; or the mount refused a commit line. */
    CKPT_EINVAL = 2,
    /*! Local I/O failed: the destination directory, the local state
     *  directory, or the mount's control files (errno text in the message). */
    CKPT_EIO = 3,
    /*! Data read from the store failed verification (a chunk checksum or a
     *  whole-file digest) or does not parse. The message names the file and
     *  the step. Nothing unverified is ever left at its final name. */
    CKPT_ECORRUPT = 4,
    /*! The object store is unreachable or refuses the request: bad
     *  credentials, no such bucket, or still failing after the retries. */
    CKPT_ESTORE = 5,
    /*! Out of memory. */
    CKPT_ENOMEM = 6,
    /*! ckpt_wait_durable(): the step did not become durable in time. */
    CKPT_ETIMEDOUT = 7,
    /*! The target already exists. */
    CKPT_EEXIST = 8,
    /*! The local disk (destination or state directory) is full. */
    CKPT_ENOSPC = 9,
    /*! The store holds a format version or feature this library does not
     *  support (a newer writer): upgrade libckpt. */
    CKPT_EUNSUPPORTED = 10,
} ckpt_code;

/*! A short fixed sentence for a code ("not found"). Static storage; never
 *  NULL (an unknown code gives "unknown error code"). Thread-safe. */
const char *ckpt_strerror(int code);

typedef struct ckpt_store ckpt_store;

/*!
 * The detail of the last failed call.
 *
 * store != NULL: the last failed call made with this handle ("" if none yet).
 * The pointer stays valid until the next call with the handle or its close.
 *
 * store == NULL: the last failed call *on this thread* that has no handle:
 * ckpt_open(), ckpt_commit(), ckpt_wait_durable(). Valid until this thread's
 * next such call.
 *
 * Never NULL.
 */
const char *ckpt_errmsg(const ckpt_store *store);

/* -------------------------------------------------------------- open, close */

/*! Options of ckpt_open(). Zero-initialise; NULL fields take the defaults. */
typedef struct ckpt_options {
    /*! Local state directory (the dedup index of writers; readers use it
     *  only lightly). NULL: $XDG_CACHE_HOME/ckptfs or ~/.cache/ckptfs. */
    const char *state_dir;
    /*! This process's node name in the store. NULL: from the host name.
     *  Only matters to writers; libckpt itself only reads the store. */
    const char *node;
    /*! Called, on the thread of the call that hit it, for problems that do
     *  not fail the call (a step whose records cannot be read is left out of
     *  a listing). msg is valid only during the callback. May be NULL. */
    void (*warn)(void *arg, const char *msg);
    void *warn_arg;
    /*! s3:// stores (docs/S3.md). Each NULL: the environment, else the
     *  default. s3_endpoint: "http[s]://host[:port]" ($CKPT_S3_ENDPOINT,
     *  else AWS's endpoint for the region); s3_signature: "v4" (default) or
     *  "v2" ($CKPT_S3_SIGNATURE); s3_region ($AWS_REGION,
     *  $AWS_DEFAULT_REGION, the profile's region, else "us-east-1");
     *  s3_addressing: "path" or "virtual" ($CKPT_S3_ADDRESSING; default:
     *  virtual for AWS endpoints, path otherwise); s3_ca_file: a PEM CA
     *  bundle for https ($CKPT_S3_CA_FILE, else the system store). */
    const char *s3_endpoint;
    const char *s3_signature;
    const char *s3_region;
    const char *s3_addressing;
    const char *s3_ca_file;
    /*! Client-side encryption (docs/ENCRYPTION.md): the key file (mode 0600,
     *  `ckptctl keygen`) that opens an encrypted store's steps. NULL:
     *  $CKPT_ENCRYPTION_KEY_FILE, else none. A store encrypted and no key,
     *  a key and a plain store with steps, or a step sealed with a key the
     *  file does not hold: CKPT_EINVAL naming what is wrong; a sealed
     *  object that fails authentication: CKPT_ECORRUPT. Only the file's
     *  name is copied; the keys stay in the store handle's locked memory. */
    const char *encryption_key_file;
} ckpt_options;

/*!
 * Opens a store.
 *
 * store_url: "file:///abs/dir" (a directory, also right for NFS/Lustre) or
 *   "s3://bucket/prefix" (credentials from AWS_ACCESS_KEY_ID /
 *   AWS_SECRET_ACCESS_KEY, endpoint options as in docs/BACKENDS.md). NULL or
 *   "": $CKPT_STORE if set, else file://$XDG_DATA_HOME/ckptfs/store.
 * opts: NULL for the defaults. Copied: need not outlive the call.
 * out: receives the handle; release with ckpt_close().
 *
 * Returns CKPT_OK, CKPT_EINVAL (malformed URL), CKPT_ESTORE (unreachable),
 * CKPT_EIO (state directory), CKPT_ENOMEM. On failure *out is NULL and the
 * detail is in ckpt_errmsg(NULL).
 */
ckpt_code ckpt_open(const char *store_url, const ckpt_options *opts, ckpt_store **out);

/*! Closes a handle and frees everything it owns. NULL is a no-op. */
void ckpt_close(ckpt_store *store);

/* ----------------------------------------------------------------- listings */

/*!
 * The names of the jobs in the store, sorted.
 * *jobs receives a malloc'd array of *n strings; release with
 * ckpt_free_jobs(*jobs, *n). An empty store gives *n = 0 and CKPT_OK.
 */
ckpt_code ckpt_list_jobs(ckpt_store *store, char ***jobs, size_t *n);

/*! Frees what ckpt_list_jobs() returned. NULL is a no-op. */
void ckpt_free_jobs(char **jobs, size_t n);

/*! One step as readers see it. */
typedef struct ckpt_step {
    uint64_t step;
    int64_t created_ns;  /*!< when its newest part record was written (ns since the epoch) */
    uint64_t files;      /*!< files in the step, over all nodes */
    uint64_t bytes;      /*!< logical bytes of those files */
    uint64_t nodes;      /*!< nodes that published a part of it */
    int consistent;      /*!< 1: complete on every rank and durable; restorable */
    int complete;        /*!< 1: some node saw it complete */
    uint32_t world_size; /*!< 0: unknown */
    uint32_t ranks;      /*!< distinct writer ranks among its files */
    /*! "" when consistent, else why not ("missing ranks 2,3",
     *  "missing __2_0.distcp", "not complete"). */
    char why[160];
} ckpt_step;

/*!
 * Every step of job that has at least one durable part, consistent or not,
 * in ascending step order. A step that no node has published yet is not
 * listed (it is not in the store).
 *
 * *steps receives a malloc'd array of *n entries; release with
 * ckpt_free_steps(). An unknown job gives *n = 0 and CKPT_OK (a job exists
 * once it has steps). Steps whose records cannot be read are reported to the
 * warn callback and left out.
 */
ckpt_code ckpt_list_steps(ckpt_store *store, const char *job, ckpt_step **steps, size_t *n);

/*! Frees what ckpt_list_steps() returned. NULL is a no-op. */
void ckpt_free_steps(ckpt_step *steps);

/*!
 * The latest consistent step of job: the newest step complete on every rank
 * and durable. Returns CKPT_ENOTFOUND when the job has none (the message
 * says so, and why the newest step is not consistent when there is one).
 */
ckpt_code ckpt_latest(ckpt_store *store, const char *job, uint64_t *step);

/* ------------------------------------------------------------------ restore */

/*! Options of ckpt_restore(). Initialise with ckpt_restore_options_init():
 *  a zeroed struct would mean "rank 0 only". */
typedef struct ckpt_restore_options {
    /*! -1: every file of the step; R >= 0: only the files written by rank R
     *  (only their objects are fetched). */
    int rank;
    /*! 1: ignore the step argument, restore the latest consistent step. */
    int latest;
    /*! With latest: if that step fails verification, fail (CKPT_ECORRUPT)
     *  instead of falling back to the previous consistent step. */
    int no_fallback;
    /*! Parallel downloads; 0: 4. */
    unsigned threads;
    /*! Called as bytes arrive, from the restoring threads, one call at a
     *  time (serialised): it must not call libckpt with the same handle.
     *  total_bytes is the size of what is being restored. May be NULL. */
    void (*progress)(void *arg, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_arg;
} ckpt_restore_options;

/*! Sets the defaults: every rank, the given step, fallback on, 4 threads,
 *  no progress callback. */
void ckpt_restore_options_init(ckpt_restore_options *opts);

/*! What a restore did. */
typedef struct ckpt_restore_result {
    uint64_t step;        /*!< the step restored (useful with latest) */
    uint64_t files;       /*!< files written into dest_dir */
    uint64_t bytes;       /*!< their bytes */
    uint64_t gets;        /*!< object GETs issued */
    int fell_back;        /*!< 1: the latest step failed verification; an older one was restored */
    uint64_t failed_step; /*!< when fell_back: the step that failed */
    char failure[256];    /*!< when fell_back: why it failed */
} ckpt_restore_result;

/*!
 * Restores a consistent step of job into dest_dir (created if missing;
 * existing files of the same names are replaced, others left alone).
 *
 * Every chunk and every file is verified; each file is written under a
 * temporary name, fsynced and only then renamed to its real name, so a
 * failed restore never leaves a partial file at a real name.
 *
 * step: the step to restore; ignored when opts->latest.
 * opts: NULL for every file of `step`, 4 threads, fallback on.
 * res: filled on CKPT_OK (may be NULL).
 *
 * Returns CKPT_OK, CKPT_ENOTFOUND (no such step, or not consistent: the
 * message says why; with latest: no consistent step), CKPT_ECORRUPT (failed
 * verification; with latest and fallback, only when no older step could be
 * restored either), CKPT_ESTORE, CKPT_EIO, CKPT_ENOSPC, CKPT_EINVAL,
 * CKPT_ENOMEM.
 */
ckpt_code ckpt_restore(ckpt_store *store, const char *job, uint64_t step,
                       const ckpt_restore_options *opts, const char *dest_dir,
                       ckpt_restore_result *res);

/*! What a verification read. */
typedef struct ckpt_verify_result {
    uint64_t files, chunks, bytes;
    uint64_t bad_files; /*!< files with a chunk or digest that failed */
} ckpt_verify_result;

/*!
 * Reads every chunk of a step from the store and checks every chunk checksum
 * and whole-file digest; writes nothing locally. res (may be NULL) is filled
 * on CKPT_OK and on CKPT_ECORRUPT.
 * Returns CKPT_OK, CKPT_ECORRUPT (the message names the first bad file),
 * CKPT_ENOTFOUND, CKPT_ESTORE, CKPT_ENOMEM.
 */
ckpt_code ckpt_verify(ckpt_store *store, const char *job, uint64_t step, ckpt_verify_result *res);

/* -------------------------------------------------------------- accounting */

/*! Space accounting of one job. */
typedef struct ckpt_stats {
    uint64_t steps, consistent_steps;
    uint64_t logical_bytes; /*!< sum over steps of their files' sizes */
    uint64_t stored_bytes;  /*!< sum of the job's pack object sizes */
    uint64_t packs, manifests, part_records;
} ckpt_stats;

/*! Fills *out with the accounting of job (logical / stored is the dedup
 *  and compression ratio). */
ckpt_code ckpt_stats_job(ckpt_store *store, const char *job, ckpt_stats *out);

/*! Object requests the handle made so far, by kind. */
typedef struct ckpt_request_counts {
    uint64_t put, get, stat, list, del;
} ckpt_request_counts;

/*! Fills *out with the handle's request counters. Cannot fail. */
void ckpt_requests(const ckpt_store *store, ckpt_request_counts *out);

/* ---------------------------------------------- through the local mount */

/*!
 * Commits step `step` of `job` for one rank, through the local ckptfs mount
 * at `mountpoint`: "rank `rank` of `world_size` has written everything it
 * will write for this step". Once every rank 0..world_size-1 has committed
 * (on whichever nodes) and their files are durable, the step is consistent
 * (docs/CONSISTENCY.md, rule 1). Call it after the rank's files are closed.
 *
 * It writes the line "JOB STEP RANK WORLD\n" with one write() to
 * MOUNTPOINT/.ckptfs/commit. It returns once the daemon has recorded the
 * commit locally; durability follows in the background (ckpt_wait_durable).
 *
 * Returns CKPT_OK; CKPT_EINVAL (job empty or containing white space or '/',
 * world_size < 1, rank outside 0..world_size-1, or the daemon refused the
 * line: unknown job, bad step); CKPT_ENOTFOUND (mountpoint is not a ckptfs
 * mount, or its daemon is too old to take commits); CKPT_EIO (other errors
 * of the mount). Detail in ckpt_errmsg(NULL). Thread-safe.
 */
ckpt_code ckpt_commit(const char *mountpoint, const char *job, uint64_t step, int rank,
                      int world_size);

/*!
 * Waits until step `step` of `job` is durable as seen by the local mount:
 * polls MOUNTPOINT/.ckptfs/status (JSON, docs/MOUNT.md) until that step's
 * "state" is "durable". Polls every 50 ms at first, backing off to 500 ms.
 *
 * timeout_s: seconds to wait at most; 0 checks once; < 0 waits without limit.
 *
 * Returns CKPT_OK once durable; CKPT_ETIMEDOUT (the message gives the last
 * state seen and the daemon's last_error); CKPT_ENOTFOUND (no status file:
 * not a ckptfs mount); CKPT_EIO (status unreadable); CKPT_ECORRUPT (status
 * is not the JSON this library understands); CKPT_EINVAL. Detail in
 * ckpt_errmsg(NULL). Thread-safe.
 *
 * The status file is read with a small bounded JSON parser of libckpt's own
 * (no JSON library dependency): at most 16 MiB, nesting depth 32.
 */
ckpt_code ckpt_wait_durable(const char *mountpoint, const char *job, uint64_t step,
                            double timeout_s);

/*!
 * A preemption notice to the local ckptfs mount at `mountpoint`: from now on
 * its uploader takes each job's newest complete step first, then the rest
 * (docs/SHUTDOWN.md); the mount keeps serving. Call it from the handler of
 * the platform's notice (a spot VM's, a scheduler's), then
 * ckpt_wait_durable() on the newest step. One-way; calling it again does
 * nothing more.
 *
 * It writes "drain\n" to MOUNTPOINT/.ckptfs/drain. Returns CKPT_OK;
 * CKPT_ENOTFOUND (not a ckptfs mount, or its daemon predates drain);
 * CKPT_EINVAL (empty mountpoint); CKPT_EIO. Detail in ckpt_errmsg(NULL).
 * Thread-safe.
 */
ckpt_code ckpt_drain(const char *mountpoint);

#ifdef __cplusplus
}
#endif

#endif
