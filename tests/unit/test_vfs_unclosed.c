/*
 * test_vfs_unclosed — a file whose writer never saw a close() succeed is
 * never published (docs/SHUTDOWN.md, "Files open at the stop"), over the
 * in-memory store (tests/unit/vfs_harness.h):
 *   - released without a flush (the kernel's cleanup, not a close(2)): the
 *     file holds its step back, as after a failed write, also across a
 *     restart, until it is rewritten;
 *   - still open for writing at the unmount (a SIGTERM: the kernel drops
 *     the connection and never releases it), written in place since its
 *     last close: neither this unmount's R8 nor the next start publishes it;
 *   - still open at the unmount but with every write acknowledged (fsync):
 *     released by the unmount, and its step is published by R8 as usual;
 *   - the status and commit files open at the unmount: released by it.
 */
#include "vfs_harness.h"

static st_backend *store; /* a fresh store per case */

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

/* A fresh store and a started mount of node "a" on staging dir `staging`;
 * 1 if it is open. */
static int fresh_mount(vh_mount *m, const char *staging)
{
    store_reset();
    CHECK_OK(vh_mount_open(m, store, "a", staging, 1));
    return m->v != NULL;
}

#define MODEL VH_JOB "/step-1/model.bin"
#define LEN   (3u << 20)

/* The status lists path among the failed files (not torn). */
static int listed_failed(vh_mount *m, const char *path)
{
    char want[256];
    snprintf(want, sizeof want, "{\"job\":\"" VH_JOB "\",\"path\":\"%s\",\"step\":1,\"torn\":false",
             path);
    int ok = vh_status_has(m, want) && vh_status_u64(m, NULL, "failed_files") == 1;
    if (!ok)
        fprintf(stderr, "  the status does not list %s as failed\n", path);
    return ok;
}

static void test_release_without_flush_is_no_close(void)
{
    vh_mount a;
    if (!fresh_mount(&a, "noflush-a"))
        return;
    uint8_t *data = vh_data(LEN, 7);
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&a, MODEL, O_WRONLY | O_TRUNC, VH_PID_A, &h));
    if (h) {
        CHECK_OK(vh_pwrite(&a, h, data, LEN / 2, 0));
        st_vfs_release(a.v, h); /* no flush: no close(2) returned */
    }
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-1/.ckpt-complete", "", VH_PID_A));
    CHECK(listed_failed(&a, "step-1/model.bin"));
    CHECK_OK(st_vfs_wait_idle(a.v, 10));
    CHECK(vh_stored_is(store, 1, "-"));
    vh_mount_close(&a); /* nor R8 */
    CHECK(vh_stored_is(store, 1, "-"));

    /* The journal remembers it. */
    CHECK_OK(vh_mount_open(&a, store, "a", "noflush-a", 1));
    if (!a.v)
        goto out;
    CHECK(listed_failed(&a, "step-1/model.bin"));
    CHECK_OK(st_vfs_wait_idle(a.v, 10));
    CHECK(vh_stored_is(store, 1, "-"));
    /* Written again and closed: the writer's file, published. */
    CHECK_OK(vh_write(&a, MODEL, data, LEN, VH_PID_A));
    CHECK(VH_WAIT(vh_consistent(store, 1), 10));
    CHECK(vh_stored_bytes_are(store, 1, "step-1/model.bin", data, LEN));
    CHECK(vh_status_u64(&a, NULL, "failed_files") == 0);
    vh_mount_close(&a);
out:
    free(data);
}

static void test_open_in_place_at_unmount(void)
{
    vh_mount a;
    if (!fresh_mount(&a, "inplace-a"))
        return;
    uint8_t *data = vh_data(LEN, 8);
    /* A closed file (its row says CLOSED), then opened again without
     * O_TRUNC and written past its end: the SIGTERM lands mid-write. */
    CHECK_OK(vh_write(&a, MODEL, data, 4096, VH_PID_A));
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&a, MODEL, O_WRONLY, VH_PID_A, &h));
    if (h)
        CHECK_OK(vh_pwrite(&a, h, data + 4096, LEN / 2, 4096));
    vh_mount_close(&a); /* the handle is never released by the kernel */
    CHECK(vh_stored_is(store, 1, "-"));

    /* Not published after the restart either, nor by its unmount's R8. */
    CHECK_OK(vh_mount_open(&a, store, "a", "inplace-a", 1));
    if (!a.v)
        goto out;
    CHECK(listed_failed(&a, "step-1/model.bin"));
    vh_mount_close(&a);
    CHECK(vh_stored_is(store, 1, "-"));

    /* Removed, the file no longer holds its step back. */
    CHECK_OK(vh_mount_open(&a, store, "a", "inplace-a", 1));
    if (!a.v)
        goto out;
    CHECK_OK(vh_write(&a, VH_JOB "/step-1/other.bin", data, 1000, VH_PID_A));
    CHECK_OK(vh_unlink(&a, MODEL));
    CHECK(vh_status_u64(&a, NULL, "failed_files") == 0);
    vh_mount_close(&a);
    CHECK(vh_consistent(store, 1));
    CHECK(vh_stored_is(store, 1, "step-1/other.bin"));
out:
    free(data);
}

static void test_acknowledged_open_file_at_unmount(void)
{
    vh_mount a;
    if (!fresh_mount(&a, "synced-a"))
        return;
    uint8_t *data = vh_data(LEN, 9);
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&a, MODEL, O_WRONLY | O_TRUNC, VH_PID_A, &h));
    if (h) {
        CHECK_OK(vh_pwrite(&a, h, data, LEN, 0));
        CHECK_OK(st_vfs_fsync(a.v, h)); /* acknowledged; the close never comes */
    }
    vh_mount_close(&a); /* releases it, then R8 completes the step */
    CHECK(vh_consistent(store, 1));
    CHECK(vh_stored_bytes_are(store, 1, "step-1/model.bin", data, LEN));
    free(data);
}

/* The status file and the commit file open at the unmount (a SIGTERM right
 * after a read of the status: the kernel's release never comes): the
 * unmount releases them too (under the sanitizer, a leak before). */
static void test_control_files_open_at_unmount(void)
{
    vh_mount a;
    if (!fresh_mount(&a, "control-a"))
        return;
    st_vfs_handle *status = NULL, *commit = NULL;
    CHECK_OK(st_vfs_open_file(a.v, ST_VFS_STATUS_INO, O_RDONLY, VH_PID_A, &status));
    CHECK_OK(st_vfs_open_file(a.v, ST_VFS_COMMIT_INO, O_WRONLY, VH_PID_A, &commit));
    char buf[16];
    CHECK(status && st_vfs_handle_read(status, 0, buf, sizeof buf) > 0);
    vh_mount_close(&a); /* neither is released by the kernel */
}

int main(void)
{
    if (vh_setup("vfs-unclosed"))
        return 1;
    RUN(test_release_without_flush_is_no_close);
    RUN(test_open_in_place_at_unmount);
    RUN(test_acknowledged_open_file_at_unmount);
    RUN(test_control_files_open_at_unmount);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
