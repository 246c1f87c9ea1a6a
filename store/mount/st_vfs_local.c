/*
 * st_vfs_local — a file's local copy: gives a vnode a staging file of its
 * own (empty for a rewrite, or its content fetched from the store), and
 * cuts the stale bytes of a recycled staging file (docs/MOUNT_MODEL.md,
 * "Recycled staging files").
 *
 * Used by truncation (st_vfs_names.c), the opens (st_vfs_handles.c) and the
 * write path (st_vfs_write.c); calls down only: the tree, staging, the pool
 * of spares, kept markers, the journal and the fetch. Every call under
 * v->lock.
 */
#include "mount/st_vfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>

#include "util/st_fsutil.h"

/* Cuts the stale bytes of a recycled staging file (lock held): truncates it
 * to the end of what was written or is being written, whichever is further,
 * so the writes in flight keep their bytes and a hole beyond reads as zeros
 * (docs/MOUNT_MODEL.md, "Recycled staging files", rules 3 and 4). fd: an open
 * descriptor of it, or -1. */
st_err vfs_cut_stale(st_vfs *v, vnode *n, int fd)
{
    if (!n->stale_end)
        return ST_OK;
    uint64_t keep = n->write_front > n->size ? n->write_front : n->size;
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)keep) < 0)
            return st_seterr(ST_ERR_IO, "truncate recycled staging file: %s", strerror(errno));
    } else {
        char path[PATH_MAX];
        vfs_staging_path(v, n->sid, path, sizeof path);
        st_err e = vfs_staging_truncate(v, path, keep);
        if (e)
            return e;
    }
    n->stale_end = 0;
    return ST_OK;
}

/* Gives n a staging file of its own (empty, or with its fetched content). */
st_err vfs_make_local(st_vfs *v, vnode *n, int empty)
{
    while (n->fetching) /* a change never races a fetch's writes */
        pthread_cond_wait(&v->changed, &v->lock);
    if (n->sid && !empty)
        return ST_OK;
    if (!n->sid && !empty) {
        st_err e = vfs_fetch(v, n);
        if (e)
            return e;
        return ST_OK;
    }
    char path[PATH_MAX];
    uint64_t kept = 0; /* the staging file left to the running upload */
    /* A naming marker's version its step has not stored yet stays that
     * step's (docs/MOUNT_MODEL.md, "A naming marker replaced before its step is
     * stored"): its file is kept where it is. */
    int marker_kept = n->sid && vfs_keep_marker(v, n);
    if (n->sid && vfs_spare_in_upload(v, n->sid)) {
        /* Truncated in place, the upload would read the new version, or part
         * of it, as its snapshot's: a `latest` rewritten for step 3 was stored
         * in step 2 (docs/MOUNT_MODEL.md, "A file rewritten while its step
         * uploads"). The new version gets a staging file of its own. */
        st_err e = vfs_spare_keep_for_upload(v, n, &kept);
        if (e)
            return e;
    }
    vfs_set_write_failed(v, n, ST_OK); /* rewritten from the start */
    if (n->sid && n->size == 0 && n->stale_end) {
        /* Empty already (a create's O_TRUNC): a truncate would free the
         * recycled pages it was given for. */
    } else if (n->sid) {
        vfs_staging_path(v, n->sid, path, sizeof path);
        st_err e = vfs_staging_truncate(v, path, 0);
        if (e)
            return e;
        v->staged_bytes -= n->size;
        n->stale_end = 0;
    } else {
        uint64_t sid = v->next_sid++;
        /* Written over a recycled file when the pool has one: its stale
         * bytes are cut as rules 3 and 4 of docs/MOUNT_MODEL.md say. */
        uint64_t stale = vfs_spare_take(v, n, sid);
        if (!stale) {
            vfs_staging_path(v, sid, path, sizeof path);
            int fd;
            st_err e = vfs_staging_create(v, path, O_WRONLY, &fd);
            if (e) {
                if (marker_kept) /* the file stays as it was */
                    vfs_keep_undo(v, n);
                return e;
            }
            close(fd);
        }
        n->sid = sid;
        n->stale_end = stale;
    }
    n->write_front = 0;
    n->size = 0;
    n->version++;
    n->state = VFILE_WRITING;
    n->from_remote = 0;
    n->mtime_ns = st_now_ns();
    st_err e = vfs_journal_put_file(v, n);
    if (kept) { /* its row names the new file now; the pool's link stays */
        vfs_staging_path(v, kept, path, sizeof path);
        unlink(path);
    }
    return e;
}
