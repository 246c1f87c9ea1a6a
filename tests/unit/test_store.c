/*
 * Engine tests through the facade (ckptstore.h) on a file:// store in a temp
 * dir: round trips, dedup guarantees, PUT budget, what a partial write
 * leaves visible, that a fresh node dedups against what is stored, and that
 * a restore completes a step or leaves nothing of it (damaged or missing
 * packs, fallback) with a bounded number of descriptors.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptstore.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "ut.h"
#include "ut_store.h"

static char root[] = "/tmp/ckpt-test-store-XXXXXX";
static char url[300];

static int files_equal(const char *a, const char *b)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

static st_store *open_store(const char *state_name)
{
    return ut_open_store(url, root, state_name, "test-node");
}

static void mkdirf(const char *fmt, const char *a)
{
    char p[400];
    snprintf(p, sizeof p, fmt, root, a);
    mkdir(p, 0755);
}

/* Makes root/dir holding one file f of len pseudo-random bytes (seed) and
 * writes the directory's path to out: the one-file step most tests put. */
static void random_step_dir(const char *dir, size_t len, uint64_t seed, char *out, size_t cap)
{
    uint8_t *buf = malloc(len);
    CHECK(buf != NULL);
    if (!buf)
        return;
    ut_rand_fill(buf, len, seed);
    mkdirf("%s/%s", dir);
    snprintf(out, cap, "%s/%s/f", root, dir);
    ut_write_file(out, buf, len);
    snprintf(out, cap, "%s/%s", root, dir);
    free(buf);
}

/* A store (state in root/state_name) holding step 1 of job: the one-file
 * random_step_dir() root/job (len bytes from seed), whose path goes to dir. */
static st_store *store_with_random_step(const char *state_name, const char *job, size_t len,
                                        uint64_t seed, char *dir, size_t cap)
{
    st_store *s = open_store(state_name);
    random_step_dir(job, len, seed, dir, cap);
    CHECK_OK(st_store_put_dir(s, job, 1, dir, NULL));
    return s;
}

static void test_roundtrip_tree(void)
{
    st_store *s = open_store("state1");
    char p[400], q[400];
    mkdirf("%s/%s", "rt");
    mkdirf("%s/%s", "rt/sub");
    mkdirf("%s/%s", "rt/sub/deeper");
    size_t sizes[] = {0, 1, 100, 70000, 3 << 20};
    const char *names[] = {"empty", "one", "sub/small", "sub/deeper/mid", "big"};
    uint8_t *buf = malloc(3 << 20);
    for (size_t i = 0; i < 5; i++) {
        ut_rand_fill(buf, sizes[i], 100 + i);
        snprintf(p, sizeof p, "%s/rt/%s", root, names[i]);
        ut_write_file(p, buf, sizes[i]);
    }
    snprintf(p, sizeof p, "%s/rt", root);
    st_put_result r;
    CHECK_OK(st_store_put_dir(s, "job", 1, p, &r));
    CHECK(r.files == 5);
    snprintf(q, sizeof q, "%s/rt-out", root);
    st_restore_result g;
    CHECK_OK(st_store_restore(s, "job", 1, q, NULL, &g));
    CHECK(g.files == 5);
    for (size_t i = 0; i < 5; i++) {
        char a[400], b[400];
        snprintf(a, sizeof a, "%s/rt/%s", root, names[i]);
        snprintf(b, sizeof b, "%s/rt-out/%s", root, names[i]);
        CHECK(files_equal(a, b));
    }
    CHECK_ERR(st_store_put_dir(s, "job", 1, p, &r), ST_ERR_EXISTS);
    CHECK_ERR(st_store_restore(s, "job", 2, q, NULL, &g), ST_ERR_NOT_FOUND);
    free(buf);
    st_store_close(s);
}

static void test_identical_files_stored_once(void)
{
    st_store *s = open_store("state2");
    size_t len = 8 << 20;
    uint8_t *buf = malloc(len);
    ut_rand_fill(buf, len, 7);
    char p[400];
    mkdirf("%s/%s", "twins");
    snprintf(p, sizeof p, "%s/twins/rank0.bin", root);
    ut_write_file(p, buf, len);
    snprintf(p, sizeof p, "%s/twins/rank1.bin", root);
    ut_write_file(p, buf, len);
    snprintf(p, sizeof p, "%s/twins", root);
    st_put_result r;
    CHECK_OK(st_store_put_dir(s, "twins", 1, p, &r));
    CHECK(r.logical_bytes == 2 * len);
    CHECK(r.new_raw_bytes == len);
    free(buf);
    st_store_close(s);
}

static void test_insertion_dedups(void)
{
    st_store *s = open_store("state3");
    size_t len = 16 << 20;
    uint8_t *buf = malloc(len + 1);
    ut_rand_fill(buf, len, 9);
    char p[400];
    mkdirf("%s/%s", "ins-a");
    mkdirf("%s/%s", "ins-b");
    snprintf(p, sizeof p, "%s/ins-a/f", root);
    ut_write_file(p, buf, len);
    memmove(buf + 101, buf + 100, len - 100);
    buf[100] = 0x5a;
    snprintf(p, sizeof p, "%s/ins-b/f", root);
    ut_write_file(p, buf, len + 1);
    st_put_result r;
    snprintf(p, sizeof p, "%s/ins-a", root);
    CHECK_OK(st_store_put_dir(s, "ins", 1, p, &r));
    snprintf(p, sizeof p, "%s/ins-b", root);
    CHECK_OK(st_store_put_dir(s, "ins", 2, p, &r));
    double found = 1.0 - (double)r.new_raw_bytes / (double)r.logical_bytes;
    fprintf(stderr, "insertion at 100: %.2f%% of %zu bytes deduplicated\n", 100 * found, len + 1);
    CHECK(found >= 0.95);
    free(buf);
    st_store_close(s);
}

static void test_put_budget(void)
{
    /* 96 MiB of incompressible new data: packs at most 64 per GiB (6 here),
     * plus the fixed per-step objects: job registry, manifest, commit. */
    st_store *s = open_store("state4");
    char p[400];
    random_step_dir("budget", 96 << 20, 11, p, sizeof p);
    st_put_result r;
    CHECK_OK(st_store_put_dir(s, "budget", 1, p, &r));
    fprintf(stderr, "96 MiB new data: %llu PUTs (%llu packs)\n", (unsigned long long)r.puts,
            (unsigned long long)r.packs);
    CHECK(r.packs * 1024 <= 64 * 96);
    CHECK(r.puts == r.packs + 3);
    st_store_close(s);
}

static void test_fresh_node_dedups_against_store(void)
{
    /* Node A stores a step; node B (no local state) stores the same bytes. */
    st_store *a = open_store("node-a");
    size_t len = 4 << 20;
    char p[400];
    random_step_dir("fresh", len, 13, p, sizeof p);
    st_put_result r;
    CHECK_OK(st_store_put_dir(a, "fresh", 1, p, &r));
    CHECK(r.packs >= 1);
    st_store_close(a);
    st_store *b = open_store("node-b");
    CHECK_OK(st_store_put_dir(b, "fresh", 2, p, &r));
    CHECK(r.packs == 0 && r.new_raw_bytes == 0);
    st_step_info *steps;
    size_t n;
    CHECK_OK(st_store_list_steps(b, "fresh", &steps, &n));
    CHECK(n == 2 && steps[0].step == 1 && steps[1].step == 2 && steps[1].bytes == len);
    free(steps);
    st_store_close(b);
}

static void test_uncommitted_step_is_invisible(void)
{
    /* A put that stopped before its part record: packs and manifest are in
     * the store, but the step must not be listed or restorable. */
    char p[400];
    st_store *s = store_with_random_step("state5", "partial", 5000, 17, p, sizeof p);
    CHECK_OK(st_store_put_dir(s, "partial", 2, p, NULL));
    st_backend *b;
    CHECK_OK(st_backend_open(url, &b));
    CHECK_OK(st_del(b, "jobs/partial/steps/00000000000000000002/nodes/test-node.commit"));
    st_backend_close(b);
    st_step_info *steps;
    size_t n;
    CHECK_OK(st_store_list_steps(s, "partial", &steps, &n));
    CHECK(n == 1 && steps[0].step == 1);
    free(steps);
    snprintf(p, sizeof p, "%s/partial-out", root);
    CHECK_ERR(st_store_restore(s, "partial", 2, p, NULL, NULL), ST_ERR_NOT_FOUND);
    /* The step can be written again (a retry after the crash). */
    snprintf(p, sizeof p, "%s/partial", root);
    CHECK_OK(st_store_put_dir(s, "partial", 2, p, NULL));
    st_store_close(s);
}

static void test_tampered_manifest_is_rejected(void)
{
    char p[400];
    st_store *s = store_with_random_step("state6", "tamper", 5000, 19, p, sizeof p);
    /* One more byte at the end of the manifest: it no longer matches its
     * part record's length and digest. */
    const char *key = "jobs/tamper/steps/00000000000000000001/nodes/test-node.r1.manifest";
    st_backend *b;
    st_bytes m = {0};
    CHECK_OK(st_backend_open(url, &b));
    CHECK_OK(st_get(b, key, 0, ST_GET_TO_END, &m));
    CHECK_OK(st_bytes_put_u8(&m, 'x'));
    CHECK_OK(st_put(b, key, m.data, m.len));
    st_bytes_free(&m);
    st_backend_close(b);
    snprintf(p, sizeof p, "%s/tamper-out", root);
    CHECK_ERR(st_store_restore(s, "tamper", 1, p, NULL, NULL), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "manifest") != NULL);
    st_store_close(s);
}

/* The whole-file digest is computed from the decoded chunks (no read-back
 * with one worker, the chunks coming in order), and a manifest whose digest
 * is wrong still fails the restore, with one worker and with four. */
static void test_restore_digest_from_memory(void)
{
    char p[400];
    st_store *s = store_with_random_step("state-digest", "digest", 3u << 20, 23, p, sizeof p);
    char out[400];
    snprintf(out, sizeof out, "%s/digest-out", root);
    st_restore_opts one = {.rank = -1, .threads = 1}, four = {.rank = -1, .threads = 4};
    st_restore_result r = {0};
    CHECK_OK(st_store_restore(s, "digest", 1, out, &one, &r));
    CHECK(r.bytes == 3u << 20 && r.read_back == 0);
    char got[450], want[450];
    snprintf(got, sizeof got, "%s/f", out);
    snprintf(want, sizeof want, "%s/f", p);
    CHECK(files_equal(got, want));
    st_backend *b = ut_open_store_backend(root);
    if (b)
        ut_wrong_file_digests(b, "digest", 1, "test-node");
    st_backend_close(b);
    snprintf(out, sizeof out, "%s/digest-bad", root);
    CHECK_ERR(st_store_restore(s, "digest", 1, out, &one, NULL), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "whole-file digest mismatch") != NULL);
    CHECK_ERR(st_store_restore(s, "digest", 1, out, &four, NULL), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "whole-file digest mismatch") != NULL);
    st_store_close(s);
}

/* ---- restore: all of a step or nothing of it ---- */

typedef struct key_set {
    char keys[16][300];
    size_t n;
} key_set;

static int collect_key(void *arg, const char *key, uint64_t size)
{
    (void)size;
    key_set *k = arg;
    if (k->n < 16)
        snprintf(k->keys[k->n++], sizeof k->keys[0], "%s", key);
    return 0;
}

static int key_in(const key_set *k, const char *key)
{
    for (size_t i = 0; i < k->n; i++)
        if (!strcmp(k->keys[i], key))
            return 1;
    return 0;
}

/* Stores step 1 of job (a.bin) and step 2 (a-dedup.bin, a.bin's bytes again,
 * so its chunks are in step 1's pack and it verifies; z-new.bin, new bytes
 * in a pack only step 2 references). Returns that pack's key in new_pack. */
static void put_two_steps(st_store *s, const char *job, char *new_pack, size_t cap)
{
    char p[500], d1[400], d2[400];
    uint8_t a[20000], z[20000];
    ut_rand_fill(a, sizeof a, 31);
    ut_rand_fill(z, sizeof z, 32);
    snprintf(d1, sizeof d1, "%s/%s-1", root, job);
    snprintf(d2, sizeof d2, "%s/%s-2", root, job);
    mkdir(d1, 0755);
    mkdir(d2, 0755);
    snprintf(p, sizeof p, "%s/a.bin", d1);
    ut_write_file(p, a, sizeof a);
    snprintf(p, sizeof p, "%s/a-dedup.bin", d2);
    ut_write_file(p, a, sizeof a);
    snprintf(p, sizeof p, "%s/z-new.bin", d2);
    ut_write_file(p, z, sizeof z);
    st_backend *b;
    key_set before = {.n = 0}, after = {.n = 0};
    char prefix[300];
    snprintf(prefix, sizeof prefix, "jobs/%s/packs/", job);
    CHECK_OK(st_backend_open(url, &b));
    CHECK_OK(st_store_put_dir(s, job, 1, d1, NULL));
    CHECK_OK(st_list(b, prefix, collect_key, &before));
    CHECK_OK(st_store_put_dir(s, job, 2, d2, NULL));
    CHECK_OK(st_list(b, prefix, collect_key, &after));
    st_backend_close(b);
    new_pack[0] = '\0';
    for (size_t i = 0; i < after.n; i++)
        if (!key_in(&before, after.keys[i]))
            snprintf(new_pack, cap, "%s", after.keys[i]);
    CHECK(after.n == before.n + 1 && new_pack[0]);
}

/* 1 if dir holds an entry whose name starts with prefix. */
static int dir_has_prefix(const char *dir, const char *prefix)
{
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | grep -q '^%s'", dir, prefix);
    return system(cmd) == 0;
}

static int exists(const char *dir, const char *name)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* Restores the latest step of job into <root>/<out> with one thread (so
 * that a-dedup.bin is whole and verified before z-new.bin fails). */
static st_err restore_latest(st_store *s, const char *job, const char *out, st_restore_result *r)
{
    char dest[400];
    snprintf(dest, sizeof dest, "%s/%s", root, out);
    st_restore_opts o = {.rank = -1, .latest = 1, .threads = 1};
    memset(r, 0, sizeof *r);
    return st_store_restore(s, job, 0, dest, &o, r);
}

static void check_only_step1(const char *out)
{
    char dest[400];
    snprintf(dest, sizeof dest, "%s/%s", root, out);
    CHECK(exists(dest, "a.bin"));
    CHECK(!exists(dest, "a-dedup.bin")); /* step 2's verified file: not left behind */
    CHECK(!exists(dest, "z-new.bin"));
    CHECK(!dir_has_prefix(dest, ".ckpt-restore"));
}

static void test_fallback_leaves_nothing_of_the_bad_step(void)
{
    st_store *s = open_store("state7");
    char pack[300];
    put_two_steps(s, "fall", pack, sizeof pack);
    st_backend *b;
    st_bytes data = {0};
    CHECK_OK(st_backend_open(url, &b));
    CHECK_OK(st_get(b, pack, 0, ST_GET_TO_END, &data));
    if (data.len > 100)
        data.data[data.len / 2] ^= 0xff;
    CHECK_OK(st_put(b, pack, data.data, data.len));
    st_bytes_free(&data);
    st_backend_close(b);
    st_restore_result r;
    CHECK_OK(restore_latest(s, "fall", "fall-out", &r));
    CHECK(r.fell_back && r.failed_step == 2 && r.step == 1 && r.files == 1);
    check_only_step1("fall-out");
    /* Asked for step 2 itself: the restore fails and leaves nothing of it. */
    char dest[400];
    snprintf(dest, sizeof dest, "%s/fall-out2", root);
    CHECK_ERR(st_store_restore(s, "fall", 2, dest, NULL, NULL), ST_ERR_CORRUPT);
    CHECK(!exists(dest, "a-dedup.bin") && !exists(dest, "z-new.bin"));
    CHECK(!dir_has_prefix(dest, ".ckpt-restore"));
    st_store_close(s);
}

static void test_missing_pack_is_damage(void)
{
    st_store *s = open_store("state8");
    char pack[300];
    put_two_steps(s, "gone", pack, sizeof pack);
    st_backend *b;
    CHECK_OK(st_backend_open(url, &b));
    CHECK_OK(st_del(b, pack));
    st_backend_close(b);
    st_restore_result r;
    CHECK_OK(restore_latest(s, "gone", "gone-out", &r));
    CHECK(r.fell_back && r.failed_step == 2 && r.step == 1);
    CHECK(strstr(r.failure, "missing") != NULL);
    check_only_step1("gone-out");
    st_verify_result v;
    CHECK_ERR(st_store_verify(s, "gone", 2, &v), ST_ERR_CORRUPT);
    CHECK(v.bad_files == 1);
    CHECK_OK(st_store_verify(s, "gone", 1, &v));
    st_store_close(s);
}

/* A step of 2,000 files restores under a limit of 256 descriptors. */
static void test_many_files_few_descriptors(void)
{
    enum { NFILES = 2000 };
    st_store *s = open_store("state9");
    char p[500], dir[400], out[400];
    snprintf(dir, sizeof dir, "%s/many", root);
    mkdir(dir, 0755);
    for (int i = 0; i < NFILES; i++) {
        char text[64];
        int len = snprintf(text, sizeof text, "file %d of the many\n", i);
        snprintf(p, sizeof p, "%s/f%04d", dir, i);
        ut_write_file(p, text, (size_t)len);
    }
    CHECK_OK(st_store_put_dir(s, "many", 1, dir, NULL));
    struct rlimit old, low;
    CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
    low = old;
    low.rlim_cur = 256;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    snprintf(out, sizeof out, "%s/many-out", root);
    st_restore_result g = {0};
    st_err e = st_store_restore(s, "many", 1, out, NULL, &g);
    setrlimit(RLIMIT_NOFILE, &old);
    CHECK_OK(e);
    CHECK(g.files == NFILES);
    char cmd[900];
    snprintf(cmd, sizeof cmd, "diff -r '%s' '%s' >/dev/null", dir, out);
    CHECK(system(cmd) == 0);
    st_store_close(s);
}

/* A file of several packs, written in one go, is restored with one GET per
 * pack, by 4 threads (16 MiB tasks cut across the ~24 MiB packs took 6 GETs
 * for these 3 packs), and restored whole. */
static void test_restore_one_get_per_pack(void)
{
    char p[400];
    st_store *s = open_store("state-packs");
    random_step_dir("packs", 60u << 20, 31, p, sizeof p);
    st_put_result put = {0};
    CHECK_OK(st_store_put_dir(s, "packs", 1, p, &put));
    char out[400];
    snprintf(out, sizeof out, "%s/packs-out", root);
    st_restore_opts four = {.rank = -1, .threads = 4};
    st_restore_result r = {0};
    CHECK_OK(st_store_restore(s, "packs", 1, out, &four, &r));
    printf("  60 MiB in %llu packs: restored with %llu GETs\n", (unsigned long long)put.packs,
           (unsigned long long)r.gets);
    CHECK(put.packs == 3);
    CHECK(r.gets == put.packs);
    char got[450], want[450];
    snprintf(got, sizeof got, "%s/f", out);
    snprintf(want, sizeof want, "%s/f", p);
    CHECK(files_equal(got, want));
    st_store_close(s);
}

/* A step whose part record is garbage is listed as an unreadable row. */
static void test_unreadable_step_is_listed(void)
{
    st_store *s = open_store("state10");
    char p[400];
    snprintf(p, sizeof p, "%s/unread", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/unread/f", root);
    ut_write_file(p, "x", 1);
    snprintf(p, sizeof p, "%s/unread", root);
    CHECK_OK(st_store_put_dir(s, "unread", 1, p, NULL));
    st_backend *b;
    CHECK_OK(st_backend_open(url, &b));
    CHECK_OK(st_put(b, "jobs/unread/steps/00000000000000000002/nodes/junk.commit", "junk", 4));
    st_backend_close(b);
    st_step_info *steps;
    size_t n;
    CHECK_OK(st_store_list_steps(s, "unread", &steps, &n));
    CHECK(n == 2);
    if (n == 2) {
        CHECK(steps[0].step == 1 && steps[0].consistent && !steps[0].unreadable);
        CHECK(steps[1].step == 2 && !steps[1].consistent && steps[1].unreadable);
        CHECK(steps[1].nodes == 1 && strstr(steps[1].why, "unreadable") != NULL);
    }
    free(steps);
    st_store_close(s);
}

/* The target has a directory where the step has a file: the rename into
 * place fails, and the files already placed are taken out again. */
static void test_failed_commit_leaves_nothing(void)
{
    st_store *s = open_store("state11");
    char p[500], dest[400];
    snprintf(p, sizeof p, "%s/commit-src", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/commit-src/a.bin", root);
    ut_write_file(p, "aaaa", 4);
    snprintf(p, sizeof p, "%s/commit-src/b", root);
    ut_write_file(p, "bbbb", 4);
    snprintf(p, sizeof p, "%s/commit-src", root);
    CHECK_OK(st_store_put_dir(s, "commit", 1, p, NULL));
    snprintf(dest, sizeof dest, "%s/commit-out", root);
    mkdir(dest, 0755);
    snprintf(p, sizeof p, "%s/b", dest);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/b/keep", dest);
    ut_write_file(p, "k", 1);
    CHECK_ERR(st_store_restore(s, "commit", 1, dest, NULL, NULL), ST_ERR_IO);
    CHECK(strstr(st_errmsg(), "rename into place b") != NULL);
    CHECK(!exists(dest, "a.bin"));
    CHECK(exists(dest, "b/keep"));
    CHECK(!dir_has_prefix(dest, ".ckpt-restore"));
    st_store_close(s);
}

static void run_cases(void)
{
    RUN(test_roundtrip_tree);
    RUN(test_identical_files_stored_once);
    RUN(test_insertion_dedups);
    RUN(test_put_budget);
    RUN(test_fresh_node_dedups_against_store);
    RUN(test_uncommitted_step_is_invisible);
    RUN(test_tampered_manifest_is_rejected);
    RUN(test_restore_digest_from_memory);
    RUN(test_fallback_leaves_nothing_of_the_bad_step);
    RUN(test_missing_pack_is_damage);
    RUN(test_many_files_few_descriptors);
    RUN(test_restore_one_get_per_pack);
    RUN(test_unreadable_step_is_listed);
    RUN(test_failed_commit_leaves_nothing);
}

int main(void)
{
    return ut_main_tmp_store(root, url, sizeof url, run_cases);
}
