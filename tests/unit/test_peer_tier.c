/*
 * The peer tier over the in-memory store and a real peer server on
 * 127.0.0.1 (docs/PEERS.md): the replica record's codec and keys; the
 * spool (a pack put through it reaches the store by the flush, a pack left
 * by a crash is queued again at open, one a crash cut short is dropped and
 * never stored, other keys pass through); and the
 * whole write order with the store's pack PUTs held: the part becomes
 * replicated while no pack is in the store, a reader's view lists the step
 * and restores it byte-identical from the peer, a reader with a wrong
 * secret is refused by name, and once the hold is gone the flush, the
 * publish and the durable notice leave the store's own part and no replica
 * record.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "backend/st_backend_fault.h"
#include "engine/st_catalog.h"
#include "engine/st_ingest.h"
#include "engine/st_restore.h"
#include "engine/st_state.h"
#include "peer/st_peer_alone.h"
#include "peer/st_peer_auth.h"
#include "peer/st_peer_cache.h"
#include "peer/st_peer_read.h"
#include "peer/st_peer_server.h"
#include "peer/st_replica.h"
#include "peer/st_replicate.h"
#include "peer/st_spool.h"
#include "st_backend_mem.h"
#include "ut.h"

#define JOB  "j"
#define NODE "writer"
#define STEP 7

static char root[256];

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (uint8_t)(seed >> 56);
    }
}

/* A part record naming manifest bytes man, revision rev, encoded into out. */
static void part_for(const st_bytes *man, uint32_t rev, st_bytes *out)
{
    st_part p = {.step = STEP, .revision = rev, .complete = 1};
    snprintf(p.job, sizeof p.job, JOB);
    snprintf(p.node, sizeof p.node, NODE);
    p.manifest_len = man->len;
    p.manifest_digest = st_id_of(man->data, man->len);
    CHECK_OK(st_part_encode(&p, out));
}

static void test_replica_record(void)
{
    st_replica r = {.revision = 3, .nholders = 2};
    st_bytes enc = {0};
    CHECK_OK(st_bytes_append(&r.manifest, "not really a manifest", 21));
    part_for(&r.manifest, 3, &r.part);
    snprintf(r.holders[0].node, sizeof r.holders[0].node, "b");
    snprintf(r.holders[0].addr, sizeof r.holders[0].addr, "127.0.0.2:7070");
    snprintf(r.holders[1].node, sizeof r.holders[1].node, "c");
    snprintf(r.holders[1].addr, sizeof r.holders[1].addr, "[::1]:7071");
    CHECK_OK(st_replica_encode(&r, &enc));
    st_replica d;
    st_part p;
    CHECK_OK(st_replica_decode(enc.data, enc.len, &d, &p));
    CHECK(d.revision == 3 && d.nholders == 2 && !strcmp(d.holders[1].addr, "[::1]:7071"));
    CHECK(d.manifest.len == 21 && !memcmp(d.manifest.data, "not really a manifest", 21));
    CHECK(p.revision == 3 && p.step == STEP && !strcmp(p.node, NODE));
    st_part_free(&p);
    st_replica_free(&d);
    for (size_t n = 0; n < enc.len; n++) /* every truncation */
        CHECK_ERR(st_replica_decode(enc.data, n, &d, NULL), ST_ERR_CORRUPT);
    for (size_t i = 0; i < enc.len; i++) { /* every flipped byte */
        enc.data[i] ^= 0x40;
        CHECK_ERR(st_replica_decode(enc.data, enc.len, &d, NULL), ST_ERR_CORRUPT);
        enc.data[i] ^= 0x40;
    }
    /* A part record of another revision, or of other manifest bytes. */
    st_bytes_clear(&r.part);
    part_for(&r.manifest, 2, &r.part);
    CHECK_OK(st_replica_encode(&r, &enc));
    CHECK_ERR(st_replica_decode(enc.data, enc.len, &d, NULL), ST_ERR_CORRUPT);
    st_bytes_free(&enc);
    st_replica_free(&r);
}

static void test_keys(void)
{
    char key[ST_KEY_MAX], node[ST_NODE_MAX + 1], job[ST_JOB_MAX + 1];
    uint32_t rev = 0;
    uint64_t step = 0;
    const char *rest;
    CHECK_OK(st_key_replica(key, sizeof key, JOB, STEP, NODE, 12));
    CHECK(!strcmp(key, "jobs/j/steps/00000000000000000007/replicas/writer.r12"));
    CHECK_OK(st_key_parse_step(key, JOB, &step, &rest));
    CHECK(st_key_parse_replica(rest, node, &rev) && rev == 12 && !strcmp(node, NODE));
    CHECK(!st_key_parse_replica("replicas/writer", node, &rev));
    CHECK(!st_key_parse_replica("nodes/writer.r1.manifest", node, &rev));
    CHECK_ERR(st_key_replica(key, sizeof key, JOB, STEP, "../x", 1), ST_ERR_INVALID);

    st_id id = st_id_of("pack", 4), got;
    CHECK_OK(st_key_pack(key, sizeof key, JOB, &id));
    CHECK(st_key_parse_pack(key, job, &got) && !strcmp(job, JOB) && !st_id_cmp(&id, &got));
    CHECK(!st_key_parse_pack("jobs/j/packs/00/zz.pack", job, &got));
    key[strlen("jobs/j/packs/")] ^= 1; /* the fan-out directory disagrees with the id */
    CHECK(!st_key_parse_pack(key, job, &got));
    CHECK(!st_key_parse_pack("jobs/j/steps/x.pack", job, &got));
}

static int hook_calls;
static void count_hook(void *arg, const char *key, const uint8_t *data, size_t len)
{
    (void)arg, (void)key, (void)data, (void)len;
    hook_calls++;
}

static void test_spool(void)
{
    char dir[512], key[ST_KEY_MAX];
    snprintf(dir, sizeof dir, "%s/spool", root);
    st_backend *store = NULL, *disk = NULL;
    st_spool *s = NULL;
    uint64_t size = 0;
    CHECK_OK(st_backend_mem_open(&store));
    st_id id = st_id_of("left by a crash", 15);
    CHECK_OK(st_key_pack(key, sizeof key, JOB, &id));
    CHECK_OK(st_backend_file_open(dir, &disk)); /* an earlier life's spooled pack */
    CHECK_OK(st_put(disk, key, "left by a crash", 15));
    CHECK_OK(st_spool_open(dir, store, 2, &s));
    CHECK_OK(st_spool_flush(s));
    CHECK_OK(st_stat(store, key, &size));
    CHECK(size == 15);
    CHECK_ERR(st_stat(disk, key, &size), ST_ERR_NOT_FOUND);

    st_backend *w = st_spool_backend(s);
    st_spool_set_hook(s, count_hook, NULL);
    id = st_id_of("new pack", 8);
    CHECK_OK(st_key_pack(key, sizeof key, JOB, &id));
    CHECK_OK(st_put(w, key, "new pack", 8));
    CHECK(hook_calls == 1);
    st_bytes got = {0};
    CHECK_OK(st_get(w, key, 0, ST_GET_TO_END, &got)); /* spooled or stored: readable */
    CHECK(got.len == 8);
    CHECK_OK(st_put(w, "jobs/j/steps/00000000000000000007/nodes/x.commit", "c", 1));
    CHECK(hook_calls == 1); /* not a pack: straight to the store */
    CHECK_OK(st_stat(store, "jobs/j/steps/00000000000000000007/nodes/x.commit", &size));
    CHECK_OK(st_spool_flush(s));
    CHECK_OK(st_stat(store, key, &size));
    st_spool_stats stats;
    st_spool_get_stats(s, &stats);
    CHECK(stats.spooled_packs == 1 && stats.stored_packs == 2 && stats.queued_bytes == 0);
    st_spool_set_hook(s, NULL, NULL);
    id = st_id_of("no hook", 7);
    CHECK_OK(st_key_pack(key, sizeof key, JOB, &id));
    CHECK_OK(st_put(w, key, "no hook", 7)); /* no replication: the store at once */
    CHECK_OK(st_stat(store, key, &size));
    st_bytes_free(&got);
    st_spool_close(s);

    /* A pack a crash cut short in the spool (no fsync there): its bytes fail
     * its id, so it is dropped, never stored, and the flush says so once. */
    id = st_id_of("a whole pack", 12);
    CHECK_OK(st_key_pack(key, sizeof key, JOB, &id));
    CHECK_OK(st_put(disk, key, "a who", 5));
    CHECK_OK(st_spool_open(dir, store, 1, &s));
    CHECK_ERR(st_spool_flush(s), ST_ERR_CORRUPT);
    CHECK_ERR(st_stat(store, key, &size), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat(disk, key, &size), ST_ERR_NOT_FOUND);
    CHECK_OK(st_spool_flush(s)); /* not queued again */
    st_spool_close(s);
    st_backend_close(disk);
    st_backend_close(store);
}

/* A secret file of n random-ish bytes, mode 0600. */
static void make_secret(const char *path, uint64_t seed)
{
    uint8_t b[48];
    fill(b, sizeof b, seed);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, b, sizeof b) == (ssize_t)sizeof b);
    close(fd);
}

/* Restores every file of step STEP of JOB through b and compares it with
 * want[i] (len[i] bytes); returns the first error. */
static st_err restore_all(st_backend *b, uint8_t *const *want, const size_t *len, size_t n)
{
    st_bytes pbuf = {0}, mbuf = {0};
    st_part p = {0};
    st_manifest m = {0};
    st_restorer *rs = NULL;
    char path[512];
    snprintf(path, sizeof path, "%s/restored", root);
    st_err e = st_catalog_load_part(b, JOB, STEP, NODE, &pbuf, &p);
    if (!e)
        e = st_catalog_load_manifest(b, &p, &mbuf, &m);
    if (!e)
        e = st_restorer_new(b, JOB, &rs);
    for (size_t i = 0; !e && i < m.nfiles && i < n; i++) {
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        e = st_restore_file(rs, &m, &m.files[i], fd);
        uint8_t *back = malloc(len[i] + 1);
        ssize_t got = pread(fd, back, len[i] + 1, 0);
        if (!e)
            CHECK(got == (ssize_t)len[i] && !memcmp(back, want[i], len[i]));
        free(back);
        close(fd);
    }
    if (!e)
        CHECK(m.nfiles == n);
    st_restorer_free(rs);
    st_manifest_free(&m);
    if (pbuf.data)
        st_part_free(&p);
    st_bytes_free(&pbuf);
    st_bytes_free(&mbuf);
    return e;
}

static st_backend *reader_view(st_backend *store, const st_peer_secret *secret, const char *name)
{
    char dir[512];
    st_backend *b = NULL, *v = NULL;
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    CHECK_OK(st_backend_mem_share(store, &b));
    st_peer_read_opts o = {.self_node = "reader", .secret = secret, .cache_dir = dir};
    v = b;
    CHECK_OK(st_peer_read_wrap(&v, &o));
    return v;
}

static int count_cb(void *arg, const char *key, uint64_t size)
{
    (void)key, (void)size;
    (*(int *)arg)++;
    return 0;
}

static int count_keys(st_backend *b, const char *prefix)
{
    int n = 0;
    CHECK_OK(st_list(b, prefix, count_cb, &n));
    return n;
}

/* ---- a store that cannot be reached ---- */

static st_err down_err(const char *key)
{
    return st_seterr(ST_ERR_TRANSIENT, "%s: connection refused", key);
}
static st_err down_put(void *ctx, const char *key, const void *data, size_t len)
{
    (void)ctx, (void)data, (void)len;
    return down_err(key);
}
static st_err down_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    (void)ctx, (void)off, (void)len, (void)out;
    return down_err(key);
}
static st_err down_stat(void *ctx, const char *key, uint64_t *size)
{
    (void)ctx, (void)size;
    return down_err(key);
}
static st_err down_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    (void)ctx, (void)cb, (void)arg;
    return down_err(prefix);
}
static st_err down_del(void *ctx, const char *key)
{
    (void)ctx;
    return down_err(key);
}
static void down_close(void *ctx)
{
    (void)ctx;
}
static const st_backend_ops down_ops = {.scheme = "down",
                                        .put = down_put,
                                        .get = down_get,
                                        .stat = down_stat,
                                        .list = down_list,
                                        .del = down_del,
                                        .close = down_close};

static st_backend *store_down(void)
{
    st_backend *b = calloc(1, sizeof *b);
    b->ops = &down_ops;
    return b;
}

/* The reader from peers alone's last report. */
static char alone_said[768];
static void note_alone(void *arg, const char *msg)
{
    (void)arg;
    snprintf(alone_said, sizeof alone_said, "%s", msg);
}

/* A reader whose store is down, given the peers at addr: *alone says
 * whether it reads from them alone. */
static st_err reader_alone(st_backend *store, const char *addr, const st_peer_secret *secret,
                           const char *name, int *alone, st_backend **out)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    st_peer_read_opts ro = {.self_node = "reader", .secret = secret, .cache_dir = dir};
    st_peer_alone_opts ao = {.peers = addr,
                             .self_node = "reader",
                             .secret = secret,
                             .job = JOB,
                             .log = note_alone,
                             .log_arg = NULL};
    alone_said[0] = '\0';
    return st_peer_reader_open(store, &ro, &ao, alone, out);
}

/* Restarts the peer of test_write_order on the same address (the records
 * name it), after its files were changed behind its back. */
static st_peer_server *restart_peer(st_peer_server *s, st_peer_server_opts *so, const char *addr)
{
    st_peer_server_stop(s);
    so->listen = addr;
    st_peer_server *again = NULL;
    CHECK_OK(st_peer_server_start(so, &again));
    return again;
}

/* The number of steps of JOB a reader from the peer alone at addr lists. */
static size_t steps_from_peer_alone(const char *addr, const st_peer_secret *secret,
                                    const char *name)
{
    int alone = 0;
    st_backend *b = NULL;
    st_step_keys *steps = NULL;
    size_t n = 0;
    CHECK_OK(reader_alone(store_down(), addr, secret, name, &alone, &b));
    CHECK(alone == 1);
    CHECK_OK(st_catalog_list_steps(b, JOB, &steps, &n));
    st_step_keys_free(steps, n);
    st_backend_close(b);
    return n;
}

/* Deletes one pack file under dir (packs/<hh>/<id>.pack); 1 if it did. */
static int remove_one_pack(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    int done = 0;
    while (d && !done && (de = readdir(d))) {
        char sub[1024];
        if (de->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
        DIR *s = opendir(sub);
        struct dirent *f;
        while (s && !done && (f = readdir(s))) {
            char file[1400];
            snprintf(file, sizeof file, "%s/%s", sub, f->d_name);
            done = f->d_name[0] != '.' && unlink(file) == 0;
        }
        if (s)
            closedir(s);
    }
    if (d)
        closedir(d);
    return done;
}

static void test_write_order(void)
{
    char path[512], hold[512], spec[600], addr[64];
    st_peer_secret secret, wrong;
    snprintf(path, sizeof path, "%s/secret", root);
    make_secret(path, 1);
    CHECK_OK(st_peer_secret_load(path, &secret));
    snprintf(path, sizeof path, "%s/wrong", root);
    make_secret(path, 2);
    CHECK_OK(st_peer_secret_load(path, &wrong));

    /* The peer. */
    snprintf(path, sizeof path, "%s/peer", root);
    st_peer_server *server = NULL;
    st_peer_server_opts so = {
        .listen = "127.0.0.1:0", .dir = path, .node = "peer", .secret = &secret};
    CHECK_OK(st_peer_server_start(&so, &server));
    if (!server)
        return;
    snprintf(addr, sizeof addr, "127.0.0.1:%d", st_peer_server_port(server));

    /* The writer: its store's pack PUTs held. */
    snprintf(hold, sizeof hold, "%s/hold", root);
    ut_write_file(hold, "", 0);
    snprintf(spec, sizeof spec, "put_hold=%s", hold);
    st_backend *store = NULL, *wstore = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    CHECK_OK(st_backend_mem_share(store, &wstore));
    CHECK_OK(st_backend_fault_wrap(&wstore, spec));
    snprintf(path, sizeof path, "%s/wspool", root);
    st_spool *spool = NULL;
    st_peer_set *peers = NULL;
    st_replication *rep = NULL;
    CHECK_OK(st_spool_open(path, wstore, 2, &spool));
    CHECK_OK(st_peer_set_new(addr, NODE, NULL, &secret, 0, &peers));
    CHECK_OK(st_replication_begin(peers, JOB, 1, &rep));
    st_spool_set_hook(spool, st_replication_pack, rep);

    snprintf(path, sizeof path, "%s/w.db", root);
    st_state *state = NULL;
    st_ingest *g = NULL;
    CHECK_OK(st_state_open(path, &state));
    CHECK_OK(st_ingest_new(st_spool_backend(spool), state, JOB, NULL, &g));
    size_t len[2] = {3u << 20, 777};
    uint8_t *data[2] = {malloc(len[0]), malloc(len[1])};
    snprintf(path, sizeof path, "%s/file", root);
    for (size_t i = 0; i < 2; i++) {
        fill(data[i], len[i], 10 + i);
        ut_write_file(path, data[i], len[i]);
        int fd = open(path, O_RDONLY);
        struct stat st;
        CHECK(fstat(fd, &st) == 0);
        CHECK_OK(st_ingest_file(g, fd, i ? "b/small" : "a/big", &st, -1));
        close(fd);
    }
    st_manifest m = {0};
    CHECK_OK(st_ingest_finish(g, &m));
    m.step = STEP;
    m.node = NODE;
    m.job = JOB;
    m.created_ns = 1764633600000000000ll;
    st_part part = {.revision = 1, .complete = 1};
    st_bytes man = {0}, rec = {0};
    CHECK_OK(st_catalog_seal_part(&m, &part, &man));
    CHECK_OK(st_part_encode(&part, &rec));
    st_replication_result res;
    CHECK_OK(st_replication_finish(rep, wstore, JOB, STEP, NODE, 1, &man, &rec, &res));
    CHECK(res.replicated && res.holders == 1 && res.packs_sent >= 1);
    CHECK(count_keys(store, "jobs/j/packs/") == 0); /* held: the store has no pack */
    CHECK(count_keys(store, "jobs/j/steps/00000000000000000007/replicas/") == 1);
    /* The holder keeps the record the store took, byte for byte, and lists it. */
    char rkey[ST_KEY_MAX];
    st_bytes in_store = {0}, held = {0};
    CHECK_OK(st_key_replica(rkey, sizeof rkey, JOB, STEP, NODE, 1));
    CHECK_OK(st_get(store, rkey, 0, ST_GET_TO_END, &in_store));
    st_peer_part_name pn = {JOB, STEP, NODE, 1};
    CHECK_OK(st_peer_cache_get_record(st_peer_server_cache(server), &pn, &held));
    CHECK(held.len == in_store.len && !memcmp(held.data, in_store.data, held.len));
    st_bytes_free(&in_store);
    st_bytes_free(&held);

    /* A new node whose store cannot be reached: from the peer alone. */
    int alone = 0;
    st_backend *down = NULL;
    CHECK_OK(reader_alone(store_down(), addr, &secret, "alone1", &alone, &down));
    CHECK(alone == 1);
    st_step_keys *alone_steps = NULL;
    size_t nalone = 0;
    CHECK_OK(st_catalog_list_steps(down, JOB, &alone_steps, &nalone));
    CHECK(nalone == 1 && alone_steps[0].step == STEP && alone_steps[0].nnodes == 1);
    st_step_keys_free(alone_steps, nalone);
    CHECK(st_peer_read_is_replicated(down, JOB, STEP, NODE));
    CHECK_OK(restore_all(down, data, len, 2));
    CHECK_ERR(st_put(down, "jobs/j/x", "x", 1), ST_ERR_PERMANENT); /* never written through */
    st_backend_close(down);
    /* A wrong secret is named; no peer answering is the store's outage. */
    CHECK_ERR(reader_alone(store_down(), addr, &wrong, "alone2", &alone, &down), ST_ERR_AUTH);
    CHECK(strstr(st_errmsg(), "refused this node's cluster secret") != NULL && !down);
    CHECK_ERR(reader_alone(store_down(), "127.0.0.1:1", &secret, "alone3", &alone, &down),
              ST_ERR_TRANSIENT);
    CHECK(strstr(st_errmsg(), "no peer answered") && strstr(st_errmsg(), "connection refused"));
    /* A store that answers is read as before, the peers only for packs. */
    st_backend *up = NULL;
    CHECK_OK(st_backend_mem_share(store, &up));
    CHECK_OK(reader_alone(up, addr, &secret, "alone4", &alone, &down));
    CHECK(alone == 0);
    st_backend_close(down);

    /* A reader without the writer: from the peer. */
    st_backend *view = reader_view(store, &secret, "read1");
    st_step_keys *steps = NULL;
    size_t nsteps = 0;
    CHECK_OK(st_catalog_list_steps(view, JOB, &steps, &nsteps));
    CHECK(nsteps == 1 && steps[0].step == STEP && steps[0].nnodes == 1 &&
          !strcmp(steps[0].nodes[0], NODE));
    st_step_keys_free(steps, nsteps);
    CHECK(st_peer_read_is_replicated(view, JOB, STEP, NODE));
    CHECK_OK(restore_all(view, data, len, 2));
    st_peer_read_stats rst;
    st_peer_read_get_stats(view, &rst);
    CHECK(rst.replicated_parts == 1 && rst.peer_packs >= 1 && rst.peer_corrupt == 0);
    st_backend_close(view);

    /* Without peers a reader sees nothing; with a wrong secret the peer refuses. */
    CHECK_OK(st_catalog_list_steps(store, JOB, &steps, &nsteps));
    CHECK(nsteps == 0);
    st_step_keys_free(steps, nsteps);
    view = reader_view(store, &wrong, "read2");
    CHECK_OK(st_catalog_list_steps(view, JOB, &steps, &nsteps));
    st_step_keys_free(steps, nsteps);
    CHECK(restore_all(view, data, len, 2) != ST_OK);
    st_peer_server_stats ss;
    st_peer_server_get_stats(server, &ss);
    CHECK(ss.auth_refusals >= 1);
    st_backend_close(view);

    /* The store catches up: flush, publish, durable. */
    CHECK(unlink(hold) == 0);
    CHECK_OK(st_spool_flush(spool));
    CHECK(count_keys(store, "jobs/j/packs/") >= 1);
    const st_publish_check look = st_ingest_last_look(g);
    uint64_t puts = 0;
    CHECK_OK(st_catalog_publish(wstore, &m, &part, &look, 1, &puts));
    st_replication_durable(rep, wstore, &res);
    CHECK(count_keys(store, "jobs/j/steps/00000000000000000007/replicas/") == 0);
    view = reader_view(store, &secret, "read3");
    CHECK_OK(restore_all(view, data, len, 2));
    CHECK(!st_peer_read_is_replicated(view, JOB, STEP, NODE));
    st_backend_close(view);

    /* The store down again, and one of the part's packs no longer on the
     * peer (as a pack only the store holds): the part, so the step, is
     * left out, never half shown. Before, the peer's durable replica still
     * stands for it. */
    CHECK(steps_from_peer_alone(addr, &secret, "alone5") == 1);
    /* A record the peer's disk altered: refused by its checksum, reported. */
    snprintf(path, sizeof path, "%s/peer/parts/" JOB "/%020d/" NODE ".r1.record", root, STEP);
    st_bytes good = {0};
    CHECK_OK(st_peer_cache_get_record(st_peer_server_cache(server), &pn, &good));
    good.data[good.len / 2] ^= 1;
    ut_write_file(path, good.data, good.len);
    snprintf(path, sizeof path, "%s/peer", root);
    server = restart_peer(server, &so, addr);
    CHECK(steps_from_peer_alone(addr, &secret, "alone6") == 0);
    CHECK(strstr(alone_said, "its record does not decode") != NULL);
    snprintf(path, sizeof path, "%s/peer/parts/" JOB "/%020d/" NODE ".r1.record", root, STEP);
    good.data[good.len / 2] ^= 1;
    ut_write_file(path, good.data, good.len);
    st_bytes_free(&good);
    snprintf(path, sizeof path, "%s/peer", root);
    server = restart_peer(server, &so, addr);
    CHECK(steps_from_peer_alone(addr, &secret, "alone7") == 1);
    /* A pack gone from the peer's disk. */
    snprintf(path, sizeof path, "%s/peer/packs", root);
    CHECK(remove_one_pack(path));
    snprintf(path, sizeof path, "%s/peer", root);
    server = restart_peer(server, &so, addr);
    CHECK(steps_from_peer_alone(addr, &secret, "alone8") == 0);
    CHECK(strstr(alone_said, "which no peer that answers holds") != NULL);

    m.node = m.job = NULL;
    st_manifest_free(&m);
    st_part_free(&part);
    st_bytes_free(&man);
    st_bytes_free(&rec);
    st_ingest_free(g);
    st_state_close(state);
    st_spool_set_hook(spool, NULL, NULL);
    st_replication_free(rep);
    st_peer_set_free(peers);
    st_spool_close(spool);
    st_backend_close(wstore);
    st_backend_close(store);
    st_peer_server_stop(server);
    free(data[0]);
    free(data[1]);
    st_peer_secret_wipe(&secret);
    st_peer_secret_wipe(&wrong);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/test_peer_tier.XXXXXX");
    if (!mkdtemp(root))
        return 1;
    RUN(test_replica_record);
    RUN(test_keys);
    RUN(test_spool);
    RUN(test_write_order);
    ut_rmtree(root);
    return ut_finish();
}
