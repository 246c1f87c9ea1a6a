/*
 * backend_conformance.h — the conformance suite every st_backend must pass.
 *
 * A backend's unit test opens an instance and calls
 *     backend_conformance_run(b, "some/scratch-prefix");
 * The suite goes only through the public st_backend API (st_put, st_get,
 * st_get_stream, st_stat, st_list, st_del, st_del_many), so the same cases run against file://,
 * against s3:// on s3rver, and against any wrapper (retry, fault injection).
 *
 * Scope: every key the suite writes lives under "<scratch_prefix>/", so it
 * can run in a shared bucket; each case deletes what it wrote, and the last
 * case checks that nothing is left under the prefix. Expected results are
 * always computed (strcmp order, filters over the written set, regenerated
 * payloads), never hard-coded, so a wrong backend fails.
 *
 * Threads: the cases run on the caller's thread, except the concurrency case,
 * which starts 4 threads; those report failures through their own counters
 * (ut.h's counters are not thread-safe) and the caller's thread CHECKs them.
 * State between cases lives in the bc_ statics below, because RUN() takes
 * functions without arguments.
 */
#ifndef BACKEND_CONFORMANCE_H
#define BACKEND_CONFORMANCE_H

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/st_backend.h"
#include "ut.h"

static st_backend *bc_b;     /* the backend under test */
static char bc_scratch[256]; /* the caller's scratch prefix, a valid key */

/* A key buffer large enough for over-long keys built on purpose. */
typedef struct bc_key {
    char s[ST_KEY_MAX + 256];
} bc_key;

/* "<scratch>/<fmt...>" into kb; returns kb->s. */
static inline const char *bc_k(bc_key *kb, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline const char *bc_k(bc_key *kb, const char *fmt, ...)
{
    int n = snprintf(kb->s, sizeof kb->s, "%s/", bc_scratch);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kb->s + n, sizeof kb->s - (size_t)n, fmt, ap);
    va_end(ap);
    return kb->s;
}

/* ---- listing helpers ---- */

typedef struct bc_listed {
    char **keys;
    uint64_t *sizes;
    size_t n, cap;
    size_t stop_after; /* 0: never stop */
    size_t calls;
} bc_listed;

static inline int bc_collect(void *arg, const char *key, uint64_t size)
{
    bc_listed *l = arg;
    l->calls++;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->keys = realloc(l->keys, l->cap * sizeof *l->keys);
        l->sizes = realloc(l->sizes, l->cap * sizeof *l->sizes);
        if (!l->keys || !l->sizes)
            abort();
    }
    l->keys[l->n] = strdup(key);
    l->sizes[l->n++] = size;
    return l->stop_after && l->calls >= l->stop_after;
}

static inline void bc_listed_free(bc_listed *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i]);
    free(l->keys);
    free(l->sizes);
    memset(l, 0, sizeof *l);
}

/* 1 if listing prefix (a full key prefix) succeeds and gives exactly key, or
 * nothing when key is NULL; a failed listing is a failed CHECK_OK here. */
static inline int bc_lists_only(const char *prefix, const char *key)
{
    bc_listed l = {0};
    CHECK_OK(st_list(bc_b, prefix, bc_collect, &l));
    int ok = key ? l.n == 1 && strcmp(l.keys[0], key) == 0 : l.n == 0;
    bc_listed_free(&l);
    return ok;
}

static inline int bc_strcmp_p(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 1 if the listing is strictly ascending in byte order. */
static inline int bc_ascending(const bc_listed *l)
{
    for (size_t i = 1; i < l->n; i++)
        if (strcmp(l->keys[i - 1], l->keys[i]) >= 0)
            return 0;
    return 1;
}

/* Deletes every key under "<scratch>/<sub>"; returns how many it found. */
static inline size_t bc_del_prefix(const char *sub)
{
    bc_key p;
    bc_listed l = {0};
    CHECK_OK(st_list(bc_b, bc_k(&p, "%s", sub), bc_collect, &l));
    for (size_t i = 0; i < l.n; i++)
        CHECK_OK(st_del(bc_b, l.keys[i]));
    size_t n = l.n;
    bc_listed_free(&l);
    return n;
}

/* ---- cases ---- */

/* Put then get whole objects of awkward sizes, including empty and > 4 MiB. */
static inline void bc_case_roundtrip(void)
{
    static const size_t sizes[] = {0, 1, 4097, 5u << 20};
    st_bytes got = {0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        uint8_t *buf = malloc(n ? n : 1);
        ut_rand_fill(buf, n, 1000 + n);
        bc_key k;
        bc_k(&k, "rt/obj-%zu", n);
        CHECK_OK(st_put(bc_b, k.s, buf, n));
        CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
        CHECK(got.len == n);
        CHECK(got.len == n && (n == 0 || memcmp(got.data, buf, n) == 0));
        CHECK_OK(st_get(bc_b, k.s, 0, n, &got));
        CHECK(got.len == n && (n == 0 || memcmp(got.data, buf, n) == 0));
        uint64_t sz = UINT64_MAX;
        CHECK_OK(st_stat(bc_b, k.s, &sz));
        CHECK(sz == n);
        CHECK_OK(st_del(bc_b, k.s));
        free(buf);
    }
    st_bytes_free(&got);
}

/* A second put replaces the object entirely, also by a shorter or empty one. */
static inline void bc_case_overwrite(void)
{
    const size_t na = 100000, nb = 777;
    uint8_t *a = malloc(na), *b = malloc(nb);
    ut_rand_fill(a, na, 11);
    ut_rand_fill(b, nb, 12);
    bc_key k;
    bc_k(&k, "ow/x");
    st_bytes got = {0};
    uint64_t sz = 0;

    CHECK_OK(st_put(bc_b, k.s, a, na));
    CHECK_OK(st_put(bc_b, k.s, b, nb));
    CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == nb && memcmp(got.data, b, nb) == 0);
    CHECK_OK(st_stat(bc_b, k.s, &sz));
    CHECK(sz == nb);

    CHECK_OK(st_put(bc_b, k.s, NULL, 0));
    CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == 0);
    CHECK_OK(st_stat(bc_b, k.s, &sz));
    CHECK(sz == 0);

    CHECK_OK(st_put(bc_b, k.s, a, na));
    CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == na && memcmp(got.data, a, na) == 0);

    CHECK_OK(st_del(bc_b, k.s));
    st_bytes_free(&got);
    free(a);
    free(b);
}

/* One of bc_case_put_new's racing creators. */
typedef struct bc_creator {
    const char *key;
    char body[16];
    st_err e;
} bc_creator;

static inline void *bc_create_main(void *arg)
{
    bc_creator *c = arg;
    c->e = st_put_new(bc_b, c->key, c->body, strlen(c->body));
    return NULL;
}

/* put_new is a create: a second one answers ST_ERR_EXISTS and leaves the
 * object as it was, and of creates racing for one key exactly one lands.
 * A store without one answers ST_ERR_UNSUPPORTED and writes nothing, and
 * st_put_once then stores with a plain PUT. st_put_once judges an existing
 * object by kind: named by content is the same bytes; compared, other
 * bytes are ST_ERR_BUSY. */
static inline void bc_case_put_new(void)
{
    bc_key k;
    bc_k(&k, "pn/x");
    st_bytes got = {0};
    uint64_t sz = 1;
    int created = -1;
    st_err e = st_put_new(bc_b, k.s, "first", 5);
    if (e == ST_ERR_UNSUPPORTED) {
        CHECK_ERR(st_stat(bc_b, k.s, &sz), ST_ERR_NOT_FOUND);
        CHECK_OK(st_put_once(bc_b, k.s, "first", 5, ST_ONCE_COMPARE, &created));
        CHECK(created == 1);
        CHECK_OK(st_put_once(bc_b, k.s, "other", 5, ST_ONCE_COMPARE, &created));
        CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
        CHECK(got.len == 5 && !memcmp(got.data, "other", 5)); /* replaced, as before */
        CHECK_OK(st_del(bc_b, k.s));
        st_bytes_free(&got);
        return;
    }
    CHECK_OK(e);
    CHECK_ERR(st_put_new(bc_b, k.s, "second", 6), ST_ERR_EXISTS);
    CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == 5 && !memcmp(got.data, "first", 5));
    CHECK_OK(st_put_once(bc_b, k.s, "first", 5, ST_ONCE_COMPARE, &created));
    CHECK(created == 0);
    CHECK_ERR(st_put_once(bc_b, k.s, "other", 5, ST_ONCE_COMPARE, &created), ST_ERR_BUSY);
    CHECK_OK(st_put_once(bc_b, k.s, "other", 5, ST_ONCE_NAMED_BY_CONTENT, &created));
    CHECK(created == 0);
    CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == 5 && !memcmp(got.data, "first", 5));
    /* Gone, it can be created again; an empty object too. */
    CHECK_OK(st_del(bc_b, k.s));
    CHECK_OK(st_put_new(bc_b, k.s, NULL, 0));
    CHECK_OK(st_stat(bc_b, k.s, &sz));
    CHECK(sz == 0);
    CHECK_OK(st_del(bc_b, k.s));

    enum { N = 4 };
    bc_creator cr[N];
    pthread_t th[N];
    bc_key rk;
    bc_k(&rk, "pn/race");
    for (int i = 0; i < N; i++) {
        cr[i] = (bc_creator){.key = rk.s};
        snprintf(cr[i].body, sizeof cr[i].body, "creator-%d", i);
        CHECK(pthread_create(&th[i], NULL, bc_create_main, &cr[i]) == 0);
    }
    int won = -1, lost = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        if (cr[i].e == ST_OK)
            won = won < 0 ? i : -2;
        else
            lost += cr[i].e == ST_ERR_EXISTS;
    }
    CHECK(won >= 0 && lost == N - 1);
    CHECK_OK(st_get(bc_b, rk.s, 0, ST_GET_TO_END, &got));
    CHECK(won >= 0 && got.len == strlen(cr[won].body) && !memcmp(got.data, cr[won].body, got.len));
    CHECK_OK(st_del(bc_b, rk.s));
    st_bytes_free(&got);
}

/* The ranges a get and a streamed get are checked with, of an object of
 * BC_RANGE_OBJ bytes: the expected result is computed from the contract's
 * rule (bc_range_want), never written down. */
#define BC_RANGE_OBJ 10000
static const struct {
    uint64_t off, len;
} bc_ranges[] = {
    {0, 100},
    {5000, 100},
    {9000, ST_GET_TO_END},
    {9990, 100},
    {0, ST_GET_TO_END},
    {10000, 5},
    {10000, ST_GET_TO_END},
    {0, 0},
    {123, 0},
    {1, UINT64_MAX - 1},
    {9999, 1},
    {10001, 1},
    {10001, ST_GET_TO_END},
    {UINT64_MAX, 1},
    {20000, 0},
};
#define BC_NRANGES (sizeof bc_ranges / sizeof bc_ranges[0])

/* The bytes range i gives of an object of `size` bytes (its offset within). */
static inline uint64_t bc_range_want(size_t i, uint64_t size)
{
    uint64_t left = size - bc_ranges[i].off;
    return left < bc_ranges[i].len ? left : bc_ranges[i].len;
}

/* Stores BC_RANGE_OBJ random bytes (from seed) under name; returns them. */
static inline uint8_t *bc_put_range_obj(bc_key *k, const char *name, unsigned seed)
{
    uint8_t *buf = malloc(BC_RANGE_OBJ);
    ut_rand_fill(buf, BC_RANGE_OBJ, seed);
    CHECK_OK(st_put(bc_b, bc_k(k, "%s", name), buf, BC_RANGE_OBJ));
    return buf;
}

/* Ranged gets (bc_ranges). */
static inline void bc_case_ranges(void)
{
    const uint64_t size = BC_RANGE_OBJ;
    bc_key k;
    uint8_t *buf = bc_put_range_obj(&k, "rg/obj", 21);
    const __typeof__(bc_ranges[0]) *r = bc_ranges;

    st_bytes got = {0};
    for (size_t i = 0; i < BC_NRANGES; i++) {
        /* Pre-fill so that "replaces its contents" is checked too. */
        st_bytes_clear(&got);
        CHECK_OK(st_bytes_append(&got, "junk-junk-junk", 14));
        st_err e = st_get(bc_b, k.s, r[i].off, r[i].len, &got);
        if (r[i].off > size) {
            CHECK_ERR(e, ST_ERR_INVALID);
            continue;
        }
        uint64_t want = bc_range_want(i, size);
        CHECK_OK(e);
        CHECK(got.len == want);
        if (e != ST_OK || got.len != want) {
            fprintf(stderr,
                    "  range off=%" PRIu64 " len=%" PRIu64 ": got %zu bytes, want %" PRIu64 "\n",
                    r[i].off, r[i].len, got.len, want);
            continue;
        }
        CHECK(want == 0 || memcmp(got.data, buf + r[i].off, want) == 0);
    }
    CHECK_OK(st_del(bc_b, k.s));
    st_bytes_free(&got);
    free(buf);
}

/* ---- streamed gets (st_get_stream) ---- */

/* What a conformance sink saw: the body, and whether every piece started
 * where the last ended (the contract's `at`). */
typedef struct bc_stream {
    st_bytes body;
    size_t pieces;
    int gap;          /* a piece's at was not the bytes seen so far */
    size_t refuse_at; /* refuse (ST_ERR_CORRUPT) the piece with this index, 0: never */
} bc_stream;

static inline st_err bc_stream_on_bytes(void *arg, uint64_t at, const uint8_t *data, size_t len)
{
    bc_stream *c = arg;
    if (at != c->body.len)
        c->gap = 1;
    if (++c->pieces == c->refuse_at)
        return st_seterr(ST_ERR_CORRUPT, "bc sink: refused piece %zu", c->pieces);
    return st_bytes_append(&c->body, data, len);
}

/* Streams [off, off + len) of key into c (emptied first). */
static inline st_err bc_stream_get(const char *key, uint64_t off, uint64_t len, bc_stream *c)
{
    st_bytes_clear(&c->body);
    c->pieces = 0;
    c->gap = 0;
    const st_get_sink sink = {bc_stream_on_bytes, c};
    return st_get_stream(bc_b, key, off, len, &sink);
}

/* The range rules of get, for a streamed get: the same bytes, handed on in
 * contiguous pieces; past the end an error and no piece. */
static inline void bc_case_stream_ranges(void)
{
    bc_stream c = {0};
    bc_key k;
    uint8_t *buf = bc_put_range_obj(&k, "sr/obj", 22);
    for (size_t i = 0; i < BC_NRANGES; i++) {
        st_err e = bc_stream_get(k.s, bc_ranges[i].off, bc_ranges[i].len, &c);
        if (bc_ranges[i].off > BC_RANGE_OBJ) {
            CHECK_ERR(e, ST_ERR_INVALID);
            CHECK(c.pieces == 0);
            continue;
        }
        uint64_t want = bc_range_want(i, BC_RANGE_OBJ);
        CHECK_OK(e);
        CHECK(!c.gap);
        CHECK(c.body.len == want);
        CHECK(want != 0 || c.pieces == 0);
        if (c.body.len == want && want)
            CHECK(memcmp(c.body.data, buf + bc_ranges[i].off, want) == 0);
    }
    CHECK_ERR(bc_stream_get(bc_k(&k, "sr/missing"), 0, ST_GET_TO_END, &c), ST_ERR_NOT_FOUND);
    CHECK(c.pieces == 0);
    CHECK_OK(st_del(bc_b, bc_k(&k, "sr/obj")));
    st_bytes_free(&c.body);
    free(buf);
}

/* A body of several MiB (more than one piece of every transport), whole and
 * in ranges that start and end inside pieces; and a sink that refuses a
 * piece stops the transfer with its own error and hears nothing more. */
static inline void bc_case_stream_large(void)
{
    const size_t size = (3u << 20) + 4099;
    uint8_t *buf = malloc(size);
    ut_rand_fill(buf, size, 23);
    bc_key k;
    bc_k(&k, "sl/obj");
    CHECK_OK(st_put(bc_b, k.s, buf, size));
    bc_stream c = {0};
    static const uint64_t offs[] = {0, 1, 65537, (1u << 20) + 3};
    for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
        uint64_t len = i % 2 ? size - offs[i] - 12345 : ST_GET_TO_END;
        CHECK_OK(bc_stream_get(k.s, offs[i], len, &c));
        uint64_t want = len == ST_GET_TO_END ? size - offs[i] : len;
        CHECK(!c.gap);
        CHECK(c.body.len == want);
        if (c.body.len == want)
            CHECK(memcmp(c.body.data, buf + offs[i], want) == 0);
    }
    c.refuse_at = 1;
    st_err e = bc_stream_get(k.s, 0, ST_GET_TO_END, &c);
    CHECK_ERR(e, ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "bc sink: refused piece 1") != NULL);
    CHECK(c.pieces == 1);
    CHECK_OK(st_del(bc_b, k.s));
    st_bytes_free(&c.body);
    free(buf);
}

/* Missing objects: NOT_FOUND with a message, also below an object's name. */
static inline void bc_case_not_found(void)
{
    bc_key k, k2;
    st_bytes got = {0};
    uint64_t sz = 0;
    st_clearerr();
    CHECK_ERR(st_get(bc_b, bc_k(&k, "nf/missing"), 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);
    CHECK(st_errmsg()[0] != '\0');
    CHECK_ERR(st_stat(bc_b, k.s, &sz), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_get(bc_b, bc_k(&k, "nf/no/such/dir/x"), 0, 1, &got), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat(bc_b, k.s, &sz), ST_ERR_NOT_FOUND);

    /* "nf/file" is an object; "nf/file/under" is still just a missing key. */
    CHECK_OK(st_put(bc_b, bc_k(&k, "nf/file"), "x", 1));
    CHECK_ERR(st_get(bc_b, bc_k(&k2, "nf/file/under"), 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat(bc_b, k2.s, &sz), ST_ERR_NOT_FOUND);
    CHECK_OK(st_del(bc_b, k2.s));
    CHECK(bc_lists_only(bc_k(&k2, "nf/file/"), NULL));
    CHECK_OK(st_del(bc_b, k.s));
    CHECK_OK(st_del(bc_b, bc_k(&k, "nf/never-existed")));
    st_bytes_free(&got);
}

/* The store's clock (stat_time, docs/GC.md "Clocks"): an object just put
 * is dated within its resolution of the store's now, never in its future;
 * an overwrite moves its date on; a missing key is NOT_FOUND; key NULL
 * gives the store's now alone, which does not run backwards. Nothing a
 * host's clock says is compared here: the store may run on another. */
static inline void bc_case_clock(void)
{
    bc_key k;
    st_store_time t0, t1, t2;
    CHECK_OK(st_stat_time(bc_b, NULL, &t0));
    CHECK(t0.now_ns > 0 && t0.slack_ns >= 0);
    CHECK_OK(st_put(bc_b, bc_k(&k, "clock/obj"), "x", 1));
    CHECK_OK(st_stat_time(bc_b, k.s, &t1));
    CHECK(t1.now_ns + t1.slack_ns >= t0.now_ns);
    CHECK(t1.mtime_ns <= t1.now_ns + t1.slack_ns);
    CHECK(t1.now_ns - t1.mtime_ns < 60ll * 1000000000); /* one PUT and a HEAD ago */
    int64_t age_least = 0, age_most = 0;
    CHECK_OK(st_store_age(bc_b, k.s, &age_least, &age_most));
    CHECK(age_most != INT64_MAX && age_least <= age_most);
    CHECK_OK(st_put(bc_b, k.s, "y", 1));
    CHECK_OK(st_stat_time(bc_b, k.s, &t2));
    CHECK(t2.mtime_ns + t2.slack_ns >= t1.mtime_ns);
    CHECK_ERR(st_stat_time(bc_b, bc_k(&k, "clock/missing"), &t2), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_store_age(bc_b, k.s, &age_least, NULL), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat_time(bc_b, "bad//key", &t2), ST_ERR_INVALID);
    bc_del_prefix("clock/");
}

/* del is idempotent and removes exactly one key, also when it is a prefix
 * of others ("a/b" and "a/b/c" are independent objects). */
static inline void bc_case_del(void)
{
    bc_key ab, abc, amb;
    uint64_t sz = 0;
    st_bytes got = {0};
    CHECK_OK(st_put(bc_b, bc_k(&ab, "del/a/b"), "AB", 2));
    CHECK_OK(st_put(bc_b, bc_k(&abc, "del/a/b/c"), "ABC", 3));
    CHECK_OK(st_put(bc_b, bc_k(&amb, "del/a-b"), "A-B", 3));

    CHECK_OK(st_del(bc_b, ab.s));
    CHECK_ERR(st_stat(bc_b, ab.s, &sz), ST_ERR_NOT_FOUND);
    CHECK_OK(st_del(bc_b, ab.s));
    CHECK_OK(st_get(bc_b, abc.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "ABC", 3) == 0);

    CHECK_OK(st_put(bc_b, ab.s, "AB2", 3));
    CHECK_OK(st_del(bc_b, abc.s));
    CHECK_OK(st_get(bc_b, ab.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "AB2", 3) == 0);
    CHECK_OK(st_del(bc_b, ab.s));

    bc_key p;
    CHECK(bc_lists_only(bc_k(&p, "del/"), amb.s));
    CHECK_OK(st_del(bc_b, amb.s));
    CHECK(bc_lists_only(bc_k(&p, "del/"), NULL));
    st_bytes_free(&got);
}

/*
 * Listing order and prefix matching over names chosen so that '/' (0x2f)
 * sorts between '-' '.' and the digits: a backend that orders by path
 * components, or matches prefixes only at '/', fails here.
 */
static inline void bc_case_list_order(void)
{
    static const char *names[] = {"a",     "a-b",   "a.b",   "a/b",     "a0",
                                  "a/b/c", "a/b-c", "a/b.c", "a/b/c/d", "a/b0",
                                  "a/bc",  "a/c",   "a-",    "a.",      "A",
                                  "Z9",    "_u",    "b",     "a-b/x",   "a.b/y",
                                  "a0/z",  "ab",    "a/b_",  "a/b/-",   "a/b/.x-not-hidden-here"};
    /* The last name is invalid (component starts with '.') and is skipped. */
    static const char *prefixes[] = {"",        "a",        "a/", "a/b",  "a/b/",      "a/b/c",
                                     "a-",      "a.",       "a0", "a/bc", "b",         "zz",
                                     "a/b/c/d", "a/b/c/d/", "A",  "_",    "a/b/c/d/e", "a-b/"};
    size_t nn = sizeof names / sizeof names[0];
    char **full = calloc(nn, sizeof *full);
    size_t nfull = 0;

    /* Put in a scrambled order: the backend must sort, not echo put order. */
    for (size_t j = 0; j < nn; j++) {
        size_t i = (j * 7 + 3) % nn; /* 7 is coprime with nn (25) */
        bc_key k;
        bc_k(&k, "lo/%s", names[i]);
        if (!st_key_is_valid(k.s))
            continue;
        uint8_t data[64];
        ut_rand_fill(data, i + 1, i);
        CHECK_OK(st_put(bc_b, k.s, data, i + 1)); /* size = index + 1: distinct */
        full[nfull++] = strdup(k.s);
    }
    CHECK(nfull == nn - 1);
    qsort(full, nfull, sizeof *full, bc_strcmp_p);

    for (size_t pi = 0; pi < sizeof prefixes / sizeof prefixes[0] + 1; pi++) {
        bc_key p;
        /* The extra last round lists "<scratch>/lo" (no slash): a partial prefix. */
        if (pi < sizeof prefixes / sizeof prefixes[0])
            bc_k(&p, "lo/%s", prefixes[pi]);
        else
            bc_k(&p, "lo");
        bc_listed l = {0};
        CHECK_OK(st_list(bc_b, p.s, bc_collect, &l));
        size_t plen = strlen(p.s), want = 0, ok = 1;
        for (size_t i = 0; i < nfull; i++) {
            if (strncmp(full[i], p.s, plen) != 0)
                continue;
            if (want >= l.n || strcmp(l.keys[want], full[i]) != 0) {
                ok = 0;
            } else {
                /* Recover the name's index from the key to check the size. */
                const char *name = full[i] + strlen(bc_scratch) + strlen("/lo/");
                for (size_t ni = 0; ni < nn; ni++)
                    if (strcmp(names[ni], name) == 0 && l.sizes[want] != ni + 1)
                        ok = 0;
            }
            want++;
        }
        CHECK(ok && l.n == want);
        if (!ok || l.n != want) {
            fprintf(stderr, "  list \"%s\": got %zu keys, want %zu:\n", p.s, l.n, want);
            for (size_t i = 0; i < l.n; i++)
                fprintf(stderr, "    %s\n", l.keys[i]);
        }
        bc_listed_free(&l);
    }

    for (size_t i = 0; i < nfull; i++) {
        CHECK_OK(st_del(bc_b, full[i]));
        free(full[i]);
    }
    free(full);
}

/* More keys than one S3 ListObjectsV2 page (1000), and stopping early. */
static inline void bc_case_list_many(void)
{
    enum { N = 1100 };
    char **want = calloc(N, sizeof *want);
    for (size_t j = 0; j < N; j++) {
        size_t i = (j * 13) % N; /* scrambled put order; 13 is coprime with 1100 */
        bc_key k;
        bc_k(&k, "many/k%04zu", i);
        uint8_t data[8];
        memset(data, (int)i, sizeof data);
        CHECK_OK(st_put(bc_b, k.s, data, i % 8));
        want[i] = strdup(k.s);
    }
    qsort(want, N, sizeof *want, bc_strcmp_p);

    bc_key p;
    bc_k(&p, "many/");
    static const size_t stops[] = {0, 1, 10, 999, 1000, 1001, 1050};
    for (size_t s = 0; s < sizeof stops / sizeof stops[0]; s++) {
        bc_listed l = {0};
        l.stop_after = stops[s];
        CHECK_OK(st_list(bc_b, p.s, bc_collect, &l));
        size_t expect = stops[s] ? stops[s] : N;
        CHECK(l.n == expect && l.calls == expect);
        int same = l.n == expect;
        for (size_t i = 0; same && i < l.n; i++)
            same = strcmp(l.keys[i], want[i]) == 0 &&
                   l.sizes[i] == (uint64_t)(atoi(want[i] + strlen(p.s) + 1) % 8);
        CHECK(same);
        if (!same)
            fprintf(stderr, "  list_many stop_after=%zu: got %zu keys\n", stops[s], l.n);
        bc_listed_free(&l);
    }
    /* Deleted in one st_del_many: more than one batch (ST_DEL_BATCH_MAX). */
    st_del_item *items = calloc(N, sizeof *items);
    for (size_t i = 0; i < N; i++)
        items[i] = (st_del_item){.key = want[i], .err = ST_ERR_IO};
    CHECK_OK(st_del_many(bc_b, items, N));
    size_t failed = 0;
    for (size_t i = 0; i < N; i++)
        failed += items[i].err != ST_OK;
    CHECK(failed == 0);
    CHECK(bc_lists_only(p.s, NULL));
    for (size_t i = 0; i < N; i++)
        free(want[i]);
    free(items);
    free(want);
}

/*
 * st_del_many: every key's own result; keys that never existed are ST_OK;
 * exactly the named keys go ("a/b" leaves "a/b/c" and "a/bc"); an invalid
 * key refuses the whole call before anything is deleted; n == 0 is a no-op.
 */
static inline void bc_case_del_many(void)
{
    enum { N = 40 };
    bc_key keys[N + 1], keep1, keep2;
    st_del_item items[N + 1];
    uint64_t sz = 0;
    for (size_t i = 0; i < N; i++) {
        CHECK_OK(st_put(bc_b, bc_k(&keys[i], "dm/a/k%02zu", i), "x", i % 3));
        items[i] = (st_del_item){.key = keys[i].s, .err = ST_ERR_IO};
    }
    bc_k(&keys[N], "dm/a/never-existed");
    items[N] = (st_del_item){.key = keys[N].s, .err = ST_ERR_IO};
    CHECK_OK(st_put(bc_b, bc_k(&keep1, "dm/a/k01/c"), "C", 1));
    CHECK_OK(st_put(bc_b, bc_k(&keep2, "dm/a/k011"), "D", 1));

    CHECK_OK(st_del_many(bc_b, NULL, 0));
    /* One bad key among good ones: nothing is deleted. */
    st_del_item bad[3] = {{.key = keys[0].s}, {.key = "dm/../escape"}, {.key = keys[1].s}};
    CHECK_ERR(st_del_many(bc_b, bad, 3), ST_ERR_INVALID);
    CHECK(bad[0].err == ST_ERR_INVALID && bad[1].err == ST_ERR_INVALID);
    CHECK_OK(st_stat(bc_b, keys[0].s, &sz));

    CHECK_OK(st_del_many(bc_b, items, N + 1));
    for (size_t i = 0; i <= N; i++) {
        CHECK(items[i].err == ST_OK);
        CHECK_ERR(st_stat(bc_b, keys[i].s, &sz), ST_ERR_NOT_FOUND);
    }
    CHECK_OK(st_stat(bc_b, keep1.s, &sz));
    CHECK_OK(st_stat(bc_b, keep2.s, &sz));
    /* Again: everything is already gone, every result ST_OK. */
    CHECK_OK(st_del_many(bc_b, items, N + 1));
    CHECK(st_del_items_result(items, N + 1) == ST_OK);

    st_del_item rest[2] = {{.key = keep1.s}, {.key = keep2.s}};
    CHECK_OK(st_del_many(bc_b, rest, 2));
    bc_key p;
    CHECK(bc_lists_only(bc_k(&p, "dm/"), NULL));
}

/* Every op refuses malformed keys with ST_ERR_INVALID before touching the store. */
static inline void bc_case_invalid_keys(void)
{
    static const char *bad[] = {
        "../x", "/abs", "a//b", "a/./b", ".hidden", "a/.tmp.x",    "sp ace",       "",    "a/",
        "x/..", "..",   ".",    "a\\b",  "a\nb",    "caf\xc3\xa9", "a/b/../../..", "a:b", "a%2Fb"};
    /* Same shapes below the scratch prefix, in case a backend only checks the start. */
    static const char *bad_tail[] = {"../x",   "a//b", "a/./b", ".hidden", "a/.tmp.x",
                                     "sp ace", "a/",   "x/..",  "a\tb"};
    size_t nb = sizeof bad / sizeof bad[0], nt = sizeof bad_tail / sizeof bad_tail[0];
    char *longkey = malloc(2001);
    memset(longkey, 'a', 2000);
    longkey[2000] = '\0';
    st_bytes got = {0};
    uint64_t sz = 0;

    for (size_t i = 0; i < nb + nt + 1; i++) {
        bc_key kb;
        const char *k = i < nb ? bad[i] : i < nb + nt ? bc_k(&kb, "%s", bad_tail[i - nb]) : longkey;
        CHECK(!st_key_is_valid(k));
        CHECK_ERR(st_put(bc_b, k, "x", 1), ST_ERR_INVALID);
        CHECK_ERR(st_get(bc_b, k, 0, ST_GET_TO_END, &got), ST_ERR_INVALID);
        CHECK_ERR(st_stat(bc_b, k, &sz), ST_ERR_INVALID);
        CHECK_ERR(st_del(bc_b, k), ST_ERR_INVALID);
        /* As a list prefix, "" and a trailing '/' are fine; the rest is not. */
        size_t n = strlen(k);
        bc_listed l = {0};
        st_err e = st_list(bc_b, k, bc_collect, &l);
        if (n > 0 && k[n - 1] == '/') {
            char *trimmed = strndup(k, n - 1);
            CHECK(st_key_is_valid(trimmed) ? e == ST_OK : e == ST_ERR_INVALID);
            free(trimmed);
        } else if (n > 0) {
            CHECK_ERR(e, ST_ERR_INVALID);
        }
        bc_listed_free(&l);
    }
    /* Nothing under the scratch prefix was created by any of that. */
    CHECK(bc_del_prefix("") == 0);
    free(longkey);
    st_bytes_free(&got);
}

/* A key of exactly ST_KEY_MAX bytes works everywhere; one more is refused. */
static inline void bc_case_max_key(void)
{
    bc_key k;
    size_t n = strlen(bc_k(&k, "maxkey"));
    /* Fill with components of 99 bytes so no file system's NAME_MAX is hit. */
    while (n < ST_KEY_MAX) {
        k.s[n++] = '/';
        for (int j = 0; j < 99 && n < ST_KEY_MAX; j++)
            k.s[n++] = (char)('a' + j % 26);
    }
    if (k.s[n - 1] == '/') /* never end on an empty component */
        k.s[n - 1] = 'z';
    k.s[n] = '\0';
    CHECK(strlen(k.s) == ST_KEY_MAX && st_key_is_valid(k.s));
    st_bytes got = {0};
    uint64_t sz = 0;
    CHECK_OK(st_put(bc_b, k.s, "max", 3));
    CHECK_OK(st_get(bc_b, k.s, 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "max", 3) == 0);
    CHECK_OK(st_stat(bc_b, k.s, &sz));
    CHECK(sz == 3);
    bc_key p;
    CHECK(bc_lists_only(bc_k(&p, "maxkey/"), k.s));
    CHECK_OK(st_del(bc_b, k.s));

    k.s[n] = 'z';
    k.s[n + 1] = '\0';
    CHECK(!st_key_is_valid(k.s));
    CHECK_ERR(st_put(bc_b, k.s, "max", 3), ST_ERR_INVALID);
    st_bytes_free(&got);
}

/* ---- concurrency ---- */

/*
 * Self-describing payload: "BCONF001", writer id, sequence, total length,
 * then bytes regenerated from (writer, seq). A reader can verify any object
 * completely without knowing which put it came from.
 */
#define BC_HDR 24

static inline uint64_t bc_payload_seed(uint32_t writer, uint32_t seq)
{
    return (uint64_t)writer << 32 | seq | 1ull << 63;
}

static inline size_t bc_payload_len(uint32_t writer, uint32_t seq)
{
    return BC_HDR + ((size_t)seq * 7919 + (size_t)writer * 104729) % 300000;
}

static inline uint8_t *bc_payload_make(uint32_t writer, uint32_t seq, size_t *len)
{
    size_t n = bc_payload_len(writer, seq);
    uint8_t *p = malloc(n);
    memcpy(p, "BCONF001", 8);
    st_le32_put(p + 8, writer);
    st_le32_put(p + 12, seq);
    st_le64_put(p + 16, n);
    ut_rand_fill(p + BC_HDR, n - BC_HDR, bc_payload_seed(writer, seq));
    *len = n;
    return p;
}

/* 1 if p[0..n) is a complete, intact payload; its writer and seq out. */
static inline int bc_payload_check(const uint8_t *p, size_t n, uint32_t *writer, uint32_t *seq)
{
    if (n < BC_HDR || memcmp(p, "BCONF001", 8) != 0 || st_le64_get(p + 16) != n)
        return 0;
    *writer = st_le32_get(p + 8);
    *seq = st_le32_get(p + 12);
    if (bc_payload_len(*writer, *seq) != n)
        return 0;
    uint8_t *want = malloc(n - BC_HDR + 1);
    ut_rand_fill(want, n - BC_HDR, bc_payload_seed(*writer, *seq));
    int ok = memcmp(p + BC_HDR, want, n - BC_HDR) == 0;
    free(want);
    return ok;
}

#define BC_THREADS 4
#define BC_ITERS   30
#define BC_SHARED  3

typedef struct bc_worker {
    uint32_t id;
    int failures;
    char first[1024]; /* first failure, for the log */
} bc_worker;

static inline void bc_fail(bc_worker *w, const char *what, const char *key, st_err e)
{
    if (!w->failures++)
        snprintf(w->first, sizeof w->first, "thread %u: %.40s %.200s: %.40s: %.500s", w->id, what,
                 key, st_strerror(e), st_errmsg());
}

static inline void *bc_worker_main(void *arg)
{
    bc_worker *w = arg;
    st_bytes got = {0};
    for (uint32_t i = 0; i < BC_ITERS; i++) {
        size_t n;
        uint32_t rw, rs;
        uint8_t *p = bc_payload_make(w->id, i, &n);
        bc_key k;
        st_err e;

        /* Own key: must read back exactly what this thread just wrote. */
        bc_k(&k, "cc/t%u/k%u", w->id, i % 5);
        if ((e = st_put(bc_b, k.s, p, n)) != ST_OK)
            bc_fail(w, "put", k.s, e);
        else if ((e = st_get(bc_b, k.s, 0, ST_GET_TO_END, &got)) != ST_OK)
            bc_fail(w, "get", k.s, e);
        else if (!bc_payload_check(got.data, got.len, &rw, &rs) || rw != w->id || rs != i)
            bc_fail(w, "verify own", k.s, ST_ERR_CORRUPT);

        /* Shared keys: any writer's version, but always a whole one. */
        bc_k(&k, "cc/shared/s%u", i % BC_SHARED);
        if ((e = st_put(bc_b, k.s, p, n)) != ST_OK)
            bc_fail(w, "put", k.s, e);
        bc_k(&k, "cc/shared/s%u", (i + w->id) % BC_SHARED);
        if ((e = st_get(bc_b, k.s, 0, ST_GET_TO_END, &got)) != ST_OK)
            bc_fail(w, "get", k.s, e);
        else if (!bc_payload_check(got.data, got.len, &rw, &rs) || rw >= BC_THREADS)
            bc_fail(w, "verify shared", k.s, ST_ERR_CORRUPT);

        /* Put/get/del in one directory that other threads empty and refill:
         * exercises a file store's mkdir-vs-rmdir races. */
        bc_k(&k, "cc/race/d1/d2/t%u", w->id);
        if ((e = st_put(bc_b, k.s, p, n)) != ST_OK)
            bc_fail(w, "put", k.s, e);
        else if ((e = st_get(bc_b, k.s, 0, ST_GET_TO_END, &got)) != ST_OK)
            bc_fail(w, "get", k.s, e);
        else if (!bc_payload_check(got.data, got.len, &rw, &rs) || rw != w->id || rs != i)
            bc_fail(w, "verify race", k.s, ST_ERR_CORRUPT);
        if ((e = st_del(bc_b, k.s)) != ST_OK)
            bc_fail(w, "del", k.s, e);

        /* Listing during writes: only the shared names, ascending. */
        bc_listed l = {0};
        bc_k(&k, "cc/shared/");
        if ((e = st_list(bc_b, k.s, bc_collect, &l)) != ST_OK)
            bc_fail(w, "list", k.s, e);
        else if (l.n != BC_SHARED || !bc_ascending(&l))
            bc_fail(w, "list content", k.s, ST_ERR_CORRUPT);
        bc_listed_free(&l);
        free(p);
    }
    st_bytes_free(&got);
    return NULL;
}

static inline void bc_case_concurrent(void)
{
    /* Seed the shared keys so readers never race the first put. */
    for (uint32_t s = 0; s < BC_SHARED; s++) {
        size_t n;
        uint8_t *p = bc_payload_make(0, 1000 + s, &n);
        bc_key k;
        CHECK_OK(st_put(bc_b, bc_k(&k, "cc/shared/s%u", s), p, n));
        free(p);
    }
    pthread_t th[BC_THREADS];
    bc_worker w[BC_THREADS];
    for (uint32_t t = 0; t < BC_THREADS; t++) {
        w[t] = (bc_worker){.id = t};
        CHECK(pthread_create(&th[t], NULL, bc_worker_main, &w[t]) == 0);
    }
    for (uint32_t t = 0; t < BC_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(w[t].failures == 0);
        if (w[t].failures)
            fprintf(stderr, "  %d failures, first: %s\n", w[t].failures, w[t].first);
    }
    /* Every own key holds this thread's last write to it. */
    st_bytes got = {0};
    for (uint32_t t = 0; t < BC_THREADS; t++)
        for (uint32_t j = 0; j < 5; j++) {
            bc_key k;
            uint32_t rw, rs;
            CHECK_OK(st_get(bc_b, bc_k(&k, "cc/t%u/k%u", t, j), 0, ST_GET_TO_END, &got));
            CHECK(bc_payload_check(got.data, got.len, &rw, &rs) && rw == t &&
                  rs == (BC_ITERS - 1) - ((BC_ITERS - 1 - j) % 5 + 5) % 5);
        }
    st_bytes_free(&got);
    /* The race directory was emptied by every thread's last del. */
    CHECK(bc_del_prefix("cc/race/") == 0);
    CHECK(bc_del_prefix("cc/") == BC_THREADS * 5 + BC_SHARED);
}

/* Each case removed what it wrote: the scratch prefix is empty. */
static inline void bc_case_left_nothing(void)
{
    CHECK(bc_del_prefix("") == 0);
    bc_key p;
    snprintf(p.s, sizeof p.s, "%s", bc_scratch);
    CHECK(bc_lists_only(p.s, NULL));
}

/*!
 * Runs every case against b. scratch_prefix must be a valid key (e.g.
 * "conformance/run-1234") that nothing else writes below while the suite
 * runs; it is left empty. Results go to ut.h's counters.
 */
static inline void bc_begin(st_backend *b, const char *scratch_prefix)
{
    bc_b = b;
    snprintf(bc_scratch, sizeof bc_scratch, "%s", scratch_prefix);
    CHECK(st_key_is_valid(bc_scratch) && strlen(scratch_prefix) < sizeof bc_scratch);
}

static inline void backend_conformance_run(st_backend *b, const char *scratch_prefix)
{
    bc_begin(b, scratch_prefix);
    RUN(bc_case_roundtrip);
    RUN(bc_case_overwrite);
    RUN(bc_case_put_new);
    RUN(bc_case_ranges);
    RUN(bc_case_stream_ranges);
    RUN(bc_case_stream_large);
    RUN(bc_case_not_found);
    RUN(bc_case_del);
    RUN(bc_case_clock);
    RUN(bc_case_del_many);
    RUN(bc_case_list_order);
    RUN(bc_case_list_many);
    RUN(bc_case_invalid_keys);
    RUN(bc_case_max_key);
    RUN(bc_case_concurrent);
    RUN(bc_case_left_nothing);
}

/*!
 * The cheap cases only (no many-key listing, no concurrency), for a second
 * configuration of a backend already run through the whole suite: unwrapped,
 * another addressing style.
 */
static inline void backend_conformance_run_cheap(st_backend *b, const char *scratch_prefix)
{
    bc_begin(b, scratch_prefix);
    RUN(bc_case_roundtrip);
    RUN(bc_case_put_new);
    RUN(bc_case_ranges);
    RUN(bc_case_stream_ranges);
    RUN(bc_case_stream_large);
    RUN(bc_case_not_found);
    RUN(bc_case_clock);
    RUN(bc_case_del_many);
    RUN(bc_case_list_order);
    RUN(bc_case_left_nothing);
}

#endif
