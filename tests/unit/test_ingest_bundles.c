/*
 * test_ingest_bundles — small files go into bundles (st_ingest.c;
 * docs/FORMATS.md, version 3; docs/CHUNKING.md, "Small files in bundles").
 *
 * What: a step of 77,000 files of 64 random bytes stores at most 1.1 x its
 * bytes plus 64 KiB (packs and the manifest as published); every small
 * file is a slice whose bytes, read from the stored bundle, are the
 * file's; bundles keep the cut rule; the same step with one file changed
 * stores that file's bundle again and nothing else; files of 4 KiB and
 * more are chunked as before; a step of big, small, empty and sparse
 * files, read from a file or a pipe and added in any order, publishes in
 * tree order and round-trips; a carried-over slice stays as it was.
 *
 * How: an in-memory store and an index in the test's temp tree. Restore
 * is not the subject (nor, on this side, able to read slices): the test
 * reads every file back itself, chunk by chunk, with st_codec_decode.
 * Data comes from fixed seeds.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "engine/st_catalog.h"
#include "engine/st_ingest.h"
#include "engine/st_state.h"
#include "format/st_codec.h"
#include "format/st_part.h"
#include "st_backend_mem.h"
#include "ut.h"

#define KIB    1024u
#define NSMALL 77000u
#define SMALL  64u
#define JOB    "job"
#define NODE   "n1"

static char root[] = "/tmp/ckpt-ingest-bundles-XXXXXX";

/* An in-memory store and an index (one per test: dedup starts empty). */
typedef struct engine {
    st_backend *b;
    st_state *state;
    int scratch_fd; /* the file each ingested file is written to first */
} engine;

static void engine_open(engine *e, const char *name)
{
    char path[512];
    memset(e, 0, sizeof *e);
    CHECK_OK(st_backend_mem_open(&e->b));
    snprintf(path, sizeof path, "%s/%s.db", root, name);
    CHECK_OK(st_state_open(path, &e->state));
    snprintf(path, sizeof path, "%s/%s.scratch", root, name);
    e->scratch_fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(e->scratch_fd >= 0);
}

static void engine_close(engine *e)
{
    close(e->scratch_fd);
    st_state_close(e->state);
    st_backend_close(e->b);
}

static uint64_t seed_of(size_t i, unsigned version)
{
    return ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull + version;
}

static struct stat stat_of(int64_t mtime_ns)
{
    struct stat st;
    memset(&st, 0, sizeof st); /* st_size 0, as the mount's uploader once passed */
    st.st_mode = S_IFREG | 0644;
    st.st_mtim.tv_sec = mtime_ns / 1000000000;
    st.st_mtim.tv_nsec = mtime_ns % 1000000000;
    return st;
}

/* Ingests data[0..len) as rel, through the engine's scratch file. */
static void ingest_bytes(engine *e, st_ingest *g, const char *rel, const void *data, size_t len,
                         int64_t mtime_ns)
{
    CHECK(ftruncate(e->scratch_fd, 0) == 0);
    CHECK(pwrite(e->scratch_fd, data, len, 0) == (ssize_t)len);
    CHECK(lseek(e->scratch_fd, 0, SEEK_SET) == 0);
    struct stat st = stat_of(mtime_ns);
    CHECK_OK(st_ingest_file(g, e->scratch_fd, rel, &st, 0));
}

typedef struct pipe_writer {
    int fd;
    const uint8_t *data;
    size_t len;
} pipe_writer;

static void *write_pipe(void *arg)
{
    pipe_writer *w = arg;
    for (size_t done = 0; done < w->len;) {
        ssize_t n = write(w->fd, w->data + done, w->len - done);
        if (n <= 0)
            break;
        done += (size_t)n;
    }
    close(w->fd);
    return NULL;
}

/* Ingests data[0..len) as rel, read from a pipe (not seekable: the bytes
 * the ingest reads to tell a small file cannot be read again). */
static void ingest_pipe(st_ingest *g, const char *rel, const void *data, size_t len)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pipe_writer w = {fds[1], data, len};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, write_pipe, &w) == 0);
    struct stat st = stat_of(1);
    CHECK_OK(st_ingest_file(g, fds[0], rel, &st, -1));
    pthread_join(t, NULL);
    close(fds[0]);
}

/* A new ingest of JOB into e, or NULL (a failed CHECK). */
static st_ingest *new_ingest(engine *e)
{
    st_ingest *g = NULL;
    CHECK_OK(st_ingest_new(e->b, e->state, JOB, NULL, &g));
    return g;
}

/* Finishes g, publishes its manifest as step of JOB and frees g;
 * *manifest_len is the published manifest's length, *stats (may be NULL)
 * what g counted. */
static void publish(engine *e, st_ingest *g, uint64_t step, uint64_t *manifest_len,
                    st_ingest_stats *stats)
{
    st_manifest m = {0};
    CHECK_OK(st_ingest_finish(g, &m));
    m.step = step;
    m.node = NODE;
    m.job = JOB;
    m.created_ns = 1764633600000000000ll;
    st_part part = {.revision = 1, .complete = 1};
    const st_publish_check look = st_ingest_last_look(g);
    uint64_t puts = 0;
    CHECK_OK(st_catalog_publish(e->b, &m, &part, &look, 1, &puts));
    *manifest_len = part.manifest_len;
    m.node = m.job = NULL; /* borrowed */
    st_manifest_free(&m);
    st_part_free(&part);
    if (stats)
        *stats = *st_ingest_get_stats(g);
    st_ingest_free(g);
}

/* Decodes the published manifest of step (and says its version). */
static void load_step(engine *e, uint64_t step, st_manifest *m, unsigned *version)
{
    st_bytes pbuf = {0}, mbuf = {0};
    st_part p;
    memset(m, 0, sizeof *m);
    CHECK_OK(st_catalog_load_part(e->b, JOB, step, NODE, &pbuf, &p));
    CHECK_OK(st_catalog_load_manifest(e->b, &p, &mbuf, m));
    *version = mbuf.len >= 6 ? (unsigned)(mbuf.data[4] | mbuf.data[5] << 8) : 0;
    st_part_free(&p);
    st_bytes_free(&pbuf);
    st_bytes_free(&mbuf);
}

#define CHUNK_MAX (4u << 20)
static uint8_t *scratch; /* st_codec_scratch_bound(CHUNK_MAX), for read_chunk */

/* Reads the chunk c of m from the store: its raw bytes into out (capacity
 * cap <= CHUNK_MAX), their count in *len. */
static int read_chunk(engine *e, const st_manifest *m, const st_chunk_ref *c, uint8_t *out,
                      size_t cap, size_t *len)
{
    char key[ST_KEY_MAX];
    st_bytes enc = {0};
    int ok = scratch && cap <= CHUNK_MAX && c->pack < m->npacks &&
             !st_key_pack(key, sizeof key, JOB, &m->packs[c->pack]) &&
             !st_get(e->b, key, c->offset, c->stored_len, &enc) &&
             !st_codec_decode(enc.data, enc.len, &c->id, out, cap, len, scratch);
    st_bytes_free(&enc);
    return ok;
}

/* Reads file f of m back from the store into out (f->size bytes): whole
 * chunks, holes, and slices (the bundle decoded, raw_len bytes from skip). */
static int read_file(engine *e, const st_manifest *m, const st_file_entry *f, uint8_t *out)
{
    static uint8_t chunk[CHUNK_MAX];
    uint64_t at = 0;
    for (size_t k = 0; k < f->nchunks; k++) {
        const st_chunk_ref *c = &f->chunks[k];
        size_t len = 0;
        if (at + c->raw_len > f->size)
            return 0;
        if (st_chunk_is_hole(c)) {
            memset(out + at, 0, c->raw_len);
        } else if (st_chunk_is_slice(c)) {
            if (!read_chunk(e, m, c, chunk, sizeof chunk, &len) || len != c->bundle_len ||
                (uint64_t)c->skip + c->raw_len > len)
                return 0;
            memcpy(out + at, chunk + c->skip, c->raw_len);
        } else {
            if (!read_chunk(e, m, c, chunk, sizeof chunk, &len) || len != c->raw_len)
                return 0;
            memcpy(out + at, chunk, len);
        }
        at += c->raw_len;
    }
    return at == f->size;
}

static void small_path(char *out, size_t cap, size_t i)
{
    snprintf(out, cap, "d%03zu/f%05zu", i / 1000, i);
}

/* Written in a loop: 20 us apart, give or take 10 (times that follow a
 * pattern would compress to nothing in the manifest). */
static int64_t mtime_of(size_t i)
{
    return 1764633600000000000ll + (int64_t)i * 20000 + (int64_t)(st_hash64(&i, sizeof i) % 20000);
}

/* Ingests the 77,000 small files (file `changed` in its version 2) in tree
 * order and publishes them as step. */
static void put_small_step(engine *e, uint64_t step, size_t changed, st_ingest_stats *stats,
                           uint64_t *manifest_len)
{
    st_ingest *g = new_ingest(e);
    if (!g)
        return;
    for (size_t i = 0; i < NSMALL; i++) {
        uint8_t data[SMALL];
        char path[64];
        ut_rand_fill(data, SMALL, seed_of(i, i == changed ? 2 : 1));
        small_path(path, sizeof path, i);
        ingest_bytes(e, g, path, data, SMALL, mtime_of(i));
    }
    publish(e, g, step, manifest_len, stats);
}

/* 1 if c and d name the same stored bundle. */
static int same_bundle(const st_manifest *m, const st_chunk_ref *c, const st_chunk_ref *d)
{
    return !memcmp(&c->id, &d->id, sizeof c->id) && c->offset == d->offset &&
           !memcmp(&m->packs[c->pack], &m->packs[d->pack], sizeof(st_id));
}

/* Checks the cut rule over m's slices, which were made in file order: a
 * bundle ends after the first file that leaves it at >= 16 KiB with the
 * low bits ST_INGEST_BUNDLE_CUT_MASK of its XXH3-64 zero, or before a file that does not fit, or
 * at the end. Counts the bundles. */
static size_t check_cuts(engine *e, const st_manifest *m)
{
    static uint8_t data[ST_MANIFEST_MAX_BUNDLE];
    size_t nbundles = 0, bad = 0;
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_chunk_ref *c = &m->files[i].chunks[0];
        if (m->files[i].nchunks != 1 || !st_chunk_is_slice(c))
            continue;
        const int first = c->skip == 0, last = c->skip + c->raw_len == c->bundle_len;
        nbundles += first;
        if (c->bundle_len > ST_MANIFEST_MAX_BUNDLE)
            bad++;
        /* A bundle's files lie back to back, in file order. */
        if (!first &&
            (i == 0 || !same_bundle(m, c, &m->files[i - 1].chunks[0]) ||
             m->files[i - 1].chunks[0].skip + m->files[i - 1].chunks[0].raw_len != c->skip))
            bad++;
        size_t len = 0;
        if (!read_chunk(e, m, c, data, sizeof data, &len))
            bad++;
        const int cut = c->skip + c->raw_len >= ST_INGEST_BUNDLE_MIN &&
                        !(st_hash64(data + c->skip, c->raw_len) & ST_INGEST_BUNDLE_CUT_MASK);
        if (!last && cut)
            bad++; /* should have ended here */
        const int at_end = i + 1 == m->nfiles;
        const uint64_t next = at_end ? 0 : m->files[i + 1].size;
        if (last && !cut && !at_end && c->bundle_len + next <= ST_MANIFEST_MAX_BUNDLE)
            bad++; /* ended without a reason */
        if (last && !at_end && c->bundle_len < ST_INGEST_BUNDLE_MIN)
            bad++; /* only the last bundle may be short */
    }
    CHECK(bad == 0);
    return nbundles;
}

static void test_many_small_files(void)
{
    engine e;
    engine_open(&e, "small");
    st_ingest_stats s1, s2;
    uint64_t man1 = 0, man2 = 0;
    put_small_step(&e, 1, SIZE_MAX, &s1, &man1);
    const uint64_t logical = (uint64_t)NSMALL * SMALL;
    const uint64_t stored = s1.stored_bytes + man1;
    fprintf(stderr,
            "  %u files of %u B: %llu B logical, %llu B stored (packs %llu, manifest %llu): "
            "ratio %.4f; %llu bundles\n",
            NSMALL, SMALL, (unsigned long long)logical, (unsigned long long)stored,
            (unsigned long long)s1.stored_bytes, (unsigned long long)man1,
            (double)stored / (double)logical, (unsigned long long)s1.bundles);
    CHECK(stored <= logical + logical / 10 + 64 * KIB);
    CHECK(s1.files == NSMALL && s1.bundled_files == NSMALL);
    CHECK(s1.bundles >= logical / ST_MANIFEST_MAX_BUNDLE && s1.bundles <= logical / (16 * KIB) + 1);

    /* Every file a slice holding its bytes; bundles as the cut rule says. */
    st_manifest m;
    unsigned version = 0;
    load_step(&e, 1, &m, &version);
    CHECK(version == 3 && m.nfiles == NSMALL);
    size_t wrong = 0, changed = SIZE_MAX;
    for (size_t i = 0; i < m.nfiles; i++) {
        const st_file_entry *f = &m.files[i];
        uint8_t want[SMALL], got[SMALL];
        char path[64];
        small_path(path, sizeof path, i);
        ut_rand_fill(want, SMALL, seed_of(i, 1));
        if (strcmp(f->path, path) || f->size != SMALL || f->nchunks != 1 ||
            !st_chunk_is_slice(&f->chunks[0]) || !f->digest_absent || !read_file(&e, &m, f, got) ||
            memcmp(got, want, SMALL))
            wrong++;
        /* The file to change: in the middle of the 100th bundle, where the
         * bundle is too short to end, so its change moves no cut. */
        if (changed == SIZE_MAX && i > 100 * 250 && f->chunks[0].skip >= 8 * KIB &&
            f->chunks[0].skip + SMALL < ST_INGEST_BUNDLE_MIN)
            changed = i;
    }
    CHECK(wrong == 0 && changed != SIZE_MAX);
    CHECK(check_cuts(&e, &m) == s1.bundles);
    st_manifest_free(&m);

    /* The same step again with that one file changed: its bundle is stored
     * again, the others are found by id. */
    put_small_step(&e, 2, changed, &s2, &man2);
    fprintf(stderr,
            "  one file changed: %llu new chunks, %llu B new, %llu B of packs + %llu B manifest "
            "stored (%.4f of the step)\n",
            (unsigned long long)s2.new_chunks, (unsigned long long)s2.new_raw_bytes,
            (unsigned long long)s2.stored_bytes, (unsigned long long)man2,
            (double)(s2.stored_bytes + man2) / (double)logical);
    CHECK(s2.bundles == s1.bundles && s2.new_chunks == 1);
    CHECK(s2.new_raw_bytes >= ST_INGEST_BUNDLE_MIN &&
          s2.new_raw_bytes <= 2 * ST_MANIFEST_MAX_BUNDLE);
    CHECK(s2.stored_bytes <= 2 * (ST_MANIFEST_MAX_BUNDLE + ST_CODEC_HEADER_LEN) + 4 * KIB);
    load_step(&e, 2, &m, &version);
    CHECK(version == 3 && m.nfiles == NSMALL);
    uint8_t want[SMALL], got[SMALL];
    ut_rand_fill(want, SMALL, seed_of(changed, 2));
    CHECK(changed < m.nfiles && read_file(&e, &m, &m.files[changed], got) &&
          !memcmp(got, want, SMALL));
    st_manifest_free(&m);
    engine_close(&e);
}

/* Files whose XXH3-64 never allows a cut fill bundles up to 64 KiB: a
 * bundle ends before the file that would not fit. */
static void test_bundle_ends_before_64k(void)
{
    engine e;
    engine_open(&e, "max");
    st_ingest *g = new_ingest(&e);
    if (!g)
        return;
    enum { N = 40, LEN = 4000 };
    static uint8_t data[N][LEN];
    for (size_t i = 0; i < N; i++) {
        uint64_t seed = seed_of(i, 7);
        do /* a file after which no bundle may end */
            ut_rand_fill(data[i], LEN, seed++);
        while (!(st_hash64(data[i], LEN) & ST_INGEST_BUNDLE_CUT_MASK));
        char path[32];
        snprintf(path, sizeof path, "f%02zu", i);
        ingest_bytes(&e, g, path, data[i], LEN, 1);
    }
    uint64_t man = 0;
    st_ingest_stats s;
    publish(&e, g, 1, &man, &s);
    CHECK(s.bundles == 3 && s.bundled_files == N); /* 16 + 16 + 8 files */
    st_manifest m;
    unsigned version = 0;
    load_step(&e, 1, &m, &version);
    CHECK(m.nfiles == N);
    for (size_t i = 0; i < m.nfiles; i++) {
        const st_chunk_ref *c = &m.files[i].chunks[0];
        CHECK(st_chunk_is_slice(c) && c->skip == (i % 16) * LEN &&
              c->bundle_len == (i < 32 ? 16 * LEN : 8 * LEN));
    }
    CHECK(check_cuts(&e, &m) == 3);
    st_manifest_free(&m);
    engine_close(&e);
}

/* Files of 4 KiB and more are chunked on their own, as before bundles;
 * 4095 bytes is the largest size that is bundled. */
static void test_large_files_not_bundled(void)
{
    engine e;
    engine_open(&e, "large");
    st_ingest *g = new_ingest(&e);
    if (!g)
        return;
    static uint8_t data[300 * KIB], got[300 * KIB];
    ut_rand_fill(data, sizeof data, 99);
    const size_t sizes[] = {4096, 4097, 65536, 300 * KIB};
    const size_t n = sizeof sizes / sizeof sizes[0];
    for (size_t i = 0; i < n; i++) {
        char path[32];
        snprintf(path, sizeof path, "big%zu", i);
        ingest_bytes(&e, g, path, data, sizes[i], 1);
    }
    uint64_t man = 0;
    st_ingest_stats s;
    publish(&e, g, 1, &man, &s);
    CHECK(s.bundles == 0);
    st_manifest m;
    unsigned version = 0;
    load_step(&e, 1, &m, &version);
    CHECK(version == 1 && m.nfiles == n); /* no slice: the format of before */
    for (size_t i = 0; i < m.nfiles; i++) {
        const st_file_entry *f = &m.files[i];
        CHECK(f->size == sizes[i] && !f->digest_absent && f->nchunks >= 1);
        for (size_t k = 0; k < f->nchunks; k++)
            CHECK(!st_chunk_is_slice(&f->chunks[k]) && !f->chunks[k].skip);
        CHECK(read_file(&e, &m, f, got) && !memcmp(got, data, sizes[i]));
        const st_id digest = st_id_of(data, sizes[i]);
        CHECK(!memcmp(&f->digest, &digest, sizeof digest));
    }
    st_manifest_free(&m);

    /* One byte less: bundled. */
    if (!(g = new_ingest(&e)))
        return;
    ingest_bytes(&e, g, "small", data, ST_INGEST_DEDUP_MIN - 1, 1);
    publish(&e, g, 2, &man, &s);
    CHECK(s.bundles == 1);
    load_step(&e, 2, &m, &version);
    CHECK(version == 3 && m.nfiles == 1 && st_chunk_is_slice(&m.files[0].chunks[0]));
    CHECK(read_file(&e, &m, &m.files[0], got) && !memcmp(got, data, ST_INGEST_DEDUP_MIN - 1));
    st_manifest_free(&m);
    engine_close(&e);
}

/* The files of the mixed step, added in this (unsorted) order. */
enum { FROM_FILE, FROM_PIPE, SPARSE };
static const struct {
    const char *path;
    size_t size;
    int how;
    int zeros;
} mixed[] = {
    {"z/small-a", 100, FROM_FILE, 0},
    {"b", 300 * KIB, FROM_FILE, 0},
    {"a-b", 1, FROM_FILE, 0},
    {"a/empty", 0, FROM_FILE, 0},
    {"a/zeros", 2000, FROM_FILE, 1},
    {"zeros-pipe", 4095, FROM_PIPE, 1},
    {"a/pipe-small", 3000, FROM_PIPE, 0},
    {"a/pipe-big", 200 * KIB, FROM_PIPE, 0},
    {"c/sparse", 2u << 20, SPARSE, 0},
    {"a/x/y", 700, FROM_FILE, 0},
    {"a/x-y", 4096, FROM_FILE, 0},
    {"a/x.y", 10, FROM_FILE, 0},
    {"z/small-b", 3999, FROM_FILE, 0},
    {"empty-pipe", 0, FROM_PIPE, 0},
};
#define NMIXED (sizeof mixed / sizeof mixed[0])

static void mixed_bytes(size_t i, uint8_t *out)
{
    if (mixed[i].zeros)
        memset(out, 0, mixed[i].size);
    else
        ut_rand_fill(out, mixed[i].size, seed_of(i, 3));
    if (mixed[i].how == SPARSE) { /* data only in its second MiB's first 64 KiB */
        memset(out, 0, mixed[i].size);
        ut_rand_fill(out + (1u << 20), 64 * KIB, seed_of(i, 3));
    }
}

static void ingest_mixed(engine *e, st_ingest *g, size_t i)
{
    static uint8_t data[2u << 20];
    mixed_bytes(i, data);
    if (mixed[i].how == FROM_PIPE) {
        ingest_pipe(g, mixed[i].path, data, mixed[i].size);
    } else if (mixed[i].how == SPARSE) {
        CHECK(ftruncate(e->scratch_fd, 0) == 0);
        CHECK(ftruncate(e->scratch_fd, (off_t)mixed[i].size) == 0);
        CHECK(pwrite(e->scratch_fd, data + (1u << 20), 64 * KIB, 1u << 20) == 64 * KIB);
        CHECK(lseek(e->scratch_fd, 0, SEEK_SET) == 0);
        struct stat st = stat_of(5);
        CHECK_OK(st_ingest_file(g, e->scratch_fd, mixed[i].path, &st, 0));
    } else {
        ingest_bytes(e, g, mixed[i].path, data, mixed[i].size, 2);
    }
}

/* A step of every kind of file, added out of tree order: it publishes, in
 * tree order, each file's bytes read back are what was written, and the
 * manifest re-encodes to what was published. */
static void test_mixed_step_unsorted(void)
{
    engine e;
    engine_open(&e, "mixed");
    st_ingest *g = new_ingest(&e);
    if (!g)
        return;
    for (size_t i = 0; i < NMIXED; i++)
        ingest_mixed(&e, g, i);
    uint64_t man = 0;
    st_ingest_stats s;
    publish(&e, g, 1, &man, &s);
    CHECK(s.files == NMIXED && s.bundles == 1 && s.bundled_files == 6);

    st_manifest m;
    unsigned version = 0;
    load_step(&e, 1, &m, &version);
    CHECK(version == 3 && m.nfiles == NMIXED);
    static uint8_t want[2u << 20], got[2u << 20];
    for (size_t k = 0; k < m.nfiles; k++) {
        const st_file_entry *f = &m.files[k];
        if (k)
            CHECK(st_path_cmp(m.files[k - 1].path, f->path) < 0);
        size_t i = 0;
        while (i < NMIXED && strcmp(mixed[i].path, f->path))
            i++;
        CHECK(i < NMIXED);
        if (i == NMIXED)
            continue;
        mixed_bytes(i, want);
        CHECK(f->size == mixed[i].size && f->mode == 0644);
        CHECK(read_file(&e, &m, f, got) && !memcmp(got, want, f->size));
        const int small = f->size && f->size < ST_INGEST_DEDUP_MIN && !mixed[i].zeros;
        CHECK(small == (f->nchunks == 1 && st_chunk_is_slice(&f->chunks[0])));
        if (!f->size)
            CHECK(f->nchunks == 0);
        if (mixed[i].zeros || mixed[i].how == SPARSE) /* holes, stored as before */
            CHECK(f->nchunks >= 1 && st_chunk_is_hole(&f->chunks[0]));
    }
    /* Encode, decode, encode again: the same manifest, the same bytes. */
    st_bytes a = {0}, b = {0}, ca = {0}, cb = {0};
    st_manifest d = {0};
    CHECK_OK(st_manifest_encode(&m, &a));
    CHECK_OK(st_manifest_decode(a.data, a.len, &d));
    CHECK(d.nfiles == m.nfiles);
    for (size_t k = 0; k < d.nfiles && k < m.nfiles; k++) {
        CHECK(!strcmp(d.files[k].path, m.files[k].path) && d.files[k].size == m.files[k].size &&
              d.files[k].nchunks == m.files[k].nchunks);
        for (size_t c = 0; c < d.files[k].nchunks && c < m.files[k].nchunks; c++)
            CHECK(!memcmp(&d.files[k].chunks[c], &m.files[k].chunks[c], sizeof(st_chunk_ref)));
    }
    CHECK_OK(st_manifest_encode(&d, &b));
    CHECK_OK(st_manifest_canonical_bytes(a.data, a.len, &ca));
    CHECK_OK(st_manifest_canonical_bytes(b.data, b.len, &cb));
    CHECK(ca.len == cb.len && !memcmp(ca.data, cb.data, ca.len));
    st_bytes_free(&a);
    st_bytes_free(&b);
    st_bytes_free(&ca);
    st_bytes_free(&cb);
    st_manifest_free(&d);
    st_manifest_free(&m);
    engine_close(&e);
}

/* A step published again with its files carried over (st_ingest_add_stored,
 * as the mount does), in reverse order: each slice is the same bundle
 * reference, nothing is stored. A file of one whole chunk carried from a
 * version 3 manifest (no digest stored) into a manifest without slices
 * gets its digest back, so that version 1 can store it. */
static void test_carry_over(void)
{
    engine e;
    engine_open(&e, "carry");
    st_ingest *g = new_ingest(&e);
    if (!g)
        return;
    static uint8_t data[60 * KIB]; /* "whole": under the chunker's minimum, so one chunk */
    char path[32];
    for (size_t i = 0; i < 300; i++) {
        ut_rand_fill(data, 200, seed_of(i, 4));
        snprintf(path, sizeof path, "s%03zu", i);
        ingest_bytes(&e, g, path, data, 200, 1);
    }
    ut_rand_fill(data, sizeof data, 5);
    ingest_bytes(&e, g, "whole", data, sizeof data, 1);
    uint64_t man = 0;
    publish(&e, g, 1, &man, NULL);
    st_manifest m1;
    unsigned version = 0;
    load_step(&e, 1, &m1, &version);
    CHECK(version == 3 && m1.nfiles == 301);

    if (!(g = new_ingest(&e)))
        return;
    for (size_t i = m1.nfiles; i-- > 0;)
        CHECK_OK(st_ingest_add_stored(g, &m1, &m1.files[i], m1.files[i].path));
    st_ingest_stats s;
    publish(&e, g, 2, &man, &s);
    CHECK(s.stored_bytes == 0);
    st_manifest m2;
    load_step(&e, 2, &m2, &version);
    CHECK(version == 3 && m2.nfiles == m1.nfiles);
    size_t slices = 0;
    for (size_t i = 0; i < m2.nfiles && i < m1.nfiles; i++) {
        const st_chunk_ref *c1 = &m1.files[i].chunks[0], *c2 = &m2.files[i].chunks[0];
        CHECK(!strcmp(m1.files[i].path, m2.files[i].path));
        CHECK(c1->skip == c2->skip && c1->bundle_len == c2->bundle_len &&
              c1->raw_len == c2->raw_len && c1->offset == c2->offset &&
              !memcmp(&c1->id, &c2->id, sizeof c1->id) &&
              !memcmp(&m1.packs[c1->pack], &m2.packs[c2->pack], sizeof(st_id)));
        slices += st_chunk_is_slice(c2);
    }
    CHECK(slices == 300);
    st_manifest_free(&m2);

    /* Only the whole file carried: no slice, so version 1, with a digest. */
    const st_file_entry *whole = &m1.files[m1.nfiles - 1];
    CHECK(!strcmp(whole->path, "whole") && whole->digest_absent && whole->nchunks == 1);
    if (!(g = new_ingest(&e)))
        return;
    CHECK_OK(st_ingest_add_stored(g, &m1, whole, "whole"));
    publish(&e, g, 3, &man, NULL);
    load_step(&e, 3, &m2, &version);
    st_id digest = st_id_of(data, sizeof data);
    CHECK(version == 1 && m2.nfiles == 1 && !m2.files[0].digest_absent &&
          !memcmp(&m2.files[0].digest, &digest, sizeof digest));
    st_manifest_free(&m2);
    st_manifest_free(&m1);
    engine_close(&e);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    scratch = malloc(st_codec_scratch_bound(CHUNK_MAX));
    RUN(test_many_small_files);
    RUN(test_bundle_ends_before_64k);
    RUN(test_large_files_not_bundled);
    RUN(test_mixed_step_unsorted);
    RUN(test_carry_over);
    free(scratch);
    ut_rmtree(root);
    return ut_finish();
}
