/*
 * fs_drain_signal — SIGUSR1 as a preemption notice (docs/SHUTDOWN.md): a
 * thread of its own waits for the signal with sigwait(2) and calls
 * st_vfs_drain(), which takes the mount's lock and so may not run in a
 * signal handler.
 *
 * fs_drain_signal_block() must run in the main thread before any other
 * thread starts (st_vfs_start, the FUSE loop), so that every thread inherits
 * SIGUSR1 blocked and only the waiting thread takes it.
 */
#ifndef FS_DRAIN_SIGNAL_H
#define FS_DRAIN_SIGNAL_H

#include "ckptstore.h"

typedef struct fs_drain_signal fs_drain_signal;

/*! Blocks SIGUSR1 in the calling thread (and the threads it starts). 0 or -1. */
int fs_drain_signal_block(void);

/*! Starts the thread that turns SIGUSR1 into st_vfs_drain(v); v must
 *  outlive fs_drain_signal_stop. *out NULL on failure (-1). */
int fs_drain_signal_start(st_vfs *v, fs_drain_signal **out);

/*! Stops and joins the thread; NULL: no-op. */
void fs_drain_signal_stop(fs_drain_signal *d);

#endif
