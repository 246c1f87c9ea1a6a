/*
 * st_backend_count — a backend wrapper that counts the object requests made
 * through it, by kind and by result (for `ckptctl stats`, `--json` outputs,
 * the mount's metrics, and tests that check how many GETs a restore issued).
 *
 * A request is counted once, when it returns: wrapped around the retry
 * wrapper it counts what the caller asked for, not each try (the retries
 * are st_backend_retry_count()'s).
 *
 * Threads: counters are atomics; ops run concurrently like the inner ones.
 */
#ifndef ST_BACKEND_COUNT_H
#define ST_BACKEND_COUNT_H

#include <stdatomic.h>
#include <stdint.h>

#include "backend/st_backend.h"

/*
 * The kinds and results below are the two indices of st_backend_counts.n,
 * and of the copy the mount hands out, st_vfs_stats.requests (st_vfs.h,
 * whose sizes st_vfs_stats.c asserts equal to these). So they count from 0
 * without gaps, and a new one goes last, before the count (ST_REQ_KINDS,
 * ST_REQ_RESULTS), where it moves no index a reader of the stats uses.
 */

/* What a request asked the store for. */
typedef enum st_req_kind {
    ST_REQ_PUT,
    ST_REQ_GET,
    ST_REQ_STAT,
    ST_REQ_LIST,
    ST_REQ_DELETE,
    ST_REQ_DELETE_BATCH, /* one request deleting many keys (st_del_many) */
    ST_REQ_KINDS
} st_req_kind;

/* How a request ended: from its st_err (backend errors are classified,
 * st_backend.h). */
typedef enum st_req_result {
    ST_REQ_OK,
    ST_REQ_NOT_FOUND, /* ST_ERR_NOT_FOUND: often an answer, not a failure */
    ST_REQ_TRANSIENT, /* ST_ERR_TRANSIENT: the retries were used up */
    ST_REQ_ERROR,     /* anything else: permanent, corrupt, local I/O, memory */
    ST_REQ_RESULTS
} st_req_result;

typedef struct st_backend_counts {
    atomic_uint_fast64_t n[ST_REQ_KINDS][ST_REQ_RESULTS];
    /* Keys carried by the ST_REQ_DELETE_BATCH requests (S3 DeleteObjects). A
     * backend without a batch request is counted per key as ST_REQ_DELETE. */
    atomic_uint_fast64_t keys_batch_deleted;
} st_backend_counts;

/*! Wraps *b; counts land in *counts (caller-owned, must outlive *b).
 *  st_backend_close(*b) closes the inner backend too. */
st_err st_backend_count_wrap(st_backend **b, st_backend_counts *counts);

/*! As st_backend_count_wrap, but *out does not own inner: closing *out
 *  leaves inner open (for a backend the caller lent, st_vfs_options). */
st_err st_backend_count_borrow(st_backend *inner, st_backend_counts *counts, st_backend **out);

/*! Requests of one kind, whatever their result. */
uint64_t st_backend_counts_of(const st_backend_counts *c, st_req_kind kind);

/*! "put", "get", "stat", "list", "delete", "delete_batch"; "ok", "not_found", "transient",
 *  "error". Static strings; "?" out of range. */
const char *st_req_kind_name(st_req_kind kind);
const char *st_req_result_name(st_req_result result);

#endif
