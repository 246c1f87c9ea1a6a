/*
 * test_vfs_fetch_bound — a new node whose ranks all open their stored files
 * at once fetches at most ST_VFS_FETCH_RESTORERS of them at a time
 * (docs/MEMORY.md): each fetch holds a restorer, whose buffers (one ranged
 * GET of up to 16 MiB, a decoded chunk) are the daemon's memory. Before the
 * bound, every FUSE thread's open ran its own fetch (and a file of 32 MiB
 * or more four of them): 64 ranks resuming through one mount took the
 * daemon to 428 MiB (tests/bench/bench_scale.sh, ranks:64).
 *
 * Node A stores a step of many files; node B opens them all from as many
 * threads at once, over a handle on the store that counts the pack GETs in
 * flight (each one held for a few ms, so that fetches overlap). Checked:
 * the most in flight at once is at most the bound, fetches still overlap,
 * and every file reads back byte for byte.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "vfs_harness.h"

#define NFILES      32
#define FILE_BYTES  (300u * 1024)
#define GET_HOLD_US 20000
#define BOUND       8 /* ST_VFS_FETCH_RESTORERS, store/mount/st_vfs_remote.c */

/* A backend wrapper that counts pack GETs in flight; everything else passes. */
typedef struct counting {
    st_backend_wrap head; /* first: the ops it passes through are st_wrap_*; inner owned */
    atomic_int inflight, most;
} counting;
_Static_assert(offsetof(counting, head) == 0, "st_wrap_* read the head at ctx");

static st_err c_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    counting *c = ctx;
    if (!strstr(key, "/packs/"))
        return c->head.inner->ops->get(c->head.inner->ctx, key, off, len, out);
    int now = atomic_fetch_add(&c->inflight, 1) + 1;
    int most = atomic_load(&c->most);
    while (now > most && !atomic_compare_exchange_weak(&c->most, &most, now))
        ;
    usleep(GET_HOLD_US);
    st_err e = c->head.inner->ops->get(c->head.inner->ctx, key, off, len, out);
    atomic_fetch_sub(&c->inflight, 1);
    return e;
}

static void c_close(void *ctx)
{
    counting *c = ctx;
    st_backend_close(c->head.inner);
}

static const st_backend_ops counting_ops = {
    .scheme = "mem",
    .put = st_wrap_put,
    .get = c_get,
    .stat = st_wrap_stat,
    .stat_time = st_wrap_stat_time,
    .list = st_wrap_list,
    .del = st_wrap_del,
    .close = c_close,
};

typedef struct reader {
    vh_mount *m;
    int i;
    int same; /* out: the file read back as written */
} reader;

static void *read_one(void *arg)
{
    reader *r = arg;
    char path[128];
    snprintf(path, sizeof path, VH_JOB "/step-000001/shard_%02d.bin", r->i);
    uint8_t *want = vh_data(FILE_BYTES, 100 + (uint64_t)r->i);
    st_bytes got = {0};
    r->same = vh_read(r->m, path, &got) == ST_OK && got.len == FILE_BYTES &&
              !memcmp(got.data, want, FILE_BYTES);
    st_bytes_free(&got);
    free(want);
    return NULL;
}

static void test_concurrent_opens_share_the_fetch_bound(void)
{
    st_backend *store;
    CHECK_OK(st_backend_mem_open(&store));
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "node-a", "bound-a", 1));
    if (!a.v)
        return;
    char path[128];
    for (int i = 0; i < NFILES; i++) {
        uint8_t *data = vh_data(FILE_BYTES, 100 + (uint64_t)i);
        snprintf(path, sizeof path, VH_JOB "/step-000001/shard_%02d.bin", i);
        CHECK_OK(vh_write(&a, path, data, FILE_BYTES, VH_PID_A));
        free(data);
    }
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 30));
    CHECK(vh_consistent(store, 1));
    vh_mount_close(&a);

    /* Node B, a new node, over the counting handle. */
    static counting c;
    CHECK_OK(st_backend_mem_share(store, &c.head.inner));
    st_backend *b = malloc(sizeof *b);
    CHECK(b != NULL);
    if (!b || !c.head.inner)
        return;
    *b = (st_backend){&counting_ops, &c};
    vh_mount m = {0};
    snprintf(m.node, sizeof m.node, "node-b");
    snprintf(m.staging, sizeof m.staging, "%s/bound-b", vh_tmp);
    st_vfs_options o = {.backend = b,
                        .staging_dir = m.staging,
                        .node = m.node,
                        .refresh_seconds = 0.1,
                        .drain_seconds = 20,
                        .log = vh_log,
                        .log_arg = m.node};
    CHECK_OK(st_vfs_open(&o, &m.v));
    if (!m.v)
        return;
    CHECK(VH_WAIT(vh_exists(&m, VH_JOB "/step-000001/shard_00.bin"), 10));
    pthread_t th[NFILES];
    reader rd[NFILES];
    for (int i = 0; i < NFILES; i++) {
        rd[i] = (reader){&m, i, 0};
        CHECK(pthread_create(&th[i], NULL, read_one, &rd[i]) == 0);
    }
    int same = 0;
    for (int i = 0; i < NFILES; i++) {
        pthread_join(th[i], NULL);
        same += rd[i].same;
    }
    CHECK(same == NFILES);
    int most = atomic_load(&c.most);
    fprintf(stderr, "  pack GETs in flight at most: %d (bound %d, %d readers)\n", most, BOUND,
            NFILES);
    CHECK(most <= BOUND);
    CHECK(most >= 2); /* still parallel */
    st_vfs_close(m.v);
    st_backend_close(b);
    st_backend_close(store);
}

int main(void)
{
    if (vh_setup("vfs-fetch-bound"))
        return 1;
    RUN(test_concurrent_opens_share_the_fetch_bound);
    vh_teardown();
    return ut_finish();
}
