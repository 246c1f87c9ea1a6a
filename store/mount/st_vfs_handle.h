/*
 * st_vfs_handle — what an open file or control entry of the mount holds
 * (struct st_vfs_handle, opaque in st_vfs.h), for the modules that make,
 * use and end handles: st_vfs_handles.c (open, create), st_vfs_write.c
 * (writes, flush, release), st_vfs_control.c (the control entries) and
 * st_vfs_names.c (a truncation through an open handle).
 */
#ifndef ST_VFS_HANDLE_H
#define ST_VFS_HANDLE_H

#include "mount/st_vfs_impl.h"

struct st_vfs_handle {
    vnode *node;  /* NULL for a control file */
    uint64_t ctl; /* a control file's ino (ST_VFS_STATUS_INO...), 0 for a file */
    int fd;
    int writable;
    int dirty;        /* written since the last flush that succeeded */
    int torn;         /* opened on a torn file: reads fail (vnode.write_failed) */
    int sync_pending; /* a flush left its bytes off the disk: the release syncs */
    /* The opener may not keep set-user-ID and set-group-ID bits: its first
     * write clears them (st_vfs_handle_drops_setid). */
    _Atomic int drop_setid;
    uint64_t step; /* the step whose writer count this handle holds */
    /* The job of that step: the file may leave the tree (unlinked, or
     * renamed over) while open, and its step's count must still drop. */
    char job[ST_JOB_MAX + 1];
    st_err write_error; /* a write through this handle failed: flush reports it */
    uint64_t start_version;
    uint64_t writeback_from; /* start of the range not yet handed to writeback */
    st_bytes virt;           /* a virtual file's content */
    /* The fetch that fills the staging file fd reads (a read-only open of a
     * remote file during its fetch): reads wait for their range in it
     * (st_vfs_read_wait). Set at open, one reference, dropped at release. */
    vfetch *fetch;
    st_vfs_handle *prev, *next; /* st_vfs.open_handles, every handle (lock) */
};

/* Every handle is on v->open_handles from its open to its release (lock
 * held), so that st_vfs_close releases those the kernel never released (a
 * SIGTERM ends the connection with files, or the status file, open). */
static inline void vfs_handle_link(st_vfs *v, st_vfs_handle *h)
{
    h->prev = NULL;
    h->next = v->open_handles;
    if (h->next)
        h->next->prev = h;
    v->open_handles = h;
}

static inline void vfs_handle_unlink(st_vfs *v, st_vfs_handle *h)
{
    if (h->prev)
        h->prev->next = h->next;
    else
        v->open_handles = h->next;
    if (h->next)
        h->next->prev = h->prev;
}

#endif
