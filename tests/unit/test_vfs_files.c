/*
 * test_vfs_files — the mount model's files through its C API, no FUSE
 * (vfs_harness.h drives it as fs/ckptfs.c does): create, write, read back;
 * the POSIX operations trainers use (pwrite with holes, overwrite in place,
 * truncate, chmod, O_EXCL, errors); a crash of the daemon after close()
 * returned and in the middle of an upload, recovered from the journal; and
 * renames (HF Trainer's tmp-checkpoint-N → checkpoint-N, over an existing
 * file, the refusals); owners of entries.
 *
 * The crashes are real: a child process mounts the staging directory, writes,
 * and dies with _exit() without closing anything (no journal close, no
 * drain, handles left open). Its store is its own memory and dies with it,
 * as if no PUT had reached the store; the parent then mounts the same
 * staging directory over a fresh store.
 */
#include "vfs_harness.h"

static st_backend *store; /* a fresh store per case */

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

/* ---- create, write, read ---- */

static void test_create_write_read(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "files-a", 1));
    if (!a.v)
        return;
    CHECK_OK(vh_mkdirs(&a, VH_JOB));
    CHECK(strcmp(vh_ls(&a, ""), ".ckptfs," VH_JOB) == 0);

    /* A plain whole-file write, in several write(2)s. */
    size_t n = (3u << 20) + 12345;
    uint8_t *data = vh_data(n, 1);
    CHECK_OK(vh_write(&a, VH_JOB "/step-000001/model.bin", data, n, VH_PID_A));
    CHECK(vh_file_is(&a, VH_JOB "/step-000001/model.bin", data, n));
    st_vfs_attr at;
    CHECK_OK(vh_lookup(&a, VH_JOB "/step-000001/model.bin", &at));
    CHECK(at.size == n && S_ISREG(at.mode));

    /* pwrite at scattered offsets leaves holes that read as zeros. */
    uint8_t *ref = calloc(1, 300000);
    st_vfs_handle *h;
    CHECK_OK(vh_create(&a, VH_JOB "/step-000001/random.bin", O_RDWR, VH_PID_A, &h));
    static const size_t offs[] = {250000, 0, 100000, 240000};
    for (size_t i = 0; h && i < sizeof offs / sizeof offs[0]; i++) {
        CHECK_OK(vh_pwrite(&a, h, data + i * 7, 20000, offs[i]));
        memcpy(ref + offs[i], data + i * 7, 20000);
    }
    if (h)
        CHECK_OK(vh_close(&a, h));
    CHECK(vh_file_is(&a, VH_JOB "/step-000001/random.bin", ref, 270000));

    /* Overwrite in place (open without O_TRUNC). */
    CHECK_OK(vh_lookup(&a, VH_JOB "/step-000001/random.bin", &at));
    CHECK_OK(st_vfs_open_file(a.v, at.ino, O_RDWR, VH_PID_A, &h));
    memset(ref + 1000, 'X', 7000);
    if (h) {
        CHECK_OK(vh_pwrite(&a, h, ref + 1000, 7000, 1000));
        CHECK_OK(vh_close(&a, h));
    }
    CHECK(vh_file_is(&a, VH_JOB "/step-000001/random.bin", ref, 270000));

    /* Truncate down, then up: the tail reads as zeros. */
    CHECK_OK(st_vfs_setattr(a.v, at.ino, ST_VFS_SET_SIZE, 0, 12345, 0, 0, NULL, &at));
    CHECK(at.size == 12345);
    CHECK_OK(st_vfs_setattr(a.v, at.ino, ST_VFS_SET_SIZE, 0, 20000, 0, 0, NULL, &at));
    memset(ref + 12345, 0, 20000 - 12345);
    CHECK(vh_file_is(&a, VH_JOB "/step-000001/random.bin", ref, 20000));

    /* chmod sticks. */
    CHECK_OK(st_vfs_setattr(a.v, at.ino, ST_VFS_SET_MODE, 0600, 0, 0, 0, NULL, &at));
    CHECK_OK(st_vfs_getattr(a.v, at.ino, &at));
    CHECK((at.mode & 07777) == 0600);

    /* O_TRUNC of an existing file empties it. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/model.bin", "short", VH_PID_A));
    CHECK(vh_file_is_str(&a, VH_JOB "/step-000001/model.bin", "short"));

    /* Unlink and rmdir of ordinary entries. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/sub/gone.bin", "x", VH_PID_A));
    CHECK_OK(vh_unlink(&a, VH_JOB "/step-000001/sub/gone.bin"));
    CHECK(!vh_exists(&a, VH_JOB "/step-000001/sub/gone.bin"));
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/step-000001/emptydir"));
    CHECK_OK(vh_rmdir(&a, VH_JOB "/step-000001/emptydir"));
    CHECK(strcmp(vh_ls(&a, VH_JOB "/step-000001"), "model.bin,random.bin,sub") == 0);

    /* Completing the step stores exactly these files, byte for byte: a new
     * node with an empty staging disk reads them back from the store. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_complete(a.b, 1, "a"));
    CHECK(vh_stored_is(store, 1,
                       "step-000001/.ckpt-complete,step-000001/model.bin,step-000001/random.bin"));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "files-b", 1));
    if (b.v) {
        CHECK(vh_file_is_str(&b, VH_JOB "/step-000001/model.bin", "short"));
        CHECK(vh_file_is(&b, VH_JOB "/step-000001/random.bin", ref, 20000));
        CHECK_OK(vh_lookup(&b, VH_JOB "/step-000001/random.bin", &at));
        CHECK((at.mode & 07777) == 0600);
        vh_mount_close(&b);
    }

    /* A clean unmount and a remount on the same staging keep everything. */
    vh_mount_close(&a);
    CHECK_OK(vh_mount_open(&a, store, "a", "files-a", 0));
    if (a.v) {
        CHECK(vh_file_is(&a, VH_JOB "/step-000001/random.bin", ref, 20000));
        CHECK(vh_file_is_str(&a, VH_JOB "/step-000001/model.bin", "short"));
        vh_mount_close(&a);
    }
    free(ref);
    free(data);
}

static void test_errors(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "errors-a", 0));
    if (!a.v)
        return;
    st_vfs_attr at;
    st_vfs_handle *h = NULL;
    /* The root holds job directories only, with valid names. */
    CHECK_ERR(st_vfs_create(a.v, ST_VFS_ROOT_INO, "stray.txt", 0644, O_CREAT | O_WRONLY, VH_PID_A,
                            NULL, &at, &h),
              ST_ERR_NAME);
    CHECK(h == NULL);
    CHECK_ERR(st_vfs_mkdir(a.v, ST_VFS_ROOT_INO, "bad job name", 0755, NULL, &at), ST_ERR_NAME);
    CHECK_ERR(st_vfs_mkdir(a.v, ST_VFS_ROOT_INO, ".ckptfs", 0755, NULL, &at), ST_ERR_READ_ONLY);
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/x"));
    CHECK_ERR(st_vfs_mkdir(a.v, ST_VFS_ROOT_INO, VH_JOB, 0755, NULL, &at), ST_ERR_EXISTS);
    CHECK_OK(vh_write_str(&a, VH_JOB "/x/f", "f", VH_PID_A));
    CHECK_ERR(vh_rmdir(&a, VH_JOB "/x"), ST_ERR_NOT_EMPTY);
    CHECK_ERR(vh_rmdir(&a, VH_JOB "/x/f"), ST_ERR_NOT_DIR);
    CHECK_ERR(vh_unlink(&a, VH_JOB "/x"), ST_ERR_IS_DIR);
    CHECK_ERR(vh_unlink(&a, VH_JOB "/x/missing"), ST_ERR_NOT_FOUND);
    CHECK_ERR(vh_lookup(&a, VH_JOB "/x/missing", &at), ST_ERR_NOT_FOUND);
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CHECK_OK(vh_lookup(&a, VH_JOB, &at));
    CHECK_ERR(
        st_vfs_create(a.v, at.ino, longname, 0644, O_CREAT | O_WRONLY, VH_PID_A, NULL, &at, &h),
        ST_ERR_TOO_LONG); /* ENAMETOOLONG, as on any Linux file system */
    CHECK_ERR(st_vfs_lookup(a.v, at.ino, longname, &at), ST_ERR_TOO_LONG); /* not ENOENT */
    /* A size no file can have (past off_t): EFBIG, not EIO, and the file
     * keeps its size. */
    st_vfs_attr fa;
    CHECK_OK(vh_lookup(&a, VH_JOB "/x/f", &fa));
    CHECK_ERR(st_vfs_setattr(a.v, fa.ino, ST_VFS_SET_SIZE, 0, 1ull << 63, 0, 0, NULL, &fa),
              ST_ERR_TOO_BIG);
    CHECK_OK(vh_lookup(&a, VH_JOB "/x/f", &fa));
    CHECK(fa.size == 1);
    CHECK_ERR(vh_create(&a, VH_JOB "/x/f", O_WRONLY | O_EXCL, VH_PID_A, &h), ST_ERR_EXISTS);
    /* The status file is read-only, the commit file write-only. */
    CHECK_ERR(st_vfs_open_file(a.v, ST_VFS_STATUS_INO, O_WRONLY, VH_PID_A, &h), ST_ERR_READ_ONLY);
    CHECK_ERR(st_vfs_open_file(a.v, ST_VFS_COMMIT_INO, O_RDONLY, VH_PID_A, &h), ST_ERR_READ_ONLY);
    CHECK_ERR(vh_commit(&a, "not a commit line\n"), ST_ERR_INVALID);
    /* Reading a file is not writing it. */
    CHECK_OK(vh_lookup(&a, VH_JOB "/x/f", &at));
    CHECK_OK(st_vfs_open_file(a.v, at.ino, O_RDONLY, VH_PID_A, &h));
    if (h) {
        CHECK_ERR(st_vfs_write_prepare(a.v, h, 0, 1), ST_ERR_READ_ONLY);
        st_vfs_release(a.v, h);
    }
    vh_mount_close(&a);
}

/* ---- crashes ---- */

#define CRASH_BIG (2u << 20)

/* The child: acknowledged files (close returned, or flush returned without
 * release yet), one still being written, then death. */
static void crash_after_close_child(void)
{
    st_backend *own = NULL;
    vh_mount m;
    if (st_backend_mem_open(&own) || vh_mount_open(&m, own, "a", "crash-a", 0))
        _exit(1);
    uint8_t *big = vh_data(CRASH_BIG, 7);
    st_vfs_handle *writing, *flushed;
    int bad = 0;
    bad |= vh_mkdirs(&m, VH_JOB) != ST_OK;
    bad |= vh_write(&m, VH_JOB "/ckpt-000001.pt", big, CRASH_BIG, VH_PID_A) != ST_OK;
    bad |= vh_write_str(&m, VH_JOB "/step-000002/a.bin", "rank a", VH_PID_A) != ST_OK;
    bad |= vh_write(&m, VH_JOB "/step-000002/b.bin", big + 1, 100000, VH_PID_A) != ST_OK;
    /* close(2) flushes; the release can come later: acknowledged. */
    bad |= vh_create(&m, VH_JOB "/step-000002/d.bin", O_WRONLY, VH_PID_A, &flushed) != ST_OK;
    bad |= vh_pwrite(&m, flushed, "flushed", 7, 0) != ST_OK;
    bad |= st_vfs_flush(m.v, flushed) != ST_OK;
    /* Never closed: no writer was told it is safe. */
    bad |= vh_create(&m, VH_JOB "/step-000002/c.bin", O_WRONLY, VH_PID_A, &writing) != ST_OK;
    bad |= vh_pwrite(&m, writing, "half", 4, 0) != ST_OK;
    bad |= vh_write_str(&m, VH_JOB "/step-000002/.ckpt-complete", "", VH_PID_A) != ST_OK;
    _exit(bad ? 2 : 0); /* no release, no st_vfs_close, no journal close */
}

static void test_crash_after_close(void)
{
    store_reset();
    CHECK(vh_run_crashing_child(crash_after_close_child));
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "crash-a", 1));
    if (!a.v)
        return;
    uint8_t *big = vh_data(CRASH_BIG, 7);
    /* Every acknowledged file is back, byte for byte; the open one is not. */
    CHECK(vh_file_is(&a, VH_JOB "/ckpt-000001.pt", big, CRASH_BIG));
    CHECK(vh_file_is_str(&a, VH_JOB "/step-000002/a.bin", "rank a"));
    CHECK(vh_file_is(&a, VH_JOB "/step-000002/b.bin", big + 1, 100000));
    CHECK(vh_file_is_str(&a, VH_JOB "/step-000002/d.bin", "flushed"));
    CHECK(!vh_exists(&a, VH_JOB "/step-000002/c.bin"));
    CHECK(strcmp(vh_ls(&a, VH_JOB "/step-000002"), ".ckpt-complete,a.bin,b.bin,d.bin") == 0);
    /* Both steps were complete before the crash: recovery queues them and
     * they are uploaded, complete, with exactly the acknowledged files. */
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_complete(store, 1, "a"));
    CHECK(vh_part_complete(store, 2, "a"));
    CHECK(vh_stored_is(store, 1, "ckpt-000001.pt"));
    CHECK(vh_stored_is(store, 2,
                       "step-000002/.ckpt-complete,step-000002/a.bin,step-000002/b.bin,"
                       "step-000002/d.bin"));
    CHECK(vh_consistent(store, 1) && vh_consistent(store, 2));
    CHECK(strcmp(vh_state(&a, 2), "durable") == 0);
    /* A new node reads them from the store. */
    vh_mount c;
    CHECK_OK(vh_mount_open(&c, store, "c", "crash-c", 0));
    if (c.v) {
        CHECK(vh_file_is(&c, VH_JOB "/ckpt-000001.pt", big, CRASH_BIG));
        CHECK(vh_file_is_str(&c, VH_JOB "/step-000002/d.bin", "flushed"));
        CHECK(!vh_exists(&c, VH_JOB "/step-000002/c.bin"));
        vh_mount_close(&c);
    }
    vh_mount_close(&a);
    free(big);
}

/* The child: the last close of a single-file step and the marker of an HF
 * step each flushed (close(2) returned to the writer) and then death before
 * the release, which is where the completion rules (R1, R3) run. */
static void crash_before_release_child(void)
{
    st_backend *own = NULL;
    vh_mount m;
    if (st_backend_mem_open(&own) || vh_mount_open(&m, own, "a", "relcrash-a", 0))
        _exit(1);
    st_vfs_handle *flat, *marker;
    int bad = vh_mkdirs(&m, VH_JOB) != ST_OK;
    bad |= vh_create(&m, VH_JOB "/ckpt-000003.pt", O_WRONLY, VH_PID_A, &flat) != ST_OK;
    bad |= vh_pwrite(&m, flat, "flat step", 9, 0) != ST_OK;
    bad |= st_vfs_flush(m.v, flat) != ST_OK;
    bad |= vh_write_str(&m, VH_JOB "/checkpoint-4/pytorch_model.bin", "model", VH_PID_A) != ST_OK;
    bad |= vh_create(&m, VH_JOB "/checkpoint-4/trainer_state.json", O_WRONLY, VH_PID_A, &marker) !=
           ST_OK;
    bad |= vh_pwrite(&m, marker, "{}", 2, 0) != ST_OK;
    bad |= st_vfs_flush(m.v, marker) != ST_OK;
    _exit(bad ? 2 : 0); /* no release, no st_vfs_close, no journal close */
}

/* Found by the crash matrix (close-journal-after): a step whose completing
 * close was acknowledged must complete after the restart, not wait for a
 * clean unmount. */
static void test_crash_before_release(void)
{
    store_reset();
    CHECK(vh_run_crashing_child(crash_before_release_child));
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "relcrash-a", 1));
    if (!a.v)
        return;
    CHECK(vh_file_is_str(&a, VH_JOB "/ckpt-000003.pt", "flat step"));
    CHECK(vh_file_is_str(&a, VH_JOB "/checkpoint-4/trainer_state.json", "{}"));
    CHECK(VH_WAIT(vh_consistent(store, 3) && vh_consistent(store, 4), 10));
    CHECK(vh_part_complete(store, 3, "a"));
    CHECK(vh_part_complete(store, 4, "a"));
    CHECK(vh_consistent(store, 3) && vh_consistent(store, 4));
    vh_mount_close(&a);
}

/* The child: an uploading mount (PUTs hang) dies mid-upload. */
static void crash_during_upload_child(void)
{
    st_backend *own = NULL;
    vh_mount m;
    if (st_backend_mem_open(&own) ||
        vh_mount_open_fault(&m, own, "a", "upcrash-a", 1, "put_delay_ms=600000"))
        _exit(1);
    uint8_t *big = vh_data(CRASH_BIG, 9);
    if (vh_mkdirs(&m, VH_JOB) || vh_write(&m, VH_JOB "/ckpt-000003.pt", big, CRASH_BIG, VH_PID_A))
        _exit(2);
    if (!VH_WAIT(strcmp(vh_state(&m, 3), "uploading") == 0, 20))
        _exit(3);
    _exit(0);
}

static void test_crash_during_upload(void)
{
    store_reset();
    CHECK(vh_run_crashing_child(crash_during_upload_child));
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "upcrash-a", 1));
    if (!a.v)
        return;
    uint8_t *big = vh_data(CRASH_BIG, 9);
    CHECK(vh_file_is(&a, VH_JOB "/ckpt-000003.pt", big, CRASH_BIG));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_complete(store, 3, "a") && vh_consistent(store, 3));
    CHECK(strcmp(vh_state(&a, 3), "durable") == 0);
    vh_mount_close(&a);
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "upcrash-b", 0));
    if (b.v) {
        CHECK(vh_file_is(&b, VH_JOB "/ckpt-000003.pt", big, CRASH_BIG));
        vh_mount_close(&b);
    }
    free(big);
}

/* ---- renames ---- */

/* Newer HF Trainer saves into tmp-checkpoint-N/ and renames it to
 * checkpoint-N/: the files join step N by their new name. */
static void test_rename_tmp_checkpoint(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "tmpck-a", 1));
    if (!a.v)
        return;
    CHECK_OK(vh_hf_save(&a, "tmp-checkpoint", 500, 1));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    /* Under the temporary name the files are in no step: nothing completes
     * (trainer_state.json is not in a step directory), nothing is stored. */
    CHECK(strcmp(vh_state(&a, 500), "") == 0);
    CHECK(vh_step_objects(store, 500) == 0);
    CHECK_OK(vh_rename(&a, VH_JOB "/tmp-checkpoint-500", VH_JOB "/checkpoint-500"));
    CHECK(!vh_exists(&a, VH_JOB "/tmp-checkpoint-500"));
    CHECK(strcmp(vh_ls(&a, VH_JOB), "checkpoint-500") == 0);
    CHECK(vh_hf_is(&a, "checkpoint", 500, 1));
    /* The rename is the marker's close under its new name (R1). */
    CHECK(strcmp(vh_state(&a, 500), "writing") != 0);
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_complete(store, 500, "a") && vh_consistent(store, 500));
    CHECK(vh_stored_is(store, 500,
                       "checkpoint-500/pytorch_model.bin,checkpoint-500/trainer_state.json"));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "tmpck-b", 0));
    if (b.v) {
        CHECK(vh_hf_is(&b, "checkpoint", 500, 1));
        CHECK(strcmp(vh_ls(&b, VH_JOB), "checkpoint-500") == 0);
        vh_mount_close(&b);
    }
    vh_mount_close(&a);
}

/*
 * tmp-checkpoint-N/ with an earlier step in the job: its files belong to no
 * step before the rename, and R6 never gives them to step N-1 (docs/STEPS.md
 * §3). They used to: step N-1 was stored again with tmp-checkpoint-N/ in it,
 * and every other node listed a tmp-checkpoint-N/ that no longer existed.
 */
static void test_rename_tmp_checkpoint_after_a_step(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "tmpck2-a", 1));
    if (!a.v)
        return;
    CHECK_OK(vh_hf_save(&a, "checkpoint", 400, 1));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK_OK(vh_hf_save(&a, "tmp-checkpoint", 500, 2));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK_OK(vh_rename(&a, VH_JOB "/tmp-checkpoint-500", VH_JOB "/checkpoint-500"));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_stored_is(store, 500,
                       "checkpoint-500/pytorch_model.bin,checkpoint-500/trainer_state.json"));
    CHECK(vh_stored_is(store, 400,
                       "checkpoint-400/pytorch_model.bin,checkpoint-400/trainer_state.json"));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "tmpck2-b", 0));
    if (b.v) {
        CHECK(strcmp(vh_ls(&b, VH_JOB), "checkpoint-400,checkpoint-500") == 0);
        vh_mount_close(&b);
    }
    vh_mount_close(&a);
}

/* Write a temp name, rename over the real one (safetensors, DCP): the new
 * content replaces the old, also once the old one is durable (R5). */
static void test_rename_over_existing(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "over-a", 1));
    if (!a.v)
        return;
    const char *dir = VH_JOB "/step-000001";
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/model.safetensors", "old old old", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/model.safetensors.tmp", "new v2", VH_PID_A));
    CHECK_OK(vh_rename(&a, VH_JOB "/step-000001/model.safetensors.tmp",
                       VH_JOB "/step-000001/model.safetensors"));
    CHECK(vh_file_is_str(&a, VH_JOB "/step-000001/model.safetensors", "new v2"));
    CHECK(strcmp(vh_ls(&a, dir), "model.safetensors") == 0);
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_revision(store, 1, "a") == 1);
    CHECK(vh_stored_is(store, 1, "step-000001/.ckpt-complete,step-000001/model.safetensors"));

    /* Again over the durable version: the step is stored again (a new
     * revision: the temp file's close is a change too, then the rename) and
     * a reader elsewhere gets the newest content only, without the temp. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/model.safetensors.tmp", "new v3", VH_PID_A));
    CHECK_OK(vh_rename(&a, VH_JOB "/step-000001/model.safetensors.tmp",
                       VH_JOB "/step-000001/model.safetensors"));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_part_revision(store, 1, "a") >= 2);
    CHECK(vh_stored_is(store, 1, "step-000001/.ckpt-complete,step-000001/model.safetensors"));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "over-b", 0));
    if (b.v) {
        CHECK(vh_file_is_str(&b, VH_JOB "/step-000001/model.safetensors", "new v3"));
        CHECK(strcmp(vh_ls(&b, dir), ".ckpt-complete,model.safetensors") == 0);
        /* A file that lives only in the store (not read here yet) cannot be
         * renamed; one that was read has a local copy and can. */
        CHECK_ERR(vh_rename(&b, VH_JOB "/step-000001/.ckpt-complete", VH_JOB "/moved"),
                  ST_ERR_CROSS);
        CHECK_OK(vh_rename(&b, VH_JOB "/step-000001/model.safetensors", VH_JOB "/moved"));
        CHECK(vh_file_is_str(&b, VH_JOB "/moved", "new v3"));
        vh_mount_close(&b);
    }

    /* The refusals: a file over a directory, a directory over a non-empty
     * one, across jobs, a directory into itself. */
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/d1/inner"));
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/d2"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/d2/f", "f", VH_PID_A));
    CHECK_OK(vh_mkdirs(&a, "other"));
    CHECK_ERR(vh_rename(&a, VH_JOB "/d2/f", VH_JOB "/d1"), ST_ERR_IS_DIR);
    CHECK_ERR(vh_rename(&a, VH_JOB "/d1", VH_JOB "/d2/f"), ST_ERR_NOT_DIR);
    CHECK_ERR(vh_rename(&a, VH_JOB "/d1", VH_JOB "/d2"), ST_ERR_NOT_EMPTY);
    CHECK_ERR(vh_rename(&a, VH_JOB "/d2/f", "other/f"), ST_ERR_CROSS);
    CHECK_ERR(vh_rename(&a, VH_JOB "/d1", VH_JOB "/d1/inner/x"), ST_ERR_INVALID);
    /* A directory over an empty one works. */
    CHECK_OK(vh_rename(&a, VH_JOB "/d2", VH_JOB "/d1/inner"));
    CHECK(vh_file_is_str(&a, VH_JOB "/d1/inner/f", "f"));
    vh_mount_close(&a);
}

/* ---- owners ---- */

/* New entries are their creator's (the kernel enforces modes against
 * them, docs/MOUNT.md "Other users on the node"), owners survive a
 * restart, a chown that changes nothing or something is kept, and what the
 * mount's user owns: the root, the control files (0400/0200 by default),
 * and files another node stored. */
/* Sets path's mtime back to 1 s past the epoch (utimensat); 1 on success. */
static int backdate(vh_mount *m, const char *path)
{
    st_vfs_attr at;
    return vh_lookup(m, path, &at) == ST_OK &&
           st_vfs_setattr(m->v, at.ino, ST_VFS_SET_MTIME, 0, 0, 0, 1000000000, NULL, &at) ==
               ST_OK &&
           at.mtime_ns == 1000000000;
}

/* path's mtime and ctime are both past 1 s after the epoch: changed since
 * backdate(). */
static int changed(vh_mount *m, const char *path)
{
    st_vfs_attr at;
    return vh_lookup(m, path, &at) == ST_OK && at.mtime_ns > 1000000000 &&
           at.ctime_ns > 1000000000 && at.ctime_ns >= at.mtime_ns;
}

/* A directory's mtime and ctime change when an entry is created, removed or
 * renamed in it (a watcher that polls a job directory notices a new
 * checkpoint). */
static void test_directory_times(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "dirtimes-a", 1));
    if (!a.v)
        return;
    const char *dir = VH_JOB "/step-000001";
    CHECK_OK(vh_mkdirs(&a, dir));
    CHECK(backdate(&a, dir));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/a.pt", "a", VH_PID_A));
    CHECK(changed(&a, dir)); /* create */
    CHECK(backdate(&a, dir));
    CHECK_OK(vh_rename(&a, VH_JOB "/step-000001/a.pt", VH_JOB "/step-000001/b.pt"));
    CHECK(changed(&a, dir)); /* rename within */
    CHECK(backdate(&a, dir) && backdate(&a, VH_JOB));
    CHECK_OK(vh_rename(&a, VH_JOB "/step-000001/b.pt", VH_JOB "/b.pt"));
    CHECK(changed(&a, dir) && changed(&a, VH_JOB)); /* rename across: both */
    CHECK(backdate(&a, VH_JOB));
    CHECK_OK(vh_unlink(&a, VH_JOB "/b.pt"));
    CHECK(changed(&a, VH_JOB)); /* unlink */
    CHECK(backdate(&a, VH_JOB));
    CHECK_OK(vh_rmdir(&a, dir));
    CHECK(changed(&a, VH_JOB)); /* rmdir */
    vh_mount_close(&a);
}

/* Link counts as on a local file system (find(1) without -noleaf skips
 * subdirectories past a directory's count): a directory has 2 plus one per
 * subdirectory, the root one more for .ckptfs; a file open after its unlink
 * has none. open(O_TRUNC) of an existing file marks its mtime and ctime. */
static void test_links_and_trunc_times(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "links-a", 1));
    if (!a.v)
        return;
    st_vfs_attr at;
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/s1/deep"));
    CHECK_OK(vh_mkdirs(&a, VH_JOB "/s2"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/s1/f", "f", VH_PID_A));
    CHECK_OK(st_vfs_getattr(a.v, ST_VFS_ROOT_INO, &at));
    CHECK(at.nlink == 2 + 1 + 1); /* the job and .ckptfs */
    CHECK(vh_lookup(&a, VH_JOB, &at) == ST_OK && at.nlink == 4);
    CHECK(vh_lookup(&a, VH_JOB "/s1", &at) == ST_OK && at.nlink == 3);
    CHECK(vh_lookup(&a, VH_JOB "/s1/deep", &at) == ST_OK && at.nlink == 2);
    CHECK_OK(vh_rename(&a, VH_JOB "/s1/deep", VH_JOB "/s2/deep"));
    CHECK(vh_lookup(&a, VH_JOB "/s1", &at) == ST_OK && at.nlink == 2);
    CHECK(vh_lookup(&a, VH_JOB "/s2", &at) == ST_OK && at.nlink == 3);
    CHECK_OK(vh_rmdir(&a, VH_JOB "/s2/deep"));
    CHECK(vh_lookup(&a, VH_JOB "/s2", &at) == ST_OK && at.nlink == 2);

    st_vfs_attr f;
    st_vfs_handle *h = NULL;
    CHECK(backdate(&a, VH_JOB "/s1/f"));
    CHECK_OK(vh_lookup(&a, VH_JOB "/s1/f", &f));
    CHECK_OK(st_vfs_open_file(a.v, f.ino, O_WRONLY | O_TRUNC, VH_PID_A, &h));
    CHECK(changed(&a, VH_JOB "/s1/f"));
    CHECK_OK(vh_unlink(&a, VH_JOB "/s1/f"));
    CHECK(st_vfs_getattr(a.v, f.ino, &f) == ST_OK && f.nlink == 0);
    if (h)
        st_vfs_release(a.v, h);
    vh_mount_close(&a);
}

static void test_owners(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "owners-a", 1));
    if (!a.v)
        return;
    const uint32_t me = (uint32_t)getuid(), my_group = (uint32_t)getgid();
    const st_vfs_owner user = {4321, 8765};
    st_vfs_attr job, dir, at;
    st_vfs_handle *h = NULL;
    CHECK_OK(st_vfs_mkdir(a.v, ST_VFS_ROOT_INO, VH_JOB, 0700, &user, &job));
    CHECK(job.uid == 4321 && job.gid == 8765 && (job.mode & 07777) == 0700);
    CHECK_OK(st_vfs_mkdir(a.v, job.ino, "step-000001", 0750, &user, &dir));
    CHECK(dir.uid == 4321 && dir.gid == 8765);
    CHECK_OK(st_vfs_create(a.v, dir.ino, "model.bin", 0600, O_CREAT | O_WRONLY, VH_PID_A, &user,
                           &at, &h));
    CHECK(at.uid == 4321 && at.gid == 8765 && (at.mode & 07777) == 0600);
    if (h)
        CHECK_OK(vh_close(&a, h));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/by-root.txt", "r", VH_PID_A)); /* no owner */
    CHECK_OK(vh_lookup(&a, VH_JOB "/step-000001/by-root.txt", &at));
    CHECK(at.uid == me && at.gid == my_group);

    /* chown: KEEP and the same ids change nothing; a new gid sticks. */
    CHECK_OK(st_vfs_chown(a.v, dir.ino, ST_VFS_OWNER_KEEP, ST_VFS_OWNER_KEEP, &at));
    CHECK(at.uid == 4321 && at.gid == 8765);
    CHECK_OK(st_vfs_chown(a.v, dir.ino, 4321, 8765, &at));
    CHECK_OK(st_vfs_chown(a.v, dir.ino, ST_VFS_OWNER_KEEP, 99, &at));
    CHECK(at.uid == 4321 && at.gid == 99);

    /* The root and the control files are the mount's user's. */
    CHECK_OK(st_vfs_getattr(a.v, ST_VFS_ROOT_INO, &at));
    CHECK(at.uid == me && (at.mode & 07777) == 0755);
    CHECK_OK(st_vfs_getattr(a.v, ST_VFS_STATUS_INO, &at));
    CHECK(at.uid == me && (at.mode & 07777) == 0400);
    CHECK_OK(st_vfs_getattr(a.v, ST_VFS_COMMIT_INO, &at));
    CHECK(at.uid == me && (at.mode & 07777) == 0200);
    CHECK_OK(st_vfs_chown(a.v, ST_VFS_STATUS_INO, me, ST_VFS_OWNER_KEEP, &at));
    CHECK_ERR(st_vfs_chown(a.v, ST_VFS_STATUS_INO, 4321, ST_VFS_OWNER_KEEP, &at), ST_ERR_READ_ONLY);

    /* A restart finds every owner in the journal. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-000001/.ckpt-complete", "", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    vh_mount_close(&a);
    CHECK_OK(vh_mount_open(&a, store, "a", "owners-a", 0));
    if (a.v) {
        CHECK_OK(vh_lookup(&a, VH_JOB, &at));
        CHECK(at.uid == 4321 && at.gid == 8765 && (at.mode & 07777) == 0700);
        CHECK_OK(vh_lookup(&a, VH_JOB "/step-000001", &at));
        CHECK(at.uid == 4321 && at.gid == 99);
        CHECK_OK(vh_lookup(&a, VH_JOB "/step-000001/model.bin", &at));
        CHECK(at.uid == 4321 && at.gid == 8765);
        vh_mount_close(&a);
    }
    /* The store keeps no owners: another node shows the mount's user. */
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "owners-b", 1));
    if (b.v) {
        CHECK_OK(vh_lookup(&b, VH_JOB "/step-000001/model.bin", &at));
        CHECK(at.uid == me && at.gid == my_group && (at.mode & 07777) == 0600);
        vh_mount_close(&b);
    }
}

int main(void)
{
    if (vh_setup("vfs-files"))
        return 1;
    RUN(test_create_write_read);
    RUN(test_errors);
    RUN(test_crash_after_close);
    RUN(test_crash_during_upload);
    RUN(test_crash_before_release);
    RUN(test_rename_tmp_checkpoint);
    RUN(test_rename_over_existing);
    RUN(test_rename_tmp_checkpoint_after_a_step);
    RUN(test_owners);
    RUN(test_directory_times);
    RUN(test_links_and_trunc_times);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
