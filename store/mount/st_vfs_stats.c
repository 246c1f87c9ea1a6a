/*
 * st_vfs_stats — the mount's figures for monitoring, copied into a plain
 * struct (st_vfs_get_stats, st_vfs.h) that callers render as they like: the
 * daemon makes Prometheus text of it (fs/fs_metrics.c, docs/METRICS.md).
 *
 * Everything is read under v->lock in one pass, so the figures agree with
 * each other (a step counted durable has its bytes in uploaded_bytes); the
 * request and retry counters are atomics of the backend wrappers, read in
 * the same pass. No I/O, no allocation but the jobs array.
 */
#include "mount/st_vfs_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/st_backend_retry.h"

_Static_assert(ST_VFS_REQ_KINDS == ST_REQ_KINDS, "st_vfs.h mirrors st_backend_count.h");
_Static_assert(ST_VFS_REQ_RESULTS == ST_REQ_RESULTS, "st_vfs.h mirrors st_backend_count.h");
_Static_assert(ST_JOB_MAX < sizeof((st_vfs_job_stats *)0)->name, "a job name fits");

const char *st_vfs_request_kind_name(int kind)
{
    return st_req_kind_name((st_req_kind)kind);
}

const char *st_vfs_request_result_name(int result)
{
    return st_req_result_name((st_req_result)result);
}

/* The jobs and their steps by state (lock held). */
static st_err job_stats(st_vfs *v, st_vfs_stats *out)
{
    if (!v->njobs)
        return ST_OK;
    out->jobs = calloc(v->njobs, sizeof *out->jobs);
    if (!out->jobs)
        return st_seterr(ST_ERR_NOMEM, "metrics: out of memory");
    out->njobs = v->njobs;
    for (size_t i = 0; i < v->njobs; i++) {
        const vjob *j = &v->jobs[i];
        st_vfs_job_stats *js = &out->jobs[i];
        snprintf(js->name, sizeof js->name, "%s", j->name);
        for (size_t k = 0; k < j->nsteps; k++)
            if (!vfs_deletion_find(j, j->steps[k].step)) /* as the status file */
                js->steps[vfs_step_state(&j->steps[k])]++;
        out->deleted_steps += j->steps_deleted;
        out->deleted_bytes_freed += j->bytes_freed;
    }
    return ST_OK;
}

uint64_t vfs_count_unsynced(const st_vfs *v)
{
    uint64_t n = 0;
    for (uint64_t i = 0; v->close_in_background && i < v->ninodes; i++)
        n += v->inodes[i] && v->inodes[i]->parent && v->inodes[i]->unsynced;
    return n;
}

st_err st_vfs_get_stats(st_vfs *v, st_vfs_stats *out)
{
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&v->lock);
    st_err e = job_stats(v, out);
    out->pending_bytes = vfs_pending_bytes(v);
    out->staged_bytes = v->staged_bytes;
    out->staging_cap = v->opts.staging_cap;
    out->spare_bytes = v->spare_bytes;
    out->spare_files = v->nspares;
    out->spare_reused_bytes = v->spare_reused_bytes;
    out->spare_durable_files = v->spare_durable_files;
    out->unsynced_files = vfs_count_unsynced(v);
    out->queue = v->nqueue;
    out->draining = v->draining;
    out->eta_durable_seconds = vfs_eta_durable_seconds(v, out->pending_bytes);
    out->uploaded_bytes = v->uploaded_bytes;
    out->new_raw_bytes = v->new_raw_bytes;
    out->stored_bytes = v->stored_bytes;
    out->chunks = v->chunks;
    out->new_chunks = v->new_chunks;
    out->bundles = v->bundles;
    vfs_peers_stats(v, &out->peers);
    out->bundled_files = v->bundled_files;
    out->uploads = v->uploads;
    out->upload_failures = v->upload_failures;
    out->upload_seconds = (double)v->upload_ns / 1e9;
    for (int k = 0; k < ST_REQ_KINDS; k++)
        for (int r = 0; r < ST_REQ_RESULTS; r++)
            out->requests[k][r] = atomic_load(&v->requests.n[k][r]);
    out->retries = st_backend_retry_count(v->retry_backend);
    out->gc_runs = v->gc_status.runs;
    out->gc_running = v->gc_status.running;
    out->gc_steps_deleted = v->gc_status.total_steps;
    out->gc_objects_deleted = v->gc_status.total_objects;
    out->gc_bytes_freed = v->gc_status.total_bytes;
    out->fetches_active = v->fetches_active;
    out->fetched_bytes = v->fetched_bytes;
    out->read_back = v->fetch_read_back;
    vfs_warmup_bytes(v, &out->warmup_bytes, &out->warmup_warm_bytes);
    out->errors = v->errors;
    out->last_error_unix_ns = v->last_error_ns;
    pthread_mutex_unlock(&v->lock);
    if (e)
        st_vfs_stats_free(out);
    return e;
}

void st_vfs_stats_free(st_vfs_stats *s)
{
    free(s->jobs);
    memset(s, 0, sizeof *s);
}
