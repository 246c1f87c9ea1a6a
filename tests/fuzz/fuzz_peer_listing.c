/*
 * fuzz_peer_listing — libFuzzer target for st_peer_listing_decode(), the
 * body of GET /v1/replicas a reader decodes from a peer it does not trust
 * (peer/st_peer_listing.h; docs/PEERS.md, "Restoring from peers alone").
 *
 * Properties checked (abort on violation):
 *   - the decoder returns OK, CORRUPT or NOMEM, and leaves *l empty on
 *     failure;
 *   - an accepted listing has at most ST_PEER_LISTING_MAX replicas, every
 *     name passes the name rules, and it re-encodes to the same bytes.
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "peer/st_peer_listing.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    st_peer_listing l;
    st_err e = st_peer_listing_decode(data, size, &l);
    if (e == ST_OK) {
        if (l.n > ST_PEER_LISTING_MAX)
            abort();
        for (size_t i = 0; i < l.n; i++)
            if (!st_name_is_valid(l.items[i].job, ST_JOB_MAX) ||
                !st_name_is_valid(l.items[i].node, ST_NODE_MAX) || !l.items[i].manifest_len)
                abort();
        st_bytes again = {0};
        if (st_peer_listing_encode(l.items, l.n, l.truncated, &again) != ST_OK ||
            again.len != size || memcmp(again.data, data, size))
            abort();
        st_bytes_free(&again);
        st_peer_listing_free(&l);
    } else if ((e != ST_ERR_CORRUPT && e != ST_ERR_NOMEM) || !fuzz_all_zero(&l, sizeof l)) {
        abort(); /* a failed decode leaves nothing behind */
    }
    return 0;
}
