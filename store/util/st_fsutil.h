/*
 * st_fsutil — small local-filesystem helpers shared by the engine, the
 * file:// backend's callers and the restore path.
 *
 * The "beneath" helpers resolve a clean relative path (st_path_is_clean)
 * under a directory fd one component at a time with O_NOFOLLOW, so a symlink
 * planted inside a target directory can never redirect a write outside it.
 */
#ifndef ST_FSUTIL_H
#define ST_FSUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "st_error.h"

/*! The error of a write, truncate or allocation that failed with errno err:
 *  ST_ERR_NOSPACE (ENOSPC, EDQUOT), ST_ERR_TOO_BIG (EFBIG), else ST_ERR_IO. */
st_err st_err_of_write_errno(int err);

/*! write() until done; EINTR retried. Errors as st_err_of_write_errno. */
st_err st_write_all(int fd, const void *buf, size_t len, const char *what);

/*! pwrite() until done at off; EINTR retried. */
st_err st_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what);

/*! read() until len bytes or EOF; *got is what was read. */
st_err st_read_full(int fd, void *buf, size_t len, size_t *got, const char *what);

/*! mkdir -p of an absolute or relative path (mode 0755). */
st_err st_mkdir_p(const char *path);

/*! st_mkdir_p, the last directory made with `mode` (0700 for a private
 *  one) when it has to be made; an existing one keeps its mode. */
st_err st_mkdir_p_mode(const char *path, mode_t mode);

/*!
 * Refuses a directory that someone else could plant files in: path must be
 * a directory (with follow 0, not a symlink to one) owned by this process's
 * effective user and writable by no group or other. `what` names it in the
 * message ("staging directory"). ST_OK, or ST_ERR_INVALID (not private,
 * not a directory), ST_ERR_IO (cannot stat) with a message naming path.
 */
st_err st_dir_check_private(const char *path, int follow, const char *what);

/*!
 * Opens the regular file at path (flags as for open(); O_CREAT without
 * O_EXCL allowed) without following a symlink as its last component and
 * without blocking on a FIFO or a device: O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC
 * are added, and O_NONBLOCK is cleared again once fstat said S_ISREG.
 * Anything else is refused: ST_ERR_IO with a message naming path and what
 * it is. *fd: the descriptor (caller closes), -1 on error.
 */
st_err st_open_regular(const char *path, int flags, mode_t mode, int *fd);

/*!
 * Reads a secret file: a regular file (not a symlink: st_open_regular),
 * owned by this process's effective user and readable by no group or other
 * (mode 0600 or stricter), of at most cap bytes, into buf; *got is its
 * length. `what` names it in messages ("peer secret file"), which never
 * quote its content. ST_OK, or ST_ERR_INVALID with a message naming path
 * and the rule broken. On error buf holds nothing of the file.
 */
st_err st_read_private_file(const char *path, const char *what, void *buf, size_t cap, size_t *got);

/*!
 * Creates path as a new regular file: flags | O_CREAT|O_EXCL|O_NOFOLLOW|
 * O_CLOEXEC, so nothing already there is ever opened. A leftover of the
 * same name is unlinked first only if it is a regular file owned by this
 * process's effective user (an earlier life's file); anything else (a
 * symlink, a FIFO, a directory, another user's file) is left alone and the
 * create fails: ST_ERR_EXISTS with a message naming path and what it is.
 * ST_ERR_NOSPACE for a full disk, else ST_ERR_IO. *fd: the descriptor
 * (caller closes), -1 on error.
 */
st_err st_create_new(const char *path, int flags, mode_t mode, int *fd);

/*!
 * Opens (flags as for open; O_NOFOLLOW is added) the file at the clean
 * relative path rel under dirfd, creating the intermediate directories
 * (0755) when `create_dirs` is set. Every intermediate component is opened
 * with O_NOFOLLOW|O_DIRECTORY. Returns the fd or -1 with errno set.
 * If parent_fd is not NULL, the open fd of the final component's parent
 * directory is returned there (caller closes), for renameat/fsync.
 */
int st_open_beneath(int dirfd, const char *rel, int flags, mode_t mode, int create_dirs,
                    int *parent_fd);

/*! Wall clock in nanoseconds since the epoch. */
int64_t st_now_ns(void);

/*! Monotonic clock in nanoseconds (for rates and timeouts). */
int64_t st_mono_ns(void);

#endif
