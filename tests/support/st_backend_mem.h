/*
 * st_backend_mem — an object store in process memory, for tests: the mount
 * model and the engine run over it in unit tests without a disk store or a
 * network (as restic's internal/backend/mem). It implements st_backend.h's
 * contract exactly (atomic put, a create (put_new), ranged get, stat,
 * ascending prefix list, idempotent del) and passes tests/unit/backend_conformance.h.
 *
 * Nothing survives the last handle: a test that needs a store to outlive one
 * st_vfs or one node opens another handle on it with st_backend_mem_share(),
 * as two nodes each have their own connection to one bucket.
 *
 * Threads: every op on every handle of one store may run concurrently (the
 * mount's uploader, refresher and GC threads share a handle); one mutex per
 * store serialises them. A list callback runs without that mutex held, so it
 * may call the store again.
 */
#ifndef ST_BACKEND_MEM_H
#define ST_BACKEND_MEM_H

#include "backend/st_backend.h"

/*!
 * Opens a new, empty in-memory store. *out is a malloc'd st_backend (scheme
 * "mem"), freed with st_backend_close(); the store's objects go with its
 * last handle. ST_ERR_NOMEM or ST_ERR_INVALID (out NULL).
 */
st_err st_backend_mem_open(st_backend **out);

/*!
 * Opens another handle on the store behind b, which must be a handle from
 * st_backend_mem_open() or st_backend_mem_share() (ST_ERR_INVALID
 * otherwise). Each handle is closed on its own with st_backend_close(); the
 * store lives until the last one is closed. A handle may be wrapped
 * (st_backend_fault_wrap takes ownership of the handle, not of the store).
 */
st_err st_backend_mem_share(st_backend *b, st_backend **out);

/*!
 * Sets when the store wrote key, by its clock (this process's wall clock):
 * how a test makes an object look written long ago (or in the store's
 * future) without waiting. b as for st_backend_mem_share; ST_ERR_NOT_FOUND
 * if key is not there.
 */
st_err st_backend_mem_set_mtime(st_backend *b, const char *key, int64_t mtime_ns);

#endif
