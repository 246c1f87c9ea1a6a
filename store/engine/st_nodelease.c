/*
 * st_nodelease — the node lease protocol over a backend (st_nodelease.h,
 * docs/NODES.md). No conditional PUT is needed: the loser of a race between
 * two claims finds the winner's lease at its next check, before it writes a
 * part record.
 */
#include "engine/st_nodelease.h"

#include <inttypes.h>
#include <string.h>

#include "util/st_wire.h"

static int is_live(const st_lease *l, int64_t now_ns)
{
    return now_ns - l->heartbeat_ns < l->ttl_ns + ST_NODELEASE_SKEW_NS;
}

st_err st_nodelease_claim(st_backend *b, const char *node, const st_lease *mine, st_claim_mode mode,
                          st_nodelease_gone_fn gone, st_lease *holder)
{
    char key[ST_KEY_MAX], text[ST_LEASE_TEXT_MAX];
    size_t len;
    st_bytes buf = {0};
    st_lease found;
    st_err e = st_key_lease(key, sizeof key, node);
    if (e)
        return e;
    e = st_get(b, key, 0, ST_GET_TO_END, &buf);
    int ours = 0;
    if (e == ST_OK && st_lease_decode(buf.data, buf.len, &found) == ST_OK) {
        ours = !strcmp(found.instance, mine->instance);
        if (!ours && is_live(&found, mine->heartbeat_ns) && !(gone && gone(&found))) {
            if (holder)
                *holder = found;
            st_bytes_free(&buf);
            return st_seterr(ST_ERR_BUSY,
                             "node name '%s' is held by another live ckptfs: instance %.8s…, pid "
                             "%" PRId64 " on host %s, heartbeat %.0f s ago; give this daemon "
                             "another --node, or stop that one",
                             node, found.instance, found.pid, found.host,
                             (double)(mine->heartbeat_ns - found.heartbeat_ns) / 1e9);
        }
    } else if (e != ST_OK && e != ST_ERR_NOT_FOUND) {
        st_bytes_free(&buf);
        return e;
    }
    /* else: no lease, or garbage where the lease should be: ours to write */
    st_bytes_free(&buf);
    if (mode == ST_CLAIM_CHECK || (ours && mode == ST_CLAIM_ACQUIRE))
        return ST_OK;
    if ((e = st_lease_encode(mine, text, &len)))
        return e;
    return st_put(b, key, text, len);
}
