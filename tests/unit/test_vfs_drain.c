/*
 * test_vfs_drain — the upload order of the mount model (docs/SHUTDOWN.md):
 * oldest first normally; after a preemption notice (st_vfs_drain, or a
 * write of "drain" to .ckptfs/drain) each job's newest complete step first,
 * while the mount keeps serving; the status file's draining and
 * eta_durable_seconds.
 *
 * The store is the in-memory one behind the fault wrapper's PUT delay, so a
 * step's upload takes several delayed PUTs and the later steps queue behind
 * the first one; the order is the order in which the steps' states turn
 * "durable" (the part record is in the store by then).
 */
#include "vfs_harness.h"

#define PUT_DELAY "put_delay_ms=150"

static st_backend *store;

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

static st_err save(vh_mount *m, uint64_t step)
{
    char path[64];
    snprintf(path, sizeof path, VH_JOB "/ckpt-%06" PRIu64 ".pt", step);
    size_t n = 1u << 20;
    uint8_t *data = vh_data(n, step);
    st_err e = vh_write(m, path, data, n, VH_PID_A); /* R3: complete at the close */
    free(data);
    return e;
}

/* Step 1 uploading, 2..4 queued behind it. */
static int queue_four(vh_mount *m)
{
    CHECK_OK(vh_mkdirs(m, VH_JOB));
    CHECK_OK(save(m, 1));
    int uploading = VH_WAIT(!strcmp(vh_state(m, 1), "uploading"), 10);
    CHECK(uploading);
    if (!uploading)
        return -1;
    for (uint64_t k = 2; k <= 4; k++)
        CHECK_OK(save(m, k));
    int queued = VH_WAIT(!strcmp(vh_state(m, 2), "queued") && !strcmp(vh_state(m, 3), "queued") &&
                             !strcmp(vh_state(m, 4), "queued"),
                         10);
    CHECK(queued);
    return queued ? 0 : -1;
}

/* The order in which steps 1..4 turn durable, as "1432"; "" on timeout. */
static const char *durable_order(vh_mount *m)
{
    static char order[8];
    size_t n = 0;
    int seen[5] = {0};
    int64_t due = st_mono_ns() + 30 * 1000000000ll;
    while (n < 4 && st_mono_ns() < due) {
        for (uint64_t k = 1; k <= 4; k++)
            if (!seen[k] && !strcmp(vh_state(m, k), "durable")) {
                seen[k] = 1;
                order[n++] = (char)('0' + k);
            }
        usleep(5000);
    }
    order[n] = '\0';
    return n == 4 ? order : "";
}

static st_err write_drain(vh_mount *m, const char *text)
{
    st_vfs_handle *h = NULL;
    st_err e = st_vfs_open_file(m->v, ST_VFS_DRAIN_INO, O_WRONLY, VH_PID_A, &h);
    if (!e)
        e = st_vfs_handle_write(m->v, h, text, strlen(text));
    if (h)
        st_vfs_release(m->v, h);
    return e;
}

static void test_fifo_without_notice(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open_fault(&a, store, "a", "fifo", 1, PUT_DELAY));
    if (!a.v || queue_four(&a))
        goto out;
    CHECK(vh_status_has(&a, "\"draining\":false"));
    CHECK(strcmp(durable_order(&a), "1234") == 0);
out:
    if (a.v)
        vh_mount_close(&a);
}

static void test_notice_newest_first(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open_fault(&a, store, "a", "notice", 1, PUT_DELAY));
    if (!a.v)
        return;
    /* The control file: write-only, and only "drain" is a notice. */
    st_vfs_handle *h = NULL;
    CHECK_ERR(st_vfs_open_file(a.v, ST_VFS_DRAIN_INO, O_RDONLY, VH_PID_A, &h), ST_ERR_READ_ONLY);
    CHECK_ERR(write_drain(&a, "please\n"), ST_ERR_INVALID);
    CHECK_ERR(write_drain(&a, "drain\n\n"), ST_ERR_INVALID);
    CHECK(strstr(vh_ls(&a, ".ckptfs"), "drain") != NULL);
    if (queue_four(&a))
        goto out;
    CHECK(vh_status_has(&a, "\"draining\":false"));
    /* Nothing durable yet: the rate, so the ETA, is unknown. */
    CHECK(vh_status_has(&a, "\"eta_durable_seconds\":null"));
    CHECK_OK(write_drain(&a, "drain\n"));
    CHECK(vh_status_has(&a, "\"draining\":true"));
    CHECK_OK(write_drain(&a, "drain")); /* again: nothing more */
    /* The mount keeps serving while it drains. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/notes.txt", "still serving", VH_PID_B));
    CHECK(vh_file_is_str(&a, VH_JOB "/notes.txt", "still serving"));
    /* Step 1 was under way and finishes; then the newest first. */
    CHECK(strcmp(durable_order(&a), "1432") == 0);
    CHECK(!vh_status_has(&a, "\"eta_durable_seconds\":null"));
    for (uint64_t k = 1; k <= 4; k++)
        CHECK(vh_part_complete(a.b, k, "a"));
out:
    if (a.v)
        vh_mount_close(&a);
}

/* A step completed after the notice is the newest: it goes next. */
static void test_step_after_notice_goes_next(void)
{
    store_reset();
    vh_mount a;
    CHECK_OK(vh_mount_open_fault(&a, store, "a", "after", 1, PUT_DELAY));
    if (!a.v || queue_four(&a))
        goto out;
    st_vfs_drain(a.v);
    CHECK(VH_WAIT(!strcmp(vh_state(&a, 4), "uploading"), 20));
    CHECK_OK(save(&a, 5));
    CHECK(VH_WAIT(!strcmp(vh_state(&a, 5), "durable"), 20));
    CHECK(strcmp(vh_state(&a, 3), "durable") != 0 && strcmp(vh_state(&a, 2), "durable") != 0);
    CHECK(VH_WAIT(!strcmp(vh_state(&a, 2), "durable"), 30));
out:
    if (a.v)
        vh_mount_close(&a);
}

int main(void)
{
    if (vh_setup("vfs-drain"))
        return 1;
    RUN(test_fifo_without_notice);
    RUN(test_notice_newest_first);
    RUN(test_step_after_notice_goes_next);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
