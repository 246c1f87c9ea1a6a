/*
 * ckptfs — the FUSE daemon: mounts st_vfs (store/) with libfuse's low-level
 * API on a multithreaded loop. Only glue lives here: option parsing, the
 * mapping of FUSE requests to st_vfs calls and of st_err codes to errnos
 * (errmap(), the one place errnos are made), and zero-copy data paths
 * (reads and writes go between the kernel and the staging file's fd through
 * fuse_buf_copy / fuse_reply_data, as libfuse's passthrough_ll does).
 *
 *   ckptfs MOUNTPOINT [--store URL] [--staging DIR] [--node NAME]
 *          [--step-pattern REGEX] [--staging-cap BYTES] [--gc-keep-last N]
 *          [--gc-keep-every K] [--gc-grace S] [--gc-interval S] [-f] [-o FUSE_OPTS]
 *
 * Threads: libfuse's worker threads call the ops concurrently; all shared
 * state is inside st_vfs.
 */
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "ckptstore.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE                                                                           \
    (1 << 0) /* renameat2(2), <linux/fs.h>; glibc's <stdio.h> with _GNU_SOURCE */
#endif

#define ATTR_TIMEOUT 1.0
#define MAX_WRITE    (1u << 20)

static int log_to_syslog;

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
    case ST_ERR_IO:
    case ST_ERR_TRANSIENT:
    case ST_ERR_PERMANENT:
    case ST_ERR_CORRUPT: return EIO;
    }
    return EIO;
}

static void reply_err(fuse_req_t req, st_err e)
{
    fuse_reply_err(req, errmap(e));
}

/* One message, one line: control bytes (a newline in a file name carried
 * by an error message) are written as \xNN. The mount model's own messages
 * come escaped already (they hold none). */
static void log_sink(void *arg, int level, const char *msg)
{
    (void)arg;
    char line[4096];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 5 < sizeof line; p++)
        if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(line + o, sizeof line - o, "\\x%02x", *p);
        else
            line[o++] = (char)*p;
    line[o] = '\0';
    if (log_to_syslog)
        syslog(level == 0 ? LOG_INFO : level == 1 ? LOG_WARNING : LOG_ERR, "%s", line);
    else
        fprintf(stderr, "ckptfs: %s%s\n",
                level == 2   ? "error: "
                : level == 1 ? "warning: "
                             : "",
                line);
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
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_mtim.tv_sec = a->mtime_ns / 1000000000;
    st->st_mtim.tv_nsec = a->mtime_ns % 1000000000;
    st->st_ctim.tv_sec = a->ctime_ns / 1000000000;
    st->st_ctim.tv_nsec = a->ctime_ns % 1000000000;
    st->st_atim = st->st_mtim;
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
    /* 1 MiB requests: 128 KiB ones cost ~30% more here (NOTES.md). */
    conn->max_write = MAX_WRITE;
    conn->max_read = 0;
    conn->max_readahead = MAX_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_WRITE)
        conn->want |= FUSE_CAP_SPLICE_WRITE;
    if (conn->capable & FUSE_CAP_SPLICE_MOVE)
        conn->want |= FUSE_CAP_SPLICE_MOVE;
    if (conn->capable & FUSE_CAP_SPLICE_READ)
        conn->want |= FUSE_CAP_SPLICE_READ;
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

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
    int which = 0;
    int64_t mtime = 0;
    if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
        fuse_reply_err(req, EPERM); /* ownership is the mount's owner's */
        return;
    }
    if (to_set & FUSE_SET_ATTR_MODE)
        which |= ST_VFS_SET_MODE;
    if (to_set & FUSE_SET_ATTR_SIZE)
        which |= ST_VFS_SET_SIZE;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
        which |= ST_VFS_SET_MTIME;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        mtime = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
        which |= ST_VFS_SET_MTIME;
        mtime = (int64_t)attr->st_mtim.tv_sec * 1000000000 + attr->st_mtim.tv_nsec;
    }
    st_vfs_attr a;
    struct stat st;
    st_err e = st_vfs_setattr(vfs_of(req), ino, which, attr->st_mode, (uint64_t)attr->st_size,
                              mtime, fi ? handle_of(fi) : NULL, &a);
    if (e) {
        reply_err(req, e);
        return;
    }
    to_stat(&a, &st);
    fuse_reply_attr(req, &st, ATTR_TIMEOUT);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    st_vfs_attr a;
    st_err e = st_vfs_mkdir(vfs_of(req), parent, name, mode, &a);
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

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    st_vfs_handle *h;
    st_err e = st_vfs_open_file(vfs_of(req), ino, fi->flags, fuse_req_ctx(req)->pid, &h);
    if (e) {
        reply_err(req, e);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)h;
    if (st_vfs_handle_fd(h) < 0)
        fi->direct_io = 1; /* a virtual file: its size is not known up front */
    fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
    st_vfs_handle *h;
    st_vfs_attr a;
    st_err e =
        st_vfs_create(vfs_of(req), parent, name, mode, fi->flags, fuse_req_ctx(req)->pid, &a, &h);
    if (e) {
        reply_err(req, e);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)h;
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
    struct fuse_bufvec bv = FUSE_BUFVEC_INIT(size);
    bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    bv.buf[0].fd = fd;
    bv.buf[0].pos = off;
    fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
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
            log_sink(NULL, 1, st_errmsg());
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
    ssize_t n = fuse_buf_copy(&out, in, 0);
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
    fuse_reply_err(req, errmap(st_vfs_flush(vfs_of(req), handle_of(fi))));
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
    st_vfs_fsinfo f;
    st_err e = st_vfs_statfs(vfs_of(req), &f);
    if (e) {
        reply_err(req, e);
        return;
    }
    struct statvfs sv;
    memset(&sv, 0, sizeof sv);
    sv.f_bsize = sv.f_frsize = f.block_size;
    sv.f_blocks = f.blocks;
    sv.f_bfree = f.blocks_free;
    sv.f_bavail = f.blocks_avail;
    sv.f_files = f.files;
    sv.f_ffree = sv.f_favail = f.files_free;
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
    fprintf(out, "usage: ckptfs MOUNTPOINT [options]\n\n"
                 "Mounts checkpoint storage: trainers write checkpoints into MOUNTPOINT/<job>/;\n"
                 "complete steps are deduplicated, compressed and uploaded to the store in the\n"
                 "background; durable steps from the store are listed and readable.\n\n"
                 "Options:\n"
                 "  --store URL          file:///abs/dir or s3://bucket/prefix\n"
                 "                       (default: $CKPT_STORE, else the embedded file:// store)\n"
                 "  --s3-endpoint URL    S3-compatible endpoint, e.g. http://127.0.0.1:9000\n"
                 "                       (default: $CKPT_S3_ENDPOINT, else AWS); credentials\n"
                 "                       come from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or\n"
                 "                       ~/.aws/credentials, never from the command line\n"
                 "  --staging DIR        local staging directory (default:\n"
                 "                       $XDG_STATE_HOME/ckptfs/staging, ~/.local/state/...)\n"
                 "  --node NAME          this node's name in the store (default: host name)\n"
                 "  --step-pattern RE    POSIX ERE with one group capturing the step number\n"
                 "  --staging-cap BYTES  cap on staged bytes (K, M, G suffixes); full: ENOSPC\n"
                 "  --upload-threads N   pack uploads in flight (1..32, default 4); memory is\n"
                 "                       about (N + 1) x 24 MiB\n"
                 "  --refresh SECONDS    how often the store's steps are re-listed (default 5)\n"
                 "  --drain SECONDS      at unmount, how long to wait for uploads (default 60)\n"
                 "  --gc-keep-last N     background GC: keep the N newest consistent steps of\n"
                 "                       every job and delete older ones (N >= 1)\n"
                 "  --gc-keep-every K    background GC: keep the consistent steps whose number\n"
                 "                       is a multiple of K (K >= 1), with --gc-keep-last: too\n"
                 "  --gc-grace SECONDS   background GC: how long an unreferenced pack waits\n"
                 "                       before it is deleted (default 3600)\n"
                 "  --gc-interval SECONDS  background GC: time between runs (default 600)\n"
                 "                       Any --gc-* option runs GC over every job of the store\n"
                 "                       on a background thread (only --gc-interval/--gc-grace:\n"
                 "                       sweep only, no step deleted). The newest consistent\n"
                 "                       step and pinned steps are always kept. Run it on one\n"
                 "                       node per job: two are safe, only wasteful.\n"
                 "  -f                   stay in the foreground, log to stderr\n"
                 "  -d                   FUSE debug output (implies -f)\n"
                 "  -o OPTS              FUSE mount options (e.g. allow_other)\n"
                 "  -h, --help           this help\n"
                 "  --version            version\n\n"
                 "Unmount with: fusermount3 -u MOUNTPOINT\n"
                 "Status: MOUNTPOINT/.ckptfs/status (JSON)\n");
}

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *s == '-')
        return -1;
    uint64_t mult = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1ull << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mult = 1ull << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mult = 1ull << 30;
        end++;
        break;
    case 't':
    case 'T':
        mult = 1ull << 40;
        end++;
        break;
    }
    if (*end)
        return -1;
    *out = v * mult;
    return 0;
}

/* A whole number >= 1 for --gc-keep-last / --gc-keep-every. */
static int parse_count(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || *s == '-' || errno || v < 1)
        return -1;
    *out = v;
    return 0;
}

/* A number of seconds > 0 (fractions allowed) for --gc-grace / --gc-interval. */
static int parse_seconds(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v <= 0 || v > 1e9)
        return -1;
    *out = v;
    return 0;
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

int main(int argc, char **argv)
{
    enum {
        O_STORE = 256,
        O_STAGING,
        O_NODE,
        O_PATTERN,
        O_CAP,
        O_REFRESH,
        O_DRAIN,
        O_VERSION,
        O_ENDPOINT,
        O_UPLOADS,
        O_GC_KEEP_LAST,
        O_GC_KEEP_EVERY,
        O_GC_GRACE,
        O_GC_INTERVAL
    };
    static const struct option lopts[] = {
        {"store", required_argument, NULL, O_STORE},
        {"s3-endpoint", required_argument, NULL, O_ENDPOINT},
        {"upload-threads", required_argument, NULL, O_UPLOADS},
        {"staging", required_argument, NULL, O_STAGING},
        {"node", required_argument, NULL, O_NODE},
        {"step-pattern", required_argument, NULL, O_PATTERN},
        {"staging-cap", required_argument, NULL, O_CAP},
        {"refresh", required_argument, NULL, O_REFRESH},
        {"drain", required_argument, NULL, O_DRAIN},
        {"gc-keep-last", required_argument, NULL, O_GC_KEEP_LAST},
        {"gc-keep-every", required_argument, NULL, O_GC_KEEP_EVERY},
        {"gc-grace", required_argument, NULL, O_GC_GRACE},
        {"gc-interval", required_argument, NULL, O_GC_INTERVAL},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    st_vfs_options vo = {.log = log_sink};
    const char *store = getenv("CKPT_STORE");
    const char *staging = NULL;
    int foreground = 0, debug = 0;
    /* Every exit from here on goes through out_args: the FUSE args are
     * heap-allocated. */
    int rc = 1;
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    fuse_opt_add_arg(&args, argv[0]);
    int ch;
    while ((ch = getopt_long(argc, argv, "hfdo:", lopts, NULL)) != -1) {
        switch (ch) {
        case O_STORE: store = optarg; break;
        case O_ENDPOINT: vo.s3_endpoint = optarg; break;
        case O_UPLOADS: {
            char *end;
            unsigned long n = strtoul(optarg, &end, 10);
            if (*end || n < 1 || n > 32) {
                fprintf(stderr, "ckptfs: --upload-threads wants 1..32, got '%s'\n", optarg);
                rc = 2;
                goto out_args;
            }
            vo.upload_threads = (unsigned)n;
            break;
        }
        case O_STAGING: staging = optarg; break;
        case O_NODE: vo.node = optarg; break;
        case O_PATTERN: vo.step_pattern = optarg; break;
        case O_CAP:
            if (parse_size(optarg, &vo.staging_cap)) {
                fprintf(stderr, "ckptfs: bad --staging-cap '%s'\n", optarg);
                rc = 2;
                goto out_args;
            }
            break;
        case O_REFRESH: vo.refresh_seconds = atof(optarg); break;
        case O_DRAIN: vo.drain_seconds = atof(optarg); break;
        case O_GC_KEEP_LAST:
        case O_GC_KEEP_EVERY:
            if (parse_count(optarg, ch == O_GC_KEEP_LAST ? &vo.gc_keep_last : &vo.gc_keep_every)) {
                fprintf(stderr, "ckptfs: --%s wants a whole number >= 1, got '%s'\n",
                        ch == O_GC_KEEP_LAST ? "gc-keep-last" : "gc-keep-every", optarg);
                rc = 2;
                goto out_args;
            }
            vo.gc_enabled = 1;
            break;
        case O_GC_GRACE:
        case O_GC_INTERVAL:
            if (parse_seconds(optarg,
                              ch == O_GC_GRACE ? &vo.gc_grace_seconds : &vo.gc_interval_seconds)) {
                fprintf(stderr, "ckptfs: --%s wants a number of seconds > 0, got '%s'\n",
                        ch == O_GC_GRACE ? "gc-grace" : "gc-interval", optarg);
                rc = 2;
                goto out_args;
            }
            vo.gc_enabled = 1;
            break;
        case 'f': foreground = 1; break;
        case 'd': debug = foreground = 1; break;
        case 'o':
            fuse_opt_add_arg(&args, "-o");
            fuse_opt_add_arg(&args, optarg);
            break;
        case 'h':
            usage(stdout);
            rc = 0;
            goto out_args;
        case O_VERSION:
            printf("ckptfs 0.1.0 (libfuse %s)\n", fuse_pkgversion());
            rc = 0;
            goto out_args;
        default:
            usage(stderr);
            rc = 2;
            goto out_args;
        }
    }
    if (optind != argc - 1) {
        fprintf(stderr, "ckptfs: expected exactly one MOUNTPOINT\n");
        usage(stderr);
        rc = 2;
        goto out_args;
    }
    const char *mountpoint = argv[optind];
    if (debug)
        fuse_opt_add_arg(&args, "-d");

    char default_url[PATH_MAX + 16], staging_buf[PATH_MAX];
    if (!store || !*store)
        store = st_default_store_url(default_url, sizeof default_url);
    if (!staging) {
        if (default_staging(staging_buf, sizeof staging_buf)) {
            fprintf(stderr, "ckptfs: cannot derive the staging directory; pass --staging\n");
            rc = 2;
            goto out_args;
        }
        staging = staging_buf;
    }
    vo.store_url = store;
    vo.staging_dir = staging;

    st_vfs *v = NULL;
    st_err e = st_vfs_open(&vo, &v);
    if (e) {
        fprintf(stderr, "ckptfs: %s\n", st_errmsg()[0] ? st_errmsg() : st_strerror(e));
        rc = e == ST_ERR_INVALID ? 2 : 1;
        goto out_args;
    }
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, v);
    if (!se)
        goto out_vfs;
    if (fuse_set_signal_handlers(se) != 0)
        goto out_session;
    if (fuse_session_mount(se, mountpoint) != 0)
        goto out_signals;
    if (!foreground)
        log_to_syslog = 1;
    fuse_daemonize(foreground);
    if ((e = st_vfs_start(v))) {
        log_sink(NULL, 2, st_errmsg());
        goto out_unmount;
    }
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(cfg, 16);
    rc = fuse_session_loop_mt(se, cfg) ? 1 : 0;
    fuse_loop_cfg_destroy(cfg);
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_session:
    fuse_session_destroy(se);
out_vfs:
    st_vfs_close(v); /* completes closed steps and drains uploads (--drain) */
out_args:
    fuse_opt_free_args(&args);
    return rc;
}
