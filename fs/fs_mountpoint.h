/*
 * fs_mountpoint — the mountpoint looked at before mounting (docs/MOUNT.md,
 * "The staging directory": one daemon per mountpoint). A ckptfs already
 * mounted there is refused: a second mount would stack over it silently,
 * hiding the first one and the files written into it. A directory that is
 * not empty is mounted over with a warning: what it holds is hidden until
 * the unmount.
 *
 * No state: any thread. It reads /proc/self/mountinfo, where a mount made
 * by ckptfs has the type "fuse.ckptfs" (ckptfs.c mounts with
 * subtype=ckptfs).
 */
#ifndef FS_MOUNTPOINT_H
#define FS_MOUNTPOINT_H

#include <stddef.h>

/*! Looks at the directory mountpoint. Returns 0 (nothing to say), 1 (a
 *  warning in msg[cap], the mount may go on) or -1 (refused, why in
 *  msg[cap]). A mountpoint that cannot be resolved is left to the mount
 *  itself to report: 0. */
int fs_mountpoint_check(const char *mountpoint, char *msg, size_t cap);

#endif
