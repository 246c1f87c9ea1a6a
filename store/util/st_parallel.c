/*
 * st_parallel — run a few independent calls at once. See st_parallel.h.
 */
#include "util/st_parallel.h"

#include <pthread.h>
#include <stdio.h>

static void run_one(st_parallel_call *c)
{
    c->err = c->fn(c->arg);
    if (c->err)
        snprintf(c->msg, sizeof c->msg, "%s", st_errmsg());
}

static void *call_main(void *arg)
{
    run_one(arg);
    return NULL;
}

st_err st_parallel_run(st_parallel_call *calls, size_t n)
{
    if (n > ST_PARALLEL_MAX)
        return st_seterr(ST_ERR_INVALID, "st_parallel_run: %zu calls, at most %d", n,
                         ST_PARALLEL_MAX);
    pthread_t threads[ST_PARALLEL_MAX];
    int started[ST_PARALLEL_MAX] = {0};
    for (size_t i = 1; i < n; i++)
        started[i] = pthread_create(&threads[i], NULL, call_main, &calls[i]) == 0;
    for (size_t i = 0; i < n; i++)
        if (!started[i])
            run_one(&calls[i]); /* calls[0], and any whose thread did not start */
    for (size_t i = 1; i < n; i++)
        if (started[i])
            pthread_join(threads[i], NULL);
    for (size_t i = 0; i < n; i++)
        if (calls[i].err)
            return st_seterr(calls[i].err, "%s", calls[i].msg);
    return ST_OK;
}
