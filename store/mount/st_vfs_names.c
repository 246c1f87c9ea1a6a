/*
 * st_vfs_names — the namespace operations of st_vfs.h: lookup, forget,
 * getattr, setattr, chown, mkdir, unlink, rmdir, rename and readdir; the
 * attributes a vnode shows, and the checks every new name passes.
 *
 * Calls down only: the control entries (.ckptfs and what is in it), the
 * step rules (a file renamed or removed), a file's local copy (a
 * truncation), the deletions, the journal and the tree. Each operation takes
 * v->lock.
 */
#include "mount/st_vfs_handle.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_fsutil.h"

void vfs_node_attr(const vnode *n, st_vfs_attr *a)
{
    a->ino = n->ino;
    a->mode = n->mode;
    /* As a local file system: a directory's "." and its entry, and each
     * subdirectory's ".."; a file open after its unlink has no link. */
    a->nlink = S_ISDIR(n->mode) ? 2 + (uint32_t)n->nsubdirs : n->parent ? 1 : 0;
    a->uid = n->uid;
    a->gid = n->gid;
    a->size = S_ISDIR(n->mode) ? 4096 : n->size;
    a->mtime_ns = n->mtime_ns;
    a->ctime_ns = n->ctime_ns;
    a->atime_ns = n->atime_set ? n->atime_ns : n->mtime_ns;
}

static st_err check_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0)
        return st_seterr(ST_ERR_NAME, "empty name");
    if (len > NAME_MAX)
        return st_seterr(ST_ERR_TOO_LONG, "name longer than %d bytes", NAME_MAX);
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return st_seterr(ST_ERR_NAME, "reserved name");
    return ST_OK;
}

/* Checks that a new entry `name` may be made in dir: job directories only at
 * the root, no files at the root, and the path fits a manifest, also for the
 * `below` bytes of the longest path under the entry (a directory moved by a
 * rename: "/sub/file"); a file whose path does not fit could never be
 * stored, so the operation is refused instead of losing it at the upload. */
st_err vfs_check_new_entry(st_vfs *v, vnode *dir, const char *name, int is_dir, size_t below)
{
    st_err e = check_name(name);
    if (e)
        return e;
    if (dir == v->root) {
        if (!is_dir)
            return st_seterr(ST_ERR_NAME, "only job directories live at the mount's root");
        if (!st_name_is_valid(name, ST_JOB_MAX))
            return st_seterr(ST_ERR_NAME, "invalid job name");
        return ST_OK;
    }
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!vfs_job_path(dir, path, sizeof path) ||
        strlen(path) + 1 + strlen(name) + below > ST_MANIFEST_MAX_PATH)
        return st_seterr(ST_ERR_TOO_LONG, "a path would be longer than %d bytes",
                         ST_MANIFEST_MAX_PATH);
    return ST_OK;
}

/* Bytes of the longest path below n, relative to n ("/a/b": 4); 0 for a
 * file or an empty directory. */
static size_t longest_below(const vnode *n)
{
    size_t longest = 0;
    for (size_t i = 0; i < n->nkids; i++) {
        size_t len = 1 + strlen(n->kids[i]->name) + longest_below(n->kids[i]);
        if (len > longest)
            longest = len;
    }
    return longest;
}

st_err st_vfs_lookup(st_vfs *v, uint64_t parent, const char *name, st_vfs_attr *out)
{
    if (parent == ST_VFS_ROOT_INO && !strcmp(name, VFS_CTL_DIR_NAME)) {
        vfs_ctl_attr(v, ST_VFS_CTL_DIR_INO, out);
        return ST_OK;
    }
    if (parent == ST_VFS_CTL_DIR_INO)
        return vfs_ctl_lookup(v, name, out);
    if (strlen(name) > NAME_MAX) /* as any Linux file system: no such name can exist */
        return st_seterr(ST_ERR_TOO_LONG, "name longer than %d bytes", NAME_MAX);
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *dir = vfs_node_at(v, parent);
    vnode *n = dir && S_ISDIR(dir->mode) ? vfs_child(dir, name) : NULL;
    if (!dir)
        e = ST_ERR_NOT_FOUND;
    else if (!S_ISDIR(dir->mode))
        e = ST_ERR_NOT_DIR;
    else if (!n)
        e = ST_ERR_NOT_FOUND;
    else {
        n->nlookup++;
        vfs_node_attr(n, out);
    }
    pthread_mutex_unlock(&v->lock);
    return e;
}

void st_vfs_forget(st_vfs *v, uint64_t ino, uint64_t nlookup)
{
    if (ino <= ST_VFS_LAST_CTL_INO)
        return;
    pthread_mutex_lock(&v->lock);
    vnode *n = vfs_node_at(v, ino);
    if (n) {
        n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
        vfs_maybe_free(v, n);
    }
    pthread_mutex_unlock(&v->lock);
}

st_err st_vfs_getattr(st_vfs *v, uint64_t ino, st_vfs_attr *out)
{
    if (ino >= ST_VFS_CTL_DIR_INO && ino <= ST_VFS_LAST_CTL_INO &&
        (ino != ST_VFS_METRICS_INO || v->opts.metrics)) {
        vfs_ctl_attr(v, ino, out);
        return ST_OK;
    }
    pthread_mutex_lock(&v->lock);
    vnode *n = vfs_node_at(v, ino);
    if (n)
        vfs_node_attr(n, out);
    pthread_mutex_unlock(&v->lock);
    return n ? ST_OK : ST_ERR_NOT_FOUND;
}

/* A new entry's owner: the caller's, or (NULL) the mount's user's, which
 * vfs_node_new gave it. */
void vfs_set_owner(vnode *n, const st_vfs_owner *owner)
{
    if (owner) {
        n->uid = owner->uid;
        n->gid = owner->gid;
    }
}

/* After a change of n's attributes (lock held): its ctime, its journal row
 * (the root has none: its attributes last for the mount), *out. */
st_err vfs_attr_changed(st_vfs *v, vnode *n, st_vfs_attr *out)
{
    st_err e = ST_OK;
    n->ctime_ns = st_now_ns();
    if (n != v->root && n->parent)
        e = S_ISDIR(n->mode) ? vfs_journal_put_dir(v, n) : vfs_journal_put_file(v, n);
    vfs_node_attr(n, out);
    return e;
}

st_err st_vfs_setattr(st_vfs *v, uint64_t ino, int which, uint32_t mode, uint64_t size,
                      int64_t atime_ns, int64_t mtime_ns, st_vfs_handle *h, st_vfs_attr *out)
{
    if (ino <= ST_VFS_LAST_CTL_INO && ino != ST_VFS_ROOT_INO) {
        if ((ino == ST_VFS_COMMIT_INO || ino == ST_VFS_DRAIN_INO || ino == ST_VFS_WARMUP_INO) &&
            which == ST_VFS_SET_SIZE && size == 0) {
            vfs_ctl_attr(v, ino, out); /* O_TRUNC of a write-only control file: nothing to do */
            return ST_OK;
        }
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    }
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *n = vfs_node_at(v, ino);
    if (!n) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if ((which & ST_VFS_SET_SIZE) && S_ISDIR(n->mode)) {
        e = ST_ERR_IS_DIR;
        goto out;
    }
    if ((which & ST_VFS_SET_SIZE) && size > (uint64_t)INT64_MAX) {
        e = st_seterr(ST_ERR_TOO_BIG, "size %" PRIu64 " is past any file's", size);
        goto out;
    }
    if ((which & ST_VFS_SET_SIZE) && size != n->size) {
        if (size && n->sid && vfs_spare_in_upload(v, n->sid))
            v->upload_disturbed = 1; /* cut or grown under the upload's reads */
        if (size == 0)
            e = vfs_make_local(v, n, 1);
        else if (!n->sid)
            e = vfs_make_local(v, n, 0);
        if (e)
            goto out;
        if (n->sid && (e = vfs_cut_stale(v, n, h ? h->fd : -1)))
            goto out;
        if (n->size != 0 || size != 0) {
            if (h && h->fd >= 0) {
                if (ftruncate(h->fd, (off_t)size) < 0)
                    e = st_seterr(st_err_of_write_errno(errno), "truncate: %s", strerror(errno));
            } else {
                char path[PATH_MAX];
                vfs_staging_path(v, n->sid, path, sizeof path);
                e = vfs_staging_truncate(v, path, size);
            }
            if (e)
                goto out;
            v->staged_bytes = v->staged_bytes - n->size + size;
            n->size = size;
            n->version++;
            n->from_remote = 0;
            if (n->state == VFILE_DURABLE)
                n->state = VFILE_CLOSED;
        }
    }
    if (which & ST_VFS_SET_MODE)
        n->mode = (n->mode & S_IFMT) | (mode & 07777);
    if (which & ST_VFS_SET_MTIME)
        n->mtime_ns = mtime_ns;
    if (which & ST_VFS_SET_ATIME) {
        n->atime_ns = atime_ns;
        n->atime_set = 1;
    }
    e = vfs_attr_changed(v, n, out);
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_chown(st_vfs *v, uint64_t ino, uint32_t uid, uint32_t gid, st_vfs_attr *out)
{
    if (ino <= ST_VFS_LAST_CTL_INO && ino != ST_VFS_ROOT_INO) {
        st_err e = st_vfs_getattr(v, ino, out);
        if (!e && ((uid != ST_VFS_OWNER_KEEP && uid != out->uid) ||
                   (gid != ST_VFS_OWNER_KEEP && gid != out->gid)))
            e = st_seterr(ST_ERR_READ_ONLY, "status entries are the mount's user's");
        return e;
    }
    pthread_mutex_lock(&v->lock);
    st_err e = ST_ERR_NOT_FOUND;
    vnode *n = vfs_node_at(v, ino);
    if (n) {
        if (uid != ST_VFS_OWNER_KEEP)
            n->uid = uid;
        if (gid != ST_VFS_OWNER_KEEP)
            n->gid = gid;
        e = vfs_attr_changed(v, n, out);
    }
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_mkdir(st_vfs *v, uint64_t parent, const char *name, uint32_t mode,
                    const st_vfs_owner *owner, st_vfs_attr *out)
{
    if ((parent >= ST_VFS_CTL_DIR_INO && parent <= ST_VFS_LAST_CTL_INO) ||
        (parent == ST_VFS_ROOT_INO && !strcmp(name, VFS_CTL_DIR_NAME)))
        return st_seterr(ST_ERR_READ_ONLY, "reserved");
    pthread_mutex_lock(&v->lock);
    st_err e;
    vnode *dir = vfs_node_at(v, parent), *n;
    if (!dir)
        e = ST_ERR_NOT_FOUND;
    else if (!S_ISDIR(dir->mode))
        e = ST_ERR_NOT_DIR;
    else if ((e = vfs_check_new_entry(v, dir, name, 1, 0)))
        ;
    else if (vfs_child(dir, name))
        e = ST_ERR_EXISTS;
    else if (!(n = vfs_node_new(v, dir, name, S_IFDIR | (mode & 07777))))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    else {
        vfs_set_owner(n, owner);
        if (dir == v->root)
            vfs_job(v, name, 1);
        vfs_deletion_cancel(v, n);
        e = vfs_journal_put_dir(v, n);
        n->nlookup++;
        vfs_node_attr(n, out);
    }
    pthread_mutex_unlock(&v->lock);
    return e;
}

/* The unlink of regular file n, its removal begun (rm): dropped from staging,
 * the deletion committed. */
static st_err remove_file(st_vfs *v, vnode *n, vfs_removal *rm)
{
    st_err e = vfs_drop_file(v, n, 1, 1);
    if (e)
        vfs_journal_rollback(v); /* the file stays: the unlink failed */
    else
        e = vfs_removal_commit(v, rm);
    vjob *j = rm->jd ? vfs_job(v, rm->jd->name, 0) : NULL;
    if (j) /* it may have been the file with a failed write */
        vfs_retry_blocked_steps(v, j);
    return e;
}

/* The rmdir of empty directory n, its removal begun (rm). */
static st_err remove_dir(st_vfs *v, vnode *n, vfs_removal *rm)
{
    st_err e = ST_OK;
    if (rm->jd && (e = vfs_journal_delete(v, rm->jd->name, rm->path))) /* "" for a job: all */
        vfs_journal_rollback(v);
    else if (!(e = vfs_removal_commit(v, rm))) {
        vfs_unlink_node(v, n);
        vfs_maybe_free(v, n);
    }
    return e;
}

/* unlink (want_dir 0) or rmdir (1) of name in parent: the checks both share,
 * then the removal of a file or of a directory. */
static st_err remove_entry(st_vfs *v, uint64_t parent, const char *name, int want_dir)
{
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *dir = vfs_node_at(v, parent);
    vnode *n = dir && S_ISDIR(dir->mode) ? vfs_child(dir, name) : NULL;
    vfs_removal rm;
    if (!n)
        e = ST_ERR_NOT_FOUND;
    else if (!S_ISDIR(n->mode) != !want_dir)
        e = want_dir ? ST_ERR_NOT_DIR : ST_ERR_IS_DIR;
    else if (want_dir && n->nkids && !vfs_rmdir_drop_unseen(v, n))
        e = ST_ERR_NOT_EMPTY;
    else if (!(e = vfs_removal_begin(v, n, &rm)))
        e = want_dir ? remove_dir(v, n, &rm) : remove_file(v, n, &rm);
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_unlink(st_vfs *v, uint64_t parent, const char *name)
{
    if (parent == ST_VFS_CTL_DIR_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    return remove_entry(v, parent, name, 0);
}

st_err st_vfs_rmdir(st_vfs *v, uint64_t parent, const char *name)
{
    if (parent == ST_VFS_ROOT_INO && !strcmp(name, VFS_CTL_DIR_NAME))
        return st_seterr(ST_ERR_READ_ONLY, "reserved");
    return remove_entry(v, parent, name, 1);
}

/* 1 if n or anything under it lives only in the store. */
static int has_remote_only(const vnode *n)
{
    if (S_ISREG(n->mode))
        return !n->sid;
    for (size_t i = 0; i < n->nkids; i++)
        if (has_remote_only(n->kids[i]))
            return 1;
    return 0;
}

/* After a rename: files under n get their step from their new path, count
 * as changed (their path is part of the step), and settle. */
static void renamed_subtree(st_vfs *v, vjob *j, vnode *n)
{
    if (S_ISDIR(n->mode)) {
        for (size_t i = 0; i < n->nkids; i++)
            renamed_subtree(v, j, n->kids[i]);
        return;
    }
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!vfs_job_path(n, path, sizeof path))
        return;
    vfs_deletion_cancel(v, n);
    uint64_t step = vfs_step_of_path(v, path, NULL);
    if (step != VFS_NO_STEP)
        n->step = step;
    n->version++;
    n->from_remote = 0;
    if (n->state == VFILE_DURABLE)
        n->state = VFILE_CLOSED;
    /* The path itself was journaled by the rename (its error fails the
     * rename); this row adds the new step and state, which a restart would
     * otherwise take from the old row: the file is then uploaded again with
     * its step found again from its path by the next change. */
    (void)vfs_journal_put_file(v, n);
    if (n->writers == 0 && n->state != VFILE_WRITING)
        vfs_step_file_settled(v, j, n, 1);
}

st_err st_vfs_rename(st_vfs *v, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags)
{
    if (flags & ~(unsigned)ST_VFS_RENAME_NOREPLACE)
        return st_seterr(ST_ERR_UNSUPPORTED, "rename flags 0x%x", flags);
    if (parent <= ST_VFS_LAST_CTL_INO && parent != ST_VFS_ROOT_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    if (newparent <= ST_VFS_LAST_CTL_INO && newparent != ST_VFS_ROOT_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    pthread_mutex_lock(&v->lock);
    /* A file whose fetch is under way (a reader may have had every byte
     * already) is local once the fetch has checked it whole. */
    for (vnode *d, *f; (d = vfs_node_at(v, parent)) && S_ISDIR(d->mode) &&
                       (f = vfs_child(d, name)) && f->fetching;)
        pthread_cond_wait(&v->changed, &v->lock);
    st_err e = ST_OK;
    vnode *dir = vfs_node_at(v, parent), *ndir = vfs_node_at(v, newparent);
    vnode *n = dir && S_ISDIR(dir->mode) ? vfs_child(dir, name) : NULL;
    vnode *target = ndir && S_ISDIR(ndir->mode) ? vfs_child(ndir, newname) : NULL;
    char from[ST_MANIFEST_MAX_PATH + 1], to[ST_MANIFEST_MAX_PATH + 1];
    if (!n || !ndir) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if (!S_ISDIR(ndir->mode)) {
        e = ST_ERR_NOT_DIR;
        goto out;
    }
    if (target == n)
        goto out;
    if (dir == v->root || ndir == v->root || vfs_job_dir(dir) != vfs_job_dir(ndir)) {
        e = st_seterr(ST_ERR_CROSS, "rename across jobs or of a job directory");
        goto out;
    }
    if (target && (flags & ST_VFS_RENAME_NOREPLACE)) {
        e = st_seterr(ST_ERR_EXISTS, "%s exists", newname);
        goto out;
    }
    if ((e = vfs_check_new_entry(v, ndir, newname, S_ISDIR(n->mode), longest_below(n))))
        goto out;
    for (vnode *p = ndir; p; p = p->parent)
        if (p == n) {
            e = st_seterr(ST_ERR_INVALID, "cannot move a directory into itself");
            goto out;
        }
    if (has_remote_only(n)) {
        e = st_seterr(ST_ERR_CROSS, "%s lives only in the store", name);
        goto out;
    }
    if (target) {
        if (S_ISDIR(target->mode) && !S_ISDIR(n->mode)) {
            e = ST_ERR_IS_DIR;
            goto out;
        }
        if (!S_ISDIR(target->mode) && S_ISDIR(n->mode)) {
            e = ST_ERR_NOT_DIR;
            goto out;
        }
        if (S_ISDIR(target->mode) && target->nkids) {
            e = ST_ERR_NOT_EMPTY;
            goto out;
        }
    }
    vnode *jd = vfs_job_dir(n);
    vjob *j = vfs_job(v, jd->name, 1);
    if (!vfs_job_path(n, from, sizeof from)) {
        e = st_seterr(ST_ERR_NAME, "path too long");
        goto out;
    }
    if (target) {
        if (S_ISDIR(target->mode)) {
            char tp[ST_MANIFEST_MAX_PATH + 1];
            if (vfs_job_path(target, tp, sizeof tp) && (e = vfs_journal_delete(v, jd->name, tp)))
                goto out; /* nothing changed yet */
            vfs_unlink_node(v, target);
            vfs_maybe_free(v, target);
        } else if ((e = vfs_drop_file(v, target, 1, 1))) {
            goto out; /* nothing changed yet */
        }
    }
    char *nm = strdup(newname);
    if (!nm) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto out;
    }
    vfs_unlink_node(v, n);
    free(n->name);
    n->name = nm;
    if ((e = vfs_link(ndir, n)))
        goto out;
    n->ctime_ns = st_now_ns();
    if (vfs_job_path(n, to, sizeof to))
        e = vfs_journal_rename(v, jd->name, from, to);
    vfs_deletion_cancel(v, n); /* the step its new name names is written again */
    if (j) {
        renamed_subtree(v, j, n);
        vfs_retry_blocked_steps(v, j); /* the target may have been a file with a failed write */
    }
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_readdir(st_vfs *v, uint64_t ino, st_vfs_dirent **ents, size_t *n)
{
    *ents = NULL;
    *n = 0;
    st_vfs_dirent *out = NULL;
    size_t count = 0;
    if (ino == ST_VFS_CTL_DIR_INO)
        return vfs_ctl_readdir(v, ents, n);
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *d = vfs_node_at(v, ino);
    if (!d) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if (!S_ISDIR(d->mode)) {
        e = ST_ERR_NOT_DIR;
        goto out;
    }
    size_t extra = d == v->root ? 3 : 2;
    out = calloc(d->nkids + extra, sizeof *out);
    if (!out) {
        e = ST_ERR_NOMEM;
        goto out;
    }
    d->listed_ns = st_mono_ns();
    out[count++] = (st_vfs_dirent){d->ino, S_IFDIR, strdup(".")};
    out[count++] = (st_vfs_dirent){d->parent ? d->parent->ino : d->ino, S_IFDIR, strdup("..")};
    if (d == v->root)
        out[count++] = (st_vfs_dirent){ST_VFS_CTL_DIR_INO, S_IFDIR, strdup(VFS_CTL_DIR_NAME)};
    for (size_t i = 0; i < d->nkids; i++)
        out[count++] = (st_vfs_dirent){d->kids[i]->ino, d->kids[i]->mode, strdup(d->kids[i]->name)};
    for (size_t i = 0; i < count; i++)
        if (!out[i].name)
            e = ST_ERR_NOMEM;
out:
    pthread_mutex_unlock(&v->lock);
    if (e) {
        st_vfs_dirents_free(out, count);
        return e;
    }
    *ents = out;
    *n = count;
    return ST_OK;
}

void st_vfs_dirents_free(st_vfs_dirent *ents, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ents[i].name);
    free(ents);
}
