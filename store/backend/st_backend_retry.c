/*
 * st_backend_retry — retries ST_ERR_TRANSIENT from a wrapped backend with
 * bounded, exponentially growing, jittered waits (st_backend_retry.h).
 *
 * Policy: try k (k = 1..attempts-1) that fails transiently is followed by a
 * wait of d/2 + random(0, d/2) ms, d = min(max_ms, base_ms * 2^(k-1)).
 * "Equal jitter" rather than "full jitter" (random(0, d)): it still spreads
 * many clients that failed together, yet guarantees at least half of the
 * nominal wait, so the time a policy rides out is predictable (the outage
 * test relies on that: docs/S3.md).
 *
 * Why each op is safe to repeat:
 *   put   replaces the whole object; a try that failed after the store took
 *         it just stores the same bytes again.
 *   get   the inner backend clears out on every error (st_backend.h), so a
 *         retry starts from an empty buffer.
 *   get_stream   bytes already handed to the caller's sink stay handed: a
 *         retry asks for the rest of the range only, from the offset where
 *         the body broke off, and the wrapper's sink shifts the pieces so
 *         the caller sees one contiguous body, each byte once (a restarted
 *         range would need a sink that can forget; resuming needs none).
 *         An error from the caller's own sink ends the call unretried.
 *   stat, del   idempotent.
 *   del_many    idempotent per key; a retry carries only the keys whose
 *         result was transient (a whole request that failed left all of
 *         them so), so a key deleted or refused for good is not sent again.
 *   list  a retry lists again from the start, and the wrapper's callback
 *         drops every key <= the last one already delivered. Listings are
 *         ascending, so the caller sees each key once, in order, as if the
 *         listing never failed. A caller's stop (non-zero from cb) ends the
 *         inner listing with ST_OK, so it is never retried.
 *
 * With CKPT_RETRY_TRACE set in the environment, every retry is told to the
 * observer's log (op message, try number, wait): how an operator sees a
 * flaky store, in the daemon's log or on ckptctl's stderr.
 *
 * The policy's observer (st_backend.h) hears every try's result as it
 * happens, so a mount can say "the store is unreachable" after the first
 * failed try instead of after the last one (a minute later); and it may stop
 * the retries: asked before each wait and every WAIT_SLICE_MS of it, so a
 * caller with a deadline (a mount starting, an unmount past its drain) is
 * never held by the backoff.
 *
 * The final error keeps the inner backend's message and says how many tries
 * and how long it took; messages never carry credentials because the inner
 * backend's never do.
 *
 * Threads: no shared mutable state besides the atomic retry counter; the
 * jitter generator is per thread. Sleeps happen on the calling thread.
 */
#include "backend/st_backend_retry.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct retry_ctx {
    st_backend_ops ops; /* our table, with the inner scheme; b->ops points here */
    st_backend *inner;
    st_retry_policy policy;   /* defaults applied */
    _Atomic uint64_t retries; /* total waits taken, for st_backend_retry_count() */
    int trace;                /* CKPT_RETRY_TRACE set: each retry is told to the observer's log */
} retry_ctx;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* xorshift64* per thread, seeded from the clock and the thread's address:
 * jitter only has to differ between threads and processes, not be secure. */
static uint64_t jitter_rand(void)
{
    static _Thread_local uint64_t s;
    if (!s) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        s = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&s ^
            (uint64_t)pthread_self();
        if (!s)
            s = 0x9e3779b97f4a7c15ull;
    }
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1DULL;
}

/* How often a wait asks the observer whether to stop. */
#define WAIT_SLICE_MS 50

static void sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Sleeps ms in slices, returning 1 early when the observer says stop. */
static int wait_or_stop(const st_backend_observer *o, uint64_t ms)
{
    for (uint64_t slept = 0; slept < ms; slept += WAIT_SLICE_MS) {
        if (st_backend_observer_stops(o))
            return 1;
        uint64_t left = ms - slept;
        sleep_ms(left < WAIT_SLICE_MS ? left : WAIT_SLICE_MS);
    }
    return st_backend_observer_stops(o);
}

/* The wait after the k-th failed try (k >= 1). */
static uint64_t backoff_ms(const st_retry_policy *p, unsigned k)
{
    uint64_t d = p->base_ms;
    for (unsigned i = 1; i < k && d < p->max_ms; i++)
        d *= 2;
    if (d > p->max_ms)
        d = p->max_ms;
    uint64_t half = d / 2;
    return (d - half) + (half ? jitter_rand() % (half + 1) : 0);
}

/*
 * Decides after a try: returns 1 to try again (having slept), 0 to return e.
 * On giving up after retries, rewrites the message to say so.
 */
static int retry_again(retry_ctx *c, st_err e, unsigned tries, uint64_t t0)
{
    const st_backend_observer *o = c->policy.observer;
    if (o && o->on_try)
        o->on_try(o->arg, e, tries);
    if (e != ST_ERR_TRANSIENT)
        return 0;
    const char *why = NULL;
    uint64_t wait = 0;
    if (tries >= c->policy.attempts) {
        why = "gave up";
    } else if (st_backend_observer_stops(o)) {
        why = "stopped";
    } else {
        wait = backoff_ms(&c->policy, tries);
        if (c->trace) /* the message is secret-free (see the header comment) */
            st_backend_observer_logf(o, "ckpt retry: try %u failed, next in %llu ms: %s", tries,
                                     (unsigned long long)wait, st_errmsg());
        atomic_fetch_add_explicit(&c->retries, 1, memory_order_relaxed);
        if (!wait_or_stop(o, wait))
            return 1;
        why = "stopped waiting";
    }
    /* The inner message stays (st_errmsg is per thread, untouched by the
     * wait); a retried call says how long it tried. */
    if (tries > 1 || strcmp(why, "gave up") != 0) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_errmsg());
        st_seterr(e, "%s (%s after %u tries in %.1f s)", msg, why, tries,
                  (double)(now_ms() - t0) / 1000.0);
    }
    return 0;
}

/* put and put_new: the same body sent again after a transient failure.
 * A create whose first answer was lost meets its own object on the next
 * try (ST_ERR_EXISTS): not retried, the caller judges it (st_put_once). */
static st_err retry_put_with(retry_ctx *c,
                             st_err (*put)(void *ctx, const char *key, const void *data,
                                           size_t len),
                             const char *key, const void *data, size_t len)
{
    uint64_t t0 = now_ms();
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        e = put(c->inner->ctx, key, data, len);
    } while (retry_again(c, e, tries, t0));
    return e;
}

static st_err retry_put(void *ctx, const char *key, const void *data, size_t len)
{
    retry_ctx *c = ctx;
    return retry_put_with(c, c->inner->ops->put, key, data, len);
}

static st_err retry_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    retry_ctx *c = ctx;
    return retry_put_with(c, c->inner->ops->put_new, key, data, len);
}

static st_err retry_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    retry_ctx *c = ctx;
    uint64_t t0 = now_ms();
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        st_bytes_clear(out);
        e = c->inner->ops->get(c->inner->ctx, key, off, len, out);
    } while (retry_again(c, e, tries, t0));
    if (e)
        st_bytes_clear(out);
    return e;
}

/* Resumes a streamed GET after a retry: see the header comment. */
typedef struct stream_resume {
    const st_get_sink *sink; /* the caller's */
    uint64_t delivered;      /* bytes of the range the caller's sink has taken */
    int sink_failed;         /* the caller's sink refused: its error is final */
} stream_resume;

static st_err resume_on_bytes(void *arg, uint64_t at, const uint8_t *data, size_t len)
{
    stream_resume *r = arg;
    (void)at; /* relative to this try's range; the caller's offset is delivered */
    st_err e = r->sink->on_bytes(r->sink->arg, r->delivered, data, len);
    if (e) {
        r->sink_failed = 1;
        return e;
    }
    r->delivered += len;
    return ST_OK;
}

static st_err retry_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                               const st_get_sink *sink)
{
    retry_ctx *c = ctx;
    uint64_t t0 = now_ms();
    stream_resume r = {.sink = sink};
    const st_get_sink resume = {resume_on_bytes, &r};
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        /* The body was whole when the last try failed. Not for an empty
         * range: nothing delivered proves nothing, and past the end it is
         * an error the backend must still be asked for. */
        if (tries > 1 && len != ST_GET_TO_END && len && r.delivered == len)
            return ST_OK;
        uint64_t rest = len == ST_GET_TO_END ? len : len - r.delivered;
        e = st_get_stream(c->inner, key, off + r.delivered, rest, &resume);
    } while (!r.sink_failed && retry_again(c, e, tries, t0));
    return e;
}

static st_err retry_stat(void *ctx, const char *key, uint64_t *size)
{
    retry_ctx *c = ctx;
    uint64_t t0 = now_ms();
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        e = c->inner->ops->stat(c->inner->ctx, key, size);
    } while (retry_again(c, e, tries, t0));
    return e;
}

static st_err retry_stat_time(void *ctx, const char *key, st_store_time *t)
{
    retry_ctx *c = ctx;
    uint64_t t0 = now_ms();
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        e = st_stat_time(c->inner, key, t);
    } while (retry_again(c, e, tries, t0));
    return e;
}

/* Resumes a listing after a retry: see the header comment. */
typedef struct list_resume {
    st_list_cb cb;
    void *arg;
    int have_last;
    char last[ST_KEY_MAX + 1];
} list_resume;

static int resume_cb(void *arg, const char *key, uint64_t size)
{
    list_resume *r = arg;
    if (r->have_last && strcmp(key, r->last) <= 0)
        return 0; /* delivered before the retry */
    size_t n = strlen(key);
    if (n > ST_KEY_MAX) /* cannot happen for a conforming backend; never overflow */
        n = ST_KEY_MAX;
    memcpy(r->last, key, n);
    r->last[n] = '\0';
    r->have_last = 1;
    return r->cb(r->arg, key, size);
}

static st_err retry_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    retry_ctx *c = ctx;
    uint64_t t0 = now_ms();
    list_resume r = {.cb = cb, .arg = arg};
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        e = c->inner->ops->list(c->inner->ctx, prefix, resume_cb, &r);
    } while (retry_again(c, e, tries, t0));
    return e;
}

static st_err retry_del(void *ctx, const char *key)
{
    retry_ctx *c = ctx;
    uint64_t t0 = now_ms();
    st_err e;
    unsigned tries = 0;
    do {
        tries++;
        e = c->inner->ops->del(c->inner->ctx, key);
    } while (retry_again(c, e, tries, t0));
    return e;
}

static st_err retry_del_many(void *ctx, st_del_item *items, size_t n)
{
    retry_ctx *c = ctx;
    /* todo: the items still to delete, copies of items[idx[i]]. */
    st_del_item *todo = malloc(n * sizeof *todo);
    size_t *idx = malloc(n * sizeof *idx);
    if (!todo || !idx) {
        free(todo);
        free(idx);
        return st_seterr(ST_ERR_NOMEM, "del_many: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        todo[i] = items[i];
        idx[i] = i;
    }
    uint64_t t0 = now_ms();
    size_t m = n;
    unsigned tries = 0;
    do {
        tries++;
        c->inner->ops->del_many(c->inner->ctx, todo, m);
        size_t left = 0;
        for (size_t i = 0; i < m; i++) {
            items[idx[i]].err = todo[i].err;
            if (todo[i].err == ST_ERR_TRANSIENT) {
                todo[left] = todo[i];
                idx[left++] = idx[i];
            }
        }
        m = left;
        /* Tried again while some key failed transiently, even when the
         * batch's first failure is permanent: that key's result is final. */
    } while (m && retry_again(c, ST_ERR_TRANSIENT, tries, t0));
    free(todo);
    free(idx);
    return st_del_items_result(items, n);
}

static void retry_close(void *ctx)
{
    retry_ctx *c = ctx;
    if (!c)
        return;
    st_backend_close(c->inner);
    free(c);
}

static const st_backend_ops retry_ops_template = {
    .scheme = "retry", /* replaced by the inner scheme per instance */
    .put = retry_put,
    .get = retry_get,
    .get_stream = retry_get_stream,
    .stat = retry_stat,
    .stat_time = retry_stat_time,
    .put_new = retry_put_new,
    .list = retry_list,
    .del = retry_del,
    .del_many = retry_del_many,
    .close = retry_close,
};

st_err st_backend_retry_wrap(st_backend *inner, const st_retry_policy *policy, st_backend **out)
{
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_retry_wrap: out is NULL");
    *out = NULL;
    if (!inner || !inner->ops)
        return st_seterr(ST_ERR_INVALID, "st_backend_retry_wrap: no backend to wrap");
    retry_ctx *c = calloc(1, sizeof *c);
    st_backend *b = malloc(sizeof *b);
    if (!c || !b) {
        free(c);
        free(b);
        return st_seterr(ST_ERR_NOMEM, "st_backend_retry_wrap: out of memory");
    }
    /* del_many only over a store with batch requests; without, st_del_many
     * loops over retry_del, which retries each key on its own. */
    c->ops = st_backend_ops_masked(&retry_ops_template, inner);
    c->ops.scheme = inner->ops->scheme;
    c->inner = inner;
    c->policy = policy ? *policy : (st_retry_policy){0};
    if (!c->policy.attempts)
        c->policy.attempts = ST_RETRY_DEFAULT_ATTEMPTS;
    if (!c->policy.base_ms)
        c->policy.base_ms = ST_RETRY_DEFAULT_BASE_MS;
    if (!c->policy.max_ms)
        c->policy.max_ms = ST_RETRY_DEFAULT_MAX_MS;
    if (c->policy.max_ms < c->policy.base_ms)
        c->policy.max_ms = c->policy.base_ms;
    atomic_init(&c->retries, 0);
    c->trace = getenv("CKPT_RETRY_TRACE") != NULL;
    b->ops = &c->ops;
    b->ctx = c;
    *out = b;
    return ST_OK;
}

uint64_t st_backend_retry_count(const st_backend *b)
{
    if (!b || !b->ops || b->ops->put != retry_put)
        return 0;
    retry_ctx *c = b->ctx;
    return atomic_load_explicit(&c->retries, memory_order_relaxed);
}
