/*
 * Engine tests through the facade (ckptstore.h) on a file:// store in a temp
 * dir: round trips, dedup guarantees, PUT budget, what a partial write
 * leaves visible, and that a fresh node dedups against what is stored.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckptstore.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "ut.h"

static char root[] = "/tmp/ckpt-test-store-XXXXXX";
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

static int files_equal(const char *a, const char *b)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
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

static void mkdirf(const char *fmt, const char *a)
{
    char p[400];
    snprintf(p, sizeof p, fmt, root, a);
    mkdir(p, 0755);
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
        write_file(p, buf, sizes[i]);
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
    write_file(p, buf, len);
    snprintf(p, sizeof p, "%s/twins/rank1.bin", root);
    write_file(p, buf, len);
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
    write_file(p, buf, len);
    memmove(buf + 101, buf + 100, len - 100);
    buf[100] = 0x5a;
    snprintf(p, sizeof p, "%s/ins-b/f", root);
    write_file(p, buf, len + 1);
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
    size_t len = 96 << 20;
    uint8_t *buf = malloc(len);
    ut_rand_fill(buf, len, 11);
    char p[400];
    mkdirf("%s/%s", "budget");
    snprintf(p, sizeof p, "%s/budget/f", root);
    write_file(p, buf, len);
    snprintf(p, sizeof p, "%s/budget", root);
    st_put_result r;
    CHECK_OK(st_store_put_dir(s, "budget", 1, p, &r));
    fprintf(stderr, "96 MiB new data: %llu PUTs (%llu packs)\n", (unsigned long long)r.puts,
            (unsigned long long)r.packs);
    CHECK(r.packs * 1024 <= 64 * 96);
    CHECK(r.puts == r.packs + 3);
    free(buf);
    st_store_close(s);
}

static void test_fresh_node_dedups_against_store(void)
{
    /* Node A stores a step; node B (no local state) stores the same bytes. */
    st_store *a = open_store("node-a");
    size_t len = 4 << 20;
    uint8_t *buf = malloc(len);
    ut_rand_fill(buf, len, 13);
    char p[400];
    mkdirf("%s/%s", "fresh");
    snprintf(p, sizeof p, "%s/fresh/f", root);
    write_file(p, buf, len);
    snprintf(p, sizeof p, "%s/fresh", root);
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
    free(buf);
    st_store_close(b);
}

static void test_uncommitted_step_is_invisible(void)
{
    /* A put that stopped before its part record: packs and manifest are in
     * the store, but the step must not be listed or restorable. */
    st_store *s = open_store("state5");
    char p[400];
    uint8_t data[5000];
    ut_rand_fill(data, sizeof data, 17);
    mkdirf("%s/%s", "partial");
    snprintf(p, sizeof p, "%s/partial/f", root);
    write_file(p, data, sizeof data);
    snprintf(p, sizeof p, "%s/partial", root);
    CHECK_OK(st_store_put_dir(s, "partial", 1, p, NULL));
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
    st_store *s = open_store("state6");
    char p[400];
    uint8_t data[5000];
    ut_rand_fill(data, sizeof data, 19);
    mkdirf("%s/%s", "tamper");
    snprintf(p, sizeof p, "%s/tamper/f", root);
    write_file(p, data, sizeof data);
    snprintf(p, sizeof p, "%s/tamper", root);
    CHECK_OK(st_store_put_dir(s, "tamper", 1, p, NULL));
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

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(url, sizeof url, "file://%s/store", root);
    RUN(test_roundtrip_tree);
    RUN(test_identical_files_stored_once);
    RUN(test_insertion_dedups);
    RUN(test_put_budget);
    RUN(test_fresh_node_dedups_against_store);
    RUN(test_uncommitted_step_is_invisible);
    RUN(test_tampered_manifest_is_rejected);
    ut_rmtree(root);
    return ut_finish();
}
