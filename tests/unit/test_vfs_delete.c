/*
 * test_vfs_delete — deleting steps through the mount (store/mount/st_vfs_delete.c,
 * docs/MOUNT_MODEL.md "Deleting steps") through the C API: which rmdir and
 * unlink calls request a deletion; the request in the journal across a
 * restart; the executor on the uploader thread deleting every object of the
 * step; the job's newest durable step kept until a newer one is durable; a
 * request cancelled by writing the step again (tmp-checkpoint-N renamed onto
 * it); and a loose file of the deleted step moved to another step first.
 *
 * Which objects the store holds is read from the in-memory store itself
 * (jobs/<job>/steps/<step>/...), the request's state from the status file.
 */
#include "engine/st_gc.h"
#include "format/st_gcmark.h"
#include "vfs_harness.h"

static st_backend *store;

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

/* A started mount of node "a" that saved HF steps 100 and 200 (seed 1),
 * both durable. Returns 0 when all of it worked. */
static int two_durable_steps(vh_mount *m, const char *staging)
{
    store_reset();
    st_err e = vh_mount_open(m, store, "a", staging, 1);
    CHECK_OK(e);
    if (e)
        return -1;
    CHECK_OK(vh_hf_save(m, "checkpoint", 100, 1));
    CHECK_OK(vh_hf_save(m, "checkpoint", 200, 1));
    CHECK_OK(st_vfs_wait_idle(m->v, 20));
    int ok = vh_consistent(store, 100) && vh_consistent(store, 200);
    CHECK(ok);
    return ok ? 0 : -1;
}

/* ---- which removals request a deletion ---- */

static void test_what_requests_a_deletion(void)
{
    store_reset();
    vh_mount m;
    CHECK_OK(vh_mount_open(&m, store, "a", "what", 0));
    if (!m.v)
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-7/sub/x.bin", "x", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-7/y.bin", "y", VH_PID_A));
    /* A file inside a step directory, or a directory inside it: no request. */
    CHECK_OK(vh_unlink(&m, VH_JOB "/checkpoint-7/sub/x.bin"));
    CHECK_OK(vh_rmdir(&m, VH_JOB "/checkpoint-7/sub"));
    CHECK(strcmp(vh_deletion(&m, 7), "") == 0);
    /* A step directory that is not empty stays. */
    CHECK_ERR(vh_rmdir(&m, VH_JOB "/checkpoint-7"), ST_ERR_NOT_EMPTY);
    CHECK(strcmp(vh_deletion(&m, 7), "") == 0);
    /* The step directory itself: a request, and the step leaves the mount. */
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-7"));
    CHECK(strcmp(vh_deletion(&m, 7), "pending") == 0);
    CHECK(strcmp(vh_state(&m, 7), "") == 0);

    /* A step with two names goes with the last one. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-5/a.bin", "a", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-5.pt", "5", VH_PID_A));
    CHECK_OK(vh_rmtree(&m, VH_JOB "/step-5"));
    CHECK(strcmp(vh_deletion(&m, 5), "") == 0);
    CHECK(vh_file_is_str(&m, VH_JOB "/ckpt-5.pt", "5"));
    CHECK_OK(vh_unlink(&m, VH_JOB "/ckpt-5.pt"));
    CHECK(strcmp(vh_deletion(&m, 5), "pending") == 0);

    /* rmdir of a directory that is no step, or a rename over a single-file
     * step: no request. */
    CHECK_OK(vh_mkdirs(&m, VH_JOB "/logs"));
    CHECK_OK(vh_rmdir(&m, VH_JOB "/logs"));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-9.pt", "old", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-9.pt.tmp", "new", VH_PID_A));
    CHECK_OK(vh_rename(&m, VH_JOB "/ckpt-9.pt.tmp", VH_JOB "/ckpt-9.pt"));
    CHECK(strcmp(vh_deletion(&m, 9), "") == 0);
    CHECK(vh_file_is_str(&m, VH_JOB "/ckpt-9.pt", "new"));
    vh_mount_close(&m);
}

/* ---- request, then the executor ---- */

static void test_rotation_deletes_old_steps(void)
{
    vh_mount m;
    if (two_durable_steps(&m, "rotate"))
        return;
    uint64_t staged = vh_status_u64(&m, NULL, "staged_bytes");
    CHECK(vh_step_objects(store, 100) >= 2); /* a manifest and a part record */
    /* save_total_limit: shutil.rmtree(checkpoint-100). */
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-100"));
    CHECK(!vh_exists(&m, VH_JOB "/checkpoint-100"));
    CHECK(vh_status_u64(&m, NULL, "staged_bytes") < staged);
    CHECK(strcmp(vh_state(&m, 100), "") == 0);
    /* The executor deletes every object of the step, nothing else. */
    CHECK(VH_WAIT(vh_step_objects(store, 100) == 0, 20));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 100), "") == 0, 20));
    CHECK(vh_consistent(store, 200) && vh_latest(store) == 200);
    CHECK(strcmp(vh_ls(&m, VH_JOB), "checkpoint-200") == 0);
    const char *job = "{\"job\":\"" VH_JOB "\",\"deletions\"";
    CHECK(vh_status_u64(&m, job, "steps_deleted") == 1);
    CHECK(vh_status_u64(&m, job, "objects_deleted") >= 2);
    uint64_t freed = vh_status_u64(&m, job, "bytes_freed");
    CHECK(freed > 0 && freed != UINT64_MAX);
    /* Another node sees step 200 only. */
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "rotate-b", 0));
    if (b.v) {
        CHECK(strcmp(vh_ls(&b, VH_JOB), "checkpoint-200") == 0);
        CHECK(vh_hf_is(&b, "checkpoint", 200, 1));
        vh_mount_close(&b);
    }
    vh_mount_close(&m);
}

/* The request is in the journal when rmdir returns: a mount that stops
 * before the executor ran finds it at the next start and carries it out. */
static void test_request_survives_a_restart(void)
{
    vh_mount m;
    if (two_durable_steps(&m, "restart"))
        return;
    vh_mount_close(&m);
    CHECK_OK(vh_mount_open(&m, store, "a", "restart", 0)); /* no uploader: no executor */
    if (!m.v)
        return;
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-100"));
    CHECK(strcmp(vh_deletion(&m, 100), "pending") == 0);
    vh_mount_close(&m);
    CHECK(vh_step_objects(store, 100) >= 2 && vh_consistent(store, 100));
    /* Started again: the step stays hidden (the remote view does not load
     * it back from the store) and is deleted. */
    CHECK_OK(vh_mount_open(&m, store, "a", "restart", 1));
    if (!m.v)
        return;
    CHECK(!vh_exists(&m, VH_JOB "/checkpoint-100"));
    CHECK(VH_WAIT(vh_step_objects(store, 100) == 0, 20));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 100), "") == 0, 20));
    CHECK(!vh_exists(&m, VH_JOB "/checkpoint-100"));
    CHECK(vh_hf_is(&m, "checkpoint", 200, 1));
    vh_mount_close(&m);
}

/* ---- the newest durable step is kept ---- */

static void test_newest_durable_step_is_kept(void)
{
    vh_mount m;
    if (two_durable_steps(&m, "newest"))
        return;
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-200"));
    CHECK(!vh_exists(&m, VH_JOB "/checkpoint-200"));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 200), "kept_newest_durable") == 0, 20));
    /* Still whole in the store, and still the latest. */
    CHECK(vh_consistent(store, 200) && vh_latest(store) == 200);
    /* Step 100 is not the newest: it goes. */
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-100"));
    CHECK(VH_WAIT(vh_step_objects(store, 100) == 0, 20));
    CHECK(strcmp(vh_deletion(&m, 200), "kept_newest_durable") == 0);
    CHECK(vh_consistent(store, 200));
    /* Once a newer step is durable, the kept one goes at the next try. */
    CHECK_OK(vh_hf_save(&m, "checkpoint", 300, 1));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_consistent(store, 300));
    CHECK(VH_WAIT(vh_step_objects(store, 200) == 0, 20));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 200), "") == 0, 20));
    CHECK(vh_latest(store) == 300);
    CHECK(strcmp(vh_ls(&m, VH_JOB), "checkpoint-300") == 0);
    vh_mount_close(&m);
}

/* ---- a pinned step is kept ---- */

static void test_pinned_step_is_kept(void)
{
    vh_mount m;
    if (two_durable_steps(&m, "pinned"))
        return;
    char pin[ST_KEY_MAX];
    CHECK_OK(st_key_pin(pin, sizeof pin, VH_JOB, 100));
    CHECK_OK(st_put(store, pin, "", 0)); /* what ckptctl pin stores */
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-100"));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 100), "kept_pinned") == 0, 20));
    CHECK(!vh_exists(&m, VH_JOB "/checkpoint-100"));
    CHECK(vh_consistent(store, 100));
    CHECK_OK(st_del(store, pin)); /* ckptctl unpin: it goes at the next try */
    CHECK(VH_WAIT(vh_step_objects(store, 100) == 0, 20));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 100), "") == 0, 20));
    CHECK(vh_consistent(store, 200));
    vh_mount_close(&m);
}

/* ---- writing the step again cancels the request ---- */

static void test_writing_the_step_again_cancels(void)
{
    vh_mount m;
    if (two_durable_steps(&m, "cancel"))
        return;
    CHECK_OK(vh_rmtree(&m, VH_JOB "/checkpoint-200"));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 200), "kept_newest_durable") == 0, 20));
    /* A job resumed from step 100 saves 200 again, the newer-HF way. */
    CHECK_OK(vh_hf_save(&m, "tmp-checkpoint", 200, 7));
    CHECK(strcmp(vh_deletion(&m, 200), "kept_newest_durable") == 0);
    CHECK_OK(vh_rename(&m, VH_JOB "/tmp-checkpoint-200", VH_JOB "/checkpoint-200"));
    CHECK(strcmp(vh_deletion(&m, 200), "") == 0);
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(VH_WAIT(strcmp(vh_state(&m, 200), "durable") == 0, 20));
    CHECK(vh_part_revision(store, 200, "a") >= 2 && vh_consistent(store, 200));
    CHECK(vh_stored_is(store, 200,
                       "checkpoint-200/pytorch_model.bin,checkpoint-200/trainer_state.json"));
    CHECK(vh_consistent(store, 100));
    /* The old version of step 200 is gone for readers: the new one is read
     * here and on another node, byte for byte. */
    CHECK(vh_hf_is(&m, "checkpoint", 200, 7));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "cancel-b", 0));
    if (b.v) {
        CHECK(vh_hf_is(&b, "checkpoint", 200, 7));
        vh_mount_close(&b);
    }
    vh_mount_close(&m);
}

/* ---- a loose file of the step moves ---- */

static void test_loose_file_moves_to_another_step(void)
{
    store_reset();
    vh_mount m;
    CHECK_OK(vh_mount_open(&m, store, "a", "loose", 1));
    if (!m.v)
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000001.pt", "one", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/config.json", "{\"lr\": 0.1}", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_is(store, 1, "ckpt-000001.pt,config.json"));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000002.pt", "two", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000003.pt", "three", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_is(store, 3, "ckpt-000003.pt"));
    /* os.remove of the single-file step: config.json, still visible, is
     * stored with the newest other step before step 1 goes. */
    CHECK_OK(vh_unlink(&m, VH_JOB "/ckpt-000001.pt"));
    CHECK(VH_WAIT(vh_step_objects(store, 1) == 0, 20));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 1), "") == 0, 20));
    CHECK(vh_stored_is(store, 3, "ckpt-000003.pt,config.json"));
    CHECK(vh_consistent(store, 3) && vh_consistent(store, 2));
    CHECK(vh_file_is_str(&m, VH_JOB "/config.json", "{\"lr\": 0.1}"));
    CHECK(strcmp(vh_ls(&m, VH_JOB), "ckpt-000002.pt,ckpt-000003.pt,config.json") == 0);
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "loose-b", 0));
    if (b.v) {
        CHECK(vh_file_is_str(&b, VH_JOB "/config.json", "{\"lr\": 0.1}"));
        CHECK(strcmp(vh_ls(&b, VH_JOB), "ckpt-000002.pt,ckpt-000003.pt,config.json") == 0);
        vh_mount_close(&b);
    }
    vh_mount_close(&m);
}

/* The loose file's new home cannot be stored (the store refuses its PUTs):
 * the request waits in moving_files and the step stays, across a restart,
 * until the file is durable with another step. */
static void test_deletion_waits_for_the_moved_file(void)
{
    store_reset();
    vh_mount m;
    CHECK_OK(vh_mount_open(&m, store, "a", "moving", 1));
    if (!m.v)
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000001.pt", "one", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/config.json", "{}", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000002.pt", "two", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_is(store, 1, "ckpt-000001.pt,config.json"));
    vh_mount_close(&m);

    CHECK_OK(
        vh_mount_open_fault(&m, store, "a", "moving", 1, "fail_key=steps/00000000000000000002/"));
    if (!m.v)
        return;
    CHECK_OK(vh_unlink(&m, VH_JOB "/ckpt-000001.pt"));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 1), "moving_files") == 0, 20));
    CHECK(vh_consistent(store, 1));
    CHECK(vh_stored_is(store, 2, "ckpt-000002.pt"));
    CHECK(vh_file_is_str(&m, VH_JOB "/config.json", "{}"));
    vh_mount_close(&m);

    CHECK_OK(vh_mount_open(&m, store, "a", "moving", 1));
    if (!m.v)
        return;
    CHECK(!vh_exists(&m, VH_JOB "/ckpt-000001.pt"));
    CHECK(VH_WAIT(vh_step_objects(store, 1) == 0, 20));
    CHECK(VH_WAIT(strcmp(vh_deletion(&m, 1), "") == 0, 20));
    CHECK(vh_stored_is(store, 2, "ckpt-000002.pt,config.json"));
    CHECK(vh_file_is_str(&m, VH_JOB "/config.json", "{}"));
    vh_mount_close(&m);
}

int main(void)
{
    if (vh_setup("vfs-delete"))
        return 1;
    RUN(test_what_requests_a_deletion);
    RUN(test_rotation_deletes_old_steps);
    RUN(test_request_survives_a_restart);
    RUN(test_newest_durable_step_is_kept);
    RUN(test_pinned_step_is_kept);
    RUN(test_writing_the_step_again_cancels);
    RUN(test_loose_file_moves_to_another_step);
    RUN(test_deletion_waits_for_the_moved_file);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
