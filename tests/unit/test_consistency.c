/*
 * Unit tests of the consistency rule (st_stepview_evaluate,
 * docs/CONSISTENCY.md) on steps built in memory: one writer, DCP-style
 * expected shards, rank coverage, explicit per-rank commits; one version
 * per path (st_stepview entries) and the x vs x/y check.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/st_catalog.h"
#include "ut.h"

#define MAX_PARTS 4
#define MAX_FILES 8

static st_part parts[MAX_PARTS];
static st_manifest mans[MAX_PARTS];
static st_file_entry files[MAX_PARTS][MAX_FILES];
static st_stepview view;

static void reset(void)
{
    free(view.entries); /* st_stepview_evaluate's, the one thing it allocates */
    memset(parts, 0, sizeof parts);
    memset(mans, 0, sizeof mans);
    memset(files, 0, sizeof files);
    memset(&view, 0, sizeof view);
    view.step = 7;
    view.parts = parts;
    view.manifests = mans;
}

/* Adds a part (node) and returns its index. */
static size_t add_part(int complete, uint32_t world, int coverage)
{
    size_t i = view.nparts++;
    parts[i].complete = complete;
    parts[i].world_size = world;
    parts[i].rank_coverage = coverage;
    mans[i].files = files[i];
    return i;
}

static void add_file(size_t part, const char *path, int32_t rank, uint64_t size)
{
    st_file_entry *f = &files[part][mans[part].nfiles++];
    f->path = (char *)path;
    f->rank = rank;
    f->size = size;
}

static void test_single_writer(void)
{
    reset();
    size_t a = add_part(0, 0, 0);
    add_file(a, "ckpt-000007.pt", -1, 100);
    st_stepview_evaluate(&view);
    CHECK(!view.consistent && strstr(view.why, "not complete"));
    parts[a].complete = 1;
    st_stepview_evaluate(&view);
    CHECK(view.consistent && view.why[0] == '\0' && view.files == 1 && view.bytes == 100);
}

static void test_dcp_expected_shards(void)
{
    reset();
    char *expected[] = {"step-7/__0_0.distcp", "step-7/__1_0.distcp", "step-7/__2_0.distcp",
                        "step-7/__3_0.distcp"};
    size_t a = add_part(1, 4, 1); /* node A: ranks 0,1 and rank 0's .metadata */
    parts[a].expected = expected;
    parts[a].nexpected = 4;
    add_file(a, "step-7/__0_0.distcp", 0, 10);
    add_file(a, "step-7/__1_0.distcp", 1, 10);
    add_file(a, "step-7/.metadata", 0, 1);
    st_stepview_evaluate(&view);
    CHECK(!view.consistent && strstr(view.why, "__2_0.distcp") && strstr(view.why, "2,3"));
    size_t b = add_part(0, 4, 1); /* node B publishes ranks 2,3 eagerly */
    add_file(b, "step-7/__2_0.distcp", 2, 10);
    st_stepview_evaluate(&view);
    CHECK(!view.consistent && strstr(view.why, "__3_0.distcp"));
    add_file(b, "step-7/__3_0.distcp", 3, 10);
    st_stepview_evaluate(&view);
    CHECK(view.consistent && view.ranks == 4 && view.world_size == 4 && view.nparts == 2);
}

static void test_rank_coverage(void)
{
    reset(); /* DeepSpeed: every rank writes zero_pp_rank_R_* ; latest completes */
    size_t a = add_part(1, 4, 1);
    add_file(a, "global_step7/zero_pp_rank_0_mp_rank_00_optim_states.pt", 0, 5);
    add_file(a, "global_step7/zero_pp_rank_1_mp_rank_00_optim_states.pt", 1, 5);
    add_file(a, "latest", 0, 13);
    st_stepview_evaluate(&view);
    CHECK(!view.consistent && strstr(view.why, "no files from ranks 2,3"));
    size_t b = add_part(0, 4, 1);
    add_file(b, "global_step7/zero_pp_rank_2_mp_rank_00_optim_states.pt", 2, 5);
    add_file(b, "global_step7/zero_pp_rank_3_mp_rank_00_optim_states.pt", 3, 5);
    st_stepview_evaluate(&view);
    CHECK(view.consistent);
    /* Complete comes from the marker node only: without it, not consistent. */
    parts[a].complete = 0;
    st_stepview_evaluate(&view);
    CHECK(!view.consistent);
    /* An unknown world size cannot be covered, so coverage is not judged. */
    reset();
    a = add_part(1, 0, 1);
    add_file(a, "step-7/__0_0.distcp", -1, 5);
    st_stepview_evaluate(&view);
    CHECK(view.consistent);
}

static void test_explicit_commits(void)
{
    reset();
    st_rank_commit ca[] = {{0, 3}, {1, 3}};
    st_rank_commit cb[] = {{2, 3}};
    size_t a = add_part(0, 0, 0);
    parts[a].commits = ca;
    parts[a].ncommits = 2;
    add_file(a, "shard0", 0, 1);
    st_stepview_evaluate(&view);
    CHECK(!view.consistent && strstr(view.why, "no commit from ranks 2"));
    size_t b = add_part(0, 0, 0);
    parts[b].commits = cb;
    parts[b].ncommits = 1;
    st_stepview_evaluate(&view);
    CHECK(view.consistent && view.world_size == 3); /* commits decide; complete not needed */
}

/* The size of the version of path the view resolved to, or -1. */
static int64_t resolved_size(const char *path)
{
    for (size_t i = 0; i < view.nentries; i++)
        if (!strcmp(view.entries[i].f->path, path))
            return (int64_t)view.entries[i].f->size;
    return -1;
}

/* Two parts hold config.json: the larger revision wins, then the larger
 * node name, whatever the order of the parts in the view. */
static void test_one_version_per_path(void)
{
    for (int order = 0; order < 2; order++)
        for (int tie = 0; tie < 2; tie++) {
            reset();
            size_t first = add_part(1, 0, 0), second = add_part(1, 0, 0);
            size_t a = order ? second : first, b = order ? first : second;
            strcpy(parts[a].node, "node-a");
            strcpy(parts[b].node, "node-b");
            parts[a].revision = 5;
            parts[b].revision = tie ? 5 : 4;
            add_file(a, "config.json", -1, 100);
            add_file(a, "model-a.bin", 0, 10);
            add_file(b, "config.json", -1, 200);
            add_file(b, "model-b.bin", 1, 20);
            st_stepview_evaluate(&view);
            CHECK(view.consistent && view.files == 3);
            CHECK(resolved_size("config.json") == (tie ? 200 : 100));
            CHECK(view.bytes == 30 + (tie ? 200 : 100));
            CHECK(resolved_size("model-a.bin") == 10 && resolved_size("model-b.bin") == 20);
            CHECK_OK(st_stepview_check_paths(&view, "job"));
        }
}

/* x and x/y, in one manifest or across parts: one check says so. */
static void test_file_and_directory(void)
{
    for (int across = 0; across < 2; across++) {
        reset();
        size_t a = add_part(1, 0, 0), b = across ? add_part(1, 0, 0) : a;
        strcpy(parts[a].node, "a");
        strcpy(parts[b].node, "b");
        add_file(a, "step-7/x", -1, 1);
        add_file(a, "step-7/x-2", -1, 1); /* sorts between x and x/y */
        add_file(b, "step-7/x/y", -1, 1);
        st_stepview_evaluate(&view);
        CHECK_ERR(st_stepview_check_paths(&view, "job"), ST_ERR_CORRUPT);
        CHECK(strstr(st_errmsg(), "step 7 of job job: step-7/x is a file") != NULL);
    }
}

int main(void)
{
    RUN(test_single_writer);
    RUN(test_dcp_expected_shards);
    RUN(test_rank_coverage);
    RUN(test_explicit_commits);
    RUN(test_one_version_per_path);
    RUN(test_file_and_directory);
    free(view.entries);
    return ut_finish();
}
