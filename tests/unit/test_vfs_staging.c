/*
 * test_vfs_staging — the staging directory is one mount's own and trusted
 * for nothing (docs/MOUNT_MODEL.md, "The staging directory"):
 *
 *   * a second mount of a staging directory is refused, naming the holder's
 *     PID, while the first keeps working; one that waits gets it once the
 *     first lets go (a daemon draining after a lazy unmount);
 *   * a symlink planted in STAGING/data at the name of the next staging file
 *     is never followed: the create fails, the file it points to is left
 *     as it was; the same for a staging file replaced by a symlink later
 *     (read, truncate, restart);
 *   * a FIFO there makes the create fail at once instead of blocking it;
 *   * a leftover regular file of ours at that name is replaced;
 *   * staging, data/ and spare/ are made 0700; a staging directory or data/
 *     that a group or others may write, or that another user owns, is
 *     refused.
 *
 * Staging file ids start at 1 in a fresh staging directory and grow by one
 * per new staging file: the next file created is STAGING/data/<n>.
 */
#include "vfs_harness.h"

static st_backend *store;

#define OUTSIDE_TEXT "precious bytes outside staging"

/* Paths below a staging directory (itself up to PATH_MAX). */
#define VH_SUB_MAX (PATH_MAX + 32)

/* STAGING/data/<sid> of m. */
static void data_path(const vh_mount *m, unsigned sid, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/data/%u", m->staging, sid);
}

/* Puts a symlink at STAGING/data/<sid> of m (in place of what is there)
 * to a new file outside staging holding OUTSIDE_TEXT: their paths into
 * planted[VH_SUB_MAX] and outside[PATH_MAX]. */
static void plant_symlink(const vh_mount *m, unsigned sid, char *planted, char *outside)
{
    snprintf(outside, PATH_MAX, "%s/outside-%s", vh_tmp, m->node);
    ut_write_file(outside, OUTSIDE_TEXT, strlen(OUTSIDE_TEXT));
    data_path(m, sid, planted, VH_SUB_MAX);
    CHECK((unlink(planted) == 0 || errno == ENOENT) && symlink(outside, planted) == 0);
}

/* 1 if the file at path still holds OUTSIDE_TEXT, whole. */
static int outside_intact(const char *path)
{
    char buf[256] = "";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    int same = n == (ssize_t)strlen(OUTSIDE_TEXT) && memcmp(buf, OUTSIDE_TEXT, (size_t)n) == 0;
    if (!same)
        fprintf(stderr, "  %s now holds %zd bytes: \"%.*s\"\n", path, n, (int)(n > 0 ? n : 0), buf);
    return same;
}

static int logged(const char *what)
{
    pthread_mutex_lock(&vh_log_lock);
    int found = strstr(vh_logbuf, what) != NULL;
    pthread_mutex_unlock(&vh_log_lock);
    return found;
}

static void test_second_mount_is_refused(void)
{
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "a", "shared", 0));
    if (!a.v)
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/one.txt", "one", VH_PID_A));

    /* The same staging directory, under another node name or the same. */
    char pid[32];
    snprintf(pid, sizeof pid, "PID %ld", (long)getpid());
    CHECK_ERR(vh_mount_open(&b, store, "b", "shared", 0), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), pid) != NULL);
    CHECK(strstr(st_errmsg(), "in use by another ckptfs daemon") != NULL);
    CHECK_ERR(vh_mount_open(&b, store, "a", "shared", 0), ST_ERR_BUSY);

    /* The first one is untouched by the refusals. */
    CHECK_OK(vh_write_str(&a, VH_JOB "/two.txt", "two", VH_PID_A));
    CHECK(vh_file_is_str(&a, VH_JOB "/one.txt", "one"));
    CHECK(vh_file_is_str(&a, VH_JOB "/two.txt", "two"));
    vh_mount_close(&a);

    /* Let go: the next mount gets it, with what the first one left. */
    CHECK_OK(vh_mount_open(&b, store, "a", "shared", 0));
    if (b.v) {
        CHECK(vh_file_is_str(&b, VH_JOB "/two.txt", "two"));
        vh_mount_close(&b);
    }
}

typedef struct waiting_open {
    vh_mount m;
    st_err e;
} waiting_open;

static void *open_waiting(void *arg)
{
    waiting_open *w = arg;
    w->e = vh_mount_open(&w->m, store, "a", "handover", 0);
    return NULL;
}

static void test_restart_waits_for_the_predecessor(void)
{
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "a", "handover", 0));
    if (!a.v)
        return;
    CHECK_OK(vh_write_str(&a, VH_JOB "/kept.txt", "kept", VH_PID_A));
    vh_log_clear();
    vh_staging_wait = 30;
    waiting_open w = {.e = ST_ERR_IO};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, open_waiting, &w) == 0);
    /* It says that it waits, and for whom, before a.v lets go. */
    CHECK(VH_WAIT(logged("waiting up to 30 s"), 10));
    char pid[32];
    snprintf(pid, sizeof pid, "(PID %ld)", (long)getpid());
    CHECK(logged(pid));
    vh_mount_close(&a);
    pthread_join(t, NULL);
    vh_staging_wait = 0;
    CHECK_OK(w.e);
    if (w.m.v) {
        CHECK(vh_file_is_str(&w.m, VH_JOB "/kept.txt", "kept"));
        vh_mount_close(&w.m);
    }
}

static void test_symlink_in_data_is_not_followed(void)
{
    vh_mount m;
    char outside[PATH_MAX], planted[VH_SUB_MAX];
    CHECK_OK(vh_mount_open(&m, store, "sym", "symlink", 0));
    if (!m.v)
        return;
    vh_log_clear();
    plant_symlink(&m, 1, planted, outside);

    /* The create of the file that would get data/1 fails, naming it. */
    st_err e = vh_write_str(&m, VH_JOB "/ckpt-000001.pt", "checkpoint bytes", VH_PID_A);
    CHECK(e != ST_OK);
    CHECK(outside_intact(outside));
    CHECK(logged(planted) && logged("is a symlink"));
    struct stat st;
    CHECK(lstat(planted, &st) == 0 && S_ISLNK(st.st_mode)); /* not ours: left alone */

    /* The next file gets data/2 and works. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000002.pt", "checkpoint bytes", VH_PID_A));
    CHECK(vh_file_is_str(&m, VH_JOB "/ckpt-000002.pt", "checkpoint bytes"));
    vh_mount_close(&m);
}

/* The create through m of path, on a thread: a FIFO must not block it. */
typedef struct fifo_create {
    vh_mount *m;
    const char *path;
    st_err e;
    _Atomic int done;
} fifo_create;

static void *create_on_thread(void *arg)
{
    fifo_create *c = arg;
    c->e = vh_write_str(c->m, c->path, "bytes", VH_PID_A);
    c->done = 1;
    return NULL;
}

static void test_fifo_in_data_does_not_block(void)
{
    vh_mount m;
    char fifo[VH_SUB_MAX];
    CHECK_OK(vh_mount_open(&m, store, "a", "fifo", 0));
    if (!m.v)
        return;
    vh_log_clear();
    data_path(&m, 1, fifo, sizeof fifo);
    CHECK(mkfifo(fifo, 0600) == 0);
    fifo_create c = {.m = &m, .path = VH_JOB "/ckpt-000001.pt", .e = ST_OK};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, create_on_thread, &c) == 0);
    int prompt = VH_WAIT(c.done, 10);
    CHECK(prompt);
    if (!prompt) {
        /* Blocked in open(): a reader lets it through, so the test ends. */
        int r = open(fifo, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        CHECK(VH_WAIT(c.done, 10));
        if (r >= 0)
            close(r);
    }
    pthread_join(t, NULL);
    CHECK(c.e != ST_OK);
    CHECK(logged(fifo) && logged("is a FIFO"));

    /* The mount goes on: the next file works. */
    CHECK_OK(vh_write_str(&m, VH_JOB "/ckpt-000002.pt", "two", VH_PID_A));
    CHECK(vh_file_is_str(&m, VH_JOB "/ckpt-000002.pt", "two"));
    vh_mount_close(&m);
}

static void test_leftover_of_ours_is_replaced(void)
{
    vh_mount m;
    char left[VH_SUB_MAX];
    CHECK_OK(vh_mount_open(&m, store, "a", "leftover", 0));
    if (!m.v)
        return;
    data_path(&m, 1, left, sizeof left);
    ut_write_file(left, "stale bytes of an earlier life", 30);
    CHECK_OK(vh_write_str(&m, VH_JOB "/a.txt", "fresh", VH_PID_A));
    CHECK(vh_file_is_str(&m, VH_JOB "/a.txt", "fresh"));
    vh_mount_close(&m);
}

/* A staging file replaced by a symlink after its file was written: reads,
 * truncates and a restart's recovery never go through it. */
static void test_staging_file_replaced_by_symlink(void)
{
    vh_mount m;
    char outside[PATH_MAX], sp[VH_SUB_MAX];
    CHECK_OK(vh_mount_open(&m, store, "rep", "replaced", 0));
    if (!m.v)
        return;
    CHECK_OK(vh_write_str(&m, VH_JOB "/a.txt", "mine", VH_PID_A));
    plant_symlink(&m, 1, sp, outside);
    st_bytes got = {0};
    CHECK(vh_read(&m, VH_JOB "/a.txt", &got) != ST_OK);
    st_bytes_free(&got);
    st_vfs_attr a;
    CHECK_OK(vh_lookup(&m, VH_JOB "/a.txt", &a));
    CHECK(st_vfs_setattr(m.v, a.ino, ST_VFS_SET_SIZE, 0, 3, 0, 0, NULL, &a) != ST_OK);
    CHECK(outside_intact(outside));
    vh_mount_close(&m);

    vh_log_clear();
    CHECK_OK(vh_mount_open(&m, store, "rep", "replaced", 0));
    if (!m.v)
        return;
    CHECK(logged(sp) && logged("not a regular file"));
    CHECK(!vh_exists(&m, VH_JOB "/a.txt")); /* nothing to serve it from */
    CHECK(outside_intact(outside));
    vh_mount_close(&m);
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? st.st_mode & 07777 : 01;
}

static void test_modes_and_owner(void)
{
    vh_mount m;
    char path[VH_SUB_MAX];
    CHECK_OK(vh_mount_open(&m, store, "a", "modes", 0));
    if (!m.v)
        return;
    CHECK(mode_of(m.staging) == 0700);
    snprintf(path, sizeof path, "%s/data", m.staging);
    CHECK(mode_of(path) == 0700);
    snprintf(path, sizeof path, "%s/spare", m.staging);
    CHECK(mode_of(path) == 0700);
    char staging[PATH_MAX];
    snprintf(staging, sizeof staging, "%s", m.staging);
    vh_mount_close(&m);

    /* Writable by others: refused, saying why. */
    CHECK(chmod(staging, 0777) == 0);
    CHECK_ERR(vh_mount_open(&m, store, "a", "modes", 0), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "writable by others") != NULL);
    CHECK(chmod(staging, 0700) == 0);
    snprintf(path, sizeof path, "%s/data", staging);
    CHECK(chmod(path, 0770) == 0);
    CHECK_ERR(vh_mount_open(&m, store, "a", "modes", 0), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), path) != NULL && strstr(st_errmsg(), "its group") != NULL);
    CHECK(chmod(path, 0700) == 0);

    /* data/ as a symlink to a directory elsewhere: refused. */
    char elsewhere[PATH_MAX];
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", vh_tmp);
    CHECK(rename(path, elsewhere) == 0 && symlink(elsewhere, path) == 0);
    CHECK_ERR(vh_mount_open(&m, store, "a", "modes", 0), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "is a symlink, not a directory") != NULL);
    CHECK(unlink(path) == 0 && rename(elsewhere, path) == 0);

    /* Another user's: refused (root can hand it to another uid to see). */
    if (geteuid() == 0) {
        CHECK(chown(staging, 65534, 65534) == 0);
        CHECK_ERR(vh_mount_open(&m, store, "a", "modes", 0), ST_ERR_INVALID);
        CHECK(strstr(st_errmsg(), "owned by uid 65534") != NULL);
        CHECK(chown(staging, 0, 0) == 0);
    }
    CHECK_OK(vh_mount_open(&m, store, "a", "modes", 0));
    if (m.v)
        vh_mount_close(&m);
}

int main(void)
{
    if (vh_setup("vfs-staging"))
        return 1;
    CHECK_OK(st_backend_mem_open(&store));
    RUN(test_second_mount_is_refused);
    RUN(test_restart_waits_for_the_predecessor);
    RUN(test_symlink_in_data_is_not_followed);
    RUN(test_fifo_in_data_does_not_block);
    RUN(test_leftover_of_ours_is_replaced);
    RUN(test_staging_file_replaced_by_symlink);
    RUN(test_modes_and_owner);
    st_backend_close(store);
    vh_teardown();
    return ut_finish();
}
