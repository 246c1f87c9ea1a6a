/*
 * st_vfs_staging — the staging directory, trusted for nothing (docs/MOUNT.md,
 * "The staging directory"):
 *
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
 * Threads: vfs_staging_take runs at open (one thread); the file operations
 * run on any thread and need no lock.
 */
#include "mount/st_vfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/st_fsutil.h"

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
    st_err e = st_mkdir_p_mode(v->staging, 0700);
    if (!e)
        e = st_dir_check_private(v->staging, 1, "staging directory");
    if (!e)
        e = private_subdir(v, "data");
    if (!e)
        e = private_subdir(v, "spare");
    return e;
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
        e = st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "truncate %s: %s", path,
                      strerror(errno));
    close(fd);
    return e;
}
