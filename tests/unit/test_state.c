/*
 * Unit tests of st_state (SQLite dedup index) and of
 * st_part (key names, part record codec).
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/st_state.h"
#include "format/st_part.h"
#include "ut.h"

static char dir[] = "/tmp/ckpt-test-state-XXXXXX";
static char db[256];

static void test_chunk_index(void)
{
    st_state *s;
    CHECK_OK(st_state_open(db, &s));
    st_id a = st_id_of("a", 1), b = st_id_of("b", 1), pack = st_id_of("pack", 4);
    st_chunk_loc loc = {pack, 4096, 100, 200}, got;
    CHECK_ERR(st_state_chunk_lookup(s, "job", &a, &got), ST_ERR_NOT_FOUND);
    CHECK_OK(st_state_begin(s));
    CHECK_OK(st_state_chunk_add(s, "job", &a, &loc));
    CHECK_OK(st_state_pack_add(s, "job", &pack, 1 << 20, 1));
    CHECK_OK(st_state_commit(s));
    CHECK_OK(st_state_chunk_lookup(s, "job", &a, &got));
    CHECK(st_id_cmp(&got.pack, &pack) == 0 && got.offset == 4096 && got.stored_len == 100 &&
          got.raw_len == 200);
    /* Jobs are separate namespaces. */
    CHECK_ERR(st_state_chunk_lookup(s, "other", &a, &got), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_state_chunk_lookup(s, "job", &b, &got), ST_ERR_NOT_FOUND);
    /* First location wins. */
    st_chunk_loc moved = {pack, 1, 2, 3};
    CHECK_OK(st_state_chunk_add(s, "job", &a, &moved));
    CHECK_OK(st_state_chunk_lookup(s, "job", &a, &got));
    CHECK(got.offset == 4096);
    /* A rolled-back transaction leaves nothing. */
    CHECK_OK(st_state_begin(s));
    CHECK_OK(st_state_chunk_add(s, "job", &b, &loc));
    CHECK_OK(st_state_rollback(s));
    CHECK_ERR(st_state_chunk_lookup(s, "job", &b, &got), ST_ERR_NOT_FOUND);
    uint64_t chunks, packs;
    CHECK_OK(st_state_counts(s, "job", &chunks, &packs));
    CHECK(chunks == 1 && packs == 1);
    st_state_close(s);

    /* Persisted across a reopen. */
    CHECK_OK(st_state_open(db, &s));
    CHECK_OK(st_state_chunk_lookup(s, "job", &a, &got));
    st_state_close(s);
}

static void test_manifests_seen(void)
{
    st_state *s;
    CHECK_OK(st_state_open(db, &s));
    CHECK(!st_state_manifest_seen(s, "k"));
    CHECK_OK(st_state_manifest_mark(s, "k"));
    CHECK(st_state_manifest_seen(s, "k"));
    st_state_close(s);
}

static void test_open_errors(void)
{
    st_state *s = (st_state *)1;
    CHECK_ERR(st_state_open("/nonexistent-dir/x/y.db", &s), ST_ERR_IO);
    CHECK(s == NULL);
    CHECK(strstr(st_errmsg(), "/nonexistent-dir") != NULL);
}

static void test_keys(void)
{
    char key[256];
    st_id p = st_id_of("x", 1);
    char hex[33];
    st_id_hex(&p, hex);
    CHECK_OK(st_key_pack(key, sizeof key, "job-1", &p));
    char want[128];
    snprintf(want, sizeof want, "jobs/job-1/packs/%.2s/%s.pack", hex, hex);
    CHECK(strcmp(key, want) == 0);
    CHECK_OK(st_key_part(key, sizeof key, "j", 42, "node-a"));
    CHECK(strcmp(key, "jobs/j/steps/00000000000000000042/nodes/node-a.commit") == 0);
    uint64_t step;
    const char *rest;
    char node[ST_NODE_MAX + 1];
    CHECK_OK(st_key_parse_step(key, "j", &step, &rest));
    CHECK(step == 42 && st_key_parse_part(rest, node) && strcmp(node, "node-a") == 0);
    CHECK(!st_key_parse_part("nodes/x.r1.manifest", node));
    CHECK(!st_key_parse_part("nodes/.commit", node));
    CHECK(!st_key_parse_part("nodes/../x.commit", node));
    CHECK_ERR(st_key_parse_step("jobs/j/steps/123/commit", "j", &step, &rest), ST_ERR_INVALID);
    CHECK_ERR(st_key_parse_step("jobs/j/steps/99999999999999999999/x", "j", &step, &rest),
              ST_ERR_INVALID); /* overflows 64 bits */
    CHECK_OK(st_key_manifest(key, sizeof key, "j", 1, "node-a", 3));
    CHECK(strcmp(key, "jobs/j/steps/00000000000000000001/nodes/node-a.r3.manifest") == 0);
    const char *bad[] = {"", ".", "..", ".hidden", "a/b", "a b", "x\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_ERR(st_key_part(key, sizeof key, bad[i], 1, "n"), ST_ERR_INVALID);
    CHECK_ERR(st_key_manifest(key, sizeof key, "j", 1, "../x", 1), ST_ERR_INVALID);
    CHECK_ERR(st_key_part(key, 10, "job", 1, "n"), ST_ERR_INVALID); /* buffer too small */
}

static void test_part_record(void)
{
    char *expected[] = {"step-1/__0_0.distcp", "step-1/__1_0.distcp"};
    st_rank_commit commits[] = {{0, 4}, {3, 4}};
    st_part p = {.step = 99,
                 .created_ns = 1700000000123456789LL,
                 .revision = 7,
                 .manifest_len = 456,
                 .manifest_digest = st_id_of("m", 1),
                 .complete = 1,
                 .rank_coverage = 1,
                 .world_size = 4,
                 .nexpected = 2,
                 .expected = expected,
                 .ncommits = 2,
                 .commits = commits};
    strcpy(p.job, "job");
    strcpy(p.node, "node-b");
    st_bytes buf = {0};
    CHECK_OK(st_part_encode(&p, &buf));
    st_part d;
    CHECK_OK(st_part_decode(buf.data, buf.len, &d));
    CHECK(d.step == 99 && d.created_ns == p.created_ns && d.revision == 7 &&
          d.manifest_len == 456 && d.complete && d.rank_coverage && d.world_size == 4 &&
          strcmp(d.job, "job") == 0 && strcmp(d.node, "node-b") == 0 &&
          st_id_cmp(&d.manifest_digest, &p.manifest_digest) == 0);
    CHECK(d.nexpected == 2 && strcmp(d.expected[1], "step-1/__1_0.distcp") == 0);
    CHECK(d.ncommits == 2 && d.commits[1].rank == 3 && d.commits[1].world_size == 4);
    st_part_free(&d);
    /* Every truncation and every byte flip is rejected. */
    int rejected = 0, total = 0;
    for (size_t n = 0; n < buf.len; n++, total++)
        rejected += st_part_decode(buf.data, n, &d) == ST_ERR_CORRUPT;
    for (size_t i = 0; i < buf.len; i++, total++) {
        buf.data[i] ^= 0x20;
        st_err e = st_part_decode(buf.data, buf.len, &d);
        rejected += e == ST_ERR_CORRUPT || e == ST_ERR_UNSUPPORTED;
        if (e == ST_OK)
            st_part_free(&d);
        buf.data[i] ^= 0x20;
    }
    CHECK(rejected == total);
    /* Unclean expected paths are refused by the encoder. */
    char *bad[] = {"../etc/passwd"};
    p.expected = bad;
    p.nexpected = 1;
    st_bytes out = {0};
    CHECK_ERR(st_part_encode(&p, &out), ST_ERR_INVALID);
    st_bytes_free(&out);
    /* Random garbage never decodes. */
    uint8_t junk[300];
    int ok = 0;
    for (uint64_t seed = 1; seed < 2000; seed++) {
        ut_rand_fill(junk, sizeof junk, seed);
        memcpy(junk, "CKs2", 4);
        ok += st_part_decode(junk, 20 + seed % 280, &d) == ST_OK;
    }
    CHECK(ok == 0);
    st_bytes_free(&buf);
}

int main(void)
{
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(db, sizeof db, "%s/state.db", dir);
    RUN(test_chunk_index);
    RUN(test_manifests_seen);
    RUN(test_open_errors);
    RUN(test_keys);
    RUN(test_part_record);
    ut_rmtree(dir);
    return ut_finish();
}
