/*
 * st_backend_fault — fault-injecting wrapper (tests). See the header.
 *
 * Each kind of fault says on stderr, once, that it fired: an integration
 * test checks the daemon's log for it, so a test whose fault never fired
 * (a build without test hooks, a key that never matched) fails instead of
 * passing without testing anything.
 */
#include "backend/st_backend_fault.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct fault_ctx {
    st_backend_wrap head; /* first: the ops it passes through are st_wrap_* */
    st_backend_ops ops;   /* del_many, put_new only when inner has them (as the count wrapper) */
    unsigned put_delay_ms;
    unsigned get_delay_ms;            /* before a GET of a pack only */
    unsigned get_end_delay_ms;        /* after a GET of a pack handed its body */
    char fail_key[256];               /* "" : none */
    char put_hold[256];               /* "" : none; else a file that holds PUTs of... */
    char put_hold_key[256];           /* ...keys containing this ("": packs) */
    char get_hold[256];               /* "" : none; else a file that holds GETs of... */
    char get_hold_key[256];           /* ...keys containing this ("": every key) */
    char lose_answer[256];            /* "" : none; else the first PUT of a key containing it */
    atomic_int answer_lost;           /* 1 once that PUT's answer was lost */
    atomic_int delay_told, fail_told; /* 1 once "fired" was said (any thread) */
    atomic_int get_delay_told, get_end_delay_told, hold_told, get_hold_told;
} fault_ctx;
_Static_assert(offsetof(fault_ctx, head) == 0, "st_wrap_* read the head at ctx");

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Waits while the file hold exists, after saying once that it fired and
 * making HOLD.reached, so the test knows a request is inside the hold: a
 * request stays under way until the test that removes the file says so,
 * however slow the machine is. */
static void hold_while(const char *hold, atomic_int *told, const char *item, const char *key)
{
    if (!atomic_exchange(told, 1))
        fprintf(stderr, "st_backend_fault: fired: %s=%s (first: %s)\n", item, hold, key);
    char reached[PATH_MAX + 16];
    snprintf(reached, sizeof reached, "%s.reached", hold);
    FILE *mark = fopen(reached, "w");
    if (mark)
        fclose(mark);
    while (access(hold, F_OK) == 0)
        sleep_ms(10);
}

/* put_hold: a PUT of a key containing put_hold_key (default: a pack's). */
static void wait_while_held(fault_ctx *f, const char *key)
{
    const char *match = f->put_hold_key[0] ? f->put_hold_key : "/packs/";
    if (f->put_hold[0] && strstr(key, match) && access(f->put_hold, F_OK) == 0)
        hold_while(f->put_hold, &f->hold_told, "put_hold", key);
}

/* What put and put_new meet before the request: put_hold, put_delay_ms
 * and fail_key (ST_ERR_TRANSIENT, or ST_OK to go on). */
static st_err before_put(fault_ctx *f, const char *key)
{
    wait_while_held(f, key);
    if (f->put_delay_ms) {
        if (!atomic_exchange(&f->delay_told, 1))
            fprintf(stderr, "st_backend_fault: fired: put_delay_ms=%u (first: %s)\n",
                    f->put_delay_ms, key);
        sleep_ms(f->put_delay_ms);
    }
    if (f->fail_key[0] && strstr(key, f->fail_key)) {
        if (!atomic_exchange(&f->fail_told, 1))
            fprintf(stderr, "st_backend_fault: fired: fail_key=%s (first: %s)\n", f->fail_key, key);
        return st_seterr(ST_ERR_TRANSIENT, "fault injected: PUT of %s refused", key);
    }
    return ST_OK;
}

/* lose_answer: the store did the PUT, its answer is lost (once); a retry
 * wrapper above sends it again. */
static st_err answer_of(fault_ctx *f, const char *key, st_err e)
{
    if (e || !f->lose_answer[0] || !strstr(key, f->lose_answer) ||
        atomic_exchange(&f->answer_lost, 1))
        return e;
    fprintf(stderr, "st_backend_fault: fired: lose_answer=%s (first: %s)\n", f->lose_answer, key);
    return st_seterr(ST_ERR_TRANSIENT, "fault injected: the answer to the PUT of %s was lost", key);
}

static st_err fault_put(void *ctx, const char *key, const void *data, size_t len)
{
    fault_ctx *f = ctx;
    st_err e = before_put(f, key);
    return e ? e : answer_of(f, key, f->head.inner->ops->put(f->head.inner->ctx, key, data, len));
}

static st_err fault_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    fault_ctx *f = ctx;
    st_err e = before_put(f, key);
    return e ? e
             : answer_of(f, key, f->head.inner->ops->put_new(f->head.inner->ctx, key, data, len));
}

/* get_delay_ms (before) and get_end_delay_ms (after): a GET of a pack,
 * buffered or streamed, waits ms; what names the item, once. */
static void delay_pack_get(const char *key, unsigned ms, atomic_int *told, const char *what)
{
    if (ms && strstr(key, "/packs/")) {
        if (!atomic_exchange(told, 1))
            fprintf(stderr, "st_backend_fault: fired: %s=%u (first: %s)\n", what, ms, key);
        sleep_ms(ms);
    }
}

/* get_hold: a GET of a key containing get_hold_key (default: every key). */
static void hold_get(fault_ctx *f, const char *key)
{
    if (f->get_hold[0] && strstr(key, f->get_hold_key) && access(f->get_hold, F_OK) == 0)
        hold_while(f->get_hold, &f->get_hold_told, "get_hold", key);
}

static st_err fault_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    fault_ctx *f = ctx;
    hold_get(f, key);
    delay_pack_get(key, f->get_delay_ms, &f->get_delay_told, "get_delay_ms");
    st_err e = f->head.inner->ops->get(f->head.inner->ctx, key, off, len, out);
    delay_pack_get(key, f->get_end_delay_ms, &f->get_end_delay_told, "get_end_delay_ms");
    return e;
}

static st_err fault_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                               const st_get_sink *sink)
{
    fault_ctx *f = ctx;
    hold_get(f, key);
    delay_pack_get(key, f->get_delay_ms, &f->get_delay_told, "get_delay_ms");
    st_err e = st_get_stream(f->head.inner, key, off, len, sink);
    delay_pack_get(key, f->get_end_delay_ms, &f->get_end_delay_told, "get_end_delay_ms");
    return e;
}

static void fault_close(void *ctx)
{
    fault_ctx *f = ctx;
    st_backend_close(f->head.inner);
    free(f);
}

static const st_backend_ops fault_ops_template = {
    .scheme = "fault",
    .put = fault_put,
    .get = fault_get,
    .get_stream = fault_get_stream,
    .stat = st_wrap_stat,
    .stat_time = st_wrap_stat_time,
    .put_new = fault_put_new,
    .list = st_wrap_list,
    .del = st_wrap_del,
    .del_many = st_wrap_del_many,
    .close = fault_close,
};

st_err st_backend_fault_wrap(st_backend **b, const char *spec)
{
    fault_ctx *f = calloc(1, sizeof *f);
    st_backend *w = calloc(1, sizeof *w);
    if (!f || !w) {
        free(f);
        free(w);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    char items[512];
    snprintf(items, sizeof items, "%s", spec);
    for (char *save = NULL, *it = strtok_r(items, ",", &save); it;
         it = strtok_r(NULL, ",", &save)) {
        if (!strncmp(it, "put_delay_ms=", 13)) {
            f->put_delay_ms = (unsigned)strtoul(it + 13, NULL, 10);
        } else if (!strncmp(it, "get_delay_ms=", 13)) {
            f->get_delay_ms = (unsigned)strtoul(it + 13, NULL, 10);
        } else if (!strncmp(it, "get_end_delay_ms=", 17)) {
            f->get_end_delay_ms = (unsigned)strtoul(it + 17, NULL, 10);
        } else if (!strncmp(it, "fail_key=", 9) && it[9]) {
            snprintf(f->fail_key, sizeof f->fail_key, "%s", it + 9);
        } else if (!strncmp(it, "put_hold=", 9) && it[9]) {
            snprintf(f->put_hold, sizeof f->put_hold, "%s", it + 9);
        } else if (!strncmp(it, "put_hold_key=", 13) && it[13]) {
            snprintf(f->put_hold_key, sizeof f->put_hold_key, "%s", it + 13);
        } else if (!strncmp(it, "get_hold=", 9) && it[9]) {
            snprintf(f->get_hold, sizeof f->get_hold, "%s", it + 9);
        } else if (!strncmp(it, "get_hold_key=", 13) && it[13]) {
            snprintf(f->get_hold_key, sizeof f->get_hold_key, "%s", it + 13);
        } else if (!strncmp(it, "lose_answer=", 12) && it[12]) {
            snprintf(f->lose_answer, sizeof f->lose_answer, "%s", it + 12);
        } else {
            free(f);
            free(w);
            return st_seterr(ST_ERR_INVALID, "unknown fault spec '%.64s'", it);
        }
    }
    atomic_init(&f->delay_told, 0);
    atomic_init(&f->fail_told, 0);
    atomic_init(&f->get_delay_told, 0);
    atomic_init(&f->get_end_delay_told, 0);
    atomic_init(&f->hold_told, 0);
    atomic_init(&f->get_hold_told, 0);
    atomic_init(&f->answer_lost, 0);
    f->head.inner = *b;
    f->ops = st_backend_ops_masked(&fault_ops_template, f->head.inner);
    w->ops = &f->ops;
    w->ctx = f;
    *b = w;
    return ST_OK;
}
