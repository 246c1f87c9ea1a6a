/*
 * test_backend_retry — the retry wrapper (store/backend/st_backend_retry.c), with no
 * network: a "flaky" test backend wraps the file:// backend and fails some
 * calls with ST_ERR_TRANSIENT, before or after doing the work, and lists that
 * break off after delivering some keys. Checks:
 *   - del_many retries only the keys whose own result was transient;
 *   - the whole conformance suite passes through retry(flaky(file)), so the
 *     retries are invisible to callers (list included: no key twice, none
 *     missing, order kept);
 *   - only ST_ERR_TRANSIENT is retried; other errors come back at once;
 *   - the number of tries and the waits follow the policy (bounded, equal
 *     jitter), and the final message says how many tries it took;
 *   - the wrapper reports the inner scheme and st_backend_open() uses it.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "backend_conformance.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "backend/st_backend_retry.h"
#include "ut.h"

/* ---- a backend that fails on purpose ---- */

typedef struct flaky {
    st_backend *inner;
    atomic_uint calls;
    unsigned every;   /* fail every n-th call (0: never) */
    int fail_all;     /* fail every call */
    st_err fail_code; /* what to fail with */
    atomic_uint failures;
    /* del_many: calls, keys they carried, keys failed on purpose */
    atomic_uint batch_calls, batch_keys, batch_key_failures;
    atomic_uint cut_streams; /* the next n streamed gets break off mid-body */
    atomic_uint fail_next;   /* the next n streamed gets fail before any byte */
} flaky;

/* Takes one from *counter if it is not 0; 1 if it did. */
static int take_one(atomic_uint *counter)
{
    unsigned n = atomic_load(counter);
    while (n && !atomic_compare_exchange_weak(counter, &n, n - 1))
        ;
    return n != 0;
}

static int flaky_should_fail(flaky *f)
{
    unsigned n = atomic_fetch_add(&f->calls, 1) + 1;
    return f->fail_all || (f->every && n % f->every == 0);
}

static st_err flaky_err(flaky *f, const char *op)
{
    atomic_fetch_add(&f->failures, 1);
    return st_seterr(f->fail_code, "flaky: injected failure of %s", op);
}

static st_err flaky_put(void *ctx, const char *key, const void *data, size_t len)
{
    flaky *f = ctx;
    int fail = flaky_should_fail(f);
    /* Half the failures happen after the work: the store has the object,
     * the caller hears "failed" (a reply lost on the way back). */
    if (fail && (atomic_load(&f->calls) & 1))
        return flaky_err(f, "put");
    st_err e = f->inner->ops->put(f->inner->ctx, key, data, len);
    return fail && !e ? flaky_err(f, "put") : e;
}

static st_err flaky_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    flaky *f = ctx;
    if (flaky_should_fail(f))
        return flaky_err(f, "get");
    return f->inner->ops->get(f->inner->ctx, key, off, len, out);
}

/* A streamed body that breaks off half way, as a connection reset does:
 * the first half of the range reaches the sink, then ST_ERR_TRANSIENT. */
static st_err cut_stream(flaky *f, const char *key, uint64_t off, uint64_t len,
                         const st_get_sink *sink)
{
    st_bytes body = {0};
    st_err e = f->inner->ops->get(f->inner->ctx, key, off, len, &body);
    if (!e && body.len / 2)
        e = sink->on_bytes(sink->arg, 0, body.data, body.len / 2);
    st_bytes_free(&body);
    return e ? e : flaky_err(f, "get_stream (mid-body)");
}

static st_err flaky_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                               const st_get_sink *sink)
{
    flaky *f = ctx;
    if (take_one(&f->fail_next))
        return flaky_err(f, "get_stream");
    if (take_one(&f->cut_streams) || flaky_should_fail(f))
        return cut_stream(f, key, off, len, sink);
    return st_get_stream(f->inner, key, off, len, sink);
}

static st_err flaky_stat(void *ctx, const char *key, uint64_t *size)
{
    flaky *f = ctx;
    if (flaky_should_fail(f))
        return flaky_err(f, "stat");
    return f->inner->ops->stat(f->inner->ctx, key, size);
}

static st_err flaky_stat_time(void *ctx, const char *key, st_store_time *t)
{
    flaky *f = ctx;
    if (flaky_should_fail(f))
        return flaky_err(f, "stat_time");
    return st_stat_time(f->inner, key, t);
}

static st_err flaky_del(void *ctx, const char *key)
{
    flaky *f = ctx;
    int fail = flaky_should_fail(f);
    st_err e = f->inner->ops->del(f->inner->ctx, key);
    return fail && !e ? flaky_err(f, "del") : e;
}

/* A batch in which keys fail one by one (before or after the work), as
 * <Error> entries of a DeleteObjects answer do. */
static st_err flaky_del_many(void *ctx, st_del_item *items, size_t n)
{
    flaky *f = ctx;
    atomic_fetch_add(&f->batch_calls, 1);
    atomic_fetch_add(&f->batch_keys, (unsigned)n);
    for (size_t i = 0; i < n; i++) {
        int fail = flaky_should_fail(f);
        if (fail && (atomic_load(&f->calls) & 1)) {
            atomic_fetch_add(&f->batch_key_failures, 1);
            items[i].err = flaky_err(f, "del_many");
            continue;
        }
        items[i].err = f->inner->ops->del(f->inner->ctx, items[i].key);
        if (fail && !items[i].err) {
            atomic_fetch_add(&f->batch_key_failures, 1);
            items[i].err = flaky_err(f, "del_many");
        }
    }
    return st_del_items_result(items, n);
}

/* A listing that breaks off after a few keys, as a connection cut between
 * pages does. */
typedef struct cut_list {
    st_list_cb cb;
    void *arg;
    unsigned left; /* keys to deliver before breaking off */
    int cut, stopped;
} cut_list;

static int cut_cb(void *arg, const char *key, uint64_t size)
{
    cut_list *c = arg;
    if (c->left == 0) {
        c->cut = 1;
        return 1;
    }
    c->left--;
    int stop = c->cb(c->arg, key, size);
    c->stopped = stop != 0;
    return stop;
}

static st_err flaky_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    flaky *f = ctx;
    if (!flaky_should_fail(f))
        return f->inner->ops->list(f->inner->ctx, prefix, cb, arg);
    cut_list c = {.cb = cb, .arg = arg, .left = atomic_load(&f->calls) % 7};
    st_err e = f->inner->ops->list(f->inner->ctx, prefix, cut_cb, &c);
    if (e || c.stopped || !c.cut)
        return e; /* the listing ended (or the caller stopped it) before the cut */
    return flaky_err(f, "list");
}

static void flaky_close(void *ctx)
{
    flaky *f = ctx;
    st_backend_close(f->inner);
    free(f);
}

static const st_backend_ops flaky_ops = {
    .scheme = "flaky",
    .put = flaky_put,
    .get = flaky_get,
    .stat = flaky_stat,
    .stat_time = flaky_stat_time,
    .list = flaky_list,
    .del = flaky_del,
    .del_many = flaky_del_many,
    .close = flaky_close,
    .get_stream = flaky_get_stream,
};

static char tdir[64];

static st_backend *flaky_open(flaky **fp, unsigned every, st_err code)
{
    st_backend *inner = NULL;
    char root[128];
    snprintf(root, sizeof root, "%s/store", tdir);
    CHECK_OK(st_backend_file_open(root, &inner));
    flaky *f = calloc(1, sizeof *f);
    f->inner = inner;
    f->every = every;
    f->fail_code = code;
    st_backend *b = malloc(sizeof *b);
    b->ops = &flaky_ops;
    b->ctx = f;
    *fp = f;
    return b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- cases ---- */

static void test_conformance_through_faults(void)
{
    flaky *f;
    st_backend *fb = flaky_open(&f, 5, ST_ERR_TRANSIENT); /* every 5th call fails */
    st_retry_policy p = {.attempts = 8, .base_ms = 1, .max_ms = 4};
    st_backend *b = NULL;
    CHECK_OK(st_backend_retry_wrap(fb, &p, &b));
    if (!b)
        return;
    CHECK(strcmp(b->ops->scheme, "flaky") == 0);
    backend_conformance_run(b, "conformance/retry");
    fprintf(stderr, "  %u injected failures, %llu retries\n", atomic_load(&f->failures),
            (unsigned long long)st_backend_retry_count(b));
    CHECK(atomic_load(&f->failures) > 100);
    /* One retry per failed call; a del_many retry resends all of its
     * batch's failed keys at once. */
    CHECK(atomic_load(&f->batch_key_failures) > 0);
    CHECK(st_backend_retry_count(b) >=
          atomic_load(&f->failures) - atomic_load(&f->batch_key_failures));
    st_backend_close(b);
}

/* A body that breaks off three times: the retries resume the range where it
 * broke off, and the sink sees every byte once, in order, as one body. An
 * error of the sink's own is not retried. */
static void test_stream_resumes_after_partial_body(void)
{
    flaky *f;
    st_backend *fb = flaky_open(&f, 0, ST_ERR_TRANSIENT);
    st_retry_policy p = {.attempts = 8, .base_ms = 1, .max_ms = 4};
    st_backend *b = NULL;
    CHECK_OK(st_backend_retry_wrap(fb, &p, &b));
    if (!b)
        return;
    const size_t size = (1u << 20) + 77;
    uint8_t *buf = malloc(size);
    ut_rand_fill(buf, size, 31);
    CHECK_OK(st_put(b, "rs/obj", buf, size));

    bc_stream c = {0};
    const st_get_sink sink = {bc_stream_on_bytes, &c};
    atomic_store(&f->cut_streams, 3);
    CHECK_OK(st_get_stream(b, "rs/obj", 5, ST_GET_TO_END, &sink));
    CHECK(!c.gap);
    CHECK(c.body.len == size - 5);
    CHECK(c.body.len == size - 5 && memcmp(c.body.data, buf + 5, size - 5) == 0);
    CHECK(c.pieces >= 4); /* three halves, then the rest */
    CHECK(st_backend_retry_count(b) == 3);

    st_bytes_clear(&c.body);
    c.pieces = 0;
    atomic_store(&f->cut_streams, 2); /* with a length: the rest is exact */
    CHECK_OK(st_get_stream(b, "rs/obj", 1000, 300000, &sink));
    CHECK(!c.gap);
    CHECK(c.body.len == 300000 && memcmp(c.body.data, buf + 1000, 300000) == 0);

    st_bytes_clear(&c.body);
    c.pieces = 0;
    c.refuse_at = 1;
    uint64_t retries = st_backend_retry_count(b);
    atomic_store(&f->cut_streams, 1);
    CHECK_ERR(st_get_stream(b, "rs/obj", 0, ST_GET_TO_END, &sink), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "bc sink") != NULL);
    CHECK(c.pieces == 1);
    CHECK(st_backend_retry_count(b) == retries);

    /* An empty range whose first try failed is still asked for: past the
     * end it is an error, at the end an empty body (a retry once took
     * "all 0 bytes delivered" for a whole body and answered ST_OK). */
    c.refuse_at = 0;
    c.pieces = 0;
    atomic_store(&f->fail_next, 1);
    CHECK_ERR(st_get_stream(b, "rs/obj", size + 10, 0, &sink), ST_ERR_INVALID);
    atomic_store(&f->fail_next, 1);
    CHECK_OK(st_get_stream(b, "rs/obj", size, 0, &sink));
    CHECK(c.pieces == 0);

    CHECK_OK(st_del(b, "rs/obj"));
    st_bytes_free(&c.body);
    free(buf);
    st_backend_close(b);
}

static void test_only_transient_is_retried(void)
{
    static const st_err codes[] = {ST_ERR_PERMANENT, ST_ERR_NOT_FOUND, ST_ERR_INVALID,
                                   ST_ERR_NOSPACE, ST_ERR_IO};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        flaky *f;
        st_backend *fb = flaky_open(&f, 0, codes[i]);
        f->fail_all = 1;
        st_backend *b = NULL;
        CHECK_OK(st_backend_retry_wrap(fb, &(st_retry_policy){.attempts = 5}, &b));
        uint64_t sz;
        CHECK_ERR(st_stat(b, "k", &sz), codes[i]);
        CHECK(atomic_load(&f->calls) == 1);
        CHECK(st_backend_retry_count(b) == 0);
        CHECK(strstr(st_errmsg(), "gave up") == NULL);
        st_backend_close(b);
    }
}

/* del_many: a retry carries only the keys that failed transiently; a
 * permanent per-key failure is final and not sent again. */
static void test_del_many_retries_failed_keys(void)
{
    enum { N = 30 };
    char keys[N][32];
    st_del_item items[N];
    for (int round = 0; round < 2; round++) {
        st_err code = round ? ST_ERR_PERMANENT : ST_ERR_TRANSIENT;
        flaky *f;
        st_backend *fb = flaky_open(&f, 3, code), *b = NULL;
        st_retry_policy p = {.attempts = 8, .base_ms = 1, .max_ms = 4};
        CHECK_OK(st_backend_retry_wrap(fb, &p, &b));
        if (!b)
            return;
        for (int i = 0; i < N; i++) {
            snprintf(keys[i], sizeof keys[i], "dmr/k%02d", i);
            CHECK_OK(f->inner->ops->put(f->inner->ctx, keys[i], "x", 1));
            items[i] = (st_del_item){.key = keys[i]};
        }
        st_err e = st_del_many(b, items, N);
        unsigned failed = 0, gone = 0;
        uint64_t sz;
        for (int i = 0; i < N; i++) {
            failed += items[i].err != ST_OK;
            gone += f->inner->ops->stat(f->inner->ctx, keys[i], &sz) == ST_ERR_NOT_FOUND;
        }
        unsigned calls = atomic_load(&f->batch_calls), carried = atomic_load(&f->batch_keys);
        unsigned injected = atomic_load(&f->batch_key_failures);
        fprintf(stderr, "  %s: %u calls carried %u keys, %u key failures injected\n",
                round ? "permanent" : "transient", calls, carried, injected);
        CHECK(injected > 0);
        if (!round) {
            CHECK_OK(e);
            CHECK(failed == 0 && gone == N);
            CHECK(calls > 1 && carried == N + injected); /* each failure sent once more */
        } else {
            CHECK_ERR(e, ST_ERR_PERMANENT);
            CHECK(calls == 1 && carried == N && failed == injected);
        }
        st_backend_close(b);
        /* What a permanent round left behind. */
        st_backend *file = NULL;
        char root[128];
        snprintf(root, sizeof root, "%s/store", tdir);
        CHECK_OK(st_backend_file_open(root, &file));
        for (int i = 0; file && i < N; i++)
            CHECK_OK(st_del(file, keys[i]));
        st_backend_close(file);
    }
}

static void test_bounded_backoff(void)
{
    flaky *f;
    st_backend *fb = flaky_open(&f, 0, ST_ERR_TRANSIENT);
    f->fail_all = 1;
    /* Waits: d = 40, 80, 160, 160 ms nominal; each between d/2 and d. */
    st_retry_policy p = {.attempts = 5, .base_ms = 40, .max_ms = 160};
    st_backend *b = NULL;
    CHECK_OK(st_backend_retry_wrap(fb, &p, &b));
    st_bytes got = {0};
    double t0 = now_s();
    CHECK_ERR(st_get(b, "k", 0, ST_GET_TO_END, &got), ST_ERR_TRANSIENT);
    double dt = now_s() - t0;
    fprintf(stderr, "  5 tries took %.3f s: %s\n", dt, st_errmsg());
    CHECK(atomic_load(&f->calls) == 5);
    CHECK(st_backend_retry_count(b) == 4);
    /* The lower bound is the backoff itself; the upper one only catches a
     * runaway wait (an uncapped backoff would take seconds more), with
     * room for a loaded machine's late wake-ups (a 0.3 s margin failed
     * under a full parallel test run). */
    CHECK(dt >= (20 + 40 + 80 + 80) / 1000.0 && dt < (40 + 80 + 160 + 160) / 1000.0 + 2.0);
    CHECK(strstr(st_errmsg(), "gave up after 5 tries") != NULL);
    CHECK(strstr(st_errmsg(), "flaky: injected failure of get") != NULL);
    CHECK(got.len == 0);
    st_backend_close(b);
    st_bytes_free(&got);

    /* attempts = 1: no retry at all, and the message is the backend's own. */
    fb = flaky_open(&f, 0, ST_ERR_TRANSIENT);
    f->fail_all = 1;
    CHECK_OK(st_backend_retry_wrap(fb, &(st_retry_policy){.attempts = 1}, &b));
    CHECK_ERR(st_del(b, "k"), ST_ERR_TRANSIENT);
    CHECK(atomic_load(&f->calls) == 1);
    CHECK(strstr(st_errmsg(), "gave up") == NULL);
    st_backend_close(b);
}

static void test_open_wraps(void)
{
    char url[128];
    snprintf(url, sizeof url, "file://%s/store", tdir);
    st_backend *b = NULL;
    CHECK_OK(st_backend_open(url, &b));
    if (!b)
        return;
    CHECK(strcmp(b->ops->scheme, "file") == 0);
    CHECK_OK(st_put(b, "wrapped", "w", 1));
    CHECK(st_backend_retry_count(b) == 0);
    CHECK_OK(st_del(b, "wrapped"));
    st_backend_close(b);
    CHECK_ERR(st_backend_retry_wrap(NULL, NULL, &b), ST_ERR_INVALID);
    CHECK(b == NULL);
}

int main(void)
{
    snprintf(tdir, sizeof tdir, "/tmp/ckpt-retry-XXXXXX");
    if (!mkdtemp(tdir)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_conformance_through_faults);
    RUN(test_stream_resumes_after_partial_body);
    RUN(test_only_transient_is_retried);
    RUN(test_del_many_retries_failed_keys);
    RUN(test_bounded_backoff);
    RUN(test_open_wraps);
    ut_rmtree(tdir);
    return ut_finish();
}
