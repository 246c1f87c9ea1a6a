/*
 * test_peer_listing — the body of GET /v1/replicas (store/peer/
 * st_peer_listing.h; docs/PEERS.md, "Restoring from peers alone"): a round
 * trip, the exact bytes of a small listing (a format change is a
 * deliberate act), the bound, and the bodies the decoder must refuse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer/st_peer_listing.h"
#include "ut.h"

static st_peer_listed item(const char *job, uint64_t step, const char *node, uint32_t rev,
                           int durable)
{
    st_peer_listed it = {.step = step, .rev = rev, .durable = durable};
    snprintf(it.job, sizeof it.job, "%s", job);
    snprintf(it.node, sizeof it.node, "%s", node);
    it.manifest_id = st_id_of(node, strlen(node));
    it.manifest_len = 1000 + step;
    it.record_len = durable ? 0 : 2000 + step;
    return it;
}

static void test_round_trip(void)
{
    st_peer_listed in[3] = {item("job1", 400, "node-a", 1, 0), item("job1", 400, "node-b", 7, 1),
                            item("j.2", UINT64_MAX, "n_3", UINT32_MAX, 0)};
    for (int truncated = 0; truncated < 2; truncated++) {
        st_bytes b = {0};
        CHECK_OK(st_peer_listing_encode(in, 3, truncated, &b));
        CHECK(b.len <= st_peer_listing_bound(3));
        st_peer_listing l;
        CHECK_OK(st_peer_listing_decode(b.data, b.len, &l));
        CHECK(l.n == 3 && l.truncated == truncated);
        for (size_t i = 0; i < 3; i++)
            CHECK(!memcmp(&l.items[i], &in[i], sizeof in[i]));
        st_peer_listing_free(&l);
        st_bytes_free(&b);
    }
    st_bytes b = {0};
    st_peer_listing l;
    CHECK_OK(st_peer_listing_encode(NULL, 0, 0, &b));
    CHECK_OK(st_peer_listing_decode(b.data, b.len, &l));
    CHECK(l.n == 0 && !l.items && !l.truncated);
    st_bytes_free(&b);
}

static void test_golden(void)
{
    st_peer_listed it = item("job1", 400, "node-a", 1, 0);
    memset(&it.manifest_id, 0xab, sizeof it.manifest_id);
    st_bytes b = {0};
    CHECK_OK(st_peer_listing_encode(&it, 1, 0, &b));
    const char *want = "ckptfs-peer-replicas v1\n"
                       "replica job1 400 node-a 1 held abababababababababababababababab 1400 2400\n"
                       "end 1 complete\n";
    CHECK(b.len == strlen(want) && !memcmp(b.data, want, b.len));
    st_bytes_free(&b);
}

static void test_encoder_refuses(void)
{
    st_bytes b = {0};
    st_peer_listed bad = item("job1", 1, "node-a", 1, 0);
    snprintf(bad.node, sizeof bad.node, ".hidden");
    CHECK_ERR(st_peer_listing_encode(&bad, 1, 0, &b), ST_ERR_INVALID);
    bad = item("job1", 1, "node-a", 1, 0);
    bad.manifest_len = 0;
    CHECK_ERR(st_peer_listing_encode(&bad, 1, 0, &b), ST_ERR_INVALID);
    CHECK_ERR(st_peer_listing_encode(&bad, ST_PEER_LISTING_MAX + 1, 0, &b), ST_ERR_INVALID);
    st_bytes_free(&b);
}

static void refused(const char *body)
{
    st_peer_listing l;
    l.n = 99;
    CHECK_ERR(st_peer_listing_decode((const uint8_t *)body, strlen(body), &l), ST_ERR_CORRUPT);
    CHECK(l.n == 0 && l.items == NULL);
}

static void test_decoder_refuses(void)
{
    const char *h = "ckptfs-peer-replicas v1\n";
    const char *line = "replica job1 400 node-a 1 held abababababababababababababababab 1400 0\n";
    char body[1024];
    refused("");
    refused("ckptfs-peer-replicas v2\nend 0 complete\n");
    snprintf(body, sizeof body, "%s", h); /* no end line: cut short */
    refused(body);
    snprintf(body, sizeof body, "%s%s", h, line); /* cut before its end line */
    refused(body);
    snprintf(body, sizeof body, "%s%send 2 complete\n", h, line); /* count disagrees */
    refused(body);
    snprintf(body, sizeof body, "%s%send 1 complete\nx", h, line); /* bytes after the end */
    refused(body);
    snprintf(body, sizeof body, "%s%send 1 partial\n", h, line);
    refused(body);
    static const char *bad_lines[] = {
        "replica job1 0400 node-a 1 held abababababababababababababababab 1400 0\n",
        "replica job1 400 node-a 4294967296 held abababababababababababababababab 1400 0\n",
        "replica job1 400 .a 1 held abababababababababababababababab 1400 0\n",
        "replica job/1 400 node-a 1 held abababababababababababababababab 1400 0\n",
        "replica job1 400 node-a 1 kept abababababababababababababababab 1400 0\n",
        "replica job1 400 node-a 1 held ABABABABABABABABABABABABABABABAB 1400 0\n",
        "replica job1 400 node-a 1 held ababababababababababababababab 1400 0\n",
        "replica job1 400 node-a 1 held abababababababababababababababab 0 0\n",
        "replica job1 400 node-a 1 held abababababababababababababababab 1073741825 0\n",
        "replica job1 400 node-a 1 held abababababababababababababababab 1400\n",
        "replica job1 400 node-a 1 held abababababababababababababababab 1400 0 9\n",
        "replica job1  400 node-a 1 held abababababababababababababababab 1400 0\n",
        "replica job1 400 node-a 1 held abababababababababababababababab 1400 -1\n",
    };
    for (size_t i = 0; i < sizeof bad_lines / sizeof bad_lines[0]; i++) {
        snprintf(body, sizeof body, "%s%send 1 complete\n", h, bad_lines[i]);
        refused(body);
    }
}

/* A NUL inside a name would cut it short: the listing would not re-encode
 * to its bytes (found by fuzz_peer_listing; seeds/fuzz_peer_listing/nul_in_name). */
static void test_nul_in_a_name(void)
{
    static const char body[] =
        "ckptfs-peer-replicas v1\n"
        "replica job1 400 node\0a 1 held abababababababababababababababab 1 0\n"
        "end 1 complete\n";
    st_peer_listing l;
    CHECK_ERR(st_peer_listing_decode((const uint8_t *)body, sizeof body - 1, &l), ST_ERR_CORRUPT);
}

static void test_bound(void)
{
    st_peer_listed *many = calloc(ST_PEER_LISTING_MAX, sizeof *many);
    char longest[ST_JOB_MAX + 1];
    memset(longest, 'j', ST_JOB_MAX);
    longest[ST_JOB_MAX] = '\0';
    for (size_t i = 0; i < ST_PEER_LISTING_MAX; i++) {
        many[i] = item("x", UINT64_MAX, "y", UINT32_MAX, 1);
        snprintf(many[i].job, sizeof many[i].job, "%s", longest);
        memset(many[i].node, 'n', ST_NODE_MAX);
        many[i].node[ST_NODE_MAX] = '\0';
        many[i].manifest_len = many[i].record_len = ST_PEER_LISTING_OBJECT_MAX;
    }
    st_bytes b = {0};
    CHECK_OK(st_peer_listing_encode(many, ST_PEER_LISTING_MAX, 1, &b));
    CHECK(b.len <= st_peer_listing_bound(ST_PEER_LISTING_MAX));
    st_peer_listing l;
    CHECK_OK(st_peer_listing_decode(b.data, b.len, &l));
    CHECK(l.n == ST_PEER_LISTING_MAX && l.truncated);
    st_peer_listing_free(&l);
    st_bytes_free(&b);
    free(many);
}

int main(void)
{
    RUN(test_round_trip);
    RUN(test_golden);
    RUN(test_encoder_refuses);
    RUN(test_decoder_refuses);
    RUN(test_nul_in_a_name);
    RUN(test_bound);
    return ut_finish();
}
