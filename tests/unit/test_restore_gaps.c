/*
 * Restore of a DCP-like layout (st_restore.c coalesce()): a file whose many
 * small chunks repeat and jump around one pack is served by one ranged GET
 * of the pack's window, not one GET per chunk; gaps of unneeded bytes are
 * read through up to ST_RESTORE_GAP_MAX and no further; the bytes restored
 * are identical and every chunk is still verified (a damaged unneeded gap
 * does not matter, a damaged needed chunk is reported). A file whose refs
 * alternate between two packs (an incremental step) costs one GET per pack.
 * Refs in pack order are streamed (st_get_stream) and decoded as they arrive;
 * small chunks of another pack between them (side chunks) do not stop that.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/st_backend_count.h"
#include "engine/st_restore.h"
#include "format/st_codec.h"
#include "format/st_part.h"
#include "st_backend_mem.h"
#include "ut.h"

#define KIB 1024u
#define MIB (1024u * 1024u)

static char root[] = "/tmp/ckpt-test-restore-gaps-XXXXXX";

/* One pack being built: its bytes and where each chunk landed. */
typedef struct pack_builder {
    uint32_t pack; /* its index in the manifest's packs */
    st_bytes data;
    st_chunk_ref refs[512];
    uint8_t *raw[512];
    size_t n;
} pack_builder;

/* Appends a random chunk of len bytes (seeded) to the pack; returns its index. */
static size_t add_chunk(pack_builder *pb, size_t len, uint64_t seed)
{
    CHECK(pb->n < sizeof pb->refs / sizeof pb->refs[0]);
    uint8_t *raw = malloc(len);
    uint8_t *enc = malloc(st_codec_bound(len));
    uint8_t *scratch = malloc(st_codec_scratch_bound(len));
    CHECK(raw && enc && scratch);
    ut_rand_fill(raw, len, seed);
    st_id id = st_id_of(raw, len);
    size_t enc_len = 0;
    CHECK_OK(st_codec_encode(raw, len, &id, enc, st_codec_bound(len), &enc_len, scratch, NULL));
    pb->refs[pb->n] = (st_chunk_ref){.id = id,
                                     .pack = pb->pack,
                                     .offset = pb->data.len,
                                     .stored_len = (uint32_t)enc_len,
                                     .raw_len = (uint32_t)len};
    pb->raw[pb->n] = raw;
    CHECK_OK(st_bytes_append(&pb->data, enc, enc_len));
    free(enc);
    free(scratch);
    return pb->n++;
}

static void pack_free(pack_builder *pb)
{
    for (size_t i = 0; i < pb->n; i++)
        free(pb->raw[i]);
    st_bytes_free(&pb->data);
}

/* A manifest of one file made of chunks order[0..n) of the packs pbs[0..npacks)
 * (chunk i of pack pack_of[i]; pack_of NULL: all of pbs[0]), whose ids are
 * pack_ids; its expected bytes go to *expect (caller frees). */
static void make_file_of(const pack_builder *const *pbs, const size_t *pack_of, const size_t *order,
                         size_t n, size_t npacks, st_manifest *m, st_file_entry *f,
                         st_chunk_ref *refs, st_id *pack_ids, uint8_t **expect)
{
    size_t size = 0;
    for (size_t i = 0; i < n; i++)
        size += pbs[pack_of ? pack_of[i] : 0]->refs[order[i]].raw_len;
    uint8_t *buf = malloc(size ? size : 1);
    CHECK(buf);
    size_t pos = 0;
    for (size_t i = 0; i < n; i++) {
        const pack_builder *pb = pbs[pack_of ? pack_of[i] : 0];
        refs[i] = pb->refs[order[i]];
        memcpy(buf + pos, pb->raw[order[i]], refs[i].raw_len);
        pos += refs[i].raw_len;
    }
    *f = (st_file_entry){.path = "rank0/shard.distcp",
                         .size = size,
                         .mode = 0644,
                         .rank = 0,
                         .digest = st_id_of(buf, size),
                         .nchunks = n,
                         .chunks = refs};
    *m = (st_manifest){.step = 1, .npacks = npacks, .packs = pack_ids, .nfiles = 1, .files = f};
    *expect = buf;
}

/* make_file_of() with every chunk from the one pack pb. */
static void make_file(const pack_builder *pb, const size_t *order, size_t n, st_manifest *m,
                      st_file_entry *f, st_chunk_ref *refs, st_id *pack_id, uint8_t **expect)
{
    make_file_of(&pb, NULL, order, n, 1, m, f, refs, pack_id, expect);
}

/* fd holds exactly f's expected bytes from its start. */
static void check_bytes(int fd, const st_file_entry *f, const uint8_t *expect)
{
    uint8_t *got = malloc(f->size ? f->size : 1);
    CHECK(got && pread(fd, got, f->size, 0) == (ssize_t)f->size);
    CHECK(memcmp(got, expect, f->size) == 0);
    free(got);
}

/* Restores f into a file and returns the GETs it took; checks the bytes. */
static uint64_t restore_and_compare(st_backend *b, st_backend_counts *c, const st_manifest *m,
                                    const st_file_entry *f, const uint8_t *expect)
{
    char path[300];
    snprintf(path, sizeof path, "%s/out.bin", root);
    st_restorer *r = NULL;
    CHECK_OK(st_restorer_new(b, "job", &r));
    uint64_t before = st_backend_counts_of(c, ST_REQ_GET);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_OK(st_restore_file(r, m, f, fd));
    uint64_t gets = st_backend_counts_of(c, ST_REQ_GET) - before;
    check_bytes(fd, f, expect);
    close(fd);
    st_restorer_free(r);
    return gets;
}

/* Restoring f from b must fail as damage. */
static void restore_fails_corrupt(st_backend *b, const st_manifest *m, const st_file_entry *f)
{
    st_restorer *r = NULL;
    CHECK_OK(st_restorer_new(b, "job", &r));
    char path[300];
    snprintf(path, sizeof path, "%s/bad.bin", root);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(st_restore_file(r, m, f, fd) == ST_ERR_CORRUPT);
    close(fd);
    st_restorer_free(r);
}

static void open_counted(st_backend **b, st_backend_counts *c)
{
    CHECK_OK(st_backend_mem_open(b));
    CHECK_OK(st_backend_count_wrap(b, c));
}

/* 200 chunks of 2-6 KiB in one pack; the file takes 400 refs of them in a
 * scattered order with repeats (as a DCP shard's deduplicated tensors). */
static void test_dcp_like_layout(void)
{
    st_backend *b = NULL;
    st_backend_counts c = {0};
    open_counted(&b, &c);
    pack_builder pb = {0};
    for (size_t i = 0; i < 200; i++)
        add_chunk(&pb, 2 * KIB + (i * 97) % (4 * KIB), 1000 + i);
    st_id pack_id = st_id_of("pack-a", 6);
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_pack(key, sizeof key, "job", &pack_id));
    CHECK_OK(st_put(b, key, pb.data.data, pb.data.len));

    size_t order[400];
    for (size_t i = 0; i < 400; i++)
        order[i] = (i * 37) % 200; /* every chunk twice, never two neighbours in a row */
    st_manifest m;
    st_file_entry f;
    st_chunk_ref refs[400];
    uint8_t *expect = NULL;
    make_file(&pb, order, 400, &m, &f, refs, &pack_id, &expect);
    uint64_t gets = restore_and_compare(b, &c, &m, &f, expect);
    printf("  400 scattered refs into a %zu-byte pack: %llu GET(s)\n", pb.data.len,
           (unsigned long long)gets);
    CHECK(gets == 1); /* was 400: coalesce() merged only adjacent chunks */

    /* A damaged chunk inside the window is still found: its own check. */
    size_t hit = order[123];
    pb.data.data[pb.refs[hit].offset + pb.refs[hit].stored_len - 1] ^= 0x5a;
    CHECK_OK(st_put(b, key, pb.data.data, pb.data.len));
    restore_fails_corrupt(b, &m, &f);
    free(expect);
    pack_free(&pb);
    st_backend_close(b);
}

/* Gaps: an unneeded chunk of 512 KiB between two needed ones is read
 * through (1 GET); one of 3 MiB is not (2 GETs, ~no waste); a damaged
 * unneeded gap does not fail the restore. */
static void test_gap_bound(void)
{
    st_backend *b = NULL;
    st_backend_counts c = {0};
    open_counted(&b, &c);
    pack_builder pb = {0};
    size_t a = add_chunk(&pb, 8 * KIB, 1);
    size_t small_gap = add_chunk(&pb, 512 * KIB, 2);
    size_t mid = add_chunk(&pb, 8 * KIB, 3);
    add_chunk(&pb, 3 * MIB, 4);
    size_t z = add_chunk(&pb, 8 * KIB, 5);
    /* The gap chunk is damaged: never needed, so it must not matter. */
    pb.data.data[pb.refs[small_gap].offset + 100] ^= 0xff;
    st_id pack_id = st_id_of("pack-b", 6);
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_pack(key, sizeof key, "job", &pack_id));
    CHECK_OK(st_put(b, key, pb.data.data, pb.data.len));

    st_manifest m;
    st_file_entry f;
    st_chunk_ref refs[3];
    uint8_t *expect = NULL;
    size_t near[] = {mid, a}; /* reordered, 512 KiB apart */
    make_file(&pb, near, 2, &m, &f, refs, &pack_id, &expect);
    CHECK(restore_and_compare(b, &c, &m, &f, expect) == 1);
    free(expect);

    size_t far[] = {a, mid, z}; /* 3 MiB between mid and z */
    make_file(&pb, far, 3, &m, &f, refs, &pack_id, &expect);
    CHECK(restore_and_compare(b, &c, &m, &f, expect) == 2);
    free(expect);
    pack_free(&pb);
    st_backend_close(b);
}

/* A DCP shard's layout: the file's own chunks lie in its region of the
 * pack, and between every two of them it references one of the small
 * records every archive repeats, whose first copies lie 3 MiB away (another
 * rank's region in between). Each jump back is a gap the greedy rule
 * refuses; the file still needs a third of the window: 1 GET. */
static void test_far_repeats(void)
{
    st_backend *b = NULL;
    st_backend_counts c = {0};
    open_counted(&b, &c);
    pack_builder pb = {0};
    size_t shared[20], own[100];
    for (size_t i = 0; i < 20; i++)
        shared[i] = add_chunk(&pb, 1 * KIB, 2000 + i);
    add_chunk(&pb, 3 * MIB, 2100); /* another rank's region: never needed here */
    for (size_t i = 0; i < 100; i++)
        own[i] = add_chunk(&pb, 16 * KIB, 2200 + i);
    st_id pack_id = st_id_of("pack-c", 6);
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_pack(key, sizeof key, "job", &pack_id));
    CHECK_OK(st_put(b, key, pb.data.data, pb.data.len));

    size_t order[200];
    for (size_t i = 0; i < 100; i++) {
        order[2 * i] = own[i];
        order[2 * i + 1] = shared[i % 20];
    }
    st_manifest m;
    st_file_entry f;
    st_chunk_ref refs[200];
    uint8_t *expect = NULL;
    make_file(&pb, order, 200, &m, &f, refs, &pack_id, &expect);
    uint64_t gets = restore_and_compare(b, &c, &m, &f, expect);
    printf("  own chunks interleaved with repeats 3 MiB away: %llu GET(s)\n",
           (unsigned long long)gets);
    CHECK(gets == 1); /* was 200: every jump back was a refused gap */
    free(expect);
    pack_free(&pb);
    st_backend_close(b);
}

/* Restores chunks [first, first + count) of f with the pwrite sink into a
 * file of f's size; checks those bytes against expect; returns the GETs. */
static uint64_t restore_range_and_compare(st_backend *b, st_backend_counts *c, const st_manifest *m,
                                          const st_file_entry *f, size_t first, size_t count,
                                          const uint8_t *expect)
{
    char path[300];
    snprintf(path, sizeof path, "%s/range.bin", root);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)f->size) == 0);
    st_restorer *r = NULL;
    CHECK_OK(st_restorer_new(b, "job", &r));
    uint64_t before = st_backend_counts_of(c, ST_REQ_GET);
    CHECK_OK(st_restore_chunks(r, m, f, first, count, fd));
    uint64_t gets = st_backend_counts_of(c, ST_REQ_GET) - before;
    size_t off = 0, len = 0;
    for (size_t i = 0; i < first + count; i++)
        *(i < first ? &off : &len) += f->chunks[i].raw_len;
    uint8_t *got = malloc(len ? len : 1);
    CHECK(got && pread(fd, got, len, (off_t)off) == (ssize_t)len);
    CHECK(memcmp(got, expect + off, len) == 0);
    free(got);
    close(fd);
    st_restorer_free(r);
    return gets;
}

/* The second save of a frozen-backbone fine-tune: every record's header is
 * new (it names the archive) and lies in this save's pack with the retrained
 * tail; the backbone's data is reused from the first save's pack. The file's
 * refs alternate between the two packs at every record: one GET per pack,
 * not one per switch, with the bytes in file order; a damaged reused chunk
 * is still found. */
static void test_incremental_step(void)
{
    enum { RECORDS = 48, TRAINED = 4 };
    st_backend *b = NULL;
    st_backend_counts c = {0};
    open_counted(&b, &c);
    pack_builder first = {.pack = 0}, second = {.pack = 1};
    size_t data[RECORDS], header[RECORDS];
    for (size_t i = 0; i < RECORDS; i++) { /* the first save: header, data, ... */
        add_chunk(&first, 1 * KIB, 3000 + i);
        data[i] = add_chunk(&first, 64 * KIB, 3100 + i);
    }
    for (size_t i = 0; i < RECORDS; i++) { /* the second: new headers, new tail */
        header[i] = add_chunk(&second, 1 * KIB, 3200 + i);
        if (i >= RECORDS - TRAINED)
            data[i] = add_chunk(&second, 64 * KIB, 3300 + i);
    }
    st_id pack_ids[2] = {st_id_of("pack-save1", 10), st_id_of("pack-save2", 10)};
    const pack_builder *pbs[2] = {&first, &second};
    char keys[2][ST_KEY_MAX];
    for (size_t p = 0; p < 2; p++) {
        CHECK_OK(st_key_pack(keys[p], sizeof keys[p], "job", &pack_ids[p]));
        CHECK_OK(st_put(b, keys[p], pbs[p]->data.data, pbs[p]->data.len));
    }
    size_t order[2 * RECORDS], pack_of[2 * RECORDS];
    for (size_t i = 0; i < RECORDS; i++) {
        order[2 * i] = header[i];
        pack_of[2 * i] = 1;
        order[2 * i + 1] = data[i];
        pack_of[2 * i + 1] = i >= RECORDS - TRAINED;
    }
    st_manifest m;
    st_file_entry f;
    st_chunk_ref refs[2 * RECORDS];
    uint8_t *expect = NULL;
    make_file_of(pbs, pack_of, order, 2 * RECORDS, 2, &m, &f, refs, pack_ids, &expect);
    uint64_t gets = restore_and_compare(b, &c, &m, &f, expect);
    printf("  a fine-tune's second save, refs alternating between 2 packs: %llu GET(s)\n",
           (unsigned long long)gets);
    CHECK(gets == 2); /* was 89: a new GET at every pack switch */
    /* The mount's path: a range of the file, written with pwrite. */
    CHECK(restore_range_and_compare(b, &c, &m, &f, 7, 60, expect) == 2);

    /* A reused chunk damaged in the first save's pack is reported. */
    size_t hit = data[10];
    first.data.data[first.refs[hit].offset + 7] ^= 0x5a;
    CHECK_OK(st_put(b, keys[0], first.data.data, first.data.len));
    restore_fails_corrupt(b, &m, &f);
    free(expect);
    pack_free(&first);
    pack_free(&second);
    st_backend_close(b);
}

/* Puts pb's bytes as the pack whose id is st_id_of(name): its id and key. */
static void store_pack(st_backend *b, const pack_builder *pb, const char *name, st_id *pack_id,
                       char key[ST_KEY_MAX])
{
    *pack_id = st_id_of(name, strlen(name));
    CHECK_OK(st_key_pack(key, ST_KEY_MAX, "job", pack_id));
    CHECK_OK(st_put(b, key, pb->data.data, pb->data.len));
}

/* The layout of a file's chunks in one pack (one_pack_make()). */
typedef struct pack_layout {
    const char *name; /* the pack is stored under st_id_of(name) */
    size_t n;         /* chunks (at most 64) */
    size_t len, vary; /* chunk i holds len + (i * 7919) % vary raw bytes */
    uint64_t seed;
    int reversed; /* the file takes them in reverse pack order */
} pack_layout;

/* A counted memory store holding one pack, and a file of its chunks. */
typedef struct one_pack {
    st_backend *b;
    st_backend_counts c;
    pack_builder pb;
    st_id pack_id;
    char key[ST_KEY_MAX];
    st_chunk_ref refs[64];
    st_manifest m;
    st_file_entry f;
    uint8_t *expect; /* the file's bytes */
} one_pack;

/* Adds l.n seeded chunks to t's pack (unless it has them; opening the store
 * the first time), stores it, and makes t's file of them in pack order or
 * reversed. */
static void one_pack_make(one_pack *t, pack_layout l)
{
    size_t order[64];
    if (!t->b)
        open_counted(&t->b, &t->c);
    CHECK(l.n <= 64);
    while (t->pb.n < l.n)
        add_chunk(&t->pb, l.len + (t->pb.n * 7919) % l.vary, l.seed + t->pb.n);
    for (size_t i = 0; i < l.n; i++)
        order[i] = l.reversed ? l.n - 1 - i : i;
    free(t->expect);
    store_pack(t->b, &t->pb, l.name, &t->pack_id, t->key);
    make_file(&t->pb, order, l.n, &t->m, &t->f, t->refs, &t->pack_id, &t->expect);
}

static void one_pack_free(one_pack *t)
{
    free(t->expect);
    pack_free(&t->pb);
    st_backend_close(t->b);
}

/* Chunks in pack order, 20-90 KiB each, so that most straddle the memory
 * backend's 65,521-byte stream pieces: restored byte-identical from one
 * streamed GET (each chunk decoded as soon as its last byte arrived, split
 * ones from the staging buffer); a damaged chunk that straddles a piece is
 * refused; a pack cut short is refused (ST_ERR_CORRUPT), not taken as the
 * end of the file. */
static void test_streamed_in_pack_order(void)
{
    one_pack t = {0};
    one_pack_make(&t, (pack_layout){"pack-s", 40, 20 * KIB, 70 * KIB, 3000, 0});
    CHECK(restore_and_compare(t.b, &t.c, &t.m, &t.f, t.expect) == 1);

    /* The chunk holding pack byte 3 * 65521 straddles two pieces. */
    const pack_builder *pb = &t.pb;
    size_t hit = 0;
    while (pb->refs[hit].offset + pb->refs[hit].stored_len <= 3 * 65521u)
        hit++;
    CHECK(pb->refs[hit].offset < 3 * 65521u);
    for (int round = 0; round < 2; round++) {
        st_bytes bad = {0};
        CHECK_OK(st_bytes_append(&bad, pb->data.data, pb->data.len));
        if (round == 0)
            bad.data[pb->refs[hit].offset + pb->refs[hit].stored_len - 1] ^= 0x5a;
        else
            bad.len -= 1000; /* the last chunk's tail is missing */
        CHECK_OK(st_put(t.b, t.key, bad.data, bad.len));
        st_bytes_free(&bad);
        restore_fails_corrupt(t.b, &t.m, &t.f);
        if (round == 1)
            CHECK(strstr(st_errmsg(), "shorter than the manifest") != NULL);
    }
    one_pack_free(&t);
}

/* A file's run through one pack in pack order is streamed, so one GET
 * reads all of it, past ST_RESTORE_MAX_GET (a 20 MiB pack: was 2 GETs), in
 * both sinks; chunks in another order are buffered, within
 * ST_RESTORE_MAX_GET per run (2 GETs). */
static void test_streamed_whole_pack(void)
{
    one_pack t = {0};
    /* 20 random chunks of 1 MiB: stored as they are, a 20 MiB pack. */
    pack_layout l = {"pack-big", 20, MIB, 1, 5000, 0};
    one_pack_make(&t, l);
    CHECK(t.pb.data.len > ST_RESTORE_MAX_GET);
    CHECK(restore_and_compare(t.b, &t.c, &t.m, &t.f, t.expect) == 1);
    CHECK(restore_range_and_compare(t.b, &t.c, &t.m, &t.f, 0, 20, t.expect) == 1);
    l.reversed = 1;
    one_pack_make(&t, l);
    CHECK(restore_and_compare(t.b, &t.c, &t.m, &t.f, t.expect) == 2);
    one_pack_free(&t);
}

/* A file that runs through the end of one pack into the next, in pack
 * order (a 16 MiB task of a large file crosses a pack boundary about one
 * time in three): two streamed GETs, one per pack, and no run fetched whole
 * into the window buffer (there was one: 2 GETs then too, but the decoding
 * waited for both and each thread held up to ST_RESTORE_MAX_GET of window).
 * Refs that come back to the first pack are still one buffered run. */
static void test_streamed_across_packs(void)
{
    st_backend *b = NULL;
    st_backend_counts c = {0};
    open_counted(&b, &c);
    pack_builder first = {.pack = 0}, second = {.pack = 1};
    size_t order[24], pack_of[24];
    for (size_t i = 0; i < 24; i++) { /* 12 chunks at the end of each pack */
        pack_builder *pb = i < 12 ? &first : &second;
        order[i] = add_chunk(pb, 96 * KIB + i * 1000, 7000 + i);
        pack_of[i] = i >= 12;
    }
    st_id pack_ids[2];
    char keys[2][ST_KEY_MAX];
    store_pack(b, &first, "pack-x1", &pack_ids[0], keys[0]);
    store_pack(b, &second, "pack-x2", &pack_ids[1], keys[1]);
    const pack_builder *pbs[2] = {&first, &second};
    st_manifest m;
    st_file_entry f;
    st_chunk_ref refs[24];
    uint8_t *expect = NULL;
    make_file_of(pbs, pack_of, order, 24, 2, &m, &f, refs, pack_ids, &expect);
    CHECK(first.data.len + second.data.len < ST_RESTORE_MAX_GET); /* one buffered run would fit */

    char path[300];
    snprintf(path, sizeof path, "%s/across.bin", root);
    for (int ranged = 0; ranged < 2; ranged++) { /* st_restore_file, then the pwrite sink */
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0 && ftruncate(fd, ranged ? (off_t)f.size : 0) == 0);
        st_restorer *r = NULL;
        CHECK_OK(st_restorer_new(b, "job", &r));
        uint64_t before = st_backend_counts_of(&c, ST_REQ_GET);
        CHECK_OK(ranged ? st_restore_chunks(r, &m, &f, 0, 24, fd) : st_restore_file(r, &m, &f, fd));
        const st_restore_stats *st = st_restorer_stats(r);
        printf("  a file across a pack boundary (%s): %llu GET(s), %llu buffered run(s)\n",
               ranged ? "chunks" : "file",
               (unsigned long long)(st_backend_counts_of(&c, ST_REQ_GET) - before),
               (unsigned long long)st->buffered_runs);
        CHECK(st_backend_counts_of(&c, ST_REQ_GET) - before == 2);
        CHECK(st->buffered_runs == 0);
        check_bytes(fd, &f, expect);
        st_restorer_free(r);
        close(fd);
    }
    free(expect);

    /* The same chunks, but the file goes back to the first pack at its end:
     * one buffered run, a window per pack, 2 GETs. */
    order[23] = order[0];
    pack_of[23] = 0;
    make_file_of(pbs, pack_of, order, 24, 2, &m, &f, refs, pack_ids, &expect);
    CHECK(restore_and_compare(b, &c, &m, &f, expect) == 2);
    free(expect);
    pack_free(&first);
    pack_free(&second);
    st_backend_close(b);
}

/* A fine-tune's file as the mount fetches it: each record's new header (a
 * small chunk in the second save's pack) before its data (a large chunk of
 * the first save's). The headers are side chunks (st_side.h): fetched once
 * for the file, one GET for the lot, while each range streams the first
 * pack with no buffered run. A file whose side chunks would take more than
 * ST_SIDE_BYTES_MAX of windows has none; a damaged side chunk is reported. */
static void test_side_chunks(void)
{
    enum { RECORDS = 40 };
    st_backend *b = NULL;
    st_backend_counts c = {0};
    open_counted(&b, &c);
    for (int big_headers = 0; big_headers < 2; big_headers++) {
        pack_builder first = {.pack = 0}, second = {.pack = 1};
        size_t order[2 * RECORDS], pack_of[2 * RECORDS];
        const size_t header_len = big_headers ? 60 * KIB : 1 * KIB;
        for (size_t i = 0; i < RECORDS; i++) {
            add_chunk(&first, header_len, 9000 + i); /* the first save's header, not used */
            order[2 * i + 1] = add_chunk(&first, 96 * KIB, 9100 + i);
            pack_of[2 * i + 1] = 0;
            order[2 * i] = add_chunk(&second, header_len, 9200 + i);
            pack_of[2 * i] = 1;
        }
        st_id pack_ids[2];
        char keys[2][ST_KEY_MAX];
        store_pack(b, &first, "pack-s1", &pack_ids[0], keys[0]);
        store_pack(b, &second, "pack-s2", &pack_ids[1], keys[1]);
        const pack_builder *pbs[2] = {&first, &second};
        st_manifest m;
        st_file_entry f;
        st_chunk_ref refs[2 * RECORDS];
        uint8_t *expect = NULL;
        make_file_of(pbs, pack_of, order, 2 * RECORDS, 2, &m, &f, refs, pack_ids, &expect);
        CHECK(st_chunk_is_side(&f, 0) && st_chunk_is_side(&f, 10) && !st_chunk_is_side(&f, 11));
        /* a header does not end a piece of work; the next pack's data would */
        CHECK(!st_restore_ends_at_pack(&f, 10, 1 * MIB, 1 * MIB));
        st_side_chunks *sides = NULL;
        CHECK_OK(st_side_chunks_new(&m, &f, &sides));
        CHECK((sides == NULL) == big_headers); /* 40 x 60 KiB: over the bound */

        char path[300];
        snprintf(path, sizeof path, "%s/sides.bin", root);
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        CHECK(fd >= 0 && ftruncate(fd, (off_t)f.size) == 0);
        st_restorer *r = NULL;
        CHECK_OK(st_restorer_new(b, "job", &r));
        const st_restore_to to = {.sides = sides};
        uint64_t before = st_backend_counts_of(&c, ST_REQ_GET);
        CHECK_OK(st_restore_chunks_to(r, &m, &f, 0, 50, fd, &to)); /* two of the mount's runs */
        CHECK_OK(st_restore_chunks_to(r, &m, &f, 50, 2 * RECORDS - 50, fd, &to));
        uint64_t gets = st_backend_counts_of(&c, ST_REQ_GET) - before;
        const st_restore_stats *st = st_restorer_stats(r);
        printf("  a fine-tune's file in two ranges, %s side chunks: %llu GET(s), %llu buffered\n",
               sides ? "with" : "without", (unsigned long long)gets,
               (unsigned long long)st->buffered_runs);
        if (sides)
            CHECK(gets == 3 && st->gets == 3 &&
                  st->buffered_runs == 0); /* was 4 GETs, 2 buffered */
        else
            CHECK(st->buffered_runs == 2);
        check_bytes(fd, &f, expect);
        close(fd);
        st_side_chunks_free(sides);

        if (!big_headers) { /* a header damaged in the second pack */
            second.data.data[refs[20].offset + 5] ^= 0x5a;
            CHECK_OK(st_put(b, keys[1], second.data.data, second.data.len));
            CHECK_OK(st_side_chunks_new(&m, &f, &sides));
            const st_restore_to damaged = {.sides = sides};
            fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
            CHECK(fd >= 0 && ftruncate(fd, (off_t)f.size) == 0);
            CHECK_ERR(st_restore_chunks_to(r, &m, &f, 0, 2 * RECORDS, fd, &damaged),
                      ST_ERR_CORRUPT);
            close(fd);
            st_side_chunks_free(sides);
        }
        st_restorer_free(r);
        free(expect);
        pack_free(&first);
        pack_free(&second);
    }
    st_backend_close(b);
}

/* Restores f's chunks into a file of its size as two workers of a parallel
 * restore would, the first half then the second (or, reversed, the second
 * half first: it arrives ahead of the hashing front), feeding one digest
 * with the given park budget; returns what st_file_digest_finish() said and
 * in *stats its counters; checks the bytes written. */
static st_err restore_halves(st_backend *b, const st_manifest *m, const st_file_entry *f,
                             const uint8_t *expect, int reversed, st_park_budget *budget,
                             st_file_digest_stats *stats)
{
    char path[300];
    snprintf(path, sizeof path, "%s/halves.bin", root);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)f->size) == 0);
    st_restorer *r = NULL;
    st_file_digest *d = NULL;
    CHECK_OK(st_restorer_new(b, "job", &r));
    CHECK_OK(st_file_digest_new(f, budget, &d));
    const st_restore_to to = {.digest = d};
    size_t half = f->nchunks / 2;
    size_t first[2] = {reversed ? half : 0, reversed ? 0 : half};
    size_t count[2] = {reversed ? f->nchunks - half : half, reversed ? half : f->nchunks - half};
    for (int k = 0; k < 2; k++)
        CHECK_OK(st_restore_chunks_to(r, m, f, first[k], count[k], fd, &to));
    st_err e = st_file_digest_finish(d, fd);
    *stats = st_file_digest_stats_of(d);
    check_bytes(fd, f, expect);
    st_file_digest_free(d);
    CHECK(!budget || budget->used == 0); /* parked bytes returned */
    st_restorer_free(r);
    close(fd);
    return e;
}

/* The whole-file digest of the pwrite sink is computed from the decoded
 * chunks, not by reading the file back: in order, nothing is read back; the
 * second half first is parked while the budget allows (nothing read back)
 * and read back without one (that half's bytes only). Every way, a manifest
 * whose digest is wrong fails the restore (ST_ERR_CORRUPT), and so does a
 * range never restored. */
static void test_digest_from_memory(void)
{
    one_pack t = {0};
    one_pack_make(&t, (pack_layout){"pack-d", 40, 20 * KIB, 70 * KIB, 6000, 0});
    st_backend *b = t.b;
    st_manifest m = t.m;
    st_file_entry f = t.f;
    const st_chunk_ref *refs = t.refs;
    const uint8_t *expect = t.expect;
    uint64_t second = 0;
    for (size_t i = 20; i < 40; i++)
        second += refs[i].raw_len;

    st_park_budget roomy = ST_PARK_BUDGET_INIT(64 * MIB), tight = ST_PARK_BUDGET_INIT(200 * KIB);
    st_file_digest_stats st;
    CHECK_OK(restore_halves(b, &m, &f, expect, 0, NULL, &st));
    CHECK(st.hashed == f.size && st.read_back == 0);
    CHECK_OK(restore_halves(b, &m, &f, expect, 1, &roomy, &st));
    CHECK(st.hashed == f.size && st.read_back == 0);
    CHECK_OK(restore_halves(b, &m, &f, expect, 1, NULL, &st));
    CHECK(st.hashed == f.size && st.read_back == second);
    /* A budget too small for the half: some parked, the rest read back. */
    CHECK_OK(restore_halves(b, &m, &f, expect, 1, &tight, &st));
    CHECK(st.read_back > 0 && st.read_back < second);

    f.digest.b[3] ^= 0x40; /* the manifest's digest is wrong */
    CHECK_ERR(restore_halves(b, &m, &f, expect, 0, NULL, &st), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "whole-file digest mismatch") != NULL);
    CHECK_ERR(restore_halves(b, &m, &f, expect, 1, &roomy, &st), ST_ERR_CORRUPT);
    CHECK_ERR(restore_halves(b, &m, &f, expect, 1, NULL, &st), ST_ERR_CORRUPT);
    f.digest.b[3] ^= 0x40;

    /* Only the second half restored: the digest never reached the end. */
    char path[300];
    snprintf(path, sizeof path, "%s/half.bin", root);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)f.size) == 0);
    st_restorer *r = NULL;
    st_file_digest *d = NULL;
    CHECK_OK(st_restorer_new(b, "job", &r));
    CHECK_OK(st_file_digest_new(&f, &roomy, &d));
    const st_restore_to to = {.digest = d};
    CHECK_OK(st_restore_chunks_to(r, &m, &f, 20, 20, fd, &to));
    CHECK_ERR(st_file_digest_finish(d, fd), ST_ERR_CORRUPT);
    st_file_digest_free(d);
    CHECK(roomy.used == 0);
    st_restorer_free(r);
    close(fd);
    one_pack_free(&t);
}

/* Chunks restored in pairs swapped (1, 0, 3, 2, ...): each odd chunk is
 * parked, then hashed and given back when its even one reaches the front.
 * The budget keeps that buffer and the next park takes it instead of a
 * fresh one (chunks of 20-70 KiB fit buffers of 64 or 128 KiB: at most one
 * fresh buffer per size); when the digest is freed the spares go too. */
static void test_parked_buffers_reused(void)
{
    one_pack t = {0};
    one_pack_make(&t, (pack_layout){"pack-r", 40, 20 * KIB, 70 * KIB, 6001, 0});
    st_park_budget budget = ST_PARK_BUDGET_INIT(64 * MIB);
    char path[300];
    snprintf(path, sizeof path, "%s/pairs.bin", root);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)t.f.size) == 0);
    st_restorer *r = NULL;
    st_file_digest *d = NULL;
    CHECK_OK(st_restorer_new(t.b, "job", &r));
    CHECK_OK(st_file_digest_new(&t.f, &budget, &d));
    const st_restore_to to = {.digest = d};
    for (size_t i = 0; i + 1 < t.f.nchunks; i += 2) {
        CHECK_OK(st_restore_chunks_to(r, &t.m, &t.f, i + 1, 1, fd, &to));
        CHECK_OK(st_restore_chunks_to(r, &t.m, &t.f, i, 1, fd, &to));
    }
    CHECK_OK(st_file_digest_finish(d, fd));
    st_file_digest_stats st = st_file_digest_stats_of(d);
    CHECK(st.hashed == t.f.size && st.read_back == 0);
    const uint64_t parks = t.f.nchunks / 2;
    CHECK(budget.fresh + budget.reused == parks);
    CHECK(budget.fresh <= 2 && budget.reused >= parks - 2);
    CHECK(budget.used == 0 && budget.nspares > 0);
    st_file_digest_free(d);
    CHECK(budget.nspares == 0 && budget.spare_bytes == 0 && budget.spares == NULL);
    st_restorer_free(r);
    close(fd);
    one_pack_free(&t);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_dcp_like_layout);
    RUN(test_gap_bound);
    RUN(test_far_repeats);
    RUN(test_incremental_step);
    RUN(test_streamed_in_pack_order);
    RUN(test_streamed_whole_pack);
    RUN(test_streamed_across_packs);
    RUN(test_side_chunks);
    RUN(test_digest_from_memory);
    RUN(test_parked_buffers_reused);
    ut_rmtree(root);
    return ut_finish();
}
