/*
 * fuzz_part — libFuzzer target for st_part_decode(), the part record every
 * reader of a step decodes from the store (format/st_part.h).
 *
 * Input: one mode byte, then the candidate record. If bit 0 of the mode is
 * set, the trailing XXH3-64 is recomputed over the body first, so the fuzzer
 * reaches the structural checks instead of dying on the checksum.
 *
 * Properties checked (abort on violation):
 *   - the decoder returns OK, CORRUPT, UNSUPPORTED or NOMEM, and leaves *p
 *     empty on failure;
 *   - an accepted record re-encodes and decodes again to the same record;
 *   - every name it accepts passes the name rules the keys rely on.
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_input.h"
#include "format/st_part.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_part(const st_part *a, const st_part *b)
{
    if (a->step != b->step || a->created_ns != b->created_ns || strcmp(a->job, b->job) ||
        strcmp(a->node, b->node) || a->revision != b->revision ||
        a->manifest_len != b->manifest_len ||
        memcmp(&a->manifest_digest, &b->manifest_digest, sizeof a->manifest_digest) ||
        a->complete != b->complete || a->rank_coverage != b->rank_coverage ||
        a->world_size != b->world_size || a->nexpected != b->nexpected ||
        a->ncommits != b->ncommits || memcmp(a->lineage, b->lineage, sizeof a->lineage))
        return 0;
    for (size_t i = 0; i < a->nexpected; i++)
        if (strcmp(a->expected[i], b->expected[i]))
            return 0;
    return !a->ncommits || !memcmp(a->commits, b->commits, a->ncommits * sizeof *a->commits);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t len;
    uint8_t *buf = fuzz_object_copy(data, size, &len);
    if (!buf)
        return 0;

    st_part p;
    st_err e = st_part_decode(buf, len, &p);
    if (e == ST_OK) {
        if (!st_name_is_valid(p.job, ST_JOB_MAX) || !st_name_is_valid(p.node, ST_NODE_MAX))
            abort(); /* a key built from these names could escape its prefix */
        st_bytes re = {0};
        st_part again;
        if (st_part_encode(&p, &re) != ST_OK || st_part_decode(re.data, re.len, &again) != ST_OK)
            abort(); /* accepted but not re-encodable */
        if (!same_part(&p, &again))
            abort();
        st_part_free(&again);
        st_bytes_free(&re);
        st_part_free(&p);
    } else if ((e != ST_ERR_CORRUPT && e != ST_ERR_UNSUPPORTED && e != ST_ERR_NOMEM) ||
               !fuzz_all_zero(&p, sizeof p)) {
        abort();
    }
    free(buf);
    return 0;
}
