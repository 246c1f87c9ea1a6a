/*
 * test_vfs_failures — the mount model where a hostile test found
 * data published wrongly or stranded, over the in-memory store
 * (tests/unit/vfs_harness.h):
 *   - a file whose write failed (the staging cap, the disk full) holds its
 *     step back until it is rewritten or removed, also across a restart;
 *   - a file unlinked, or renamed over, while open for writing still gives
 *     its step's writer count back at its close;
 *   - a rename that would push a path below it past the manifest's limit
 *     is refused (ST_ERR_TOO_LONG) instead of losing that file;
 *   - rename with NOREPLACE;
 *   - a restart does not complain about durable files whose local copy is
 *     gone, and a name with a newline stays on one log line.
 */
#include "vfs_harness.h"

static st_backend *store; /* a fresh store per case */

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

/* A fresh store and a mount of node "a" on staging dir `staging`; 0 if it
 * is open. */
static int fresh_mount(vh_mount *m, const char *staging, int start)
{
    store_reset();
    CHECK_OK(vh_mount_open(m, store, "a", staging, start));
    return m->v ? 0 : -1;
}

static int state_is(vh_mount *m, uint64_t step, const char *want)
{
    const char *s = vh_state(m, step);
    if (strcmp(s, want))
        fprintf(stderr, "  step %" PRIu64 " is \"%s\", want \"%s\"\n", step, s, want);
    return !strcmp(s, want);
}

/* 1 if the status file's last_error holds needle. */
static int last_error_has(vh_mount *m, const char *needle)
{
    st_bytes s = {0};
    vh_status(m, &s);
    const char *le = strstr((const char *)s.data, "\"last_error\":");
    int found = le && strstr(le, needle) && strstr(le, needle) < strstr(le, ",\"steps\"");
    if (!found)
        fprintf(stderr, "  last_error lacks \"%s\": %.300s\n", needle, le ? le : "(none)");
    st_bytes_free(&s);
    return found;
}

/* Opens path and writes `first` bytes, then tries `second` more; returns the
 * second write's error and leaves the handle open in *h. */
static st_err write_past_cap(vh_mount *m, const char *path, size_t first, size_t second,
                             st_vfs_handle **h)
{
    uint8_t *data = vh_data(first + second, 5);
    st_err e = vh_create(m, path, O_WRONLY | O_TRUNC, VH_PID_A, h);
    if (!e)
        e = vh_pwrite(m, *h, data, first, 0);
    if (!e)
        e = vh_pwrite(m, *h, data + first, second, first);
    free(data);
    return e;
}

/* Over the staging cap: the truncated file's step is not completed by its
 * marker, not published eagerly, not completed at unmount, nor after a
 * restart; the status names the file. Rewriting it completes the step. */
static void test_failed_write_holds_the_step(void)
{
    store_reset();
    vh_staging_cap = 600000;
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "cap-a", 1));
    if (!a.v)
        goto out;
    st_vfs_handle *h = NULL;
    CHECK_ERR(write_past_cap(&a, VH_JOB "/step-1/model.bin", 400000, 400000, &h), ST_ERR_NOSPACE);
    if (h) /* close(2) says so too: ENOSPC, not success */
        CHECK_ERR(vh_close(&a, h), ST_ERR_NOSPACE);
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-1/.ckpt-complete", "", VH_PID_A));
    CHECK(state_is(&a, 1, "writing"));
    CHECK(last_error_has(&a, "job/step-1/model.bin: a write to staging failed (no space left)"));
    /* Quiet for longer than eager publishing waits: still nothing stored. */
    usleep(2800000); /* eager publishing waits 2 s of quiet */
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_stored_is(store, 1, "-"));
    vh_mount_close(&a); /* R8 must not complete it either */
    CHECK(vh_stored_is(store, 1, "-"));

    /* A restart remembers the failed write. */
    CHECK_OK(vh_mount_open(&a, store, "a", "cap-a", 1));
    if (!a.v)
        goto out;
    usleep(2800000); /* eager publishing waits 2 s of quiet */
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_stored_is(store, 1, "-"));
    CHECK(last_error_has(&a, "step-1/model.bin"));

    /* Rewritten from the start: the marker's completion goes on. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-1/model.bin", "whole again", VH_PID_A));
    CHECK(VH_WAIT(vh_consistent(store, 1), 20));
    CHECK(vh_stored_is(store, 1, "step-1/.ckpt-complete,step-1/model.bin"));
    CHECK(last_error_has(&a, "\"\""));
    vh_mount b;
    CHECK_OK(vh_mount_open(&b, store, "b", "cap-b", 0));
    if (b.v) {
        CHECK(vh_file_is_str(&b, VH_JOB "/step-1/model.bin", "whole again"));
        vh_mount_close(&b);
    }
    vh_mount_close(&a);
out:
    vh_staging_cap = 0;
}

/* A removed file no longer holds its step back; a single-file step whose
 * write failed stays incomplete (R3 does not fire). The disk-full path
 * (st_vfs_write_failed, what fs/ckptfs.c calls) behaves the same. */
static void test_failed_write_then_removed(void)
{
    vh_mount a;
    if (fresh_mount(&a, "rm-a", 0))
        return;
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&a, VH_JOB "/step-2/shard.bin", O_WRONLY, VH_PID_A, &h));
    if (h) {
        CHECK_OK(vh_pwrite(&a, h, "part", 4, 0));
        st_vfs_write_failed(a.v, h, ST_ERR_NOSPACE); /* the disk said ENOSPC */
        CHECK_ERR(vh_close(&a, h), ST_ERR_NOSPACE);
    }
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-2/ok.bin", "fine", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-2/.ckpt-complete", "", VH_PID_A));
    CHECK(state_is(&a, 2, "writing"));
    CHECK_OK(vh_unlink(&a, VH_JOB "/step-2/shard.bin"));
    CHECK(state_is(&a, 2, "queued")); /* complete, and waiting for the uploader */

    CHECK_OK(vh_create(&a, VH_JOB "/ckpt-000003.pt", O_WRONLY, VH_PID_B, &h));
    if (h) {
        st_vfs_write_failed(a.v, h, ST_ERR_IO);
        CHECK_ERR(vh_close(&a, h), ST_ERR_IO);
    }
    CHECK(state_is(&a, 3, "writing"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/ckpt-000003.pt", "rewritten", VH_PID_B));
    CHECK(state_is(&a, 3, "queued"));
    vh_mount_close(&a);
}

/* A loose file whose write failed is given to no step (R6) until it is
 * rewritten: the newest step goes on being stored without it. */
static void test_failed_loose_file_joins_no_step(void)
{
    vh_mount a;
    if (fresh_mount(&a, "loose-a", 1))
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-20/x", "x", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-20/.ckpt-complete", "", VH_PID_A));
    CHECK(VH_WAIT(vh_part_revision(store, 20, "a") == 1, 20));
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&a, VH_JOB "/notes.txt", O_WRONLY, VH_PID_A, &h));
    if (h) {
        CHECK_OK(vh_pwrite(&a, h, "half", 4, 0));
        st_vfs_write_failed(a.v, h, ST_ERR_NOSPACE);
        CHECK_ERR(vh_close(&a, h), ST_ERR_NOSPACE);
    }
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-20/y", "y", VH_PID_A)); /* R5: stored again */
    CHECK(VH_WAIT(vh_part_revision(store, 20, "a") == 2, 20));
    CHECK(vh_stored_is(store, 20, "step-20/.ckpt-complete,step-20/x,step-20/y"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/notes.txt", "whole", VH_PID_A)); /* R6 now */
    CHECK(VH_WAIT(vh_part_revision(store, 20, "a") == 3, 20));
    CHECK(vh_stored_is(store, 20, "notes.txt,step-20/.ckpt-complete,step-20/x,step-20/y"));
    vh_mount_close(&a);
}

/* Unlinked, or renamed over, while open for writing: the close still gives
 * the step's writer count back, so the step is uploaded (before the fix it
 * stayed "complete, writers 1" for ever, not even at unmount). */
static void test_unlinked_writer_releases_its_step(void)
{
    vh_mount a;
    if (fresh_mount(&a, "unl-a", 0))
        return;
    st_vfs_handle *h = NULL, *g = NULL;
    CHECK_OK(vh_create(&a, VH_JOB "/step-5/scratch.bin", O_WRONLY, VH_PID_A, &h));
    CHECK_OK(vh_unlink(&a, VH_JOB "/step-5/scratch.bin"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-5/model.bin", "m5", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-5/.ckpt-complete", "", VH_PID_A));
    CHECK(state_is(&a, 5, "complete")); /* waits for the open handle */
    if (h) {
        CHECK_OK(vh_pwrite(&a, h, "late", 4, 0));
        CHECK_OK(vh_close(&a, h));
    }
    CHECK(state_is(&a, 5, "queued"));
    CHECK(vh_status_u64(&a, "\"step\":5,", "writers") == 0);

    CHECK_OK(vh_create(&a, VH_JOB "/step-6/model.bin", O_WRONLY, VH_PID_A, &g));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-6/model.bin.tmp", "m6", VH_PID_A));
    CHECK_OK(vh_rename(&a, VH_JOB "/step-6/model.bin.tmp", VH_JOB "/step-6/model.bin"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-6/.ckpt-complete", "", VH_PID_A));
    CHECK(state_is(&a, 6, "complete"));
    if (g)
        CHECK_OK(vh_close(&a, g));
    CHECK(state_is(&a, 6, "queued"));
    vh_mount_close(&a);

    /* With the uploader: durable, and without the unlinked file. */
    store_reset();
    CHECK_OK(vh_mount_open(&a, store, "a", "unl-b", 1));
    if (!a.v)
        return;
    CHECK_OK(vh_create(&a, VH_JOB "/ckpt-000007.pt", O_WRONLY, VH_PID_A, &h));
    CHECK_OK(vh_write_str(&a, VH_JOB "/ckpt-000007.pt.tmp", "seven", VH_PID_A));
    CHECK_OK(vh_rename(&a, VH_JOB "/ckpt-000007.pt.tmp", VH_JOB "/ckpt-000007.pt"));
    if (h)
        CHECK_OK(vh_close(&a, h));
    CHECK(VH_WAIT(vh_consistent(store, 7), 20));
    CHECK(vh_stored_is(store, 7, "ckpt-000007.pt"));
    vh_mount_close(&a);
}

/* A rename whose new name makes a path below it longer than the manifest's
 * 4096 bytes is refused; the file stays where it was and is stored. */
static void test_rename_past_the_path_limit(void)
{
    vh_mount a;
    if (fresh_mount(&a, "long-a", 1))
        return;
    char path[PATH_MAX], name200[201], name255[256], file[255];
    memset(name200, 'd', 200);
    name200[200] = '\0';
    memset(name255, 'y', 255);
    name255[255] = '\0';
    memset(file, 'f', 254);
    file[254] = '\0';
    /* step-8/ + 19 directories of 200 bytes + a file of 254: 4080 bytes */
    int len = snprintf(path, sizeof path, "%s/step-8", VH_JOB);
    for (int i = 0; i < 19; i++)
        len += snprintf(path + len, sizeof path - (size_t)len, "/%s", name200);
    len += snprintf(path + len, sizeof path - (size_t)len, "/%s", file);
    size_t job_len = (size_t)len - strlen(VH_JOB "/");
    CHECK(job_len <= 4096 && job_len + 55 > 4096); /* fits, but not with 55 bytes more */
    CHECK_OK(vh_write_str(&a, path, "deep", VH_PID_A));
    char to[PATH_MAX];
    snprintf(to, sizeof to, "%s/step-8/%s", VH_JOB, name255);
    char from[PATH_MAX];
    snprintf(from, sizeof from, "%s/step-8/%s", VH_JOB, name200);
    CHECK_ERR(vh_rename(&a, from, to), ST_ERR_TOO_LONG);
    CHECK(vh_file_is_str(&a, path, "deep"));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-8/.ckpt-complete", "", VH_PID_A));
    CHECK(VH_WAIT(vh_consistent(store, 8), 20));
    CHECK(strstr(vh_stored(store, 8, NULL), "/ffff") != NULL);
    vh_mount_close(&a);
}

/* renameat2(RENAME_NOREPLACE) refuses an existing target and otherwise
 * renames; other flags are not supported. */
static void test_rename_noreplace(void)
{
    vh_mount a;
    if (fresh_mount(&a, "norepl-a", 0))
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-9/a", "A", VH_PID_A));
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-9/b", "B", VH_PID_A));
    CHECK_ERR(vh_rename_flags(&a, VH_JOB "/step-9/a", VH_JOB "/step-9/b", ST_VFS_RENAME_NOREPLACE),
              ST_ERR_EXISTS);
    CHECK(vh_file_is_str(&a, VH_JOB "/step-9/a", "A") &&
          vh_file_is_str(&a, VH_JOB "/step-9/b", "B"));
    CHECK_OK(vh_rename_flags(&a, VH_JOB "/step-9/a", VH_JOB "/step-9/c", ST_VFS_RENAME_NOREPLACE));
    CHECK(vh_file_is_str(&a, VH_JOB "/step-9/c", "A") && !vh_exists(&a, VH_JOB "/step-9/a"));
    CHECK_ERR(vh_rename_flags(&a, VH_JOB "/step-9/c", VH_JOB "/step-9/b", 2 /* EXCHANGE */),
              ST_ERR_UNSUPPORTED);
    vh_mount_close(&a);
}

/* A restart after the local copies of durable files were lost says nothing
 * about them (their content is in the store) and serves them from there. */
static void test_restart_with_durable_copies_gone(void)
{
    vh_mount a;
    if (fresh_mount(&a, "gone-a", 1))
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/ckpt-000010.pt", "ten", VH_PID_A));
    CHECK(VH_WAIT(vh_consistent(store, 10), 20));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    char data[PATH_MAX + 16];
    snprintf(data, sizeof data, "%s/data", a.staging);
    vh_mount_close(&a);
    ut_rmtree(data);
    for (int start = 0; start < 2; start++) {
        vh_log_clear();
        CHECK_OK(vh_mount_open(&a, store, "a", "gone-a", 0));
        if (!a.v)
            return;
        CHECK(strstr(vh_logbuf, "staging file is gone") == NULL);
        CHECK(vh_file_is_str(&a, VH_JOB "/ckpt-000010.pt", "ten"));
        vh_mount_close(&a);
        ut_rmtree(data); /* the fetched copy goes too: the next start is the same */
    }
}

/* A file name with a newline is escaped in the log line that names it. */
static void test_log_line_escapes_names(void)
{
    vh_mount a;
    if (fresh_mount(&a, "log-a", 0))
        return;
    vh_log_clear();
    st_vfs_handle *h = NULL;
    CHECK_OK(vh_create(&a, VH_JOB "/step-11/bad\nstep 12 of job job is complete", O_WRONLY,
                       VH_PID_A, &h));
    if (h) {
        st_vfs_write_failed(a.v, h, ST_ERR_NOSPACE);
        CHECK_ERR(vh_close(&a, h), ST_ERR_NOSPACE);
    }
    CHECK_OK(vh_write_str(&a, VH_JOB "/step-11/.ckpt-complete", "", VH_PID_A));
    CHECK(strstr(vh_logbuf, "bad\\nstep 12 of job job is complete") != NULL);
    CHECK(strstr(vh_logbuf, "\nstep 12 of job job is complete") == NULL); /* no forged line */
    /* A single-file step cut short (a ZIP start, no end record) is logged
     * with its name: "ckpt-13.p\nt" is step 13 by name. */
    vh_log_clear();
    static const char cut_zip[] = "PK\x03\x04 and no end";
    CHECK_OK(vh_write(&a, VH_JOB "/ckpt-13.p\nt", cut_zip, sizeof cut_zip - 1, VH_PID_A));
    CHECK(strstr(vh_logbuf, "job/ckpt-13.p\\nt looks cut short") != NULL);
    CHECK(strchr(vh_logbuf, '\n') == vh_logbuf + strlen(vh_logbuf) - 1); /* one line */
    vh_mount_close(&a);
}

int main(void)
{
    if (vh_setup("vfs-failures"))
        return 1;
    RUN(test_failed_write_holds_the_step);
    RUN(test_failed_write_then_removed);
    RUN(test_failed_loose_file_joins_no_step);
    RUN(test_unlinked_writer_releases_its_step);
    RUN(test_rename_past_the_path_limit);
    RUN(test_rename_noreplace);
    RUN(test_restart_with_durable_copies_gone);
    RUN(test_log_line_escapes_names);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
