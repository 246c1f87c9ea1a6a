/*
 * st_vfs_keep — versions of naming markers kept for their step
 * (docs/MOUNT_MODEL.md, "A naming marker replaced before its step is stored").
 *
 * `latest` names step 2 and completes it (R2); the trainer then rewrites it
 * for step 3, or renames a new one over it, before step 2 was stored with
 * it. Step 2 must still publish the version that named it, or a node that
 * resumes at step 2 finds no marker. The version's staging file is kept,
 * under a row of its own in the journal (table `kept`), until a revision of
 * step 2 holding it is published; every upload of step 2 adds it to its
 * snapshot (st_vfs_upload.c).
 *
 * A kept version's staging file stays at STAGING/data/<sid>, where the
 * uploader opens it; no vnode and no `entries` row names it.
 *
 * Threads: every function under v->lock; the I/O is journal rows, one stat
 * per row at recovery and unlinks.
 */
#include "mount/st_vfs_impl.h"

#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_array.h"

/* R2 reads at most this much of a marker: a larger one names no step. */
#define KEPT_MAX_BYTES 4096

/* Unlinks released entries' files that no upload may read, and forgets
 * them. */
static void sweep(st_vfs *v)
{
    size_t out = 0;
    for (size_t i = 0; i < v->nkept; i++) {
        vkept *k = &v->kept[i];
        if (k->released && !vfs_spare_in_upload(v, k->sid)) {
            char sp[PATH_MAX];
            vfs_staging_path(v, k->sid, sp, sizeof sp);
            unlink(sp);
            free(k->path);
            continue;
        }
        v->kept[out++] = *k;
    }
    v->nkept = out;
}

/* Releases k: its row goes now, its file once no upload may read it. */
static void release(st_vfs *v, vkept *k)
{
    if (k->released)
        return;
    /* A row left behind by a journal error names a file that is gone by
     * the next start, which then drops the row. */
    (void)vfs_journal_drop_kept(v, k->job, k->step, k->path);
    k->released = 1;
}

static vkept *find(st_vfs *v, const char *job, uint64_t step, const char *path)
{
    for (size_t i = 0; i < v->nkept; i++) {
        vkept *k = &v->kept[i];
        if (!k->released && k->step == step && !strcmp(k->job, job) && !strcmp(k->path, path))
            return k;
    }
    return NULL;
}

/* Appends an entry (the row is the caller's); NULL: out of memory. */
static vkept *add(st_vfs *v, const char *job, uint64_t step, const char *path, uint64_t sid,
                  uint64_t size, uint32_t mode, int64_t mtime_ns)
{
    char *p = strdup(path);
    if (!p || st_array_grow((void **)&v->kept, &v->kept_cap, v->nkept + 1, sizeof *v->kept)) {
        free(p);
        return NULL;
    }
    vkept *k = &v->kept[v->nkept++];
    memset(k, 0, sizeof *k);
    snprintf(k->job, sizeof k->job, "%s", job);
    k->step = step;
    k->path = p;
    k->sid = sid;
    k->size = size;
    k->mode = mode;
    k->mtime_ns = mtime_ns;
    return k;
}

int vfs_keep_marker(st_vfs *v, vnode *n)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    vnode *jd = vfs_job_dir(n);
    vjob *j = jd ? vfs_job(v, jd->name, 0) : NULL;
    /* A version of a step that its store does not hold yet, settled (no
     * writer), and of this node (a fetched copy is durable). */
    if (!j || !n->sid || !S_ISREG(n->mode) || n->step == VFS_NO_STEP || n->state != VFILE_CLOSED ||
        n->writers || n->from_remote || n->size > KEPT_MAX_BYTES || !vfs_step(j, n->step, 0) ||
        !vfs_job_path(n, path, sizeof path) ||
        st_steprules_marker_kind(v->rules, path) != ST_MARKER_NAMES_STEP)
        return 0;
    vkept *old = find(v, j->name, n->step, path);
    size_t old_i = old ? (size_t)(old - v->kept) : SIZE_MAX; /* add() may move the array */
    vkept *k = add(v, j->name, n->step, path, n->sid, n->size, n->mode, n->mtime_ns);
    if (!k)
        return 0;
    if (vfs_journal_put_kept(v, k)) { /* the file stays n's: the step loses it, as before */
        free(k->path);
        v->nkept--;
        return 0;
    }
    if (old_i != SIZE_MAX) /* an older version for the same step: this one supersedes it */
        v->kept[old_i].released = 1; /* (its row was just replaced) */
    vfs_staging_detach(v, n);
    return 1;
}

void vfs_keep_undo(st_vfs *v, vnode *n)
{
    vkept *k = v->nkept ? &v->kept[v->nkept - 1] : NULL;
    if (!k || k->released)
        return;
    (void)vfs_journal_drop_kept(v, k->job, k->step, k->path);
    n->sid = k->sid;
    n->size = k->size;
    v->staged_bytes += k->size;
    free(k->path);
    v->nkept--;
}

const vkept *vfs_kept_next(st_vfs *v, const char *job, uint64_t step, size_t *cursor)
{
    for (; *cursor < v->nkept; (*cursor)++) {
        vkept *k = &v->kept[*cursor];
        if (!k->released && k->step == step && !strcmp(k->job, job))
            return &v->kept[(*cursor)++];
    }
    return NULL;
}

void vfs_kept_superseded(st_vfs *v, const char *job, uint64_t step, const char *path)
{
    vkept *k = find(v, job, step, path);
    if (k)
        release(v, k);
}

void vfs_kept_stored(st_vfs *v, const char *job, uint64_t step, uint64_t sid)
{
    for (size_t i = 0; i < v->nkept; i++) {
        vkept *k = &v->kept[i];
        if (!k->released && k->sid == sid && k->step == step && !strcmp(k->job, job))
            release(v, k);
    }
    sweep(v); /* called once the upload that stored it ended */
}

void vfs_kept_drop_step(st_vfs *v, const char *job, uint64_t step)
{
    for (size_t i = 0; i < v->nkept; i++) {
        vkept *k = &v->kept[i];
        if (k->step == step && !strcmp(k->job, job))
            release(v, k);
    }
    sweep(v);
}

void vfs_kept_upload_ended(st_vfs *v)
{
    sweep(v);
}

int vfs_kept_restore(st_vfs *v, const char *job, uint64_t step, const char *path, uint64_t sid,
                     uint32_t mode, int64_t mtime_ns)
{
    char sp[PATH_MAX];
    struct stat st;
    vfs_staging_path(v, sid, sp, sizeof sp);
    int named = 0; /* a crash before the live file changed: it is still the version */
    for (uint64_t i = 0; sid && i < v->ninodes && !named; i++)
        named = v->inodes[i] && v->inodes[i]->sid == sid;
    /* Its step is in the journal (a marker completed it) unless it was
     * deleted, in the transaction that dropped this row too: not restored. */
    vjob *j = vfs_job(v, job, 0);
    vstep *s = j && !vfs_deletion_find(j, step) ? vfs_step(j, step, 0) : NULL;
    if (named || !s || !sid || lstat(sp, &st) < 0 || !S_ISREG(st.st_mode) ||
        !add(v, job, step, path, sid, (uint64_t)st.st_size, mode, mtime_ns)) {
        (void)vfs_journal_drop_kept(v, job, step, path);
        if (!named && sid)
            unlink(sp); /* nobody's now */
        return 0;
    }
    if (sid >= v->next_sid)
        v->next_sid = sid + 1;
    return 1;
}

void vfs_kept_close(st_vfs *v)
{
    for (size_t i = 0; i < v->nkept; i++)
        free(v->kept[i].path);
    free(v->kept);
    v->kept = NULL;
    v->nkept = v->kept_cap = 0;
}
