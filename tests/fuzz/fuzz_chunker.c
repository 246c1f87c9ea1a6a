/*
 * libFuzzer target for st_chunker: on any input, cut positions must be
 * strictly increasing, no chunk may exceed max_size, and feeding the same
 * bytes in fuzzer-chosen piece sizes must give exactly the same cuts as
 * feeding them whole (the streaming contract). Aborts on any violation.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "format/st_chunker.h"

static size_t cuts_a[1 << 17], cuts_b[1 << 17];

static size_t run(const st_chunker_params *p, const uint8_t *d, size_t len, const uint8_t *feeds,
                  size_t nfeeds, size_t *cuts)
{
    st_chunker *c;
    if (st_chunker_new(p, &c))
        abort();
    size_t n = 0, pos = 0, fi = 0;
    while (pos < len) {
        size_t f = nfeeds ? 1 + feeds[fi++ % nfeeds] % 97 : len;
        if (f > len - pos)
            f = len - pos;
        size_t off = 0;
        while (off < f) {
            int cut;
            size_t k = st_chunker_next(c, d + pos + off, f - off, &cut);
            if (k > f - off || (!cut && k != f - off) || (cut && k == 0))
                abort();
            off += k;
            if (cut)
                cuts[n++] = pos + off;
        }
        pos += f;
    }
    if (!n || cuts[n - 1] != len)
        cuts[n++] = len;
    size_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        if (cuts[i] <= prev && !(i == 0 && len == 0))
            abort();
        if (cuts[i] - prev > p->max_size)
            abort();
        prev = cuts[i];
    }
    st_chunker_free(c);
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const st_chunker_params ps[] = {
        {64, 64, 64}, {64, 128, 512}, {256, 1024, 4096}, {1024, 4096, 8192}};
    if (size < 1)
        return 0;
    const st_chunker_params *p = &ps[data[0] & 3];
    size_t na = run(p, data, size, NULL, 0, cuts_a);
    size_t nb = run(p, data, size, data, size < 64 ? size : 64, cuts_b);
    if (na != nb || memcmp(cuts_a, cuts_b, na * sizeof *cuts_a))
        abort();
    return 0;
}
