/*
 * st_store_gc — the facade's retention and pin operations (ckptstore.h):
 * thin over the engine's GC (engine/st_gc.h) and the pin objects
 * (format/st_gcmark.h). Threads: the caller's, like every st_store call.
 */
#include <inttypes.h>

#include "engine/st_catalog.h"
#include "engine/st_gc.h"
#include "facade/st_store_impl.h"
#include "format/st_gcmark.h"

static void store_warn(void *arg, const char *msg)
{
    st_store_warnf(arg, "%s", msg);
}

st_err st_store_gc(st_store *s, const char *job, const st_gc_policy *policy, int dry_run,
                   st_gc_report *r)
{
    return st_gc_run(s->backend, job, policy, dry_run, r, store_warn, s);
}

/* Whether step of job has at least one part record. */
static st_err step_exists(st_store *s, const char *job, uint64_t step, int *found)
{
    st_step_keys *steps;
    size_t n;
    st_err e = st_catalog_list_steps(s->backend, job, &steps, &n);
    if (e)
        return e;
    *found = 0;
    for (size_t i = 0; i < n; i++)
        *found |= steps[i].step == step && steps[i].nnodes > 0;
    st_step_keys_free(steps, n);
    return ST_OK;
}

st_err st_store_pin(st_store *s, const char *job, uint64_t step, int pin)
{
    char key[ST_KEY_MAX];
    uint64_t size;
    int found;
    st_err e = st_key_pin(key, sizeof key, job, step);
    if (e)
        return e;
    if (!pin) {
        e = st_stat(s->backend, key, &size);
        if (e == ST_ERR_NOT_FOUND)
            return st_seterr(ST_ERR_NOT_FOUND, "step %" PRIu64 " of job %s is not pinned", step,
                             job);
        return e ? e : st_del(s->backend, key);
    }
    if ((e = step_exists(s, job, step, &found)))
        return e;
    if (!found)
        return st_seterr(ST_ERR_NOT_FOUND, "job %s has no step %" PRIu64, job, step);
    return st_put(s->backend, key, "", 0);
}
