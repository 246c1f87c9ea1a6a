/*
 * ckptfs — the FUSE daemon: mounts st_vfs (store/) with libfuse's low-level
 * API on a multithreaded loop. Only glue lives here: option parsing, the
 * mapping of FUSE requests to st_vfs calls and of st_err codes to errnos
 * (errmap(), the one place errnos are made), and zero-copy data paths
 * (reads and writes go between the kernel and the staging file's fd through
 * fuse_buf_copy / fuse_reply_data, as libfuse's passthrough_ll does).
 *
 *   ckptfs [MOUNTPOINT] [--config FILE] [--store URL] [--staging DIR] ...
 *          [-f] [-d] [-o FUSE_OPTS]
 *
 * The options are the rows of fs_option_table (fs_options.c); a
 * configuration file (fs_config.c) sets the same ones; messages go through
 * fs_log.c. Signals (docs/SHUTDOWN.md): SIGTERM, SIGINT and SIGHUP end the
 * FUSE loop (libfuse's handlers), then st_vfs_close drains; SIGUSR1 is a
 * preemption notice (fs_drain_signal.c). The service manager hears READY=1
 * once the mount serves and STOPPING=1 when the loop ends (fs_notify.c).
 *
 * Threads: libfuse's worker threads call the ops concurrently; all shared
 * state is inside st_vfs.
 */
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptstore.h"
#include "fs_config.h"
#include "fs_drain_signal.h"
#include "fs_log.h"
#include "fs_notify.h"
#include "fs_metrics.h"
#include "fs_metrics_http.h"
#include "fs_mountpoint.h"
#include "fs_options.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE                                                                           \
    (1 << 0) /* renameat2(2), <linux/fs.h>; glibc's <stdio.h> with _GNU_SOURCE */
#endif

#define ATTR_TIMEOUT 1.0
#define MAX_WRITE    (1u << 20)

static st_vfs *vfs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

/* The one place st_err becomes an errno. */
static int errmap(st_err e)
{
    switch (e) {
    case ST_OK: return 0;
    case ST_ERR_NOMEM: return ENOMEM;
    case ST_ERR_NOT_FOUND: return ENOENT;
    case ST_ERR_INVALID: return EINVAL;
    case ST_ERR_NOSPACE: return ENOSPC;
    case ST_ERR_EXISTS: return EEXIST;
    case ST_ERR_UNSUPPORTED: return ENOTSUP;
    case ST_ERR_NOT_DIR: return ENOTDIR;
    case ST_ERR_IS_DIR: return EISDIR;
    case ST_ERR_NOT_EMPTY: return ENOTEMPTY;
    case ST_ERR_READ_ONLY: return EACCES;
    case ST_ERR_NAME: return EINVAL;
    case ST_ERR_BUSY: return EBUSY;
    case ST_ERR_CROSS: return EXDEV;
    case ST_ERR_TOO_LONG: return ENAMETOOLONG;
    case ST_ERR_TOO_BIG: return EFBIG;
    case ST_ERR_KEY: return EACCES; /* the key file cannot open what was asked for */
    case ST_ERR_IO:
    case ST_ERR_TRANSIENT:
    case ST_ERR_PERMANENT:
    case ST_ERR_AUTH:
    case ST_ERR_CORRUPT: return EIO;
    }
    return EIO;
}

static void reply_err(fuse_req_t req, st_err e)
{
    fuse_reply_err(req, errmap(e));
}

static void to_stat(const st_vfs_attr *a, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_ino = a->ino;
    st->st_mode = a->mode;
    st->st_nlink = a->nlink;
    st->st_size = (off_t)a->size;
    st->st_blksize = 1 << 20;
    st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
    st->st_uid = a->uid;
    st->st_gid = a->gid;
    st->st_mtim.tv_sec = a->mtime_ns / 1000000000;
    st->st_mtim.tv_nsec = a->mtime_ns % 1000000000;
    st->st_ctim.tv_sec = a->ctime_ns / 1000000000;
    st->st_ctim.tv_nsec = a->ctime_ns % 1000000000;
    st->st_atim.tv_sec = a->atime_ns / 1000000000;
    st->st_atim.tv_nsec = a->atime_ns % 1000000000;
}

static void reply_entry(fuse_req_t req, const st_vfs_attr *a)
{
    struct fuse_entry_param e;
    memset(&e, 0, sizeof e);
    e.ino = a->ino;
    e.attr_timeout = ATTR_TIMEOUT;
    e.entry_timeout = ATTR_TIMEOUT;
    to_stat(a, &e.attr);
    fuse_reply_entry(req, &e);
}

static st_vfs_handle *handle_of(const struct fuse_file_info *fi)
{
    return (st_vfs_handle *)(uintptr_t)fi->fh;
}

/* ---- ops ---- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* 1 MiB requests: 128 KiB ones were ~30% slower, measured with libfuse
     * 3.14 on the project machine (docs/MOUNT_MODEL.md, "What a write
     * does"). */
    conn->max_write = MAX_WRITE;
    conn->max_read = 0;
    conn->max_readahead = MAX_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE)
        conn->want |= FUSE_CAP_SPLICE_MOVE;
    if (conn->capable & FUSE_CAP_SPLICE_READ)
        conn->want |= FUSE_CAP_SPLICE_READ;
    /* The kernel clears setuid/setgid when someone without CAP_FSETID
     * writes, truncates or chowns a file (a setattr of the mode), as on a
     * local file system; libfuse would otherwise leave that to us. */
    conn->want &= ~FUSE_CAP_HANDLE_KILLPRIV;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    st_vfs_attr a;
    st_err e = st_vfs_lookup(vfs_of(req), parent, name, &a);
    if (e)
        reply_err(req, e);
    else
        reply_entry(req, &a);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    st_vfs_forget(vfs_of(req), ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    for (size_t i = 0; i < count; i++)
        st_vfs_forget(vfs_of(req), forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    st_vfs_attr a;
    struct stat st;
    st_err e = st_vfs_getattr(vfs_of(req), ino, &a);
    if (e) {
        reply_err(req, e);
        return;
    }
    to_stat(&a, &st);
    fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static int64_t ns_of(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

static int64_t now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return ns_of(&now);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    int which = 0;
    int64_t atime = 0, mtime = 0;
    st_vfs_attr a;
    struct stat st;
    st_err e;
    /* chown: the kernel allowed it (default_permissions: a change of owner
     * needs CAP_CHOWN, as on a local file system); a chown that changes
     * nothing, as cp -a and rsync -a do, succeeds. */
    int owner_change = (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) != 0;
    if (owner_change) {
        uint32_t uid = to_set & FUSE_SET_ATTR_UID ? (uint32_t)attr->st_uid : ST_VFS_OWNER_KEEP;
        uint32_t gid = to_set & FUSE_SET_ATTR_GID ? (uint32_t)attr->st_gid : ST_VFS_OWNER_KEEP;
        if ((e = st_vfs_chown(vfs_of(req), ino, uid, gid, &a))) {
            reply_err(req, e);
            return;
        }
    }
    if (to_set & FUSE_SET_ATTR_MODE)
        which |= ST_VFS_SET_MODE;
    if (to_set & FUSE_SET_ATTR_SIZE)
        which |= ST_VFS_SET_SIZE;
    if (to_set & (FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_MTIME)) {
        which |= ST_VFS_SET_MTIME;
        mtime = to_set & FUSE_SET_ATTR_MTIME_NOW ? now_ns() : ns_of(&attr->st_mtim);
    }
    if (to_set & (FUSE_SET_ATTR_ATIME_NOW | FUSE_SET_ATTR_ATIME)) {
        which |= ST_VFS_SET_ATIME;
        atime = to_set & FUSE_SET_ATTR_ATIME_NOW ? now_ns() : ns_of(&attr->st_atim);
    }
    if (owner_change && !which)
        e = ST_OK; /* a chown by itself: a holds the attributes */
    else
        e = st_vfs_setattr(vfs_of(req), ino, which, attr->st_mode, (uint64_t)attr->st_size, atime,
                           mtime, fi ? handle_of(fi) : NULL, &a);
    if (e) {
        reply_err(req, e);
        return;
    }
    to_stat(&a, &st);
    fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

/* Who makes a new entry: the calling process (its fsuid and fsgid). */
static st_vfs_owner owner_of(fuse_req_t req)
{
    const struct fuse_ctx *ctx = fuse_req_ctx(req);
    return (st_vfs_owner){(uint32_t)ctx->uid, (uint32_t)ctx->gid};
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    st_vfs_attr a;
    st_vfs_owner owner = owner_of(req);
    st_err e = st_vfs_mkdir(vfs_of(req), parent, name, mode, &owner, &a);
    if (e)
        reply_err(req, e);
    else
        reply_entry(req, &a);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fuse_reply_err(req, errmap(st_vfs_unlink(vfs_of(req), parent, name)));
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    fuse_reply_err(req, errmap(st_vfs_rmdir(vfs_of(req), parent, name)));
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    /* renameat2: RENAME_NOREPLACE is an existence check the model does
     * under its lock; RENAME_EXCHANGE and RENAME_WHITEOUT are not offered. */
    if (flags & ~(unsigned)RENAME_NOREPLACE) {
        fuse_reply_err(req, EINVAL);
        return;
    }
    unsigned vflags = (flags & RENAME_NOREPLACE) ? ST_VFS_RENAME_NOREPLACE : 0;
    fuse_reply_err(req,
                   errmap(st_vfs_rename(vfs_of(req), parent, name, newparent, newname, vflags)));
}

static void op_unsupported_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
                                const char *newname)
{
    (void)ino, (void)newparent, (void)newname;
    fuse_reply_err(req, ENOTSUP);
}

static void op_unsupported_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
                                   const char *name)
{
    (void)link, (void)parent, (void)name;
    fuse_reply_err(req, ENOTSUP);
}

static void op_unsupported_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                                 dev_t rdev)
{
    (void)parent, (void)name, (void)rdev;
    /* mknod of a regular file is how some tools create files */
    fuse_reply_err(req, S_ISREG(mode) ? ENOSYS : ENOTSUP);
}

/* How the kernel caches a file opened through fi (docs/MOUNT_MODEL.md, "One
 * copy in the page cache"). A virtual file is direct I/O: its size is not known
 * up front. So is a file opened write-only: through the page cache every
 * byte a trainer writes would be cached twice, in the mount's pages and in
 * the staging file's, and the second copy made a save of 1 GiB allocate
 * 2 GiB of page cache. Direct I/O loses nothing there: mmap needs a
 * readable descriptor, and readers' own opens stay cached (the kernel
 * drops their pages over a range a direct write changes). */
static void set_cache_mode(struct fuse_file_info *fi, const st_vfs_handle *h)
{
    if (st_vfs_handle_fd(h) < 0 || (fi->flags & O_ACCMODE) == O_WRONLY)
        fi->direct_io = 1;
}

/* A direct-I/O write does not clear set-user-ID and set-group-ID in the
 * kernel (a write through the page cache does, by a setattr): the daemon
 * does it. It cannot see the writer's capabilities; like the kernel for
 * the superuser, it lets uid 0 keep the bits (CAP_FSETID). */
static void set_setid_rule(fuse_req_t req, struct fuse_file_info *fi, st_vfs_handle *h)
{
    if ((fi->flags & O_ACCMODE) != O_RDONLY && fuse_req_ctx(req)->uid != 0)
        st_vfs_handle_drops_setid(h);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    st_vfs_handle *h;
    st_err e = st_vfs_open_file(vfs_of(req), ino, fi->flags, fuse_req_ctx(req)->pid, &h);
    if (e) {
        reply_err(req, e);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)h;
    set_cache_mode(fi, h);
    set_setid_rule(req, fi, h);
    fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    st_vfs_handle *h;
    st_vfs_attr a;
    st_vfs_owner owner = owner_of(req);
    st_err e = st_vfs_create(vfs_of(req), parent, name, mode, fi->flags, fuse_req_ctx(req)->pid,
                             &owner, &a, &h);
    if (e) {
        reply_err(req, e);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)h;
    set_cache_mode(fi, h);
    set_setid_rule(req, fi, h);
    struct fuse_entry_param ep;
    memset(&ep, 0, sizeof ep);
    ep.ino = a.ino;
    ep.attr_timeout = ep.entry_timeout = ATTR_TIMEOUT;
    to_stat(&a, &ep.attr);
    fuse_reply_create(req, &ep, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    (void)ino;
    st_vfs_handle *h = handle_of(fi);
    int fd = st_vfs_handle_fd(h);
    if (fd < 0) {
        char *buf = malloc(size ? size : 1);
        if (!buf) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        size_t n = st_vfs_handle_read(h, (uint64_t)off, buf, size);
        fuse_reply_buf(req, buf, n);
        free(buf);
        return;
    }
    /* A file still being fetched: its range must have arrived and been
     * verified first (docs/WARMUP.md). */
    st_err e = st_vfs_read_wait(vfs_of(req), h, (uint64_t)off, &size);
    if (e) {
        reply_err(req, e);
        return;
    }
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
    bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    bv.buf[0].fd = fd;
    bv.buf[0].pos = off;
    fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

/* Copies a write's len bytes from in to the staging file out. A short copy
 * or ENOSPC means the staging disk is full: the pool of recycled staging
 * files gives its room back, once, and the copy goes on where it stopped
 * (fuse_buf_copy advances both vectors by what it copied; a failed splice
 * consumes nothing from the pipe, whose buffers the kernel releases only
 * for bytes written). */
static ssize_t copy_to_staging(st_vfs *v, struct fuse_bufvec *out, struct fuse_bufvec *in,
                               size_t len)
{
    ssize_t n = fuse_buf_copy(out, in, 0);
    int full = n == -ENOSPC || n == -EDQUOT || (n >= 0 && (size_t)n < len);
    if (!full || !st_vfs_drop_spares(v))
        return n;
    ssize_t more = fuse_buf_copy(out, in, 0);
    if (n < 0)
        return more;
    return more > 0 ? n + more : n;
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
                         struct fuse_file_info *fi)
{
    (void)ino;
    st_vfs *v = vfs_of(req);
    st_vfs_handle *h = handle_of(fi);
    size_t len = fuse_buf_size(in);
    if (st_vfs_handle_fd(h) < 0) { /* a control file: the bytes are a command */
        char *mem = malloc(len ? len : 1);
        if (!mem) {
            fuse_reply_err(req, ENOMEM);
            return;
        }
        struct fuse_bufvec dst = FUSE_BUFVEC_INIT(len);
        dst.buf[0].mem = mem;
        ssize_t n = fuse_buf_copy(&dst, in, 0);
        st_err ce = n < 0 ? ST_ERR_IO : st_vfs_handle_write(v, h, mem, (size_t)n);
        free(mem);
        if (ce) {
            fs_log_write(FS_LOG_WARN, st_errmsg());
            reply_err(req, ce);
        } else {
            fuse_reply_write(req, (size_t)n);
        }
        return;
    }
    st_err e = st_vfs_write_prepare(v, h, (uint64_t)off, len);
    if (e) {
        reply_err(req, e);
        return;
    }
    struct fuse_bufvec out = FUSE_BUFVEC_INIT(len);
    out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    out.buf[0].fd = st_vfs_handle_fd(h);
    out.buf[0].pos = off;
    ssize_t n = copy_to_staging(v, &out, in, len);
    if (n < 0) {
        /* The staging disk refused the bytes: the file is not what the
         * writer meant, and must not be published as it is. */
        st_vfs_write_failed(v, h, n == -ENOSPC || n == -EDQUOT ? ST_ERR_NOSPACE : ST_ERR_IO);
        fuse_reply_err(req, (int)-n);
        return;
    }
    st_vfs_write_done(v, h, (uint64_t)off, (size_t)n);
    fuse_reply_write(req, (size_t)n);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    fuse_reply_err(req, errmap(st_vfs_flush(vfs_of(req), handle_of(fi))));
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino, (void)datasync;
    fuse_reply_err(req, errmap(st_vfs_fsync(vfs_of(req), handle_of(fi))));
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    st_vfs_release(vfs_of(req), handle_of(fi));
    fuse_reply_err(req, 0);
}

typedef struct dir_handle {
    st_vfs_dirent *ents;
    size_t n;
} dir_handle;

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    dir_handle *d = calloc(1, sizeof *d);
    if (!d) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    st_err e = st_vfs_readdir(vfs_of(req), ino, &d->ents, &d->n);
    if (e) {
        free(d);
        reply_err(req, e);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    (void)ino;
    dir_handle *d = (dir_handle *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    size_t used = 0;
    for (size_t i = (size_t)off; i < d->n; i++) {
        struct stat st = {.st_ino = d->ents[i].ino, .st_mode = d->ents[i].mode};
        size_t need =
            fuse_add_direntry(req, buf + used, size - used, d->ents[i].name, &st, (off_t)(i + 1));
        if (need > size - used)
            break;
        used += need;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    dir_handle *d = (dir_handle *)(uintptr_t)fi->fh;
    st_vfs_dirents_free(d->ents, d->n);
    free(d);
    fuse_reply_err(req, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    (void)ino;
    struct statvfs sv;
    st_err e = st_vfs_statfs(vfs_of(req), &sv);
    if (e) {
        reply_err(req, e);
        return;
    }
    sv.f_namemax = NAME_MAX;
    fuse_reply_statfs(req, &sv);
}

static const struct fuse_lowlevel_ops ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .link = op_unsupported_link,
    .symlink = op_unsupported_symlink,
    .mknod = op_unsupported_mknod,
    .open = op_open,
    .create = op_create,
    .read = op_read,
    .write_buf = op_write_buf,
    .flush = op_flush,
    .fsync = op_fsync,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .statfs = op_statfs,
};

/* ---- main ---- */

static void usage(FILE *out)
{
    fprintf(out, "usage: ckptfs [MOUNTPOINT] [options]\n\n"
                 "Mounts checkpoint storage: trainers write checkpoints into MOUNTPOINT/<job>/;\n"
                 "complete steps are deduplicated, compressed and uploaded to the store in the\n"
                 "background; durable steps from the store are listed and readable.\n\n"
                 "Options (each also a key of the --config file, ckptfs.conf(5)):\n");
    fs_options_usage(out);
    fprintf(out, "  -f                   stay in the foreground, log to stderr\n"
                 "  -d                   FUSE debug output (implies -f)\n"
                 "  -h, --help           this help\n"
                 "  --version            version\n\n"
                 "Unmount with: fusermount3 -u MOUNTPOINT\n"
                 "Status: MOUNTPOINT/.ckptfs/status (JSON); metrics: MOUNTPOINT/.ckptfs/metrics\n"
                 "(Prometheus text, also on --metrics-listen)\n");
}

static int default_staging(char *buf, size_t cap)
{
    const char *base = getenv("XDG_STATE_HOME");
    const char *home = getenv("HOME");
    int n;
    if (base && base[0] == '/')
        n = snprintf(buf, cap, "%s/ckptfs/staging", base);
    else
        n = snprintf(buf, cap, "%s/.local/state/ckptfs/staging",
                     home && home[0] == '/' ? home : "/tmp");
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

enum { O_HELP = 'h', O_VERSION = 1 };

/* Flags of the command line that are not settings (fs_option_table). */
static const struct option flag_opts[] = {
    {"help", no_argument, NULL, O_HELP},
    {"version", no_argument, NULL, O_VERSION},
};

typedef struct cli_flags {
    int foreground, debug;
} cli_flags;

/* One getopt_long pass over argv. The first pass (config_only) applies only
 * --config, so the file can be read before the second pass applies every
 * other option over it: the command line wins. Returns -1 to go on, or the
 * exit code (0 after --help/--version). */
static int parse_argv(int argc, char **argv, const struct option *lopts, const char *shortopts,
                      int config_only, fs_settings *s, cli_flags *f)
{
    const fs_option *config_row = fs_option_find("config");
    int ch;
    optind = 0; /* glibc: a full re-scan */
    while ((ch = getopt_long(argc, argv, shortopts, lopts, NULL)) != -1) {
        const fs_option *o = fs_option_for_getopt(ch);
        char why[256];
        if (o) {
            if (config_only != (o == config_row))
                continue;
            if (fs_option_set(o, optarg, s, why, sizeof why)) {
                fprintf(stderr, "ckptfs: --%s %s\n", o->name, why);
                return 2;
            }
            continue;
        }
        switch (ch) {
        case 'f': f->foreground = 1; break;
        case 'd': f->debug = f->foreground = 1; break;
        case O_HELP: usage(stdout); return 0;
        case O_VERSION:
            printf("ckptfs %s (libfuse %s)\n", CKPT_PROJECT_VERSION, fuse_pkgversion());
            return 0;
        default: usage(stderr); return 2;
        }
    }
    if (config_only)
        return -1;
    if (optind < argc - 1) {
        fprintf(stderr, "ckptfs: expected one MOUNTPOINT, got %d arguments\n", argc - optind);
        usage(stderr);
        return 2;
    }
    char why[256];
    if (optind == argc - 1 &&
        fs_option_set(fs_option_find("mountpoint"), argv[optind], s, why, sizeof why)) {
        fprintf(stderr, "ckptfs: MOUNTPOINT %s\n", why);
        return 2;
    }
    if (!s->mountpoint) {
        fprintf(stderr, "ckptfs: no MOUNTPOINT (argument, --mountpoint or mountpoint =)\n");
        usage(stderr);
        return 2;
    }
    return -1;
}

/* "subtype=ckptfs,fsname=SOURCE", SOURCE escaped as -o wants (a ',' or a
 * '\\' behind a backslash), or NULL when out of memory. */
static char *fstab_opts(const char *source)
{
    static const char head[] = "subtype=ckptfs,fsname=";
    char *opts = malloc(sizeof head + 2 * strlen(source));
    if (!opts)
        return NULL;
    char *p = opts + sizeof head - 1;
    memcpy(opts, head, sizeof head - 1);
    for (; *source; source++) {
        if (*source == ',' || *source == '\\')
            *p++ = '\\';
        *p++ = *source;
    }
    *p = '\0';
    return opts;
}

/* The mount's FUSE arguments: -o from the options, and under --config the
 * source and type that mount(8) and /proc/mounts show for an fstab entry
 * ("FILE MOUNTPOINT fuse.ckptfs"). default_permissions always: the kernel
 * then checks modes and owners against the attributes st_vfs reports, and
 * with allow_other or allow_root other users meet the same rules as on a
 * local file system (docs/MOUNT.md, "Other users on the node"); the daemon
 * checks none itself. */
static int fuse_args_of(const fs_settings *s, const cli_flags *f, const char *argv0,
                        struct fuse_args *args)
{
    char *typed = s->config ? fstab_opts(s->config) : NULL;
    int bad = (s->config && !typed) || fuse_opt_add_arg(args, argv0) ||
              fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, "default_permissions");
    if (s->fuse_opts)
        bad = bad || fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, s->fuse_opts);
    if (typed)
        bad = bad || fuse_opt_add_arg(args, "-o") || fuse_opt_add_arg(args, typed);
    else /* the type a second daemon looks for (fs_mountpoint.h) */
        bad = bad || fuse_opt_add_arg(args, "-osubtype=ckptfs");
    if (f->debug)
        bad = bad || fuse_opt_add_arg(args, "-d");
    free(typed);
    return bad ? -1 : 0;
}

/* Credentials from a (mode-checked) configuration file reach the S3
 * backend the way the environment's do; the process environment set here
 * is not the one /proc/PID/environ shows. */
static int export_secrets(const fs_settings *s)
{
    if (s->aws_access_key_id && setenv("AWS_ACCESS_KEY_ID", s->aws_access_key_id, 1))
        return -1;
    if (s->aws_secret_access_key && setenv("AWS_SECRET_ACCESS_KEY", s->aws_secret_access_key, 1))
        return -1;
    return 0;
}

/* --prefetch latest|none|JOB,...: warm-up requests (docs/WARMUP.md). v NULL:
 * only checks spec (before the mount; an error says why). Returns 0 or -1. */
static int prefetch_start(st_vfs *v, const char *spec)
{
    if (!strcmp(spec, "none"))
        return 0;
    if (!strcmp(spec, "latest")) {
        if (v && st_vfs_warmup(v, NULL, UINT64_MAX))
            fs_logf(FS_LOG_WARN, "--prefetch: %s", st_errmsg());
        return 0;
    }
    for (const char *p = spec; *p;) {
        size_t len = strcspn(p, ",");
        char job[256];
        if (len == 0 || len >= sizeof job) {
            fs_logf(FS_LOG_ERROR, "--prefetch wants latest, none or JOB,JOB...: got '%s'", spec);
            return -1;
        }
        memcpy(job, p, len);
        job[len] = '\0';
        if (!v && !st_vfs_job_name_ok(job)) {
            fs_logf(FS_LOG_ERROR, "--prefetch: '%s' is not a job name", job);
            return -1;
        }
        if (v && st_vfs_warmup(v, job, UINT64_MAX))
            fs_logf(FS_LOG_WARN, "--prefetch %s: %s", job, st_errmsg());
        p += len + (p[len] == ',');
    }
    return 0;
}

int main(int argc, char **argv)
{
    fs_settings s;
    fs_config *conf = NULL;
    cli_flags flags = {0, 0};
    char shortopts[16], why[512];
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    st_vfs *v = NULL;
    fs_drain_signal *usr1 = NULL;
    fs_metrics_http *metrics_port = NULL;
    int rc = 1;
    /* A fixed mmap threshold (docs/MEMORY.md, "malloc and freed memory"):
     * glibc otherwise raises it to the size of any large block freed, after
     * which pack and fetch buffers (1-32 MiB) come from per-thread heaps that
     * keep them resident once freed: 64 ranks resuming at once left 293 MiB
     * resident with it, 89 MiB without. Blocks of 1 MiB and more are then
     * mmapped and returned on free; the daemon reuses its buffers, so this
     * costs no system calls per request. Before any thread exists. */
    mallopt(M_MMAP_THRESHOLD, 1 << 20);
    /* Before any thread exists: every thread inherits SIGUSR1 blocked, and
     * only fs_drain_signal's waits for it (an early one stays pending). */
    if (fs_drain_signal_block()) {
        fprintf(stderr, "ckptfs: cannot block SIGUSR1\n");
        return 1;
    }
    fs_settings_init(&s);
    s.vo.log = fs_log_vfs;
    s.vo.metrics = fs_metrics_of_vfs;
    s.vo.metrics_arg = (void *)CKPT_PROJECT_VERSION;
    s.store = getenv("CKPT_STORE");
    struct option *lopts = fs_options_getopt(flag_opts, sizeof flag_opts / sizeof flag_opts[0],
                                             "hfd", shortopts, sizeof shortopts);
    if (!lopts) {
        fprintf(stderr, "ckptfs: out of memory\n");
        goto out;
    }
    /* Every exit from here on goes through out: the settings and the FUSE
     * args are heap-allocated. */
    int parsed = parse_argv(argc, argv, lopts, shortopts, 1, &s, &flags);
    if (parsed < 0 && s.config && fs_config_load(s.config, &s, &conf, why, sizeof why)) {
        fprintf(stderr, "ckptfs: %s\n", why);
        parsed = 2;
    }
    if (parsed < 0)
        parsed = parse_argv(argc, argv, lopts, shortopts, 0, &s, &flags);
    if (parsed >= 0) {
        rc = parsed;
        goto out;
    }
    fs_log_setup(s.log_level, FS_LOG_STDERR);
    if (fuse_args_of(&s, &flags, argv[0], &args) || export_secrets(&s)) {
        fs_log_write(FS_LOG_ERROR, "out of memory");
        goto out;
    }

    char default_url[PATH_MAX + 16], staging_buf[PATH_MAX];
    if (!s.store || !*s.store)
        s.store = st_default_store_url(default_url, sizeof default_url);
    if (!s.staging) {
        if (default_staging(staging_buf, sizeof staging_buf)) {
            fprintf(stderr, "ckptfs: cannot derive the staging directory; pass --staging\n");
            rc = 2;
            goto out;
        }
        s.staging = staging_buf;
    }
    s.vo.store_url = s.store;
    s.vo.staging_dir = s.staging;

    /* The port is bound before anything is mounted: a busy one stops the
     * start with its reason (fs_metrics_http.h). */
    int port_warn = 0;
    if (s.metrics_listen &&
        fs_metrics_http_bind(s.metrics_listen, &metrics_port, &port_warn, why, sizeof why)) {
        fs_logf(FS_LOG_ERROR, "--metrics-listen %s", why);
        rc = 2;
        goto out;
    }

    /* A new node warms the step it will resume from by default: the
     * trainer's start-up (imports, process groups, the model) overlaps the
     * fetch (docs/WARMUP.md, "Warm-up"). */
    if (!s.prefetch)
        s.prefetch = "latest";
    if (prefetch_start(NULL, s.prefetch)) {
        rc = 2;
        goto out;
    }
    /* Before staging is touched: a refused mountpoint leaves it alone. */
    int mp = fs_mountpoint_check(s.mountpoint, why, sizeof why);
    if (mp) {
        fs_log_write(mp < 0 ? FS_LOG_ERROR : FS_LOG_WARN, why);
        if (mp < 0)
            goto out;
    }
    st_err e = st_vfs_open(&s.vo, &v);
    if (e) {
        fs_log_write(FS_LOG_ERROR, st_errmsg()[0] ? st_errmsg() : st_strerror(e));
        rc = e == ST_ERR_INVALID ? 2 : e == ST_ERR_KEY ? 3 : 1;
        goto out;
    }
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, v);
    if (!se)
        goto out;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, s.mountpoint) != 0)
        goto out_signals;
    if (!flags.foreground)
        fs_log_setup(s.log_level, FS_LOG_SYSLOG);
    fuse_daemonize(flags.foreground);
    if ((e = st_vfs_start(v))) {
        fs_log_write(FS_LOG_ERROR, st_errmsg());
        goto out_unmount;
    }
    (void)prefetch_start(v, s.prefetch); /* checked above; a busy queue is logged */
    if (fs_drain_signal_start(v, &usr1))
        fs_log_write(FS_LOG_WARN, "cannot start the SIGUSR1 thread: use ckptctl drain");
    if (metrics_port) {
        if (fs_metrics_http_start(metrics_port, v, CKPT_PROJECT_VERSION, why, sizeof why)) {
            fs_logf(FS_LOG_ERROR, "--metrics-listen %s: %s", s.metrics_listen, why);
            goto out_unmount;
        }
        if (port_warn)
            fs_logf(FS_LOG_WARN,
                    "metrics served on %s, not loopback: anyone who reaches it reads them",
                    s.metrics_listen);
        fs_logf(FS_LOG_INFO, "metrics served on %s (GET /metrics)", s.metrics_listen);
    }
    fs_logf(FS_LOG_INFO, "%s mounted on %s (staging %s)", s.store, s.mountpoint, s.staging);
    if (fs_notify("READY=1"))
        fs_logf(FS_LOG_WARN, "cannot notify the service manager (NOTIFY_SOCKET): %s",
                strerror(errno));
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(cfg, 16);
    /* libfuse 3.14 returns the signal that ended the loop (its handler
     * stores it as the session's error): SIGTERM, SIGINT or SIGHUP is the
     * ordinary way to stop, and the exit says so (systemd would mark the unit
     * failed otherwise). */
    int loop = fuse_session_loop_mt(se, cfg);
    rc = loop == 0 || loop == SIGTERM || loop == SIGINT || loop == SIGHUP ? 0 : 1;
    fuse_loop_cfg_destroy(cfg);
    char stopping[96];
    snprintf(stopping, sizeof stopping, "STOPPING=1\nSTATUS=draining uploads (up to %.0f s)",
             s.vo.drain_seconds > 0 ? s.vo.drain_seconds : 60.0);
    (void)fs_notify(stopping); /* a failure was logged at READY */
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out:
    fs_drain_signal_stop(usr1);         /* NULL: no-op */
    fs_metrics_http_free(metrics_port); /* its thread reads v */
    st_vfs_close(v); /* completes closed steps and drains uploads (--drain); NULL: no-op */
    fuse_opt_free_args(&args);
    fs_config_free(conf);
    fs_settings_free(&s);
    free(lopts);
    return rc;
}
