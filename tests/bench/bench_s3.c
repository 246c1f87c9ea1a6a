/*
 * bench_s3 — PUT and GET throughput of pack-sized objects through the s3://
 * backend (st_backend_open_opts: V4 on libcurl, or V2 on libs3 with
 * CKPT_S3_SIGNATURE=v2, + the retry wrapper, as the engine
 * uses it), with N threads sharing one backend instance.
 *
 *   bench_s3 put|get THREADS OBJECTS SIZE_BYTES
 *
 * put: THREADS threads together store OBJECTS objects of SIZE bytes
 * (bench/o<i>, filled with pseudo-random bytes made before the clock
 * starts); get: they read them back whole and check the length (and the
 * first object's bytes). Prints one line "MBps <value>" (10^6 bytes per
 * second of wall time) on stdout; progress on stderr. The endpoint and
 * credentials come from CKPT_S3_ENDPOINT and AWS_* (bench_s3.sh sets them
 * and starts s3rver); the bucket is ckpt-test.
 *
 * Memory: one SIZE buffer shared by the put threads, one per get thread.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/st_backend.h"
#include "backend/st_backend_open.h"

#include "bench_util.h"

static st_backend *g_b;
static uint8_t *g_data;
static size_t g_size;
static int g_objects;
static atomic_int g_next, g_failures;
static int g_is_put;

static void *worker(void *arg)
{
    (void)arg;
    st_bytes got = {0};
    for (;;) {
        int i = atomic_fetch_add(&g_next, 1);
        if (i >= g_objects)
            break;
        char key[64];
        snprintf(key, sizeof key, "bench/o%d", i);
        st_err e;
        if (g_is_put) {
            e = st_put(g_b, key, g_data, g_size);
        } else {
            e = st_get(g_b, key, 0, ST_GET_TO_END, &got);
            if (!e && (got.len != g_size || (i == 0 && memcmp(got.data, g_data, g_size) != 0)))
                e = ST_ERR_CORRUPT;
        }
        if (e) {
            fprintf(stderr, "bench_s3: %s %s: %s\n", g_is_put ? "put" : "get", key, st_errmsg());
            atomic_fetch_add(&g_failures, 1);
        }
    }
    st_bytes_free(&got);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5 || (strcmp(argv[1], "put") && strcmp(argv[1], "get"))) {
        fprintf(stderr, "usage: bench_s3 put|get THREADS OBJECTS SIZE_BYTES\n");
        return 2;
    }
    g_is_put = strcmp(argv[1], "put") == 0;
    int threads = atoi(argv[2]);
    g_objects = atoi(argv[3]);
    g_size = (size_t)strtoull(argv[4], NULL, 10);
    if (threads < 1 || threads > 256 || g_objects < 1 || g_size < 1) {
        fprintf(stderr, "bench_s3: bad arguments\n");
        return 2;
    }
    g_data = malloc(g_size);
    if (!g_data)
        return 1;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < g_size; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        g_data[i] = (uint8_t)s;
    }
    if (st_backend_open("s3://ckpt-test", &g_b) != ST_OK) {
        fprintf(stderr, "bench_s3: %s\n", st_errmsg());
        return 1;
    }
    pthread_t th[256];
    double t0 = bench_now();
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker, NULL);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double dt = bench_now() - t0;
    st_backend_close(g_b);
    free(g_data);
    if (atomic_load(&g_failures))
        return 1;
    double mbps = (double)g_size * g_objects / dt / 1e6;
    fprintf(stderr, "bench_s3: %s %d x %zu bytes, %d threads: %.2f s, %.1f MB/s\n", argv[1],
            g_objects, g_size, threads, dt, mbps);
    printf("MBps %.1f\n", mbps);
    return 0;
}
