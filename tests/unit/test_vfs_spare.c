/*
 * test_vfs_spare — recycled staging files (docs/MOUNT_MODEL.md, "Recycled
 * staging files") through the mount model's C API: a file written over a
 * recycled one reads back as exactly its own bytes while it is written, after
 * its close and after a restart (stale bytes beyond its size, in a hole, or
 * past a truncate are never seen); the pool keeps to its cap; a file that the
 * running upload may read is not handed out until that upload ends; the
 * staging cap empties the pool before it refuses a write; and with nothing in
 * the pool, a new file takes the staging file of a durable namesake of an
 * older step, never the newest durable step's.
 */
#include <dirent.h>

#include "vfs_harness.h"

#define MIB (1u << 20)

static st_backend *store;

static void store_reset(void)
{
    st_backend_close(store);
    store = NULL;
    CHECK_OK(st_backend_mem_open(&store));
}

static st_vfs_stats stats_of(vh_mount *m)
{
    st_vfs_stats s;
    CHECK_OK(st_vfs_get_stats(m->v, &s));
    free(s.jobs);
    return s;
}

/* Length of the only staging file in m's STAGING/data (-1: not exactly one). */
static long staging_file_length(vh_mount *m)
{
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/data", m->staging);
    DIR *d = opendir(dir);
    long len = -1;
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));) {
        if (de->d_name[0] == '.')
            continue;
        struct stat st;
        char p[PATH_MAX + 300 + 16];
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (stat(p, &st) == 0)
            len = (long)st.st_size;
        n++;
    }
    if (d)
        closedir(d);
    return n == 1 ? len : -1;
}

static uint8_t *filled(size_t len, uint8_t byte)
{
    uint8_t *b = malloc(len);
    CHECK(b != NULL);
    memset(b, byte, len);
    return b;
}

/* Writes a 4 MiB file of 0xAA and removes it: its staging file enters the
 * pool. */
static void leave_a_spare(vh_mount *m)
{
    uint8_t *old = filled(4 * MIB, 0xAA);
    CHECK_OK(vh_write(m, VH_JOB "/old.bin", old, 4 * MIB, VH_PID_A));
    CHECK_OK(vh_unlink(m, VH_JOB "/old.bin"));
    free(old);
    CHECK(stats_of(m).spare_files == 1);
    CHECK(stats_of(m).spare_bytes == 4 * MIB);
}

/* A fresh store and a mount named name whose pool may hold spare bytes. */
static void open_spare_mount(vh_mount *m, const char *name, uint64_t spare)
{
    store_reset();
    vh_staging_spare = spare;
    CHECK_OK(vh_mount_open(m, store, "n1", name, 0));
}

/* open_spare_mount() with a 64 MiB pool that holds one 4 MiB spare of 0xAA. */
static void open_over_a_spare(vh_mount *m, const char *name)
{
    open_spare_mount(m, name, 64 * MIB);
    leave_a_spare(m);
}

static void close_spare_mount(vh_mount *m)
{
    vh_mount_close(m);
    vh_staging_spare = 0;
}

static void test_recycled_file_shows_only_its_bytes(void)
{
    vh_mount m;
    open_over_a_spare(&m, "spare-bytes");

    st_vfs_handle *w;
    CHECK_OK(vh_create(&m, VH_JOB "/new.bin", O_WRONLY | O_TRUNC, VH_PID_A, &w));
    CHECK(stats_of(&m).spare_files == 0);
    CHECK(stats_of(&m).spare_reused_bytes == 4 * MIB);
    uint8_t *b = filled(MIB, 0xBB);
    CHECK_OK(vh_pwrite(&m, w, b, MIB, 0));
    /* While it is written: a reader sees 1 MiB, not the 4 MiB underneath. */
    st_bytes got = {0};
    CHECK_OK(vh_read(&m, VH_JOB "/new.bin", &got));
    CHECK(got.len == MIB && memcmp(got.data, b, MIB) == 0);
    /* A write past a hole: the hole reads as zeros, not as 0xAA. */
    CHECK_OK(vh_pwrite(&m, w, b, 1000, 3 * MIB));
    CHECK_OK(vh_close(&m, w));
    uint8_t *want = calloc(1, 3 * MIB + 1000);
    memcpy(want, b, MIB);
    memcpy(want + 3 * MIB, b, 1000);
    CHECK(vh_file_is(&m, VH_JOB "/new.bin", want, 3 * MIB + 1000));
    /* close cut the tail: the staging file is as long as the file */
    CHECK(staging_file_length(&m) == 3 * MIB + 1000);
    vh_mount_close(&m);

    /* A restart re-reads sizes from the staging files. */
    CHECK_OK(vh_mount_open(&m, store, "n1", "spare-bytes", 0));
    CHECK(vh_file_is(&m, VH_JOB "/new.bin", want, 3 * MIB + 1000));
    close_spare_mount(&m);
    st_bytes_free(&got);
    free(want);
    free(b);
}

/* close() returns after FUSE's FLUSH; its RELEASE comes later, so a file
 * removed right after its close may still have the handle open (the write
 * cache test saw it under ASan). Its staging file enters the pool when that
 * handle goes, at its final length (before: unlinked, no spare), and the
 * next new file takes it. */
static void test_removed_while_still_open(void)
{
    vh_mount m;
    open_spare_mount(&m, "spare-open", 64 * MIB);
    uint8_t *b = filled(3 * MIB, 0xCC);
    st_vfs_handle *w;
    CHECK_OK(vh_create(&m, VH_JOB "/old.bin", O_WRONLY | O_TRUNC, VH_PID_A, &w));
    CHECK_OK(vh_pwrite(&m, w, b, 2 * MIB, 0));
    CHECK_OK(st_vfs_flush(m.v, w)); /* close(2) returned */
    CHECK_OK(vh_unlink(&m, VH_JOB "/old.bin"));
    CHECK(stats_of(&m).spare_files == 0);      /* still open: not handed out */
    CHECK_OK(vh_pwrite(&m, w, b, 3 * MIB, 0)); /* an unlinked file is still written */
    st_vfs_release(m.v, w);                    /* the RELEASE */
    CHECK(stats_of(&m).spare_files == 1);
    CHECK(stats_of(&m).spare_bytes == 3 * MIB);

    st_vfs_handle *n;
    CHECK_OK(vh_create(&m, VH_JOB "/new.bin", O_WRONLY | O_TRUNC, VH_PID_A, &n));
    CHECK(stats_of(&m).spare_reused_bytes == 3 * MIB);
    CHECK_OK(vh_pwrite(&m, n, b, 1000, 0));
    CHECK_OK(vh_close(&m, n));
    CHECK(vh_file_is(&m, VH_JOB "/new.bin", b, 1000));
    CHECK(staging_file_length(&m) == 1000);
    close_spare_mount(&m);
    free(b);
}

/* A file shorter than the spare it was given, closed: the tail is gone. */
static void test_close_cuts_the_tail(void)
{
    vh_mount m;
    open_over_a_spare(&m, "spare-tail");
    uint8_t *b = filled(MIB + 5, 0xCC);
    CHECK_OK(vh_write(&m, VH_JOB "/short.bin", b, MIB + 5, VH_PID_A));
    CHECK(stats_of(&m).spare_reused_bytes == 4 * MIB);
    CHECK(staging_file_length(&m) == MIB + 5);
    CHECK(vh_file_is(&m, VH_JOB "/short.bin", b, MIB + 5));
    free(b);
    close_spare_mount(&m);
}

/* truncate of a recycled file not yet closed: the bytes it adds are zeros. */
static void test_truncate_up_reads_zeros(void)
{
    vh_mount m;
    open_over_a_spare(&m, "spare-trunc");
    st_vfs_handle *w;
    CHECK_OK(vh_create(&m, VH_JOB "/t.bin", O_RDWR | O_TRUNC, VH_PID_A, &w));
    uint8_t *b = filled(MIB, 0xDD);
    CHECK_OK(vh_pwrite(&m, w, b, MIB, 0));
    st_vfs_attr a;
    CHECK_OK(vh_lookup(&m, VH_JOB "/t.bin", &a));
    CHECK_OK(st_vfs_setattr(m.v, a.ino, ST_VFS_SET_SIZE, 0, 2 * MIB, 0, 0, w, &a));
    uint8_t *want = calloc(1, 2 * MIB);
    memcpy(want, b, MIB);
    CHECK(vh_file_is(&m, VH_JOB "/t.bin", want, 2 * MIB));
    CHECK_OK(vh_close(&m, w));
    CHECK(vh_file_is(&m, VH_JOB "/t.bin", want, 2 * MIB));
    free(want);
    free(b);
    close_spare_mount(&m);
}

/* The pool keeps to --staging-spare; 0 keeps nothing. */
static void test_pool_cap(void)
{
    vh_mount m;
    open_spare_mount(&m, "spare-cap", 6 * MIB);
    uint8_t *b = filled(4 * MIB, 0xEE);
    CHECK_OK(vh_write(&m, VH_JOB "/a", b, 4 * MIB, VH_PID_A));
    CHECK_OK(vh_write(&m, VH_JOB "/b", b, 4 * MIB, VH_PID_A));
    CHECK_OK(vh_unlink(&m, VH_JOB "/a"));
    CHECK_OK(vh_unlink(&m, VH_JOB "/b"));
    st_vfs_stats s = stats_of(&m);
    CHECK(s.spare_files == 1 && s.spare_bytes == 4 * MIB);
    vh_mount_close(&m);
    /* the pool's files go at unmount */
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/spare", m.staging);
    DIR *d = opendir(dir);
    int left = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        left += de->d_name[0] != '.';
    if (d)
        closedir(d);
    CHECK(left == 0);

    vh_staging_spare = 0;
    CHECK_OK(vh_mount_open(&m, store, "n1", "spare-off", 0));
    CHECK_OK(vh_write(&m, VH_JOB "/a", b, 4 * MIB, VH_PID_A));
    CHECK_OK(vh_unlink(&m, VH_JOB "/a"));
    CHECK(stats_of(&m).spare_files == 0);
    vh_mount_close(&m);
    free(b);
}

/* With a staging cap, the pool counts against it and goes first: a write
 * that fits once the pool is emptied is not refused. */
static void test_staging_cap_empties_the_pool(void)
{
    store_reset();
    vh_staging_spare = 64 * MIB;
    vh_staging_cap = 6 * MIB;
    vh_mount m;
    CHECK_OK(vh_mount_open(&m, store, "n1", "spare-stcap", 0));
    uint8_t *b = filled(4 * MIB, 0x11);
    CHECK_OK(vh_write(&m, VH_JOB "/a", b, 2 * MIB, VH_PID_A));
    CHECK_OK(vh_write(&m, VH_JOB "/b", b, 2 * MIB, VH_PID_A));
    CHECK_OK(vh_unlink(&m, VH_JOB "/a"));
    CHECK(stats_of(&m).spare_bytes == 2 * MIB);
    /* b (2 MiB) + the pool (2 MiB) + 4 MiB more is over 6 MiB: the new file
     * takes the spare, so only b and c are staged, and the write fits. */
    CHECK_OK(vh_write(&m, VH_JOB "/c", b, 4 * MIB, VH_PID_A));
    CHECK(vh_file_is(&m, VH_JOB "/c", b, 4 * MIB));
    /* a spare left in the pool goes before a write is refused */
    CHECK_OK(vh_unlink(&m, VH_JOB "/b"));
    CHECK(stats_of(&m).spare_bytes == 2 * MIB);
    st_vfs_handle *w;
    CHECK_OK(vh_create(&m, VH_JOB "/d", O_WRONLY | O_TRUNC, VH_PID_A, &w));
    CHECK_OK(vh_pwrite(&m, w, b, 2 * MIB, 0)); /* over the spare it took */
    CHECK_OK(vh_close(&m, w));
    CHECK(vh_file_is(&m, VH_JOB "/d", b, 2 * MIB));
    free(b);
    vh_mount_close(&m);
    vh_staging_cap = 0;
    vh_staging_spare = 0;
}

/* A file the running upload may still read is not handed out until that
 * upload ends: the upload's pack PUT is held, the file is removed, and a new
 * file created meanwhile must not write over it. */
static void test_upload_holds_its_files(void)
{
    store_reset();
    vh_staging_spare = 64 * MIB;
    char hold[PATH_MAX];
    snprintf(hold, sizeof hold, "%s/hold", vh_tmp);
    FILE *f = fopen(hold, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    char spec[PATH_MAX + 16];
    snprintf(spec, sizeof spec, "put_hold=%s", hold);
    vh_mount m;
    CHECK_OK(vh_mount_open_fault(&m, store, "n1", "spare-held", 1, spec));
    uint8_t *b = filled(4 * MIB, 0x22);
    for (size_t i = 0; i < 4 * MIB; i++)
        b[i] = (uint8_t)(i * 2654435761u >> 13); /* not one repeated chunk */
    CHECK_OK(vh_write(&m, VH_JOB "/checkpoint-1/a.bin", b, 4 * MIB, VH_PID_A));
    st_vfs_complete_all(m.v, VH_JOB, 0);
    usleep(500 * 1000); /* the upload has read the file and waits on its PUT */
    CHECK_OK(vh_unlink(&m, VH_JOB "/checkpoint-1/a.bin"));
    CHECK(stats_of(&m).spare_files == 1);
    CHECK_OK(vh_write(&m, VH_JOB "/other.bin", b, MIB, VH_PID_A));
    CHECK(stats_of(&m).spare_reused_bytes == 0);
    CHECK(unlink(hold) == 0);
    CHECK(VH_WAIT(st_vfs_wait_idle(m.v, 0) == ST_OK, 20));
    CHECK_OK(vh_write(&m, VH_JOB "/third.bin", b, MIB, VH_PID_A));
    CHECK(stats_of(&m).spare_reused_bytes == 4 * MIB);
    free(b);
    vh_mount_close(&m);
    vh_staging_spare = 0;
}

/* Writes a 4 MiB checkpoint file of step (seeded by it) and waits until it
 * is durable. */
static void save_durable(vh_mount *m, const char *name, uint64_t step)
{
    char path[128];
    snprintf(path, sizeof path, VH_JOB "/%s", name);
    uint8_t *b = vh_data(4 * MIB, step);
    CHECK_OK(vh_write(m, path, b, 4 * MIB, VH_PID_A));
    free(b);
    st_vfs_complete_all(m->v, VH_JOB, 0); /* a step directory has no rule of its own here */
    CHECK_OK(st_vfs_wait_idle(m->v, 20));
    CHECK(strcmp(vh_state(m, step), "durable") == 0);
}

static int holds_step(vh_mount *m, const char *name, uint64_t step)
{
    char path[128];
    snprintf(path, sizeof path, VH_JOB "/%s", name);
    uint8_t *b = vh_data(4 * MIB, step);
    int same = vh_file_is(m, path, b, 4 * MIB);
    free(b);
    return same;
}

/* Rule 5: a trainer that keeps every checkpoint deletes nothing, so the pool
 * stays empty. A new file then takes the staging file of its namesake of an
 * older step once a newer step is durable; the newest durable step keeps its
 * copy, a file with no namesake takes nothing, and the old file reads its
 * own bytes from the store, before and after a restart. */
static void test_durable_namesake_taken(void)
{
    store_reset();
    vh_staging_spare = 64 * MIB;
    vh_mount m;
    CHECK_OK(vh_mount_open(&m, store, "n1", "spare-durable", 1));
    if (!m.v)
        return;
    save_durable(&m, "ckpt-000010.pt", 10);
    save_durable(&m, "ckpt-000020.pt", 20);
    /* Step 10 was the newest durable step when step 20's file was made. */
    CHECK(stats_of(&m).spare_durable_files == 0);
    CHECK(stats_of(&m).spare_reused_bytes == 0);
    save_durable(&m, "ckpt-000030.pt", 30);
    CHECK(stats_of(&m).spare_durable_files == 1);
    CHECK(stats_of(&m).spare_reused_bytes == 4 * MIB);
    CHECK(vh_staging_files(&m) == 2);                /* steps 20 and 30: step 10 is remote again */
    save_durable(&m, "checkpoint-40/notes.bin", 40); /* no namesake: takes nothing */
    CHECK(stats_of(&m).spare_durable_files == 1);
    CHECK(vh_staging_files(&m) == 3);
    CHECK(holds_step(&m, "ckpt-000010.pt", 10)); /* fetched from the store */
    CHECK(holds_step(&m, "ckpt-000020.pt", 20));
    CHECK(holds_step(&m, "ckpt-000030.pt", 30));
    vh_mount_close(&m);

    CHECK_OK(vh_mount_open(&m, store, "n1", "spare-durable", 1));
    if (m.v) {
        CHECK(holds_step(&m, "ckpt-000010.pt", 10));
        CHECK(holds_step(&m, "ckpt-000020.pt", 20));
        CHECK(holds_step(&m, "ckpt-000030.pt", 30));
        CHECK(holds_step(&m, "checkpoint-40/notes.bin", 40));
        vh_mount_close(&m);
    }
    vh_staging_spare = 0;
}

int main(void)
{
    if (vh_setup("vfs-spare"))
        return 1;
    RUN(test_recycled_file_shows_only_its_bytes);
    RUN(test_removed_while_still_open);
    RUN(test_close_cuts_the_tail);
    RUN(test_truncate_up_reads_zeros);
    RUN(test_pool_cap);
    RUN(test_staging_cap_empties_the_pool);
    RUN(test_upload_holds_its_files);
    RUN(test_durable_namesake_taken);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
