/*
 * st_fsutil — write/read loops, directory fsync, mkdir -p and the
 * symlink-safe "open beneath a directory" walk. Stateless; thread-safe.
 */
#include "util/st_fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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
            return st_seterr(e == ENOSPC || e == EDQUOT ? ST_ERR_NOSPACE : ST_ERR_IO,
                             "write %s: %s", what, strerror(e));
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
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf)
        return st_seterr(ST_ERR_INVALID, "bad directory path '%s'", path);
    memcpy(buf, path, len + 1);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char saved = *p;
            *p = '\0';
            if (mkdir(buf, 0755) < 0 && errno != EEXIST)
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
