/*
 * test_vfs_warmup — fetching remote files in verified runs and warm-up
 * (docs/WARMUP.md, store/mount/st_vfs_remote.c and st_vfs_warmup.c): node A
 * makes a step durable; node B, over a store whose pack GETs are slowed
 * (st_backend_fault get_delay_ms), reads the first MiB of a 64 MiB file
 * while the rest is still being fetched, and reads back every byte; a
 * warm-up request makes a step's files local before anybody opens them
 * (status "warm", and reading them then fetches nothing); a mount closed
 * mid-fetch leaves nothing a restart trusts; malformed requests are refused.
 *
 * The cases check order and content, never durations: the delay only keeps
 * the fetch under way long enough for a read to land during it (8 runs of
 * 8 MiB, 4 workers, 1 s per pack GET: two rounds of GETs at least).
 */
#define _GNU_SOURCE /* gettid */
#include <sys/resource.h>

#include "vfs_harness.h"
#include "mount/st_vfs_impl.h"
#include "ut_store.h"
#include "format/st_lease.h"

static st_backend *store;

#define BIG_LEN  (64u << 20)
#define BIG_PATH VH_JOB "/step-000007/model.pt"
#define SLOW_GET "get_delay_ms=1000"

static uint8_t *big;

/* A fresh store holding step 7 of VH_JOB (model.pt: BIG_LEN random bytes,
 * and a marker), durable and consistent, written by node "a". */
static void store_with_step(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "warm-a", 1));
    if (!a.v)
        return;
    CHECK_OK(vh_write(&a, BIG_PATH, big, BIG_LEN, VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000007/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 60));
    CHECK(vh_consistent(store, 7));
    vh_mount_close(&a);
}

/* Opens mount b (node "b", started) over the store, pack GETs slowed if
 * fault, and waits until it lists BIG_PATH. */
static int open_b(vh_mount *b, const char *staging, const char *fault)
{
    CHECK_OK(vh_mount_open_fault(b, store, "b", staging, 1, fault));
    if (!b->v)
        return 0;
    CHECK(VH_WAIT(vh_exists(b, BIG_PATH), 10));
    return 1;
}

static int fetches_active(vh_mount *m)
{
    return (int)vh_status_u64(m, "\"warmup\"", "fetches_active");
}

/* Bytes mount m read back from staging for whole-file digests. */
static uint64_t read_back(vh_mount *m)
{
    return vh_status_u64(m, "\"warmup\"", "read_back_bytes");
}

/* Verified bytes mount m fetched so far (status warmup.fetched_bytes). */
static uint64_t fetched(vh_mount *m)
{
    return vh_status_u64(m, "\"warmup\"", "fetched_bytes");
}

/* A fresh store with step 7, mount b over it with slowed pack GETs, and
 * BIG_PATH opened read-only there (its fetch begun); NULL (b closed) if any
 * of it failed. */
static st_vfs_handle *open_big_slowly(vh_mount *b, const char *staging, st_vfs_attr *at)
{
    store_with_step();
    if (!open_b(b, staging, SLOW_GET))
        return NULL;
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_lookup(b, BIG_PATH, at));
    CHECK_OK(st_vfs_open_file(b->v, at->ino, O_RDONLY, VH_PID_A, &h));
    if (!h)
        vh_mount_close(b);
    return h;
}

static void test_read_during_fetch(void)
{
    vh_mount b;
    st_vfs_attr at;
    st_vfs_handle *h = open_big_slowly(&b, "during-b", &at);
    if (!h)
        return;
    /* The open returned before the content: the fetch is under way. */
    CHECK(fetches_active(&b) == 1);
    uint8_t *buf = malloc(1u << 20);
    st_err e;
    CHECK(vh_pread(&b, h, buf, 1u << 20, 0, &e) == (ssize_t)(1u << 20));
    CHECK(memcmp(buf, big, 1u << 20) == 0);
    /* Served once its run was verified, not after the whole file: the
     * fetch still runs and has fetched less than the file. */
    CHECK(fetches_active(&b) == 1);
    CHECK(fetched(&b) < BIG_LEN);
    /* A read ahead of the fetch front (the end, as torch.load's zip
     * directory) and then every byte, through the same handle. */
    CHECK(vh_pread(&b, h, buf, 1u << 20, BIG_LEN - (1u << 20), &e) == (ssize_t)(1u << 20));
    CHECK(memcmp(buf, big + BIG_LEN - (1u << 20), 1u << 20) == 0);
    int same = 1;
    for (uint64_t off = 0; off < BIG_LEN && same; off += 1u << 20)
        same = vh_pread(&b, h, buf, 1u << 20, off, &e) == (ssize_t)(1u << 20) &&
               memcmp(buf, big + off, 1u << 20) == 0;
    CHECK(same);
    /* The fetch ends with the whole-file check: a cached, verified copy.
     * The check holds back while the file is read, and goes on once it is
     * not, though the reader still holds it open. */
    CHECK(VH_WAIT(fetches_active(&b) == 0, 30));
    st_vfs_release(b.v, h);
    CHECK(fetched(&b) == BIG_LEN);
    /* The whole-file digest was checked once every run was verified, by
     * reading the staging file back: the whole file, once. */
    CHECK(read_back(&b) == BIG_LEN);
    CHECK(vh_file_is(&b, BIG_PATH, big, BIG_LEN));
    free(buf);
    vh_mount_close(&b);
}

/* Under b's lock: the fetch of inode ino's run states and workers. */
typedef struct fetch_view {
    int fetching;
    size_t nruns, done;
    int tail_todo; /* the last run not given out yet */
    int workers, busy;
} fetch_view;

static fetch_view view_fetch(vh_mount *m, uint64_t ino)
{
    fetch_view fv = {0};
    pthread_mutex_lock(&m->v->lock);
    vnode *n = ino < m->v->ninodes ? m->v->inodes[ino] : NULL;
    vfetch *fx = n ? n->fetch : NULL;
    if (fx && fx->runs) {
        fv.fetching = 1;
        fv.nruns = fx->nruns;
        fv.done = fx->done;
        fv.tail_todo = fx->runs[fx->nruns - 1].state == VRUN_TODO;
        fv.workers = fx->workers;
        fv.busy = fx->busy;
    }
    pthread_mutex_unlock(&m->v->lock);
    return fv;
}

typedef struct pread_job {
    vh_mount *m;
    st_vfs_handle *h;
    uint64_t off;
    uint8_t *buf;
    ssize_t got;
} pread_job;

static void *pread_main(void *arg)
{
    pread_job *j = arg;
    st_err e;
    j->got = vh_pread(j->m, j->h, j->buf, 1u << 20, j->off, &e);
    return NULL;
}

/* The fetch gives out the file's last run first (torch.load reads a zip's
 * directory there before anything else), and a read of a run not started
 * while every worker is busy gets a worker of its own at once rather than
 * waiting for a run to end. Checked on the run states, not on time: the
 * slowed GETs keep the first runs busy. */
static void test_reader_order(void)
{
    vh_mount b;
    st_vfs_attr at;
    st_vfs_handle *h = open_big_slowly(&b, "order-b", &at);
    if (!h)
        return;
    /* 4 workers took 4 runs: the tail among them, before any run ended. */
    CHECK(VH_WAIT(view_fetch(&b, at.ino).busy == 4, 10));
    fetch_view fv = view_fetch(&b, at.ino);
    CHECK(fv.fetching && fv.nruns >= 8);
    CHECK(fv.done == 0); /* each GET takes a second: none has ended */
    CHECK(!fv.tail_todo);
    /* A read in the middle while the four are busy: a fifth worker. */
    pread_job j = {&b, h, 5 * (8u << 20), malloc(1u << 20), -1};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, pread_main, &j) == 0);
    CHECK(VH_WAIT(view_fetch(&b, at.ino).workers == 5, 10));
    pthread_join(t, NULL);
    CHECK(j.got == (ssize_t)(1u << 20) && memcmp(j.buf, big + j.off, 1u << 20) == 0);
    free(j.buf);
    st_vfs_release(b.v, h);
    CHECK(VH_WAIT(fetches_active(&b) == 0, 30));
    CHECK(vh_file_is(&b, BIG_PATH, big, BIG_LEN));
    vh_mount_close(&b);
}

/* An empty remote file has no run: its fetch ends, whole-file check
 * included, on the thread that opened it (a libfuse worker in the daemon).
 * That thread keeps its priority: only a fetch worker, which ends after the
 * check, is made nicer for it. */
static void test_empty_file_open_keeps_priority(void)
{
    store_with_step();
    vh_mount b;
    if (!open_b(&b, "empty-b", NULL))
        return;
    const char *empty = VH_JOB "/step-000007/.ckpt-complete";
    CHECK(VH_WAIT(vh_exists(&b, empty), 10));
    st_vfs_attr at;
    CHECK_OK(vh_lookup(&b, empty, &at));
    CHECK(at.size == 0);
    const id_t tid = (id_t)gettid();
    errno = 0;
    const int before = getpriority(PRIO_PROCESS, tid);
    CHECK(errno == 0);
    st_vfs_handle *h = NULL;
    CHECK_OK(st_vfs_open_file(b.v, at.ino, O_RDONLY, VH_PID_A, &h));
    if (h)
        st_vfs_release(b.v, h);
    CHECK(getpriority(PRIO_PROCESS, tid) == before);
    vh_mount_close(&b);
}

/* A manifest whose whole-file digest is wrong (its chunks all verify) still
 * fails the fetch with the digest computed from memory: the file is not
 * kept, and the error says why. */
/* A fresh store with step 7 whose whole-file digests are wrong (every chunk
 * still verifies), and mount b over it; 0 (b closed) if that failed. */
static int open_b_wrong_digests(vh_mount *b, const char *staging)
{
    store_with_step();
    ut_wrong_file_digests(store, VH_JOB, 7, "a");
    return open_b(b, staging, NULL);
}

static void test_wrong_digest_fails_fetch(void)
{
    vh_mount b;
    if (!open_b_wrong_digests(&b, "bad-digest-b"))
        return;
    st_bytes out = {0};
    (void)vh_read(&b, BIG_PATH, &out); /* runs already verified may be served */
    CHECK(VH_WAIT(fetches_active(&b) == 0, 30));
    vh_status(&b, &out);
    CHECK(strstr((const char *)out.data, "whole-file digest mismatch") != NULL);
    /* Not kept: a second read fetches it again (and fails again). */
    uint64_t before = fetched(&b);
    (void)vh_read(&b, BIG_PATH, &out);
    CHECK(VH_WAIT(fetches_active(&b) == 0, 30));
    CHECK(fetched(&b) > before);
    st_bytes_free(&out);
    vh_mount_close(&b);
}

/* Writes line to .ckptfs/warmup as ckptctl warmup does. */
static st_err warmup_write(vh_mount *m, const char *line)
{
    return vh_ctl_write(m, ST_VFS_WARMUP_INO, line);
}

/* How many warm-up requests of step 7 of VH_JOB the status shows in state want. */
static int warm_requests(vh_mount *m, const char *want)
{
    st_bytes s = {0};
    vh_status(m, &s);
    char pat[128];
    snprintf(pat, sizeof pat, "{\"job\":\"%s\",\"step\":7,\"state\":\"%s\"", VH_JOB, want);
    int n = 0;
    for (const char *p = (const char *)s.data; (p = strstr(p, pat)); p++)
        n++;
    st_bytes_free(&s);
    return n;
}

static int warm_state_is(vh_mount *m, const char *want)
{
    return warm_requests(m, want) > 0;
}

/* Warm-up moves to a step's next file once a file's runs are verified, its
 * whole-file check still to end: a check that fails after that still fails
 * the request. */
static void test_warmup_wrong_digest_fails_request(void)
{
    vh_mount b;
    if (!open_b_wrong_digests(&b, "bad-digest-warm-b"))
        return;
    CHECK_OK(warmup_write(&b, VH_JOB "\n"));
    CHECK(VH_WAIT(warm_state_is(&b, "failed"), 60));
    CHECK(warm_requests(&b, "warm") == 0);
    CHECK(VH_WAIT(fetches_active(&b) == 0, 30));
    st_bytes out = {0};
    vh_status(&b, &out);
    CHECK(strstr((const char *)out.data, "whole-file digest mismatch") != NULL);
    st_bytes_free(&out);
    vh_mount_close(&b);
}

static void test_warmup_warms(void)
{
    store_with_step();
    vh_mount b;
    if (!open_b(&b, "warm-b", NULL))
        return;
    CHECK_OK(warmup_write(&b, VH_JOB "\n")); /* the newest step: 7 */
    CHECK(VH_WAIT(warm_state_is(&b, "warm"), 60));
    CHECK(vh_status_u64(&b, "\"requests\"", "files") == 2);
    CHECK(vh_status_u64(&b, "\"requests\"", "files_warm") == 2);
    CHECK(vh_status_u64(&b, "\"requests\"", "bytes_warm") == BIG_LEN);
    /* Warm means local: reading it fetches nothing more. */
    CHECK(fetched(&b) == BIG_LEN);
    CHECK(vh_file_is(&b, BIG_PATH, big, BIG_LEN));
    CHECK(fetched(&b) == BIG_LEN);
    /* Every job's newest (--prefetch latest): a request per job, warm too. */
    CHECK_OK(st_vfs_warmup(b.v, NULL, UINT64_MAX));
    CHECK(VH_WAIT(warm_requests(&b, "warm") == 2, 10));
    vh_mount_close(&b);
}

/* A node that wrote part of a step and comes back under its name (its
 * staging lost, as on a replacement machine) warms only its own part: each
 * rank of a sharded checkpoint reads its shard. A node with no part in the
 * step warms all of it. */
static void test_warmup_own_part(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    const uint64_t len = 3u << 20;
    uint8_t *r0 = vh_data(len, 30), *r1 = vh_data(len, 31);
    static const char *const rank[2] = {VH_JOB "/step-000007/rank-0.bin",
                                        VH_JOB "/step-000007/rank-1.bin"};
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "a", "own-a", 1));
    CHECK_OK(vh_mount_open(&b, store, "b", "own-b", 1));
    if (!a.v || !b.v)
        return;
    CHECK_OK(vh_write(&a, rank[0], r0, len, VH_PID_A));
    CHECK_OK(vh_commit(&a, VH_JOB " 7 0 2\n"));
    CHECK_OK(vh_write(&b, rank[1], r1, len, VH_PID_B));
    CHECK_OK(vh_commit(&b, VH_JOB " 7 1 2\n"));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK_OK(st_vfs_wait_idle(b.v, 20));
    CHECK(vh_consistent(store, 7));
    vh_mount_close(&b);
    vh_mount_close(&a);
    /* b's daemon is gone and its lease with it (as once its ttl passes). */
    char lease[256];
    CHECK_OK(st_key_lease(lease, sizeof lease, "b"));
    CHECK_OK(st_del(store, lease));

    vh_mount again, other;
    CHECK_OK(vh_mount_open(&again, store, "b", "own-b-again", 1)); /* b's staging is gone */
    CHECK_OK(vh_mount_open(&other, store, "c", "own-c", 1));
    if (!again.v || !other.v)
        return;
    CHECK(VH_WAIT(vh_exists(&again, rank[0]) && vh_exists(&other, rank[0]), 10));
    CHECK_OK(st_vfs_warmup(again.v, NULL, UINT64_MAX));
    CHECK_OK(st_vfs_warmup(other.v, NULL, UINT64_MAX));
    CHECK(VH_WAIT(warm_state_is(&again, "warm") && warm_state_is(&other, "warm"), 60));
    CHECK(vh_status_u64(&again, "\"requests\"", "files") == 1);
    CHECK(fetched(&again) == len); /* rank 1's file only */
    CHECK(vh_status_u64(&other, "\"requests\"", "files") == 2);
    CHECK(fetched(&other) == 2 * len);
    /* What warm-up left is fetched when opened. */
    CHECK(vh_file_is(&again, rank[0], r0, len));
    CHECK(vh_file_is(&again, rank[1], r1, len));
    vh_mount_close(&other);
    vh_mount_close(&again);
    free(r0);
    free(r1);
}

static void test_bad_requests_refused(void)
{
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "c", "bad-c", 0));
    if (!b.v)
        return;
    CHECK_ERR(warmup_write(&b, "bad/name\n"), ST_ERR_INVALID);
    CHECK_ERR(warmup_write(&b, VH_JOB " -1\n"), ST_ERR_INVALID);
    CHECK_ERR(warmup_write(&b, VH_JOB " 7 8\n"), ST_ERR_INVALID);
    CHECK_ERR(warmup_write(&b, VH_JOB " 7\n" VH_JOB "\n"), ST_ERR_INVALID);
    CHECK_ERR(warmup_write(&b, ""), ST_ERR_INVALID);
    st_vfs_handle *h = NULL;
    CHECK_ERR(st_vfs_open_file(b.v, ST_VFS_WARMUP_INO, O_RDONLY, VH_PID_A, &h), ST_ERR_READ_ONLY);
    CHECK_OK(warmup_write(&b, VH_JOB " 7"));
    vh_mount_close(&b);
}

/* Closed in the middle of a fetch (a crash leaves the same: a staging file
 * no journal row names): the next mount on that staging fetches again and
 * serves exactly the stored bytes. */
static void test_closed_mid_fetch_leaves_nothing_trusted(void)
{
    store_with_step();
    vh_mount b;
    if (!open_b(&b, "mid-b", SLOW_GET))
        return;
    CHECK_OK(st_vfs_warmup(b.v, VH_JOB, 7));
    CHECK(VH_WAIT(fetched(&b) > 0, 30));
    CHECK(fetched(&b) < BIG_LEN);
    vh_mount_close(&b);
    CHECK(open_b(&b, "mid-b", NULL));
    if (!b.v)
        return;
    CHECK(fetches_active(&b) == 0);
    CHECK(vh_file_is(&b, BIG_PATH, big, BIG_LEN));
    vh_mount_close(&b);
}

/* The runs a file is cut into: every chunk in exactly one run, in order,
 * none over vfs_run_bytes() unless one chunk is. A 1 GiB torch.save file had
 * more runs than size / VFS_RUN_BYTES + 2 (chunks that do not fill a run
 * exactly), which overflowed the run table (ckptfs aborted in the resume
 * benchmark): 5 MiB chunks in a 107 MiB file make one run each, 1.4x that
 * bound. */
static void test_runs_cover_every_chunk(void)
{
    enum { N = 100, SMALL = 20 };
    st_chunk_ref chunks[N + 1];
    memset(chunks, 0, sizeof chunks);
    uint64_t size = 0;
    for (int i = 0; i < SMALL; i++)
        size += chunks[i].raw_len = i == 7 ? (12u << 20) : (5u << 20) + (uint32_t)i;
    st_file_entry f = {.path = "f", .size = size, .nchunks = SMALL, .chunks = chunks};
    vrun *runs = NULL;
    size_t n = 0;
    CHECK(vfs_run_bytes(size) == VFS_RUN_BYTES);
    CHECK_OK(vfs_layout_runs(&f, &runs, &n));
    CHECK(n == SMALL);
    uint64_t off = 0;
    size_t next = 0;
    for (size_t r = 0; runs && r < n; r++) {
        CHECK(runs[r].first == next && runs[r].off == off && runs[r].count >= 1);
        CHECK(runs[r].len <= VFS_RUN_BYTES || runs[r].count == 1);
        CHECK(runs[r].state == VRUN_TODO);
        next += runs[r].count;
        off += runs[r].len;
    }
    CHECK(next == SMALL && off == size);
    free(runs);
    /* 1 MiB chunks fill 8 MiB runs exactly; a short last run. */
    for (int i = 0; i < N; i++)
        chunks[i].raw_len = 1u << 20;
    f.size = (uint64_t)N << 20;
    f.nchunks = N;
    CHECK_OK(vfs_layout_runs(&f, &runs, &n));
    CHECK(n == (N + 7) / 8 && runs[n - 1].count == N % 8);
    free(runs);
    /* Chunks that do not add up to the size: damage, not a layout. */
    f.size++;
    CHECK_ERR(vfs_layout_runs(&f, &runs, &n), ST_ERR_CORRUPT);
}

/* A large file has fewer, longer runs (a GET never spans two runs: a 4 GiB
 * file took 673 GETs with 8 MiB ones), up to VFS_RUN_MAX, but its last
 * VFS_RUN_BYTES are a short run of their own (torch.load reads a zip's
 * directory at the end first, and waits for that run). */
static void test_large_file_runs(void)
{
    enum { N = 1024 };
    st_chunk_ref *chunks = calloc(N + 1, sizeof *chunks);
    CHECK(chunks != NULL);
    if (!chunks)
        return;
    for (int i = 0; i < N; i++)
        chunks[i].raw_len = 1u << 20;
    st_file_entry f = {.path = "f", .size = (uint64_t)N << 20, .nchunks = N, .chunks = chunks};
    CHECK(vfs_run_bytes(f.size) == VFS_RUN_MAX);
    CHECK(vfs_run_bytes(512ull << 20) == VFS_RUN_MAX);
    CHECK(vfs_run_bytes(256ull << 20) == 16ull << 20);
    vrun *runs = NULL;
    size_t n = 0;
    CHECK_OK(vfs_layout_runs(&f, &runs, &n));
    /* 31 runs of 32 MiB, 24 MiB up to the tail, the tail's 8 MiB. */
    CHECK(n == 33);
    uint64_t off = 0;
    for (size_t r = 0; runs && r < n; r++) {
        CHECK(runs[r].off == off && runs[r].len == (r < 31    ? VFS_RUN_MAX
                                                    : r == 31 ? 24u << 20
                                                              : VFS_RUN_BYTES));
        off += runs[r].len;
    }
    CHECK(off == f.size);
    free(runs);
    free(chunks);
}

/* A large file written in one go lies in ~24 MiB packs: its runs end at the
 * pack boundaries (each then one streamed GET) rather than every 32 MiB,
 * which put two packs in most runs: 80 GETs for a 1 GiB file where 43 packs
 * hold it. The tail's short run stays. */
static void test_runs_end_at_packs(void)
{
    enum { N = 1024, PER_PACK = 24 };
    st_chunk_ref *chunks = calloc(N + 1, sizeof *chunks);
    CHECK(chunks != NULL);
    if (!chunks)
        return;
    for (int i = 0; i < N; i++) {
        chunks[i].raw_len = 1u << 20;
        chunks[i].pack = (uint32_t)(i / PER_PACK);
    }
    st_file_entry f = {.path = "f", .size = (uint64_t)N << 20, .nchunks = N, .chunks = chunks};
    vrun *runs = NULL;
    size_t n = 0;
    CHECK_OK(vfs_layout_runs(&f, &runs, &n));
    /* 42 whole packs, the 43rd's 8 MiB up to the tail, the tail's 8 MiB. */
    CHECK(n == 44);
    for (size_t r = 0; runs && r < n; r++) {
        const st_chunk_ref *c = &chunks[runs[r].first];
        CHECK(c[0].pack == c[runs[r].count - 1].pack); /* one pack each */
        CHECK(runs[r].len == (r < 42 ? (uint64_t)PER_PACK << 20 : VFS_RUN_BYTES));
    }
    free(runs);
    free(chunks);
}

int main(void)
{
    if (vh_setup("vfs-warmup"))
        return 1;
    big = vh_data(BIG_LEN, 77);
    RUN(test_runs_cover_every_chunk);
    RUN(test_large_file_runs);
    RUN(test_runs_end_at_packs);
    RUN(test_read_during_fetch);
    RUN(test_reader_order);
    RUN(test_warmup_own_part);
    RUN(test_wrong_digest_fails_fetch);
    RUN(test_warmup_wrong_digest_fails_request);
    RUN(test_empty_file_open_keeps_priority);
    RUN(test_warmup_warms);
    RUN(test_bad_requests_refused);
    RUN(test_closed_mid_fetch_leaves_nothing_trusted);
    free(big);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
