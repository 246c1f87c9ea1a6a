/*
 * st_vfs_staging — the staging directory as one daemon's own
 * (docs/MOUNT_MODEL.md, "The staging directory"):
 *
 *   * one daemon per staging directory, held by an exclusive lock on
 *     STAGING/lock for the daemon's whole life (the journal, the staging
 *     files and the pool are only ever used under it). Two daemons on one
 *     directory would take staging file ids from the same journal and write
 *     the same STAGING/data/N: a file acknowledged to one came back with the
 *     other's bytes;
 *   * the directory and its data/ and spare/ made 0700, and refused at start
 *     when another user owns them or a group or others may write them: no
 *     one else can plant an entry there;
 *   * every staging file it writes is one it created (O_CREAT|O_EXCL|
 *     O_NOFOLLOW), and every one it opens again is opened with O_NOFOLLOW|
 *     O_NONBLOCK and checked to be a regular file: a symlink planted in
 *     data/ is never followed (a checkpoint written over a file outside
 *     staging), a FIFO never blocks the thread that meets it (the mount
 *     with it). A refusal is logged with the path it names.
 *
 * The lock is flock(2), not a POSIX record lock: it belongs to the open file
 * description, so it survives the fork of fuse_daemonize (the parent exits,
 * the child holds it) and two opens in one process exclude each other as
 * two daemons do. The lock file holds the holder's PID for the refusal
 * message; it is never unlinked (a daemon that unlinked it would let the
 * next one lock a new file while a third still held the old one).
 *
 * Threads: vfs_staging_take and vfs_staging_let_go run at open and close,
 * vfs_staging_mark_pid at start (one thread); the file operations run on any
 * thread and need no lock.
 */
#include "mount/st_vfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "util/st_fsutil.h"

/* How often a start that waits for the lock tries it again. */
#define STAGING_LOCK_POLL_US 50000

static void lock_path(const st_vfs *v, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/lock", v->staging);
}

/* The PID the lock file names (the holder's), or 0 if it names none. */
static long lock_holder(int fd)
{
    char text[32];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    char *end;
    long pid = strtol(text, &end, 10);
    return pid > 0 && (*end == '\n' || *end == '\0') ? pid : 0;
}

/* Writes this process's PID into the lock file (the lock held). Written
 * over the old one, then cut to length: a start reading it meanwhile finds
 * the new PID followed by a newline, never an empty file. */
static st_err write_pid(int fd, const char *path)
{
    char text[32];
    int len = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    if (lock_holder(fd) == (long)getpid())
        return ST_OK; /* no fork since it was written */
    st_err e = st_pwrite_all(fd, text, (size_t)len, 0, path);
    if (!e && ftruncate(fd, len) < 0)
        e = st_seterr(ST_ERR_IO, "truncate %s: %s", path, strerror(errno));
    return e;
}

/* Takes the lock on fd, waiting up to v->opts.staging_wait_seconds for a
 * holder to let go (a daemon still draining after `fusermount3 -u -z`). */
static st_err take_lock(st_vfs *v, int fd)
{
    const int64_t due = st_mono_ns() + (int64_t)(v->opts.staging_wait_seconds * 1e9);
    int said = 0;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            return ST_OK;
        if (errno != EWOULDBLOCK && errno != EINTR)
            return st_seterr(ST_ERR_IO, "lock staging directory %s: %s", v->staging,
                             strerror(errno));
        long holder = lock_holder(fd);
        char who[48] = "PID unknown";
        if (holder)
            snprintf(who, sizeof who, "PID %ld", holder);
        if (st_mono_ns() >= due)
            return st_seterr(ST_ERR_BUSY,
                             "staging directory %s is in use by another ckptfs daemon (%s): one "
                             "daemon per staging directory; stop that one first or give this "
                             "one its own --staging",
                             v->staging, who);
        if (!said++)
            vfs_log(v, 1,
                    "staging directory %s is held by another ckptfs daemon (%s); waiting up "
                    "to %g s for it to let go (--staging-wait)",
                    v->staging, who, v->opts.staging_wait_seconds);
        usleep(STAGING_LOCK_POLL_US);
    }
}

/* Makes STAGING/name (0700) and refuses it unless it is a private
 * directory (not a symlink to one). */
static st_err private_subdir(st_vfs *v, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", v->staging, name);
    st_err e = st_mkdir_p_mode(path, 0700);
    return e ? e : st_dir_check_private(path, 0, "staging directory");
}

st_err vfs_staging_take(st_vfs *v)
{
    char path[PATH_MAX];
    int fd = -1;
    st_err e = st_mkdir_p_mode(v->staging, 0700);
    if (!e)
        e = st_dir_check_private(v->staging, 1, "staging directory");
    lock_path(v, path, sizeof path);
    if (!e)
        e = st_open_regular(path, O_RDWR | O_CREAT, 0600, &fd);
    if (!e)
        e = take_lock(v, fd);
    if (!e)
        e = write_pid(fd, path);
    if (!e)
        e = private_subdir(v, "data");
    if (!e)
        e = private_subdir(v, "spare");
    if (e) {
        if (fd >= 0)
            close(fd); /* lets the lock go, if it was taken */
        return e;
    }
    v->staging_lock_fd = fd;
    return ST_OK;
}

void vfs_staging_mark_pid(st_vfs *v)
{
    char path[PATH_MAX];
    lock_path(v, path, sizeof path);
    if (v->staging_lock_fd >= 0 && write_pid(v->staging_lock_fd, path))
        vfs_log(v, 1, "%s", st_errmsg()); /* it only names the holder to another start */
}

void vfs_staging_let_go(st_vfs *v)
{
    if (v->staging_lock_fd >= 0)
        close(v->staging_lock_fd);
    v->staging_lock_fd = -1;
}

/* Logs a staging file refused or not opened (the error names its path); a
 * full disk is the caller's to report (ENOSPC to the writer). */
static st_err logged(st_vfs *v, st_err e)
{
    if (e && e != ST_ERR_NOSPACE)
        vfs_log(v, 2, "staging file: %s", st_errmsg());
    return e;
}

st_err vfs_staging_create(st_vfs *v, const char *path, int flags, int *fd)
{
    st_err e = logged(v, st_create_new(path, flags, 0600, fd));
    /* Something not ours at that name is an I/O error of the mount to the
     * writer (EIO), not an EEXIST about the name it asked for. */
    return e == ST_ERR_EXISTS ? st_seterr(ST_ERR_IO, "%s", st_errmsg()) : e;
}

st_err vfs_staging_open(st_vfs *v, const char *path, int flags, int *fd)
{
    return logged(v, st_open_regular(path, flags, 0, fd));
}

st_err vfs_staging_truncate(st_vfs *v, const char *path, uint64_t size)
{
    int fd;
    st_err e = vfs_staging_open(v, path, O_WRONLY, &fd);
    if (e)
        return e;
    if (ftruncate(fd, (off_t)size) < 0)
        e = st_seterr(st_err_of_write_errno(errno), "truncate %s: %s", path, strerror(errno));
    close(fd);
    return e;
}

uint64_t vfs_staging_free_bytes(const st_vfs *v)
{
    struct statvfs fs;
    if (statvfs(v->staging, &fs) < 0)
        return 0;
    return (uint64_t)fs.f_bavail * fs.f_frsize;
}
