/*
 * st_vfs_handles — opening files: open and create give a handle on the
 * file's staging copy (made local first for a writer; for a reader of a
 * file only in the store, the fetch that fills it run by run), count a
 * writer in its step, and let a read wait for its range of that fetch.
 * A handle's writes and release: st_vfs_write.c.
 *
 * Calls down only: the namespace's checks and attributes (create), a file's
 * local copy, the step rules (a writer opens), the control entries and the
 * fetch. Each operation takes v->lock.
 */
#include "mount/st_vfs_handle.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_fsutil.h"

static st_err open_staging_fd(st_vfs *v, uint64_t sid, int writable, int *fd)
{
    char path[PATH_MAX];
    vfs_staging_path(v, sid, path, sizeof path);
    return vfs_staging_open(v, path, writable ? O_RDWR : O_RDONLY, fd);
}

/* RANK and WORLD_SIZE of a writer process, from its environment (torchrun
 * and every launcher set them). Unknown stays -1 / 0. */
static void writer_rank(pid_t pid, int32_t *rank, uint32_t *world)
{
    char path[64], buf[65536];
    *rank = -1;
    *world = 0;
    if (pid <= 0)
        return;
    snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t got = 0;
    st_read_full(fd, buf, sizeof buf - 1, &got, path);
    close(fd);
    buf[got] = '\0';
    for (size_t i = 0; i < got; i += strlen(buf + i) + 1) {
        const char *kv = buf + i;
        char *end;
        if (!strncmp(kv, "RANK=", 5)) {
            long r = strtol(kv + 5, &end, 10);
            if (*end == '\0' && kv[5] && r >= 0 && r < INT32_MAX)
                *rank = (int32_t)r;
        } else if (!strncmp(kv, "WORLD_SIZE=", 11)) {
            unsigned long w = strtoul(kv + 11, &end, 10);
            if (*end == '\0' && kv[11] && w > 0 && w < (1ul << 24))
                *world = (uint32_t)w;
        }
    }
    if (*rank >= 0 && *world && (uint32_t)*rank >= *world)
        *rank = -1; /* inconsistent: trust neither */
}

/* Opens n (lock held; may drop it to fetch). */
static st_err open_node(st_vfs *v, vnode *n, int flags, pid_t pid, st_vfs_handle **out)
{
    int writable = (flags & O_ACCMODE) != O_RDONLY;
    st_err e = ST_OK;
    if (S_ISDIR(n->mode))
        return ST_ERR_IS_DIR;
    n->opens++; /* pins n while a fetch drops the lock */
    vfetch *fx = NULL;
    if (writable && (flags & O_TRUNC)) {
        e = vfs_make_local(v, n, 1);
        if (!e) /* POSIX: open(O_TRUNC) of an existing file marks both */
            n->mtime_ns = n->ctime_ns = st_now_ns();
    } else if (writable && !n->sid)
        e = vfs_make_local(v, n, 0);
    else if (!n->sid) /* read-only: served run by run as the fetch verifies them */
        e = vfs_fetch_begin(v, n, &fx);
    st_vfs_handle *h = NULL;
    if (!e && !(h = calloc(1, sizeof *h)))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e && fx && fx->err) /* it ended at once (nothing could be started) */
        e = st_seterr(fx->err, "%s", fx->msg);
    if (!e)
        e = open_staging_fd(v, fx ? fx->sid : n->sid, writable, &h->fd);
    if (e) {
        if (fx)
            vfs_fetch_put(fx);
        free(h);
        n->opens--;
        vfs_spare_last_close(v, n);
        vfs_maybe_free(v, n);
        return e;
    }
    /* A writer that may change bytes the running upload reads (an append
     * changes none of them: docs/MOUNT_MODEL.md, "A file rewritten while its
     * step uploads"). */
    if (writable && !(flags & (O_TRUNC | O_APPEND)) && vfs_spare_in_upload(v, n->sid))
        v->upload_disturbed = 1;
    h->node = n;
    h->fetch = fx;
    h->writable = writable;
    h->step = VFS_NO_STEP;
    h->start_version = n->version;
    /* A rewrite (O_TRUNC, above) is whole again; a reader of the torn
     * version must not take zeros or an older file's bytes for it. */
    h->torn = n->write_failed == ST_ERR_CORRUPT;
    vfs_handle_link(v, h);
    if (writable) {
        int32_t rank;
        uint32_t world;
        writer_rank(pid, &rank, &world);
        if (rank >= 0 || world) {
            n->rank = rank;
            n->world = world;
        }
        n->writers++;
        vnode *jd = vfs_job_dir(n);
        vjob *j = jd ? vfs_job(v, jd->name, 1) : NULL;
        if (j) {
            snprintf(h->job, sizeof h->job, "%s", j->name);
            h->step = n->step; /* the step whose writer count it holds */
            vfs_step_writer_open(v, j, n, pid);
        }
    }
    *out = h;
    return ST_OK;
}

st_err st_vfs_create(st_vfs *v, uint64_t parent, const char *name, uint32_t mode, int flags,
                     pid_t pid, const st_vfs_owner *owner, st_vfs_attr *out, st_vfs_handle **h)
{
    *h = NULL;
    if (parent == ST_VFS_CTL_DIR_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *dir = vfs_node_at(v, parent);
    vnode *n = NULL;
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!dir) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if (!S_ISDIR(dir->mode)) {
        e = ST_ERR_NOT_DIR;
        goto out;
    }
    n = vfs_child(dir, name);
    if (n) {
        if (flags & O_EXCL)
            e = ST_ERR_EXISTS;
        else
            e = open_node(v, n, flags, pid, h);
        if (!e) {
            n->nlookup++;
            vfs_node_attr(n, out);
        }
        goto out;
    }
    if ((e = vfs_check_new_entry(v, dir, name, 0, 0)))
        goto out;
    if (!(n = vfs_node_new(v, dir, name, S_IFREG | (mode & 07777)))) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto out;
    }
    vfs_set_owner(n, owner);
    if (vfs_job_path(n, path, sizeof path))
        n->step = vfs_step_of_path(v, path, NULL);
    vfs_deletion_cancel(v, n);
    if ((e = vfs_make_local(v, n, 1)) || (e = open_node(v, n, flags | O_RDWR, pid, h))) {
        /* Undone whatever the journal says: a row left behind names an
         * empty WRITING file, which recovery drops. */
        (void)vfs_drop_file(v, n, 1, 0);
        goto out;
    }
    n->nlookup++;
    vfs_node_attr(n, out);
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_open_file(st_vfs *v, uint64_t ino, int flags, pid_t pid, st_vfs_handle **h)
{
    *h = NULL;
    if (ino >= ST_VFS_CTL_DIR_INO && ino <= ST_VFS_LAST_CTL_INO)
        return vfs_ctl_open(v, ino, flags, h);
    pthread_mutex_lock(&v->lock);
    vnode *n = vfs_node_at(v, ino);
    st_err e = n ? open_node(v, n, flags, pid, h) : ST_ERR_NOT_FOUND;
    pthread_mutex_unlock(&v->lock);
    return e;
}

int st_vfs_handle_fd(const st_vfs_handle *h)
{
    return h->fd;
}

st_err st_vfs_read_wait(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t *len)
{
    if (h->torn)
        return st_seterr(ST_ERR_CORRUPT,
                         "torn file: its bytes never reached the staging disk before the machine "
                         "stopped; rewrite or remove it");
    if (h->node && atomic_load_explicit(&h->node->stale_end, memory_order_relaxed)) {
        /* A recycled file not yet closed: its staging file holds stale
         * bytes past the file's size (rule 3). */
        pthread_mutex_lock(&v->lock);
        uint64_t size = h->node->size;
        pthread_mutex_unlock(&v->lock);
        *len = off >= size ? 0 : size - off < *len ? (size_t)(size - off) : *len;
    }
    if (!h->fetch) /* set at open only: no lock needed to see it */
        return ST_OK;
    pthread_mutex_lock(&v->lock);
    h->fetch->reads++; /* holds the whole-file check back (fetch_check_pace) */
    st_err e = vfs_fetch_wait_range(v, h->fetch, off, *len);
    pthread_mutex_unlock(&v->lock);
    return e;
}
