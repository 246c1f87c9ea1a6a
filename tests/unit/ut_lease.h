/*
 * ut_lease.h — the node-name start race of docs/NODES.md ("The first lease
 * is a create"), driven by state over any store: test_lease runs it on the
 * in-memory and file:// backends, plain and encrypted, tests/s3/s3_cond_put.c
 * on Ceph RGW.
 *
 * Two daemons start with one name and both read "no lease". The first
 * claim is held between its read and its create (the fault wrapper's
 * put_hold on the lease key, which makes HOLD.reached once it holds); the
 * second claims meanwhile; released, the first one's create meets the
 * second's lease and the first is refused, naming the holder. With plain
 * PUTs both claims succeeded and the later lease replaced the winner's.
 * Include after ut.h.
 */
#ifndef UT_LEASE_H
#define UT_LEASE_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "backend/st_backend_fault.h"
#include "engine/st_nodelease.h"
#include "format/st_lease.h"
#include "util/st_fsutil.h"
#include "ut.h"

/* A lease of instance "cccc…" (instance_char[0] repeated), a 60 s ttl. */
static inline st_lease ut_lease_of(const char *instance_char, int64_t heartbeat_ns, int64_t pid,
                                   const char *origin)
{
    st_lease l = {.heartbeat_ns = heartbeat_ns, .ttl_ns = 60ll * 1000000000, .pid = pid};
    memset(l.instance, instance_char[0], ST_LEASE_INSTANCE_LEN);
    snprintf(l.origin, sizeof l.origin, "%s", origin);
    snprintf(l.host, sizeof l.host, "host-1");
    return l;
}

/* One claim on its own thread. */
typedef struct ut_claim_run {
    st_backend *b;
    const char *node;
    st_lease lease, holder;
    st_err e;
    char msg[512];
} ut_claim_run;

static inline void *ut_claim_main(void *arg)
{
    ut_claim_run *r = arg;
    r->e = st_nodelease_claim(r->b, r->node, &r->lease, ST_CLAIM_ACQUIRE, NULL, &r->holder);
    snprintf(r->msg, sizeof r->msg, "%s", st_errmsg());
    return NULL;
}

/* The race for node over store; held is a second handle on the same
 * objects, which this call wraps and closes; hold a path of a file that
 * does not exist yet (made and removed here). Waits on HOLD.reached for
 * at most 30 s. */
static inline void ut_lease_race(st_backend *store, st_backend *held, const char *node,
                                 const char *hold)
{
    char reached[4096 + 16], spec[4096 + 300], key[ST_KEY_MAX], want[300];
    CHECK_OK(st_key_lease(key, sizeof key, node));
    snprintf(reached, sizeof reached, "%s.reached", hold);
    snprintf(spec, sizeof spec, "put_hold=%s,put_hold_key=%s", hold, key);
    unlink(reached);
    ut_write_file(hold, "", 0);
    CHECK_OK(st_backend_fault_wrap(&held, spec));
    const int64_t now = st_now_ns();
    ut_claim_run first = {
        .b = held, .node = node, .lease = ut_lease_of("a", now, 1, "0000000000000001")};
    st_lease second = ut_lease_of("b", now, 2, "0000000000000002");
    pthread_t th;
    CHECK(pthread_create(&th, NULL, ut_claim_main, &first) == 0);
    for (int i = 0; i < 3000 && access(reached, F_OK) != 0; i++)
        usleep(10000);
    CHECK(access(reached, F_OK) == 0); /* the first one read "no lease" and waits */
    CHECK_OK(st_nodelease_claim(store, node, &second, ST_CLAIM_ACQUIRE, NULL, NULL));
    unlink(hold);
    pthread_join(th, NULL);
    snprintf(want, sizeof want, "node name '%s' is held by another live ckptfs", node);
    CHECK(first.e == ST_ERR_BUSY);
    CHECK(strstr(first.msg, want) != NULL);
    CHECK(first.holder.pid == 2);
    printf("  start race: the first claim: %s\n", first.e ? first.msg : "holds the name");
    st_bytes buf = {0};
    st_lease stored;
    CHECK_OK(st_get(store, key, 0, ST_GET_TO_END, &buf));
    CHECK(st_lease_decode(buf.data, buf.len, &stored) == ST_OK &&
          !strcmp(stored.instance, second.instance));
    st_bytes_free(&buf);
    /* The winner goes on: its heartbeat renews its own lease. */
    CHECK_OK(st_nodelease_claim(store, node, &second, ST_CLAIM_RENEW, NULL, NULL));
    st_backend_close(held);
}

#endif
