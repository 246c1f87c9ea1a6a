/*
 * Small files as slices of bundles (docs/FORMATS.md, manifest version 3)
 * through every reader. Nothing writes bundles yet, so each step here is
 * built by hand: its files' bytes concatenated into bundles, each bundle one
 * chunk of a pack written with the pack writer, a version 3 manifest whose
 * files are slices (digest absent), published like any part. Then: the
 * facade restores it byte-identical and verifies it; a bundle whose stored
 * bytes are damaged fails restore and verify (ST_ERR_CORRUPT), for its own
 * files only; a slice whose bundle_len disagrees with the decoded bundle
 * fails, fetched or cached; restoring 5,000 files in 20 bundles costs about
 * one GET per bundle (the bundle cache); the dedup index records a slice's
 * chunk with its bundle's raw length; the mount reads each file of such
 * a step byte-identical, with about one GET per bundle too; compaction
 * copies a bundle whole and keeps every file restorable, and GC keeps a
 * pack while a slice references it.
 */
#include "vfs_harness.h"
#include "ut_store.h"

#include "backend/st_backend_count.h"
#include "engine/st_gc.h"
#include "engine/st_state.h"
#include "format/st_codec.h"
#include "format/st_pack.h"

#define JOB   "j"
#define MS    1000000LL
#define GRACE (500 * MS)

/* A step built by hand: its manifest as published and its files' bytes. */
typedef struct slice_step {
    st_manifest m;
    uint8_t **data; /* per file */
    size_t nbundles;
    st_id orphan; /* a pack no manifest names (build_step's `orphan`) */
} slice_step;

/* File i's size: 60 .. 400 bytes, 250 of them fit a 64 KiB bundle. */
static size_t small_size(size_t i)
{
    return 60 + (i * 97) % 341;
}

/* File i of step: random bytes, then its name repeated (so that the codec
 * compresses some bundles: both the raw and the LZ4 decode are read). */
static uint8_t *small_data(uint64_t step, size_t i)
{
    size_t len = small_size(i);
    uint8_t *p = malloc(len);
    ut_rand_fill(p, len / 2, step * 100000 + i);
    for (size_t k = len / 2; k < len; k++)
        p[k] = (uint8_t) "small file "[k % 11];
    return p;
}

/* Appends chunk raw[0..len) to w: its offset and stored length. */
static void append_chunk(st_pack_writer *w, const uint8_t *raw, size_t len, uint64_t *offset,
                         uint32_t *stored_len)
{
    st_id id = st_id_of(raw, len);
    uint8_t *scratch = malloc(st_codec_scratch_bound(len));
    uint8_t *dst = st_pack_append_begin(w, st_codec_bound(len));
    size_t enc_len = 0;
    CHECK(dst && scratch);
    CHECK_OK(st_codec_encode(raw, len, &id, dst, st_codec_bound(len), &enc_len, scratch, NULL));
    CHECK_OK(st_pack_append_commit(w, enc_len, offset));
    *stored_len = (uint32_t)enc_len;
    free(scratch);
}

/* PUTs the pack w holds into job's packs; its name in *id. */
static void put_pack(st_backend *b, st_pack_writer *w, st_id *id)
{
    char key[ST_KEY_MAX];
    CHECK_OK(st_pack_finish(w, id));
    CHECK_OK(st_key_pack(key, sizeof key, JOB, id));
    CHECK_OK(st_put(b, key, w->data.data, w->data.len));
    st_pack_writer_reset(w);
}

/*
 * Publishes step of JOB into b as node "hand": nfiles small files
 * (step-NNNNNN/small-NNNNN.bin), per_bundle to a bundle, per_pack bundles to
 * a pack. dead_bytes > 0: the first pack also holds a chunk of that many
 * random bytes that no file references. orphan: one more pack, of one
 * random chunk, that no manifest names (s->orphan).
 */
static void build_step(st_backend *b, uint64_t step, size_t nfiles, size_t per_bundle,
                       size_t per_pack, size_t dead_bytes, int orphan, slice_step *s)
{
    memset(s, 0, sizeof *s);
    st_manifest *m = &s->m;
    s->nbundles = (nfiles + per_bundle - 1) / per_bundle;
    m->npacks = (s->nbundles + per_pack - 1) / per_pack;
    m->packs = calloc(m->npacks, sizeof *m->packs);
    m->nfiles = nfiles;
    m->files = calloc(nfiles, sizeof *m->files);
    s->data = calloc(nfiles, sizeof *s->data);
    uint8_t *bundle = malloc(ST_MANIFEST_MAX_BUNDLE);
    st_pack_writer w = {0};
    for (size_t bi = 0; bi < s->nbundles; bi++) {
        const uint32_t pack = (uint32_t)(bi / per_pack);
        const size_t first = bi * per_bundle;
        const size_t end = first + per_bundle < nfiles ? first + per_bundle : nfiles;
        uint32_t len = 0;
        for (size_t i = first; i < end; i++) {
            s->data[i] = small_data(step, i);
            CHECK(len + small_size(i) <= ST_MANIFEST_MAX_BUNDLE);
            memcpy(bundle + len, s->data[i], small_size(i));
            len += (uint32_t)small_size(i);
        }
        uint64_t offset;
        uint32_t stored_len;
        append_chunk(&w, bundle, len, &offset, &stored_len);
        uint32_t skip = 0;
        for (size_t i = first; i < end; i++) {
            st_file_entry *f = &m->files[i];
            char path[64];
            snprintf(path, sizeof path, "step-%06llu/small-%05zu.bin", (unsigned long long)step, i);
            f->path = strdup(path);
            f->size = small_size(i);
            f->mode = 0644;
            f->mtime_ns = 1700000000000000000LL + (int64_t)i;
            f->rank = -1;
            f->digest_absent = 1;
            f->nchunks = 1;
            f->chunks = calloc(1, sizeof *f->chunks);
            *f->chunks = (st_chunk_ref){.id = st_id_of(bundle, len),
                                        .pack = pack,
                                        .offset = offset,
                                        .stored_len = stored_len,
                                        .raw_len = (uint32_t)f->size,
                                        .skip = skip,
                                        .bundle_len = len};
            skip += (uint32_t)f->size;
        }
        if (bi == 0 && dead_bytes) {
            uint8_t *dead = malloc(dead_bytes);
            ut_rand_fill(dead, dead_bytes, step + 77);
            append_chunk(&w, dead, dead_bytes, &offset, &stored_len);
            free(dead);
        }
        if (bi + 1 == s->nbundles || (bi + 1) / per_pack != pack)
            put_pack(b, &w, &m->packs[pack]);
    }
    if (orphan) {
        uint64_t offset;
        uint32_t stored_len;
        ut_rand_fill(bundle, 40000, step + 99);
        append_chunk(&w, bundle, 40000, &offset, &stored_len);
        put_pack(b, &w, &s->orphan);
    }
    st_pack_writer_free(&w);
    free(bundle);

    m->step = step;
    m->node = strdup("hand");
    m->job = strdup(JOB);
    m->created_ns = st_now_ns();
    st_bytes enc = {0}; /* what is published is version 3 */
    CHECK_OK(st_manifest_encode(m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 3);
    st_bytes_free(&enc);
    st_part part = {.revision = 1, .complete = 1};
    uint64_t puts = 0;
    CHECK_OK(st_catalog_publish(b, m, &part, NULL, 0, &puts));
}

static void free_step(slice_step *s)
{
    for (size_t i = 0; i < s->m.nfiles; i++)
        free(s->data[i]);
    free(s->data);
    st_manifest_free(&s->m);
}

/* The bytes of the file at path (malloc'd, *len), or NULL. */
static uint8_t *read_file(const char *path, size_t *len)
{
    struct stat sb;
    int fd = open(path, O_RDONLY);
    uint8_t *p = NULL;
    if (fd >= 0 && fstat(fd, &sb) == 0 && (p = malloc(sb.st_size + 1)) &&
        read(fd, p, (size_t)sb.st_size) == sb.st_size)
        *len = (size_t)sb.st_size;
    else {
        free(p);
        p = NULL;
    }
    if (fd >= 0)
        close(fd);
    return p;
}

/* 1 if every file of s is under dir, byte for byte. */
static int restored_is(const char *dir, const slice_step *s)
{
    int same = 1;
    for (size_t i = 0; same && i < s->m.nfiles; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, s->m.files[i].path);
        size_t len = 0;
        uint8_t *got = read_file(path, &len);
        same = got && len == s->m.files[i].size && memcmp(got, s->data[i], len) == 0;
        free(got);
    }
    return same;
}

/* A facade test's file store, vh_tmp/<name>/store: opened as a store (s)
 * and as a raw backend (b), with dest a restore target beside it. */
typedef struct facade_case {
    char dir[300], url[400], dest[400];
    st_store *s;
    st_backend *b;
} facade_case;

static void case_open(facade_case *c, const char *name)
{
    snprintf(c->dir, sizeof c->dir, "%s/%s", vh_tmp, name);
    mkdir(c->dir, 0755);
    snprintf(c->url, sizeof c->url, "file://%s/store", c->dir);
    snprintf(c->dest, sizeof c->dest, "%s/restored", c->dir);
    c->s = ut_open_store(c->url, c->dir, "state", "reader");
    c->b = ut_open_store_backend(c->dir);
}

static void case_close(facade_case *c)
{
    st_backend_close(c->b);
    st_store_close(c->s);
}

static uint64_t store_gets(const st_store *s)
{
    st_request_counts c;
    st_store_requests(s, &c);
    return c.get;
}

static void test_restore_and_verify(void)
{
    facade_case c;
    case_open(&c, "basic");
    st_store *s = c.s;
    st_backend *b = c.b;
    slice_step st;
    build_step(b, 30, 40, 16, 2, 0, 0, &st); /* 3 bundles (16, 16, 8) in 2 packs */

    st_restore_result res = {0};
    CHECK_OK(st_store_restore(s, JOB, 30, c.dest, NULL, &res));
    CHECK(res.files == 40);
    CHECK(restored_is(c.dest, &st));
    CHECK(res.gets == 3); /* one GET per bundle */
    st_verify_result v;
    CHECK_OK(st_store_verify(s, JOB, 30, &v));
    CHECK(v.files == 40 && v.bad_files == 0);
    free_step(&st);
    case_close(&c);
}

/* The stored bytes of one bundle flipped: its files fail, the others not. */
static void test_damaged_bundle_fails(void)
{
    char key[ST_KEY_MAX];
    facade_case c;
    case_open(&c, "damaged");
    st_store *s = c.s;
    st_backend *b = c.b;
    slice_step st;
    build_step(b, 31, 40, 16, 2, 0, 0, &st);
    const st_chunk_ref *ref = st.m.files[20].chunks; /* bundle 1, in pack 0 */
    CHECK_OK(st_key_pack(key, sizeof key, JOB, &st.m.packs[ref->pack]));
    st_bytes pack = {0};
    CHECK_OK(st_get(b, key, 0, ST_GET_TO_END, &pack));
    pack.data[ref->offset + ref->stored_len - 1] ^= 0x40; /* its last payload byte */
    CHECK_OK(st_put(b, key, pack.data, pack.len));
    st_bytes_free(&pack);

    st_restore_result res = {0};
    CHECK_ERR(st_store_restore(s, JOB, 31, c.dest, NULL, &res), ST_ERR_CORRUPT);
    st_verify_result v;
    CHECK_ERR(st_store_verify(s, JOB, 31, &v), ST_ERR_CORRUPT);
    CHECK(v.files == 40 && v.bad_files == 16);
    free_step(&st);
    case_close(&c);
}

/* A slice whose bundle_len is not its bundle's decoded length fails, both
 * when its bundle is fetched and when it is already cached. */
static void test_bundle_len_disagrees(void)
{
    st_backend *b = NULL;
    CHECK_OK(st_backend_mem_open(&b));
    slice_step st;
    build_step(b, 32, 10, 5, 1, 0, 0, &st);
    int fd = open("/dev/null", O_WRONLY);
    st_restorer *r = NULL;
    CHECK_OK(st_restorer_new(b, JOB, &r));
    st_chunk_ref *c = st.m.files[1].chunks;                  /* bundle 0, at skip > 0 */
    CHECK_OK(st_restore_file(r, &st.m, &st.m.files[1], fd)); /* now cached */
    c->bundle_len++;
    CHECK_ERR(st_restore_file(r, &st.m, &st.m.files[1], fd), ST_ERR_CORRUPT);
    st_restorer_free(r);
    CHECK_OK(st_restorer_new(b, JOB, &r)); /* a cold cache: fetched and decoded */
    CHECK_ERR(st_restore_file(r, &st.m, &st.m.files[1], fd), ST_ERR_CORRUPT);
    c->bundle_len -= 2; /* shorter than the bundle, the slice still inside */
    CHECK_ERR(st_restore_file(r, &st.m, &st.m.files[1], fd), ST_ERR_CORRUPT);
    c->bundle_len++;
    CHECK_OK(st_restore_file(r, &st.m, &st.m.files[1], fd));
    CHECK(st_restorer_stats(r)->gets == 3); /* a bundle that failed is not kept */
    st_restorer_free(r);
    close(fd);
    free_step(&st);
    st_backend_close(b);
}

/* 5,000 small files in 20 bundles: restore and verify cost about one GET per
 * bundle, not one per file. */
static void test_gets_per_bundle(void)
{
    facade_case c;
    case_open(&c, "many");
    st_store *s = c.s;
    st_backend *b = c.b;
    slice_step st;
    build_step(b, 33, 5000, 250, 3, 0, 0, &st);
    CHECK(st.nbundles == 20);

    st_restore_result res = {0};
    uint64_t before = store_gets(s);
    CHECK_OK(st_store_restore(s, JOB, 33, c.dest, NULL, &res));
    uint64_t all = store_gets(s) - before;
    CHECK(restored_is(c.dest, &st));
    before = store_gets(s);
    st_verify_result v;
    CHECK_OK(st_store_verify(s, JOB, 33, &v));
    uint64_t verify_all = store_gets(s) - before;
    printf("  5000 files in %zu bundles: restore %llu bundle GETs (%llu requests in all), "
           "verify %llu GETs in all\n",
           st.nbundles, (unsigned long long)res.gets, (unsigned long long)all,
           (unsigned long long)verify_all);
    CHECK(res.gets >= st.nbundles && res.gets <= st.nbundles + 2);
    CHECK(all <= res.gets + 10); /* plus the step's listing, part, manifest */
    CHECK(verify_all <= st.nbundles + 10);
    free_step(&st);
    case_close(&c);
}

/* The dedup index learns a slice's chunk as the whole bundle it is. */
static void test_index_records_bundles(void)
{
    char db[300];
    st_backend *b = NULL;
    st_state *state = NULL;
    snprintf(db, sizeof db, "%s/index.db", vh_tmp);
    CHECK_OK(st_backend_mem_open(&b));
    CHECK_OK(st_state_open(db, &state));
    slice_step st;
    build_step(b, 34, 10, 5, 1, 0, 0, &st);
    CHECK_OK(st_catalog_sync_index(b, state, JOB, NULL, NULL));
    const st_chunk_ref *c = st.m.files[7].chunks;
    st_chunk_loc loc;
    CHECK_OK(st_state_chunk_lookup(state, JOB, &c->id, &loc));
    CHECK(st_id_cmp(&loc.pack, &st.m.packs[c->pack]) == 0);
    CHECK(loc.offset == c->offset && loc.stored_len == c->stored_len);
    CHECK(loc.raw_len == c->bundle_len && loc.raw_len != c->raw_len);
    free_step(&st);
    st_state_close(state);
    st_backend_close(b);
}

static uint64_t mount_gets(vh_mount *m)
{
    st_vfs_stats stats;
    CHECK_OK(st_vfs_get_stats(m->v, &stats));
    uint64_t n = 0;
    for (int r = 0; r < ST_VFS_REQ_RESULTS; r++)
        n += stats.requests[ST_REQ_GET][r];
    st_vfs_stats_free(&stats);
    return n;
}

/* The mount reads each small file of a remote step byte-identical. */
static void test_mount_reads_slices(void)
{
    st_backend *store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    slice_step st;
    build_step(store, 40, 300, 100, 2, 0, 0, &st); /* 3 bundles */
    vh_mount m;
    CHECK_OK(vh_mount_open(&m, store, "reader", "mount", 1));
    if (m.v) {
        char path[128];
        snprintf(path, sizeof path, JOB "/%s", st.m.files[299].path);
        CHECK(VH_WAIT(vh_exists(&m, path), 10));
        uint64_t before = mount_gets(&m);
        for (size_t i = 0; i < st.m.nfiles; i++) {
            snprintf(path, sizeof path, JOB "/%s", st.m.files[i].path);
            CHECK(vh_file_is(&m, path, st.data[i], st.m.files[i].size));
        }
        uint64_t gets = mount_gets(&m) - before;
        printf("  mount: %zu files in %zu bundles read with %llu GETs\n", st.m.nfiles, st.nbundles,
               (unsigned long long)gets);
        CHECK(gets >= st.nbundles && gets <= st.nbundles + 3);
        vh_mount_close(&m);
    }
    free_step(&st);
    st_backend_close(store);
}

static int pack_exists(st_backend *b, const st_id *pack)
{
    char key[ST_KEY_MAX];
    uint64_t size;
    CHECK_OK(st_key_pack(key, sizeof key, JOB, pack));
    return st_stat(b, key, &size) == ST_OK;
}

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    nanosleep(&ts, NULL);
}

static void gc_run(st_backend *b, int compact, st_gc_report *r)
{
    st_gc_policy p = {.keep_last = 5, .grace_ns = GRACE, .compact = compact};
    CHECK_OK(st_gc_run(b, JOB, &p, 0, r, NULL, NULL));
}

/* A pack mostly dead besides its bundles is compacted: the bundles are
 * copied whole, the slices point at the copy, every file restores; GC
 * deletes the pack no manifest names and keeps those slices reference. */
static void test_compact_and_gc(void)
{
    facade_case c;
    case_open(&c, "compact");
    st_store *s = c.s;
    st_backend *b = c.b;
    slice_step st;
    build_step(b, 50, 60, 20, 2, 256 << 10, 1, &st); /* pack 0: 2 bundles + 256 KiB dead */
    const st_id old0 = st.m.packs[0], kept1 = st.m.packs[1];

    st_gc_report r;
    gc_run(b, 1, &r);
    for (int i = 0; i < 5 && (r.stopped || r.compact_skipped); i++) {
        st_gc_report_free(&r);
        sleep_ns(GRACE + 10 * MS);
        gc_run(b, 1, &r);
    }
    printf("  compaction: %llu candidates, %llu packs written, %llu parts rewritten (%s)\n",
           (unsigned long long)r.compact_candidates, (unsigned long long)r.compact_packs_written,
           (unsigned long long)r.compact_parts_rewritten, r.compact_why);
    CHECK(r.compact_candidates == 1 && r.compact_packs_written == 1);
    CHECK(r.compact_parts_rewritten == 1);
    st_gc_report_free(&r);
    /* Two sweeps a grace apart: unreferenced packs marked, then deleted. */
    for (int i = 0; i < 2; i++) {
        sleep_ns(GRACE + 10 * MS);
        gc_run(b, 0, &r);
        st_gc_report_free(&r);
    }
    CHECK(!pack_exists(b, &st.orphan)); /* GC did sweep */
    CHECK(!pack_exists(b, &old0));      /* its bundles were copied out */
    CHECK(pack_exists(b, &kept1));      /* slices reference it */

    st_restore_result res = {0};
    CHECK_OK(st_store_restore(s, JOB, 50, c.dest, NULL, &res));
    CHECK(restored_is(c.dest, &st));
    st_verify_result v;
    CHECK_OK(st_store_verify(s, JOB, 50, &v));
    CHECK(v.bad_files == 0);
    free_step(&st);
    case_close(&c);
}

int main(void)
{
    if (vh_setup("slices"))
        return 1;
    RUN(test_restore_and_verify);
    RUN(test_damaged_bundle_fails);
    RUN(test_bundle_len_disagrees);
    RUN(test_gets_per_bundle);
    RUN(test_index_records_bundles);
    RUN(test_mount_reads_slices);
    RUN(test_compact_and_gc);
    if (!ut_failed)
        vh_teardown();
    return ut_finish();
}
