/*
 * st_vfs_drop — files leaving the mount or its staging disk: a file removed
 * from the namespace (vfs_drop_file), the local copies of durable files
 * evicted to make room under the staging cap (vfs_evict_durable), and a step
 * the store no longer holds forgotten (vfs_forget_step). Above the tree and
 * the journal, below the remote view, deletions and GC that use it.
 *
 * Threads: every function is called with v->lock held; the only I/O is
 * unlinking staging files and journal writes.
 */
#include "mount/st_vfs_impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

st_err vfs_drop_file(st_vfs *v, vnode *n, int tombstone, int keep_on_error)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    vnode *jd = vfs_job_dir(n);
    st_err e = ST_OK;
    /* A naming marker's version that its step has not stored yet stays that
     * step's (docs/MOUNT_MODEL.md, "A naming marker replaced before its step is
     * stored"): removed, or replaced by a rename. */
    int kept = vfs_keep_marker(v, n);
    if (jd && vfs_job_path(n, path, sizeof path)) {
        if (tombstone && (n->remote || n->from_remote))
            e = vfs_journal_tombstone(v, jd->name, path);
        else
            e = vfs_journal_delete(v, jd->name, path);
    }
    if (e && keep_on_error) {
        if (kept)
            vfs_keep_undo(v, n);
        return e; /* the file stays, as the journal says */
    }
    if (n->sid && vfs_spare_in_upload(v, n->sid))
        v->upload_disturbed = 1;       /* the upload's snapshot has a file gone: published again */
    vfs_staging_release(v, n, 1);      /* its pages serve the next file written */
    vfs_set_write_failed(v, n, ST_OK); /* removed: it no longer holds its step back */
    vfs_unlink_node(v, n);
    vfs_maybe_free(v, n);
    return e;
}

/* Frees staging space by dropping local copies of durable, unopened files
 * (their content is in the store; they become remote again). */
void vfs_evict_durable(st_vfs *v, uint64_t need)
{
    if (!v->opts.staging_cap)
        return;
    for (uint64_t i = 0; i < v->ninodes && v->staged_bytes + need > v->opts.staging_cap; i++) {
        vnode *n = v->inodes[i];
        if (!n || !S_ISREG(n->mode) || !n->sid || n->opens || !n->remote ||
            n->state != VFILE_DURABLE)
            continue;
        vfs_staging_release(v, n, 0); /* room is what this is for */
        /* If the row keeps naming the staging file, recovery finds it gone
         * and serves the durable content from the store all the same. */
        (void)vfs_journal_put_file(v, n);
    }
}

/* Drops an unchanged durable file of a deleted step, and the step's
 * directories that this leaves empty. */
static void forget_file(st_vfs *v, vnode *jd, vnode *n, uint64_t step)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    vnode *dir = n->parent;
    /* On a journal error the file stays, as the journal says (the error is
     * in last_error); the refresh that finds the step gone tries again. */
    if (vfs_drop_file(v, n, 0, 1))
        return;
    while (dir && dir != jd && !dir->nkids && vfs_job_path(dir, path, sizeof path)) {
        int last;
        vnode *up = dir->parent;
        if (vfs_named_step(v, dir, path, &last) != step)
            break;
        (void)vfs_journal_delete(v, jd->name, path); /* at worst an empty dir after a restart */
        vfs_unlink_node(v, dir);
        vfs_maybe_free(v, dir);
        dir = up;
    }
}

void vfs_forget_step(st_vfs *v, vjob *j, uint64_t step)
{
    vnode *jd = vfs_child(v->root, j->name);
    int left = 0;
    for (uint64_t i = 0; jd && i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        if (!n || !n->parent || !S_ISREG(n->mode) || n->step != step || vfs_job_dir(n) != jd)
            continue;
        if (n->state == VFILE_DURABLE && n->remote && n->remote->step == step && !n->opens &&
            !n->fetching)
            forget_file(v, jd, n, step);
        else
            left = 1; /* changed here, or open: stays, and is uploaded again */
    }
    vstep *s = vfs_step(j, step, 0);
    if (left || !s || s->writers || s->uploading || s->queued)
        return;
    free(s->commits);
    vfs_kept_drop_step(v, j->name, step);
    size_t i = (size_t)(s - j->steps);
    memmove(j->steps + i, j->steps + i + 1, (j->nsteps - i - 1) * sizeof *j->steps);
    j->nsteps--;
    /* A row left behind recreates an empty step at a restart, which holds
     * no file and is forgotten again: harmless. */
    (void)vfs_journal_drop_step(v, j->name, step);
}
