/*
 * test_ingest_seal — the seal threads change nothing stored (st_ingest.c,
 * "Seal threads").
 *
 * What: the same two steps (float-like, compressible, int8, random and mixed
 * files; a sparse file and one with chunks of zeros; small files in bundles;
 * duplicates within a file, across files and of the first step) ingested
 * with 1, 2, 4 and 8 seal threads (8 twice) give the same store byte for
 * byte (every pack: bytes and key) and the same manifests byte for byte;
 * every file reads back from its references; an encode that fails mid-way
 * fails the ingest, and freeing it with work in flight joins and frees
 * everything (ASan's leak check).
 *
 * How: files written once into the test's temp tree (holes included), an
 * in-memory store and an index per run. Data comes from fixed seeds.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "engine/st_ingest.h"
#include "engine/st_state.h"
#include "format/st_codec.h"
#include "format/st_manifest.h"
#include "format/st_part.h"
#include "st_backend_mem.h"
#include "ut.h"

#define MIB  (1u << 20)
#define JOB  "job"
#define NRUN 5

static char root[] = "/tmp/ckpt-ingest-seal-XXXXXX";

static uint64_t rng_state;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Float32 weights near a slow drift: LZ4 over a 4-byte shuffle wins. */
static void fill_floats(uint8_t *p, size_t len)
{
    float drift = 0.01f;
    for (size_t i = 0; i + 4 <= len; i += 4) {
        if (!(i % 65536))
            drift = (float)(rng() % 1000) / 1000.0f;
        float v = drift + (float)((int)(rng() % 2001) - 1000) * 1e-5f;
        memcpy(p + i, &v, 4);
    }
}

static void fill_text(uint8_t *p, size_t len)
{
    static const char *words[] = {"layer", "weight", "bias", "optimizer", "step", "exp_avg"};
    for (size_t i = 0; i < len; i++) {
        const char *w = words[rng() % 6];
        size_t n = strlen(w);
        for (size_t k = 0; k < n && i < len; k++)
            p[i++] = (uint8_t)w[k];
        if (i < len)
            p[i] = ' ';
    }
}

static void fill_random(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)rng();
}

static void fill_int8(uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)(rng() % 7 == 0 ? rng() : rng() % 5);
}

/* The test's files: name, then bytes written at offsets (holes between). */
#define NBIG 11
static const char *big_names[NBIG] = {"a/floats.bin", "a/floats_copy.bin", "a/mixed.bin",
                                      "b/random.bin", "b/sparse.bin",      "b/tail.bin",
                                      "b/tail2.bin",  "b/text.bin",        "b/zeros.bin",
                                      "c/int8.bin",   "c/repeat.bin"};

static void write_file(const char *rel, const uint8_t *data, size_t len, off_t at, int trunc)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    mkdir(path, 0755);
    *slash = '/';
    int fd = open(path, O_WRONLY | O_CREAT | (trunc ? O_TRUNC : 0), 0644);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, data, len, at) == (ssize_t)len);
    close(fd);
}

/* Writes the files of step (1 or 2: a few files changed, some added). */
static void make_files(int step)
{
    uint8_t *buf = malloc(32 * MIB);
    CHECK(buf != NULL);
    rng_state = 0x5EA1u + (uint64_t)step;
    fill_floats(buf, 12 * MIB);
    if (step == 2)
        fill_floats(buf + 5 * MIB, MIB); /* a changed middle */
    write_file(big_names[0], buf, 12 * MIB, 0, 1);
    write_file(big_names[1], buf, 12 * MIB, 0, 1);
    rng_state = 0xC0DEu;
    fill_floats(buf, 3 * MIB);
    fill_int8(buf + 3 * MIB, 2 * MIB);
    fill_random(buf + 5 * MIB, MIB);
    fill_text(buf + 6 * MIB, 2 * MIB);
    fill_floats(buf + 8 * MIB, 2 * MIB);
    write_file(big_names[2], buf, 10 * MIB, 0, 1);
    fill_random(buf, 30 * MIB); /* more than a pack: pack boundaries */
    write_file(big_names[3], buf, 30 * MIB, 0, 1);
    fill_text(buf, MIB);
    write_file(big_names[4], buf, MIB, 0, 1);
    write_file(big_names[4], buf, MIB, 6 * MIB, 0); /* a hole of 5 MiB */
    /* Twice the same: a MiB, a hole, a tiny chunk of 1000 bytes (the
     * tiny-chunk rule needs the locations of chunks still in flight). */
    fill_floats(buf, MIB + 1000);
    for (int i = 5; i <= 6; i++) {
        write_file(big_names[i], buf, MIB, 0, 1);
        write_file(big_names[i], buf + MIB, 1000, 3 * MIB, 0);
    }
    fill_text(buf, 3 * MIB);
    write_file(big_names[7], buf, 3 * MIB, 0, 1);
    memset(buf, 0, 2 * MIB);
    fill_random(buf + 2 * MIB, 100000);
    write_file(big_names[8], buf, 2 * MIB + 100000, 0, 1);
    fill_int8(buf, 4 * MIB);
    write_file(big_names[9], buf, 4 * MIB, 0, 1);
    fill_floats(buf, MIB); /* the same MiB five times */
    for (int i = 1; i < 5; i++)
        memcpy(buf + (size_t)i * MIB, buf, MIB);
    write_file(big_names[10], buf, 5 * MIB, 0, 1);
    /* Small files: some equal, for bundles. */
    for (int i = 0; i < 300; i++) {
        char rel[64];
        snprintf(rel, sizeof rel, "s/%03d.txt", i);
        size_t len = 50 + (size_t)(i * 37 % 3900);
        rng_state = 0xF00Du + (uint64_t)(i % 250) + (step == 2 && i == 77 ? 999u : 0u);
        fill_text(buf, len);
        write_file(rel, buf, len, 0, 1);
    }
    free(buf);
}

/* Ingests the test's files in tree order into g. */
static st_err ingest_files(st_ingest *g)
{
    st_err e = ST_OK;
    for (int i = 0; i < NBIG + 300 && !e; i++) {
        char rel[64], path[512];
        if (i < NBIG)
            snprintf(rel, sizeof rel, "%s", big_names[i]);
        else
            snprintf(rel, sizeof rel, "s/%03d.txt", i - NBIG);
        snprintf(path, sizeof path, "%s/%s", root, rel);
        int fd = open(path, O_RDONLY);
        CHECK(fd >= 0);
        struct stat st;
        CHECK(fstat(fd, &st) == 0);
        st.st_mtim.tv_sec = 1764633600; /* the files are written again for each run */
        st.st_mtim.tv_nsec = i;
        e = st_ingest_file(g, fd, rel, &st, 0);
        close(fd);
    }
    return e;
}

/* Everything in a store, key and bytes, in key order. */
typedef struct store_dump {
    char **keys;
    st_bytes *vals;
    size_t n;
} store_dump;

static int add_key(void *arg, const char *key, uint64_t size)
{
    (void)size;
    store_dump *d = arg;
    d->keys = realloc(d->keys, (d->n + 1) * sizeof *d->keys);
    d->keys[d->n++] = strdup(key);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dump_store(st_backend *b, store_dump *d)
{
    memset(d, 0, sizeof *d);
    CHECK_OK(st_list(b, "", add_key, d));
    qsort(d->keys, d->n, sizeof *d->keys, cmp_str);
    d->vals = calloc(d->n ? d->n : 1, sizeof *d->vals);
    for (size_t i = 0; i < d->n; i++) {
        uint64_t size = 0;
        CHECK_OK(st_stat(b, d->keys[i], &size));
        CHECK_OK(st_get(b, d->keys[i], 0, size, &d->vals[i]));
    }
}

static void dump_free(store_dump *d)
{
    for (size_t i = 0; i < d->n; i++) {
        free(d->keys[i]);
        st_bytes_free(&d->vals[i]);
    }
    free(d->keys);
    free(d->vals);
}

static int same_store(const store_dump *a, const store_dump *b)
{
    if (a->n != b->n)
        return 0;
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->keys[i], b->keys[i]) || a->vals[i].len != b->vals[i].len ||
            memcmp(a->vals[i].data, b->vals[i].data, a->vals[i].len))
            return 0;
    return 1;
}

/* Reads every file of m back from b (chunks, holes, slices) and compares it
 * with the file in the temp tree; counts the chunks' codecs into codecs[]. */
static int read_back(st_backend *b, const st_manifest *m, uint64_t codecs[ST_CODEC_ZSTD_SHUF4 + 1])
{
    uint8_t *scratch = malloc(st_codec_scratch_bound(ST_CODEC_MAX_RAW));
    uint8_t *raw = malloc(ST_CODEC_MAX_RAW);
    int ok = scratch && raw;
    for (size_t i = 0; ok && i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        char path[512];
        snprintf(path, sizeof path, "%s/%s", root, f->path);
        int fd = open(path, O_RDONLY);
        uint8_t *want = malloc(f->size ? f->size : 1);
        ok = fd >= 0 && want && pread(fd, want, f->size, 0) == (ssize_t)f->size;
        uint64_t at = 0;
        for (size_t k = 0; ok && k < f->nchunks; k++) {
            const st_chunk_ref *c = &f->chunks[k];
            if (st_chunk_is_hole(c)) {
                for (uint64_t z = 0; ok && z < c->raw_len; z++)
                    ok = want[at + z] == 0;
                at += c->raw_len;
                continue;
            }
            char key[ST_KEY_MAX];
            st_bytes enc = {0};
            size_t len = 0;
            st_chunk_header h;
            ok =
                c->pack < m->npacks && !st_key_pack(key, sizeof key, JOB, &m->packs[c->pack]) &&
                !st_get(b, key, c->offset, c->stored_len, &enc) &&
                !st_codec_decode(enc.data, enc.len, &c->id, raw, ST_CODEC_MAX_RAW, &len, scratch) &&
                memcmp(raw + c->skip, want + at, c->raw_len) == 0 &&
                !st_codec_header(enc.data, enc.len, &h);
            if (ok)
                codecs[h.codec]++;
            st_bytes_free(&enc);
            at += c->raw_len;
        }
        ok = ok && at == f->size;
        if (!ok)
            fprintf(stderr, "read back: %s differs\n", f->path);
        free(want);
        if (fd >= 0)
            close(fd);
    }
    free(scratch);
    free(raw);
    return ok;
}

typedef struct run_result {
    store_dump store;
    st_bytes manifest[2];
    st_ingest_stats stats[2];
    uint64_t codecs[ST_CODEC_ZSTD_SHUF4 + 1]; /* chunks read back, by codec */
} run_result;

/* Both steps with n seal threads into a new store; lz4_only as
 * st_ingest_set_lz4_only. */
static void run(unsigned n, int lz4_only, run_result *r, int check_read_back)
{
    char path[512];
    st_backend *b = NULL;
    st_state *state = NULL;
    static int runs;
    memset(r, 0, sizeof *r);
    CHECK_OK(st_backend_mem_open(&b));
    snprintf(path, sizeof path, "%s/index-%d.db", root, runs++);
    CHECK_OK(st_state_open(path, &state));
    for (int step = 1; step <= 2; step++) {
        make_files(step);
        st_ingest *g = NULL;
        CHECK_OK(st_ingest_new(b, state, JOB, NULL, &g));
        st_ingest_set_seal_threads(g, n);
        st_ingest_set_lz4_only(g, lz4_only);
        CHECK_OK(ingest_files(g));
        st_manifest m = {0};
        CHECK_OK(st_ingest_finish(g, &m));
        m.step = (uint64_t)step;
        m.node = "n1";
        m.job = JOB;
        m.created_ns = 1764633600000000000ll;
        CHECK_OK(st_manifest_encode(&m, &r->manifest[step - 1]));
        if (check_read_back)
            CHECK(read_back(b, &m, r->codecs));
        m.node = m.job = NULL;
        st_manifest_free(&m);
        r->stats[step - 1] = *st_ingest_get_stats(g);
        st_ingest_free(g);
    }
    dump_store(b, &r->store);
    st_state_close(state);
    st_backend_close(b);
}

static void run_free(run_result *r)
{
    dump_free(&r->store);
    st_bytes_free(&r->manifest[0]);
    st_bytes_free(&r->manifest[1]);
}

static void test_same_bytes_for_any_threads(void)
{
    static const unsigned threads[NRUN] = {1, 2, 4, 8, 8};
    run_result base;
    run(threads[0], 0, &base, 1);
    CHECK(base.stats[0].packs >= 2);                                /* more than one pack */
    CHECK(base.stats[0].bundles >= 2);                              /* small files bundled */
    CHECK(base.stats[0].hole_bytes >= MIB);                         /* holes and zeros */
    CHECK(base.stats[1].new_chunks < base.stats[0].new_chunks / 4); /* step 2 dedups */
    for (int i = 1; i < NRUN; i++) {
        run_result r;
        run(threads[i], 0, &r, threads[i] == 4);
        printf("seal threads %u: %zu objects, manifests %zu + %zu bytes, %llu packs, %llu of %llu "
               "new chunks encoded again on the ingest thread\n",
               threads[i], r.store.n, r.manifest[0].len, r.manifest[1].len,
               (unsigned long long)(r.stats[0].packs + r.stats[1].packs),
               (unsigned long long)(r.stats[0].seal_encodes_here + r.stats[1].seal_encodes_here),
               (unsigned long long)(r.stats[0].new_chunks + r.stats[1].new_chunks));
        CHECK(same_store(&base.store, &r.store));
        for (int s = 0; s < 2; s++)
            CHECK(r.manifest[s].len == base.manifest[s].len &&
                  !memcmp(r.manifest[s].data, base.manifest[s].data, r.manifest[s].len));
        CHECK(r.stats[0].stored_bytes == base.stats[0].stored_bytes);
        run_free(&r);
    }
    run_free(&base);
}

/* The compression option's one parser (the mount's and the store's): auto
 * or unset is every codec, lz4 the LZ4 codecs only, anything else an error
 * naming the value. */
static void test_compression_option(void)
{
    int lz4 = -1;
    CHECK_OK(st_ingest_compression(NULL, &lz4));
    CHECK(lz4 == 0);
    CHECK_OK(st_ingest_compression("lz4", &lz4));
    CHECK(lz4 == 1);
    CHECK_OK(st_ingest_compression("auto", &lz4));
    CHECK(lz4 == 0);
    CHECK_ERR(st_ingest_compression("zstd", &lz4), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "'zstd'") && strstr(st_errmsg(), "auto or lz4"));
}

/* With the LZ4 codecs only, no chunk is stored with zstd, for any number of
 * seal threads (a worker's guessed hint carries the choice too), and the
 * floats take more bytes than with every codec; by default they do use
 * zstd. */
static void test_lz4_only(void)
{
    run_result all, lz4[2];
    run(1, 0, &all, 1);
    CHECK(all.codecs[ST_CODEC_ZSTD_SHUF4] > 0);
    for (int i = 0; i < 2; i++) {
        run(i ? 2 : 1, 1, &lz4[i], 1);
        CHECK(lz4[i].codecs[ST_CODEC_LZ4_SHUF4] > 0);
        CHECK(lz4[i].codecs[ST_CODEC_ZSTD_SHUF2] == 0 && lz4[i].codecs[ST_CODEC_ZSTD_SHUF4] == 0);
        CHECK(lz4[i].stats[0].stored_bytes > all.stats[0].stored_bytes);
    }
    CHECK(same_store(&lz4[0].store, &lz4[1].store));
    CHECK(lz4[1].stats[0].seal_encodes_here + lz4[1].stats[1].seal_encodes_here <
          (lz4[1].stats[0].new_chunks + lz4[1].stats[1].new_chunks) / 2);
    printf("lz4 only: %llu stored bytes, every codec %llu\n",
           (unsigned long long)lz4[0].stats[0].stored_bytes,
           (unsigned long long)all.stats[0].stored_bytes);
    run_free(&all);
    run_free(&lz4[0]);
    run_free(&lz4[1]);
}

/* An encode error mid-way fails the ingest; freeing it with jobs in flight
 * joins and frees them. */
static void test_encode_error(void)
{
#ifndef CKPT_TEST_HOOKS
    UT_SKIP("an encode error needs a -DCKPT_TEST_HOOKS=ON build");
    return;
#else
    static const unsigned threads[] = {1, 4};
    for (size_t i = 0; i < sizeof threads / sizeof *threads; i++) {
        char path[512];
        st_backend *b = NULL;
        st_state *state = NULL;
        CHECK_OK(st_backend_mem_open(&b));
        snprintf(path, sizeof path, "%s/err-%zu.db", root, i);
        CHECK_OK(st_state_open(path, &state));
        st_ingest *g = NULL;
        CHECK_OK(st_ingest_new(b, state, JOB, NULL, &g));
        st_ingest_set_seal_threads(g, threads[i]);
        st_ingest_test_seal_fail_at = 5;
        st_err e = ingest_files(g);
        st_manifest m = {0};
        if (!e)
            e = st_ingest_finish(g, &m);
        CHECK_ERR(e, ST_ERR_IO);
        /* Later calls fail too, without a hang. */
        CHECK(st_ingest_finish(g, &m) != ST_OK);
        st_ingest_test_seal_fail_at = -1;
        st_ingest_free(g);
        st_state_close(state);
        st_backend_close(b);
    }
#endif
}

/* Freed with jobs in flight, before any commit: joins and frees them. */
static void test_free_in_flight(void)
{
    st_backend *b = NULL;
    st_state *state = NULL;
    char path[512];
    CHECK_OK(st_backend_mem_open(&b));
    snprintf(path, sizeof path, "%s/inflight.db", root);
    CHECK_OK(st_state_open(path, &state));
    st_ingest *g = NULL;
    CHECK_OK(st_ingest_new(b, state, JOB, NULL, &g));
    st_ingest_set_seal_threads(g, 2);
    char rel[] = "a/floats.bin";
    snprintf(path, sizeof path, "%s/%s", root, rel);
    int fd = open(path, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    CHECK_OK(st_ingest_file(g, fd, rel, &st, 0));
    close(fd);
    st_ingest_free(g);
    st_state_close(state);
    st_backend_close(b);
}

int main(void)
{
    CHECK(mkdtemp(root) != NULL);
    test_same_bytes_for_any_threads();
    test_encode_error();
    test_free_in_flight();
    test_lz4_only();
    test_compression_option();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0);
    return ut_finish();
}
