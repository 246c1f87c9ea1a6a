/*
 * libckpt's C API (client/include/ckpt/ckpt.h) against a file:// store in a
 * temp dir. Steps are made with the engine's facade (st_store_put_dir: the
 * public API has no put), then listed, restored and verified through libckpt;
 * error codes and messages are checked, and the two mount calls are run
 * against a plain directory standing in for a mount's .ckptfs/ (the real
 * mount is covered by tests/integration/test_python_binding.py).
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckptstore.h"
#include "ut.h"

static char root[] = "/tmp/ckpt-test-libckpt-XXXXXX";
static char url[300];

#define CHECK_CODE(expr, want)                                                                     \
    do {                                                                                           \
        int c_ = (expr);                                                                           \
        if (c_ == (want)) {                                                                        \
            ut_passed++;                                                                           \
        } else {                                                                                   \
            ut_failed++;                                                                           \
            fprintf(stderr, "%s:%d: %s returned %d (%s), wanted %s\n", __FILE__, __LINE__, #expr,  \
                    c_, ckpt_strerror(c_), #want);                                                 \
        }                                                                                          \
    } while (0)

static size_t read_file(const char *path, void *buf, size_t cap)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return (size_t)-1;
    ssize_t n = read(fd, buf, cap);
    close(fd);
    return n < 0 ? (size_t)-1 : (size_t)n;
}

/* Step `step` of `job`: files a (seeded by step) and sub/b, put via the engine. */
static void put_step(const char *job, uint64_t step, size_t size)
{
    char dir[400], p[450];
    snprintf(dir, sizeof dir, "%s/src-%s-%llu", root, job, (unsigned long long)step);
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/sub", dir);
    mkdir(p, 0755);
    uint8_t *buf = malloc(size);
    ut_rand_fill(buf, size, 1000 + step);
    snprintf(p, sizeof p, "%s/a", dir);
    ut_write_file(p, buf, size);
    snprintf(p, sizeof p, "%s/sub/b", dir);
    ut_write_file(p, "hello", 5);
    free(buf);

    char state[400];
    snprintf(state, sizeof state, "%s/state-put", root);
    st_store_options o = {.url = url, .state_dir = state, .node = "test-node"};
    st_store *s = NULL;
    CHECK_OK(st_store_open(&o, &s));
    if (s)
        CHECK_OK(st_store_put_dir(s, job, step, dir, NULL));
    st_store_close(s);
}

static int same_as_source(const char *job, uint64_t step, const char *dest, size_t size)
{
    char p[450];
    uint8_t *want = malloc(size), *got = malloc(size + 1);
    ut_rand_fill(want, size, 1000 + step);
    snprintf(p, sizeof p, "%s/a", dest);
    int ok = read_file(p, got, size + 1) == size && !memcmp(want, got, size);
    snprintf(p, sizeof p, "%s/sub/b", dest);
    ok = ok && read_file(p, got, size + 1) == 5 && !memcmp(got, "hello", 5);
    (void)job;
    free(want);
    free(got);
    return ok;
}

static ckpt_store *open_handle(void)
{
    char state[400];
    snprintf(state, sizeof state, "%s/state-client", root);
    ckpt_options o = {.state_dir = state};
    ckpt_store *h = NULL;
    CHECK_CODE(ckpt_open(url, &o, &h), CKPT_OK);
    if (!h)
        fprintf(stderr, "ckpt_open: %s\n", ckpt_errmsg(NULL));
    return h;
}

static void test_version_and_strings(void)
{
    CHECK(ckpt_version() == CKPT_VERSION_NUMBER);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", CKPT_VERSION_MAJOR, CKPT_VERSION_MINOR,
             CKPT_VERSION_PATCH);
    CHECK(!strcmp(ckpt_version_string(), want));
    for (int c = CKPT_OK; c <= CKPT_EUNSUPPORTED; c++)
        CHECK(ckpt_strerror(c) && *ckpt_strerror(c) &&
              strcmp(ckpt_strerror(c), "unknown error code"));
    CHECK(!strcmp(ckpt_strerror(999), "unknown error code"));
    CHECK(!strcmp(ckpt_strerror(-1), "unknown error code"));
    CHECK(ckpt_errmsg(NULL) != NULL);
}

static void test_open_errors(void)
{
    ckpt_store *h = (ckpt_store *)&h;
    CHECK_CODE(ckpt_open("ftp://nowhere/x", NULL, &h), CKPT_EINVAL);
    CHECK(h == NULL);
    CHECK(*ckpt_errmsg(NULL) != '\0');
    CHECK_CODE(ckpt_open("file://relative/dir", NULL, &h), CKPT_EINVAL);
    CHECK(h == NULL);
    CHECK_CODE(ckpt_open(url, NULL, NULL), CKPT_EINVAL);
    ckpt_close(NULL); /* no-op */
}

static void test_list_latest_restore(void)
{
    put_step("train", 10, 300000);
    put_step("train", 20, 200000);
    put_step("other", 5, 1000);
    ckpt_store *h = open_handle();
    if (!h)
        return;

    char **jobs = NULL;
    size_t njobs = 0;
    CHECK_CODE(ckpt_list_jobs(h, &jobs, &njobs), CKPT_OK);
    CHECK(njobs == 2);
    if (njobs == 2) {
        CHECK(!strcmp(jobs[0], "other"));
        CHECK(!strcmp(jobs[1], "train"));
    }
    ckpt_free_jobs(jobs, njobs);
    ckpt_free_jobs(NULL, 0);

    ckpt_step *steps = NULL;
    size_t n = 0;
    CHECK_CODE(ckpt_list_steps(h, "train", &steps, &n), CKPT_OK);
    CHECK(n == 2);
    if (n == 2) {
        CHECK(steps[0].step == 10 && steps[1].step == 20);
        CHECK(steps[0].consistent && steps[0].complete && steps[0].why[0] == '\0');
        CHECK(steps[0].files == 2 && steps[0].bytes == 300005);
        CHECK(steps[1].files == 2 && steps[1].bytes == 200005);
        CHECK(steps[0].nodes == 1);
        CHECK(steps[1].created_ns > 0);
    }
    ckpt_free_steps(steps);
    ckpt_free_steps(NULL);

    uint64_t latest = 0;
    CHECK_CODE(ckpt_latest(h, "train", &latest), CKPT_OK);
    CHECK(latest == 20);

    /* Restore a named step. */
    char dest[400];
    snprintf(dest, sizeof dest, "%s/out10", root);
    ckpt_restore_result r;
    CHECK_CODE(ckpt_restore(h, "train", 10, NULL, dest, &r), CKPT_OK);
    CHECK(r.step == 10 && r.files == 2 && r.bytes == 300005 && r.gets > 0 && !r.fell_back);
    CHECK(same_as_source("train", 10, dest, 300000));

    /* Restore the latest, with a progress callback and options. */
    ckpt_restore_options o;
    ckpt_restore_options_init(&o);
    CHECK(o.rank == -1 && !o.latest && !o.no_fallback && !o.progress);
    o.latest = 1;
    o.threads = 2;
    snprintf(dest, sizeof dest, "%s/out-latest", root);
    CHECK_CODE(ckpt_restore(h, "train", 0, &o, dest, &r), CKPT_OK);
    CHECK(r.step == 20 && r.files == 2);
    CHECK(same_as_source("train", 20, dest, 200000));

    ckpt_verify_result v;
    CHECK_CODE(ckpt_verify(h, "train", 20, &v), CKPT_OK);
    CHECK(v.files == 2 && v.bytes == 200005 && v.chunks >= 2 && v.bad_files == 0);
    CHECK_CODE(ckpt_verify(h, "train", 10, NULL), CKPT_OK);

    ckpt_stats st;
    CHECK_CODE(ckpt_stats_job(h, "train", &st), CKPT_OK);
    CHECK(st.steps == 2 && st.consistent_steps == 2 && st.logical_bytes == 500010);
    CHECK(st.stored_bytes > 0 && st.packs > 0);
    ckpt_request_counts rc;
    ckpt_requests(h, &rc);
    CHECK(rc.get > 0 && rc.list > 0 && rc.put == 0);
    ckpt_close(h);
}

static int progress_calls;
static uint64_t progress_last, progress_total;
static void on_progress(void *arg, uint64_t done, uint64_t total)
{
    (void)arg;
    progress_calls++;
    progress_last = done;
    progress_total = total;
}

static void test_progress(void)
{
    ckpt_store *h = open_handle();
    if (!h)
        return;
    ckpt_restore_options o;
    ckpt_restore_options_init(&o);
    o.progress = on_progress;
    char dest[400];
    snprintf(dest, sizeof dest, "%s/out-progress", root);
    CHECK_CODE(ckpt_restore(h, "train", 10, &o, dest, NULL), CKPT_OK);
    CHECK(progress_calls > 0);
    CHECK(progress_total == 300005 && progress_last == progress_total);
    ckpt_close(h);
}

static void test_not_found_and_invalid(void)
{
    ckpt_store *h = open_handle();
    if (!h)
        return;
    char dest[400];
    snprintf(dest, sizeof dest, "%s/out-missing", root);
    uint64_t step = 12345;

    CHECK_CODE(ckpt_latest(h, "no-such-job", &step), CKPT_ENOTFOUND);
    CHECK(step == 12345); /* untouched on failure */
    CHECK(*ckpt_errmsg(h) != '\0');
    CHECK_CODE(ckpt_restore(h, "train", 15, NULL, dest, NULL), CKPT_ENOTFOUND);
    CHECK(strstr(ckpt_errmsg(h), "15") != NULL);
    CHECK_CODE(ckpt_restore(h, "no-such-job", 10, NULL, dest, NULL), CKPT_ENOTFOUND);
    CHECK_CODE(ckpt_verify(h, "train", 15, NULL), CKPT_ENOTFOUND);

    ckpt_step *steps = NULL;
    size_t n = 7;
    CHECK_CODE(ckpt_list_steps(h, "no-such-job", &steps, &n), CKPT_OK);
    CHECK(n == 0);
    ckpt_free_steps(steps);

    CHECK_CODE(ckpt_latest(h, "", &step), CKPT_EINVAL);
    CHECK(*ckpt_errmsg(h) != '\0');
    CHECK_CODE(ckpt_latest(h, "train", NULL), CKPT_EINVAL);
    CHECK_CODE(ckpt_latest(NULL, "train", &step), CKPT_EINVAL);
    CHECK(*ckpt_errmsg(NULL) != '\0');
    CHECK_CODE(ckpt_latest(h, "../etc", &step), CKPT_EINVAL);
    CHECK_CODE(ckpt_restore(h, "train", 10, NULL, NULL, NULL), CKPT_EINVAL);
    ckpt_restore_options o;
    ckpt_restore_options_init(&o);
    o.rank = -2;
    CHECK_CODE(ckpt_restore(h, "train", 10, &o, dest, NULL), CKPT_EINVAL);
    ckpt_close(h);
}

/* Flips one byte a third into every pack of job (the file:// backend keeps
 * key "jobs/J/packs/.." as directories suffixed "@", docs/BACKENDS.md). */
static int damage_packs(const char *job)
{
    char dir[450], p[800];
    snprintf(dir, sizeof dir, "%s/store/jobs@/%s@/packs@", root, job);
    char cmd[1000];
    snprintf(cmd, sizeof cmd, "find '%s' -type f > '%s/packs.txt'", dir, root);
    if (system(cmd) != 0)
        return 0;
    snprintf(p, sizeof p, "%s/packs.txt", root);
    FILE *f = fopen(p, "r");
    int n = 0;
    char line[700];
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        int fd = open(line, O_RDWR);
        struct stat sb;
        if (fd < 0 || fstat(fd, &sb) < 0 || sb.st_size < 64) {
            if (fd >= 0)
                close(fd);
            continue;
        }
        uint8_t b;
        off_t at = sb.st_size / 3;
        if (pread(fd, &b, 1, at) == 1) {
            b ^= 0x5a;
            n += pwrite(fd, &b, 1, at) == 1;
        }
        close(fd);
    }
    if (f)
        fclose(f);
    return n;
}

static void test_corrupt_and_fallback(void)
{
    /* Job "fb": step 1 in its own packs, then step 2 whose new data is damaged. */
    put_step("fb", 1, 100000);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp -a '%s/store/jobs@/fb@/packs@' '%s/fb-packs-1'", root, root);
    CHECK(system(cmd) == 0);
    put_step("fb", 2, 150000);
    CHECK(damage_packs("fb") > 0);
    /* Restore step 1's packs intact (step 2's new packs stay damaged). */
    snprintf(cmd, sizeof cmd, "cp -a '%s/fb-packs-1/.' '%s/store/jobs@/fb@/packs@/'", root, root);
    CHECK(system(cmd) == 0);

    ckpt_store *h = open_handle();
    if (!h)
        return;
    ckpt_verify_result v;
    memset(&v, 0, sizeof v);
    CHECK_CODE(ckpt_verify(h, "fb", 2, &v), CKPT_ECORRUPT);
    CHECK(v.bad_files >= 1);
    CHECK(*ckpt_errmsg(h) != '\0');
    CHECK_CODE(ckpt_verify(h, "fb", 1, NULL), CKPT_OK);

    char dest[400];
    snprintf(dest, sizeof dest, "%s/out-fb-2", root);
    CHECK_CODE(ckpt_restore(h, "fb", 2, NULL, dest, NULL), CKPT_ECORRUPT);
    char p[450];
    snprintf(p, sizeof p, "%s/a", dest);
    CHECK(access(p, F_OK) != 0); /* nothing unverified at a real name */

    ckpt_restore_options o;
    ckpt_restore_options_init(&o);
    o.latest = 1;
    ckpt_restore_result r;
    snprintf(dest, sizeof dest, "%s/out-fb-latest", root);
    CHECK_CODE(ckpt_restore(h, "fb", 0, &o, dest, &r), CKPT_OK);
    CHECK(r.step == 1 && r.fell_back && r.failed_step == 2 && r.failure[0]);
    CHECK(same_as_source("fb", 1, dest, 100000));

    o.no_fallback = 1;
    snprintf(dest, sizeof dest, "%s/out-fb-nofallback", root);
    CHECK_CODE(ckpt_restore(h, "fb", 0, &o, dest, &r), CKPT_ECORRUPT);
    ckpt_close(h);
}

/* A plain directory standing in for a mount: MOUNT/.ckptfs/{commit,status}. */
static void test_commit_line(void)
{
    char mnt[400], p[450], got[256];
    snprintf(mnt, sizeof mnt, "%s/fake-mount", root);
    mkdir(mnt, 0755);
    CHECK_CODE(ckpt_commit(mnt, "job", 7, 0, 2), CKPT_ENOTFOUND); /* no .ckptfs */
    CHECK(strstr(ckpt_errmsg(NULL), "ckptfs") != NULL);
    snprintf(p, sizeof p, "%s/.ckptfs", mnt);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/.ckptfs/commit", mnt);
    ut_write_file(p, "", 0);
    CHECK_CODE(ckpt_commit(mnt, "job", 7, 1, 2), CKPT_OK);
    size_t n = read_file(p, got, sizeof got - 1);
    CHECK(n == 10);
    got[n == (size_t)-1 ? 0 : n] = '\0';
    CHECK(!strcmp(got, "job 7 1 2\n"));

    CHECK_CODE(ckpt_commit(mnt, "job", 7, 2, 2), CKPT_EINVAL);
    CHECK_CODE(ckpt_commit(mnt, "job", 7, -1, 2), CKPT_EINVAL);
    CHECK_CODE(ckpt_commit(mnt, "job", 7, 0, 0), CKPT_EINVAL);
    CHECK_CODE(ckpt_commit(mnt, "a job", 7, 0, 1), CKPT_EINVAL);
    CHECK_CODE(ckpt_commit(mnt, "a\njob", 7, 0, 1), CKPT_EINVAL);
    CHECK_CODE(ckpt_commit(mnt, "", 7, 0, 1), CKPT_EINVAL);
    CHECK_CODE(ckpt_commit(NULL, "job", 7, 0, 1), CKPT_EINVAL);
    CHECK(*ckpt_errmsg(NULL) != '\0');

    /* The preemption notice: "drain\n" in .ckptfs/drain, one write. */
    CHECK_CODE(ckpt_drain(mnt), CKPT_ENOTFOUND); /* no .ckptfs/drain: an older daemon */
    CHECK(strstr(ckpt_errmsg(NULL), "ckptfs") != NULL);
    snprintf(p, sizeof p, "%s/.ckptfs/drain", mnt);
    ut_write_file(p, "", 0);
    CHECK_CODE(ckpt_drain(mnt), CKPT_OK);
    n = read_file(p, got, sizeof got - 1);
    got[n == (size_t)-1 ? 0 : n] = '\0';
    CHECK(!strcmp(got, "drain\n"));
    CHECK_CODE(ckpt_drain(""), CKPT_EINVAL);
    CHECK_CODE(ckpt_drain(NULL), CKPT_EINVAL);
}

static void write_status(const char *mnt, const char *json)
{
    char p[450], tmp[460];
    snprintf(p, sizeof p, "%s/.ckptfs/status", mnt);
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    ut_write_file(tmp, json, strlen(json));
    rename(tmp, p);
}

static void test_wait_durable_parses_status(void)
{
    char mnt[400];
    snprintf(mnt, sizeof mnt, "%s/fake-mount", root);
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 7, 0), CKPT_ENOTFOUND); /* no status yet */

    write_status(mnt, "{\"node\":\"n\",\"last_error\":\"PUT jobs/x: timed out\",\"steps\":["
                      "{\"job\":\"job\",\"step\":6,\"state\":\"durable\"},"
                      "{\"job\":\"jo\\u0062\",\"step\":7,\"state\":\"uploading\",\"writers\":0},"
                      "{\"job\":\"other\",\"step\":7,\"state\":\"durable\"}]}\n");
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 6, 0), CKPT_OK);
    CHECK_CODE(ckpt_wait_durable(mnt, "other", 7, 0), CKPT_OK);
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 7, 0.2), CKPT_ETIMEDOUT);
    CHECK(strstr(ckpt_errmsg(NULL), "uploading") != NULL);
    CHECK(strstr(ckpt_errmsg(NULL), "timed out") != NULL); /* the daemon's last_error */
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 8, 0), CKPT_ETIMEDOUT);
    CHECK(strstr(ckpt_errmsg(NULL), "does not list") != NULL);

    /* Becomes durable while we wait. */
    pid_t pid = fork();
    if (pid == 0) {
        usleep(300000);
        write_status(mnt, "{\"last_error\":\"\",\"steps\":[{\"job\":\"job\",\"step\":7,"
                          "\"state\":\"durable\",\"revision\":1,\"writers\":0}]}");
        _exit(0);
    }
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 7, 10), CKPT_OK);
    waitpid(pid, NULL, 0);

    /* Hostile or broken status files: clear errors, no crash. */
    const char *bad[] = {"",
                         "{",
                         "{\"steps\":[",
                         "{\"steps\":{}}",
                         "[1,2]",
                         "{\"steps\":[1,]}",
                         "{\"steps\":[{\"job\":\"job\",\"step\":7,\"state\":\"durable\"}]} x",
                         "{\"a\":\"\\x\"}",
                         "{\"a\":01}",
                         "{\"a\":\"\x01\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_status(mnt, bad[i]);
        CHECK_CODE(ckpt_wait_durable(mnt, "job", 7, 0), CKPT_ECORRUPT);
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 99);
    deep[199] = '\0';
    write_status(mnt, deep);
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 7, 0), CKPT_ECORRUPT);
    /* A step number beyond 64 bits, or not an integer, is not our step. */
    write_status(mnt, "{\"steps\":[{\"job\":\"job\",\"step\":18446744073709551623,\"state\":"
                      "\"durable\"},{\"job\":\"job\",\"step\":7.0,\"state\":\"durable\"}]}");
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 7, 0), CKPT_ETIMEDOUT);
    /* Steps above 2^53 compare exactly: 2^53 is durable, 2^53+1 is not. */
    write_status(mnt, "{\"steps\":[{\"job\":\"job\",\"step\":9007199254740992,\"state\":"
                      "\"durable\"},{\"job\":\"job\",\"step\":9007199254740993,\"state\":"
                      "\"uploading\"}]}");
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 9007199254740993ull, 0), CKPT_ETIMEDOUT);
    CHECK(strstr(ckpt_errmsg(NULL), "step 9007199254740993 of job job") != NULL);
    CHECK(strstr(ckpt_errmsg(NULL), "uploading") != NULL);
    CHECK_CODE(ckpt_wait_durable(mnt, "job", 9007199254740992ull, 0), CKPT_OK);
    CHECK_CODE(ckpt_wait_durable(mnt, "", 7, 0), CKPT_EINVAL);
}

static void run_cases(void)
{
    RUN(test_version_and_strings);
    RUN(test_open_errors);
    RUN(test_list_latest_restore);
    RUN(test_progress);
    RUN(test_not_found_and_invalid);
    RUN(test_corrupt_and_fallback);
    RUN(test_commit_line);
    RUN(test_wait_durable_parses_status);
}

int main(void)
{
    return ut_main_tmp_store(root, url, sizeof url, run_cases);
}
