/*
 * st_parallel — run a few independent calls at once and wait for all.
 *
 * For requests that do not depend on each other's answers, so that their
 * round trips overlap instead of adding up: the first round of a publish
 * (docs/PROTOCOL.md, "Write order"). One thread per call beyond the first,
 * which runs on the caller's; a thread that cannot be started runs its call
 * on the caller's too, after the others are started, so the result never
 * depends on whether threads were available.
 *
 * Errors: each call's st_err and st_errmsg() are kept with it (the detail
 * buffer is per thread); st_parallel_run returns the first failure in array
 * order and sets st_errmsg() to its message on the caller's thread.
 * Threads: the calls must be safe to run at once (each its own data, or
 * locked); the backend's ops are (docs/BACKENDS.md). The caller's
 * thread-local state does not follow a call onto its thread: a call that
 * needs it sets it itself (the mount's request bound, vfs_bound_set, in
 * mount/st_vfs.c first_look).
 */
#ifndef ST_PARALLEL_H
#define ST_PARALLEL_H

#include <stddef.h>

#include "st_error.h"

/* At most this many calls per round: a round is a handful of requests. */
#define ST_PARALLEL_MAX 8

typedef struct st_parallel_call {
    st_err (*fn)(void *arg);
    void *arg;
    /* out */
    st_err err;
    char msg[512]; /* st_errmsg() of a failed call */
} st_parallel_call;

/*! Runs calls[0..n) at once (n <= ST_PARALLEL_MAX) and returns when every
 *  one has returned: ST_OK, or the first failed call's error (its message
 *  in st_errmsg()). */
st_err st_parallel_run(st_parallel_call *calls, size_t n);

#endif
