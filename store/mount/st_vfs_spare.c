/*
 * st_vfs_spare — the pool of recycled staging files (docs/MOUNT_MODEL.md,
 * "Recycled staging files"). A staging file that leaves the mount is kept,
 * with its cached pages and its disk blocks, as STAGING/spare/<sid>, and the
 * next new file is written over it: on this VM a page the kernel frees goes
 * back to the host within ~2 s and costs a fault to get again, so a save
 * that overlaps the seal of the step before it (which holds that step's
 * pages) was ~2x as slow as one that reuses freed pages.
 *
 * A trainer that keeps every checkpoint removes nothing; for it, a new file
 * that finds the pool empty takes the staging file of a durable namesake of
 * an older step (rule 5: its bytes are in the store, it becomes remote).
 *
 * What this module guarantees: a spare is handed out only when nothing can
 * still read it (no open handle at entry; not in the running upload's
 * snapshot, else held until that upload ends), the pool stays under its cap
 * and leaves the staging disk room. What the taker must do about the stale
 * bytes beyond its writes is st_vfs_local.c's job (rules 2 to 4 of the doc).
 *
 * Threads: every function but st_vfs_drop_spares is called with v->lock
 * held; the I/O is renames, unlinks and one statvfs per file entering.
 */
#include "mount/st_vfs_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_array.h"
#include "util/st_fsutil.h"

/* Smaller files are unlinked: their pages are too few to matter, and a pool
 * of many small files would hand a large save a little at a time. */
#define SPARE_MIN_BYTES (1u << 20)
/* The pool holds at most this share of the staging disk's free space. */
#define SPARE_FREE_FACTOR 4

static void spare_path(const st_vfs *v, uint64_t sid, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/spare/%" PRIu64, v->staging, sid);
}

st_err vfs_spare_open(st_vfs *v)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/spare", v->staging);
    /* Spares a crash or an earlier daemon left behind: no row names them,
     * and their pages may be gone; they only hold disk space. */
    DIR *d = opendir(path);
    if (!d)
        return st_seterr(ST_ERR_IO, "open %s: %s", path, strerror(errno));
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] != '.')
            unlinkat(dirfd(d), de->d_name, 0);
    }
    closedir(d);
    return ST_OK;
}

/* Removes spare i from the pool's list (its file is someone else's now). */
static void spare_forget(st_vfs *v, size_t i)
{
    v->spare_bytes -= v->spares[i].size;
    memmove(v->spares + i, v->spares + i + 1, (v->nspares - i - 1) * sizeof *v->spares);
    v->nspares--;
}

/* Unlinks spare i and removes it from the pool. */
static void spare_remove(st_vfs *v, size_t i)
{
    char sp[PATH_MAX];
    spare_path(v, v->spares[i].sid, sp, sizeof sp);
    unlink(sp);
    spare_forget(v, i);
}

void vfs_spare_shrink(st_vfs *v, uint64_t keep_bytes)
{
    /* The oldest first. Files the running upload may still read stay unless
     * everything must go (a full disk, the unmount): the upload would fail
     * on one gone, and a file kept for it (vfs_spare_keep_for_upload) holds
     * the only copy of what the upload's step publishes. */
    for (size_t i = 0; i < v->nspares && v->spare_bytes > keep_bytes;) {
        if (v->spares[i].held && keep_bytes)
            i++;
        else
            spare_remove(v, i);
    }
}

uint64_t st_vfs_drop_spares(st_vfs *v)
{
    pthread_mutex_lock(&v->lock);
    uint64_t freed = v->spare_bytes;
    vfs_spare_shrink(v, 0);
    pthread_mutex_unlock(&v->lock);
    if (freed)
        vfs_log(v, 1, "staging disk full: removed %" PRIu64 " bytes of recycled staging files",
                freed);
    return freed;
}

void vfs_spare_close(st_vfs *v)
{
    vfs_spare_shrink(v, 0);
    free(v->spares);
    free(v->upload_sids);
    free(v->candidates);
    v->spares = NULL;
    v->upload_sids = NULL;
    v->candidates = NULL;
    v->ncandidates = v->candidates_cap = 0;
    v->spares_cap = v->upload_sids_cap = v->nupload_sids = 0;
}

static int cmp_sid(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int vfs_spare_in_upload(const st_vfs *v, uint64_t sid)
{
    /* Sorted by vfs_spare_upload_begin: a truncating open of a file asks
     * this, and a step's snapshot may hold 10,000 files. */
    return v->upload_sids_unknown ||
           (v->nupload_sids &&
            bsearch(&sid, v->upload_sids, v->nupload_sids, sizeof sid, cmp_sid) != NULL);
}

/* The length n's staging file has on disk: a recycled file not yet closed
 * still holds stale bytes past its size. */
static uint64_t staging_length(const vnode *n)
{
    return n->stale_end > n->size ? n->stale_end : n->size;
}

/* Appends a pool entry for staging file sid, now at STAGING/spare/<sid>
 * (the caller grew the array). */
static void spare_add(st_vfs *v, uint64_t sid, uint64_t size, int held, int for_upload)
{
    v->spares[v->nspares++] =
        (vspare){.sid = sid, .size = size, .held = held, .for_upload = for_upload};
    v->spare_bytes += size;
}

void vfs_staging_detach(st_vfs *v, vnode *n)
{
    v->staged_bytes -= n->size;
    n->sid = 0;
    n->stale_end = 0;
    n->write_front = 0;
}

/* 1 when `size` more bytes in the pool leave the staging disk room. */
static int disk_has_room(const st_vfs *v, uint64_t size)
{
    uint64_t avail = vfs_staging_free_bytes(v);
    return avail / SPARE_FREE_FACTOR >= v->spare_bytes + size;
}

/* Moves n's staging file into the pool; 0 when it must be unlinked instead. */
static int spare_give(st_vfs *v, vnode *n)
{
    uint64_t cap = v->opts.staging_spare;
    uint64_t size = staging_length(n); /* stale bytes past the size are reused all the same */
    if (!cap || n->opens || size < SPARE_MIN_BYTES || size > cap)
        return 0;
    vfs_spare_shrink(v, cap - size);
    if (!disk_has_room(v, size) ||
        st_array_grow((void **)&v->spares, &v->spares_cap, v->nspares + 1, sizeof *v->spares))
        return 0;
    char from[PATH_MAX], to[PATH_MAX];
    vfs_staging_path(v, n->sid, from, sizeof from);
    spare_path(v, n->sid, to, sizeof to);
    if (rename(from, to) < 0)
        return 0;
    spare_add(v, n->sid, size, vfs_spare_in_upload(v, n->sid), 0);
    return 1;
}

void vfs_staging_release(st_vfs *v, vnode *n, int may_recycle)
{
    if (!n->sid)
        return;
    if (may_recycle && n->opens && v->opts.staging_spare) {
        /* A handle still reads or writes it: it is pooled, or unlinked,
         * when that handle closes, at its final length. */
        n->spare_on_close = 1;
        return;
    }
    n->spare_on_close = 0;
    if (!may_recycle || !spare_give(v, n)) {
        char sp[PATH_MAX];
        vfs_staging_path(v, n->sid, sp, sizeof sp);
        unlink(sp);
    }
    vfs_staging_detach(v, n);
}

void vfs_spare_last_close(st_vfs *v, vnode *n)
{
    if (n->spare_on_close && !n->opens)
        vfs_staging_release(v, n, 1);
}

/* Renames the largest spare not held to STAGING/data/<sid>; its length, 0: none. */
static uint64_t take_largest(st_vfs *v, uint64_t sid)
{
    size_t best = v->nspares;
    for (size_t i = 0; i < v->nspares; i++)
        if (!v->spares[i].held && (best == v->nspares || v->spares[i].size > v->spares[best].size))
            best = i;
    if (best == v->nspares)
        return 0;
    char from[PATH_MAX], to[PATH_MAX];
    spare_path(v, v->spares[best].sid, from, sizeof from);
    vfs_staging_path(v, sid, to, sizeof to);
    uint64_t size = v->spares[best].size;
    if (rename(from, to) < 0) {
        spare_remove(v, best); /* cannot be used: do not try it again */
        return 0;
    }
    spare_forget(v, best);
    v->spare_reused_bytes += size;
    v->spare_reused_files++;
    return size;
}

/* 1 when a and b are one name but for their digits: the same file of two
 * steps ("ckpt-000030.pt" and "ckpt-000010.pt", "__0_0.distcp"). */
static int namesakes(const char *a, const char *b)
{
    for (;; a++, b++) {
        while (*a >= '0' && *a <= '9')
            a++;
        while (*b >= '0' && *b <= '9')
            b++;
        if (*a != *b)
            return 0;
        if (!*a)
            return 1;
    }
}

/* 1 when n's job has a durable step newer than n's: n is not part of the
 * newest checkpoint this node holds locally. */
static int newer_step_durable(st_vfs *v, const vnode *n)
{
    vnode *jd = vfs_job_dir(n);
    vjob *j = jd ? vfs_job(v, jd->name, 0) : NULL;
    for (size_t i = 0; j && i < j->nsteps; i++)
        if (j->steps[i].step > n->step && vfs_step_state(&j->steps[i]) == ST_VFS_STEP_DURABLE)
            return 1;
    return 0;
}

/* 1 when n may give its staging file to a namesake under rule 5, as far as
 * tests that do not change between two lists can tell: durable with a
 * local copy that the store holds unchanged, large enough for the pool, not
 * read by the running upload, of a step older than a durable step of its
 * job. The cheap tests first. */
static int candidate(st_vfs *v, const vnode *n)
{
    return n && n->sid && n->state == VFILE_DURABLE && S_ISREG(n->mode) &&
           n->size >= SPARE_MIN_BYTES && n->remote && n->remote->step == n->step && n->parent &&
           !vfs_spare_in_upload(v, n->sid) && newer_step_durable(v, n);
}

void vfs_spare_durable_changed(st_vfs *v)
{
    v->candidates_listed = 0;
}

/* Lists rule 5's candidates again if something may have become durable
 * since the last list (vfs_spare_durable_changed).
 * Scanning every inode at each create cost a 10,000-file step ~0.7 ms per
 * create with 20,000 files in the mount (docs/BENCHMARKS.md, "Rule 5's
 * scan"); now the scan runs once per upload, and a create only looks at the
 * candidates. A file that becomes a candidate between two lists (a handle
 * on it closed) is only missed until the next one: pages not reused,
 * nothing else. */
static void namesake_candidates(st_vfs *v)
{
    if (v->candidates_listed)
        return;
    v->ncandidates = 0;
    for (uint64_t i = 0; i < v->ninodes; i++) {
        if (!candidate(v, v->inodes[i]) ||
            st_array_grow((void **)&v->candidates, &v->candidates_cap, v->ncandidates + 1,
                          sizeof *v->candidates))
            continue;
        v->candidates[v->ncandidates++] = i;
    }
    v->candidates_listed = 1;
}

/* The durable file whose staging file a new file may take over (rule 5 of
 * docs/MOUNT_MODEL.md, "Recycled staging files"): a candidate that is a
 * namesake of `fresh`, unopened and not being fetched, still a candidate now
 * (it may have been written, removed or taken since it was listed); the
 * oldest such step first. NULL: none. */
static vnode *durable_namesake(st_vfs *v, const vnode *fresh)
{
    namesake_candidates(v);
    vnode *best = NULL;
    for (size_t i = 0; i < v->ncandidates; i++) {
        uint64_t ino = v->candidates[i];
        vnode *n = ino < v->ninodes ? v->inodes[ino] : NULL;
        if (!n || n == fresh || n->opens || n->fetching || (best && best->step <= n->step) ||
            !namesakes(n->name, fresh->name) || !candidate(v, n))
            continue;
        best = n;
    }
    return best;
}

uint64_t vfs_spare_take(st_vfs *v, const vnode *fresh, uint64_t sid)
{
    uint64_t got = take_largest(v, sid);
    if (got || !v->opts.staging_spare || !fresh->parent)
        return got;
    vnode *old = durable_namesake(v, fresh);
    if (!old)
        return 0;
    /* Its bytes are in the store: it becomes remote again, as an eviction
     * makes it; the row is rewritten after the rename, and a crash in
     * between leaves a row whose staging file is gone, which recovery
     * serves from the store. */
    vfs_staging_release(v, old, 1);
    (void)vfs_journal_put_file(v, old);
    got = take_largest(v, sid);
    if (got)
        v->spare_durable_files++;
    return got;
}

void vfs_spare_upload_begin(st_vfs *v, const uint64_t *sids, size_t n)
{
    v->nupload_sids = 0;
    if (!sids) {
        v->upload_sids_unknown = 1; /* every file entering is held */
        return;
    }
    if (st_array_grow((void **)&v->upload_sids, &v->upload_sids_cap, n ? n : 1,
                      sizeof *v->upload_sids)) {
        v->upload_sids_unknown = 1; /* every file entering is held */
        return;
    }
    memcpy(v->upload_sids, sids, n * sizeof *sids);
    qsort(v->upload_sids, n, sizeof *v->upload_sids, cmp_sid);
    v->nupload_sids = n;
}

void vfs_spare_upload_end(st_vfs *v)
{
    uint64_t cap = v->opts.staging_spare;
    vfs_spare_durable_changed(v); /* its files and its step may be durable now */
    v->nupload_sids = 0;
    v->upload_sids_unknown = 0;
    for (size_t i = 0; i < v->nspares;) {
        vspare *sp = &v->spares[i];
        sp->held = 0;
        /* Kept for the upload only: now judged as rule 1 judges a file
         * entering the pool (the disk-room test aside). */
        if (sp->for_upload && (!cap || sp->size < SPARE_MIN_BYTES || sp->size > cap)) {
            spare_remove(v, i);
            continue;
        }
        sp->for_upload = 0;
        i++;
    }
    vfs_spare_shrink(v, cap);
}

st_err vfs_spare_keep_for_upload(st_vfs *v, vnode *n, uint64_t *old)
{
    *old = 0;
    if (st_array_grow((void **)&v->spares, &v->spares_cap, v->nspares + 1, sizeof *v->spares))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    char from[PATH_MAX], to[PATH_MAX];
    vfs_staging_path(v, n->sid, from, sizeof from);
    spare_path(v, n->sid, to, sizeof to);
    /* A link, not a rename: until the caller has rewritten n's row, the row
     * and its staging file still agree if the daemon dies. */
    if (link(from, to) < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO,
                         "keep the staging file the upload reads: %s", strerror(errno));
    spare_add(v, n->sid, staging_length(n), 1, 1);
    *old = n->sid;
    vfs_staging_detach(v, n);
    return ST_OK;
}

st_err vfs_spare_upload_open(st_vfs *v, uint64_t sid, int *fd)
{
    char path[PATH_MAX];
    vfs_staging_path(v, sid, path, sizeof path);
    for (size_t i = 0; i < v->nspares; i++)
        if (v->spares[i].sid == sid && v->spares[i].for_upload) {
            spare_path(v, sid, path, sizeof path);
            break;
        }
    return vfs_staging_open(v, path, O_RDONLY, fd);
}
