/*
 * s3_delete_batch — the client side of tests/s3/run_delete_batch.sh, which
 * proves at the wire that one DeleteObjects request deletes many keys. The
 * script counts the HTTP requests that pass a fault-free faultproxy.py;
 * this program does the work, with the backend CKPT_S3_SIGNATURE names and
 * the store URL s3://ckpt-test (CKPT_S3_ENDPOINT):
 *
 *   s3_delete_batch put N PREFIX     N small objects PREFIX/kNNNNN
 *   s3_delete_batch del N PREFIX     one st_del_many of those N keys and
 *                                    nothing else (so the proxy in front
 *                                    sees only the delete requests); checks
 *                                    every per-key result and the count
 *                                    wrapper's view (st_backend_count.h):
 *                                    V4 one delete_batch per 1000 keys, no
 *                                    single DELETE; V2 (libs3) N DELETEs
 *   s3_delete_batch check PREFIX     nothing is left under PREFIX
 *
 * Exit status 0 when everything held, 1 otherwise.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/st_backend.h"
#include "backend/st_backend_count.h"
#include "backend/st_backend_open.h"
#include "ut.h"

static int count_keys(void *arg, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    (*(size_t *)arg)++;
    return 0;
}

static const char *key_of(char *buf, size_t cap, const char *prefix, size_t i)
{
    snprintf(buf, cap, "%s/k%05zu", prefix, i);
    return buf;
}

static void run_del(st_backend **b, size_t n, const char *prefix)
{
    st_backend_counts counts = {0};
    CHECK_OK(st_backend_count_wrap(b, &counts));
    st_del_item *items = calloc(n, sizeof *items);
    char(*keys)[64] = calloc(n, sizeof *keys);
    if (!items || !keys) {
        CHECK(!"out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        items[i] =
            (st_del_item){.key = key_of(keys[i], sizeof keys[i], prefix, i), .err = ST_ERR_IO};
    st_err e = st_del_many(*b, items, n);
    CHECK_OK(e);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++)
        failed += items[i].err != ST_OK;
    CHECK(failed == 0);
    const char *sig = getenv("CKPT_S3_SIGNATURE");
    int v2 = sig && strcmp(sig, "v2") == 0;
    uint64_t batches = atomic_load(&counts.delete_batch), dels = atomic_load(&counts.del);
    printf("delete_batch %" PRIu64 " keys_batch_deleted %" PRIu64 " del %" PRIu64 "\n", batches,
           (uint64_t)atomic_load(&counts.keys_batch_deleted), dels);
    if (v2) {
        CHECK(batches == 0 && dels == n);
    } else {
        CHECK(batches == (n + ST_DEL_BATCH_MAX - 1) / ST_DEL_BATCH_MAX && dels == 0);
        CHECK(atomic_load(&counts.keys_batch_deleted) == n);
    }
out:
    free(items);
    free(keys);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int ok_args = (argc == 4 && (!strcmp(mode, "put") || !strcmp(mode, "del"))) ||
                  (argc == 3 && !strcmp(mode, "check"));
    if (!ok_args || !getenv("CKPT_S3_ENDPOINT")) {
        fprintf(stderr, "usage: CKPT_S3_ENDPOINT=... s3_delete_batch put|del N PREFIX | "
                        "check PREFIX\n");
        return 2;
    }
    /* No retries: a request that failed would be sent again and the
     * script's request count would not be the backend's. */
    st_backend_opts o = {.retry_attempts = 1};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://ckpt-test", &o, &b));
    if (!b)
        return ut_finish();
    const char *prefix = argv[argc - 1];
    size_t n = argc == 4 ? strtoul(argv[2], NULL, 10) : 0;
    char key[64];
    if (!strcmp(mode, "put")) {
        for (size_t i = 0; i < n; i++)
            CHECK_OK(st_put(b, key_of(key, sizeof key, prefix, i), "x", 1));
    } else if (!strcmp(mode, "del")) {
        run_del(&b, n, prefix);
    } else {
        size_t left = 0;
        snprintf(key, sizeof key, "%s/", prefix);
        CHECK_OK(st_list(b, key, count_keys, &left));
        CHECK(left == 0);
        if (left)
            fprintf(stderr, "s3_delete_batch: %zu keys left under %s\n", left, prefix);
    }
    st_backend_close(b);
    return ut_finish();
}
