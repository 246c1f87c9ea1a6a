/*
 * st_fsutil — write/read loops, directory fsync, mkdir -p, the
 * symlink-safe "open beneath a directory" walk, and opens that trust
 * nothing already in a directory (st_open_regular, st_create_new: a
 * planted symlink is never followed and a FIFO never blocks the caller).
 * Stateless; thread-safe.
 */
#include "util/st_fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

st_err st_err_of_write_errno(int err)
{
    return err == ENOSPC || err == EDQUOT ? ST_ERR_NOSPACE
           : err == EFBIG                 ? ST_ERR_TOO_BIG
                                          : ST_ERR_IO;
}

/* The write loop both entry points share: at *off with pwrite() (advancing
 * it), or with write() at the file position when off is NULL. */
static st_err write_loop(int fd, const uint8_t *p, size_t len, uint64_t *off, const char *what)
{
    while (len) {
        ssize_t n = off ? pwrite(fd, p, len, (off_t)*off) : write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            return st_seterr(st_err_of_write_errno(e), "write %s: %s", what, strerror(e));
        }
        p += n;
        if (off)
            *off += (uint64_t)n;
        len -= (size_t)n;
    }
    return ST_OK;
}

st_err st_write_all(int fd, const void *buf, size_t len, const char *what)
{
    return write_loop(fd, buf, len, NULL, what);
}

st_err st_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what)
{
    return write_loop(fd, buf, len, &off, what);
}

st_err st_read_full(int fd, void *buf, size_t len, size_t *got, const char *what)
{
    uint8_t *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = read(fd, p + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return st_seterr(ST_ERR_IO, "read %s: %s", what, strerror(errno));
        }
        if (n == 0)
            break;
        done += (size_t)n;
    }
    *got = done;
    return ST_OK;
}

st_err st_mkdir_p(const char *path)
{
    return st_mkdir_p_mode(path, 0755);
}

st_err st_mkdir_p_mode(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return st_seterr(ST_ERR_INVALID, "bad directory path '%s'", path);
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            int last = saved == '\0' || p[1] == '\0';
            if (mkdir(buf, last ? mode : 0755) < 0 && errno != EEXIST)
                return st_seterr(ST_ERR_IO, "mkdir %s: %s", buf, strerror(errno));
            *p = saved;
            if (saved == '\0')
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode))
        return st_seterr(ST_ERR_IO, "%s is not a directory", path);
    return ST_OK;
}

/* What a directory entry that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symlink";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "not a regular file";
    }
}

st_err st_dir_check_private(const char *path, int follow, const char *what)
{
    struct stat st;
    if ((follow ? stat(path, &st) : lstat(path, &st)) < 0)
        return st_seterr(ST_ERR_IO, "%s %s: %s", what, path, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return st_seterr(ST_ERR_INVALID, "%s %s is %s, not a directory", what, path,
                         file_kind(st.st_mode));
    if (st.st_uid != geteuid())
        return st_seterr(ST_ERR_INVALID, "%s %s is owned by uid %lu, not by this user (uid %lu)",
                         what, path, (unsigned long)st.st_uid, (unsigned long)geteuid());
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return st_seterr(ST_ERR_INVALID,
                         "%s %s is writable by %s (mode %04o): another user could plant files "
                         "in it; chmod go-w it (0700 is what ckptfs makes)",
                         what, path, st.st_mode & S_IWOTH ? "others" : "its group",
                         (unsigned)(st.st_mode & 07777));
    return ST_OK;
}

st_err st_open_regular(const char *path, int flags, mode_t mode, int *fd)
{
    *fd = open(path, flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (*fd < 0) {
        int e = errno;
        if (e == ELOOP) /* O_NOFOLLOW met a symlink */
            return st_seterr(ST_ERR_IO, "%s is a symlink, not a regular file: refused", path);
        return st_seterr(e == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "open %s: %s", path,
                         strerror(e));
    }
    struct stat st;
    st_err e = ST_OK;
    if (fstat(*fd, &st) < 0)
        e = st_seterr(ST_ERR_IO, "fstat %s: %s", path, strerror(errno));
    else if (!S_ISREG(st.st_mode))
        e = st_seterr(ST_ERR_IO, "%s is %s, not a regular file: refused", path,
                      file_kind(st.st_mode));
    else if (!(flags & O_NONBLOCK) && fcntl(*fd, F_SETFL, fcntl(*fd, F_GETFL) & ~O_NONBLOCK) < 0)
        e = st_seterr(ST_ERR_IO, "fcntl %s: %s", path, strerror(errno));
    if (e) {
        close(*fd);
        *fd = -1;
    }
    return e;
}

st_err st_read_private_file(const char *path, const char *what, void *buf, size_t cap, size_t *got)
{
    int fd = -1;
    struct stat st;
    *got = 0;
    st_err e = st_open_regular(path, O_RDONLY, 0, &fd);
    if (e)
        return st_seterr(ST_ERR_INVALID, "%s: must be a regular file, not a symlink: %s", what,
                         st_errmsg());
    if (fstat(fd, &st) < 0)
        e = st_seterr(ST_ERR_INVALID, "%s %s: cannot stat: %s", what, path, strerror(errno));
    else if (st.st_uid != geteuid())
        e = st_seterr(ST_ERR_INVALID,
                      "%s %s: owned by uid %u, must be owned by this process's user (uid %u)", what,
                      path, (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & 077)
        e = st_seterr(ST_ERR_INVALID, "%s %s: mode %04o lets group or others read it; chmod 600 it",
                      what, path, (unsigned)(st.st_mode & 07777));
    else if ((uint64_t)st.st_size > cap)
        e = st_seterr(ST_ERR_INVALID, "%s %s: %lld bytes, at most %zu allowed", what, path,
                      (long long)st.st_size, cap);
    else if (st_read_full(fd, buf, cap, got, what))
        e = st_seterr(ST_ERR_INVALID, "%s %s: %s", what, path, st_errmsg());
    close(fd);
    if (e) {
        memset(buf, 0, cap);
        *got = 0;
    }
    return e;
}

st_err st_create_new(const char *path, int flags, mode_t mode, int *fd)
{
    const int how = flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    *fd = open(path, how, mode);
    if (*fd < 0 && errno == EEXIST) {
        /* A leftover: one of our own regular files goes (unlink removes the
         * name, whatever it links to); anything else stays, and so does
         * the refusal. */
        struct stat st;
        if (lstat(path, &st) == 0 && (!S_ISREG(st.st_mode) || st.st_uid != geteuid()))
            return st_seterr(ST_ERR_EXISTS, "%s already exists and is %s%s: refused", path,
                             file_kind(st.st_mode), S_ISREG(st.st_mode) ? " of another user" : "");
        if (unlink(path) == 0 || errno == ENOENT)
            *fd = open(path, how, mode);
    }
    if (*fd < 0) {
        int e = errno;
        return st_seterr(e == ENOSPC || e == EDQUOT ? ST_ERR_NOSPACE : ST_ERR_IO, "create %s: %s",
                         path, strerror(e));
    }
    return ST_OK;
}

int st_open_beneath(int dirfd, const char *rel, int flags, mode_t mode, int create_dirs,
                    int *parent_fd)
{
    char comp[NAME_MAX + 1];
    int cur = dup(dirfd);
    if (cur < 0)
        return -1;
    const char *p = rel;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || n > NAME_MAX) {
            close(cur);
            errno = EINVAL;
            return -1;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        if (!slash) {
            int fd = openat(cur, comp, flags | O_NOFOLLOW | O_CLOEXEC, mode);
            int e = errno;
            if (fd >= 0 && parent_fd)
                *parent_fd = cur;
            else
                close(cur);
            errno = e;
            return fd;
        }
        if (create_dirs && mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            close(cur);
            errno = e;
            return -1;
        }
        int next = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(cur);
        if (next < 0) {
            errno = e;
            return -1;
        }
        cur = next;
        p = slash + 1;
    }
}

static int64_t clock_ns(clockid_t which)
{
    struct timespec ts;
    clock_gettime(which, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t st_now_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

int64_t st_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}
