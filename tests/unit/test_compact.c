/*
 * Compaction tests (engine/st_compact.c; docs/GC.md, "Compaction") on a
 * file:// store in a temp dir, steps made with st_store_put_dir: a finished
 * job's mostly-dead pack is copied and its steps rewritten, so that the
 * store ends at the size of the kept steps; a crash at every point of the
 * run (a backend cut off from the N-th PUT on: nothing after it lands)
 * leaves every step restorable and a later run finishes the work; the
 * fence keeps writers from publishing while it stands and not after it
 * goes stale; a dry run writes nothing; parts that share a path are left
 * alone; a corrupt chunk is never copied; duplicate copies of the same
 * chunks count once, and a crash at every point of that run leaves the
 * same guarantees.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptstore.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "util/st_fsutil.h"
#include "engine/st_catalog.h"
#include "engine/st_gc.h"
#include "format/st_gcmark.h"
#include "format/st_part.h"
#include "ut.h"
#include "ut_store.h"

#define KIB 1024
#define MS  1000000LL
/* The fence leaves a compaction 1.5 grace from its PUT for its rewrites:
 * long enough for this test's few MiB on a busy machine under ASan. */
#define GRACE (500 * MS)

static char root[] = "/tmp/ckpt-test-compact-XXXXXX";
static char url[300];
static int store_no; /* each case gets a store of its own */
static char case_url[600], case_dir[400];

static void sleep_ns(int64_t ns)
{
    struct timespec ts = {ns / 1000000000, ns % 1000000000};
    nanosleep(&ts, NULL);
}

/* A fresh store for one case: case_url, case_dir. */
static void new_case(void)
{
    snprintf(case_dir, sizeof case_dir, "%s/case%d", root, ++store_no);
    mkdir(case_dir, 0755);
    snprintf(case_url, sizeof case_url, "file://%s/store", case_dir);
}

static st_store *open_store(const char *node)
{
    char state_name[100];
    snprintf(state_name, sizeof state_name, "state-%s", node);
    return ut_open_store(case_url, case_dir, state_name, node);
}

/* Step `step` of job j: shared.bin (the same in every step) and own.bin
 * (seeded by step), each `size` bytes of random data. */
static st_err put_step_as(st_store *s, uint64_t step, const char *own_name, size_t size)
{
    static uint8_t buf[512 * KIB];
    char dir[600], p[700];
    snprintf(dir, sizeof dir, "%s/src-%llu-%s", case_dir, (unsigned long long)step, own_name);
    mkdir(dir, 0755);
    ut_rand_fill(buf, size, 7);
    snprintf(p, sizeof p, "%s/shared.bin", dir);
    ut_write_file(p, buf, size);
    ut_rand_fill(buf, size, 1000 + step);
    snprintf(p, sizeof p, "%s/%s", dir, own_name);
    ut_write_file(p, buf, size);
    st_put_result r;
    return st_store_put_dir(s, "j", step, dir, &r);
}

/* Bytes of every pack of job j. */
typedef struct sum {
    uint64_t bytes, n;
} sum;

static int add_size(void *arg, const char *key, uint64_t size)
{
    (void)key;
    sum *s = arg;
    s->bytes += size;
    s->n++;
    return 0;
}

static uint64_t pack_bytes(st_backend *b)
{
    sum s = {0};
    CHECK_OK(st_list(b, "jobs/j/packs/", add_size, &s));
    return s.bytes;
}

static uint64_t count_keys(st_backend *b, const char *prefix)
{
    sum s = {0};
    CHECK_OK(st_list(b, prefix, add_size, &s));
    return s.n;
}

static void verify_all(st_store *s)
{
    st_step_info *v;
    size_t n;
    CHECK_OK(st_store_list_steps(s, "j", &v, &n));
    for (size_t i = 0; i < n; i++) {
        st_verify_result r;
        CHECK_OK(st_store_verify(s, "j", v[i].step, &r));
        CHECK(r.bad_files == 0);
    }
    free(v);
}

static st_backend *open_backend(void)
{
    return ut_open_store_backend(case_dir);
}

static st_err gc(st_backend *b, int compact, st_gc_report *r)
{
    st_gc_policy p = {.keep_last = 2, .grace_ns = GRACE, .compact = compact};
    return st_gc_run(b, "j", &p, 0, r, NULL, NULL);
}

/*
 * The finished job: steps 1..4, each 256 KiB shared + 256 KiB own, then
 * retention keeps 3 and 4 and the packs of 2 are swept; step 1's pack (the
 * shared chunks and its own) is left half dead. Returns the kept bytes.
 */
static uint64_t finished_job(st_store *s, st_backend *b)
{
    st_gc_report r;
    for (uint64_t step = 1; step <= 4; step++)
        CHECK_OK(put_step_as(s, step, "own.bin", 256 * KIB));
    CHECK_OK(gc(b, 0, &r));
    st_gc_report_free(&r);
    sleep_ns(GRACE + 10 * MS);
    CHECK_OK(gc(b, 0, &r));
    st_gc_report_free(&r);
    return 3 * 256 * KIB; /* shared + own 3 + own 4 */
}

/* Compacts, waits out the grace, sweeps: the whole cycle. */
static void compact_cycle(st_backend *b, st_gc_report *r)
{
    st_gc_report again;
    CHECK_OK(gc(b, 1, r));
    /* A new pack that a crashed run left and a sweep marked long ago: this
     * run may not reference it (the writer's rule); the sweep deletes it
     * one grace later, and the run after that compacts. */
    /* And a run that a busy machine kept past its fence's life stops
     * (r->stopped): the next one goes on. */
    for (int i = 0;
         i < 5 && (r->stopped || (r->compact_skipped && strstr(r->compact_why, "not usable")));
         i++) {
        st_gc_report_free(r);
        sleep_ns(GRACE + 10 * MS);
        CHECK_OK(gc(b, 1, r));
    }
    sleep_ns(GRACE + 10 * MS);
    CHECK_OK(gc(b, 0, &again));
    st_gc_report_free(&again);
}

static void test_compacts_finished_job(void)
{
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    uint64_t kept = finished_job(s, b);
    uint64_t before = pack_bytes(b);
    CHECK(before > kept * 13 / 10); /* the problem: ~1.33x */
    st_gc_report r;
    compact_cycle(b, &r);
    CHECK(r.compact_candidates == 1);
    CHECK(r.compact_packs_written == 1);
    CHECK(r.compact_parts_rewritten == 2);
    CHECK(r.compact_live_bytes > 0 && r.compact_live_bytes < before);
    CHECK(r.compact_wait_ns >= GRACE / 2);
    CHECK(!r.compact_skipped);
    CHECK(r.compact_duplicate_bytes == 0);
    uint64_t after = pack_bytes(b);
    fprintf(stderr, "compact: packs %llu -> %llu bytes, kept %llu (%.3fx -> %.3fx)\n",
            (unsigned long long)before, (unsigned long long)after, (unsigned long long)kept,
            (double)before / kept, (double)after / kept);
    CHECK(after * 100 <= kept * 110);
    CHECK(count_keys(b, "jobs/j/gc/compacting/") == 0); /* the fence went */
    verify_all(s);
    /* Nothing left to do: a second compaction finds no candidate. */
    st_gc_report_free(&r);
    CHECK_OK(gc(b, 1, &r));
    CHECK(r.compact_candidates == 0 && r.compact_parts_rewritten == 0);
    st_gc_report_free(&r);
    /* A writer coming back afterwards dedups against the new pack: its
     * index learned the rewritten part records (docs/PROTOCOL.md, "The
     * local dedup index"), so it adds only its own.bin, even once the old
     * pack is gone. */
    sleep_ns(GRACE + 10 * MS);
    CHECK_OK(gc(b, 0, &r));
    st_gc_report_free(&r);
    after = pack_bytes(b);
    CHECK_OK(put_step_as(s, 5, "own.bin", 256 * KIB));
    CHECK(pack_bytes(b) - after < 300 * KIB);
    verify_all(s);
    st_backend_close(b);
    st_store_close(s);
}

static void test_dry_run_writes_nothing(void)
{
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    finished_job(s, b);
    uint64_t before = pack_bytes(b), keys = count_keys(b, "");
    st_gc_policy p = {.keep_last = 2, .grace_ns = GRACE, .compact = 1};
    st_gc_report r;
    CHECK_OK(st_gc_run(b, "j", &p, 1, &r, NULL, NULL));
    CHECK(r.compact_candidates == 1);
    CHECK(r.compact_packs_written == 0 && r.compact_parts_rewritten == 0);
    CHECK(pack_bytes(b) == before && count_keys(b, "") == keys);
    st_gc_report_free(&r);
    st_backend_close(b);
    st_store_close(s);
}

/* Copies each object listed into another store. */
static int copy_object(void *arg, const char *key, uint64_t size)
{
    st_backend **from_to = arg;
    st_bytes data = {0};
    (void)size;
    CHECK_OK(st_get(from_to[0], key, 0, ST_GET_TO_END, &data));
    CHECK_OK(st_put(from_to[1], key, data.data, data.len));
    st_bytes_free(&data);
    return 0;
}

/*
 * The same bytes stored twice, each copy referenced by a kept step
 * (docs/GC.md, "Duplicate copies"): node n1 (store s) saved step 1 and node
 * n2 step 2 without seeing each other's (n2's step is saved into a store of
 * its own, then its objects copied in: two first saves racing, as a dedup
 * index learns only what was published before its save began). Returns
 * what the two steps alone need.
 */
static uint64_t duplicate_job(st_store *s, st_backend *b)
{
    char url2[700];
    snprintf(url2, sizeof url2, "file://%s/store2", case_dir);
    st_store *s2 = ut_open_store(url2, case_dir, "state-n2", "n2");
    st_backend *b2 = NULL;
    CHECK_OK(st_backend_open(url2, &b2));
    CHECK_OK(put_step_as(s, 1, "own.bin", 256 * KIB));
    CHECK_OK(put_step_as(s2, 2, "own.bin", 256 * KIB));
    st_backend *from_to[2] = {b2, b};
    CHECK_OK(st_list(b2, "jobs/j/", copy_object, from_to));
    st_backend_close(b2);
    st_store_close(s2);
    return 3 * 256 * KIB; /* shared + own 1 + own 2 */
}

/*
 * Counted by place both packs of duplicate_job are fully live and nothing
 * was compacted (1.33x for good); counted once per chunk, one pack keeps
 * only its own.bin, which is copied, and its step points at the other's
 * copy of shared.bin.
 */
static void test_duplicate_copies_counted_once(void)
{
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    const uint64_t kept = duplicate_job(s, b);
    uint64_t before = pack_bytes(b);
    CHECK(before > kept * 13 / 10); /* shared.bin twice */
    st_gc_report r;
    compact_cycle(b, &r);
    CHECK(r.compact_candidates == 1);
    CHECK(r.compact_parts_rewritten == 1);
    /* Only the candidate's own.bin was copied, not shared.bin a third time. */
    CHECK(r.compact_live_bytes > 200 * KIB && r.compact_live_bytes < 300 * KIB);
    CHECK(r.compact_duplicate_bytes > 200 * KIB && r.compact_duplicate_bytes < 300 * KIB);
    uint64_t after = pack_bytes(b);
    fprintf(stderr, "duplicates: packs %llu -> %llu bytes, kept %llu (%.3fx -> %.3fx)\n",
            (unsigned long long)before, (unsigned long long)after, (unsigned long long)kept,
            (double)before / kept, (double)after / kept);
    CHECK(after * 100 <= kept * 110);
    verify_all(s);
    st_gc_report_free(&r);
    CHECK_OK(gc(b, 1, &r));
    CHECK(r.compact_candidates == 0);
    st_gc_report_free(&r);
    st_backend_close(b);
    st_store_close(s);
}

/* ---- a backend cut off from the N-th PUT on: a crash at that point ---- */

/* Requests come from several threads (upload workers, the publish's first
 * round): lock guards the counters, and is held across a whole PUT so that
 * "the N-th PUT" is one well-defined request. */
typedef struct cutoff {
    pthread_mutex_t lock;
    st_backend *inner;
    int puts, limit;         /* PUTs let through so far; the one numbered limit fails */
    const char *del_on_pack; /* deleted once, right after the first pack PUT */
} cutoff;

static st_err cut_check_locked(const cutoff *c)
{
    return c->puts >= c->limit ? st_seterr(ST_ERR_PERMANENT, "cut off (test crash)") : ST_OK;
}

static st_err cut_check(cutoff *c)
{
    pthread_mutex_lock(&c->lock);
    st_err e = cut_check_locked(c);
    pthread_mutex_unlock(&c->lock);
    return e;
}

static st_err cut_put(void *ctx, const char *key, const void *data, size_t len)
{
    cutoff *c = ctx;
    pthread_mutex_lock(&c->lock);
    st_err e = cut_check_locked(c);
    if (!e && !(e = st_put(c->inner, key, data, len)))
        c->puts++;
    if (!e && c->del_on_pack && strstr(key, ".pack")) {
        e = st_del(c->inner, c->del_on_pack);
        c->del_on_pack = NULL;
    }
    if (getenv("TEST_COMPACT_TRACE"))
        fprintf(stderr, "PUT %d %s: %d\n", c->puts, key, e);
    if (!e && c->puts >= c->limit)
        c->limit = c->puts; /* from here on, everything fails */
    pthread_mutex_unlock(&c->lock);
    return e;
}

static st_err cut_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    cutoff *c = ctx;
    st_err e = cut_check(c);
    return e ? e : st_get(c->inner, key, off, len, out);
}

static st_err cut_stat(void *ctx, const char *key, uint64_t *size)
{
    cutoff *c = ctx;
    st_err e = cut_check(c);
    return e ? e : st_stat(c->inner, key, size);
}

static st_err cut_stat_time(void *ctx, const char *key, st_store_time *t)
{
    cutoff *c = ctx;
    st_err e = cut_check(c);
    return e ? e : st_stat_time(c->inner, key, t);
}

static st_err cut_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    cutoff *c = ctx;
    st_err e = cut_check(c);
    return e ? e : st_list(c->inner, prefix, cb, arg);
}

static st_err cut_del(void *ctx, const char *key)
{
    cutoff *c = ctx;
    st_err e = cut_check(c);
    return e ? e : st_del(c->inner, key);
}

static void cut_close(void *ctx)
{
    (void)ctx;
}

static const st_backend_ops cut_ops = {
    .scheme = "file",
    .put = cut_put,
    .get = cut_get,
    .stat = cut_stat,
    .stat_time = cut_stat_time,
    .list = cut_list,
    .del = cut_del,
    .close = cut_close,
};

static int fence_end(void *arg, const char *key, uint64_t size)
{
    (void)size;
    int64_t t0;
    if (st_gcmark_fence_parse(key + strlen("jobs/j/gc/compacting/"), &t0, (int64_t *)arg))
        *(int64_t *)arg = 0;
    return 1; /* the first one is enough */
}

/* The end of the life of job j's fence, or 0 if there is none. */
static int64_t fence_until(st_backend *b)
{
    int64_t until = 0;
    CHECK_OK(st_list(b, "jobs/j/gc/compacting/", fence_end, &until));
    return until;
}

/*
 * A crash after every PUT of a compaction run in turn (fence, new pack, the
 * rewrites' registry, manifest and part record, the sweep's marker) of the
 * job that setup makes (returning what its kept steps need): every step
 * still verifies, a fence left behind makes a writer wait until it is
 * stale, and a later run finishes the work down to the kept size. Returns
 * the PUTs of a whole run.
 */
static int crash_at_every_point(uint64_t (*setup)(st_store *s, st_backend *b))
{
    int full = 0, retries = 0;
    for (int limit = 0; limit < 12; limit++) {
        new_case();
        st_store *s = open_store("n1");
        st_backend *b = open_backend();
        uint64_t kept = setup(s, b);
        cutoff c = {.lock = PTHREAD_MUTEX_INITIALIZER, .inner = b, .limit = limit};
        st_backend cut = {.ops = &cut_ops, .ctx = &c};
        st_gc_report r;
        st_err e = gc(&cut, 1, &r);
        int stopped = r.stopped;
        st_gc_report_free(&r);
        verify_all(s);
        if (!e && stopped && retries++ < 5) {
            /* A busy machine kept the run past its fence's life, before the
             * cut: this point was not tested; again. */
            st_backend_close(b);
            st_store_close(s);
            limit--;
            continue;
        }
        if (!e) { /* the whole run fit under the limit */
            full = limit;
            st_backend_close(b);
            st_store_close(s);
            break;
        }
        /* A fence left by the crash: writers wait, until it is stale. (On a
         * busy machine it may go stale during a check: a check counts only
         * if the fence was still live when it ended.) */
        int64_t until = fence_until(b);
        if (until) {
            st_err pe = put_step_as(s, 10, "own.bin", 64 * KIB);
            if (st_now_ns() < until)
                CHECK(pe == ST_ERR_BUSY);
            CHECK_OK(gc(b, 1, &r)); /* another compaction: skipped */
            if (st_now_ns() < until)
                CHECK(r.compact_skipped);
            st_gc_report_free(&r);
            while (st_now_ns() < until)
                sleep_ns(10 * MS);
            /* The refused put left a pack that the sweep marked; the same
             * chunks make the same pack, so the writer's last look refuses
             * it until the sweep deleted it (docs/GC.md, Limits). */
            for (int i = 0; i < 5 && pe != ST_OK; i++) {
                if (i) {
                    sleep_ns(GRACE + 10 * MS);
                    CHECK_OK(gc(b, 0, &r));
                    st_gc_report_free(&r);
                }
                pe = put_step_as(s, 10, "own.bin", 64 * KIB);
            }
            CHECK_OK(pe);
        }
        verify_all(s);
        /* The next runs finish the job. */
        compact_cycle(b, &r);
        CHECK(!r.compact_skipped);
        st_gc_report_free(&r);
        sleep_ns(GRACE + 10 * MS);
        CHECK_OK(gc(b, 0, &r)); /* orphans of the crash: swept */
        st_gc_report_free(&r);
        sleep_ns(GRACE + 10 * MS);
        CHECK_OK(gc(b, 0, &r));
        st_gc_report_free(&r);
        verify_all(s);
        uint64_t extra = count_keys(b, "jobs/j/steps/00000000000000000010/") ? 64 * KIB : 0;
        uint64_t after = pack_bytes(b);
        if (after * 100 > (kept + extra) * 110)
            fprintf(stderr, "crash after %d PUTs: %llu bytes of packs for %llu kept\n", limit - 1,
                    (unsigned long long)after, (unsigned long long)(kept + extra));
        CHECK(after * 100 <= (kept + extra) * 110);
        st_backend_close(b);
        st_store_close(s);
    }
    return full;
}

static void test_crash_at_every_point(void)
{
    int full = crash_at_every_point(finished_job);
    fprintf(stderr, "a whole compaction run: %d PUTs\n", full);
    CHECK(full >= 8); /* fence, pack, 2 x (registry, manifest, part), marker */
}

/* The same where the rewrite points a step at another pack's copy of its
 * chunks (duplicate_job). */
static void test_crash_duplicates_at_every_point(void)
{
    int full = crash_at_every_point(duplicate_job);
    fprintf(stderr, "a whole compaction run of duplicates: %d PUTs\n", full);
    CHECK(full >= 5); /* fence, pack, registry, manifest, part, (marker) */
}

/* A GC run without compaction deletes step 3 while the compaction copies:
 * the compactor does not write it again. */
static void test_step_deleted_meanwhile(void)
{
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    finished_job(s, b);
    cutoff c = {.lock = PTHREAD_MUTEX_INITIALIZER,
                .inner = b,
                .limit = 1000,
                .del_on_pack = "jobs/j/steps/00000000000000000003/nodes/n1.commit"};
    st_backend cut = {.ops = &cut_ops, .ctx = &c};
    st_gc_report r;
    CHECK_OK(gc(&cut, 1, &r));
    CHECK(r.compact_parts_changed == 1);
    CHECK(r.compact_parts_rewritten == 1);
    st_gc_report_free(&r);
    CHECK(count_keys(b, "jobs/j/steps/00000000000000000003/nodes/n1.commit") == 0);
    verify_all(s);
    st_backend_close(b);
    st_store_close(s);
}

/* ---- the fence ---- */

static void test_fence_keys(void)
{
    char key[ST_KEY_MAX];
    int64_t t0, until;
    CHECK_OK(st_key_gc_fence(key, sizeof key, "j", 123, 456, 0xabcdef));
    CHECK(!strcmp(key, "jobs/j/gc/compacting/00000000000000000123-00000000000000000456-"
                       "0000000000abcdef"));
    CHECK_OK(st_gcmark_fence_parse(key + strlen("jobs/j/gc/compacting/"), &t0, &until));
    CHECK(t0 == 123 && until == 456);
    CHECK_ERR(st_gcmark_fence_parse("00000000000000000123-00000000000000000456", &t0, &until),
              ST_ERR_CORRUPT);
    CHECK_ERR(st_gcmark_fence_parse("00000000000000000456-00000000000000000123-0000000000abcdef",
                                    &t0, &until),
              ST_ERR_CORRUPT);
    CHECK_ERR(st_key_gc_fence(key, sizeof key, "j", 5, 4, 0), ST_ERR_INVALID);
}

/* A live fence stops every publish; a stale one or garbage does not. Live
 * or stale is the store's say (docs/GC.md, "Clocks"): the times in a
 * fence's name are the compactor's clock, which may be far off. */
static void test_fence_stops_publish(void)
{
    char key[ST_KEY_MAX];
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    int64_t now = st_now_ns();
    const int64_t hours3 = 3 * 3600 * 1000 * MS;
    CHECK_OK(st_put(b, "jobs/j/gc/compacting/garbage", "", 0));
    /* Written 20 grace ago by the store's clock, whatever its name says
     * (its compactor's clock ran 3 h ahead): stale. */
    CHECK_OK(st_key_gc_fence(key, sizeof key, "j", now + hours3, now + hours3 + 2 * GRACE, 1));
    CHECK_OK(st_put(b, key, "", 0));
    ut_backdate(case_dir, key, 20 * (double)GRACE / 1e9);
    CHECK_OK(put_step_as(s, 1, "own.bin", 64 * KIB)); /* stale: ignored */
    CHECK_OK(st_del(b, key));
    /* Just written, by a compactor whose clock runs 3 h behind: its name
     * says it ended long ago, the store says it is live. */
    CHECK_OK(st_key_gc_fence(key, sizeof key, "j", now - hours3, now - hours3 + 2 * GRACE, 2));
    CHECK_OK(st_put(b, key, "", 0));
    CHECK_ERR(put_step_as(s, 2, "own.bin", 64 * KIB), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "being compacted") != NULL);
    CHECK_OK(st_del(b, key));
    CHECK_OK(put_step_as(s, 2, "own.bin", 64 * KIB));
    verify_all(s);
    st_backend_close(b);
    st_store_close(s);
}

/* A writer coming back while a compaction waits behind its fence is told to
 * wait (transient), and publishes once the run is over. */
typedef struct bg_gc {
    st_backend *b;
    st_gc_report r;
    st_err e;
} bg_gc;

static void *run_bg(void *arg)
{
    bg_gc *g = arg;
    st_gc_policy p = {.keep_last = 2, .grace_ns = 10 * GRACE, .compact = 1};
    g->e = st_gc_run(g->b, "j", &p, 0, &g->r, NULL, NULL);
    return NULL;
}

static void test_writer_during_compaction(void)
{
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    finished_job(s, b);
    bg_gc g = {.b = b};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, run_bg, &g) == 0);
    /* The run waits 5 * GRACE behind its fence; the writer comes back. */
    for (int i = 0; i < 100 && !count_keys(b, "jobs/j/gc/compacting/"); i++)
        sleep_ns(10 * MS);
    CHECK_ERR(put_step_as(s, 5, "own.bin", 256 * KIB), ST_ERR_BUSY);
    pthread_join(t, NULL);
    CHECK_OK(g.e);
    CHECK(g.r.compact_parts_rewritten == 2);
    st_gc_report_free(&g.r);
    CHECK_OK(put_step_as(s, 5, "own.bin", 256 * KIB));
    verify_all(s);
    st_backend_close(b);
    st_store_close(s);
}

/* Two nodes' parts of one step hold the same path: which version wins
 * depends on the revision order, so the step is left alone. */
static void test_shared_path_left_alone(void)
{
    new_case();
    st_store *s1 = open_store("n1"), *s2 = open_store("n2");
    st_backend *b = open_backend();
    finished_job(s1, b);
    CHECK_OK(put_step_as(s2, 4, "own.bin", 256 * KIB)); /* n2's shared.bin and own.bin too */
    st_gc_report r;
    CHECK_OK(gc(b, 1, &r));
    CHECK(r.compact_steps_skipped == 1);
    /* Step 3 alone references step 1's pack now? No: step 4's n1 part does
     * too, and it is left alone, so the pack is not a candidate. */
    CHECK(r.compact_candidates == 0);
    st_gc_report_free(&r);
    verify_all(s1);
    st_backend_close(b);
    st_store_close(s1);
    st_store_close(s2);
}

/* A flipped byte in a candidate's live chunk: the run fails, nothing is
 * rewritten, and the steps still read from the old pack (verify finds the
 * damage there, as before). */
typedef struct first_key {
    char key[ST_KEY_MAX];
    uint64_t size;
} first_key;

static int biggest_pack(void *arg, const char *key, uint64_t size)
{
    first_key *f = arg;
    if (size > f->size) {
        snprintf(f->key, sizeof f->key, "%s", key);
        f->size = size;
    }
    return 0;
}

static void test_corrupt_chunk_not_copied(void)
{
    new_case();
    st_store *s = open_store("n1");
    st_backend *b = open_backend();
    finished_job(s, b);
    first_key f = {{0}, 0};
    CHECK_OK(st_list(b, "jobs/j/packs/", biggest_pack, &f)); /* step 1's: shared + own */
    st_bytes data = {0};
    CHECK_OK(st_get(b, f.key, 0, ST_GET_TO_END, &data));
    /* own.bin's chunks come first (paths in order), then shared.bin's, the
     * live ones: three quarters in is inside one of those. */
    data.data[data.len * 3 / 4] ^= 0x40;
    CHECK_OK(st_put(b, f.key, data.data, data.len));
    st_bytes_free(&data);
    st_gc_report r;
    CHECK_ERR(gc(b, 1, &r), ST_ERR_CORRUPT);
    CHECK(r.compact_parts_rewritten == 0 && r.compact_packs_written == 0);
    CHECK(count_keys(b, "jobs/j/gc/compacting/") == 0);
    st_gc_report_free(&r);
    st_backend_close(b);
    st_store_close(s);
}

static void run_cases(void)
{
    RUN(test_fence_keys);
    RUN(test_fence_stops_publish);
    RUN(test_compacts_finished_job);
    RUN(test_dry_run_writes_nothing);
    RUN(test_writer_during_compaction);
    RUN(test_shared_path_left_alone);
    RUN(test_corrupt_chunk_not_copied);
    RUN(test_duplicate_copies_counted_once);
    RUN(test_step_deleted_meanwhile);
    RUN(test_crash_at_every_point);
    RUN(test_crash_duplicates_at_every_point);
}

int main(void)
{
    return ut_main_tmp_store(root, url, sizeof url, run_cases);
}
