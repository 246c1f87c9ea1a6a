/*
 * fuzz_replica — libFuzzer target for st_replica_decode(), the replica
 * record every reader of a step with peers decodes from the store
 * (peer/st_replica.h; docs/PEERS.md).
 *
 * Input: one mode byte, then the candidate record. If bit 0 of the mode is
 * set, the trailing XXH3-64 is recomputed over the body first, so the fuzzer
 * reaches the structural checks instead of dying on the checksum.
 *
 * Properties checked (abort on violation):
 *   - the decoder returns OK, CORRUPT or NOMEM, and leaves *r empty on
 *     failure;
 *   - an accepted record's part record names its manifest and revision, its
 *     holders' names pass the name rules, and it re-encodes to the same
 *     bytes.
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "peer/st_replica.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const st_replica *r, const st_part *p, const uint8_t *buf, size_t len)
{
    st_id digest = st_id_of(r->manifest.data, r->manifest.len);
    if (p->revision != r->revision || p->manifest_len != r->manifest.len ||
        st_id_cmp(&p->manifest_digest, &digest))
        abort();
    if (!r->nholders || r->nholders > ST_REPLICA_MAX_HOLDERS)
        abort();
    for (size_t i = 0; i < r->nholders; i++)
        if (!st_name_is_valid(r->holders[i].node, ST_NODE_MAX) || !r->holders[i].addr[0])
            abort();
    st_bytes again = {0};
    if (st_replica_encode(r, &again) != ST_OK || again.len != len || memcmp(again.data, buf, len))
        abort();
    st_bytes_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len;
    uint8_t *buf = fuzz_object_copy(data, size, &len);
    if (!buf)
        return 0;
    st_replica r;
    st_part p;
    st_err e = st_replica_decode(buf, len, &r, &p);
    if (e == ST_OK) {
        check_accepted(&r, &p, buf, len);
        st_part_free(&p);
        st_replica_free(&r);
    } else if ((e != ST_ERR_CORRUPT && e != ST_ERR_NOMEM) || !fuzz_all_zero(&r, sizeof r)) {
        abort(); /* a failed decode leaves nothing behind */
    }
    free(buf);
    return 0;
}
