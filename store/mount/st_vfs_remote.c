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
#include "util/st_thread.h"

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

/* Adds (or re-points) the remote file f of a step to the tree (lock held).
 * Returns 1 when f's path is open or being fetched and was left as it is
 * (to be merged by a later refresh), else 0. */
static int merge_file(st_vfs *v, vnode *jd, const st_part *part, uint64_t step,
                      const st_file_entry *f, int from_peers)
{
    int cached = 0; /* n had a fetched copy, whose journal row names it */
    if (vfs_journal_is_tombstone(v, jd->name, f->path))
        return 0;
    const char *base;
    vnode *dir = vfs_walk(v, jd, f->path, 1, &base);
    if (!dir)
        return 0;
    vnode *n = vfs_child(dir, base);
    if (n) {
        if (!S_ISREG(n->mode))
            return 0;
        if (n->sid && !n->from_remote)
            return 0; /* written here: the local file wins */
        if (n->remote && n->remote->step > step)
            return 0; /* a newer step already provides this path */
        if (n->remote && n->remote->step == step && n->remote->revision == part->revision &&
            !strcmp(n->remote->node, part->node))
            return 0; /* this very version (a step merged again) */
        if (n->opens || n->fetching)
            return 1; /* a reader has the older version: merged when it lets go */
        if (n->sid) { /* a cached copy of an older step's content */
            vfs_staging_release(v, n, 1);
            cached = 1;
        }
    } else if (!(n = vfs_node_new(v, dir, base, S_IFREG | (f->mode & 07777)))) {
        return 0;
    } else {
        n->merged_ns = st_mono_ns();
    }
    if (!vfs_set_remote(n, f->path, step, part->revision, part->node))
        return 0;
    n->remote->from_peers = from_peers;
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
    return 0;
}

/*
 * Hands a merged step's part record and manifest, just loaded, to the layout
 * cache (lock held; docs/WARMUP.md, "Layout cache"), so the first open of
 * one of its files does not load them again: on a new node that open is the
 * resume's critical path, and these were two serial GETs of small objects
 * (each ~45 ms on RGW with Ceph's defaults, docs/BENCHMARKS.md, "RGW's
 * fixed mount cost"). The refresh loads steps oldest first, so the newest
 * one stays cached. A step of several parts is left to the fetch, which
 * picks the part of the file it opens.
 */
static void layout_seed(st_vfs *v, const char *job, st_stepview *sv)
{
    if (sv->nparts != 1 || v->fetch_stop)
        return;
    vlayout *l = calloc(1, sizeof *l);
    if (!l)
        return; /* the fetch loads it */
    snprintf(l->job, sizeof l->job, "%s", job);
    l->step = sv->step;
    l->refs = 1;            /* the cache's */
    l->part = sv->parts[0]; /* moved: sv's entries still point into the manifest's files */
    l->m = sv->manifests[0];
    memset(&sv->parts[0], 0, sizeof sv->parts[0]);
    memset(&sv->manifests[0], 0, sizeof sv->manifests[0]);
    vfs_layout_cache_drop(v);
    v->layout_cache = l;
}

/* Loads one step into the view if it is consistent (no lock held on entry):
 * a step that is not is never shown (docs/CONSISTENCY.md), nor one whose
 * paths cannot be laid out as a tree (st_stepview_check_paths). Each path
 * shows the version every reader takes (sv.entries). Called again while the
 * step's listed revision is not the largest merged: paths then point at
 * their new version. */
static void load_step(st_vfs *v, st_backend *src, const char *job, const st_step_keys *k,
                      uint64_t removals, st_bytes *buf)
{
    st_stepview sv;
    const int from_peers = src != v->read_backend;
    if (st_catalog_load_view(src, job, k, buf, &sv)) {
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
    if (j && j->removals != removals) {
        /* A step of the job was removed through the mount while this one
         * loaded: merging what was loaded before could bring that step back
         * (its directory and the other nodes' files) until a later refresh
         * forgot it again. The next refresh loads the step afresh. */
        pthread_mutex_unlock(&v->lock);
        st_stepview_free(&sv);
        return;
    }
    vnode *jd = vfs_child(v->root, job);
    if (!jd && (jd = vfs_node_new(v, v->root, job, S_IFDIR | 0755)))
        (void)vfs_journal_put_dir(v, jd); /* the store brings it back at the next start */
    vstep *s = j ? vfs_step(j, k->step, 1) : NULL;
    if (jd && s && (!s->remote_loaded || s->remote_revision || s->remote_skipped)) {
        int skipped = 0;
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
            skipped |= merge_file(v, jd, p, k->step, sv.entries[i].f, from_peers);
        }
        /* Not k->max_revision: a listing taken between a publisher's
         * manifest PUT and its part record PUT lists a revision that no
         * part record merged here has yet (docs/CONSISTENCY.md). */
        uint32_t merged = 0;
        for (size_t i = 0; i < sv.nparts; i++)
            if (sv.parts[i].revision > merged)
                merged = sv.parts[i].revision;
        if (!from_peers)              /* a fetch of a file listed from the peers loads its own */
            layout_seed(v, job, &sv); /* moves parts[0] out */
        s->remote_loaded = 1;
        s->remote_revision = merged;
        s->remote_skipped = skipped;
        vfs_spare_durable_changed(v); /* a durable step: older copies may go (rule 5) */
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
 * deletion was requested here). *removals: the job's removal count now. */
static int step_loaded(st_vfs *v, const char *job, const st_step_keys *k, uint64_t *removals)
{
    pthread_mutex_lock(&v->lock);
    vjob *j = vfs_job(v, job, 0);
    *removals = j ? j->removals : 0;
    vstep *s = j ? vfs_step(j, k->step, 0) : NULL;
    int loaded = (s && s->remote_loaded && !s->remote_skipped &&
                  (!s->remote_revision || s->remote_revision == k->max_revision)) ||
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
            vlayout *l = v->layout_cache; /* docs/WARMUP.md, "Layout cache" */
            if (l && l->step == step && !strcmp(l->job, job))
                vfs_layout_cache_drop(v);
            vfs_forget_step(v, j, step);
            if (j->nsteps < before)
                continue; /* removed: the next one moved to k */
            s->durable_ns = 0;
            s->remote_loaded = 0;
            s->remote_revision = 0;
            s->remote_skipped = 0;
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
    /* With the store unreachable, the steps replicated on --peers stand in
     * (docs/PEERS.md, "Restoring from peers alone"); each refresh asks the
     * store first, and once it answers its listing wins. */
    st_backend *src = v->read_backend, *alone;
    st_err e = st_catalog_list_jobs(src, &jobs, &njobs);
    if (e == ST_ERR_TRANSIENT && (alone = vfs_peers_alone(v))) {
        src = alone;
        e = st_catalog_list_jobs(src, &jobs, &njobs);
    }
    for (size_t i = 0; !e && i < njobs; i++) {
        st_step_keys *steps;
        size_t n;
        int64_t listed_ns = st_now_ns();
        if ((e = st_catalog_list_steps(src, jobs[i], &steps, &n)))
            break;
        forget_vanished(v, jobs[i], steps, n, listed_ns);
        for (size_t k = 0; k < n; k++) {
            uint64_t removals;
            if (!step_loaded(v, jobs[i], &steps[k], &removals))
                load_step(v, src, jobs[i], &steps[k], removals, &buf);
        }
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
            vfs_takeover_tick(v);
            pthread_mutex_lock(&v->lock);
            v->refreshes++;
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

/* ---- fetching a remote file in runs (docs/WARMUP.md) ---- */

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

/* Worker threads per fetch: GETs in flight for one file. */
#define FETCH_WORKERS 4

/* Workers a fetch may add, one per read that finds its run not started while
 * every worker is busy: the read is served within one GET's latency rather
 * than after a worker's run ends (docs/WARMUP.md, "Reads during a fetch").
 * torch.load reads tensor records in the pickle's order, which jumps ahead
 * of the fetch front: measured on a 944 MiB checkpoint, its reads waited
 * 0.86 s in all, 0.3 s of it for the zip directory at the file's end. */
#define FETCH_READER_WORKERS 2

/* How much nicer the whole-file check runs than the worker that starts it
 * (docs/WARMUP.md, step 4): it reads back and hashes the whole file after
 * every run is verified, work nobody's read waits for, so it takes only a
 * core the readers leave idle. Not SCHED_IDLE: a writer's open waits for
 * the fetch's end, and a nice value is never starved outright. */
#define FETCH_CHECK_NICE 19

/* How long the file must go unread before the whole-file check reads on
 * (fetch_check_pace). A nice value shares the cores, not the memory: the
 * check streams the whole file through memory beside a reader that is
 * copying the same file out of the page cache, and on a 2-vCPU machine that
 * slowed a cold torch.load of a 544 MiB step by about 0.1 s (docs/WARMUP.md,
 * step 4). A reader between two records pauses for well under this. */
#define FETCH_CHECK_QUIET_NS (50ll * 1000000)

/* Runs per worker a large file is cut into. A run is one GET per pack it
 * touches, and a pack holds ~24 MiB: with 8 per worker a 544 MiB
 * incremental step was cut into 16 MiB runs, two GETs per pack, 58 in all;
 * with 4, 32 MiB runs that end where their pack does, 42, and its cold
 * resume ended sooner in 5 of 6 alternating repetitions (docs/WARMUP.md,
 * "Where a cold resume spends its time"). A read ahead of the front does
 * not wait for a longer run: it gets a worker of its own. */
#define RUNS_PER_WORKER 4

uint64_t vfs_run_bytes(uint64_t size)
{
    uint64_t run = size / (FETCH_WORKERS * RUNS_PER_WORKER);
    return run < VFS_RUN_BYTES ? VFS_RUN_BYTES : run > VFS_RUN_MAX ? VFS_RUN_MAX : run;
}

st_err vfs_layout_runs(const st_file_entry *f, vrun **runs, size_t *nruns)
{
    const uint64_t big = vfs_run_bytes(f->size);
    /* Where the short runs of the file's end begin (none for a small file). */
    const uint64_t tail = big > VFS_RUN_BYTES ? f->size - VFS_RUN_BYTES : UINT64_MAX;
    size_t n = 0;
    /* At most one run per chunk (a run holds one chunk at least); not
     * size / VFS_RUN_BYTES: runs whose chunks do not add up to it exactly
     * are shorter, and a 1 GiB file had more runs than that bound. */
    vrun *r = calloc(f->nchunks + 1, sizeof *r);
    if (!r)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    uint64_t off = 0;
    for (size_t i = 0; i < f->nchunks;) {
        vrun *run = &r[n++];
        run->first = i;
        run->off = off;
        uint64_t limit = off >= tail ? VFS_RUN_BYTES : big;
        /* A long run ends where the next chunk would take it into the tail. */
        uint64_t stop = off >= tail ? UINT64_MAX : tail - off;
        while (i < f->nchunks &&
               (run->len == 0 || (run->len + f->chunks[i].raw_len <= limit &&
                                  run->len + f->chunks[i].raw_len <= stop &&
                                  !st_restore_ends_at_pack(f, i, run->len, limit))))
            run->len += f->chunks[i++].raw_len;
        run->count = i - run->first;
        off += run->len;
    }
    if (off != f->size) {
        free(r);
        return st_seterr(ST_ERR_CORRUPT, "%s: its chunks hold %llu bytes, the manifest says %llu",
                         f->path, (unsigned long long)off, (unsigned long long)f->size);
    }
    *runs = r;
    *nruns = n;
    return ST_OK;
}

static void layout_put(vlayout *l);

/* (lock held, as for every vfetch field it frees) */
static void fetch_free(vfetch *fx)
{
    if (!fx)
        return;
    if (fx->fd >= 0)
        close(fx->fd);
    free(fx->runs);
    st_side_chunks_free(fx->sides); /* set, like layout, if it failed before it ended */
    layout_put(fx->layout);
    pthread_mutex_destroy(&fx->write_lock);
    free(fx);
}

void vfs_fetch_put(vfetch *fx)
{
    if (--fx->refs == 0 && fx->ended)
        fetch_free(fx);
}

/* ---- the layout cache (docs/WARMUP.md, "Layout cache") ---- */

static void layout_put(vlayout *l) /* lock held */
{
    if (!l || --l->refs > 0)
        return;
    st_manifest_free(&l->m);
    st_part_free(&l->part);
    st_bytes_free(&l->buf);
    free(l);
}

void vfs_layout_cache_drop(st_vfs *v) /* lock held */
{
    layout_put(v->layout_cache);
    v->layout_cache = NULL;
}

/* The cached layout if it is r's step in the version r shows (lock held). */
static vlayout *layout_cached(st_vfs *v, const char *job, const vremote *r)
{
    vlayout *l = v->layout_cache;
    if (!l || l->step != r->step || strcmp(l->job, job) || strcmp(l->part.node, r->node) ||
        l->part.revision != r->revision)
        return NULL;
    l->refs++;
    return l;
}

/* r's step layout: the cached one, else loaded from the store (no lock held)
 * and cached in place of the last one. Opening N files of a step reads its
 * part record and manifest once, not N times (each decode of a 10,000-file
 * manifest made a step's opens quadratic). */
static st_err layout_get(st_vfs *v, st_backend *src, const char *job, const vremote *r,
                         vlayout **out)
{
    pthread_mutex_lock(&v->lock);
    *out = layout_cached(v, job, r);
    pthread_mutex_unlock(&v->lock);
    if (*out)
        return ST_OK;
    vlayout *l = calloc(1, sizeof *l);
    if (!l)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    snprintf(l->job, sizeof l->job, "%s", job);
    l->step = r->step;
    l->refs = 1;
    st_err e = st_catalog_load_part(src, job, r->step, r->node, &l->buf, &l->part);
    if (!e)
        e = st_catalog_load_manifest(src, &l->part, &l->buf, &l->m);
    pthread_mutex_lock(&v->lock);
    if (!e && !v->fetch_stop) {
        vfs_layout_cache_drop(v);
        v->layout_cache = l;
        l->refs++;
    }
    if (e)
        layout_put(l);
    else
        *out = l;
    pthread_mutex_unlock(&v->lock);
    return e;
}

/* The store side of laying out a fetch (no lock held): the file's manifest
 * entry, its staging file created at its size (sparse), its runs. */
static st_err fetch_layout(st_vfs *v, vfetch *fx, const vremote *r)
{
    st_err e = layout_get(v, fx->source, fx->job, r, &fx->layout);
    for (size_t i = 0; !e && i < fx->layout->m.nfiles; i++)
        if (!strcmp(fx->layout->m.files[i].path, r->path))
            fx->f = &fx->layout->m.files[i];
    if (!e && !fx->f)
        e = st_seterr(ST_ERR_NOT_FOUND, "%s is not in step %" PRIu64 " any more", r->path, r->step);
    if (!e)
        e = st_side_chunks_new(&fx->layout->m, fx->f, &fx->sides);
    if (e)
        return e;
    fx->size = fx->f->size;
    char sp[PATH_MAX];
    vfs_staging_path(v, fx->sid, sp, sizeof sp);
    /* O_RDWR: the whole-file check reads it back */
    if ((e = vfs_staging_create(v, sp, O_RDWR, &fx->fd)))
        return e;
    if (ftruncate(fx->fd, (off_t)fx->size) < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "create cache file: %s",
                         strerror(errno));
    return vfs_layout_runs(fx->f, &fx->runs, &fx->nruns);
}

/* The fetch ended (lock held): every run verified and the whole file checked
 * (e == ST_OK), or not. n becomes a cached copy, or stays remote. */
static void fetch_end(st_vfs *v, vfetch *fx, st_err e)
{
    vnode *n = fx->n;
    char sp[PATH_MAX];
    vfs_staging_path(v, fx->sid, sp, sizeof sp);
    if (!e && !n->parent)
        e = st_seterr(ST_ERR_NOT_FOUND, "removed while it was fetched");
    if (!e) {
        n->sid = fx->sid;
        n->size = fx->size;
        n->state = VFILE_DURABLE;
        n->from_remote = 1;
        n->durable_version = n->version;
        v->staged_bytes += fx->size;
        vfs_spare_durable_changed(v); /* a durable local copy: rule 5 may take it */
        /* The copy is a cache of durable content: without its row a restart
         * fetches it again. Only a whole, verified copy gets a row. */
        (void)vfs_journal_put_file(v, n);
    } else {
        unlink(sp); /* open handles keep what they were answered */
        if (!fx->err) {
            fx->err = e;
            snprintf(fx->msg, sizeof fx->msg, "%s", st_errmsg());
        }
        if (n->parent && !v->fetch_stop) {
            vfs_set_error(v, "fetching %s: %s", n->name, fx->msg);
            vfs_log(v, 2, "%s", v->last_error);
        }
    }
    fx->ended = 1;
    v->fetches_active--;
    n->fetch = NULL;
    n->fetching = 0;
    close(fx->fd);
    fx->fd = -1;
    /* Only the runs are needed from here (handles still waiting on fx). */
    st_side_chunks_free(fx->sides);
    fx->sides = NULL;
    layout_put(fx->layout);
    fx->layout = NULL;
    fx->f = NULL;
    pthread_cond_broadcast(&v->changed);
    vfs_maybe_free(v, n);
    vfs_fetch_put(fx); /* n's reference */
}

/* The run a worker takes next (lock held): the one a reader waits for, else
 * the file's last run once (a zip file, as torch.save writes, is read from its
 * directory at the end first), else the fetch front; SIZE_MAX when none is
 * left to do. */
static size_t take_run(vfetch *fx)
{
    size_t r = fx->urgent;
    fx->urgent = SIZE_MAX;
    if ((r == SIZE_MAX || fx->runs[r].state != VRUN_TODO) && !fx->tail_taken && fx->nruns > 1) {
        fx->tail_taken = 1;
        r = fx->nruns - 1;
    }
    if (r == SIZE_MAX || fx->runs[r].state != VRUN_TODO) {
        while (fx->front < fx->nruns && fx->runs[fx->front].state != VRUN_TODO)
            fx->front++;
        r = fx->front < fx->nruns ? fx->front : SIZE_MAX;
    }
    if (r != SIZE_MAX)
        fx->runs[r].state = VRUN_BUSY;
    return r;
}

/* st_restore_pace of the whole-file check (no lock held): while the file
 * is open and being read through the handles that wait on the fetch, waits
 * until it has gone unread for FETCH_CHECK_QUIET_NS. It waits for no one who
 * needs the fetch's end (hurry), not once the last handle is closed (a
 * refresh merges a newer version of the file only after its fetch ended),
 * and not once the mount is closing. */
static st_err fetch_check_pace(void *arg)
{
    vfetch *fx = arg;
    st_vfs *v = fx->v;
    int64_t quiet_at = 0;
    pthread_mutex_lock(&v->lock);
    while (!fx->hurry && !v->fetch_stop && fx->n->opens) {
        if (fx->reads != fx->reads_seen) {
            fx->reads_seen = fx->reads;
            quiet_at = st_mono_ns() + FETCH_CHECK_QUIET_NS;
        } else if (!quiet_at || st_mono_ns() >= quiet_at) {
            break;
        }
        vfs_timedwait(v, quiet_at);
    }
    pthread_mutex_unlock(&v->lock);
    return ST_OK;
}

/* The fetch's whole-file check, once every run is verified (no lock held):
 * the staging file read back and hashed, paced by its readers. */
static st_err fetch_verify(st_vfs *v, vfetch *fx)
{
    st_err e = st_restore_verify_file_paced(fx->fd, fx->f, fetch_check_pace, fx);
    pthread_mutex_lock(&v->lock);
    v->fetch_read_back += fx->size;
    pthread_mutex_unlock(&v->lock);
    return e;
}

/* The run a worker restores and the fetch it is of: st_restore_to.written's
 * argument. */
typedef struct run_progress {
    st_vfs *v;
    vrun *run;
} run_progress;

/* A chunk of a busy run is verified and written (st_restore_to.written):
 * readers of the bytes up to it need not wait for the rest of the run.
 * Woken only if one waits on this run (vrun.wanted): a broadcast per chunk
 * woke every waiting thread thousands of times per GiB. */
static void run_written(void *arg, uint64_t off, uint64_t len)
{
    run_progress *p = arg;
    pthread_mutex_lock(&p->v->lock);
    p->run->ready = off + len - p->run->off;
    if (p->run->wanted) {
        p->run->wanted = 0;
        pthread_cond_broadcast(&p->v->changed);
    }
    pthread_mutex_unlock(&p->v->lock);
}

/* A fetch worker: restores runs until none is left, then the last worker
 * checks the whole file and ends the fetch. */
static void *fetch_worker_main(void *arg)
{
    vfetch *fx = arg;
    st_vfs *v = fx->v;
    vfs_bound outer = vfs_bound_set(fx->bound);
    st_restorer *rs = NULL;
    fetch_gate_enter(); /* before v->lock: a waiting worker holds no lock */
    st_err e = st_restorer_new(fx->source, fx->job, &rs);
    if (!e) {
        st_restorer_share_bundles(rs, v->bundle_cache);
        st_restorer_set_keyring(rs, v->keyring);
    }
    pthread_mutex_lock(&v->lock);
    size_t r;
    while (!e && !fx->err && !v->fetch_stop && (r = take_run(fx)) != SIZE_MAX) {
        vrun *run = &fx->runs[r];
        run->ready = 0;
        fx->busy++;
        pthread_mutex_unlock(&v->lock);
        run_progress progress = {v, run};
        const st_restore_to to = {.write_lock = &fx->write_lock,
                                  .written = run_written,
                                  .arg = &progress,
                                  .sides = fx->sides};
        e = st_restore_chunks_to(rs, &fx->layout->m, fx->f, run->first, run->count, fx->fd, &to);
        pthread_mutex_lock(&v->lock);
        fx->busy--;
        run->state = e ? VRUN_TODO : VRUN_DONE;
        if (!e) {
            fx->done++;
            fx->done_bytes += run->len;
            v->fetched_bytes += run->len;
            pthread_cond_broadcast(&v->changed);
        }
    }
    if (!e && v->fetch_stop && fx->done < fx->nruns)
        e = st_seterr(ST_ERR_IO, "the mount is closing");
    if (e && !fx->err) {
        fx->err = e;
        snprintf(fx->msg, sizeof fx->msg, "%s", st_errmsg());
        pthread_cond_broadcast(&v->changed); /* readers fail now, not at the end */
    }
    if (--fx->workers == 0) {
        e = fx->err;
        if (!e) {
            pthread_mutex_unlock(&v->lock);
            /* Only a fetch worker, which ends after the check: never the
             * thread that opened an empty file (fetch_start_workers). */
            st_thread_nicer(0, FETCH_CHECK_NICE);
            e = fetch_verify(v, fx);
            pthread_mutex_lock(&v->lock);
        }
        fetch_end(v, fx, e);
    }
    v->fetch_threads--;
    pthread_cond_broadcast(&v->changed);
    pthread_mutex_unlock(&v->lock);
    st_restorer_free(rs);
    fetch_gate_leave();
    vfs_bound_set(outer);
    return NULL;
}

/* Starts one more worker of fx (lock held); 0 or -1. */
static int fetch_add_worker(st_vfs *v, vfetch *fx)
{
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return -1;
    int rc = -1;
    pthread_t t;
    if (pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0) {
        fx->workers++;
        v->fetch_threads++;
        if ((rc = pthread_create(&t, &attr, fetch_worker_main, fx) != 0 ? -1 : 0)) {
            fx->workers--;
            v->fetch_threads--;
        }
    }
    pthread_attr_destroy(&attr);
    return rc;
}

/* Starts fx's workers (lock held); ends the fetch at once if none starts or
 * there is nothing to fetch (an empty file). */
static void fetch_start_workers(st_vfs *v, vfetch *fx)
{
    size_t want = fx->nruns < FETCH_WORKERS ? fx->nruns : FETCH_WORKERS;
    for (size_t w = 0; w < want && fetch_add_worker(v, fx) == 0; w++)
        ;
    if (fx->workers)
        return;
    st_err e = fx->nruns ? st_seterr(ST_ERR_NOMEM, "cannot start a fetch thread") : ST_OK;
    if (!e) { /* an empty file: nothing to wait for */
        pthread_mutex_unlock(&v->lock);
        e = fetch_verify(v, fx);
        pthread_mutex_lock(&v->lock);
    }
    fetch_end(v, fx, e);
}

st_err vfs_fetch_begin(st_vfs *v, vnode *n, vfetch **out)
{
    *out = NULL;
    while (n->fetching && !n->fetch)
        pthread_cond_wait(&v->changed, &v->lock); /* another thread lays one out */
    if (n->fetch) {
        n->fetch->refs++;
        *out = n->fetch;
        return ST_OK;
    }
    if (n->sid)
        return ST_OK;
    if (!n->remote)
        return st_seterr(ST_ERR_IO, "%s has no content", n->name);
    vnode *jd = vfs_job_dir(n);
    if (!jd)
        return ST_ERR_NOT_FOUND;
    vfetch *fx = calloc(1, sizeof *fx);
    vremote r = *n->remote;
    if (!fx || !(r.path = strdup(n->remote->path))) {
        free(fx);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    fx->v = v;
    fx->n = n;
    fx->source = vfs_read_source(v, n->remote);
    fx->fd = -1;
    fx->urgent = SIZE_MAX;
    fx->refs = 1; /* n->fetch's */
    snprintf(fx->job, sizeof fx->job, "%s", jd->name);
    pthread_mutex_init(&fx->write_lock, NULL);
    /* A reader gets EIO once the store has been unreachable for
     * VFS_FETCH_OUTAGE_NS, rather than waiting out every retry. */
    fx->bound = vfs_bound_get();
    if (!fx->bound.outage_budget_ns)
        fx->bound.outage_budget_ns = VFS_FETCH_OUTAGE_NS;
    vfs_evict_durable(v, n->size); /* the cache lives under the staging cap too */
    fx->sid = v->next_sid++;
    n->fetching = 1;
    pthread_mutex_unlock(&v->lock);

    vfs_bound outer = vfs_bound_set(fx->bound);
    st_err e = fetch_layout(v, fx, &r);
    vfs_bound_set(outer);
    free(r.path);

    pthread_mutex_lock(&v->lock);
    if (e) {
        char sp[PATH_MAX];
        vfs_staging_path(v, fx->sid, sp, sizeof sp);
        unlink(sp);
        n->fetching = 0;
        vfs_set_error(v, "fetching %s: %s", n->name, st_errmsg());
        vfs_log(v, 2, "%s", v->last_error);
        pthread_cond_broadcast(&v->changed);
        fetch_free(fx);
        return e;
    }
    n->fetch = fx;
    v->fetches_active++;
    fx->refs++; /* the caller's */
    *out = fx;
    fetch_start_workers(v, fx);
    return ST_OK;
}

st_err vfs_fetch_wait_range(st_vfs *v, vfetch *fx, uint64_t off, uint64_t len)
{
    uint64_t end = off + len < fx->size ? off + len : fx->size;
    for (;;) {
        if (off >= end || (fx->ended && !fx->err))
            return ST_OK;
        /* The first run ending after off (runs are sorted by offset). */
        size_t lo = 0, hi = fx->nruns;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (fx->runs[mid].off + fx->runs[mid].len <= off)
                lo = mid + 1;
            else
                hi = mid;
        }
        size_t r = lo;
        while (r < fx->nruns && fx->runs[r].off < end && fx->runs[r].state == VRUN_DONE)
            r++;
        if (r == fx->nruns || fx->runs[r].off >= end)
            return ST_OK; /* every run of the range is verified (kept by an open fd) */
        const vrun *run = &fx->runs[r];
        if (run->state == VRUN_BUSY && run->off + run->ready >= end)
            return ST_OK; /* the range ends in a run being fetched, within its verified start */
        if (fx->err)
            return st_seterr(fx->err, "%s", fx->msg);
        if (fx->runs[r].state == VRUN_TODO) {
            fx->urgent = r; /* ahead of the fetch front: next */
            if (fx->busy == fx->workers && fx->workers < FETCH_WORKERS + FETCH_READER_WORKERS &&
                !v->fetch_stop)
                (void)fetch_add_worker(v, fx); /* none free: one more takes it now */
        } else
            fx->runs[r].wanted = 1; /* woken as its bytes arrive (run_written) */
        pthread_cond_wait(&v->changed, &v->lock);
    }
}

st_err vfs_fetch(st_vfs *v, vnode *n)
{
    vfetch *fx;
    st_err e = vfs_fetch_begin(v, n, &fx);
    if (e || !fx)
        return e;
    e = vfs_fetch_wait_range(v, fx, 0, fx->size);
    /* Verified run by run; the whole-file check is the fetch's end, and
     * it does not wait for readers while this thread waits for it. */
    fx->hurry++;
    pthread_cond_broadcast(&v->changed);
    while (!e && !fx->ended)
        pthread_cond_wait(&v->changed, &v->lock);
    fx->hurry--;
    if (!e && fx->err)
        e = st_seterr(fx->err, "%s", fx->msg);
    vfs_fetch_put(fx);
    return e;
}

void vfs_fetch_stop_all(st_vfs *v)
{
    pthread_mutex_lock(&v->lock);
    v->fetch_stop = 1;
    pthread_cond_broadcast(&v->changed);
    while (v->fetch_threads)
        pthread_cond_wait(&v->changed, &v->lock);
    vfs_layout_cache_drop(v); /* fetch_stop: no layout is cached from here */
    pthread_mutex_unlock(&v->lock);
}
