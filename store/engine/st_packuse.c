/*
 * st_packuse — may a writer reference a pack? The writer's side of the GC
 * protocol (docs/GC.md, "Writers"), shared by st_ingest (through
 * st_gc_pack_usable) and st_compact (the compactor is a writer of new
 * packs). See st_packuse.h. Threads: stateless.
 */
#include "engine/st_packuse.h"

#include <stdio.h>

#include "util/st_fsutil.h"
#include "format/st_gcmark.h"
#include "format/st_part.h"

st_err st_packuse_check(st_backend *b, const char *job, const st_id *pack,
                        int64_t *young_ok_until_ns)
{
    char key[ST_KEY_MAX], hex[ST_ID_HEX_LEN + 1];
    uint64_t size;
    st_err e = st_key_gc_pending(key, sizeof key, job, pack);
    if (e)
        return e;
    /* The marker first: the GC deletes a pack before its marker, so "no
     * marker, then the pack" cannot both hold for a pack being deleted.
     * Its age is the store's (docs/GC.md, "Clocks"): the stamp in its text
     * is the marking host's clock, which this host's need not match. */
    const int64_t looked_ns = st_mono_ns();
    int64_t age_at_most;
    e = st_store_age(b, key, NULL, &age_at_most);
    if (e == ST_OK) {
        if (!young_ok_until_ns)
            return st_seterr(ST_ERR_BUSY, "pack %s is pending deletion by GC",
                             st_id_hex(pack, hex));
        st_bytes buf = {0};
        int64_t marked, grace;
        e = st_get(b, key, 0, ST_GET_TO_END, &buf);
        if (!e)
            e = st_gcmark_pending_decode(buf.data, buf.len, &marked, &grace);
        st_bytes_free(&buf);
        if (e == ST_ERR_NOT_FOUND)
            e = ST_OK; /* unmarked meanwhile: look at the pack below */
        else if (e)
            return e;
        else if (age_at_most == INT64_MAX)
            return st_seterr(ST_ERR_BUSY,
                             "pack %s was marked for GC at a time the store puts in its own "
                             "future: not publishing a reference to it",
                             st_id_hex(pack, hex));
        else if (age_at_most >= grace / 2)
            return st_seterr(ST_ERR_BUSY,
                             "pack %s was marked for GC %.1f s ago by the store's clock (grace "
                             "%.1f s): too late to publish a reference to it",
                             st_id_hex(pack, hex), (double)age_at_most / 1e9, (double)grace / 1e9);
        else if (looked_ns + (grace / 2 - age_at_most) < *young_ok_until_ns)
            *young_ok_until_ns = looked_ns + (grace / 2 - age_at_most);
    } else if (e != ST_ERR_NOT_FOUND) {
        return e;
    }
    if ((e = st_key_pack(key, sizeof key, job, pack)))
        return e;
    e = st_stat(b, key, &size);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_BUSY, "pack %s is gone (deleted by GC)", st_id_hex(pack, hex));
    return e;
}
