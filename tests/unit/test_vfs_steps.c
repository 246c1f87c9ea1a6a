/*
 * test_vfs_steps — the completion rules R1–R8 of docs/STEPS.md through the
 * mount model's C API: which writes make a step complete, which do not, and
 * what the store holds once the uploader took it.
 *
 * Most cases look at a mount opened without threads: a completion rule that
 * fires queues the step, so the status file says "queued", and a step that
 * no rule completed stays "writing"; nothing else (eager publishing of quiet
 * steps, uploads) can change that under the test. Cases that check the store
 * start the mount and wait for the uploader.
 *
 * R4 (a writer opening a file of a newer step completes its older steps)
 * applies to every case: a case writes its steps in an order where it does
 * not fire before the check that matters, or gives each step its own writer.
 */
#include "vfs_harness.h"

#include <sqlite3.h>

static st_backend *store;

/* A fresh store and a mount of node "a" on a fresh staging directory. */
static int mount_fresh(vh_mount *m, const char *staging, int start)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    if (!store)
        return -1;
    st_err e = vh_mount_open(m, store, "a", staging, start);
    CHECK_OK(e);
    if (e)
        return -1;
    CHECK_OK(vh_mkdirs(m, VH_JOB));
    return 0;
}

/* "queued": a rule fired (the unstarted mount queues the step). */
static int is_queued(vh_mount *m, uint64_t step)
{
    const char *s = vh_state(m, step);
    if (strcmp(s, "queued"))
        fprintf(stderr, "  step %" PRIu64 " is \"%s\", want \"queued\"\n", step, s);
    return !strcmp(s, "queued");
}

static int is_writing(vh_mount *m, uint64_t step)
{
    const char *s = vh_state(m, step);
    if (strcmp(s, "writing"))
        fprintf(stderr, "  step %" PRIu64 " is \"%s\", want \"writing\"\n", step, s);
    return !strcmp(s, "writing");
}

/* A file that looks like a whole torch.save ZIP: a local header, then the
 * end-of-central-directory record reaching exactly the end. */
static size_t whole_zip(uint8_t *buf, size_t len)
{
    ut_rand_fill(buf, len, 77);
    memcpy(buf, "PK\x03\x04", 4);
    uint8_t *eocd = buf + len - 22;
    memset(eocd, 0, 22);
    memcpy(eocd, "PK\x05\x06", 4); /* comment length 0: ends right here */
    return len;
}

/* ---- R1: a marker in the step directory ---- */

static void test_r1_markers(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r1", 0))
        return;
    /* PyTorch DCP: shards, then rank 0 renames .metadata.tmp to .metadata. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-000100/__0_0.distcp", "shard", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-000100/.metadata.tmp", "__0_0.distcp", VH_PID_A));
    CHECK(is_writing(&m, 100));
    CHECK_OK(vh_rename(&m, VH_JOB "/step-000100/.metadata.tmp", VH_JOB "/step-000100/.metadata"));
    CHECK(is_queued(&m, 100));

    /* HF Trainer with FSDP: a .metadata in a sub-directory is not the
     * marker; trainer_state.json is. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-500/pytorch_model_fsdp_0/__0_0.distcp", "s",
                          VH_PID_A));
    CHECK_OK(
        vh_write_str(&m, VH_JOB "/checkpoint-500/pytorch_model_fsdp_0/.metadata", "m", VH_PID_A));
    CHECK(is_writing(&m, 500));
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-500/trainer_state.json", "{}", VH_PID_A));
    CHECK(is_queued(&m, 500));

    /* The explicit marker, empty, below a parent directory. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoints/step-7/model.pt", "w", VH_PID_A));
    CHECK(is_writing(&m, 7));
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoints/step-7/.ckpt-complete", "", VH_PID_A));
    CHECK(is_queued(&m, 7));

    /* A marker still open for writing completes nothing yet. */
    st_vfs_handle *h;
    CHECK_OK(vh_create(&m, VH_JOB "/step-8/.ckpt-complete", O_WRONLY, VH_PID_A, &h));
    CHECK(is_writing(&m, 8));
    if (h)
        CHECK_OK(vh_close(&m, h));
    CHECK(is_queued(&m, 8));
    vh_mount_close(&m);

    /* The same staging, started: the queued steps are stored, complete. */
    CHECK_OK(vh_mount_open(&m, store, "a", "r1", 1));
    if (!m.v)
        return;
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_part_complete(store, 100, "a") && vh_consistent(store, 100));
    CHECK(vh_part_complete(store, 500, "a") && vh_part_complete(store, 7, "a"));
    CHECK(vh_stored_is(store, 100, "step-000100/.metadata,step-000100/__0_0.distcp"));
    vh_mount_close(&m);
}

/* ---- R2: a marker that names its step ---- */

static void test_r2_naming_markers(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r2", 0))
        return;
    /* DeepSpeed: global_stepN/, then `latest` naming it. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step100/mp_rank_00_model_states.pt", "w", VH_PID_A));
    CHECK(is_writing(&m, 100));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step100\n", VH_PID_A));
    CHECK(is_queued(&m, 100));

    /* Megatron: iter_N/, then the tracker with the number. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/iter_0000200/mp_rank_00/model_optim_rng.pt", "w", VH_PID_A));
    CHECK(is_writing(&m, 200));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest_checkpointed_iteration.txt", " 200 \n", VH_PID_A));
    CHECK(is_queued(&m, 200));

    /* "release" names no step: an ordinary loose file, completes nothing. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/iter_0000300/mp_rank_00/model_optim_rng.pt", "w", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest_checkpointed_iteration.txt", "release", VH_PID_A));
    CHECK(is_writing(&m, 300));

    /* Inside a step directory `latest` is an ordinary file (HF + DeepSpeed
     * writes checkpoint-600/latest before the rest). */
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-600/global_step600/x.pt", "w", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-600/latest", "global_step600", VH_PID_A));
    CHECK(is_writing(&m, 600));
    vh_mount_close(&m);

    /* The marker is stored with the step it names. */
    if (mount_fresh(&m, "r2-store", 1))
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step10/zero_pp_rank_0_states.pt", "z", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step10", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_part_complete(store, 10, "a"));
    CHECK(vh_stored_is(store, 10, "global_step10/zero_pp_rank_0_states.pt,latest"));
    vh_mount_close(&m);
}

/* An upload held between its snapshot and its reads: every GET of its own
 * part record of `step` waits while file `hold` exists, and first creates
 * `reached` (the fault spec get_hold). */
typedef struct held_upload {
    char hold[PATH_MAX];
    char reached[PATH_MAX + 16];
} held_upload;

/* A fresh store and a started mount of node "a" on staging directory name
 * (pool of recycled files: `pool` bytes) whose upload of step will be held,
 * with VH_JOB made. */
static int mount_holding(vh_mount *m, const char *name, uint64_t pool, uint64_t step,
                         held_upload *hu)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    char spec[2 * PATH_MAX + 64];
    snprintf(hu->hold, sizeof hu->hold, "%s/hold-%s", vh_tmp, name);
    snprintf(hu->reached, sizeof hu->reached, "%s.reached", hu->hold);
    snprintf(spec, sizeof spec, "get_hold=%s,get_hold_key=steps/%020" PRIu64 "/nodes/a.commit",
             hu->hold, step);
    FILE *f = fopen(hu->hold, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    vh_staging_spare = pool;
    st_err e = vh_mount_open_fault(m, store, "a", name, 1, spec);
    vh_staging_spare = 0;
    CHECK_OK(e);
    if (e)
        return -1;
    CHECK_OK(vh_mkdirs(m, VH_JOB));
    return 0;
}

/* 1 once the held upload has its snapshot and waits. */
static int upload_held(const held_upload *hu)
{
    return VH_WAIT(access(hu->reached, F_OK) == 0, 10);
}

static void upload_release(const held_upload *hu)
{
    CHECK(unlink(hu->hold) == 0);
}

/*
 * R2 with the named step not yet stored: the trainer replaces `latest` for
 * step 3 while step 2 still waits for its upload. Step 2 must still store
 * the `latest` that named it, else a fresh node that resumes at step 2 (step
 * 3 incomplete on another node) finds no marker, or one naming a step it
 * cannot load (integration.multinode failed on it in CI).
 *
 * How the marker is replaced, and when:
 *  - rewritten in place (open with O_TRUNC, DeepSpeed and Megatron) after
 *    step 2's upload took its snapshot and before it read the file: the
 *    rewrite used to truncate the staging file the upload was about to
 *    read, so step 2 stored "global_step3" (or nothing);
 *  - replaced by a rename (`latest.tmp` -> `latest`, an atomic writer) at
 *    the same point: the upload found its file gone and, retried, no longer
 *    had step 2's version;
 *  - removed, then written again, at the same point: the same;
 *  - rewritten in place while step 2 waits in the queue behind step 1 (the
 *    upload that is held): step 2's snapshot never saw its own version.
 * Held with a GET the upload makes between its snapshot and its reads: its
 * own part record. Each run with the pool of recycled files off and on: the
 * old version must outlive the upload whatever the pool's limits.
 */
typedef enum marker_change {
    REWRITTEN,
    RENAMED_OVER,
    REMOVED_THEN_WRITTEN,
    REWRITTEN_WHILE_QUEUED
} marker_change;

static void marker_replaced_before_its_step_is_stored(marker_change how, uint64_t pool)
{
    static const char *const hows[] = {"rewritten", "renamed-over", "removed-then-written",
                                       "rewritten-queued"};
    char name[64];
    snprintf(name, sizeof name, "r2-%s-%" PRIu64, hows[how], pool);
    vh_mount m;
    held_upload hu;
    if (mount_holding(&m, name, pool, how == REWRITTEN_WHILE_QUEUED ? 1 : 2, &hu))
        return;
    if (how == REWRITTEN_WHILE_QUEUED) {
        CHECK_OK(vh_write_str(&m, VH_JOB "/global_step1/zero_pp_rank_0_states.pt", "z1", VH_PID_A));
        CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step1", VH_PID_A));
        CHECK(upload_held(&hu));
    }
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step2/zero_pp_rank_0_states.pt", "z2", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step2", VH_PID_A));
    if (how != REWRITTEN_WHILE_QUEUED)
        CHECK(upload_held(&hu));
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step3/zero_pp_rank_0_states.pt", "z3", VH_PID_A));
    if (how == RENAMED_OVER) {
        CHECK_OK(vh_write_str(&m, VH_JOB "/latest.tmp", "global_step3", VH_PID_A));
        CHECK_OK(vh_rename(&m, VH_JOB "/latest.tmp", VH_JOB "/latest"));
    } else if (how == REMOVED_THEN_WRITTEN) {
        CHECK_OK(vh_unlink(&m, VH_JOB "/latest"));
        CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step3", VH_PID_A));
    } else {
        CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step3", VH_PID_A));
    }
    upload_release(&hu);
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    if (how == REWRITTEN_WHILE_QUEUED)
        CHECK(vh_stored_content_is(store, 1, "latest", "global_step1"));
    CHECK(vh_stored_content_is(store, 2, "latest", "global_step2"));
    CHECK(vh_stored_content_is(store, 3, "latest", "global_step3"));
    CHECK(vh_file_is_str(&m, VH_JOB "/latest", "global_step3"));
    CHECK(!vh_exists(&m, VH_JOB "/latest.tmp"));
    vh_mount_close(&m);
}

static void test_r2_marker_replaced_before_its_step_is_stored(void)
{
    static const uint64_t pools[] = {0, 64u << 20};
    for (int how = REWRITTEN; how <= REWRITTEN_WHILE_QUEUED; how++)
        for (size_t p = 0; p < sizeof pools / sizeof *pools; p++)
            marker_replaced_before_its_step_is_stored((marker_change)how, pools[p]);
}

/* A mount of node "a" over store on staging directory name, with fault spec
 * fault (NULL: none), started. */
static int reopen(vh_mount *m, const char *name, const char *fault)
{
    st_err e = vh_mount_open_fault(m, store, "a", name, 1, fault);
    CHECK_OK(e);
    return e ? -1 : 0;
}

/* 1 if m's status file holds text. */
/* A fresh store and a started mount of node "a" on staging directory name
 * that cannot publish anything (every PUT of its node's keys fails), with
 * step 2 written and completed by a `latest` naming it. */
static int step2_unpublished(vh_mount *m, const char *name)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
    if (reopen(m, name, "fail_key=nodes/a"))
        return -1;
    CHECK_OK(vh_mkdirs(m, VH_JOB));
    CHECK_OK(vh_write_str(m, VH_JOB "/global_step2/zero_pp_rank_0_states.pt", "z2", VH_PID_A));
    CHECK_OK(vh_write_str(m, VH_JOB "/latest", "global_step2", VH_PID_A));
    return 0;
}

/*
 * The kept version of step 2's `latest` outlives uploads that fail and a
 * restart: every PUT of the node's keys is refused (its lease, its part
 * records), the trainer moves `latest` on to step 3 by a rename once an
 * upload of step 2 has failed, the daemon stops; the next one recovers the
 * kept version from the journal and stores step 2 with it.
 * Once stored, its staging file is gone (nothing leaks).
 */
static void test_r2_kept_marker_survives_failures_and_a_restart(void)
{
    vh_mount m;
    if (step2_unpublished(&m, "r2-kept-restart"))
        return;
    /* its upload took a snapshot and failed (it retries with a backoff) */
    CHECK(VH_WAIT(vh_status_has(&m, "\"last_error\":\"uploading step 2 of job"), 10));
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step3/zero_pp_rank_0_states.pt", "z3", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest.tmp", "global_step3", VH_PID_A));
    CHECK_OK(vh_rename(&m, VH_JOB "/latest.tmp", VH_JOB "/latest"));
    vh_mount_close(&m); /* drains for 1 s against the failing store */
    CHECK(!vh_part_complete(store, 2, "a"));

    if (reopen(&m, "r2-kept-restart", NULL))
        return;
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_content_is(store, 2, "latest", "global_step2"));
    CHECK(vh_stored_content_is(store, 3, "latest", "global_step3"));
    CHECK(vh_file_is_str(&m, VH_JOB "/latest", "global_step3"));
    CHECK(vh_staging_files(&m) == 3); /* the two shards and `latest`: the kept copy went */
    vh_mount_close(&m);
}

/*
 * Step 2 deleted through the mount before it was stored, with a version of
 * its `latest` kept for it: the kept version goes with the step, now and
 * after a restart (its staging file and its journal row).
 */
static void test_r2_kept_marker_goes_with_its_deleted_step(void)
{
    vh_mount m;
    if (step2_unpublished(&m, "r2-kept-deleted"))
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step3/zero_pp_rank_0_states.pt", "z3", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step3", VH_PID_A));
    CHECK(vh_staging_files(&m) == 4); /* two shards, `latest`, step 2's kept `latest` */
    CHECK_OK(vh_rmtree(&m, VH_JOB "/global_step2"));
    /* (once no upload may read it: the failing one ends its try) */
    CHECK(VH_WAIT(vh_staging_files(&m) == 2, 10));
    vh_mount_close(&m);
    if (reopen(&m, "r2-kept-deleted", NULL))
        return;
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_content_is(store, 3, "latest", "global_step3"));
    CHECK(!vh_part_complete(store, 2, "a"));
    CHECK(vh_staging_files(&m) == 2);
    vh_mount_close(&m);
}

/*
 * A crash after a kept row was written and before the live file changed
 * leaves both naming one staging file (the rewrite never happened). Made by
 * hand here: the kept row is added to the journal of a stopped mount whose
 * `latest` still names step 2. Recovery must drop the kept row, not take
 * the live file's staging file: it would be unlinked once the upload found
 * the live file superseding it.
 */
static void test_r2_kept_row_of_a_crash_before_the_rewrite(void)
{
    vh_mount m;
    if (step2_unpublished(&m, "r2-kept-crash"))
        return;
    vh_mount_close(&m);

    char db_path[PATH_MAX + 32];
    snprintf(db_path, sizeof db_path, "%s/r2-kept-crash/journal.db", vh_tmp);
    sqlite3 *db = NULL;
    CHECK(sqlite3_open(db_path, &db) == SQLITE_OK);
    char *err = NULL;
    CHECK(sqlite3_exec(db,
                       "INSERT INTO kept SELECT job, 2, path, sid, size, mode, mtime_ns"
                       " FROM entries WHERE path = 'latest'",
                       NULL, NULL, &err) == SQLITE_OK);
    CHECK(sqlite3_changes(db) == 1);
    sqlite3_free(err);
    sqlite3_close(db);

    if (reopen(&m, "r2-kept-crash", NULL))
        return;
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_file_is_str(&m, VH_JOB "/latest", "global_step2"));
    CHECK(vh_stored_content_is(store, 2, "latest", "global_step2"));
    CHECK(vh_staging_files(&m) == 2);
    vh_mount_close(&m);
    /* and again: the local copy is still there after a restart */
    if (reopen(&m, "r2-kept-crash", NULL))
        return;
    CHECK(vh_file_is_str(&m, VH_JOB "/latest", "global_step2"));
    CHECK(vh_staging_files(&m) == 2);
    vh_mount_close(&m);
}

/* ---- R3: a single-file step ---- */

static void test_r3_single_file(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r3", 0))
        return;
    uint8_t buf[4096];
    /* Not a format we know: complete when closed. */
    st_vfs_handle *h;
    CHECK_OK(vh_create(&m, VH_JOB "/ckpt-000010.pt", O_WRONLY, VH_PID_A, &h));
    if (h) {
        ut_rand_fill(buf, sizeof buf, 10);
        CHECK_OK(vh_pwrite(&m, h, buf, sizeof buf, 0));
        CHECK(is_writing(&m, 10));
        CHECK_OK(vh_close(&m, h));
    }
    CHECK(is_queued(&m, 10));

    /* torch.save killed midway: a ZIP without its end record stays
     * incomplete; a whole one completes. */
    whole_zip(buf, sizeof buf);
    CHECK_OK(vh_write(&m, VH_JOB "/ckpt-000011.pt", buf, sizeof buf / 2, VH_PID_A));
    CHECK(is_writing(&m, 11));
    CHECK_OK(vh_write(&m, VH_JOB "/ckpt-000012.pt", buf, sizeof buf, VH_PID_A));
    CHECK(is_queued(&m, 12));

    /* Another file of the step still open for writing holds it back. */
    CHECK_OK(vh_create(&m, VH_JOB "/ckpt-000013.pt.tmp", O_WRONLY, VH_PID_A, &h));
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000013.pt", "thirteen", VH_PID_A));
    CHECK(is_writing(&m, 13));
    if (h)
        CHECK_OK(vh_close(&m, h));
    CHECK(is_queued(&m, 13));
    vh_mount_close(&m);
}

/* ---- R4: the writer moves on ---- */

static void test_r4_writer_moves_on(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r4", 0))
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-1/a.bin", "a1", VH_PID_A));
    CHECK(is_writing(&m, 1));
    /* Another process moving to step 2 says nothing about A's step 1. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-2/b.bin", "b2", VH_PID_B));
    CHECK(is_writing(&m, 1));
    /* A opening a file of a newer step: step 1 is complete. */
    st_vfs_handle *h;
    CHECK_OK(vh_create(&m, VH_JOB "/step-2/a.bin", O_WRONLY, VH_PID_A, &h));
    CHECK(is_queued(&m, 1));
    CHECK(is_writing(&m, 2));
    if (h)
        CHECK_OK(vh_close(&m, h));
    CHECK(is_writing(&m, 2));
    /* Moving on to step 3 completes step 2, which A wrote too. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-3/a.bin", "a3", VH_PID_A));
    CHECK(is_queued(&m, 2));
    CHECK(is_writing(&m, 3));
    vh_mount_close(&m);
}

/*
 * R4 when a file of S is still open as its writer moves on: S completes
 * "once nothing of S is open for writing", at the later close of that file
 * (the mount used to check only at the open of the newer step's file).
 */
static void test_r4_completes_when_the_last_file_of_s_closes(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r4-late", 0))
        return;
    st_vfs_handle *old, *next;
    CHECK_OK(vh_create(&m, VH_JOB "/step-3/a.bin", O_WRONLY, VH_PID_A, &old));
    CHECK_OK(vh_create(&m, VH_JOB "/step-4/a.bin", O_WRONLY, VH_PID_A, &next));
    CHECK(is_writing(&m, 3));
    if (old)
        CHECK_OK(vh_close(&m, old));
    CHECK(is_queued(&m, 3));
    if (next)
        CHECK_OK(vh_close(&m, next));
    vh_mount_close(&m);
}

/* ---- R5: a change after completion ---- */

static void test_r5_change_after_completion(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r5", 1))
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000020.pt", "first version", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-21/model.bin", "m", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-21/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_part_revision(store, 20, "a") == 1 && vh_part_revision(store, 21, "a") == 1);
    CHECK(strcmp(vh_state(&m, 20), "durable") == 0);

    /* Written again, and a new file in a complete step: each stored again,
     * complete, as a new revision that replaces the old. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000020.pt", "second version", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-21/extra.bin", "late", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_part_revision(store, 20, "a") == 2 && vh_part_complete(store, 20, "a"));
    CHECK(vh_part_revision(store, 21, "a") == 2 && vh_part_complete(store, 21, "a"));
    CHECK(vh_stored_is(store, 21, "step-21/.ckpt-complete,step-21/extra.bin,step-21/model.bin"));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "r5-b", 0));
    if (b.v) {
        CHECK(vh_file_is_str(&b, VH_JOB "/ckpt-000020.pt", "second version"));
        CHECK(vh_file_is_str(&b, VH_JOB "/step-21/extra.bin", "late"));
        vh_mount_close(&b);
    }
    vh_mount_close(&m);
}

/*
 * R5 with the step still uploading: a writer opens a file of step 2 with
 * r+ after the upload took its snapshot, rewrites half of it and keeps it
 * open while the upload reads it. The upload must not publish that
 * half-written version (no close() ended it); the step is published once
 * the writer closes. Held with a GET the upload makes between its snapshot
 * and its reads (its own part record).
 */
static void test_r5_rewritten_in_place_while_its_step_uploads(void)
{
    static const char old_text[] = "old-old-old-old!", new_text[] = "new-new-new-new!";
    const char *file = VH_JOB "/global_step2/zero_pp_rank_0_states.pt";
    vh_mount m;
    held_upload hu;
    if (mount_holding(&m, "r5-in-place", 0, 2, &hu))
        return;
    CHECK_OK(vh_write_str(&m, file, old_text, VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step2", VH_PID_A));
    CHECK(upload_held(&hu));
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&m, file, O_RDWR, VH_PID_A, &h));
    if (h)
        CHECK_OK(vh_pwrite(&m, h, new_text, 8, 0));
    upload_release(&hu);
    /* The upload read the file and ended; the step waits for the writer. */
    CHECK(VH_WAIT(!strcmp(vh_state(&m, 2), "complete"), 20));
    st_bytes got = {0};
    vh_stored_content(store, 2, "global_step2/zero_pp_rank_0_states.pt", &got);
    int half = got.len == 16 && !memcmp(got.data, "new-new-old-old!", 16);
    if (half)
        fprintf(stderr, "  step 2 was published with the half-written version\n");
    CHECK(!half);
    CHECK(got.len == 0 || (got.len == 16 && !memcmp(got.data, old_text, 16)));
    st_bytes_free(&got);
    if (h) {
        CHECK_OK(vh_pwrite(&m, h, new_text + 8, 8, 8));
        CHECK_OK(vh_close(&m, h));
    }
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_content_is(store, 2, "global_step2/zero_pp_rank_0_states.pt", new_text));
    CHECK(vh_stored_content_is(store, 2, "latest", "global_step2"));
    vh_mount_close(&m);
}

static uint64_t upload_failures(vh_mount *m)
{
    st_vfs_stats s;
    uint64_t n = st_vfs_get_stats(m->v, &s) ? UINT64_MAX : s.upload_failures;
    st_vfs_stats_free(&s);
    return n;
}

/*
 * A file of step 2 removed, or replaced by a rename, while step 2 uploads
 * (after its snapshot, before its reads): the upload used to fail opening
 * the staging file ("open staged ...: No such file"), count a failure, set
 * last_error and back off. The step is published again at once instead,
 * without the removed file and with the replacement.
 */
static void test_r5_file_removed_while_its_step_uploads(void)
{
    vh_mount m;
    held_upload hu;
    if (mount_holding(&m, "r5-removed", 0, 2, &hu))
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step2/a.pt", "a", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step2/b.pt", "b", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step2/c.pt", "c", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/latest", "global_step2", VH_PID_A));
    CHECK(upload_held(&hu));
    CHECK_OK(vh_unlink(&m, VH_JOB "/global_step2/b.pt"));
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step2/c.pt.tmp", "c, again", VH_PID_A));
    CHECK_OK(vh_rename(&m, VH_JOB "/global_step2/c.pt.tmp", VH_JOB "/global_step2/c.pt"));
    upload_release(&hu);
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_is(store, 2, "global_step2/a.pt,global_step2/c.pt,latest"));
    CHECK(vh_stored_content_is(store, 2, "global_step2/c.pt", "c, again"));
    CHECK(upload_failures(&m) == 0);
    vh_mount_close(&m);
}

/* ---- R6: files outside any step ---- */

static void test_r6_loose_files(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r6", 1))
        return;
    /* Before any step: it waits, and joins the first step. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/config.json", "{\"lr\": 0.1}", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_count(store, "jobs/") == 0);
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000030.pt", "thirty", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_is(store, 30, "ckpt-000030.pt,config.json"));

    /* After: it belongs to the newest step, which is stored again (R5). */
    CHECK_OK(vh_write_str(&m, VH_JOB "/notes.txt", "n", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_part_revision(store, 30, "a") == 2);
    CHECK(vh_stored_is(store, 30, "ckpt-000030.pt,config.json,notes.txt"));
    /* A loose file completes nothing by itself. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-31/part.bin", "p", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/zero_to_fp32.py", "py", VH_PID_A));
    CHECK(strcmp(vh_state(&m, 31), "writing") == 0);
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-31/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_stored_is(store, 31, "step-31/.ckpt-complete,step-31/part.bin,zero_to_fp32.py"));
    CHECK(vh_part_revision(store, 30, "a") == 2);
    vh_mount_close(&m);
}

/* ---- R7: explicit commit ---- */

static void test_r7_explicit_commit(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r7", 1))
        return;
    /* A layout no rule completes, committed by both ranks of a world of 2. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/run-40/rank0.bin", "r0", VH_PID_A));
    CHECK_OK(vh_write_str(&m, VH_JOB "/run-40/rank1.bin", "r1", VH_PID_B));
    CHECK_ERR(vh_commit(&m, VH_JOB " 40 0 2\n" VH_JOB " 40 5 2\n"), ST_ERR_INVALID);
    CHECK_ERR(vh_commit(&m, "nosuchjob 40 0 2\n"), ST_ERR_NOT_FOUND);
    CHECK_OK(vh_commit(&m, VH_JOB " 40 0 2\n"));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    st_part p;
    CHECK_OK(vh_part(store, 40, "a", &p));
    CHECK(p.ncommits == 1 && p.commits[0].rank == 0 && p.commits[0].world_size == 2);
    st_part_free(&p);
    CHECK(!vh_consistent(store, 40)); /* rule 1: rank 1 has not committed */
    CHECK_OK(vh_commit(&m, VH_JOB " 40 1 2\n"));
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK_OK(vh_part(store, 40, "a", &p));
    CHECK(p.ncommits == 2);
    st_part_free(&p);
    CHECK(vh_consistent(store, 40));
    CHECK(vh_stored_is(store, 40, "run-40/rank0.bin,run-40/rank1.bin"));

    /* st_vfs_complete_all without at_unmount (ckptctl commit's path for a
     * whole job) completes what R8 would leave, e.g. a checkpoint-N/ without
     * trainer_state.json. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-41/pytorch_model.bin", "w", VH_PID_A));
    st_vfs_complete_all(m.v, VH_JOB, 0);
    CHECK_OK(st_vfs_wait_idle(m.v, 20));
    CHECK(vh_part_complete(store, 41, "a") && vh_consistent(store, 41));
    vh_mount_close(&m);
}

/* ---- R8: clean unmount ---- */

/* A writer process of its own for step. */
static pid_t writer(uint64_t step)
{
    return VH_PID_A + 100 + (pid_t)step;
}

static void test_r8_clean_unmount(void)
{
    vh_mount m;
    if (mount_fresh(&m, "r8", 0))
        return;
    uint8_t zip[4096];
    whole_zip(zip, sizeof zip);
    /* One writer per step, so that R4 completes none of them. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-50/a.bin", "plain", writer(50)));
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-51/__0_0.distcp", "no .metadata", writer(51)));
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-52/pytorch_model.bin", "no state", writer(52)));
    CHECK_OK(vh_write_str(&m, VH_JOB "/global_step53/mp_rank_00.pt", "no latest", writer(53)));
    CHECK_OK(vh_write_str(&m, VH_JOB "/iter_0000054/mp_rank_00/m.pt", "no tracker", writer(54)));
    CHECK_OK(vh_write(&m, VH_JOB "/ckpt-000055.pt", zip, sizeof zip - 1, writer(55)));
    st_vfs_handle *h;
    CHECK_OK(vh_create(&m, VH_JOB "/step-56/open.bin", O_WRONLY, VH_PID_B, &h));
    st_vfs_complete_all(m.v, NULL, 1);
    CHECK(is_queued(&m, 50));
    for (uint64_t s = 51; s <= 56; s++)
        CHECK(is_writing(&m, s));
    if (h)
        CHECK_OK(vh_close(&m, h));
    vh_mount_close(&m);

    /* The real unmount of a started mount completes and drains. */
    if (mount_fresh(&m, "r8-unmount", 1))
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/step-57/a.bin", "plain", writer(57)));
    CHECK_OK(vh_write_str(&m, VH_JOB "/checkpoint-58/pytorch_model.bin", "no state", writer(58)));
    CHECK(strcmp(vh_state(&m, 57), "writing") == 0);
    vh_mount_close(&m);
    CHECK(vh_part_complete(store, 57, "a") && vh_consistent(store, 57));
    CHECK(!vh_part_complete(store, 58, "a") && !vh_consistent(store, 58));
}

int main(void)
{
    if (vh_setup("vfs-steps"))
        return 1;
    RUN(test_r1_markers);
    RUN(test_r2_naming_markers);
    RUN(test_r3_single_file);
    RUN(test_r4_writer_moves_on);
    RUN(test_r4_completes_when_the_last_file_of_s_closes);
    RUN(test_r2_marker_replaced_before_its_step_is_stored);
    RUN(test_r2_kept_marker_survives_failures_and_a_restart);
    RUN(test_r2_kept_row_of_a_crash_before_the_rewrite);
    RUN(test_r2_kept_marker_goes_with_its_deleted_step);
    RUN(test_r5_change_after_completion);
    RUN(test_r5_rewritten_in_place_while_its_step_uploads);
    RUN(test_r5_file_removed_while_its_step_uploads);
    RUN(test_r6_loose_files);
    RUN(test_r7_explicit_commit);
    RUN(test_r8_clean_unmount);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
