/*
 * st_vfs_delete — deleting a step through the mount (docs/MOUNT_MODEL.md,
 * "Deleting steps"): rmdir of a step directory, or unlink of a single-file
 * step, once nothing left in the mount names the step, requests the deletion
 * of the whole step from the store; the uploader thread carries it out.
 *
 * A request's life (vdeletion.state), drawn once:
 *
 *   state         meaning                                       next
 *   PENDING       in the journal; not tried yet, or deletable    deleted (gone), or
 *                 at the next try                                 one of the three below
 *   KEPT_NEWEST   the job's newest consistent step: kept until   PENDING at a try that
 *                 a newer step is consistent                      finds a newer one
 *   KEPT_PINNED   pinned in the store (ckptctl pin)              PENDING once unpinned
 *   MOVING        files still visible here that belong to the    PENDING once they are
 *                 step (R2/R6) are being stored with another step durable there
 *   (gone)        deleted from the store, or cancelled by a write that names the step
 *
 * Invariants: while a request for (job, step) exists, the remote view does not
 * load the step and R6 gives it no file; the step is deleted from the store
 * only by the uploader thread (so never while this node publishes a part of
 * it), never while it is the job's newest consistent step, and never while a
 * file visible in the mount has its only stored copy in it.
 *
 * Threads: the trigger (vfs_removal_*) and vfs_deletion_cancel run in FUSE
 * requests, under v->lock; the executor (vfs_deletions_run) on the uploader
 * thread, which drops v->lock for store I/O; vfs_forget_step also on the
 * refresher and GC threads. Every function here is called with v->lock held.
 */
#include "mount/st_vfs_impl.h"
#include "util/st_array.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "engine/st_gc.h"
#include "format/st_gcmark.h"
#include "engine/st_catalog.h"

static const char *const del_state_names[] = {"pending", "kept_newest_durable", "kept_pinned",
                                              "moving_files"};

/* 1 if a file or directory of job jd other than skip names step by its path. */
static int step_still_named(st_vfs *v, const vnode *jd, uint64_t step, const vnode *skip)
{
    for (uint64_t i = 0; i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        char path[ST_MANIFEST_MAX_PATH + 1];
        int last;
        if (!n || n == skip || n == jd || !n->parent || vfs_job_dir(n) != jd ||
            !vfs_job_path(n, path, sizeof path))
            continue;
        if (vfs_named_step(v, n, path, &last) == step)
            return 1;
    }
    return 0;
}

/* ---- requests ---- */

static vdeletion *deletion_add(st_vfs *v, vjob *j, uint64_t step, const char *path,
                               int64_t requested_ns)
{
    if (st_array_grow((void **)&j->dels, &j->dels_cap, j->ndels + 1, sizeof *j->dels))
        return NULL;
    vdeletion *d = &j->dels[j->ndels];
    memset(d, 0, sizeof *d);
    if (!(d->path = strdup(path)))
        return NULL;
    d->step = step;
    d->requested_ns = requested_ns;
    d->id = ++v->next_deletion_id;
    d->state = VDEL_PENDING;
    j->ndels++;
    return d;
}

static void deletion_remove(vjob *j, vdeletion *d)
{
    size_t i = (size_t)(d - j->dels);
    free(d->path);
    memmove(j->dels + i, j->dels + i + 1, (j->ndels - i - 1) * sizeof *j->dels);
    j->ndels--;
}

st_err vfs_deletion_restore(st_vfs *v, const char *job, uint64_t step, const char *path,
                            int64_t requested_ns)
{
    vjob *j = vfs_job(v, job, 1);
    if (!j || (!vfs_deletion_find(j, step) && !deletion_add(v, j, step, path, requested_ns)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    return ST_OK;
}

/* Drops the local state of a step whose deletion was requested: its queued
 * upload, completion and commits (its journal row went with the request). An
 * upload under way ends by itself; the executor runs after it. */
static void drop_step_state(st_vfs *v, vjob *j, uint64_t step)
{
    for (size_t i = 0; i < v->nqueue;)
        if (v->queue[i].step == step && !strcmp(v->queue[i].job, j->name))
            memmove(v->queue + i, v->queue + i + 1, (--v->nqueue - i) * sizeof *v->queue);
        else
            i++;
    vfs_kept_drop_step(v, j->name, step);
    vstep *s = vfs_step(j, step, 0);
    if (!s)
        return;
    free(s->commits);
    if (!s->writers && !s->uploading) {
        size_t i = (size_t)(s - j->steps);
        memmove(j->steps + i, j->steps + i + 1, (j->nsteps - i - 1) * sizeof *j->steps);
        j->nsteps--;
        return;
    }
    int writers = s->writers, uploading = s->uploading; /* their owners count them down */
    memset(s, 0, sizeof *s);
    s->step = step;
    s->writers = writers;
    s->uploading = uploading;
}

/* A file of the store that the remote view added to dir after dir was last
 * listed, and that nobody has opened or changed here since. */
static int unseen_remote_file(const vnode *dir, const vnode *n)
{
    return S_ISREG(n->mode) && n->remote && !n->sid && !n->opens && !n->fetching &&
           n->merged_ns > dir->listed_ns;
}

/* Why: `rm -r checkpoint-500` lists the directory, unlinks what it saw, then
 * rmdirs it. If the step became consistent in between, the refresher added
 * the other nodes' files, and the rmdir would fail with ENOTEMPTY on files
 * the remover could not have seen. They are part of the step being deleted,
 * so they go with it. Files (not subdirectories) only. */
int vfs_rmdir_drop_unseen(st_vfs *v, vnode *n)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    int last;
    vnode *jd = vfs_job_dir(n);
    if (!jd || jd == n || !vfs_job_path(n, path, sizeof path) ||
        vfs_named_step(v, n, path, &last) == VFS_NO_STEP || !last)
        return 0;
    for (size_t i = 0; i < n->nkids; i++)
        if (!unseen_remote_file(n, n->kids[i]))
            return 0;
    while (n->nkids)
        if (vfs_drop_file(v, n->kids[n->nkids - 1], 1, 1))
            return 0; /* the journal failed (last_error): the rmdir fails as not empty */
    return 1;
}

st_err vfs_removal_begin(st_vfs *v, vnode *n, vfs_removal *rm)
{
    memset(rm, 0, sizeof *rm);
    rm->step = VFS_NO_STEP;
    rm->jd = vfs_job_dir(n);
    if (rm->jd && rm->jd != n) {
        int last;
        if (!vfs_job_path(n, rm->path, sizeof rm->path))
            return st_seterr(ST_ERR_NAME, "path too long");
        uint64_t step = vfs_named_step(v, n, rm->path, &last);
        if (last && !step_still_named(v, rm->jd, step, n))
            rm->step = step;
    }
    return vfs_journal_begin(v);
}

st_err vfs_removal_commit(st_vfs *v, vfs_removal *rm)
{
    vjob *j = rm->step != VFS_NO_STEP ? vfs_job(v, rm->jd->name, 1) : NULL;
    int fresh = j && !vfs_deletion_find(j, rm->step);
    vdeletion d = {.step = rm->step, .path = rm->path, .requested_ns = st_now_ns()};
    st_err e = ST_OK;
    if (rm->step != VFS_NO_STEP && !j)
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e && fresh)
        e = vfs_journal_put_deletion(v, j->name, &d);
    if (!e && fresh)
        e = vfs_journal_drop_step(v, j->name, rm->step);
    if (e) {
        vfs_journal_rollback(v);
        return e;
    }
    if ((e = vfs_journal_commit(v)) || !fresh)
        return e;
    /* Durable from here: the step leaves this mount now, the store later. */
    j->removals++;
    if (!deletion_add(v, j, rm->step, rm->path, d.requested_ns))
        vfs_log(v, 2, "out of memory: the deletion of step %" PRIu64 " of %s waits for a restart",
                rm->step, j->name);
    drop_step_state(v, j, rm->step);
    vfs_log(v, 0, "step %" PRIu64 " of %s removed (%s): deleting it from the store", rm->step,
            j->name, rm->path);
    pthread_cond_broadcast(&v->changed);
    return ST_OK;
}

void vfs_deletion_cancel(st_vfs *v, vnode *n)
{
    vnode *jd = vfs_job_dir(n);
    vjob *j = jd && jd != n ? vfs_job(v, jd->name, 0) : NULL;
    char path[ST_MANIFEST_MAX_PATH + 1];
    int last;
    if (!j || !j->ndels || !vfs_job_path(n, path, sizeof path))
        return;
    vdeletion *d = vfs_deletion_find(j, vfs_named_step(v, n, path, &last));
    if (!d)
        return;
    uint64_t step = d->step;
    if (vfs_journal_drop_deletion(v, j->name, step))
        return; /* the request stays, here as in the journal: the old version is
                   deleted first, then the new files are uploaded (error in last_error) */
    deletion_remove(j, d);
    /* The old version stays hidden: the new files written here replace it. */
    vstep *s = vfs_step(j, step, 1);
    if (s)
        s->remote_loaded = 1;
    vfs_log(v, 0, "deletion of step %" PRIu64 " of %s cancelled: %s is written again", step,
            j->name, path);
}

/* ---- the executor (uploader thread) ---- */

/* The verdict on step, from the store (no lock held): VDEL_KEPT_PINNED,
 * VDEL_KEPT_NEWEST if it is the job's newest consistent step, else
 * VDEL_PENDING (deletable). Steps newer than it are judged from the newest
 * down until a consistent one is found; an unreadable one is an error. */
static st_err judge_step(st_backend *b, const char *job, uint64_t step, vdel_state *verdict)
{
    char key[ST_KEY_MAX];
    uint64_t size;
    *verdict = VDEL_PENDING;
    st_err e = st_key_pin(key, sizeof key, job, step);
    if (!e && (e = st_stat(b, key, &size)) == ST_OK)
        *verdict = VDEL_KEPT_PINNED;
    if (e != ST_ERR_NOT_FOUND)
        return e;
    st_stepview sv;
    e = st_catalog_newest_consistent(b, job, step, UINT64_MAX, NULL, NULL, &sv);
    if (e == ST_ERR_NOT_FOUND)
        return ST_OK; /* nothing consistent from it up: it is not the newest */
    if (!e) {
        *verdict = sv.step == step ? VDEL_KEPT_NEWEST : VDEL_PENDING;
        st_stepview_free(&sv);
    }
    return e;
}

/* The request (job, step) if it is still the one with this id. */
static vdeletion *current(st_vfs *v, const char *job, uint64_t step, uint64_t id, vjob **j)
{
    *j = vfs_job(v, job, 0);
    vdeletion *d = vfs_deletion_find(*j, step);
    return d && d->id == id ? d : NULL;
}

/* n belongs to a step being deleted but stays visible: it becomes a changed
 * file of the newest other step (R6), which is published again with it. */
static void move_file(st_vfs *v, vjob *j, vnode *n)
{
    uint64_t to = vfs_newest_step(j);
    n->step = to;
    n->version++;
    n->from_remote = 0;
    if (n->state == VFILE_DURABLE)
        n->state = VFILE_CLOSED;
    /* Without the row, a restart finds the file in the deleted step again
     * and the request moves it again (state moving_files). */
    (void)vfs_journal_put_file(v, n);
    vstep *s = to != VFS_NO_STEP ? vfs_step(j, to, 1) : NULL;
    if (!s)
        return;
    s->dirty = 1; /* published once quiet, like any closed change */
    s->last_activity_ns = st_mono_ns();
    if (s->complete && !s->writers)
        vfs_enqueue(v, j->name, to); /* (R5) */
}

/* Moves the visible files of job that belong to step (see move_file),
 * fetching those that are only in the store; *waiting is set while one of
 * them is not durable in its new step yet. May drop the lock to fetch. */
static st_err move_visible_files(st_vfs *v, const char *job, uint64_t step, int *waiting)
{
    *waiting = 0;
    for (uint64_t i = 0; i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        vnode *jd = vfs_child(v->root, job);
        if (!n || !jd || !n->parent || !S_ISREG(n->mode) || vfs_job_dir(n) != jd)
            continue;
        if (n->step == step) {
            if (!n->sid) {
                n->opens++; /* pinned while the fetch drops the lock */
                st_err e = vfs_fetch(v, n);
                n->opens--;
                int gone = !n->parent;
                vfs_maybe_free(v, n);
                if (e)
                    return e;
                if (gone)
                    continue;
            }
            vjob *j = vfs_job(v, job, 1);
            if (!j)
                return st_seterr(ST_ERR_NOMEM, "out of memory");
            move_file(v, j, n);
        }
        if (n->step != VFS_NO_STEP && n->remote && n->remote->step == step)
            *waiting = 1;
    }
    return ST_OK;
}

static void note_error(st_vfs *v, vdeletion *d, const char *job, const char *what)
{
    snprintf(d->error, sizeof d->error, "%s: %s", what, st_errmsg());
    vfs_log(v, 1, "deleting step %" PRIu64 " of %s: %s (tried again in %.0f s)", d->step, job,
            d->error, v->opts.refresh_seconds);
}

/* One try of one request (lock held on entry and exit, dropped for I/O). */
static void try_deletion(st_vfs *v, const char *job, uint64_t step, uint64_t id)
{
    vjob *j;
    vdeletion *d;
    vdel_state verdict;
    pthread_mutex_unlock(&v->lock);
    st_err e = judge_step(v->backend, job, step, &verdict);
    pthread_mutex_lock(&v->lock);
    if (!(d = current(v, job, step, id, &j)))
        return; /* cancelled meanwhile */
    if (e) {
        note_error(v, d, job, "looking for the newest durable step");
        return;
    }
    d->error[0] = '\0';
    if (verdict != VDEL_PENDING) {
        if (d->state != verdict)
            vfs_log(v, 0, "step %" PRIu64 " of %s is kept for now: %s", step, job,
                    del_state_names[verdict]);
        d->state = verdict;
        return;
    }
    d->state = VDEL_PENDING;
    int waiting;
    e = move_visible_files(v, job, step, &waiting);
    if (!(d = current(v, job, step, id, &j)))
        return;
    if (e || waiting) {
        d->state = VDEL_MOVING;
        if (e)
            note_error(v, d, job, "fetching a file that stays visible");
        return;
    }
    pthread_mutex_unlock(&v->lock);
    st_gc_report r;
    e = st_gc_delete_step(v->backend, job, step, &r);
    ST_CRASHPOINT_IF(!e, "delete-store-done");
    pthread_mutex_lock(&v->lock);
    d = current(v, job, step, id, &j);
    if (e) {
        if (d)
            note_error(v, d, job, "deleting");
        st_gc_report_free(&r);
        return;
    }
    if (j) {
        j->steps_deleted += r.steps_deleted;
        j->objects_deleted += r.objects_deleted;
        j->bytes_freed += r.bytes_freed;
    }
    vfs_log(v, 0,
            "step %" PRIu64 " of %s deleted from the store: %" PRIu64 " objects, %" PRIu64
            " bytes (its packs go through GC's sweep)",
            step, job, r.objects_deleted, r.bytes_freed);
    st_gc_report_free(&r);
    if (!d)
        return; /* written again meanwhile: the new version is uploaded next */
    /* Rows left behind make a restart run the request again, which finds
     * nothing left to delete and drops them (docs/MOUNT_MODEL.md, the crash
     * table). */
    (void)vfs_journal_drop_tombstones(v, job, d->path); /* what they hid is gone */
    (void)vfs_journal_drop_deletion(v, job, step);
    deletion_remove(j, d);
    vfs_forget_step(v, j, step);
}

int64_t vfs_deletions_next_due(const st_vfs *v)
{
    int64_t due = INT64_MAX;
    for (size_t i = 0; i < v->njobs; i++)
        for (size_t k = 0; k < v->jobs[i].ndels; k++)
            if (v->jobs[i].dels[k].next_try_ns < due)
                due = v->jobs[i].dels[k].next_try_ns;
    return due;
}

int vfs_deletions_run(st_vfs *v)
{
    int64_t now = st_mono_ns();
    for (size_t i = 0; i < v->njobs; i++)
        for (size_t k = 0; k < v->jobs[i].ndels; k++) {
            vdeletion *d = &v->jobs[i].dels[k];
            if (d->next_try_ns > now)
                continue;
            char job[ST_JOB_MAX + 1];
            snprintf(job, sizeof job, "%s", v->jobs[i].name);
            d->next_try_ns = now + (int64_t)(v->opts.refresh_seconds * 1e9);
            try_deletion(v, job, d->step, d->id);
            return 1;
        }
    return 0;
}

/* ---- status ---- */

int vfs_deletions_status(st_vfs *v, json_object *root)
{
    json_object *jobs = json_object_new_array();
    int bad = 0;
    for (size_t i = 0; i < v->njobs; i++) {
        const vjob *j = &v->jobs[i];
        json_object *jo = json_object_new_object(), *dels = json_object_new_array();
        bad |= vfs_json_add(jo, "job", json_object_new_string(j->name));
        for (size_t k = 0; k < j->ndels; k++) {
            const vdeletion *d = &j->dels[k];
            json_object *o = json_object_new_object();
            bad |= vfs_json_add(o, "step", json_object_new_uint64(d->step));
            bad |= vfs_json_add(o, "state", json_object_new_string(del_state_names[d->state]));
            bad |= vfs_json_add(o, "requested_ns", json_object_new_int64(d->requested_ns));
            bad |= vfs_json_add(o, "error", json_object_new_string(d->error));
            bad |= vfs_json_add(dels, NULL, o);
        }
        bad |= vfs_json_add(jo, "deletions", dels);
        bad |= vfs_json_add(jo, "steps_deleted", json_object_new_uint64(j->steps_deleted));
        bad |= vfs_json_add(jo, "objects_deleted", json_object_new_uint64(j->objects_deleted));
        bad |= vfs_json_add(jo, "bytes_freed", json_object_new_uint64(j->bytes_freed));
        bad |= vfs_json_add(jobs, NULL, jo);
    }
    return bad | vfs_json_add(root, "jobs", jobs);
}
