/*
 * ckpt_mountctl — the mount-control protocol of a local ckptfs mount, once,
 * for libckpt (ckpt_commit, ckpt_wait_durable, ckpt_drain) and ckptctl
 * (commit, wait, status, drain):
 *
 *   MOUNT/.ckptfs/commit  write-only; one line "JOB STEP RANK WORLD\n" per write()
 *   MOUNT/.ckptfs/drain   write-only; "drain\n", a preemption notice
 *   MOUNT/.ckptfs/warmup  write-only; "JOB [STEP]\n", a warm-up request (docs/WARMUP.md)
 *   MOUNT/.ckptfs/status  read-only; one JSON object (docs/MOUNT.md lists the fields)
 *
 * Internal to client/: not installed. Built as an object library that goes
 * into libckpt.so (whose version script, libckpt.map, keeps these symbols
 * local) and into ckptctl. Step numbers are uint64_t everywhere, also inside
 * the JSON (json-c's uint64 calls), so steps above 2^53 compare exactly.
 *
 * Errors: every call returns a ckpt_mountctl_err and, unless it is
 * CKPT_MOUNTCTL_OK, leaves one sentence in the caller's msg buffer (at least
 * CKPT_MOUNTCTL_MSG_CAP bytes). No state outside the arguments: any thread.
 */
#ifndef CKPT_MOUNTCTL_H
#define CKPT_MOUNTCTL_H

#include <json-c/json.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_MOUNTCTL_MSG_CAP 768

/* A job name the commit line can carry (the daemon's ST_JOB_MAX). */
#define CKPT_MOUNTCTL_JOB_MAX 128

/* The largest status file read. One step entry is about 80 bytes, so 16 MiB
 * is some 200,000 steps, far more than a node lists (rotation and GC delete
 * steps), while json-c's tree of a 16 MiB file already takes some 270 MiB
 * and 0.4 s a look on a training node: a broken or hostile file must not make
 * a waiting trainer take more (64 MiB, ckptctl's old cap, took 1.1 GiB). */
#define CKPT_MOUNTCTL_STATUS_MAX (16u << 20)

/* Nesting depth accepted in the status file (it uses 5). */
#define CKPT_MOUNTCTL_MAX_DEPTH 32

/* What went wrong; the callers map these to ckpt_code or an exit code.
 * Numbers are never reused. */
typedef enum ckpt_mountctl_err {
    CKPT_MOUNTCTL_OK = 0,
    CKPT_MOUNTCTL_EINVAL = 1,    /* bad argument, or the daemon refused the commit line */
    CKPT_MOUNTCTL_ENOMOUNT = 2,  /* MOUNT/.ckptfs/FILE does not exist: no ckptfs at MOUNT */
    CKPT_MOUNTCTL_ENOJOB = 3,    /* the daemon has no directory for the committed job */
    CKPT_MOUNTCTL_EIO = 4,       /* any other failure to open, read, write or close */
    CKPT_MOUNTCTL_ECORRUPT = 5,  /* the status file is not the JSON object expected, or too large */
    CKPT_MOUNTCTL_ENOMEM = 6,    /* out of memory */
    CKPT_MOUNTCTL_ETIMEDOUT = 7, /* ckpt_mountctl_wait_durable gave up */
} ckpt_mountctl_err;

/*!
 * 1 when job can be sent in a commit line: 1..CKPT_MOUNTCTL_JOB_MAX bytes,
 * none of them white space, a control character, DEL or '/'. This is the
 * stricter of the two checks libckpt and ckptctl had (ckptctl refused only
 * space, tab and newline); the daemon checks the rest of its rules.
 */
int ckpt_mountctl_job_ok(const char *job);

/*!
 * Commits rank's part of (job, step): writes "JOB STEP RANK WORLD\n" to
 * MOUNT/.ckptfs/commit with one write(). Needs 0 <= rank < world_size <=
 * UINT32_MAX and ckpt_mountctl_job_ok(job), checked before anything is
 * opened. An error from the write is the daemon's answer: EINVAL (a line it
 * refused) or ENOJOB (no such job directory in the mount).
 */
ckpt_mountctl_err ckpt_mountctl_commit(const char *mount, const char *job, uint64_t step,
                                       int64_t rank, int64_t world_size, char *msg);

/*!
 * A preemption notice: writes "drain\n" to MOUNT/.ckptfs/drain. The daemon
 * uploads each job's newest complete step first from then on
 * (docs/SHUTDOWN.md) and keeps serving. ENOMOUNT: no ckptfs at MOUNT, or
 * one too old to have the file.
 */
ckpt_mountctl_err ckpt_mountctl_drain(const char *mount, char *msg);

/*!
 * A warm-up request: writes "JOB STEP\n" (step UINT64_MAX: "JOB\n", the
 * job's newest step) to MOUNT/.ckptfs/warmup. The daemon fetches the step's
 * files in the background; the status file's "warmup" object follows the
 * request. EINVAL: a job name it refused; EIO: e.g. too many requests under
 * way (EBUSY).
 */
ckpt_mountctl_err ckpt_mountctl_warmup(const char *mount, const char *job, uint64_t step,
                                       char *msg);

/*!
 * Reads MOUNT/.ckptfs/status to its end (a FUSE file's st_size may be stale)
 * into *text: malloc'd, NUL-terminated, *len bytes without the NUL; the
 * caller frees it. ECORRUPT if it is larger than CKPT_MOUNTCTL_STATUS_MAX.
 */
ckpt_mountctl_err ckpt_mountctl_status_read(const char *mount, char **text, size_t *len, char *msg);

/*!
 * Parses a status document (text, len bytes; what names it goes into msg):
 * strict JSON (json-c's JSON_TOKENER_STRICT: no trailing data, no leading
 * zeros, no trailing commas), nesting at most CKPT_MOUNTCTL_MAX_DEPTH, the
 * root an object. *doc is the caller's, to release with json_object_put().
 */
ckpt_mountctl_err ckpt_mountctl_status_parse(const char *text, size_t len, const char *what,
                                             json_object **doc, char *msg);

/*! ckpt_mountctl_status_read + ckpt_mountctl_status_parse. */
ckpt_mountctl_err ckpt_mountctl_status_load(const char *mount, json_object **doc, char *msg);

/*!
 * Member key of obj as a step-like number: 0 with *v set when it is a JSON
 * integer in 0..2^64-1; -1 when obj is not an object, key is absent, or its
 * value is negative, fractional, a string, ... (json-c 0.16 clamps integers
 * above 2^64-1 to 2^64-1; the daemon writes none).
 */
int ckpt_mountctl_get_u64(const json_object *obj, const char *key, uint64_t *v);

/*! Member key of obj as a string; "" when absent or not a string. Valid as
 *  long as obj is. */
const char *ckpt_mountctl_get_str(const json_object *obj, const char *key);

/*!
 * The state of (job, step) in a parsed status document doc: "durable",
 * "uploading", ... into state[cap] (truncated to fit; "" when no element of
 * "steps" has that job and step), and the daemon's last_error into
 * last_error[err_cap] ("" when none). Returns 0, or -1 when doc has no
 * "steps" array. Pure: no I/O, doc is only read.
 */
int ckpt_mountctl_step_state(const json_object *doc, const char *job, uint64_t step, char *state,
                             size_t cap, char *last_error, size_t err_cap);

/*!
 * Waits until the mount lists (job, step) as durable: reads the status file
 * at once, then every 50 ms, backing off to 500 ms. timeout_s < 0: no limit;
 * 0: one look. ETIMEDOUT's message gives the last state seen and the
 * daemon's last_error. A status file that cannot be read or parsed ends the
 * wait with that error.
 */
ckpt_mountctl_err ckpt_mountctl_wait_durable(const char *mount, const char *job, uint64_t step,
                                             double timeout_s, char *msg);

#endif
