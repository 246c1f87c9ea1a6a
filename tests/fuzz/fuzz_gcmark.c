/*
 * fuzz_gcmark — libFuzzer target for the decoders of the objects GC writes
 * into the store (format/st_gcmark.h): pending markers, intents, and the
 * names of compaction fences (a writer parses every listed one). All are
 * read back from the bucket, where anyone with write access may put garbage.
 *
 * Input: one selector byte (bit 0 set: intent; else bit 1 set: fence name;
 * else pending marker), then the candidate object.
 *
 * Properties checked (abort on violation):
 *   - the decoders return OK, CORRUPT or NOMEM only;
 *   - an accepted marker has non-negative times, and its canonical
 *     re-encoding decodes to the same times;
 *   - an accepted intent re-encodes to a text that decodes to the same
 *     stamp and steps; a failed decode leaves no array behind;
 *   - an accepted fence name has 0 <= t0 <= until, and the key built from
 *     them ends in the same 41 characters of stamps.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_gcmark.h"
#include "fuzz_input.h"
#include "util/st_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_marker(const uint8_t *buf, size_t len)
{
    int64_t marked = -1, grace = -1;
    st_err e = st_gcmark_pending_decode(buf, len, &marked, &grace);
    if (e != ST_OK) {
        if (e != ST_ERR_CORRUPT)
            abort();
        return;
    }
    if (marked < 0 || grace < 0)
        abort();
    char text[128];
    size_t n;
    if (st_gcmark_pending_encode(text, sizeof text, marked, grace, &n) != ST_OK)
        abort();
    /* Leading zeros or a '+' decode too; only the canonical form must round-trip. */
    int64_t m2, g2;
    if (st_gcmark_pending_decode(text, n, &m2, &g2) != ST_OK || m2 != marked || g2 != grace)
        abort();
}

static void check_intent(const uint8_t *buf, size_t len)
{
    int64_t t0 = -1;
    uint64_t *steps = NULL;
    size_t n = 0;
    st_err e = st_gcmark_intent_decode(buf, len, &t0, &steps, &n);
    if (e != ST_OK) {
        if (e != ST_ERR_CORRUPT && e != ST_ERR_NOMEM)
            abort();
        free(steps);
        return;
    }
    if (t0 < 0 || (n && !steps))
        abort();
    st_bytes re = {0};
    int64_t t1;
    uint64_t *steps1 = NULL;
    size_t n1 = 0;
    if (st_gcmark_intent_encode(t0, steps, n, &re) != ST_OK ||
        st_gcmark_intent_decode(re.data, re.len, &t1, &steps1, &n1) != ST_OK || t1 != t0 ||
        n1 != n || (n && memcmp(steps, steps1, n * sizeof *steps)))
        abort();
    free(steps1);
    st_bytes_free(&re);
    free(steps);
}

static void check_fence(const uint8_t *buf, size_t len)
{
    char *name = malloc(len + 1); /* the parser reads a C string: a listed key */
    if (!name)
        return;
    memcpy(name, buf, len);
    name[len] = '\0';
    int64_t t0 = -1, until = -1;
    st_err e = st_gcmark_fence_parse(name, &t0, &until);
    if (e != ST_OK && e != ST_ERR_CORRUPT)
        abort();
    if (e == ST_OK) {
        char key[256];
        if (t0 < 0 || until < t0 || st_key_gc_fence(key, sizeof key, "j", t0, until, 0) != ST_OK ||
            strncmp(key + strlen("jobs/j/gc/compacting/"), name, 41))
            abort();
    }
    free(name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* mode bit 0 set; else bit 1 set; else */
    static const fuzz_mode_fn modes[] = {check_intent, check_fence, check_marker};
    return fuzz_run_mode(data, size, modes, 3);
}
