/*
 * test_replay — refusing a replayed part record (docs/ENCRYPTION.md,
 * "Replay") over the in-memory store: a node's part published again keeps
 * its lineage and raises its revision; a reader with a local state that
 * saw revision 2 refuses the revision-1 record put back behind its back
 * (ST_ERR_CORRUPT naming both revisions), encrypted or not, while a reader
 * without that memory cannot tell; a step deleted and published again
 * starts a new lineage at revision 1 and is accepted, and the record of its
 * earlier life put back is refused; a record of the format without a
 * lineage (version 2) still reads, and its golden files keep both versions
 * of the format fixed. The rule itself (st_replay_judge) is checked case by
 * case, its replaced lineages capped.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/st_backend.h"
#include "engine/st_catalog.h"
#include "engine/st_envelope.h"
#include "engine/st_replay.h"
#include "engine/st_state.h"
#include "format/st_part.h"
#include "st_backend_mem.h"
#include "ut.h"
#include "ut_crypt.h"
#include "ut_format.h"

static char root[] = "/tmp/test_replay.XXXXXX";
static char url[512];

#define JOB  "rj"
#define NODE "n1"

/*
 * One in-memory store seen three ways: raw (the bucket: what someone with
 * write access puts back), the writer's (replay check over the envelope),
 * and a reader's (the same, over a state database of its own). kr NULL: a
 * plain store.
 */
typedef struct rig {
    st_keyring *kr;
    st_backend *raw, *writer;
} rig;

static void state_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s.db", root, name);
}

static void rig_open(rig *r, int sealed, const char *writer_state)
{
    char path[600];
    memset(r, 0, sizeof *r);
    r->kr = sealed ? ut_keyring_of(7) : NULL;
    CHECK_OK(st_backend_mem_open(&r->raw));
    CHECK_OK(st_backend_mem_share(r->raw, &r->writer));
    if (sealed)
        CHECK_OK(st_envelope_wrap(&r->writer, r->kr));
    state_path(path, sizeof path, writer_state);
    CHECK_OK(st_replay_wrap(&r->writer, path));
}

/* A reader of r's store whose local state is the database `name`. */
static st_backend *reader_open(rig *r, const char *name)
{
    char path[600];
    st_backend *b = NULL;
    CHECK_OK(st_backend_mem_share(r->raw, &b));
    if (r->kr)
        CHECK_OK(st_envelope_wrap(&b, r->kr));
    state_path(path, sizeof path, name);
    CHECK_OK(st_replay_wrap(&b, path));
    return b;
}

static void rig_close(rig *r)
{
    st_backend_close(r->writer);
    st_backend_close(r->raw);
    st_keyring_free(r->kr);
}

/* Publishes NODE's part of step (an empty manifest) as a publisher that was
 * handed no lineage; *part gets what the part record says. */
static void publish(st_backend *b, uint64_t step, st_part *part)
{
    st_manifest m = {.step = step, .job = JOB, .node = NODE, .created_ns = 1};
    uint64_t puts = 0;
    *part = (st_part){.revision = 1, .complete = 1};
    CHECK_OK(st_catalog_publish(b, &m, part, NULL, 0, &puts));
}

/* The part record of NODE's part of step as the bucket holds it. */
static void grab(rig *r, uint64_t step, st_bytes *out)
{
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_part(key, sizeof key, JOB, step, NODE));
    CHECK_OK(st_get(r->raw, key, 0, ST_GET_TO_END, out));
}

/* Puts bytes back under the part record's key, behind every wrapper. */
static void put_back(rig *r, uint64_t step, const st_bytes *bytes)
{
    char key[ST_KEY_MAX];
    CHECK_OK(st_key_part(key, sizeof key, JOB, step, NODE));
    CHECK_OK(st_put(r->raw, key, bytes->data, bytes->len));
}

/* Reads NODE's part of step through b: its error, *revision if read. */
static st_err read_part(st_backend *b, uint64_t step, uint32_t *revision, st_part *out)
{
    st_bytes buf = {0};
    st_part p;
    st_err e = st_catalog_load_part(b, JOB, step, NODE, &buf, &p);
    if (!e) {
        *revision = p.revision;
        if (out)
            *out = p;
        else
            st_part_free(&p);
    }
    st_bytes_free(&buf);
    return e;
}

/* Revision 2 seen, revision 1 put back: refused by the writer and by a
 * reader that saw revision 2, read by a reader that never saw it. */
static void rollback_refused(int sealed)
{
    rig r;
    st_part p1, p2, seen;
    st_bytes rev1 = {0};
    uint32_t rev = 0;
    rig_open(&r, sealed, sealed ? "writer-sealed" : "writer-plain");
    st_backend *reader = reader_open(&r, sealed ? "reader-sealed" : "reader-plain");

    publish(r.writer, 1, &p1);
    CHECK(p1.revision == 1 && !st_part_lineage_is_zero(&p1));
    grab(&r, 1, &rev1);
    CHECK_OK(read_part(reader, 1, &rev, NULL));
    CHECK(rev == 1);

    publish(r.writer, 1, &p2); /* published again: same lineage, higher revision */
    CHECK(p2.revision == 2);
    CHECK(memcmp(p1.lineage, p2.lineage, ST_PART_LINEAGE_LEN) == 0);
    CHECK_OK(read_part(reader, 1, &rev, &seen));
    CHECK(rev == 2 && memcmp(seen.lineage, p1.lineage, ST_PART_LINEAGE_LEN) == 0);
    st_part_free(&seen);

    put_back(&r, 1, &rev1); /* the rollback */
    CHECK_ERR(read_part(reader, 1, &rev, NULL), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "jobs/" JOB "/steps/00000000000000000001/nodes/" NODE ".commit"));
    CHECK(strstr(st_errmsg(), "rolled back: it holds revision 1"));
    CHECK(strstr(st_errmsg(), "seen revision 2"));
    CHECK_ERR(read_part(r.writer, 1, &rev, NULL), ST_ERR_CORRUPT); /* it wrote revision 2 */

    /* The whole step is judged on all its parts: refused too. */
    st_step_keys *keys = NULL;
    size_t nkeys = 0;
    st_stepview v;
    st_bytes buf = {0};
    CHECK_OK(st_catalog_list_steps(reader, JOB, &keys, &nkeys));
    CHECK(nkeys == 1);
    if (nkeys == 1)
        CHECK_ERR(st_catalog_load_view(reader, JOB, &keys[0], &buf, &v), ST_ERR_CORRUPT);
    st_step_keys_free(keys, nkeys);
    st_bytes_free(&buf);

    /* A reader that never saw revision 2 cannot tell. */
    st_backend *fresh = reader_open(&r, sealed ? "fresh-sealed" : "fresh-plain");
    CHECK_OK(read_part(fresh, 1, &rev, NULL));
    CHECK(rev == 1);

    /* The node publishes again: past what it saw, readable again. */
    st_part p3;
    publish(r.writer, 1, &p3);
    CHECK_OK(read_part(reader, 1, &rev, NULL));
    CHECK(rev >= 2);

    st_backend_close(fresh);
    st_backend_close(reader);
    st_bytes_free(&rev1);
    st_part_free(&p1);
    st_part_free(&p2);
    st_part_free(&p3);
    rig_close(&r);
}

static void test_rollback_refused_encrypted(void)
{
    rollback_refused(1);
}

static void test_rollback_refused_plain(void)
{
    rollback_refused(0);
}

static int delete_cb(void *arg, const char *key, uint64_t size)
{
    (void)size;
    CHECK_OK(st_del(arg, key));
    return 0;
}

/* Deleted (as GC deletes a step) and published again: revision 1 of a new
 * lineage, accepted; the earlier life put back is refused. */
static void test_delete_and_publish_again(void)
{
    rig r;
    st_part p1, p2, again;
    st_bytes old = {0};
    uint32_t rev = 0;
    char prefix[ST_KEY_MAX];
    rig_open(&r, 1, "writer-delete");
    st_backend *reader = reader_open(&r, "reader-delete");

    publish(r.writer, 2, &p1);
    publish(r.writer, 2, &p2);
    CHECK(p2.revision == 2);
    CHECK_OK(read_part(reader, 2, &rev, NULL));
    CHECK(rev == 2);
    grab(&r, 2, &old);

    CHECK_OK(st_key_step_prefix(prefix, sizeof prefix, JOB, 2));
    CHECK_OK(st_list(r.raw, prefix, delete_cb, r.raw));
    publish(r.writer, 2, &again);
    CHECK(again.revision == 1);
    CHECK(memcmp(again.lineage, p1.lineage, ST_PART_LINEAGE_LEN) != 0);
    CHECK_OK(read_part(reader, 2, &rev, NULL));
    CHECK(rev == 1);
    CHECK_OK(read_part(r.writer, 2, &rev, NULL));

    put_back(&r, 2, &old); /* revision 2 of the life before the deletion */
    CHECK_ERR(read_part(reader, 2, &rev, NULL), ST_ERR_CORRUPT);
    CHECK(strstr(st_errmsg(), "lineage that was replaced"));
    CHECK(strstr(st_errmsg(), "revision 2") && strstr(st_errmsg(), "revision 1"));

    st_backend_close(reader);
    st_bytes_free(&old);
    st_part_free(&p1);
    st_part_free(&p2);
    st_part_free(&again);
    rig_close(&r);
}

/* A part record with fixed fields, and lineage 0x5a... when lined. */
static void golden_part(st_part *p, int lined)
{
    static char expected0[] = "step-000700/.metadata";
    static char *expected[] = {expected0};
    static st_rank_commit commits[] = {{0, 8}, {5, 8}};
    memset(p, 0, sizeof *p);
    p->step = 700;
    p->created_ns = 1700000000123456789;
    snprintf(p->job, sizeof p->job, "golden-job");
    snprintf(p->node, sizeof p->node, "gpu-node-02");
    p->revision = 3;
    p->manifest_len = 4242;
    memset(p->manifest_digest.b, 0xa7, ST_ID_LEN);
    p->complete = 1;
    p->rank_coverage = 1;
    p->world_size = 8;
    p->nexpected = 1;
    p->expected = expected;
    p->ncommits = 2;
    p->commits = commits;
    if (lined)
        memset(p->lineage, 0x5a, ST_PART_LINEAGE_LEN);
}

static void check_golden(const char *name, int lined)
{
    st_part p, d;
    st_bytes enc = {0};
    golden_part(&p, lined);
    CHECK_OK(st_part_encode(&p, &enc));
    CHECK(enc.len > 6 && enc.data[4] == (lined ? 3 : 2) && enc.data[5] == 0);
    ut_golden_check(name, enc.data, enc.len);
    uint8_t *gold = NULL;
    long len = ut_golden_read(name, &gold);
    CHECK(len > 0);
    if (len > 0) {
        CHECK_OK(st_part_decode(gold, (size_t)len, &d));
        CHECK(d.revision == 3 && d.step == 700 && d.nexpected == 1 && d.ncommits == 2);
        CHECK(memcmp(d.lineage, p.lineage, ST_PART_LINEAGE_LEN) == 0);
        CHECK(st_part_lineage_is_zero(&d) == !lined);
        st_part_free(&d);
    }
    free(gold);
    st_bytes_free(&enc);
}

/* The format: version 2 (no lineage) as every earlier build wrote it, and
 * version 3; a version 3 record with a zero lineage is not one an encoder
 * writes, so it is malformed. */
static void test_format_versions(void)
{
    check_golden("part_v2.bin", 0);
    check_golden("part_v3.bin", 1);

    st_part p, d;
    st_bytes enc = {0};
    golden_part(&p, 1);
    CHECK_OK(st_part_encode(&p, &enc));
    memset(enc.data + enc.len - 8 - ST_PART_LINEAGE_LEN, 0, ST_PART_LINEAGE_LEN);
    uint64_t sum = st_hash64(enc.data, enc.len - 8);
    for (int i = 0; i < 8; i++)
        enc.data[enc.len - 8 + i] = (uint8_t)(sum >> (8 * i));
    CHECK_ERR(st_part_decode(enc.data, enc.len, &d), ST_ERR_CORRUPT);
    st_bytes_free(&enc);
}

/* A record of a build before lineages is read, judged by its revision; a
 * new build publishing the part again gives it a lineage, and the old
 * record put back is then refused. */
static void test_old_format_record(void)
{
    rig r;
    st_part old = {0}, d, now;
    st_bytes enc = {0}, stored = {0};
    uint32_t rev = 0;
    char key[ST_KEY_MAX], mkey[ST_KEY_MAX];
    rig_open(&r, 1, "writer-old");
    st_backend *reader = reader_open(&r, "reader-old");

    /* What an older build published: an empty manifest, revision 1, a
     * version-2 part record (sealed: written through the writer). */
    st_manifest m = {.step = 3, .job = JOB, .node = NODE, .created_ns = 1};
    st_bytes man = {0};
    old.revision = 1;
    CHECK_OK(st_catalog_seal_part(&m, &old, &man));
    CHECK_OK(st_key_manifest(mkey, sizeof mkey, JOB, 3, NODE, 1));
    CHECK_OK(st_put(r.writer, mkey, man.data, man.len));
    CHECK_OK(st_part_encode(&old, &enc));
    CHECK(enc.data[4] == 2);
    CHECK_OK(st_key_part(key, sizeof key, JOB, 3, NODE));
    CHECK_OK(st_put(r.writer, key, enc.data, enc.len));
    grab(&r, 3, &stored);

    CHECK_OK(read_part(reader, 3, &rev, &d));
    CHECK(rev == 1 && st_part_lineage_is_zero(&d));
    st_part_free(&d);

    publish(r.writer, 3, &now); /* a new build publishes it again */
    CHECK(now.revision == 2 && !st_part_lineage_is_zero(&now));
    CHECK_OK(read_part(reader, 3, &rev, NULL));
    CHECK(rev == 2);
    put_back(&r, 3, &stored);
    CHECK_ERR(read_part(reader, 3, &rev, NULL), ST_ERR_CORRUPT);

    st_backend_close(reader);
    st_bytes_free(&man);
    st_bytes_free(&enc);
    st_bytes_free(&stored);
    st_part_free(&now);
    rig_close(&r);
}

/* The rule, case by case; at most ST_STATE_REPLACED_MAX lineages replaced. */
static void test_judge(void)
{
    st_part p = {.revision = 5};
    st_part_seen known, next;
    int changed;
    memset(p.lineage, 1, ST_PART_LINEAGE_LEN);
    CHECK_OK(st_replay_judge(NULL, &p, "k", &known, &changed));
    CHECK(changed && known.revision == 5 && known.nreplaced == 0);

    CHECK_OK(st_replay_judge(&known, &p, "k", &next, &changed));
    CHECK(!changed);
    p.revision = 4;
    CHECK_ERR(st_replay_judge(&known, &p, "k", &next, &changed), ST_ERR_CORRUPT);
    p.revision = 6;
    CHECK_OK(st_replay_judge(&known, &p, "k", &next, &changed));
    CHECK(changed && next.revision == 6);

    /* Lineages 2..6 replace one another: 1 drops out of the replaced ones. */
    for (uint8_t l = 2; l <= 6; l++) {
        memset(p.lineage, l, ST_PART_LINEAGE_LEN);
        p.revision = 1;
        CHECK_OK(st_replay_judge(&known, &p, "k", &next, &changed));
        CHECK(changed && next.revision == 1);
        known = next;
    }
    CHECK(known.nreplaced == ST_STATE_REPLACED_MAX);
    CHECK(known.replaced[0][0] == 5 && known.replaced[3][0] == 2);
    memset(p.lineage, 3, ST_PART_LINEAGE_LEN);
    p.revision = 9;
    CHECK_ERR(st_replay_judge(&known, &p, "k", &next, &changed), ST_ERR_CORRUPT);
    memset(p.lineage, 1, ST_PART_LINEAGE_LEN); /* forgotten: a new life as far as it knows */
    CHECK_OK(st_replay_judge(&known, &p, "k", &next, &changed));
}

/* The state's row round-trips, and survives a reopen. */
static void test_state_rows(void)
{
    char path[600];
    st_state *s = NULL;
    st_part_seen seen, got;
    memset(&seen, 0, sizeof seen);
    memset(seen.lineage, 9, ST_PART_LINEAGE_LEN);
    seen.revision = 77;
    seen.nreplaced = 2;
    memset(seen.replaced[0], 8, ST_PART_LINEAGE_LEN);
    memset(seen.replaced[1], 7, ST_PART_LINEAGE_LEN);
    state_path(path, sizeof path, "rows");
    CHECK_OK(st_state_open(path, &s));
    CHECK_ERR(st_state_part_seen(s, JOB, UINT64_MAX, NODE, &got), ST_ERR_NOT_FOUND);
    CHECK_OK(st_state_part_remember(s, JOB, UINT64_MAX, NODE, &seen));
    st_state_close(s);
    CHECK_OK(st_state_open(path, &s));
    CHECK_OK(st_state_part_seen(s, JOB, UINT64_MAX, NODE, &got));
    CHECK(got.revision == 77 && got.nreplaced == 2);
    CHECK(memcmp(&got, &seen, sizeof got) == 0);
    CHECK_ERR(st_state_part_seen(s, JOB, 1, NODE, &got), ST_ERR_NOT_FOUND);
    st_state_close(s);
}

static void run_cases(void)
{
    RUN(test_judge);
    RUN(test_state_rows);
    RUN(test_format_versions);
    RUN(test_rollback_refused_encrypted);
    RUN(test_rollback_refused_plain);
    RUN(test_delete_and_publish_again);
    RUN(test_old_format_record);
}

int main(void)
{
    return ut_main_tmp_store(root, url, sizeof url, run_cases);
}
