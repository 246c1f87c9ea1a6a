/*
 * st_vfs_remote — what other nodes (and this node's earlier lives) made
 * durable: committed steps appear in the namespace as remote files, and a
 * remote file's content is fetched, verified and kept in staging on first
 * open.
 *
 * Only committed steps are ever shown (the commit record is written last),
 * so a reader on another node never sees half a checkpoint. A local file
 * always wins over a remote one at the same path; among remote files the
 * newest step wins (files such as DeepSpeed's `latest` are in many steps);
 * a path deleted on this node (a journal tombstone) stays hidden, and so
 * does a step whose deletion was requested here (st_vfs_delete.c). A step the
 * store no longer holds (deleted by GC or by another mount) leaves the view
 * at the next refresh.
 *
 * The refresher thread re-lists the store every refresh_seconds. Store I/O
 * happens without v->lock; results are merged under it.
 */
#include "mount/st_vfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/st_fsutil.h"
#include "engine/st_restore.h"
#include "engine/st_catalog.h"

/* Adds (or re-points) the remote file f of a step to the tree (lock held). */
static void merge_file(st_vfs *v, vnode *jd, const st_part *part, uint64_t step,
                       const st_file_entry *f)
{
    int cached = 0; /* n had a fetched copy, whose journal row names it */
    if (vfs_journal_is_tombstone(v, jd->name, f->path))
        return;
    const char *base;
    vnode *dir = vfs_walk(v, jd, f->path, 1, &base);
    if (!dir)
        return;
    vnode *n = vfs_child(dir, base);
    if (n) {
        if (!S_ISREG(n->mode) || n->opens || n->fetching)
            return;
        if (n->sid && !n->from_remote)
            return; /* written here: the local file wins */
        if (n->remote && n->remote->step > step)
            return; /* a newer step already provides this path */
        if (n->remote && n->remote->step == step && n->remote->revision == part->revision &&
            !strcmp(n->remote->node, part->node))
            return;   /* this very version (a step merged again) */
        if (n->sid) { /* a cached copy of an older step's content */
            char sp[PATH_MAX];
            vfs_staging_path(v, n->sid, sp, sizeof sp);
            unlink(sp);
            v->staged_bytes -= n->size;
            n->sid = 0;
            cached = 1;
        }
    } else if (!(n = vfs_node_new(v, dir, base, S_IFREG | (f->mode & 07777)))) {
        return;
    } else {
        n->merged_ns = st_mono_ns();
    }
    if (!vfs_set_remote(n, f->path, step, part->revision, part->node))
        return;
    n->mode = S_IFREG | (f->mode & 07777);
    n->size = f->size;
    n->mtime_ns = f->mtime_ns;
    n->state = VFILE_DURABLE;
    n->step = step;
    n->version = n->durable_version = n->version + 1;
    /* The row of the dropped copy must not name its staging file any more.
     * If this write fails, recovery finds the file gone and serves the
     * store's copy all the same (st_vfs_journal.c). */
    if (cached)
        (void)vfs_journal_put_file(v, n);
}

/* Loads one step into the view if it is consistent (no lock held on entry):
 * a step that is not is never shown (docs/CONSISTENCY.md), nor one whose
 * paths cannot be laid out as a tree (st_stepview_check_paths). Each path
 * shows the version every reader takes (sv.entries). Called again when the
 * step's listed revision changed: paths then point at their new version. */
static void load_step(st_vfs *v, const char *job, const st_step_keys *k, st_bytes *buf)
{
    st_stepview sv;
    if (st_catalog_load_view(v->backend, job, k, buf, &sv)) {
        vfs_log(v, 1, "cannot load step %" PRIu64 " of %s: %s", k->step, job, st_errmsg());
        return;
    }
    if (!sv.consistent) {
        st_stepview_free(&sv);
        return;
    }
    if (st_stepview_check_paths(&sv, job)) {
        vfs_log(v, 1, "not showing step %" PRIu64 " of %s: %s", k->step, job, st_errmsg());
        st_stepview_free(&sv);
        return;
    }
    pthread_mutex_lock(&v->lock);
    vjob *j = vfs_job(v, job, 1);
    vnode *jd = vfs_child(v->root, job);
    if (!jd && (jd = vfs_node_new(v, v->root, job, S_IFDIR | 0755)))
        (void)vfs_journal_put_dir(v, jd); /* the store brings it back at the next start */
    vstep *s = j ? vfs_step(j, k->step, 1) : NULL;
    if (jd && s && (!s->remote_loaded || s->remote_revision)) {
        for (size_t i = 0; i < sv.nentries; i++) {
            /* This node's own part, of a revision it published or while it
             * publishes a newer one: the tree here is newer than the store,
             * and a path of that part missing here was renamed or removed
             * since (merging it would bring a ghost back). After a lost
             * staging (revision 0, nothing queued) the part is merged. */
            const st_part *p = &sv.parts[sv.entries[i].part];
            if (!strcmp(p->node, v->node) &&
                (p->revision <= s->revision || s->uploading || s->queued))
                continue;
            merge_file(v, jd, p, k->step, sv.entries[i].f);
        }
        s->remote_loaded = 1;
        s->remote_revision = k->max_revision;
        /* This node's clock, not the writer's created_ns: forget_vanished
         * compares it with this node's listing time, and a writer whose
         * clock is ahead would keep a step deleted by GC in the view until
         * this clock caught up. */
        if (!s->durable_ns)
            s->durable_ns = st_now_ns();
    }
    pthread_mutex_unlock(&v->lock);
    st_stepview_free(&sv);
}

/* 1 if the view already holds this step as the store has it (merged at the
 * revision listed now, or not to be merged again), or must not show it (its
 * deletion was requested here). */
static int step_loaded(st_vfs *v, const char *job, const st_step_keys *k)
{
    pthread_mutex_lock(&v->lock);
    vjob *j = vfs_job(v, job, 0);
    vstep *s = j ? vfs_step(j, k->step, 0) : NULL;
    int loaded =
        (s && s->remote_loaded && (!s->remote_revision || s->remote_revision == k->max_revision)) ||
        vfs_deletion_find(j, k->step);
    pthread_mutex_unlock(&v->lock);
    return loaded;
}

/* Steps of job that were durable before listed_ns (loaded from the store, or
 * published by this node) and that the listing no longer has were deleted
 * from the store: they leave the view. */
static void forget_vanished(st_vfs *v, const char *job, const st_step_keys *steps, size_t n,
                            int64_t listed_ns)
{
    pthread_mutex_lock(&v->lock);
    vjob *j = vfs_job(v, job, 0);
    for (size_t k = 0, at = 0; j && k < j->nsteps;) {
        vstep *s = &j->steps[k];
        while (at < n && steps[at].step < s->step)
            at++;
        uint64_t step = s->step;
        size_t before = j->nsteps;
        if ((at == n || steps[at].step != step) && s->durable_ns && s->durable_ns < listed_ns &&
            !s->queued && !s->uploading && !vfs_deletion_find(j, step)) {
            vfs_log(v, 0, "step %" PRIu64 " of %s is no longer in the store", step, job);
            vfs_forget_step(v, j, step);
            if (j->nsteps < before)
                continue; /* removed: the next one moved to k */
            s->durable_ns = 0;
            s->remote_loaded = 0;
            s->remote_revision = 0;
        }
        k++;
    }
    pthread_mutex_unlock(&v->lock);
}

st_err vfs_remote_refresh(st_vfs *v)
{
    char **jobs = NULL;
    size_t njobs = 0;
    st_bytes buf = {0};
    st_err e = st_catalog_list_jobs(v->backend, &jobs, &njobs);
    for (size_t i = 0; !e && i < njobs; i++) {
        st_step_keys *steps;
        size_t n;
        int64_t listed_ns = st_now_ns();
        if ((e = st_catalog_list_steps(v->backend, jobs[i], &steps, &n)))
            break;
        forget_vanished(v, jobs[i], steps, n, listed_ns);
        for (size_t k = 0; k < n; k++)
            if (!step_loaded(v, jobs[i], &steps[k]))
                load_step(v, jobs[i], &steps[k], &buf);
        st_step_keys_free(steps, n);
    }
    st_catalog_free_names(jobs, njobs);
    st_bytes_free(&buf);
    return e;
}

/* Wakes every TICK_NS (or the refresh interval if shorter) to queue quiet
 * steps for eager publishing, and re-lists the store every refresh_seconds. */
#define TICK_NS (500ll * 1000000)

void *vfs_refresher_main(void *arg)
{
    st_vfs *v = arg;
    int64_t next_refresh = st_mono_ns() + (int64_t)(v->opts.refresh_seconds * 1e9);
    pthread_mutex_lock(&v->lock);
    while (!v->stopping) {
        int64_t ns = (int64_t)(v->opts.refresh_seconds * 1e9);
        int64_t until = st_mono_ns() + (ns < TICK_NS ? ns : TICK_NS);
        while (!v->stopping && st_mono_ns() < until)
            vfs_timedwait(v, until);
        if (v->stopping)
            break;
        pthread_mutex_unlock(&v->lock);
        vfs_lease_heartbeat(v);
        vfs_publish_quiet_steps(v);
        if (st_mono_ns() >= next_refresh) {
            /* The status shows why the store cannot be read (a refused
             * signature, an untrusted certificate) until a refresh works. */
            static const char what[] = "refreshing the store's steps: ";
            st_err e = vfs_remote_refresh(v);
            pthread_mutex_lock(&v->lock);
            if (e)
                vfs_set_error(v, "%s%s", what, st_errmsg());
            else if (strncmp(v->last_error, what, sizeof what - 1) == 0)
                v->last_error[0] = '\0';
            pthread_mutex_unlock(&v->lock);
            /* During an outage the health line said it once (st_vfs_health.c);
             * a refresh failing every few seconds does not say it again. */
            if (e && !(e == ST_ERR_TRANSIENT && vfs_health_down(v)))
                vfs_log(v, 1, "%s%s", what, st_errmsg());
            next_refresh = st_mono_ns() + (int64_t)(v->opts.refresh_seconds * 1e9);
        }
        pthread_mutex_lock(&v->lock);
    }
    pthread_mutex_unlock(&v->lock);
    return NULL;
}

/* Files at least this large are fetched by FETCH_WORKERS threads in parallel,
 * each restoring a contiguous run of chunks (one ranged GET per 16 MiB of a
 * pack), so one big checkpoint uses the store's parallel GET throughput. */
#define FETCH_PARALLEL_MIN (32ull << 20)
#define FETCH_WORKERS      4

/* Restorers fetching at once, over all fetches of the process: each holds
 * one ranged GET of up to ST_RESTORE_MAX_GET bytes and a decoded chunk, so
 * without a bound the daemon's memory grew with the readers (every FUSE
 * thread's open fetched, a large file with FETCH_WORKERS restorers: 64 ranks
 * resuming through one mount reached 428 MiB). 8 of them cost ~150 MiB and
 * are as many GETs as the stores we measured gain from (docs/MEMORY.md). A
 * restorer is waited for only while no other lock is held; every holder
 * finishes within the backend's own time bounds. */
#define ST_VFS_FETCH_RESTORERS 8

static pthread_mutex_t fetch_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fetch_gate_freed = PTHREAD_COND_INITIALIZER;
static int fetch_gate_used; /* guarded by fetch_gate_lock */

static void fetch_gate_enter(void)
{
    pthread_mutex_lock(&fetch_gate_lock);
    while (fetch_gate_used >= ST_VFS_FETCH_RESTORERS)
        pthread_cond_wait(&fetch_gate_freed, &fetch_gate_lock);
    fetch_gate_used++;
    pthread_mutex_unlock(&fetch_gate_lock);
}

static void fetch_gate_leave(void)
{
    pthread_mutex_lock(&fetch_gate_lock);
    fetch_gate_used--;
    pthread_cond_signal(&fetch_gate_freed);
    pthread_mutex_unlock(&fetch_gate_lock);
}

typedef struct fetch_part {
    st_backend *backend;
    const char *job;
    const st_manifest *m;
    const st_file_entry *f;
    size_t first, count;
    int fd;
    vfs_bound bound; /* the fetching thread's, for this worker too */
    st_err err;
    char msg[512];
} fetch_part;

static void *fetch_part_main(void *arg)
{
    fetch_part *p = arg;
    vfs_bound outer = vfs_bound_set(p->bound);
    st_restorer *rs = NULL;
    fetch_gate_enter();
    p->err = st_restorer_new(p->backend, p->job, &rs);
    if (!p->err)
        p->err = st_restore_chunks(rs, p->m, p->f, p->first, p->count, p->fd);
    if (p->err)
        snprintf(p->msg, sizeof p->msg, "%s", st_errmsg());
    st_restorer_free(rs);
    fetch_gate_leave();
    vfs_bound_set(outer);
    return NULL;
}

/* Restores f into fd with several workers, then checks the whole file. */
static st_err fetch_parallel(st_vfs *v, const char *job, const st_manifest *m,
                             const st_file_entry *f, int fd)
{
    if (ftruncate(fd, (off_t)f->size) < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "size cache file: %s",
                         strerror(errno));
    fetch_part parts[FETCH_WORKERS];
    pthread_t threads[FETCH_WORKERS];
    int started[FETCH_WORKERS] = {0};
    size_t next = 0;
    uint64_t share = f->size / FETCH_WORKERS + 1, acc = 0;
    for (int w = 0; w < FETCH_WORKERS; w++) {
        size_t first = next;
        uint64_t goal = (uint64_t)(w + 1) * share;
        while (next < f->nchunks && (acc < goal || w == FETCH_WORKERS - 1))
            acc += f->chunks[next++].raw_len;
        parts[w] = (fetch_part){v->backend,      job,   m, f, first, next - first, fd,
                                vfs_bound_get(), ST_OK, ""};
        if (parts[w].count && pthread_create(&threads[w], NULL, fetch_part_main, &parts[w]) == 0)
            started[w] = 1;
        else if (parts[w].count)
            fetch_part_main(&parts[w]); /* no thread: do this part here */
    }
    st_err e = ST_OK;
    for (int w = 0; w < FETCH_WORKERS; w++) {
        if (started[w])
            pthread_join(threads[w], NULL);
        if (parts[w].err && !e)
            e = st_seterr(parts[w].err, "%s", parts[w].msg);
    }
    return e ? e : st_restore_verify_file(fd, f);
}

/* The store side of a fetch: no lock held. */
static st_err fetch_content(st_vfs *v, const char *job, const vremote *r, int fd, uint64_t *size)
{
    st_bytes buf = {0};
    st_part part;
    st_manifest m = {0};
    st_restorer *rs = NULL;
    st_err e = st_catalog_load_part(v->backend, job, r->step, r->node, &buf, &part);
    if (e)
        goto out_nopart;
    if ((e = st_catalog_load_manifest(v->backend, &part, &buf, &m)))
        goto out;
    const st_file_entry *f = NULL;
    for (size_t i = 0; i < m.nfiles; i++)
        if (!strcmp(m.files[i].path, r->path))
            f = &m.files[i];
    if (!f) {
        e = st_seterr(ST_ERR_NOT_FOUND, "%s is not in step %" PRIu64 " any more", r->path, r->step);
        goto out;
    }
    if (f->size >= FETCH_PARALLEL_MIN && f->nchunks >= FETCH_WORKERS)
        e = fetch_parallel(v, job, &m, f, fd);
    else {
        fetch_gate_enter();
        if (!(e = st_restorer_new(v->backend, job, &rs)))
            e = st_restore_file(rs, &m, f, fd);
        st_restorer_free(rs);
        rs = NULL;
        fetch_gate_leave();
    }
    if (!e)
        *size = f->size;
out:
    st_restorer_free(rs);
    st_manifest_free(&m);
    st_part_free(&part);
out_nopart:
    st_bytes_free(&buf);
    return e;
}

st_err vfs_fetch(st_vfs *v, vnode *n)
{
    while (n->fetching)
        pthread_cond_wait(&v->changed, &v->lock);
    if (n->sid)
        return ST_OK;
    if (!n->remote)
        return st_seterr(ST_ERR_IO, "%s has no content", n->name);
    vnode *jd = vfs_job_dir(n);
    if (!jd)
        return ST_ERR_NOT_FOUND;
    char job[ST_JOB_MAX + 1];
    snprintf(job, sizeof job, "%s", jd->name);
    vremote r = *n->remote;
    if (!(r.path = strdup(n->remote->path)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    vfs_evict_durable(v, n->size); /* the cache lives under the staging cap too */
    uint64_t sid = v->next_sid++;
    n->fetching = 1;
    pthread_mutex_unlock(&v->lock);

    char sp[PATH_MAX];
    vfs_staging_path(v, sid, sp, sizeof sp);
    uint64_t size = 0;
    st_err e;
    int fd = open(sp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); /* read back to verify */
    if (fd < 0) {
        e = st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "create cache file: %s",
                      strerror(errno));
    } else {
        /* A reader gets EIO once the store has been unreachable for
         * VFS_FETCH_OUTAGE_NS, rather than waiting out every retry. */
        vfs_bound outer = vfs_bound_set((vfs_bound){.outage_budget_ns = VFS_FETCH_OUTAGE_NS});
        e = fetch_content(v, job, &r, fd, &size);
        vfs_bound_set(outer);
        close(fd);
        if (e)
            unlink(sp);
    }
    free(r.path);

    pthread_mutex_lock(&v->lock);
    n->fetching = 0;
    if (!e) {
        n->sid = sid;
        n->size = size;
        n->state = VFILE_DURABLE;
        n->from_remote = 1;
        n->durable_version = n->version;
        v->staged_bytes += size;
        /* The copy is a cache of durable content: without its row a restart
         * fetches it again. */
        if (n->parent)
            (void)vfs_journal_put_file(v, n);
    } else {
        vfs_set_error(v, "fetching %s: %s", n->name, st_errmsg());
        vfs_log(v, 2, "%s", v->last_error);
    }
    pthread_cond_broadcast(&v->changed);
    return e;
}
