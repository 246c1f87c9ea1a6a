/*
 * test_vfs_remote — the remote view (store/st_vfs_remote.c): two mounts with
 * different node names over one in-memory store, as two nodes over one
 * bucket. A step another node made durable and consistent appears in the
 * namespace and reads back byte for byte (fetched and verified); a step that
 * is not durable, or durable but not consistent (a rank missing), is never
 * shown; among stored versions of one path the newest step wins; rmdir of a
 * step directory drops the files the remote view added after it was listed;
 * a step deleted through one mount leaves the other's view; a step removed
 * while a refresh loads it is not merged back.
 *
 * Mounts are started (uploader, and a refresher every 0.1 s) unless a case
 * needs one held back; waits poll with VH_WAIT.
 */
#include "vfs_harness.h"

static st_backend *store;

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

/* Long enough for several refreshes of a 0.1 s refresher. */
static void a_few_refreshes(void)
{
    usleep(500 * 1000);
}

static void test_durable_step_appears_on_another_node(void)
{
    store_reset();
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "node-a", "view-a", 0)); /* no uploader yet */
    CHECK_OK(vh_mount_open(&b, store, "node-b", "view-b", 1));
    if (!a.v || !b.v)
        return;
    size_t n = (1u << 20) + 4321;
    uint8_t *big = vh_data(n, 10), *opt = vh_data(70000, 11);
    CHECK_OK(vh_write(&a, VH_JOB "/ckpt-000010.pt", big, n, VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000011/model.bin", "model 11", VH_PID_B));
    CHECK_OK(vh_write(&a, VH_JOB "/step-000011/sub/opt.bin", opt, 70000, VH_PID_B));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000011/.ckpt-complete", "", VH_PID_B));
    CHECK(strcmp(vh_state(&a, 10), "queued") == 0 && strcmp(vh_state(&a, 11), "queued") == 0);
    /* Complete on A but not durable: B shows nothing. */
    a_few_refreshes();
    CHECK(!vh_exists(&b, VH_JOB));
    CHECK(vh_count(store, "jobs/") == 0);

    CHECK_OK(st_vfs_start(a.v));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_consistent(store, 10) && vh_consistent(store, 11));
    CHECK(VH_WAIT(vh_exists(&b, VH_JOB "/step-000011/sub/opt.bin"), 10));
    CHECK(VH_WAIT(vh_exists(&b, VH_JOB "/ckpt-000010.pt"), 10));
    st_vfs_attr at;
    CHECK_OK(vh_lookup(&b, VH_JOB "/ckpt-000010.pt", &at));
    CHECK(at.size == n);
    CHECK(strcmp(vh_ls(&b, VH_JOB), "ckpt-000010.pt,step-000011") == 0);
    CHECK(strcmp(vh_ls(&b, VH_JOB "/step-000011"), ".ckpt-complete,model.bin,sub") == 0);
    CHECK(strcmp(vh_state(&b, 10), "durable") == 0);
    uint64_t staged = vh_status_u64(&b, NULL, "staged_bytes");
    CHECK(vh_file_is(&b, VH_JOB "/ckpt-000010.pt", big, n));
    CHECK(vh_file_is(&b, VH_JOB "/step-000011/sub/opt.bin", opt, 70000));
    CHECK(vh_file_is_str(&b, VH_JOB "/step-000011/model.bin", "model 11"));
    /* The fetched copies are kept in B's staging: counted once each fetch
     * has ended (its last run in and the whole file checked), which may be
     * a moment after the reads that needed only their ranges returned
     * (docs/WARMUP.md). */
    CHECK(VH_WAIT(vh_status_u64(&b, NULL, "staged_bytes") >= staged + n + 70000, 10));
    /* B never publishes A's files as its own. */
    CHECK_OK(st_vfs_wait_idle(b.v, 20));
    st_part p;
    CHECK_ERR(vh_part(store, 10, "node-b", &p), ST_ERR_NOT_FOUND);

    /* A node mounted later sees the steps at once. */
    vh_mount c;
    CHECK_OK(vh_mount_open(&c, store, "node-c", "view-c", 0));
    if (c.v) {
        CHECK(vh_file_is(&c, VH_JOB "/ckpt-000010.pt", big, n));
        vh_mount_close(&c);
    }
    vh_mount_close(&b);
    vh_mount_close(&a);
    free(big);
    free(opt);
}

/* Explicit commits of a world of 2, one rank per node: a part alone is
 * durable but not consistent, and stays invisible until the other rank's. */
static void test_partial_step_is_not_shown(void)
{
    store_reset();
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "node-a", "partial-a", 1));
    CHECK_OK(vh_mount_open(&b, store, "node-b", "partial-b", 1));
    if (!a.v || !b.v)
        return;
    uint8_t *r0 = vh_data(50000, 20), *r1 = vh_data(60000, 21);
    CHECK_OK(vh_write(&a, VH_JOB "/step-000020/rank-0.bin", r0, 50000, VH_PID_A));
    CHECK_OK(vh_commit(&a, VH_JOB " 20 0 2\n"));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_revision(store, 20, "node-a") >= 1 && !vh_consistent(store, 20));
    a_few_refreshes();
    CHECK(!vh_exists(&b, VH_JOB "/step-000020"));

    CHECK_OK(vh_write(&b, VH_JOB "/step-000020/rank-1.bin", r1, 60000, VH_PID_B));
    CHECK_OK(vh_commit(&b, VH_JOB " 20 1 2\n"));
    CHECK_OK(st_vfs_wait_idle(b.v, 20));
    CHECK(vh_consistent(store, 20));
    CHECK(vh_stored_is(store, 20, "step-000020/rank-0.bin,step-000020/rank-1.bin"));
    /* Each node now shows the other's rank, byte for byte. */
    CHECK(VH_WAIT(vh_exists(&a, VH_JOB "/step-000020/rank-1.bin"), 10));
    CHECK(VH_WAIT(vh_exists(&b, VH_JOB "/step-000020/rank-0.bin"), 10));
    CHECK(vh_file_is(&a, VH_JOB "/step-000020/rank-1.bin", r1, 60000));
    CHECK(vh_file_is(&b, VH_JOB "/step-000020/rank-0.bin", r0, 50000));
    CHECK(strcmp(vh_ls(&a, VH_JOB "/step-000020"), "rank-0.bin,rank-1.bin") == 0);
    vh_mount_close(&b);
    vh_mount_close(&a);
    free(r0);
    free(r1);
}

/* DeepSpeed's `latest` is stored with every step: a reader gets the one of
 * the newest step. */
static void test_newest_step_wins_a_path(void)
{
    store_reset();
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "node-a", "newest-a", 1));
    CHECK_OK(vh_mount_open(&b, store, "node-b", "newest-b", 1));
    if (!a.v || !b.v)
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/global_step1/mp_rank_00_model_states.pt", "1", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/latest", "global_step1", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(VH_WAIT(vh_exists(&b, VH_JOB "/latest"), 10));
    CHECK(vh_file_is_str(&b, VH_JOB "/latest", "global_step1"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/global_step2/mp_rank_00_model_states.pt", "2", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/latest", "global_step2", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_consistent(store, 2));
    /* Each step keeps the `latest` that named it. */
    CHECK(vh_stored_is(store, 1, "global_step1/mp_rank_00_model_states.pt,latest"));
    CHECK(vh_stored_is(store, 2, "global_step2/mp_rank_00_model_states.pt,latest"));
    CHECK(VH_WAIT(vh_exists(&b, VH_JOB "/global_step2/mp_rank_00_model_states.pt"), 10));
    CHECK(vh_file_is_str(&b, VH_JOB "/latest", "global_step2"));
    vh_mount c;
    CHECK_OK(vh_mount_open(&c, store, "node-c", "newest-c", 0));
    if (c.v) {
        CHECK(vh_file_is_str(&c, VH_JOB "/latest", "global_step2"));
        vh_mount_close(&c);
    }
    vh_mount_close(&b);
    vh_mount_close(&a);
}

/* rm -r lists a step directory, unlinks what it saw, rmdirs it: files the
 * remote view added after the listing go with the step; files listed before
 * make the rmdir fail, as on any file system. */
static void test_rmdir_drops_files_added_after_the_listing(void)
{
    store_reset();
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "node-a", "unseen-a", 1));
    CHECK_OK(vh_mount_open(&b, store, "node-b", "unseen-b", 1));
    if (!a.v || !b.v)
        return;
    /* Step 5: A lists the directory, then B's rank makes it consistent. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000005/rank-0.bin", "a5", VH_PID_A));
    CHECK_OK(vh_commit(&a, VH_JOB " 5 0 2\n"));
    CHECK(strcmp(vh_ls(&a, VH_JOB "/step-000005"), "rank-0.bin") == 0);
    CHECK_OK(vh_write_str(&b, VH_JOB "/step-000005/rank-1.bin", "b5", VH_PID_B));
    CHECK_OK(vh_commit(&b, VH_JOB " 5 1 2\n"));
    CHECK(VH_WAIT(vh_consistent(store, 5), 10));
    /* A lookup by name, not a listing: the directory stays unlisted. */
    CHECK(VH_WAIT(vh_exists(&a, VH_JOB "/step-000005/rank-1.bin"), 10));
    CHECK_OK(vh_unlink(&a, VH_JOB "/step-000005/rank-0.bin"));
    CHECK_OK(vh_rmdir(&a, VH_JOB "/step-000005"));
    CHECK(!vh_exists(&a, VH_JOB "/step-000005"));
    CHECK(strcmp(vh_deletion(&a, 5), "") != 0 || vh_step_objects(store, 5) == 0);

    /* Step 6: A lists after B's file came: it saw it and left it. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000006/rank-0.bin", "a6", VH_PID_A));
    CHECK_OK(vh_commit(&a, VH_JOB " 6 0 2\n"));
    CHECK_OK(vh_write_str(&b, VH_JOB "/step-000006/rank-1.bin", "b6", VH_PID_B));
    CHECK_OK(vh_commit(&b, VH_JOB " 6 1 2\n"));
    CHECK(VH_WAIT(vh_consistent(store, 6), 10));
    CHECK(VH_WAIT(vh_exists(&a, VH_JOB "/step-000006/rank-1.bin"), 10));
    CHECK(strcmp(vh_ls(&a, VH_JOB "/step-000006"), "rank-0.bin,rank-1.bin") == 0);
    CHECK_OK(vh_unlink(&a, VH_JOB "/step-000006/rank-0.bin"));
    CHECK_ERR(vh_rmdir(&a, VH_JOB "/step-000006"), ST_ERR_NOT_EMPTY);
    CHECK(strcmp(vh_ls(&a, VH_JOB "/step-000006"), "rank-1.bin") == 0);
    CHECK(strcmp(vh_deletion(&a, 6), "") == 0);
    /* Step 5 is not the newest consistent step: it leaves the store, every
     * node's part of it. */
    CHECK(VH_WAIT(vh_step_objects(store, 5) == 0, 20));
    CHECK(vh_consistent(store, 6));
    vh_mount_close(&b);
    vh_mount_close(&a);
}

/* A step deleted through one mount leaves the other mounts at their next
 * refresh, also the mount that wrote it. */
static void test_step_deleted_elsewhere_leaves_the_view(void)
{
    store_reset();
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&b, store, "node-b", "gone-b", 1));
    if (!b.v)
        return;
    CHECK_OK(vh_hf_save(&b, "checkpoint", 50, 3));
    CHECK_OK(vh_hf_save(&b, "checkpoint", 60, 3));
    CHECK_OK(st_vfs_wait_idle(b.v, 20));
    CHECK_OK(vh_mount_open(&a, store, "node-a", "gone-a", 1));
    if (!a.v) {
        vh_mount_close(&b);
        return;
    }
    CHECK(vh_hf_is(&a, "checkpoint", 50, 3));
    CHECK_OK(vh_rmtree(&a, VH_JOB "/checkpoint-50"));
    CHECK(VH_WAIT(vh_step_objects(store, 50) == 0, 20));
    CHECK(VH_WAIT(!vh_exists(&b, VH_JOB "/checkpoint-50"), 10));
    CHECK(strcmp(vh_ls(&b, VH_JOB), "checkpoint-60") == 0);
    CHECK(vh_hf_is(&b, "checkpoint", 60, 3));
    CHECK(strcmp(vh_state(&b, 50), "") == 0);
    CHECK(vh_latest(store) == 60);
    vh_mount_close(&a);
    vh_mount_close(&b);
}

/* A refresh loads a step from the store without the mount's lock, then
 * merges it. A step removed through the mount in between (rm -r of its
 * directory, as a trainer's rotation does) must not come back when that
 * load merges: it did, with the other node's files, until the next refresh
 * forgot it again, and the rotation's check that the directory was gone
 * failed (integration.gc_daemons, 1 run in ~20). The load is held inside
 * its GET of node B's manifest while A removes the step. */
static void test_removed_step_not_merged_back(void)
{
    store_reset();
    char hold[PATH_MAX], reached[PATH_MAX + 16], spec[2 * PATH_MAX];
    snprintf(hold, sizeof hold, "%s/hold-load", vh_tmp);
    snprintf(reached, sizeof reached, "%s.reached", hold);
    snprintf(spec, sizeof spec, "get_hold=%s,get_hold_key=steps/%020d/nodes/node-b", hold, 5);
    vh_mount a, b;
    CHECK_OK(vh_mount_open_fault(&a, store, "node-a", "ghost-a", 1, spec));
    CHECK_OK(vh_mount_open(&b, store, "node-b", "ghost-b", 1));
    if (!a.v || !b.v)
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000005/rank-0.bin", "a5", VH_PID_A));
    CHECK_OK(vh_commit(&a, VH_JOB " 5 0 2\n"));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    FILE *f = fopen(hold, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    CHECK_OK(vh_write_str(&b, VH_JOB "/step-000005/rank-1.bin", "b5", VH_PID_B));
    CHECK_OK(vh_commit(&b, VH_JOB " 5 1 2\n"));
    CHECK(VH_WAIT(vh_consistent(store, 5), 10));
    /* A's refresher is inside its load of step 5 now. */
    CHECK(VH_WAIT(access(reached, F_OK) == 0, 10));
    CHECK_OK(vh_rmtree(&a, VH_JOB "/step-000005"));
    CHECK(!vh_exists(&a, VH_JOB "/step-000005"));
    CHECK(unlink(hold) == 0);
    /* The held load merges now; the step must not come back meanwhile. */
    CHECK(!VH_WAIT(vh_exists(&a, VH_JOB "/step-000005"), 1.5));
    /* Requested; kept in the store while it is the newest consistent step. */
    CHECK(strcmp(vh_deletion(&a, 5), "") != 0);
    vh_mount_close(&b);
    vh_mount_close(&a);
}

int main(void)
{
    if (vh_setup("vfs-remote"))
        return 1;
    RUN(test_durable_step_appears_on_another_node);
    RUN(test_partial_step_is_not_shown);
    RUN(test_newest_step_wins_a_path);
    RUN(test_rmdir_drops_files_added_after_the_listing);
    RUN(test_step_deleted_elsewhere_leaves_the_view);
    RUN(test_removed_step_not_merged_back);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
