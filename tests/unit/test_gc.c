/*
 * GC tests through the facade (st_store_gc, ckptstore.h) on a file:// store
 * in a temp dir, steps made with st_store_put_dir: retention choices, a dry
 * run lists exactly what the real run then deletes, pending markers and the
 * grace period, a writer that meets a pending pack stores its chunks again,
 * and after every run every kept step still verifies.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptstore.h"
#include "st_backend.h"
#include "st_fsutil.h"
#include "st_gc.h"
#include "st_step.h"
#include "ut.h"

#define KIB 1024
#define SEC 1000000000LL

static char root[] = "/tmp/ckpt-test-gc-XXXXXX";
static char url[300];

static void write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, data, len) == (ssize_t)len);
    close(fd);
}

static st_store *open_store(const char *state_name)
{
    char state[400];
    snprintf(state, sizeof state, "%s/%s", root, state_name);
    st_store_options o = {.url = url, .state_dir = state, .node = "test-node"};
    st_store *s = NULL;
    CHECK_OK(st_store_open(&o, &s));
    return s;
}

/* Puts step `step` of job: a file shared by every step and one of its own
 * (seeded by `seed`). */
static void put_step(st_store *s, const char *job, uint64_t step, unsigned seed, st_put_result *r)
{
    static uint8_t buf[256 * KIB];
    char dir[400], p[450];
    snprintf(dir, sizeof dir, "%s/src-%s-%llu", root, job, (unsigned long long)step);
    mkdir(dir, 0755);
    ut_rand_fill(buf, sizeof buf, 7);
    snprintf(p, sizeof p, "%s/shared.bin", dir);
    write_file(p, buf, sizeof buf);
    ut_rand_fill(buf, sizeof buf, 1000 + seed);
    snprintf(p, sizeof p, "%s/own.bin", dir);
    write_file(p, buf, sizeof buf);
    CHECK_OK(st_store_put_dir(s, job, step, dir, r));
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

/* A dry run, then the real run: the same keys, in the same order. */
static void gc_checked(st_store *s, const char *job, const st_gc_policy *p, st_gc_report *real)
{
    st_gc_report dry;
    CHECK_OK(st_store_gc(s, job, p, 1, &dry));
    CHECK_OK(st_store_gc(s, job, p, 0, real));
    CHECK(dry.ndeleted == real->ndeleted);
    CHECK(dry.bytes_freed == real->bytes_freed);
    CHECK(dry.steps_deleted == real->steps_deleted);
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

static void test_grace_period(void)
{
    st_store *s = open_store("state-grace");
    for (uint64_t i = 1; i <= 3; i++)
        put_step(s, "grace", i, 100 + (unsigned)i, NULL);
    st_gc_report r;
    st_gc_policy pol = {.keep_last = 1, .grace_ns = 3600 * SEC};
    gc_checked(s, "grace", &pol, &r);
    CHECK(r.steps_deleted == 2 && r.packs_marked == 1); /* step 2's pack; step 1's is shared */
    st_gc_report_free(&r);
    gc_checked(s, "grace", &pol, &r);
    CHECK(r.packs_pending == 1 && r.packs_deleted == 0 && r.ndeleted == 0);
    st_gc_report_free(&r);
    /* A shorter grace now does not shorten the marker's own. */
    st_gc_policy shorter = {.grace_ns = 1};
    gc_checked(s, "grace", &shorter, &r);
    CHECK(r.packs_pending == 1 && r.packs_deleted == 0);
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

/* The writer's check itself: marker first, then the pack; young markers
 * are accepted only for the final look before publishing. */
static void test_pack_usable(void)
{
    st_backend *b;
    char dir[400], key[ST_KEY_MAX], text[128];
    snprintf(dir, sizeof dir, "%s/store", root);
    CHECK_OK(st_backend_file_open(dir, &b));
    st_id id = {{1, 2, 3}};
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, NULL), ST_ERR_BUSY); /* no pack */
    CHECK_OK(st_key_pack(key, sizeof key, "u", &id));
    CHECK_OK(st_put(b, key, "x", 1));
    CHECK_OK(st_gc_pack_usable(b, "u", &id, NULL));
    CHECK_OK(st_key_gc_pending(key, sizeof key, "u", &id));
    int n = snprintf(text, sizeof text, "ckptfs-gc-pending v1 %lld %lld\n", (long long)st_now_ns(),
                     3600 * SEC);
    CHECK_OK(st_put(b, key, text, (size_t)n));
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, NULL), ST_ERR_BUSY);
    int64_t deadline = INT64_MAX;
    CHECK_OK(st_gc_pack_usable(b, "u", &id, &deadline));
    CHECK(deadline < INT64_MAX && deadline > st_now_ns());
    n = snprintf(text, sizeof text, "ckptfs-gc-pending v1 %lld %lld\n",
                 (long long)(st_now_ns() - 2000 * SEC), 3600 * SEC);
    CHECK_OK(st_put(b, key, text, (size_t)n));
    CHECK_ERR(st_gc_pack_usable(b, "u", &id, &deadline), ST_ERR_BUSY);
    int64_t m, g;
    CHECK_ERR(st_gc_marker_decode("garbage", 7, &m, &g), ST_ERR_CORRUPT);
    st_backend_close(b);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(url, sizeof url, "file://%s/store", root);
    RUN(test_retention_and_sweep);
    RUN(test_grace_period);
    RUN(test_writer_restores_pending_pack);
    RUN(test_pack_usable);
    ut_rmtree(root);
    return ut_finish();
}
