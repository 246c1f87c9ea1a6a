/*
 * st_vfs_health — what the mount knows of the store's health, and the
 * bounds on how long the mount waits for it (docs/MOUNT_MODEL.md, "The store is
 * down").
 *
 * The mount opens its backend with an observer (st_backend_observer) whose
 * callbacks live here:
 *   on_try       every try of every request: a transient failure marks the
 *                store unreachable at once (logged once per outage, shown in
 *                the status's last_error); any answer from the store (a
 *                success, a not-found, a refusal) ends the outage.
 *   should_stop  a request stops waiting when the mount closes past its drain
 *                (vfs_health_stop_all), or when the calling thread's bound
 *                (vfs_bound_set) has passed: a hard deadline (the mount's
 *                start), or an outage budget (a read gives up once the store
 *                has been unreachable that long).
 *   log          what the backend says besides results (the S3 probe's
 *                answer, CKPT_RETRY_TRACE's retries): into the mount's log.
 * A try that failed because we stopped it says nothing about the store and
 * is not counted.
 *
 * Threads: the callbacks run on whichever thread calls the store (uploader,
 * refresher, GC, FUSE workers fetching). v->lock may or may not be held
 * elsewhere, so none of this takes it: the state is guarded by
 * v->health.lock (a leaf lock: nothing else is taken under it but the log
 * sink's), with `down`, `since_ns` and `stop_all` atomic for the hot path.
 * A thread's bound is thread-local: it is set and restored by the code that
 * calls the store on that thread.
 */
#include "mount/st_vfs_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <json-c/json.h>

#include "util/st_fsutil.h"

static _Thread_local vfs_bound thread_bound;

vfs_bound vfs_bound_set(vfs_bound b)
{
    vfs_bound prev = thread_bound;
    thread_bound = b;
    return prev;
}

vfs_bound vfs_bound_get(void)
{
    return thread_bound;
}

static int health_should_stop(void *arg)
{
    st_vfs *v = arg;
    if (atomic_load_explicit(&v->health.stop_all, memory_order_relaxed))
        return 1;
    vfs_bound b = thread_bound;
    if (!b.stop_at_ns && !b.outage_budget_ns)
        return 0;
    int64_t now = st_mono_ns();
    if (b.stop_at_ns && now >= b.stop_at_ns)
        return 1;
    if (b.outage_budget_ns && atomic_load_explicit(&v->health.down, memory_order_relaxed)) {
        int64_t since = atomic_load_explicit(&v->health.since_ns, memory_order_relaxed);
        return now - since >= b.outage_budget_ns;
    }
    return 0;
}

static void health_log(void *arg, const char *msg)
{
    vfs_log(arg, 0, "%s", msg);
}

static void health_on_try(void *arg, st_err e, unsigned try_no)
{
    (void)try_no;
    st_vfs *v = arg;
    vhealth *h = &v->health;
    if (e == ST_ERR_NOMEM || e == ST_ERR_INVALID || e == ST_ERR_UNSUPPORTED)
        return; /* our side: the store was not asked (a create it lacks), or not heard */
    int failed = e == ST_ERR_TRANSIENT;
    if (!failed && !atomic_load_explicit(&h->down, memory_order_relaxed))
        return; /* the common case: a healthy store answered */
    if (failed && health_should_stop(v))
        return; /* we stopped it: no news of the store */
    pthread_mutex_lock(&h->lock);
    int64_t now = st_mono_ns();
    if (failed) {
        h->failed_tries++;
        snprintf(h->error, sizeof h->error, "%s", st_errmsg());
        if (!atomic_load_explicit(&h->down, memory_order_relaxed)) {
            atomic_store_explicit(&h->since_ns, now, memory_order_relaxed);
            atomic_store_explicit(&h->down, 1, memory_order_relaxed);
            h->outages++;
            vfs_log(v, 2, VFS_UNREACHABLE ": %s; uploads wait in staging and are retried",
                    h->error);
        }
    } else if (atomic_load_explicit(&h->down, memory_order_relaxed)) {
        int64_t since = atomic_load_explicit(&h->since_ns, memory_order_relaxed);
        atomic_store_explicit(&h->down, 0, memory_order_relaxed);
        vfs_log(v, 0, "the store answers again after %.1f s unreachable (%" PRIu64 " failed tries)",
                (double)(now - since) / 1e9, h->failed_tries);
        h->failed_tries = 0;
    }
    pthread_mutex_unlock(&h->lock);
}

void vfs_health_init(st_vfs *v)
{
    pthread_mutex_init(&v->health.lock, NULL);
    atomic_init(&v->health.down, 0);
    atomic_init(&v->health.since_ns, 0);
    atomic_init(&v->health.stop_all, 0);
    v->health.observer = (st_backend_observer){
        .on_try = health_on_try, .should_stop = health_should_stop, .log = health_log, .arg = v};
}

void vfs_health_destroy(st_vfs *v)
{
    pthread_mutex_destroy(&v->health.lock);
}

void vfs_health_stop_all(st_vfs *v)
{
    atomic_store_explicit(&v->health.stop_all, 1, memory_order_relaxed);
}

int vfs_health_stopping(st_vfs *v)
{
    return atomic_load_explicit(&v->health.stop_all, memory_order_relaxed);
}

int vfs_health_down(st_vfs *v)
{
    return atomic_load_explicit(&v->health.down, memory_order_relaxed);
}

int vfs_health_status(st_vfs *v, struct json_object *root, char *last_error, size_t cap)
{
    vhealth *h = &v->health;
    pthread_mutex_lock(&h->lock);
    int down = atomic_load_explicit(&h->down, memory_order_relaxed);
    double secs =
        down ? (double)(st_mono_ns() - atomic_load_explicit(&h->since_ns, memory_order_relaxed)) /
                   1e9
             : 0.0;
    if (down && cap)
        snprintf(last_error, cap, VFS_UNREACHABLE " (%" PRIu64 " failed tries in %.1f s): %s",
                 h->failed_tries, secs, h->error);
    json_object *o = json_object_new_object();
    int bad = vfs_json_add(o, "reachable", json_object_new_boolean(!down));
    bad |= vfs_json_add(o, "down_seconds", vfs_json_fixed(secs, 1));
    bad |= vfs_json_add(o, "failed_tries", json_object_new_uint64(down ? h->failed_tries : 0));
    bad |= vfs_json_add(o, "outages", json_object_new_uint64(h->outages));
    bad |= vfs_json_add(o, "error", json_object_new_string(down ? h->error : ""));
    pthread_mutex_unlock(&h->lock);
    bad |= vfs_json_add(root, "store", o);
    return bad;
}
