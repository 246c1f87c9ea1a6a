/*
 * s3_fault_driver — the client side of the S3 fault tests. It talks to the
 * endpoint in CKPT_S3_ENDPOINT (the fault proxy, or an s3rver that the
 * calling script stops and restarts) through st_backend_open_opts(), i.e.
 * with the retry wrapper, exactly as the engine does, and checks that no
 * fault ever reaches the caller as an error or as wrong bytes.
 *
 *   s3_fault_driver faults
 *       The whole backend conformance suite, then 4 threads each putting
 *       8 MiB packs and reading them back whole and by ranges, all through
 *       the fault proxy. Short per-request stall timeout (1.5 s) and quick
 *       backoff so the run stays short; passes only if every op succeeded,
 *       every byte verified, and retries actually happened.
 *
 *   s3_fault_driver outage N PROGRESS_FILE
 *       N puts of 1 MiB, one every 200 ms, with the default retry policy;
 *       appends one line per completed put to PROGRESS_FILE so the script
 *       knows when to stop the server. Afterwards lists and reads back all
 *       N objects: nothing may be missing or different. Prints the longest
 *       put (it spans the outage).
 *
 * Exit status 0 when everything held, 1 otherwise. Credentials come from
 * the environment (the script sets s3rver's defaults).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_conformance.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "backend/st_backend_retry.h"
#include "ut.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- faults ---- */

#define PACK_THREADS 4
#define PACKS        4
#define PACK_SIZE    (8u << 20)

typedef struct pack_worker {
    st_backend *b;
    int id, failures;
    char first[600];
} pack_worker;

static void pack_fail(pack_worker *w, const char *what, const char *key)
{
    if (!w->failures++)
        snprintf(w->first, sizeof w->first, "%s %s: %s", what, key, st_errmsg());
}

static void *pack_main(void *arg)
{
    pack_worker *w = arg;
    uint8_t *buf = malloc(PACK_SIZE);
    st_bytes got = {0};
    for (int i = 0; i < PACKS; i++) {
        char key[64];
        snprintf(key, sizeof key, "faults/packs/t%d/p%d", w->id, i);
        ut_rand_fill(buf, PACK_SIZE, (uint64_t)w->id << 32 | (uint64_t)i | 1u << 20);
        if (st_put(w->b, key, buf, PACK_SIZE) != ST_OK) {
            pack_fail(w, "put", key);
            continue;
        }
        if (st_get(w->b, key, 0, ST_GET_TO_END, &got) != ST_OK)
            pack_fail(w, "get", key);
        else if (got.len != PACK_SIZE || memcmp(got.data, buf, PACK_SIZE) != 0)
            pack_fail(w, "verify", key);
        /* Ranged reads, as a restore does for the chunks it needs. */
        static const uint64_t offs[] = {0, 4096, PACK_SIZE / 2 + 17, PACK_SIZE - 1000};
        for (size_t r = 0; r < sizeof offs / sizeof offs[0]; r++) {
            uint64_t len = 300000;
            uint64_t want = PACK_SIZE - offs[r] < len ? PACK_SIZE - offs[r] : len;
            if (st_get(w->b, key, offs[r], len, &got) != ST_OK)
                pack_fail(w, "ranged get", key);
            else if (got.len != want || memcmp(got.data, buf + offs[r], want) != 0)
                pack_fail(w, "verify range", key);
        }
        uint64_t sz = 0;
        if (st_stat(w->b, key, &sz) != ST_OK || sz != PACK_SIZE)
            pack_fail(w, "stat", key);
        if (st_del(w->b, key) != ST_OK)
            pack_fail(w, "del", key);
    }
    st_bytes_free(&got);
    free(buf);
    return NULL;
}

static int run_faults(void)
{
    st_backend_opts o = {.stall_timeout_ms = 1500,
                         .timeout_ms = 20000,
                         .retry_attempts = 16,
                         .retry_base_ms = 20,
                         .retry_max_ms = 500};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://ckpt-test", &o, &b));
    if (!b)
        return ut_finish();
    double t0 = now_s();
    char scratch[64];
    snprintf(scratch, sizeof scratch, "faults/conformance-%ld", (long)getpid());
    backend_conformance_run(b, scratch);
    uint64_t conf_retries = st_backend_retry_count(b);
    fprintf(stderr, "conformance through the proxy: %.1f s, %" PRIu64 " retries\n", now_s() - t0,
            conf_retries);

    t0 = now_s();
    pthread_t th[PACK_THREADS];
    pack_worker w[PACK_THREADS];
    for (int t = 0; t < PACK_THREADS; t++) {
        w[t] = (pack_worker){.b = b, .id = t};
        CHECK(pthread_create(&th[t], NULL, pack_main, &w[t]) == 0);
    }
    for (int t = 0; t < PACK_THREADS; t++) {
        pthread_join(th[t], NULL);
        CHECK(w[t].failures == 0);
        if (w[t].failures)
            fprintf(stderr, "  pack thread %d: %d failures, first: %s\n", t, w[t].failures,
                    w[t].first);
    }
    fprintf(stderr, "%d x %d packs of %u MiB through the proxy: %.1f s, %" PRIu64 " retries\n",
            PACK_THREADS, PACKS, PACK_SIZE >> 20, now_s() - t0,
            st_backend_retry_count(b) - conf_retries);
    /* The faults were real: the run needed retries, and they all worked. */
    CHECK(st_backend_retry_count(b) > 0);
    st_backend_close(b);
    return ut_finish();
}

/* ---- outage ---- */

#define OUTAGE_SIZE (1u << 20)

static int run_outage(int n, const char *progress)
{
    st_backend *b = NULL;
    /* Default timeouts and retry policy: what a user gets. */
    CHECK_OK(st_backend_open("s3://ckpt-test", &b));
    if (!b)
        return ut_finish();
    uint8_t *buf = malloc(OUTAGE_SIZE);
    double worst = 0, t_start = now_s();
    int failed = 0;
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "outage/obj%04d", i);
        ut_rand_fill(buf, OUTAGE_SIZE, 7000 + (uint64_t)i);
        double t0 = now_s();
        st_err e = st_put(b, key, buf, OUTAGE_SIZE);
        double dt = now_s() - t0;
        if (dt > worst)
            worst = dt;
        if (e) {
            fprintf(stderr, "put %s failed after %.1f s: %s\n", key, dt, st_errmsg());
            failed++;
        }
        FILE *f = fopen(progress, "a");
        if (f) {
            fprintf(f, "%d %s %.3f\n", i, e ? "FAIL" : "ok", dt);
            fclose(f);
        }
        struct timespec pace = {0, 200 * 1000000L};
        nanosleep(&pace, NULL);
    }
    CHECK(failed == 0);
    fprintf(stderr, "%d puts in %.1f s, longest %.1f s, %" PRIu64 " retries\n", n,
            now_s() - t_start, worst, st_backend_retry_count(b));
    printf("longest_put_s %.1f\n", worst);

    /* Nothing lost: every object is listed and reads back intact. */
    bc_listed l = {0};
    CHECK_OK(st_list(b, "outage/", bc_collect, &l));
    CHECK((int)l.n == n);
    st_bytes got = {0};
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char key[64];
        snprintf(key, sizeof key, "outage/obj%04d", i);
        ut_rand_fill(buf, OUTAGE_SIZE, 7000 + (uint64_t)i);
        if (st_get(b, key, 0, ST_GET_TO_END, &got) != ST_OK || got.len != OUTAGE_SIZE ||
            memcmp(got.data, buf, OUTAGE_SIZE) != 0) {
            fprintf(stderr, "%s lost or damaged: %s\n", key, st_errmsg());
            bad++;
        }
        CHECK_OK(st_del(b, key));
    }
    CHECK(bad == 0);
    bc_listed_free(&l);
    st_bytes_free(&got);
    free(buf);
    st_backend_close(b);
    return ut_finish();
}

int main(int argc, char **argv)
{
    if (!getenv("CKPT_S3_ENDPOINT")) {
        fprintf(stderr, "s3_fault_driver: set CKPT_S3_ENDPOINT (run it through run_faults.sh "
                        "or run_outage.sh)\n");
        return 2;
    }
    if (argc == 2 && strcmp(argv[1], "faults") == 0)
        return run_faults();
    if (argc == 4 && strcmp(argv[1], "outage") == 0)
        return run_outage(atoi(argv[2]), argv[3]);
    fprintf(stderr, "usage: s3_fault_driver faults | outage N PROGRESS_FILE\n");
    return 2;
}
