/*
 * s3_cond_put — the client side of tests/s3/run_rgw_cond_put.sh: conditional
 * creates (docs/S3.md, "Conditional PUT") against a real store. The store
 * is s3://ckpt-test/PREFIX at ENDPOINT, on the V4 backend with the retry
 * wrapper (st_backend_open_opts), the credentials from the environment.
 *
 *   s3_cond_put create ENDPOINT PREFIX
 *       the store creates: put_new of a new key is ST_OK, of the same key
 *       again ST_ERR_EXISTS and the object is unchanged (the backend's
 *       probe said "supported", which the script finds in our stderr)
 *   s3_cond_put race ENDPOINT PREFIX HOLD
 *       two daemons start with one node name (tests/unit/ut_lease.h, the
 *       race test_lease runs on mem and file://): the first claim is held
 *       between its read ("no lease") and its create while the file HOLD
 *       (made and removed there) exists, the second claims meanwhile on its
 *       own connection; released, the first is refused (ST_ERR_BUSY,
 *       naming the second) and the store holds the second's lease: exactly
 *       one holds the name
 *   s3_cond_put lost ENDPOINT PREFIX
 *       through faultproxy.py, which drops the answer to the first PUT of
 *       PREFIX/jobs/j/packs/ (3 MiB: sent after a 100 Continue) and of a
 *       .manifest after forwarding it (and its body): both
 *       st_put_once calls succeed, each after one retry that met its own
 *       object (created 0: the store answered 412), with our bytes stored
 *
 * Waits are on states (HOLD.reached), bounded. Exit status 0 when
 * everything held, 1 otherwise, 2 for bad arguments.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "backend/st_backend_retry.h"
#include "ut.h"
#include "ut_lease.h"

/* The backend's reports on stderr, where run_rgw_cond_put.sh finds the
 * probe's answer. */
static void print_log(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "%s\n", msg);
}

static const st_backend_observer stderr_observer = {.log = print_log};

static st_backend *open_store(const char *endpoint, const char *prefix)
{
    char url[512];
    snprintf(url, sizeof url, "s3://ckpt-test/%s", prefix);
    st_backend_opts o = {.s3_endpoint = endpoint,
                         .s3_signature = "v4",
                         .retry_base_ms = 10,
                         .observer = &stderr_observer};
    st_backend *b = NULL;
    CHECK_OK(st_backend_open_opts(url, &o, &b));
    return b;
}

static int holds_bytes(st_backend *b, const char *key, const void *data, size_t len)
{
    st_bytes got = {0};
    st_err e = st_get(b, key, 0, ST_GET_TO_END, &got);
    int same = !e && got.len == len && !memcmp(got.data, data, len);
    st_bytes_free(&got);
    return same;
}

static int holds(st_backend *b, const char *key, const char *text)
{
    return holds_bytes(b, key, text, strlen(text));
}

static void run_create(st_backend *b)
{
    CHECK_OK(st_put_new(b, "cond/created", "first", 5));
    CHECK_ERR(st_put_new(b, "cond/created", "second", 6), ST_ERR_EXISTS);
    CHECK(holds(b, "cond/created", "first"));
    CHECK_OK(st_del(b, "cond/created"));
}

static void run_lost(st_backend *b)
{
    static const char pack_key[] = "jobs/j/packs/ab/ab0123.pack";
    static const char manifest_key[] = "jobs/j/steps/00000000000000000001/nodes/n.r1.manifest";
    /* 3 MiB: curl sends it after a 100 Continue, which the proxy passes
     * before it drops the final answer (the body must reach the store). */
    size_t pack_len = 3u << 20;
    uint8_t *pack = malloc(pack_len);
    CHECK(pack != NULL);
    if (!pack)
        return;
    ut_rand_fill(pack, pack_len, 36);
    int created = -1;
    CHECK_OK(st_put_once(b, pack_key, pack, pack_len, ST_ONCE_NAMED_BY_CONTENT, &created));
    CHECK(created == 0); /* the retry met the object its first try stored */
    CHECK(st_backend_retry_count(b) == 1);
    CHECK_OK(st_put_once(b, manifest_key, "manifest bytes", 14, ST_ONCE_COMPARE, &created));
    CHECK(created == 0);
    CHECK(st_backend_retry_count(b) == 2);
    CHECK(holds_bytes(b, pack_key, pack, pack_len));
    free(pack);
    CHECK(holds(b, manifest_key, "manifest bytes"));
    printf("s3_cond_put lost: %" PRIu64 " retries, both creates met their own object\n",
           st_backend_retry_count(b));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int ok_args = (argc == 4 && (!strcmp(mode, "create") || !strcmp(mode, "lost"))) ||
                  (argc == 5 && !strcmp(mode, "race"));
    if (!ok_args) {
        fprintf(stderr, "usage: s3_cond_put create|lost ENDPOINT PREFIX | "
                        "race ENDPOINT PREFIX HOLD\n");
        return 2;
    }
    st_backend *b = open_store(argv[2], argv[3]);
    if (!b)
        return ut_finish();
    if (!strcmp(mode, "create")) {
        run_create(b);
    } else if (!strcmp(mode, "race")) {
        st_backend *held = open_store(argv[2], argv[3]);
        if (held)
            ut_lease_race(b, held, "racer", argv[4]);
    } else {
        run_lost(b);
    }
    st_backend_close(b);
    return ut_finish();
}
