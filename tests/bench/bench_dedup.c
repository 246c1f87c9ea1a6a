/*
 * bench_dedup — how much of file B a chunker finds in file A.
 *
 *   bench_dedup A B [min avg max] [--mode aware|cdc|fixed] [--feed BYTES] [--cuts]
 *
 * Chunks both files (streamed through st_chunker_next in --feed sized pieces,
 * default 1 MiB, as the store would), names every chunk with st_id_of, and
 * prints one line: chunk count and mean size of each file, and the % of B's
 * bytes whose chunk ids also occur in A ("found"). Modes:
 *   aware  the real chunker (format-aware cuts + FastCDC), the default;
 *   cdc    the same FastCDC with format sniffing defeated: each file is fed
 *          behind a 1-byte prefix that is not counted (the first chunk of a
 *          file never dedups anyway: it holds the archive name);
 *   fixed  fixed-size chunks of `avg` bytes.
 * Output is one tab-separated line so scripts can build tables from it.
 * --cuts first prints "cut OFFSET" for every chunk end in B (to check the
 * format-aware cuts of a real file against its record list).
 *
 * Single-threaded; memory: both files' chunk id lists (24 bytes a chunk).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_chunker.h"
#include "util/st_hash.h"

#include "bench_util.h"

typedef struct chunk_ref {
    st_id id;
    uint64_t len;
} chunk_ref;

typedef struct chunk_list {
    chunk_ref *v;
    size_t n, cap;
    uint64_t bytes;
} chunk_list;

enum mode { MODE_AWARE, MODE_CDC, MODE_FIXED };

static int list_push(chunk_list *l, const uint8_t *p, size_t len)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        chunk_ref *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n].id = st_id_of(p, len);
    l->v[l->n].len = len;
    l->n++;
    l->bytes += len;
    return 0;
}

/* Where push_chunk puts chunks: the fed bytes, and how many bytes of the
 * first chunk to drop (1 in cdc mode: the prefix). */
typedef struct chunk_sink {
    const uint8_t *s;
    size_t skip;
    chunk_list *out;
} chunk_sink;

static int push_chunk(void *ctx, size_t start, size_t end)
{
    chunk_sink *k = ctx;
    size_t b = start == 0 ? k->skip : start;
    return end > b && list_push(k->out, k->s + b, end - b);
}

/* Chunks data[1..1+len) (data[0] is spare room for the cdc-mode prefix). */
static int chunk_file(uint8_t *data, size_t len, const st_chunker_params *p, enum mode m,
                      size_t feed, chunk_list *out)
{
    if (m == MODE_FIXED) {
        for (size_t off = 0; off < len; off += p->avg_size) {
            size_t n = len - off < p->avg_size ? len - off : p->avg_size;
            if (list_push(out, data + 1 + off, n))
                return -1;
        }
        return 0;
    }
    st_chunker *c;
    if (st_chunker_new(p, &c) != ST_OK)
        return -1;
    const uint8_t *s = data + 1;
    size_t total = len;
    if (m == MODE_CDC) {
        data[0] = 0xA5; /* matches no format's magic */
        s = data;
        total = len + 1;
    }
    chunk_sink k = {s, m == MODE_CDC, out};
    int rc = bench_chunk_stream(c, s, total, feed, push_chunk, &k);
    st_chunker_free(c);
    return rc;
}

static int id_cmp(const void *a, const void *b)
{
    return st_id_cmp(a, b);
}

int main(int argc, char **argv)
{
    st_chunker_params p = st_chunker_default_params;
    enum mode m = MODE_AWARE;
    size_t feed = 1 << 20;
    int print_cuts = 0;
    const char *pos_args[5];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *v = argv[++i];
            m = !strcmp(v, "cdc") ? MODE_CDC : !strcmp(v, "fixed") ? MODE_FIXED : MODE_AWARE;
        } else if (!strcmp(argv[i], "--feed") && i + 1 < argc) {
            feed = strtoul(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--cuts")) {
            print_cuts = 1;
        } else if (npos < 5) {
            pos_args[npos++] = argv[i];
        }
    }
    if ((npos != 2 && npos != 5) || feed == 0) {
        fprintf(stderr,
                "usage: %s A B [min avg max] [--mode aware|cdc|fixed] [--feed N] [--cuts]\n",
                argv[0]);
        return 2;
    }
    if (npos == 5) {
        p.min_size = (uint32_t)strtoul(pos_args[2], NULL, 0);
        p.avg_size = (uint32_t)strtoul(pos_args[3], NULL, 0);
        p.max_size = (uint32_t)strtoul(pos_args[4], NULL, 0);
    }

    int rc = 1;
    size_t la = 0, lb = 0;
    uint8_t *a = bench_read_file(pos_args[0], 1, &la);
    uint8_t *b = bench_read_file(pos_args[1], 1, &lb);
    chunk_list ca = {0}, cb = {0};
    st_id *ids = NULL;
    if (!a || !b) {
        fprintf(stderr, "cannot read %s\n", !a ? pos_args[0] : pos_args[1]);
        goto out;
    }
    if (chunk_file(a, la, &p, m, feed, &ca) || chunk_file(b, lb, &p, m, feed, &cb)) {
        fprintf(stderr, "chunking failed (params %u/%u/%u): %s\n", p.min_size, p.avg_size,
                p.max_size, st_errmsg());
        goto out;
    }
    ids = malloc((ca.n ? ca.n : 1) * sizeof *ids);
    if (!ids)
        goto out;
    for (size_t i = 0; i < ca.n; i++)
        ids[i] = ca.v[i].id;
    qsort(ids, ca.n, sizeof *ids, id_cmp);
    uint64_t found = 0;
    size_t found_chunks = 0;
    for (size_t i = 0; i < cb.n; i++) {
        if (bsearch(&cb.v[i].id, ids, ca.n, sizeof *ids, id_cmp)) {
            found += cb.v[i].len;
            found_chunks++;
        }
    }
    if (print_cuts) {
        uint64_t end = 0;
        for (size_t i = 0; i < cb.n; i++) {
            end += cb.v[i].len;
            printf("cut %llu\n", (unsigned long long)end);
        }
    }
    static const char *mode_names[] = {"aware", "cdc", "fixed"};
    printf("mode\tmin\tavg\tmax\tA_chunks\tA_mean\tB_chunks\tB_mean\tB_found_chunks\tfound_pct\n");
    printf("%s\t%u\t%u\t%u\t%zu\t%.0f\t%zu\t%.0f\t%zu\t%.2f\n", mode_names[m], p.min_size,
           p.avg_size, p.max_size, ca.n, ca.n ? (double)ca.bytes / ca.n : 0.0, cb.n,
           cb.n ? (double)cb.bytes / cb.n : 0.0, found_chunks,
           cb.bytes ? 100.0 * (double)found / (double)cb.bytes : 0.0);
    rc = (ca.bytes == la && cb.bytes == lb) ? 0 : 1;
    if (rc)
        fprintf(stderr, "chunk bytes do not add up to the file sizes\n");
out:
    free(ids);
    free(ca.v);
    free(cb.v);
    free(a);
    free(b);
    return rc;
}
