/*
 * GC tests through the facade (st_store_gc, ckptstore.h) on a file:// store
 * in a temp dir, steps made with st_store_put_dir: retention choices, a dry
 * run lists exactly what the real run then deletes, pending markers and the
 * grace period, a writer that meets a pending pack stores its chunks again,
 * repack by retirement (GC side and writer side), batches, progress and
 * stop, intents of interrupted step deletions; and after every run every
 * kept step still verifies.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptstore.h"
#include "backend/st_backend.h"
#include "backend/st_backend_count.h"
#include "util/st_fsutil.h"
#include "engine/st_gc.h"
#include "format/st_gcmark.h"
#include "format/st_part.h"
#include "engine/st_catalog.h"
#include "ut.h"
#include "ut_store.h"

#define KIB 1024
#define SEC 1000000000LL
#define MS  1000000LL

static char root[] = "/tmp/ckpt-test-gc-XXXXXX";
static char url[300];

static st_store *open_store(const char *state_name)
{
    return ut_open_store(url, root, state_name, "test-node");
}

/* Puts step `step` of job: shared.bin, the same in every step (shared
 * bytes), and own.bin, seeded by `seed` (own bytes). */
static void put_sized(st_store *s, const char *job, uint64_t step, size_t shared, size_t own,
                      unsigned seed, st_put_result *r)
{
    static uint8_t buf[512 * KIB];
    char dir[400], p[450];
    snprintf(dir, sizeof dir, "%s/src-%s-%llu", root, job, (unsigned long long)step);
    mkdir(dir, 0755);
    ut_rand_fill(buf, shared, 7);
    snprintf(p, sizeof p, "%s/shared.bin", dir);
    ut_write_file(p, buf, shared);
    ut_rand_fill(buf, own, 1000 + seed);
    snprintf(p, sizeof p, "%s/own.bin", dir);
    ut_write_file(p, buf, own);
    CHECK_OK(st_store_put_dir(s, job, step, dir, r));
}

/* A step of 256 KiB shared and 256 KiB of its own. */
static void put_step(st_store *s, const char *job, uint64_t step, unsigned seed, st_put_result *r)
{
    put_sized(s, job, step, 256 * KIB, 256 * KIB, seed, r);
}

/* The job's steps as a bit set (steps < 64). */
static uint64_t steps_of(st_store *s, const char *job)
{
    st_step_info *v;
    size_t n;
    uint64_t set = 0;
    CHECK_OK(st_store_list_steps(s, job, &v, &n));
    for (size_t i = 0; i < n; i++)
        set |= 1ull << v[i].step;
    free(v);
    return set;
}

/* Every step of the job verifies (nothing referenced was deleted). */
static void verify_all(st_store *s, const char *job)
{
    st_step_info *v;
    size_t n;
    CHECK_OK(st_store_list_steps(s, job, &v, &n));
    for (size_t i = 0; i < n; i++) {
        st_verify_result r;
        CHECK_OK(st_store_verify(s, job, v[i].step, &r));
        CHECK(r.bad_files == 0);
    }
    free(v);
}

static st_backend *open_backend(void);

/* A dry run, then the real run: the same keys, in the same order. With the
 * tests' grace of 1 ns, the markers earlier runs wrote are first made a
 * second old: ages are the store's (docs/GC.md, "Clocks"), and to a file
 * system's coarse clock a marker written in the tick of the next run's
 * look is 0 ns old, so the dry run and the real run could judge it apart. */
static void gc_checked(st_store *s, const char *job, const st_gc_policy *p, st_gc_report *real)
{
    st_gc_report dry;
    if (p->grace_ns < MS) {
        char prefix[ST_KEY_MAX];
        st_backend *b = open_backend();
        snprintf(prefix, sizeof prefix, "jobs/%s/gc/pending/", job);
        ut_backdate_all(b, root, prefix, 1);
        st_backend_close(b);
    }
    CHECK_OK(st_store_gc(s, job, p, 1, &dry));
    CHECK_OK(st_store_gc(s, job, p, 0, real));
    CHECK(dry.ndeleted == real->ndeleted);
    CHECK(dry.bytes_freed == real->bytes_freed);
    CHECK(dry.steps_deleted == real->steps_deleted);
    CHECK(dry.packs_retired == real->packs_retired);
    CHECK(dry.packs_marked == real->packs_marked);
    CHECK(dry.pending_bytes == real->pending_bytes);
    for (size_t i = 0; i < dry.ndeleted && i < real->ndeleted; i++)
        CHECK(!strcmp(dry.deleted[i], real->deleted[i]));
    st_gc_report_free(&dry);
    verify_all(s, job);
}

static void test_retention_and_sweep(void)
{
    st_store *s = open_store("state-ret");
    for (uint64_t i = 1; i <= 6; i++)
        put_step(s, "ret", i, (unsigned)i, NULL);
    CHECK_OK(st_store_pin(s, "ret", 1, 1));
    CHECK_ERR(st_store_pin(s, "ret", 42, 1), ST_ERR_NOT_FOUND);

    /* No policy: no step goes; nothing is unreferenced yet. */
    st_gc_report r;
    st_gc_policy none = {.grace_ns = 1};
    gc_checked(s, "ret", &none, &r);
    CHECK(r.steps_deleted == 0 && r.ndeleted == 0 && r.packs_marked == 0);
    CHECK(r.packs == 6 && r.packs_referenced == 6);
    st_gc_report_free(&r);

    /* keep-last 2 + keep-every 3 + pin 1: 1 (pin), 3 (every 3rd), 5, 6. */
    st_gc_policy pol = {.keep_last = 2, .keep_every = 3, .grace_ns = 1};
    gc_checked(s, "ret", &pol, &r);
    CHECK(r.steps_deleted == 2 && r.deleted_steps[0] == 2 && r.deleted_steps[1] == 4);
    CHECK(r.parts_deleted == 2 && r.manifests_deleted == 2);
    CHECK(r.packs_marked == 2 && r.packs_deleted == 0); /* marked now, deletable later */
    CHECK(steps_of(s, "ret") == ((1u << 1) | (1u << 3) | (1u << 5) | (1u << 6)));
    st_gc_report_free(&r);

    /* The next run (grace 1 ns is over) deletes the two packs and markers. */
    gc_checked(s, "ret", &none, &r);
    CHECK(r.packs_deleted == 2 && r.markers_deleted == 2 && r.bytes_freed > 2 * 200 * KIB);
    st_gc_report_free(&r);
    gc_checked(s, "ret", &none, &r);
    CHECK(r.ndeleted == 0 && r.packs == 4 && r.packs_referenced == 4);
    st_gc_report_free(&r);

    /* Unpin: keep-last 1 now leaves only the newest step (and what is shared). */
    CHECK_OK(st_store_pin(s, "ret", 1, 0));
    CHECK_ERR(st_store_pin(s, "ret", 1, 0), ST_ERR_NOT_FOUND);
    st_gc_policy last1 = {.keep_last = 1, .grace_ns = 1};
    gc_checked(s, "ret", &last1, &r);
    CHECK(r.steps_deleted == 3);
    st_gc_report_free(&r);
    gc_checked(s, "ret", &last1, &r);
    /* Step 1's pack holds the shared file too, so it stays referenced. */
    CHECK(r.packs_deleted == 2);
    st_gc_report_free(&r);
    CHECK(steps_of(s, "ret") == (1u << 6));
    st_store_close(s);
}

/* gc_checked, and how long it took (ns). */
static int64_t timed_gc(st_store *s, const char *job, const st_gc_policy *p, st_gc_report *r)
{
    const int64_t t = st_now_ns();
    gc_checked(s, job, p, r);
    return st_now_ns() - t;
}

static int64_t max_ns(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static void test_grace_period(void)
{
    st_store *s = open_store("state-grace");
    for (uint64_t i = 1; i <= 3; i++)
        put_step(s, "grace", i, 100 + (unsigned)i, NULL);
    st_gc_report r;
    st_gc_policy pol = {.keep_last = 1, .grace_ns = 3600 * SEC};
    int64_t before = st_now_ns();
    int64_t slowest = timed_gc(s, "grace", &pol, &r);
    /* A run reads the store's clock once, by a probe, and carries marker
     * ages onto this clock with it: a carried time is off by at most that
     * probe's latency, which a loaded machine stretches. Bound it by the
     * runs' own durations, not by a fixed figure. */
    CHECK(r.steps_deleted == 2 && r.packs_marked == 1); /* step 2's pack; step 1's is shared */
    /* Nothing freed yet, but the report says what comes back, and when. */
    CHECK(r.bytes_freed < r.pending_bytes && r.pending_bytes > 200 * KIB);
    CHECK(r.pending_free_first_ns >= before + 3600 * SEC);
    CHECK(r.pending_free_first_ns <= st_now_ns() + 3600 * SEC);
    CHECK(r.pending_free_last_ns == r.pending_free_first_ns);
    uint64_t pending_bytes = r.pending_bytes;
    int64_t free_ns = r.pending_free_first_ns;
    st_gc_report_free(&r);
    slowest = max_ns(slowest, timed_gc(s, "grace", &pol, &r));
    CHECK(r.packs_pending == 1 && r.packs_deleted == 0 && r.ndeleted == 0);
    /* Still pending: the same bytes, from the marker's own time (its age by
     * the store's clock, carried onto this clock: within the probes'
     * latency). */
    CHECK(r.pending_bytes == pending_bytes &&
          llabs(r.pending_free_first_ns - free_ns) < slowest + 10 * MS);
    st_gc_report_free(&r);
    /* A shorter grace now does not shorten the marker's own. */
    st_gc_policy shorter = {.grace_ns = 1};
    slowest = max_ns(slowest, timed_gc(s, "grace", &shorter, &r));
    CHECK(r.packs_pending == 1 && r.packs_deleted == 0);
    /* gc_checked made the marker a second older first (grace 1 ns). */
    CHECK(llabs(r.pending_free_first_ns - (free_ns - SEC)) < slowest + 10 * MS);
    st_gc_report_free(&r);
    st_store_close(s);
}

static void test_writer_restores_pending_pack(void)
{
    st_store *s = open_store("state-w");
    st_put_result pr;
    put_step(s, "w", 1, 200, &pr);
    put_step(s, "w", 2, 201, &pr);
    put_step(s, "w", 3, 202, &pr);
    st_gc_report r;
    const int64_t grace = SEC / 2;
    st_gc_policy pol = {.keep_last = 1, .grace_ns = grace};
    gc_checked(s, "w", &pol, &r);                       /* steps 1, 2 go; step 2's pack is marked */
    CHECK(r.steps_deleted == 2 && r.packs_marked == 1); /* step 1's pack: shared file */
    st_gc_report_free(&r);
    /* Step 4 = step 2's data again: the index points into the pending pack,
     * so the writer stores those chunks again instead of referencing it. */
    put_step(s, "w", 4, 201, &pr);
    CHECK(pr.new_chunks > 0 && pr.new_raw_bytes >= 256 * KIB);
    /* Stored again in the same order, the chunks make the same pack bytes,
     * hence the same pack id: the pack is referenced again, and the next
     * run (past the grace period) drops its marker instead of deleting it. */
    struct timespec ts = {0, 600000000};
    nanosleep(&ts, NULL);
    st_gc_policy sweep_only = {.grace_ns = grace};
    gc_checked(s, "w", &sweep_only, &r);
    CHECK(r.packs_deleted == 0 && r.packs_unmarked == 1 && r.markers_deleted == 1);
    st_gc_report_free(&r);
    /* Unmarked, the pack dedups again. */
    put_step(s, "w", 5, 201, &pr);
    CHECK(pr.new_chunks == 0);
    gc_checked(s, "w", &sweep_only, &r);
    CHECK(r.ndeleted == 0 && r.packs_marked == 0);
    st_gc_report_free(&r);
    CHECK(steps_of(s, "w") == ((1u << 3) | (1u << 4) | (1u << 5)));
    st_store_close(s);
}

/* ---- the store seen directly ---- */

static st_backend *open_backend(void)
{
    return ut_open_store_backend(root);
}

/* ---- the sweep deletes in batches ---- */

/* The file backend (which has no del_many) with a del_many that records
 * its calls: what an S3 store with DeleteObjects would see. Its ops table
 * is the file backend's with del and del_many replaced. */
static struct {
    st_backend_ops ops;
    st_err (*file_del)(void *ctx, const char *key);
    size_t del_calls, batch_calls, batch_keys, largest;
} rec;

static st_err rec_del(void *ctx, const char *key)
{
    rec.del_calls++;
    return rec.file_del(ctx, key);
}

static st_err rec_del_many(void *ctx, st_del_item *items, size_t n)
{
    rec.batch_calls++;
    rec.batch_keys += n;
    rec.largest = n > rec.largest ? n : rec.largest;
    return st_del_many_each(rec.file_del, ctx, items, n);
}

/* Retention and the sweep delete through del_many, many keys a call; the
 * only single DELETE is the run's own intent. */
static void test_batched_deletes(void)
{
    st_store *s = open_store("state-batch");
    for (uint64_t i = 1; i <= 8; i++)
        put_step(s, "batch", i, 300 + (unsigned)i, NULL);
    st_store_close(s);
    st_backend *b = open_backend();
    rec.ops = *b->ops;
    rec.file_del = b->ops->del;
    rec.ops.del = rec_del;
    rec.ops.del_many = rec_del_many;
    b->ops = &rec.ops;
    st_gc_report r;
    st_gc_policy pol = {.keep_last = 1, .grace_ns = 1};
    CHECK_OK(st_gc_run(b, "batch", &pol, 0, &r, NULL, NULL));
    fprintf(stderr, "  retention: %zu keys deleted in %zu batches (largest %zu), %zu single\n",
            r.ndeleted, rec.batch_calls, rec.largest, rec.del_calls);
    CHECK(r.steps_deleted == 7 && r.packs_marked == 6);
    CHECK(rec.batch_keys == r.ndeleted && rec.del_calls == 1); /* the intent */
    /* All 7 steps in one unit: their part records, then their manifests. */
    CHECK(rec.batch_calls == 2 && rec.largest == 7);
    st_gc_report_free(&r);

    rec.batch_calls = rec.batch_keys = rec.del_calls = rec.largest = 0;
    ut_backdate_all(b, root, "jobs/batch/gc/pending/", 1); /* past 1 ns on any clock tick */
    st_gc_policy none = {.grace_ns = 1};
    CHECK_OK(st_gc_run(b, "batch", &none, 0, &r, NULL, NULL));
    fprintf(stderr, "  sweep: %zu keys deleted in %zu batches (largest %zu), %zu single\n",
            r.ndeleted, rec.batch_calls, rec.largest, rec.del_calls);
    /* 6 packs in one batch, then their 6 markers in a second. */
    CHECK(r.packs_deleted == 6 && r.markers_deleted == 6);
    CHECK(rec.batch_calls == 2 && rec.largest == 6 && rec.del_calls == 0);
    CHECK(rec.batch_keys == r.ndeleted);
    st_gc_report_free(&r);
    st_backend_close(b);
    s = open_store("state-batch");
    verify_all(s, "batch");
    st_store_close(s);
}

typedef struct key_set {
    char keys[64][ST_KEY_MAX];
    size_t n;
} key_set;

static int collect(void *arg, const char *key, uint64_t size)
{
    (void)size;
    key_set *k = arg;
    if (k->n < 64)
        snprintf(k->keys[k->n++], ST_KEY_MAX, "%s", key);
    return 0;
}

/* The keys under jobs/<job>/<what>. */
static void list_under(st_backend *b, const char *job, const char *what, key_set *k)
{
    char prefix[ST_KEY_MAX];
    snprintf(prefix, sizeof prefix, "jobs/%s/%s", job, what);
    k->n = 0;
    CHECK_OK(st_list(b, prefix, collect, k));
}

/* The id of the only pack of job (the test's first step). */
static st_id only_pack(st_backend *b, const char *job)
{
    key_set k;
    st_id id = {{0}};
    list_under(b, job, "packs/", &k);
    CHECK(k.n == 1);
    const char *name = strrchr(k.keys[0], '/') + 1;
    char hex[ST_ID_HEX_LEN + 1];
    memcpy(hex, name, ST_ID_HEX_LEN);
    hex[ST_ID_HEX_LEN] = '\0';
    CHECK(st_id_parse(hex, &id) == 0);
    return id;
}

static int exists(st_backend *b, const char *key)
{
    uint64_t size;
    return st_stat(b, key, &size) == ST_OK;
}

/* Loads the manifest of step of job (node test-node). */
static void load_manifest(st_backend *b, const char *job, uint64_t step, st_manifest *m)
{
    st_bytes buf = {0};
    st_part part;
    CHECK_OK(st_catalog_load_part(b, job, step, "test-node", &buf, &part));
    CHECK_OK(st_catalog_load_manifest(b, &part, &buf, m));
    st_part_free(&part);
    st_bytes_free(&buf);
}

/* The pack (by id) every chunk of file `path` of m lives in; zero id if
 * its chunks are in more than one pack. */
static st_id pack_of_file(const st_manifest *m, const char *path)
{
    st_id none = {{0}};
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        if (strcmp(f->path, path) || !f->nchunks)
            continue;
        for (size_t k = 1; k < f->nchunks; k++)
            if (f->chunks[k].pack != f->chunks[0].pack)
                return none;
        return m->packs[f->chunks[0].pack];
    }
    return none;
}

static int manifest_names_pack(const st_manifest *m, const st_id *pack)
{
    for (size_t i = 0; i < m->npacks; i++)
        if (!memcmp(&m->packs[i], pack, sizeof *pack))
            return 1;
    return 0;
}

/* ---- repack by retirement ---- */

/* GC side: a pack that is mostly dead once its step is gone gets a retire
 * marker, once; repack_dead >= 1 disables that; a mostly-live one gets none. */
static void test_retire_marker(void)
{
    st_store *s = open_store("state-rt");
    st_backend *b = open_backend();
    char key[ST_KEY_MAX];
    st_gc_report r;
    /* Step 1's pack: 128 KiB shared (live while any step lives) and 384 KiB
     * of its own (dead once step 1 is deleted): 75% dead. */
    put_sized(s, "rt", 1, 128 * KIB, 384 * KIB, 1, NULL);
    const st_id p1 = only_pack(b, "rt");
    for (uint64_t i = 2; i <= 3; i++)
        put_sized(s, "rt", i, 128 * KIB, 384 * KIB, (unsigned)i, NULL);

    st_gc_policy off = {.keep_last = 2, .grace_ns = 1, .repack_dead = 1.0};
    gc_checked(s, "rt", &off, &r);
    CHECK(r.steps_deleted == 1 && r.packs_referenced == 3 && r.packs_retired == 0);
    st_gc_report_free(&r);
    CHECK_OK(st_key_gc_retired(key, sizeof key, "rt", &p1));
    CHECK(!exists(b, key));

    /* A threshold above 75% does not retire it either; the default does. */
    st_gc_policy high = {.grace_ns = 1, .repack_dead = 0.8};
    gc_checked(s, "rt", &high, &r);
    CHECK(r.packs_retired == 0);
    st_gc_report_free(&r);
    st_gc_policy dflt = {.grace_ns = 1};
    gc_checked(s, "rt", &dflt, &r);
    CHECK(r.packs_retired == 1 && r.ndeleted == 0);
    CHECK(r.retired_live_bytes > 128 * KIB && r.retired_live_bytes < 140 * KIB);
    st_gc_report_free(&r);
    CHECK(exists(b, key));
    gc_checked(s, "rt", &dflt, &r); /* once */
    CHECK(r.packs_retired == 0 && r.ndeleted == 0);
    st_gc_report_free(&r);

    /* Mostly live: 384 KiB shared, 128 KiB own, 25% dead. */
    put_sized(s, "rl", 1, 384 * KIB, 128 * KIB, 1, NULL);
    for (uint64_t i = 2; i <= 3; i++)
        put_sized(s, "rl", i, 384 * KIB, 128 * KIB, (unsigned)i, NULL);
    st_gc_policy last2 = {.keep_last = 2, .grace_ns = 1};
    gc_checked(s, "rl", &last2, &r);
    CHECK(r.steps_deleted == 1 && r.packs_retired == 0);
    st_gc_report_free(&r);

    /* A pack a pinned step references is not retired: the pin holds it. */
    put_sized(s, "rp", 1, 128 * KIB, 384 * KIB, 1, NULL);
    for (uint64_t i = 2; i <= 3; i++)
        put_sized(s, "rp", i, 128 * KIB, 384 * KIB, (unsigned)i, NULL);
    CHECK_OK(st_store_pin(s, "rp", 2, 1));
    gc_checked(s, "rp", &last2, &r);
    CHECK(r.steps_deleted == 1 && r.packs_retired == 0);
    st_gc_report_free(&r);
    st_backend_close(b);
    st_store_close(s);
}

/* Writer side: after retirement, a writer stores the retired pack's live
 * chunks again, in a pack of their own (not with the step's new chunks);
 * no new manifest references the retired pack; the next writer dedups
 * against the new copy; and once the older steps go, the retired pack is
 * swept with its markers. */
static void test_rehome_after_retire(void)
{
    st_store *s = open_store("state-rh");
    st_backend *b = open_backend();
    char key[ST_KEY_MAX];
    st_put_result pr;
    st_gc_report r;
    put_sized(s, "rh", 1, 128 * KIB, 384 * KIB, 1, NULL);
    const st_id p1 = only_pack(b, "rh");
    for (uint64_t i = 2; i <= 3; i++)
        put_sized(s, "rh", i, 128 * KIB, 384 * KIB, (unsigned)i, NULL);
    st_gc_policy pol = {.keep_last = 2, .grace_ns = 1};
    gc_checked(s, "rh", &pol, &r);
    CHECK(r.steps_deleted == 1 && r.packs_retired == 1);
    st_gc_report_free(&r);

    /* Step 4: shared.bin is re-homed, own.bin is new; two packs. */
    put_sized(s, "rh", 4, 128 * KIB, 384 * KIB, 4, &pr);
    CHECK(pr.packs == 2 && pr.new_raw_bytes == 512 * KIB);
    st_manifest m;
    load_manifest(b, "rh", 4, &m);
    st_id shared = pack_of_file(&m, "shared.bin"), own = pack_of_file(&m, "own.bin");
    st_id zero = {{0}};
    CHECK(memcmp(&shared, &zero, sizeof zero) && memcmp(&own, &zero, sizeof zero));
    CHECK(memcmp(&shared, &own, sizeof own)); /* separate packs */
    CHECK(!manifest_names_pack(&m, &p1) && m.npacks == 2);
    st_manifest_free(&m);

    /* Step 5 dedups shared.bin against the re-homed copy. */
    put_sized(s, "rh", 5, 128 * KIB, 384 * KIB, 5, &pr);
    CHECK(pr.new_raw_bytes == 384 * KIB && pr.packs == 1);
    load_manifest(b, "rh", 5, &m);
    st_id shared5 = pack_of_file(&m, "shared.bin");
    CHECK(!memcmp(&shared5, &shared, sizeof shared) && !manifest_names_pack(&m, &p1));
    st_manifest_free(&m);

    /* Steps 2 and 3 go: P1 is unreferenced, marked, then swept together
     * with its pending and retire markers. */
    gc_checked(s, "rh", &pol, &r);
    CHECK(r.steps_deleted == 2 && r.packs_marked == 3 && r.packs_retired == 0);
    st_gc_report_free(&r);
    st_gc_policy sweep_only = {.grace_ns = 1};
    gc_checked(s, "rh", &sweep_only, &r);
    CHECK(r.packs_deleted == 3 && r.markers_deleted == 4);
    CHECK_OK(st_key_gc_retired(key, sizeof key, "rh", &p1));
    int retire_marker_deleted = 0;
    for (size_t i = 0; i < r.ndeleted; i++)
        retire_marker_deleted |= !strcmp(r.deleted[i], key);
    CHECK(retire_marker_deleted && !exists(b, key));
    st_gc_report_free(&r);

    /* What is left: the re-homed shared pack and the two steps' own packs. */
    key_set k;
    list_under(b, "rh", "packs/", &k);
    CHECK(k.n == 3);
    list_under(b, "rh", "gc/", &k);
    CHECK(k.n == 0);
    st_backend_close(b);
    st_store_close(s);
}

/* ---- batches, progress, stop ---- */

typedef struct progress_log {
    int calls;
    uint64_t objects[16];
    volatile int stop;
    int stop_after; /* set stop at this call (0: never) */
} progress_log;

static void on_progress(void *arg, const st_gc_report *r)
{
    progress_log *l = arg;
    if (l->calls < 16)
        l->objects[l->calls] = r->objects_deleted;
    l->calls++;
    if (l->stop_after && l->calls >= l->stop_after)
        l->stop = 1;
}

/* Every step prefix of job has a part record, and no intent is left. */
static void check_whole_steps(st_backend *b, const char *job)
{
    key_set k;
    list_under(b, job, "steps/", &k);
    for (size_t i = 0; i < k.n; i++) {
        char prefix[ST_KEY_MAX];
        snprintf(prefix, sizeof prefix, "%.*s", (int)(strstr(k.keys[i], "/nodes/") - k.keys[i]),
                 k.keys[i]);
        int has_part = 0;
        for (size_t j = 0; j < k.n; j++)
            has_part |=
                !strncmp(k.keys[j], prefix, strlen(prefix)) && strstr(k.keys[j], ".commit") != NULL;
        CHECK(has_part);
    }
    list_under(b, job, "gc/deleting/", &k);
    CHECK(k.n == 0);
}

static void test_batches_and_stop(void)
{
    st_store *s = open_store("state-b");
    st_backend *b = open_backend();
    for (uint64_t i = 1; i <= 6; i++)
        put_step(s, "b", i, 300 + (unsigned)i, NULL);

    /* Batches of 2 objects (a step is a part record and a manifest); stop
     * at the first report: one whole step goes, in dry run as in the real run. */
    progress_log dry_log = {.stop_after = 1}, real_log = {.stop_after = 1};
    st_gc_policy p = {.keep_last = 1, .grace_ns = 1, .batch = 2, .progress = on_progress};
    st_gc_report dry, real;
    p.progress_arg = &dry_log;
    p.stop = &dry_log.stop;
    CHECK_OK(st_store_gc(s, "b", &p, 1, &dry));
    p.progress_arg = &real_log;
    p.stop = &real_log.stop;
    CHECK_OK(st_store_gc(s, "b", &p, 0, &real));
    CHECK(real.stopped && dry.stopped);
    CHECK(real_log.calls == 1 && real_log.objects[0] == 2);
    CHECK(real.steps_deleted == 1 && real.deleted_steps[0] == 1 && real.objects_deleted == 2);
    CHECK(real.packs == 0 && real.packs_marked == 0); /* the sweep did not start */
    CHECK(dry.ndeleted == real.ndeleted);
    for (size_t i = 0; i < dry.ndeleted && i < real.ndeleted; i++)
        CHECK(!strcmp(dry.deleted[i], real.deleted[i]));
    st_gc_report_free(&dry);
    st_gc_report_free(&real);
    CHECK(steps_of(s, "b") == 0x7c); /* 2..6 */
    check_whole_steps(b, "b");
    verify_all(s, "b");

    /* A batch of 3 ends after the second step (4 objects): progress hears
     * 4, then 8; no stop: the run goes to its end. */
    progress_log log = {0};
    st_gc_policy p3 = {.keep_last = 1,
                       .grace_ns = 1,
                       .batch = 3,
                       .progress = on_progress,
                       .progress_arg = &log,
                       .stop = &log.stop};
    CHECK_OK(st_store_gc(s, "b", &p3, 0, &real));
    CHECK(!real.stopped && real.steps_deleted == 4 && real.packs_marked == 4);
    CHECK(log.calls == 2 && log.objects[0] == 4 && log.objects[1] == 8);
    st_gc_report_free(&real);
    CHECK(steps_of(s, "b") == 1u << 6);
    check_whole_steps(b, "b");

    /* The sweep stops between packs: a pack and its marker go together.
     * The markers are made a second old, past the grace of 1 ns on any
     * file system's clock tick. */
    ut_backdate_all(b, root, "jobs/b/gc/pending/", 1); /* st_store_gc, not gc_checked */
    progress_log sweep_log = {.stop_after = 1};
    st_gc_policy ps = {.grace_ns = 1,
                       .batch = 1,
                       .progress = on_progress,
                       .progress_arg = &sweep_log,
                       .stop = &sweep_log.stop};
    CHECK_OK(st_store_gc(s, "b", &ps, 0, &real));
    CHECK(real.stopped && real.packs_deleted == 1 && real.markers_deleted == 1);
    CHECK(real.objects_deleted == 2 && sweep_log.calls == 1);
    st_gc_report_free(&real);
    st_gc_policy sweep_only = {.grace_ns = 1};
    gc_checked(s, "b", &sweep_only, &real);
    CHECK(!real.stopped && real.packs_deleted == 3 && real.markers_deleted == 3);
    st_gc_report_free(&real);
    st_backend_close(b);
    st_store_close(s);
}

/* A run that died between a step's part records and its manifests leaves
 * its intent: a later run (once the intent is older than grace) deletes
 * the rest. A manifest without part record and without intent (a writer's
 * orphan) is left alone. */
static void test_interrupted_deletion(void)
{
    st_store *s = open_store("state-i");
    st_backend *b = open_backend();
    char key[ST_KEY_MAX], text[128];
    for (uint64_t i = 1; i <= 3; i++)
        put_step(s, "i", i, 400 + (unsigned)i, NULL);
    /* "Crash" in the middle of deleting steps 1 and 2: both part records gone. */
    for (uint64_t i = 1; i <= 2; i++) {
        CHECK_OK(st_key_part(key, sizeof key, "i", i, "test-node"));
        CHECK_OK(st_del(b, key));
    }
    snprintf(key, sizeof key, "jobs/i/gc/deleting/%020lld.1", (long long)st_now_ns());
    int n = snprintf(text, sizeof text, "ckptfs-gc-deleting v1 %lld\n1\n",
                     (long long)(st_now_ns() - 10 * SEC));
    CHECK_OK(st_put(b, key, text, (size_t)n));
    ut_backdate(root, key, 10);

    /* Grace 1 h: the intent may belong to a run at work; nothing happens. */
    st_gc_report r;
    st_gc_policy slow = {.grace_ns = 3600 * SEC};
    gc_checked(s, "i", &slow, &r);
    CHECK(r.ndeleted == 0);
    st_gc_report_free(&r);
    /* Grace 1 s: step 1's manifest goes, then the intent; step 2 (not in
     * the intent) stays. */
    st_gc_policy fast = {.grace_ns = SEC};
    gc_checked(s, "i", &fast, &r);
    CHECK(r.ndeleted == 2 && r.manifests_deleted == 1 && r.markers_deleted == 1);
    CHECK(strstr(r.deleted[0], "/steps/00000000000000000001/") != NULL);
    CHECK(!strcmp(r.deleted[1], key));
    st_gc_report_free(&r);
    key_set k;
    list_under(b, "i", "steps/00000000000000000002/", &k);
    CHECK(k.n == 1); /* the writer-like orphan manifest */
    list_under(b, "i", "gc/deleting/", &k);
    CHECK(k.n == 0);
    st_backend_close(b);
    st_store_close(s);
}

/* The key of the pack that appeared under job between listings a and b. */
static const char *new_key(const key_set *a, const key_set *b)
{
    for (size_t i = 0; i < b->n; i++) {
        int seen = 0;
        for (size_t j = 0; j < a->n; j++)
            seen |= !strcmp(a->keys[j], b->keys[i]);
        if (!seen)
            return b->keys[i];
    }
    return NULL;
}

/* The newest step is damaged (its own pack missing): keep-last 1 keeps the
 * newest restorable step too, and deletes only what is older. Truncating a
 * pack is damage as well. */
static void test_damaged_newest_step(void)
{
    st_store *s = open_store("state-d");
    st_backend *b = open_backend();
    key_set first, before, after;
    put_step(s, "d", 1, 501, NULL);
    list_under(b, "d", "packs/", &first);
    put_step(s, "d", 2, 502, NULL);
    list_under(b, "d", "packs/", &before);
    put_step(s, "d", 3, 503, NULL);
    list_under(b, "d", "packs/", &after);
    const char *pack3 = new_key(&before, &after);
    CHECK(pack3 != NULL);
    if (pack3)
        CHECK_OK(st_del(b, pack3));
    st_gc_report r;
    st_gc_policy keep1 = {.keep_last = 1};
    CHECK_OK(st_store_gc(s, "d", &keep1, 0, &r));
    CHECK(steps_of(s, "d") == ((1u << 2) | (1u << 3)));
    CHECK(r.steps_damaged == 1 && r.steps_deleted == 1 && r.deleted_steps[0] == 1);
    st_gc_report_free(&r);
    st_verify_result v;
    CHECK_OK(st_store_verify(s, "d", 2, &v));

    /* Step 2's own pack cut short: step 2 is damaged too; nothing is
     * restorable, so nothing is deleted. */
    const char *pack2 = new_key(&first, &before);
    CHECK(pack2 != NULL);
    if (pack2) {
        st_bytes data = {0};
        CHECK_OK(st_get(b, pack2, 0, ST_GET_TO_END, &data));
        CHECK_OK(st_put(b, pack2, data.data, data.len / 2));
        st_bytes_free(&data);
    }
    CHECK_OK(st_store_gc(s, "d", &keep1, 0, &r));
    CHECK(r.steps_damaged == 2 && r.steps_deleted == 0);
    CHECK(steps_of(s, "d") == ((1u << 2) | (1u << 3)));
    st_gc_report_free(&r);
    st_backend_close(b);
    st_store_close(s);
}

/* A garbage part record: the step is kept and the sweep skipped, and the
 * report says both (ckptctl gc then exits 7). */
static void test_garbage_part_record(void)
{
    st_store *s = open_store("state-g");
    st_backend *b = open_backend();
    char key[ST_KEY_MAX];
    put_step(s, "g", 1, 601, NULL);
    CHECK_OK(st_key_part(key, sizeof key, "g", 2, "junk"));
    CHECK_OK(st_put(b, key, "garbage", 7));
    st_gc_report r;
    CHECK_OK(st_store_gc(s, "g", NULL, 0, &r));
    CHECK(r.sweep_skipped && r.steps_unreadable == 1);
    CHECK(strstr(r.why, "step 2") != NULL);
    st_gc_report_free(&r);
    st_backend_close(b);
    st_store_close(s);
}

/* PUTs a pending marker's text under key. */
static void put_marker_text(st_backend *b, const char *key, int64_t marked_ns, int64_t grace_ns)
{
    char text[128];
    size_t n;
    CHECK_OK(st_gcmark_pending_encode(text, sizeof text, marked_ns, grace_ns, &n));
    CHECK_OK(st_put(b, key, text, n));
}

/* The writer's check itself: marker first, then the pack; young markers
 * are accepted only for the final look before publishing. Young or old is
 * the store's say (docs/GC.md, "Clocks"), never the stamp in the marker's
 * text, which is the marking host's clock. */
static void test_pack_usable(void)
{
    st_backend *b;
    char dir[400], key[ST_KEY_MAX];
    snprintf(dir, sizeof dir, "%s/store", root);
    CHECK_OK(st_backend_file_open(dir, &b));
    st_id id = {{1, 2, 3}};
    const int64_t hours3 = 3 * 3600 * SEC;
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, NULL), ST_ERR_BUSY); /* no pack */
    CHECK_OK(st_key_pack(key, sizeof key, "u", &id));
    CHECK_OK(st_put(b, key, "x", 1));
    CHECK_OK(st_gc_pack_usable(b, "u", &id, NULL));
    CHECK_OK(st_key_gc_pending(key, sizeof key, "u", &id));
    put_marker_text(b, key, st_now_ns(), 3600 * SEC);
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, NULL), ST_ERR_BUSY);
    int64_t deadline = INT64_MAX;
    CHECK_OK(st_gc_pack_usable(b, "u", &id, &deadline));
    CHECK(deadline < INT64_MAX && deadline > st_mono_ns() + 1700 * SEC);
    /* Written 2000 s ago by the store's clock: too old to reference. */
    ut_backdate(root, key, 2000);
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, &deadline), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "by the store's clock") != NULL);
    /* The same, stamped by a GC host whose clock runs 3 h ahead: its text
     * says "marked in the future", which once passed as young. */
    put_marker_text(b, key, st_now_ns() + hours3, 3600 * SEC);
    ut_backdate(root, key, 2000);
    deadline = INT64_MAX;
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, &deadline), ST_ERR_BUSY);
    /* Just written, stamped by a GC host 3 h behind: young all the same. */
    put_marker_text(b, key, st_now_ns() - hours3, 3600 * SEC);
    CHECK_OK(st_gc_pack_usable(b, "u", &id, &deadline));
    /* A write time the store puts in its own future is never young. */
    ut_backdate(root, key, -600);
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, &deadline), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "future") != NULL);
    int64_t m, g;
    CHECK_ERR(st_gcmark_pending_decode("garbage", 7, &m, &g), ST_ERR_CORRUPT);
    st_backend_close(b);
}

/* Writes a pending marker for pack, written age_s seconds ago by the
 * store's clock, grace 1 h. */
static void put_marker(st_backend *b, const char *job, const st_id *pack, int64_t age_s)
{
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_gc_pending(key, sizeof key, job, pack));
    put_marker_text(b, key, st_now_ns() - age_s * SEC, 3600 * SEC);
    ut_backdate(root, key, (double)age_s);
}

/* The last look by listing (docs/GC.md, "Writers"): two LISTs and no HEAD
 * for packs that are there without a marker; a marked pack or one missing
 * from the listing gets the per-pack look, with the same answers. */
static void test_packs_usable_by_listing(void)
{
    st_backend_counts c = {0};
    st_backend *b = open_backend();
    CHECK_OK(st_backend_count_wrap(&b, &c));
    char key[ST_KEY_MAX];
    st_id ids[3] = {{{9, 1}}, {{9, 2}}, {{9, 3}}};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(st_key_pack(key, sizeof key, "lk", &ids[i]));
        CHECK_OK(st_put(b, key, "x", 1));
    }
    memset(&c, 0, sizeof c);
    int64_t deadline = INT64_MAX;
    size_t bad = 99;
    CHECK_OK(st_gc_packs_usable(b, "lk", ids, 3, &deadline, &bad));
    CHECK(st_backend_counts_of(&c, ST_REQ_STAT) == 0);
    CHECK(st_backend_counts_of(&c, ST_REQ_LIST) == 2);
    CHECK(deadline == INT64_MAX);

    /* A young marker on pack 1: accepted, with its deadline, by its own look. */
    put_marker(b, "lk", &ids[1], 0);
    memset(&c, 0, sizeof c);
    CHECK_OK(st_gc_packs_usable(b, "lk", ids, 3, &deadline, &bad));
    CHECK(deadline < INT64_MAX && deadline > st_mono_ns());
    CHECK(st_backend_counts_of(&c, ST_REQ_STAT) == 2); /* pack 1's marker, then pack 1 */
    CHECK_ERR(st_gc_packs_usable(b, "lk", ids, 3, NULL, &bad), ST_ERR_BUSY);
    CHECK(bad == 1);

    /* An old marker on pack 2: refused, whatever the deadline. */
    CHECK_OK(st_key_gc_pending(key, sizeof key, "lk", &ids[1]));
    CHECK_OK(st_del(b, key));
    put_marker(b, "lk", &ids[2], 2000);
    deadline = INT64_MAX;
    CHECK_ERR(st_gc_packs_usable(b, "lk", ids, 3, &deadline, &bad), ST_ERR_BUSY);
    CHECK(bad == 2);
    CHECK_OK(st_key_gc_pending(key, sizeof key, "lk", &ids[2]));
    CHECK_OK(st_del(b, key));

    /* Pack 0 gone and its marker too (the GC deletes the pack, then the
     * marker): the listing misses it, its own look finds it gone. */
    CHECK_OK(st_key_pack(key, sizeof key, "lk", &ids[0]));
    CHECK_OK(st_del(b, key));
    CHECK_ERR(st_gc_packs_usable(b, "lk", ids, 3, &deadline, &bad), ST_ERR_BUSY);
    CHECK(bad == 0);
    CHECK_OK(st_gc_packs_usable(b, "lk", ids + 1, 2, &deadline, &bad));
    st_backend_close(b);
}

/* The HEADs of a put, as an asserted fact: only the part-record check (is
 * the step there already?) once a manifest names two packs or more; the
 * old packs met through the index and the last look are answered by
 * listings of the markers and the packs. */
static void test_put_heads(void)
{
    st_store *s = open_store("state-heads");
    st_put_result r;
    put_step(s, "heads", 1, 300, &r); /* one pack: its own last look (2 HEADs) */
    CHECK(r.packs == 1 && r.heads == 3);
    put_step(s, "heads", 2, 301, &r); /* step 1's pack (shared.bin) + a new one */
    CHECK(r.packs == 1 && r.new_chunks > 0 && r.new_chunks < r.chunks);
    CHECK(r.heads == 1);
    /* First use (2 LISTs), retire markers (1), last look (2); and the
     * index sync and publish's own. */
    CHECK(r.lists >= 5);
    verify_all(s, "heads");
    st_store_close(s);
}

static int collect_first_key(void *arg, const char *key, uint64_t size)
{
    (void)size;
    snprintf(arg, ST_KEY_MAX, "%s", key);
    return 1; /* the first is enough */
}

/* An old pack the index names but the store lost (deleted with its marker,
 * as the GC does): the first-use listing does not show it, its own look
 * finds it gone, and its chunks are stored again; the put succeeds. */
static void test_first_use_gone_pack(void)
{
    st_store *s = open_store("state-gone");
    st_put_result r;
    put_sized(s, "gone", 1, 256 * KIB, 0, 400, &r);
    st_backend *b = open_backend();
    char key[ST_KEY_MAX] = "", prefix[ST_KEY_MAX];
    CHECK_OK(st_key_job_dir(prefix, sizeof prefix, "gone", "packs"));
    CHECK_OK(st_list(b, prefix, collect_first_key, key));
    CHECK(key[0] != 0);
    CHECK_OK(st_del(b, key));
    st_backend_close(b);
    put_step(s, "gone", 2, 401, &r); /* shared.bin's chunks were in that pack */
    CHECK(r.new_chunks == r.chunks);
    st_verify_result v;
    CHECK_OK(st_store_verify(s, "gone", 2, &v));
    CHECK(v.bad_files == 0);
    st_store_close(s);
}

/* Publishes step of job as node `node`: no files, rank `rank` of `world`
 * committed. */
static void publish_rank(st_backend *b, const char *job, uint64_t step, const char *node,
                         uint32_t rank, uint32_t world)
{
    st_rank_commit commit = {rank, world};
    st_manifest m;
    memset(&m, 0, sizeof m);
    m.step = step;
    m.job = (char *)job;
    m.node = (char *)node;
    m.created_ns = st_now_ns();
    st_part part = {.revision = 1, .complete = 1, .ncommits = 1, .commits = &commit};
    uint64_t puts = 0;
    CHECK_OK(st_catalog_publish(b, &m, &part, NULL, 0, &puts));
}

/* 1 if node's part record of step of job is in the store. */
static int has_part(st_backend *b, const char *job, uint64_t step, const char *node)
{
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_part(key, sizeof key, job, step, node));
    return exists(b, key);
}

/* Makes node's part record of step of job `seconds` old by the store's clock. */
static void age_part(const char *job, uint64_t step, const char *node, double seconds)
{
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_part(key, sizeof key, job, step, node));
    ut_backdate(root, key, seconds);
}

/*
 * A partial step older than the newest consistent one, its own part past the
 * grace period, stays while that newer step is younger than grace: a node
 * drains newest first, and after a compaction's fence (up to 2 grace) its
 * part of the older step lands just after its part of the newer one. Found
 * by integration.gc_daemons: step 88's first part was 1 s old (grace 1 s)
 * when the other node's 89 made 89 consistent; GC deleted 88's part, the
 * other node then published its own, and 88 stayed partial for good with
 * both writers told it was durable.
 */
static void test_partial_step_behind_a_new_step(void)
{
    st_backend *b = open_backend();
    const char *job = "behind";
    publish_rank(b, job, 88, "a", 0, 2); /* a's part; b's is held back */
    publish_rank(b, job, 89, "a", 0, 2);
    publish_rank(b, job, 89, "b", 1, 2); /* 89 consistent, just now */
    age_part(job, 88, "a", 60);
    st_gc_policy keep1 = {.keep_last = 1, .grace_ns = 10 * SEC};
    st_gc_report r;
    CHECK_OK(st_gc_run(b, job, &keep1, 0, &r, NULL, NULL));
    CHECK(r.steps_deleted == 0);
    st_gc_report_free(&r);
    CHECK(has_part(b, job, 88, "a"));
    /* b's part lands: 88 is consistent, and the older of the two is kept by
     * nothing but keep-last... */
    publish_rank(b, job, 88, "b", 1, 2);
    CHECK_OK(st_gc_run(b, job, &keep1, 0, &r, NULL, NULL));
    CHECK(r.steps_deleted == 1 && r.deleted_steps[0] == 88);
    st_gc_report_free(&r);

    /* ... whereas a partial step that stays partial goes once a newer step
     * has been consistent for grace. */
    publish_rank(b, job, 90, "a", 0, 2);
    publish_rank(b, job, 91, "a", 0, 2);
    publish_rank(b, job, 91, "b", 1, 2);
    age_part(job, 90, "a", 60);
    CHECK_OK(st_gc_run(b, job, &keep1, 0, &r, NULL, NULL));
    CHECK(r.steps_deleted == 1 && r.deleted_steps[0] == 89); /* keep-last 1: 91 */
    st_gc_report_free(&r);
    CHECK(has_part(b, job, 90, "a"));
    age_part(job, 91, "a", 60);
    age_part(job, 91, "b", 60);
    CHECK_OK(st_gc_run(b, job, &keep1, 0, &r, NULL, NULL));
    CHECK(r.steps_deleted == 1 && r.deleted_steps[0] == 90);
    st_gc_report_free(&r);
    CHECK(!has_part(b, job, 90, "a") && has_part(b, job, 91, "a"));
    st_backend_close(b);
}

static void run_cases(void)
{
    RUN(test_retention_and_sweep);
    RUN(test_grace_period);
    RUN(test_writer_restores_pending_pack);
    RUN(test_pack_usable);
    RUN(test_packs_usable_by_listing);
    RUN(test_put_heads);
    RUN(test_first_use_gone_pack);
    RUN(test_retire_marker);
    RUN(test_rehome_after_retire);
    RUN(test_batches_and_stop);
    RUN(test_batched_deletes);
    RUN(test_interrupted_deletion);
    RUN(test_damaged_newest_step);
    RUN(test_garbage_part_record);
    RUN(test_partial_step_behind_a_new_step);
}

int main(void)
{
    return ut_main_tmp_store(root, url, sizeof url, run_cases);
}
