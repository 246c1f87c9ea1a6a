/*
 * st_vfs_warmup — warm-up requests: every file of a step fetched into
 * staging before anybody opens it (docs/WARMUP.md, "Warm-up").
 *
 * Requests live in v->warm (the newest VFS_WARM_MAX, oldest first) under
 * v->lock. One warm-up thread, started by a request when none runs
 * (detached, counted in v->fetch_threads so that close waits for it), serves
 * them in order: for each file of the request's step it begins (or joins) the
 * file's fetch, whose FETCH_WORKERS keep that many GETs in flight, and waits
 * until every run of it is verified before the next file. The file's
 * whole-file check, which holds back while a reader reads the file, ends
 * while the next file is fetched: warm-up waits for it before it moves past
 * another file, and before the request ends. A file a trainer opens
 * meanwhile gets its own fetch at once (or joins this one): warm-up never
 * holds a reader back.
 * The thread ends when no request is left to serve.
 *
 * A request covers every file of its step, unless this node (by its name)
 * wrote part of the step: then only that part's files. A rank of a sharded
 * checkpoint that comes back under its name reads its own shard; warming
 * every node's would fetch the whole step onto each of a job's nodes.
 */
#include "mount/st_vfs_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "util/st_fsutil.h"

/* How often a request that found no step looks again (the refresher lists
 * the store meanwhile). */
#define WARM_RETRY_NS (1000ll * 1000000)

static vwarm *find_request(st_vfs *v, uint64_t id)
{
    for (size_t i = 0; i < v->nwarm; i++)
        if (v->warm[i].id == id)
            return &v->warm[i];
    return NULL;
}

/* The newest step of j the remote view merged from the store, or VFS_NO_STEP. */
static uint64_t newest_listed_step(const vjob *j)
{
    for (size_t k = j ? j->nsteps : 0; k-- > 0;)
        if (j->steps[k].remote_loaded)
            return j->steps[k].step;
    return VFS_NO_STEP;
}

/* 1 if n is a file of step of job directory jd as the store has it. */
static int file_of(const vnode *n, const vnode *jd, uint64_t step)
{
    return n && n->parent && S_ISREG(n->mode) && n->remote && n->remote->step == step &&
           vfs_job_dir(n) == jd;
}

/* 1 if request w (FETCHING or after) warms n, a node of job directory jd. */
static int covers(const st_vfs *v, const vwarm *w, const vnode *n, const vnode *jd)
{
    return file_of(n, jd, w->step) && (!w->own_part || !strcmp(n->remote->node, v->node));
}

/* 1 if this node wrote a file of step that job directory jd shows. */
static int has_own_part(const st_vfs *v, const vnode *jd, uint64_t step)
{
    for (uint64_t i = 0; i < v->ninodes; i++)
        if (file_of(v->inodes[i], jd, step) && !strcmp(v->inodes[i]->remote->node, v->node))
            return 1;
    return 0;
}

static void *warmup_main(void *arg);

/* Appends a request, making room by dropping the oldest one that ended. */
static st_err add_request(st_vfs *v, const char *job, uint64_t step)
{
    if (v->nwarm == VFS_WARM_MAX) {
        size_t i = 0;
        while (i < v->nwarm && v->warm[i].state != VWARM_DONE && v->warm[i].state != VWARM_FAILED)
            i++;
        if (i == v->nwarm)
            return st_seterr(ST_ERR_BUSY, "%d warm-up requests are under way already",
                             VFS_WARM_MAX);
        memmove(v->warm + i, v->warm + i + 1, (v->nwarm - i - 1) * sizeof *v->warm);
        v->nwarm--;
    }
    vwarm *w = &v->warm[v->nwarm++];
    memset(w, 0, sizeof *w);
    w->id = ++v->next_warm_id;
    snprintf(w->job, sizeof w->job, "%s", job);
    w->step = step;
    w->state = VWARM_QUEUED;
    return ST_OK;
}

st_err vfs_warmup_request(st_vfs *v, const char *job, uint64_t step)
{
    if (job[0] && !st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name");
    if (v->fetch_stop)
        return st_seterr(ST_ERR_INVALID, "the mount is closing");
    st_err e = add_request(v, job, step);
    if (e || v->warm_thread)
        return e;
    pthread_attr_t attr;
    pthread_t t;
    if (pthread_attr_init(&attr) != 0)
        return st_seterr(ST_ERR_NOMEM, "cannot start the warm-up thread");
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    v->warm_thread = 1;
    v->fetch_threads++;
    if (pthread_create(&t, &attr, warmup_main, v) != 0) {
        v->warm_thread = 0;
        v->fetch_threads--;
        v->nwarm--;
        e = st_seterr(ST_ERR_NOMEM, "cannot start the warm-up thread");
    }
    pthread_attr_destroy(&attr);
    return e;
}

/* A request for every job: one request per job that has a listed step takes
 * its place; none yet: it waits. */
static void expand_every_job(st_vfs *v, vwarm *w)
{
    uint64_t id = w->id;
    size_t found = 0;
    for (size_t i = 0; i < v->njobs; i++)
        if (newest_listed_step(&v->jobs[i]) != VFS_NO_STEP)
            found++;
    if (!found) {
        w->state = VWARM_WAITING;
        return;
    }
    w->state = VWARM_DONE; /* replaced by its jobs' requests, then removed */
    for (size_t i = 0; i < v->njobs; i++)
        if (newest_listed_step(&v->jobs[i]) != VFS_NO_STEP &&
            add_request(v, v->jobs[i].name, VFS_NO_STEP))
            vfs_log(v, 1, "warm-up of %s: %s", v->jobs[i].name, st_errmsg());
    if ((w = find_request(v, id))) {
        memmove(w, w + 1, (size_t)(v->warm + v->nwarm - (w + 1)) * sizeof *w);
        v->nwarm--;
    }
}

/* Ends request id as failed with the current error message. */
static void fail_request(st_vfs *v, uint64_t id)
{
    vwarm *w = find_request(v, id);
    if (!w)
        return;
    w->state = VWARM_FAILED;
    snprintf(w->error, sizeof w->error, "%s", st_errmsg());
    vfs_log(v, 2, "warm-up of step %" PRIu64 " of %s failed: %s", w->step, w->job, w->error);
}

/* Waits for the whole-file check of the file warm-up moved past (lock held,
 * dropped while waiting), and fails its request if the check failed. */
static void settle_checking(st_vfs *v)
{
    vfetch *fx = v->warm_checking;
    if (!fx)
        return;
    v->warm_checking = NULL;
    while (!fx->ended)
        pthread_cond_wait(&v->changed, &v->lock);
    if (fx->err && !v->fetch_stop) {
        st_seterr(fx->err, "%s", fx->msg);
        fail_request(v, v->warm_checking_id);
    }
    vfs_fetch_put(fx);
}

/* Fetches the next file of a FETCHING request, or ends the request. */
static void warm_next_file(st_vfs *v, vwarm *w)
{
    uint64_t id = w->id;
    vnode *jd = vfs_child(v->root, w->job);
    vnode *n = NULL;
    while (w->cursor < v->ninodes && !n) {
        vnode *c = v->inodes[w->cursor++];
        if (jd && covers(v, w, c, jd) && !c->sid)
            n = c;
    }
    if (!n) {
        settle_checking(v);
        if ((w = find_request(v, id)) && w->state == VWARM_FETCHING) {
            w->state = VWARM_DONE;
            vfs_log(v, 0, "warm-up of step %" PRIu64 " of %s done", w->step, w->job);
        }
        return;
    }
    if (!n->fetching && v->warm_started_bytes + n->size > v->opts.warmup_max_bytes) {
        if (!w->skipped++)
            vfs_log(v, 1,
                    "warm-up of step %" PRIu64 " of %s: skipping %s and what else would take "
                    "warm-up past %" PRIu64 " bytes (--prefetch-max)",
                    w->step, w->job, n->name, v->opts.warmup_max_bytes);
        return;
    }
    if (!n->fetching && v->opts.staging_cap) {
        vfs_evict_durable(v, n->size);
        if (v->staged_bytes + n->size > v->opts.staging_cap) {
            w->skipped++;
            return;
        }
    }
    if (!n->fetching)
        v->warm_started_bytes += n->size;
    n->opens++; /* pins n while the lock is dropped (an open does the same) */
    vfetch *fx;
    st_err e = vfs_fetch_begin(v, n, &fx);
    while (!e && fx && !fx->ended && !fx->err && fx->done < fx->nruns)
        pthread_cond_wait(&v->changed, &v->lock);
    if (!e && fx && fx->err && !v->fetch_stop)
        e = st_seterr(fx->err, "%s", fx->msg);
    settle_checking(v);           /* the previous file's check had this file's fetch to end */
    if (!e && fx && !fx->ended) { /* its check runs on: settled at the next file */
        v->warm_checking = fx;
        v->warm_checking_id = id;
    } else if (fx) {
        vfs_fetch_put(fx);
    }
    n->opens--;
    vfs_maybe_free(v, n);
    if (e)
        fail_request(v, id);
}

/* Serves one step of request w (lock held, may drop it). */
static void serve(st_vfs *v, vwarm *w)
{
    if (w->state == VWARM_QUEUED && !w->job[0]) {
        expand_every_job(v, w);
        return;
    }
    if (w->state == VWARM_QUEUED) {
        vjob *j = vfs_job(v, w->job, 0);
        uint64_t step = w->step != VFS_NO_STEP ? w->step : newest_listed_step(j);
        if (!vfs_child(v->root, w->job) || step == VFS_NO_STEP ||
            !vfs_step(j, step, 0)) { /* not listed yet */
            w->state = VWARM_WAITING;
            return;
        }
        w->step = step;
        w->state = VWARM_FETCHING;
        w->cursor = 0;
        w->own_part = has_own_part(v, vfs_child(v->root, w->job), step);
        vfs_log(v, 0, "warming up step %" PRIu64 " of %s%s", step, w->job,
                w->own_part ? " (the part this node wrote)" : "");
        return;
    }
    warm_next_file(v, w);
}

static void *warmup_main(void *arg)
{
    st_vfs *v = arg;
    pthread_mutex_lock(&v->lock);
    while (!v->fetch_stop) {
        vwarm *w = NULL;
        int waiting = 0;
        for (size_t i = 0; i < v->nwarm && !w; i++) {
            if (v->warm[i].state == VWARM_QUEUED || v->warm[i].state == VWARM_FETCHING)
                w = &v->warm[i];
            waiting |= v->warm[i].state == VWARM_WAITING;
        }
        if (w) {
            serve(v, w);
            continue;
        }
        if (!waiting)
            break;
        vfs_timedwait(v, st_mono_ns() + WARM_RETRY_NS);
        for (size_t i = 0; i < v->nwarm; i++)
            if (v->warm[i].state == VWARM_WAITING)
                v->warm[i].state = VWARM_QUEUED;
    }
    settle_checking(v);
    v->warm_thread = 0;
    v->fetch_threads--;
    pthread_cond_broadcast(&v->changed);
    pthread_mutex_unlock(&v->lock);
    return NULL;
}

/* ---- what the status file and the metrics show ---- */

typedef struct warm_figures {
    uint64_t files, files_warm, bytes, bytes_warm;
    int fetching; /* a file of it is being fetched */
} warm_figures;

static warm_figures figures(st_vfs *v, const vwarm *w)
{
    warm_figures f = {0};
    vnode *jd = vfs_child(v->root, w->job);
    if (!jd || w->state == VWARM_QUEUED || w->state == VWARM_WAITING)
        return f;
    for (uint64_t i = 0; i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        if (!covers(v, w, n, jd))
            continue;
        f.files++;
        f.bytes += n->size;
        if (n->sid && !n->fetching) {
            f.files_warm++;
            f.bytes_warm += n->size;
        } else if (n->fetch) {
            f.bytes_warm += n->fetch->done_bytes;
            f.fetching = 1;
        }
    }
    return f;
}

static const char *state_name(const vwarm *w, const warm_figures *f)
{
    switch (w->state) {
    case VWARM_QUEUED: return "queued";
    case VWARM_WAITING: return "waiting";
    case VWARM_FETCHING: return "fetching";
    case VWARM_FAILED: return "failed";
    case VWARM_DONE: break;
    }
    if (f->files_warm == f->files)
        return "warm";
    /* A trainer's own fetch still runs, or a copy was evicted since. */
    return f->fetching && !w->skipped ? "fetching" : "partial";
}

int vfs_warmup_status(st_vfs *v, struct json_object *root)
{
    json_object *o = json_object_new_object(), *reqs = json_object_new_array();
    int bad = vfs_json_add(root, "warmup", o) | !reqs;
    bad |= vfs_json_add(o, "fetches_active", json_object_new_uint64(v->fetches_active));
    bad |= vfs_json_add(o, "fetched_bytes", json_object_new_uint64(v->fetched_bytes));
    bad |= vfs_json_add(o, "read_back_bytes", json_object_new_uint64(v->fetch_read_back));
    bad |= vfs_json_add(o, "requests", reqs);
    for (size_t i = 0; !bad && i < v->nwarm; i++) {
        const vwarm *w = &v->warm[i];
        warm_figures f = figures(v, w);
        json_object *r = json_object_new_object();
        bad |= vfs_json_add(reqs, NULL, r);
        bad |= vfs_json_add(r, "job", json_object_new_string(w->job[0] ? w->job : "*"));
        if (w->step != VFS_NO_STEP) /* else the newest, not known yet: no "step" */
            bad |= vfs_json_add(r, "step", json_object_new_uint64(w->step));
        bad |= vfs_json_add(r, "state", json_object_new_string(state_name(w, &f)));
        bad |= vfs_json_add(r, "files", json_object_new_uint64(f.files));
        bad |= vfs_json_add(r, "files_warm", json_object_new_uint64(f.files_warm));
        bad |= vfs_json_add(r, "bytes", json_object_new_uint64(f.bytes));
        bad |= vfs_json_add(r, "bytes_warm", json_object_new_uint64(f.bytes_warm));
        bad |= vfs_json_add(r, "skipped", json_object_new_uint64(w->skipped));
        bad |= vfs_json_add(r, "error", json_object_new_string(w->error));
    }
    return bad ? -1 : 0;
}

void vfs_warmup_bytes(st_vfs *v, uint64_t *bytes, uint64_t *warm)
{
    *bytes = *warm = 0;
    for (size_t i = 0; i < v->nwarm; i++) {
        warm_figures f = figures(v, &v->warm[i]);
        *bytes += f.bytes;
        *warm += f.bytes_warm;
    }
}
