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
 *   s3_delete_batch errors           against tests/s3/fake_s3_delete.py:
 *                                    per-key <Error>s mapped to st_err
 *                                    (AccessDenied permanent, InternalError
 *                                    transient, NoSuchKey deleted), and
 *                                    retried: the script checks that only
 *                                    the transient key is sent again
 *   s3_delete_batch nobatch          against fake_s3_delete.py --no-batch:
 *                                    two st_del_many of 3 keys all succeed,
 *                                    key by key (the script checks one
 *                                    refused POST, then 6 DELETEs)
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
    uint64_t batches = st_backend_counts_of(&counts, ST_REQ_DELETE_BATCH),
             dels = st_backend_counts_of(&counts, ST_REQ_DELETE);
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

/* Per-key results of one DeleteObjects answer, through the retry wrapper. */
static void run_errors(st_backend *b)
{
    st_del_item items[] = {{.key = "e/ok1"},
                           {.key = "e/deny1"},
                           {.key = "e/busy1"},
                           {.key = "e/gone1"},
                           {.key = "e/ok2"}};
    const st_err want[] = {ST_OK, ST_ERR_PERMANENT, ST_ERR_TRANSIENT, ST_OK, ST_OK};
    st_err e = st_del_many(b, items, 5);
    fprintf(stderr, "s3_delete_batch errors: %s: %s\n", st_strerror(e), st_errmsg());
    CHECK_ERR(e, ST_ERR_PERMANENT); /* the first failed item's */
    for (size_t i = 0; i < 5; i++) {
        CHECK(items[i].err == want[i]);
        if (items[i].err != want[i])
            fprintf(stderr, "  %s: %s, want %s\n", items[i].key, st_strerror(items[i].err),
                    st_strerror(want[i]));
    }
}

/* A store without DeleteObjects: every key deleted all the same. */
static void run_nobatch(st_backend *b)
{
    for (int round = 0; round < 2; round++) {
        st_del_item items[] = {{.key = "n/a"}, {.key = "n/b"}, {.key = "n/c"}};
        CHECK_OK(st_del_many(b, items, 3));
        CHECK(st_del_items_result(items, 3) == ST_OK);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int ok_args = (argc == 4 && (!strcmp(mode, "put") || !strcmp(mode, "del"))) ||
                  (argc == 3 && !strcmp(mode, "check")) ||
                  (argc == 2 && (!strcmp(mode, "errors") || !strcmp(mode, "nobatch")));
    if (!ok_args || !getenv("CKPT_S3_ENDPOINT")) {
        fprintf(stderr, "usage: CKPT_S3_ENDPOINT=... s3_delete_batch put|del N PREFIX | "
                        "check PREFIX | errors | nobatch\n");
        return 2;
    }
    /* No retries (a request that failed would be sent again and the
     * script's request count would not be the backend's), but in "errors",
     * which is about them: 3 tries, short waits. */
    int errors = !strcmp(mode, "errors");
    st_backend_opts o = {.retry_attempts = errors ? 3 : 1, .retry_base_ms = 1, .retry_max_ms = 2};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts("s3://ckpt-test", &o, &b));
    if (!b)
        return ut_finish();
    if (errors || !strcmp(mode, "nobatch")) {
        (errors ? run_errors : run_nobatch)(b);
        st_backend_close(b);
        return ut_finish();
    }
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
