/*
 * test_fs_metrics — the Prometheus renderer (fs/fs_metrics.c) and the
 * figures it renders (st_vfs_get_stats, the request counts of
 * st_backend_count).
 *
 * The renderer's text is compared with the golden file
 * tests/golden/metrics_v1.prom (UPDATE_GOLDEN=1 rewrites it): a change of a
 * metric's name or meaning breaks dashboards, so it must be deliberate
 * (docs/METRICS.md). Label values with a quote, a backslash and a newline
 * stay one sample on one line.
 */
#include "vfs_harness.h"
#include "ut_format.h"

#include "backend/st_backend_count.h"
#include "fs_metrics.h"

#define VH_JOB "job"

/* Figures with a distinct value each, so a swapped field shows. */
static void fixed_stats(st_vfs_stats *s, st_vfs_job_stats *jobs)
{
    memset(s, 0, sizeof *s);
    s->pending_bytes = 1001;
    s->staged_bytes = 1002;
    s->staging_cap = 1003;
    s->queue = 4;
    s->uploaded_bytes = 1005;
    s->new_raw_bytes = 1006;
    s->stored_bytes = 1007;
    s->chunks = 8;
    s->new_chunks = 9;
    s->bundles = 21;
    s->bundled_files = 22;
    s->uploads = 10;
    s->upload_failures = 11;
    s->upload_seconds = 12.5;
    for (int k = 0; k < ST_VFS_REQ_KINDS; k++)
        for (int r = 0; r < ST_VFS_REQ_RESULTS; r++)
            s->requests[k][r] = (uint64_t)(100 + 10 * k + r);
    s->retries = 13;
    s->gc_runs = 14;
    s->gc_running = 1;
    s->gc_steps_deleted = 15;
    s->gc_objects_deleted = 16;
    s->gc_bytes_freed = 17;
    s->deleted_steps = 18;
    s->deleted_bytes_freed = 19;
    s->errors = 20;
    s->last_error_unix_ns = 1764633600123456789ll; /* 2025-12-02 00:00:00.123 UTC */
    memset(jobs, 0, 2 * sizeof *jobs);
    snprintf(jobs[0].name, sizeof jobs[0].name, "llama-ft");
    snprintf(jobs[1].name, sizeof jobs[1].name, "bert");
    for (int st = 0; st < ST_VFS_STEP_STATES; st++) {
        jobs[0].steps[st] = (uint64_t)(st + 1);
        jobs[1].steps[st] = (uint64_t)(st * 2);
    }
    s->jobs = jobs;
    s->njobs = 2;
}

static void test_golden(void)
{
    st_vfs_stats s;
    st_vfs_job_stats jobs[2];
    fixed_stats(&s, jobs);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fs_metrics_render(&s, "0.1.0", &text, &len));
    CHECK(text && strlen(text) == len);
    if (text)
        ut_golden_check("metrics_v1.prom", (const uint8_t *)text, len);
    free(text);
}

/* Every line is a comment or "name[{labels}] value": a raw newline in a
 * label would start a line that is neither. */
static int lines_well_formed(const char *text)
{
    for (const char *line = text; *line;) {
        size_t n = strcspn(line, "\n");
        int ok = line[0] == '#' || (n > 8 && !strncmp(line, "ckptfs_", 7));
        if (!ok || line[n] != '\n') {
            fprintf(stderr, "bad line: %.*s\n", (int)n, line);
            return 0;
        }
        line += n + 1;
    }
    return 1;
}

static void test_label_escaping(void)
{
    st_vfs_stats s;
    st_vfs_job_stats jobs[2];
    fixed_stats(&s, jobs);
    snprintf(jobs[0].name, sizeof jobs[0].name, "a\"b\\c\nd");
    s.njobs = 1;
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fs_metrics_render(&s, "1.0\"x\n", &text, &len));
    CHECK(text && strstr(text, "ckptfs_steps{job=\"a\\\"b\\\\c\\nd\",state=\"durable\"} 5\n"));
    CHECK(text && strstr(text, "ckptfs_build_info{version=\"1.0\\\"x\\n\"} 1\n"));
    CHECK(text && lines_well_formed(text));
    free(text);
}

/* The request counter counts each call once with its result. */
static void test_request_results(void)
{
    st_backend *mem = NULL, *counted = NULL;
    st_backend_counts c;
    memset(&c, 0, sizeof c);
    CHECK_OK(st_backend_mem_open(&mem));
    CHECK_OK(st_backend_count_borrow(mem, &c, &counted));
    if (!counted) {
        st_backend_close(mem);
        return;
    }
    st_bytes got = {0};
    CHECK_OK(st_put(counted, "a/key", "x", 1));
    CHECK_OK(st_get(counted, "a/key", 0, UINT64_MAX, &got));
    CHECK_ERR(st_get(counted, "a/missing", 0, UINT64_MAX, &got), ST_ERR_NOT_FOUND);
    CHECK(atomic_load(&c.n[ST_REQ_PUT][ST_REQ_OK]) == 1);
    CHECK(atomic_load(&c.n[ST_REQ_GET][ST_REQ_OK]) == 1);
    CHECK(atomic_load(&c.n[ST_REQ_GET][ST_REQ_NOT_FOUND]) == 1);
    CHECK(st_backend_counts_of(&c, ST_REQ_GET) == 2);
    st_backend_close(counted); /* borrowed: mem stays open */
    CHECK_OK(st_get(mem, "a/key", 0, UINT64_MAX, &got));
    st_bytes_free(&got);
    st_backend_close(mem);
}

/* The figures move as a step is written and uploaded; without a renderer
 * the metrics file does not exist. */
static void test_vfs_stats_move(void)
{
    st_backend *store = NULL;
    vh_mount a;
    CHECK_OK(st_backend_mem_open(&store));
    CHECK_OK(vh_mount_open(&a, store, "n1", "a", 1));
    if (!a.v) {
        st_backend_close(store);
        return;
    }
    CHECK(!vh_exists(&a, ".ckptfs/metrics"));
    st_vfs_stats before, after;
    CHECK_OK(st_vfs_get_stats(a.v, &before));
    CHECK(before.uploaded_bytes == 0 && before.uploads == 0);
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/step-000001"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/model.bin", "weights", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK_OK(st_vfs_get_stats(a.v, &after));
    CHECK(after.uploaded_bytes == strlen("weights"));
    CHECK(after.new_raw_bytes == strlen("weights"));
    CHECK(after.stored_bytes > 0);
    CHECK(after.uploads == 1 && after.upload_failures == 0);
    CHECK(after.requests[ST_REQ_PUT][ST_REQ_OK] > before.requests[ST_REQ_PUT][ST_REQ_OK]);
    CHECK(after.njobs == 1);
    if (after.njobs == 1) {
        CHECK(!strcmp(after.jobs[0].name, VH_JOB));
        CHECK(after.jobs[0].steps[ST_VFS_STEP_DURABLE] == 1);
        CHECK(after.jobs[0].steps[ST_VFS_STEP_WRITING] == 0);
    }
    CHECK(after.errors == 0 && after.last_error_unix_ns == 0);
    st_vfs_stats_free(&before);
    st_vfs_stats_free(&after);
    vh_mount_close(&a);
    st_backend_close(store);
}

static uint64_t upload_failures(st_vfs *v)
{
    st_vfs_stats s;
    uint64_t n = st_vfs_get_stats(v, &s) ? 0 : s.upload_failures;
    st_vfs_stats_free(&s);
    return n;
}

/* A store that refuses the step's packs: the failed upload tries, the
 * PUTs that failed as transient, the error count and its time all show;
 * none of it counts as uploaded. */
static void test_vfs_stats_errors(void)
{
    st_backend *store = NULL;
    vh_mount a;
    CHECK_OK(st_backend_mem_open(&store));
    CHECK_OK(vh_mount_open_fault(&a, store, "n1", "a", 1, "fail_key=.pack"));
    if (!a.v) {
        st_backend_close(store);
        return;
    }
    int64_t t0 = st_now_ns();
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/step-000001"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/model.bin", "weights", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/.ckpt-complete", "", VH_PID_A));
    CHECK(VH_WAIT(upload_failures(a.v) > 0, 10));
    st_vfs_stats s;
    CHECK_OK(st_vfs_get_stats(a.v, &s));
    CHECK(s.upload_failures >= 1 && s.uploads == 0 && s.uploaded_bytes == 0);
    CHECK(s.errors >= 1);
    CHECK(s.last_error_unix_ns >= t0 && s.last_error_unix_ns <= st_now_ns());
    CHECK(s.requests[ST_REQ_PUT][ST_REQ_TRANSIENT] >= 1);
    CHECK(s.njobs == 1 && s.jobs[0].steps[ST_VFS_STEP_DURABLE] == 0);
    char *text = NULL;
    size_t len = 0;
    CHECK_OK(fs_metrics_render(&s, "0.1.0", &text, &len));
    CHECK(text && strstr(text, "ckptfs_store_requests_total{kind=\"put\",result=\"transient\"} "));
    CHECK(text && !strstr(text, "ckptfs_last_error_timestamp_seconds 0.000000\n"));
    free(text);
    st_vfs_stats_free(&s);
    vh_mount_close(&a);
    st_backend_close(store);
}

int main(void)
{
    if (vh_setup("fsmetrics"))
        return 1;
    RUN(test_golden);
    RUN(test_label_escaping);
    RUN(test_request_results);
    RUN(test_vfs_stats_move);
    RUN(test_vfs_stats_errors);
    vh_teardown();
    return ut_finish();
}
