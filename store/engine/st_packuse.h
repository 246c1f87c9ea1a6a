/*
 * st_packuse — the look a writer takes at a pack before it references it
 * (docs/GC.md, "Writers"): its pending marker first, then the pack.
 * Threads: stateless; the backend is thread-safe.
 */
#ifndef ST_PACKUSE_H
#define ST_PACKUSE_H

#include <stdint.h>

#include "backend/st_backend.h"
#include "st_error.h"
#include "util/st_hash.h"

/*!
 * ST_OK if pack may be referenced, ST_ERR_BUSY if it carries a pending
 * marker or is gone (the message says which), other codes for store
 * errors. The marker is looked at before the pack, because the GC deletes
 * the pack before its marker. With young_ok_until_ns non-NULL, a marker is
 * accepted (ST_OK) when its age by the store's clock is surely under
 * grace/2 (docs/GC.md, "Clocks"); *young_ok_until_ns, a deadline on this
 * process's monotonic clock (st_mono_ns), is then lowered to when that
 * half grace ends, counted from before the look (else unchanged).
 */
st_err st_packuse_check(st_backend *b, const char *job, const st_id *pack,
                        int64_t *young_ok_until_ns);

#endif
