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

/*! write() until done; EINTR retried. ST_ERR_IO / ST_ERR_NOSPACE. */
st_err st_write_all(int fd, const void *buf, size_t len, const char *what);

/*! pwrite() until done at off; EINTR retried. */
st_err st_pwrite_all(int fd, const void *buf, size_t len, uint64_t off, const char *what);

/*! read() until len bytes or EOF; *got is what was read. */
st_err st_read_full(int fd, void *buf, size_t len, size_t *got, const char *what);

/*! mkdir -p of an absolute or relative path (mode 0755). */
st_err st_mkdir_p(const char *path);

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
