/*
 * st_backend_count — a backend wrapper that counts the object requests made
 * through it, by kind (for `ckptctl stats`, `--json` outputs, and tests that
 * check how many GETs a restore issued).
 *
 * Threads: counters are atomics; ops run concurrently like the inner ones.
 */
#ifndef ST_BACKEND_COUNT_H
#define ST_BACKEND_COUNT_H

#include <stdatomic.h>

#include "backend/st_backend.h"

typedef struct st_backend_counts {
    atomic_uint_fast64_t put, get, stat, list, del;
    /* Batched deletes: one per request that carried many keys (S3
     * DeleteObjects); keys_batch_deleted counts the keys they carried. A
     * backend without a batch request is counted per key in del. */
    atomic_uint_fast64_t delete_batch, keys_batch_deleted;
} st_backend_counts;

/*! Wraps *b; counts land in *counts (caller-owned, must outlive *b). */
st_err st_backend_count_wrap(st_backend **b, st_backend_counts *counts);

#endif
