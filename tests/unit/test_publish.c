/*
 * test_publish — the publish's first round (docs/PROTOCOL.md, "Write
 * order"): the job registry PUT, the fence LIST, the revision LIST and the
 * caller's checks (the ingest's last look, a lease-like check) are in
 * flight at once; the manifest PUT starts only after every one of them has
 * answered, the part record PUT only after the manifest's; a failed check
 * writes no manifest and no part record. And the index sync before an
 * upload, which reads a step only while its listing changes.
 *
 * The store is the in-memory backend behind a recording wrapper. While a
 * round is armed, each request waits (up to ROUND_WAIT_S) until `want`
 * requests are in flight together, so a serial publish is seen as one
 * request in flight at a time (and the wait times out once, then is
 * disarmed), never as a timing.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "backend/st_backend_fault.h"
#include "backend/st_backend_retry.h"
#include "engine/st_catalog.h"
#include "engine/st_ingest.h"
#include "engine/st_state.h"
#include "util/st_fsutil.h"
#include "st_backend_mem.h"
#include "ut.h"

#define ROUND_WAIT_S 3
#define MAX_LOG      64

/* One request as the wrapper saw it: its op, key, and the sequence numbers
 * of its start and of its end (one counter for both, so "a ended before b
 * started" is a.end < b.start). */
typedef struct rec_entry {
    char op[8];
    char key[ST_KEY_MAX];
    unsigned start, end;
} rec_entry;

typedef struct recorder {
    st_backend *inner;
    pthread_mutex_t lock;
    pthread_cond_t changed;
    unsigned seq;
    int in_flight, max_in_flight;
    int want;      /* > 0: the armed round's requests wait for this many in flight */
    unsigned gets; /* GETs since the last rec_arm */
    rec_entry log[MAX_LOG];
    size_t nlog;
} recorder;

static size_t rec_begin(recorder *r, const char *op, const char *key)
{
    pthread_mutex_lock(&r->lock);
    size_t i = r->nlog < MAX_LOG ? r->nlog++ : MAX_LOG - 1;
    snprintf(r->log[i].op, sizeof r->log[i].op, "%s", op);
    snprintf(r->log[i].key, sizeof r->log[i].key, "%s", key);
    r->log[i].start = r->seq++;
    if (++r->in_flight > r->max_in_flight)
        r->max_in_flight = r->in_flight;
    pthread_cond_broadcast(&r->changed);
    if (r->want > 0) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ROUND_WAIT_S;
        while (r->want > 0 && r->in_flight < r->want)
            if (pthread_cond_timedwait(&r->changed, &r->lock, &until) == ETIMEDOUT)
                break;
        r->want = 0; /* the round met (or never will): later requests run freely */
        pthread_cond_broadcast(&r->changed);
    }
    pthread_mutex_unlock(&r->lock);
    return i;
}

static void rec_end(recorder *r, size_t i)
{
    pthread_mutex_lock(&r->lock);
    r->log[i].end = r->seq++;
    r->in_flight--;
    pthread_mutex_unlock(&r->lock);
}

static st_err rec_put(void *ctx, const char *key, const void *data, size_t len)
{
    size_t i = rec_begin(ctx, "PUT", key);
    st_err e = st_put(((recorder *)ctx)->inner, key, data, len);
    rec_end(ctx, i);
    return e;
}

static st_err rec_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    size_t i = rec_begin(ctx, "GET", key);
    ((recorder *)ctx)->gets++; /* under no lock: the sync test reads from one thread */
    st_err e = st_get(((recorder *)ctx)->inner, key, off, len, out);
    rec_end(ctx, i);
    return e;
}

static st_err rec_stat(void *ctx, const char *key, uint64_t *size)
{
    size_t i = rec_begin(ctx, "HEAD", key);
    st_err e = st_stat(((recorder *)ctx)->inner, key, size);
    rec_end(ctx, i);
    return e;
}

static st_err rec_stat_time(void *ctx, const char *key, st_store_time *t)
{
    size_t i = rec_begin(ctx, "HEAD", key ? key : "");
    st_err e = st_stat_time(((recorder *)ctx)->inner, key, t);
    rec_end(ctx, i);
    return e;
}

static st_err rec_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    size_t i = rec_begin(ctx, "LIST", prefix);
    st_err e = st_list(((recorder *)ctx)->inner, prefix, cb, arg);
    rec_end(ctx, i);
    return e;
}

static st_err rec_del(void *ctx, const char *key)
{
    size_t i = rec_begin(ctx, "DEL", key);
    st_err e = st_del(((recorder *)ctx)->inner, key);
    rec_end(ctx, i);
    return e;
}

static void rec_close(void *ctx)
{
    (void)ctx; /* the test owns the recorder and its inner store */
}

static const st_backend_ops rec_ops = {
    .scheme = "mem",
    .put = rec_put,
    .get = rec_get,
    .stat = rec_stat,
    .stat_time = rec_stat_time,
    .list = rec_list,
    .del = rec_del,
    .close = rec_close,
};

static void rec_arm(recorder *r, int want)
{
    pthread_mutex_lock(&r->lock);
    r->want = want;
    r->max_in_flight = 0;
    r->nlog = 0;
    r->gets = 0;
    pthread_mutex_unlock(&r->lock);
}

/* The first logged request whose op is op and whose key contains part. */
static const rec_entry *rec_find(const recorder *r, const char *op, const char *part)
{
    for (size_t i = 0; i < r->nlog; i++)
        if (!strcmp(r->log[i].op, op) && strstr(r->log[i].key, part))
            return &r->log[i];
    return NULL;
}

/* A check as the mount's lease check is: one request of its own. */
static st_err lease_like_check(void *arg)
{
    uint64_t size;
    st_err e = st_stat(arg, "nodes/n1.lease", &size);
    return e == ST_ERR_NOT_FOUND ? ST_OK : e;
}

static st_err refusing_check(void *arg)
{
    (void)arg;
    return st_seterr(ST_ERR_BUSY, "node name taken (test)");
}

static char root[] = "/tmp/test_publish_XXXXXX";

/* Ingests one 300 KiB file of job "pj" as a manifest of step `step`. */
static void ingest_one(st_backend *b, st_state *state, uint64_t seed, st_ingest **g, st_manifest *m)
{
    static uint8_t data[300 << 10];
    char path[256];
    ut_rand_fill(data, sizeof data, seed);
    snprintf(path, sizeof path, "%s/model.pt", root);
    ut_write_file(path, data, sizeof data);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0);
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    CHECK_OK(st_ingest_new(b, state, "pj", NULL, g));
    CHECK_OK(st_ingest_file(*g, fd, "model.pt", &st, -1));
    close(fd);
    memset(m, 0, sizeof *m);
    CHECK_OK(st_ingest_finish(*g, m));
}

/* A recorder over a fresh in-memory store, an index, and one ingested file
 * as the manifest of `step`, ready to publish. */
typedef struct fixture {
    recorder r;
    st_backend b;
    st_state *state;
    st_ingest *g;
    st_manifest m;
} fixture;

static void fixture_open(fixture *f, uint64_t step)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->r.lock, NULL);
    pthread_cond_init(&f->r.changed, NULL);
    CHECK_OK(st_backend_mem_open(&f->r.inner));
    f->b = (st_backend){&rec_ops, &f->r};
    char path[256];
    snprintf(path, sizeof path, "%s/state-%" PRIu64 ".db", root, step);
    CHECK_OK(st_state_open(path, &f->state));
    ingest_one(&f->b, f->state, step, &f->g, &f->m);
    f->m.step = step;
    f->m.job = "pj";
    f->m.node = "n1";
    f->m.created_ns = st_now_ns();
}

static void fixture_close(fixture *f)
{
    f->m.job = f->m.node = NULL; /* borrowed, not st_manifest_free's to free */
    st_manifest_free(&f->m);
    st_ingest_free(f->g);
    st_state_close(f->state);
    st_backend_close(f->r.inner);
    pthread_cond_destroy(&f->r.changed);
    pthread_mutex_destroy(&f->r.lock);
}

static void test_first_round_at_once_then_manifest_then_part(void)
{
    fixture f;
    fixture_open(&f, 3);
    recorder *r = &f.r;
    /* Registry PUT, fence LIST, revision LIST, the last look's first
     * request, the lease-like HEAD: five requests of one round. */
    rec_arm(r, 5);
    const st_publish_check checks[] = {st_ingest_last_look(f.g), {lease_like_check, &f.b}};
    st_part part = {.revision = 1, .complete = 1};
    uint64_t puts = 0;
    CHECK_OK(st_catalog_publish(&f.b, &f.m, &part, checks, 2, &puts));
    CHECK(r->max_in_flight >= 5);
    CHECK(puts == 3); /* registry, manifest, part record */

    const rec_entry *manifest = rec_find(r, "PUT", ".manifest");
    const rec_entry *record = rec_find(r, "PUT", ".commit");
    CHECK(manifest && record);
    if (manifest && record) {
        for (size_t i = 0; i < r->nlog; i++)
            if (&r->log[i] != manifest && &r->log[i] != record)
                CHECK(r->log[i].end < manifest->start); /* every check answered first */
        CHECK(manifest->end < record->start);
    }
    CHECK(rec_find(r, "PUT", "joblist/pj") != NULL);
    CHECK(rec_find(r, "LIST", "gc/compacting") != NULL);
    CHECK(rec_find(r, "HEAD", "gc/pending") != NULL);     /* the last look, */
    CHECK(rec_find(r, "HEAD", ".pack") != NULL);          /* marker then pack */
    CHECK(rec_find(r, "HEAD", "nodes/n1.lease") != NULL); /* the caller's own check */

    st_bytes buf = {0};
    st_part back;
    CHECK_OK(st_catalog_load_part(r->inner, "pj", 3, "n1", &buf, &back));
    CHECK(back.revision == 1 && back.manifest_len > 0);
    st_part_free(&back);
    st_bytes_free(&buf);
    fixture_close(&f);
}

/* A failed check stops the publish before the manifest: the step has no
 * manifest and no part record; the error is the check's, with its message. */
static void test_failed_check_writes_nothing(void)
{
    fixture f;
    fixture_open(&f, 4);
    const st_publish_check checks[] = {st_ingest_last_look(f.g), {refusing_check, NULL}};
    st_part part = {.revision = 1, .complete = 1};
    uint64_t puts = 0;
    rec_arm(&f.r, 0);
    CHECK_ERR(st_catalog_publish(&f.b, &f.m, &part, checks, 2, &puts), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "node name taken (test)") != NULL);
    CHECK(rec_find(&f.r, "PUT", ".manifest") == NULL);
    CHECK(rec_find(&f.r, "PUT", ".commit") == NULL);
    st_bytes buf = {0};
    st_part back;
    CHECK_ERR(st_catalog_load_part(f.r.inner, "pj", 4, "n1", &buf, &back), ST_ERR_NOT_FOUND);
    st_bytes_free(&buf);
    fixture_close(&f);
}

/* One publish of a fixture's manifest on its own thread. */
typedef struct publish_run {
    fixture *f;
    st_backend *b;
    st_part part;
    st_err e;
    char msg[512];
} publish_run;

static void *publish_main(void *arg)
{
    publish_run *r = arg;
    const st_publish_check look = st_ingest_last_look(r->f->g);
    uint64_t puts = 0;
    r->part = (st_part){.revision = 1, .complete = 1};
    r->e = st_catalog_publish(r->b, &r->f->m, &r->part, &look, 1, &puts);
    snprintf(r->msg, sizeof r->msg, "%s", st_errmsg());
    return NULL;
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* A manifest is created, never replaced (docs/PROTOCOL.md, "Immutable
 * objects are created, not replaced"). The publish is held at its
 * manifest PUT (the fault wrapper's put_hold); meanwhile another daemon
 * with this node name stores its own manifest under that key (revision 1:
 * the step had none). Released, the publish fails (ST_ERR_BUSY), the
 * stored manifest is the other one's and no part record is written; the
 * publish tried again takes the next revision. With a plain PUT the other
 * manifest was replaced and the part record written. */
static void test_manifest_conflict(void)
{
    fixture f;
    fixture_open(&f, 5);
    char hold[300], reached[320], spec[400], key[ST_KEY_MAX];
    snprintf(hold, sizeof hold, "%s/manifest-hold", root);
    snprintf(reached, sizeof reached, "%s.reached", hold);
    snprintf(spec, sizeof spec, "put_hold=%s,put_hold_key=.manifest", hold);
    ut_write_file(hold, "", 0);
    publish_run run = {.f = &f};
    CHECK_OK(st_backend_mem_share(f.r.inner, &run.b));
    CHECK_OK(st_backend_fault_wrap(&run.b, spec));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, publish_main, &run) == 0);
    int held = 0;
    for (int i = 0; i < 4000 && !(held = exists(reached)); i++) /* 20 s at most */
        usleep(5000);
    CHECK(held);
    CHECK_OK(st_key_manifest(key, sizeof key, "pj", 5, "n1", 1));
    CHECK_OK(st_put(f.r.inner, key, "another daemon's manifest", 25));
    unlink(hold);
    pthread_join(th, NULL);
    CHECK(run.e == ST_ERR_BUSY && run.part.revision == 1);
    CHECK(strstr(run.msg, "already holds other bytes under this name") != NULL);
    st_bytes buf = {0};
    st_part back;
    CHECK_ERR(st_catalog_load_part(f.r.inner, "pj", 5, "n1", &buf, &back), ST_ERR_NOT_FOUND);
    CHECK_OK(st_get(f.r.inner, key, 0, ST_GET_TO_END, &buf));
    CHECK(buf.len == 25 && !memcmp(buf.data, "another daemon's manifest", 25));
    /* Again: a revision past the other one's, published whole. */
    publish_main(&run);
    CHECK_OK(run.e);
    CHECK(run.part.revision == 2);
    CHECK_OK(st_catalog_load_part(f.r.inner, "pj", 5, "n1", &buf, &back));
    CHECK(back.revision == 2);
    st_part_free(&back);
    st_bytes_free(&buf);
    st_backend_close(run.b);
    fixture_close(&f);
}

/* A create whose answer was lost after the store took it meets its own
 * object when the retry wrapper sends it again: the manifest's bytes are
 * read back equal and the publish completes. */
static void test_manifest_answer_lost(void)
{
    fixture f;
    fixture_open(&f, 6);
    st_backend *lossy, *retried;
    CHECK_OK(st_backend_mem_share(f.r.inner, &lossy));
    CHECK_OK(st_backend_fault_wrap(&lossy, "lose_answer=.manifest"));
    st_retry_policy fast = {.base_ms = 1, .max_ms = 2};
    CHECK_OK(st_backend_retry_wrap(lossy, &fast, &retried));
    publish_run run = {.f = &f, .b = retried};
    publish_main(&run);
    CHECK_OK(run.e);
    CHECK(st_backend_retry_count(retried) == 1);
    st_bytes buf = {0};
    st_part back;
    CHECK_OK(st_catalog_load_part(f.r.inner, "pj", 6, "n1", &buf, &back));
    CHECK(back.revision == run.part.revision);
    st_part_free(&back);
    st_bytes_free(&buf);
    st_backend_close(retried);
    fixture_close(&f);
}

/* Publishes `job`'s step as node, from a fresh ingest of one file (seed). */
static void publish_step(fixture *f, uint64_t step, const char *node, uint64_t seed,
                         st_id *first_chunk)
{
    st_ingest *g = NULL;
    st_manifest m;
    ingest_one(&f->b, f->state, seed, &g, &m);
    m.step = step;
    m.job = "pj";
    m.node = (char *)node;
    m.created_ns = st_now_ns();
    if (first_chunk && m.nfiles && m.files[0].nchunks)
        *first_chunk = m.files[0].chunks[0].id;
    const st_publish_check look = st_ingest_last_look(g);
    st_part part = {.revision = 1, .complete = 1};
    uint64_t puts = 0;
    CHECK_OK(st_catalog_publish(&f->b, &m, &part, &look, 1, &puts));
    m.job = m.node = NULL;
    st_manifest_free(&m);
    st_ingest_free(g);
}

/* GETs of one st_catalog_sync_index of job "pj" into index. */
static unsigned sync_gets(fixture *f, st_state *index)
{
    rec_arm(&f->r, 0);
    CHECK_OK(st_catalog_sync_index(&f->b, index, "pj", NULL, NULL));
    return f->r.gets;
}

/* The index sync reads a step only while its listing changes
 * (docs/PROTOCOL.md, "The local dedup index"): every step once, then none;
 * a step published again is read again and its new chunks are learnt; a
 * step with a manifest newer than its part records (a publish that crashed
 * before its part record) is read every time until that changes. */
static void test_index_sync_reads_each_step_once(void)
{
    fixture f;
    fixture_open(&f, 1);
    for (uint64_t step = 2; step <= 6; step++)
        publish_step(&f, step, "n1", 10 + step, NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/reader.db", root);
    st_state *reader = NULL;
    CHECK_OK(st_state_open(path, &reader));
    CHECK(sync_gets(&f, reader) == 10); /* 5 part records, 5 manifests */
    CHECK(sync_gets(&f, reader) == 0);  /* before: 5, one per step, every time */

    st_id chunk;
    publish_step(&f, 3, "n2", 99, &chunk); /* step 3 again, by another node */
    st_chunk_loc loc;
    CHECK_ERR(st_state_chunk_lookup(reader, "pj", &chunk, &loc), ST_ERR_NOT_FOUND);
    CHECK(sync_gets(&f, reader) == 3); /* step 3's two part records, n2's manifest */
    CHECK_OK(st_state_chunk_lookup(reader, "pj", &chunk, &loc));
    CHECK(sync_gets(&f, reader) == 0);

    /* A manifest of step 4 with no part record naming it. */
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_manifest(key, sizeof key, "pj", 4, "n3", 9));
    CHECK_OK(st_put(f.r.inner, key, "x", 1));
    CHECK(sync_gets(&f, reader) == 1); /* n1's part record (its manifest is known) */
    CHECK(sync_gets(&f, reader) == 1); /* not marked: read again */
    st_state_close(reader);
    fixture_close(&f);
}

static void run_cases(void)
{
    RUN(test_first_round_at_once_then_manifest_then_part);
    RUN(test_failed_check_writes_nothing);
    RUN(test_manifest_conflict);
    RUN(test_manifest_answer_lost);
    RUN(test_index_sync_reads_each_step_once);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    run_cases();
    if (!ut_failed)
        ut_rmtree(root);
    return ut_finish();
}
