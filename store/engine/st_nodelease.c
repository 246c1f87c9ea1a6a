/*
 * st_nodelease — the node lease protocol over a backend (st_nodelease.h,
 * docs/NODES.md). A lease written where none was read is a create
 * (st_put_new): of two daemons that start together exactly one holds the
 * name, the other reads the winner's lease and is refused. Stores without
 * a create, and leases that replace one (stale, or a heartbeat), are plain
 * PUTs: the loser of a race between two such claims finds the winner's
 * lease at its next check, before it writes a part record.
 */
#include "engine/st_nodelease.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "util/st_wire.h"

/* The age of a lease is the store's (docs/NODES.md, "Clocks"): when the
 * store wrote the holder's last heartbeat, against the store's time now.
 * The heartbeat stamp in its text is the holder's wall clock: a holder
 * whose clock ran ahead would otherwise stay live for as long as the skew. */
static st_err lease_age(st_backend *b, const char *key, int64_t *age_ns)
{
    return st_store_age(b, key, age_ns, NULL);
}

/* What the message adds when the holder's stamp and the store disagree by
 * more than the margin: the clocks are off, and by how much. */
static void clock_note(char *out, size_t cap, int64_t stamp_age_ns, int64_t store_age_ns)
{
    int64_t off = store_age_ns - stamp_age_ns; /* > 0: the holder's clock is ahead of ours */
    out[0] = '\0';
    if (off > ST_NODELEASE_SKEW_NS || off < -ST_NODELEASE_SKEW_NS)
        snprintf(out, cap,
                 "; the clocks disagree: its heartbeat stamp is %.0f s %s this host's clock, so "
                 "its age is the store's",
                 (double)(off < 0 ? -off : off) / 1e9, off > 0 ? "ahead of" : "behind");
}

/* How a claim's read judged the lease: may mine write it, and is there one. */
typedef enum lease_seen {
    SEEN_NONE, /* no lease object: a create can be used */
    SEEN_FREE, /* stale, gone holder, or not a lease: replaced */
    SEEN_OURS, /* held by mine->instance */
    SEEN_HELD  /* another live instance: ST_ERR_BUSY, message set */
} lease_seen;

/* Reads the lease at key and judges it for mine (st_nodelease_claim's
 * rules); store errors are returned as they are. */
static st_err judge(st_backend *b, const char *key, const char *node, const st_lease *mine,
                    st_nodelease_gone_fn gone, st_lease *holder, lease_seen *seen)
{
    st_bytes buf = {0};
    st_lease found;
    st_err e = st_get(b, key, 0, ST_GET_TO_END, &buf);
    *seen = e == ST_ERR_NOT_FOUND ? SEEN_NONE : SEEN_FREE;
    if (e == ST_OK && st_lease_decode(buf.data, buf.len, &found) == ST_OK) {
        int ours = !strcmp(found.instance, mine->instance);
        int64_t age = 0;
        st_err ae = ours ? ST_OK : lease_age(b, key, &age);
        if (ae == ST_ERR_NOT_FOUND)
            ae = ST_OK, age = INT64_MAX; /* deleted meanwhile: free */
        if (ae) {
            st_bytes_free(&buf);
            return ae;
        }
        *seen = ours ? SEEN_OURS : SEEN_FREE;
        if (!ours && age < found.ttl_ns + ST_NODELEASE_SKEW_NS && !(gone && gone(&found))) {
            char note[160];
            clock_note(note, sizeof note, mine->heartbeat_ns - found.heartbeat_ns, age);
            if (holder)
                *holder = found;
            *seen = SEEN_HELD;
            st_seterr(ST_ERR_BUSY,
                      "node name '%s' is held by another live ckptfs: instance %.8s…, pid "
                      "%" PRId64 " on host %s, heartbeat %.0f s ago by the store's clock%s; "
                      "give this daemon another --node, or stop that one",
                      node, found.instance, found.pid, found.host, (double)age / 1e9, note);
        }
    } else if (e != ST_OK && e != ST_ERR_NOT_FOUND) {
        st_bytes_free(&buf);
        return e;
    }
    /* else: no lease, or garbage where the lease should be: ours to write */
    st_bytes_free(&buf);
    return ST_OK;
}

st_err st_nodelease_claim(st_backend *b, const char *node, const st_lease *mine, st_claim_mode mode,
                          st_nodelease_gone_fn gone, st_lease *holder)
{
    char key[ST_KEY_MAX], text[ST_LEASE_TEXT_MAX];
    size_t len;
    lease_seen seen;
    st_err e = st_key_lease(key, sizeof key, node);
    if (e)
        return e;
    /* Two rounds at most: a create that meets a lease (another daemon's,
     * or this claim's own first try whose answer was lost) reads it again
     * and judges it like any other. */
    for (int round = 0;; round++) {
        if ((e = judge(b, key, node, mine, gone, holder, &seen)))
            return e;
        if (seen == SEEN_HELD)
            return ST_ERR_BUSY; /* message set by judge */
        if (mode == ST_CLAIM_CHECK || (seen == SEEN_OURS && mode == ST_CLAIM_ACQUIRE))
            return ST_OK;
        if ((e = st_lease_encode(mine, text, &len)))
            return e;
        if (seen != SEEN_NONE) /* an object to replace: a create cannot (docs/NODES.md) */
            return st_put(b, key, text, len);
        e = st_put_new(b, key, text, len);
        if (e == ST_ERR_UNSUPPORTED) /* a store without a create: as before */
            return st_put(b, key, text, len);
        if (e != ST_ERR_EXISTS)
            return e;
        if (round)
            return st_seterr(ST_ERR_BUSY,
                             "node name '%s': its lease was created by another claim twice "
                             "while this one tried; try again",
                             node);
    }
}
