/*
 * st_vfs_gc — the daemon's background GC (docs/MOUNT.md, "Background GC"):
 * with --gc-* options, a thread that every gc_interval_seconds runs
 * st_gc_run (docs/GC.md: retention, then the time-fenced sweep) over every
 * job of the store, with the mount's policy.
 *
 * It never runs in a FUSE request or on the uploader, so a save never waits
 * for it. It shares v->backend with the uploader and the refresher (backends
 * are thread-safe, st_backend.h). Steps a run deletes leave this mount's
 * namespace at once (vfs_forget_step). v->gc_stop, set at close, ends a run
 * after its current batch of deletions.
 *
 * Threads: the GC thread; v->gc_status is guarded by v->lock, which is held
 * only to publish results, never across a run.
 */
#include "mount/st_vfs_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "util/st_fsutil.h"
#include "engine/st_gc.h"
#include "engine/st_catalog.h"

/* What one run over every job did. */
typedef struct gc_pass {
    uint64_t steps, objects, bytes;
    size_t jobs;
    char error[256]; /* the last job's error, "" if none */
} gc_pass;

static void gc_warn(void *arg, const char *msg)
{
    vfs_log(arg, 1, "%s", msg);
}

/* The steps a run deleted leave the namespace (lock taken here). */
static void forget_deleted(st_vfs *v, const char *job, const st_gc_report *r)
{
    pthread_mutex_lock(&v->lock);
    vjob *j = vfs_job(v, job, 0);
    for (uint64_t i = 0; j && i < r->steps_deleted; i++)
        vfs_forget_step(v, j, r->deleted_steps[i]);
    pthread_mutex_unlock(&v->lock);
}

/* One GC run over every job of the store (no lock held). */
static void gc_pass_run(st_vfs *v, gc_pass *p)
{
    st_gc_policy policy = {0};
    policy.keep_last = v->opts.gc_keep_last;
    policy.keep_every = v->opts.gc_keep_every;
    policy.grace_ns = (int64_t)(v->opts.gc_grace_seconds * 1e9);
    policy.stop = &v->gc_stop;
    char **jobs = NULL;
    size_t njobs = 0;
    memset(p, 0, sizeof *p);
    st_err e = st_catalog_list_jobs(v->backend, &jobs, &njobs);
    if (e)
        snprintf(p->error, sizeof p->error, "listing jobs: %s", st_errmsg());
    for (size_t i = 0; !e && i < njobs && !v->gc_stop; i++) {
        st_gc_report r;
        st_err je = st_gc_run(v->backend, jobs[i], &policy, 0, &r, gc_warn, v);
        if (je)
            snprintf(p->error, sizeof p->error, "job %s: %s", jobs[i], st_errmsg());
        p->jobs++;
        p->steps += r.steps_deleted;
        p->objects += r.objects_deleted;
        p->bytes += r.bytes_freed;
        if (r.steps_deleted)
            forget_deleted(v, jobs[i], &r);
        if (r.sweep_skipped)
            vfs_log(v, 1, "gc: job %s: sweep skipped: %s", jobs[i], r.why);
        st_gc_report_free(&r);
    }
    st_catalog_free_names(jobs, njobs);
}

void *vfs_gc_main(void *arg)
{
    st_vfs *v = arg;
    const int64_t interval_ns = (int64_t)(v->opts.gc_interval_seconds * 1e9);
    pthread_mutex_lock(&v->lock);
    for (;;) {
        int64_t until = st_mono_ns() + interval_ns;
        while (!v->stopping && st_mono_ns() < until)
            vfs_timedwait(v, until);
        if (v->stopping)
            break;
        vgc_status *g = &v->gc_status;
        g->running = 1;
        g->last_start_ns = st_now_ns();
        pthread_mutex_unlock(&v->lock);

        int64_t t0 = st_mono_ns();
        gc_pass p;
        gc_pass_run(v, &p);
        int64_t took = st_mono_ns() - t0;

        pthread_mutex_lock(&v->lock);
        g->running = 0;
        g->runs++;
        g->last_duration_ns = took;
        g->last_steps = p.steps;
        g->last_objects = p.objects;
        g->last_bytes = p.bytes;
        g->total_steps += p.steps;
        g->total_objects += p.objects;
        g->total_bytes += p.bytes;
        snprintf(g->last_error, sizeof g->last_error, "%s", p.error);
        if (p.error[0]) {
            vfs_error_seen(v);
            vfs_log(v, 2, "gc: %s", p.error);
        }
        if (p.objects)
            vfs_log(v, 0,
                    "gc: %zu jobs: deleted %" PRIu64 " steps, %" PRIu64 " objects, %" PRIu64
                    " bytes in %.1f s",
                    p.jobs, p.steps, p.objects, p.bytes, (double)took / 1e9);
    }
    pthread_mutex_unlock(&v->lock);
    return NULL;
}

int vfs_gc_status(st_vfs *v, json_object *root)
{
    const vgc_status *g = &v->gc_status;
    json_object *o = json_object_new_object();
    int bad = vfs_json_add(o, "enabled", json_object_new_boolean(v->opts.gc_enabled));
    if (!v->opts.gc_enabled)
        return bad | vfs_json_add(root, "gc", o);
    bad |= vfs_json_add(o, "keep_last", json_object_new_uint64(v->opts.gc_keep_last));
    bad |= vfs_json_add(o, "keep_every", json_object_new_uint64(v->opts.gc_keep_every));
    bad |= vfs_json_add(o, "grace_s", vfs_json_fixed(v->opts.gc_grace_seconds, 3));
    bad |= vfs_json_add(o, "interval_s", vfs_json_fixed(v->opts.gc_interval_seconds, 3));
    bad |= vfs_json_add(o, "runs", json_object_new_uint64(g->runs));
    bad |= vfs_json_add(o, "running", json_object_new_boolean(g->running));
    bad |= vfs_json_add(o, "last_start_ns", json_object_new_int64(g->last_start_ns));
    bad |= vfs_json_add(o, "last_duration_s", vfs_json_fixed((double)g->last_duration_ns / 1e9, 3));
    bad |= vfs_json_add(o, "last_steps_deleted", json_object_new_uint64(g->last_steps));
    bad |= vfs_json_add(o, "last_objects_deleted", json_object_new_uint64(g->last_objects));
    bad |= vfs_json_add(o, "last_bytes_freed", json_object_new_uint64(g->last_bytes));
    bad |= vfs_json_add(o, "steps_deleted", json_object_new_uint64(g->total_steps));
    bad |= vfs_json_add(o, "objects_deleted", json_object_new_uint64(g->total_objects));
    bad |= vfs_json_add(o, "bytes_freed", json_object_new_uint64(g->total_bytes));
    bad |= vfs_json_add(o, "last_error", json_object_new_string(g->last_error));
    return bad | vfs_json_add(root, "gc", o);
}
