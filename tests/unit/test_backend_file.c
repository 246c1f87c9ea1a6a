/*
 * test_backend_file — the file:// backend: the shared conformance suite on a
 * fresh temp directory, then what only a file store has: URL parsing, root
 * creation and bad roots, the on-disk layout, temp files, symlinks planted
 * inside the root, a full disk (tmpfs, when mounting is allowed), a put that
 * leaves no pages in the page cache, and a check that no test wrote anything
 * outside its root.
 *
 * Everything lives under one mkdtemp() directory, removed at the end:
 *   T/store    the root the suite and most tests use
 *   T/outside  files that symlinks point to; must stay untouched
 *   T/afile    a regular file, for "root is not a directory" cases
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend_conformance.h"
#include "backend/st_backend.h"
#include "backend/st_backend_open.h"
#include "ut.h"

static char tdir[64];
static char root[PATH_MAX];
static char outside[PATH_MAX];

/* tdir + "/" + rel, in a rotating set of buffers so two can be used at once. */
static const char *tp(const char *rel)
{
    static char bufs[4][PATH_MAX];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, PATH_MAX, "%s/%s", tdir, rel);
    return b;
}

/* 1 if path is a regular file (not followed) holding exactly s. */
static int file_is(const char *path, const char *s)
{
    struct stat st;
    if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
        return 0;
    char buf[256] = {0};
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    return n == strlen(s) && memcmp(buf, s, n) == 0;
}

static int exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Counts entries named ".tmp.*" anywhere below path (no symlinks followed). */
static int tmp_count;
static int count_tmp_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    if (strncmp(path + ftw->base, ".tmp.", 5) == 0)
        tmp_count++;
    return 0;
}
static int count_tmp(const char *path)
{
    tmp_count = 0;
    nftw(path, count_tmp_entry, 16, FTW_PHYS);
    return tmp_count;
}

/* Number of entries in a directory other than "." and "..", -1 on error. */
static int dir_entries(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static st_backend *open_root(void)
{
    st_backend *b = NULL;
    CHECK_OK(st_backend_file_open(root, &b));
    return b;
}

/* ---- the shared suite ---- */

static void test_conformance(void)
{
    st_backend *b = open_root();
    if (!b)
        return;
    char scratch[64];
    snprintf(scratch, sizeof scratch, "conformance/run-%ld", (long)getpid());
    backend_conformance_run(b, scratch);
    st_backend_close(b);
    /* del pruned every directory it emptied, and no temp file was left. */
    CHECK(dir_entries(root) == 0);
    CHECK(count_tmp(root) == 0);
}

/* ---- URLs ---- */

static void test_url_valid(void)
{
    char url[PATH_MAX + 64];
    const char *forms[] = {"file://%s", "file://localhost%s", "FILE://%s", "file://%s/",
                           "file://%s//"};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0] + 1; i++) {
        if (i < sizeof forms / sizeof forms[0])
            snprintf(url, sizeof url, forms[i], root);
        else /* a percent-escape: "st%6Fre" is "store" */
            snprintf(url, sizeof url, "file://%s/st%%6Fre", tdir);
        st_backend *b = NULL;
        st_err e = st_backend_open(url, &b);
        CHECK_OK(e);
        if (e) {
            fprintf(stderr, "  url %s\n", url);
            continue;
        }
        CHECK(strcmp(b->ops->scheme, "file") == 0);
        /* It is the same root: a put shows up at root/url@/probe. */
        CHECK_OK(st_put(b, "url/probe", "p", 1));
        CHECK(file_is(tp("store/url@/probe"), "p"));
        CHECK_OK(st_del(b, "url/probe"));
        CHECK(!exists(tp("store/url@")));
        st_backend_close(b);
    }
}

static void test_url_invalid(void)
{
    char urls[20][PATH_MAX + 64];
    const char *forms[] = {"",
                           "file:",
                           "file:%s/rel",
                           "file://",
                           "file:///",
                           "file://host%s/h",
                           "file://relative/dir",
                           "file:relative",
                           "file://%s/pct%%zz",
                           "file://%s/pct%%4",
                           "file://%s/nul%%00x",
                           "file://%s/sl%%2Fx",
                           "file://%s/q?x=1",
                           "file://%s/frag#f",
                           "ftp://%s/ftp",
                           "nonsense",
                           "://x",
                           "file//%s/noscheme",
                           "file:/%s/oneslash",
                           "file://localhostX%s/lh"};
    size_t n = sizeof forms / sizeof forms[0];
    for (size_t i = 0; i < n; i++) {
        snprintf(urls[i], sizeof urls[i], forms[i], tdir);
        st_backend *b = (st_backend *)&b; /* must be reset to NULL */
        st_clearerr();
        st_err e = st_backend_open(urls[i], &b);
        CHECK_ERR(e, ST_ERR_INVALID);
        CHECK(b == NULL);
        CHECK(st_errmsg()[0] != '\0');
        if (e != ST_ERR_INVALID)
            fprintf(stderr, "  accepted bad url \"%s\"\n", urls[i]);
        if (e == ST_OK)
            st_backend_close(b);
    }
    CHECK_ERR(st_backend_open(NULL, &(st_backend *){NULL}), ST_ERR_INVALID);

    /* Known but not built schemes say so, rather than "unknown". */
    st_backend *b = NULL;
    st_err e = st_backend_open("s3://bucket/prefix", &b);
    if (e == ST_ERR_UNSUPPORTED)
        CHECK(strstr(st_errmsg(), "not built") != NULL);
    else
        CHECK(strstr(st_errmsg(), "unknown scheme") == NULL);
    st_backend_close(b);

    /* The direct constructor wants an absolute path. */
    CHECK_ERR(st_backend_file_open(NULL, &b), ST_ERR_INVALID);
    CHECK_ERR(st_backend_file_open("", &b), ST_ERR_INVALID);
    CHECK_ERR(st_backend_file_open("relative/dir", &b), ST_ERR_INVALID);
    CHECK(!exists("relative"));
}

/* ---- roots ---- */

static void test_root_creation(void)
{
    st_backend *b = NULL;
    CHECK_OK(st_backend_file_open(tp("deep/er/root"), &b));
    struct stat st;
    CHECK(stat(tp("deep/er/root"), &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0755);
    CHECK_OK(st_put(b, "k", "v", 1));
    CHECK(file_is(tp("deep/er/root/k"), "v"));
    st_backend_close(b);
    /* Opening an existing root keeps its content. */
    CHECK_OK(st_backend_file_open(tp("deep/er/root"), &b));
    uint64_t sz = 0;
    CHECK_OK(st_stat(b, "k", &sz));
    CHECK(sz == 1);
    st_backend_close(b);
    rm_rf(tp("deep"));
}

static void test_root_not_a_directory(void)
{
    ut_write_text(tp("afile"), "plain");
    st_backend *b = NULL;
    st_clearerr();
    CHECK_ERR(st_backend_file_open(tp("afile"), &b), ST_ERR_PERMANENT);
    CHECK(b == NULL && strstr(st_errmsg(), "not a directory") != NULL);
    /* A parent that is a regular file: the root cannot be created. */
    st_clearerr();
    CHECK_ERR(st_backend_file_open(tp("afile/sub/root"), &b), ST_ERR_PERMANENT);
    CHECK(b == NULL && strstr(st_errmsg(), "afile") != NULL);
    char url[PATH_MAX + 16];
    snprintf(url, sizeof url, "file://%s", tp("afile/sub"));
    CHECK_ERR(st_backend_open(url, &b), ST_ERR_PERMANENT);
    CHECK(file_is(tp("afile"), "plain"));
}

/* ---- layout ---- */

static void test_layout(void)
{
    st_backend *b = open_root();
    if (!b)
        return;
    CHECK_OK(st_put(b, "a/b/c", "ABC", 3));
    CHECK_OK(st_put(b, "a/b", "AB", 2));
    CHECK(file_is(tp("store/a@/b@/c"), "ABC"));
    CHECK(file_is(tp("store/a@/b"), "AB"));
    /* Deleting the deeper key prunes its now-empty directory only. */
    CHECK_OK(st_del(b, "a/b/c"));
    CHECK(!exists(tp("store/a@/b@")));
    CHECK(file_is(tp("store/a@/b"), "AB"));
    CHECK_OK(st_del(b, "a/b"));
    CHECK(!exists(tp("store/a@")));
    CHECK(exists(root) && dir_entries(root) == 0);
    /* A directory of unrelated objects survives the prune of a sibling. */
    CHECK_OK(st_put(b, "x/y/1", "1", 1));
    CHECK_OK(st_put(b, "x/z", "z", 1));
    CHECK_OK(st_del(b, "x/y/1"));
    CHECK(!exists(tp("store/x@/y@")) && file_is(tp("store/x@/z"), "z"));
    CHECK_OK(st_del(b, "x/z"));
    CHECK(dir_entries(root) == 0);
    st_backend_close(b);
}

/* ---- temp files and foreign entries ---- */

static void test_temp_and_foreign_entries(void)
{
    st_backend *b = open_root();
    if (!b)
        return;
    CHECK_OK(st_put(b, "x/y", "Y", 1));
    /* A crashed writer's temps, and things that are not objects. */
    ut_write_text(tp("store/.tmp.1.2.3"), "stale");
    ut_write_text(tp("store/x@/.tmp.9.9.9"), "stale");
    CHECK(mkdir(tp("store/plain"), 0755) == 0);
    ut_write_text(tp("store/plain/f"), "not ours");
    ut_write_text(tp("store/bad name"), "space");
    CHECK(mkfifo(tp("store/fifo"), 0644) == 0);
    CHECK(mkdir(tp("store/emptyobj"), 0755) == 0); /* a directory at an object's name */

    bc_listed l = {0};
    CHECK_OK(st_list(b, "", bc_collect, &l));
    CHECK(l.n == 1 && strcmp(l.keys[0], "x/y") == 0);
    bc_listed_free(&l);

    st_bytes got = {0};
    uint64_t sz;
    CHECK_ERR(st_get(b, ".tmp.1.2.3", 0, ST_GET_TO_END, &got), ST_ERR_INVALID);
    CHECK_ERR(st_get(b, "fifo", 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND); /* and no hang */
    CHECK_ERR(st_stat(b, "fifo", &sz), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_get(b, "emptyobj", 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat(b, "plain", &sz), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_get(b, "plain/f", 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);
    CHECK_OK(st_del(b, "emptyobj"));
    CHECK(exists(tp("store/emptyobj")));
    /* A put onto a directory's name fails cleanly and leaves no temp. */
    CHECK(st_put(b, "emptyobj", "v", 1) != ST_OK);

    /* Many puts and overwrites: no temp file survives any of them. */
    uint8_t buf[3000];
    for (int i = 0; i < 200; i++) {
        char key[64];
        snprintf(key, sizeof key, "t/%d/o%d", i % 7, i % 13);
        ut_rand_fill(buf, (size_t)(i * 13 % 3000), (uint64_t)i);
        CHECK_OK(st_put(b, key, buf, (size_t)(i * 13 % 3000)));
    }
    CHECK(count_tmp(root) == 2);
    CHECK_OK(st_list(b, "t/", bc_collect, &l));
    CHECK(l.n == 7 * 13 && bc_ascending(&l));
    for (size_t i = 0; i < l.n; i++)
        CHECK_OK(st_del(b, l.keys[i]));
    bc_listed_free(&l);
    CHECK(!exists(tp("store/t@")));
    CHECK_OK(st_del(b, "x/y"));
    CHECK(file_is(tp("store/x@/.tmp.9.9.9"), "stale")); /* del leaves foreign files alone */

    st_bytes_free(&got);
    st_backend_close(b);
    rm_rf(root);
    CHECK(mkdir(root, 0755) == 0);
}

/* ---- symlinks inside the root ---- */

static void test_symlinks(void)
{
    CHECK(mkdir(outside, 0755) == 0);
    ut_write_text(tp("outside/victim"), "ORIGINAL");
    CHECK(mkdir(tp("outside/dir"), 0755) == 0);
    ut_write_text(tp("outside/dir/x"), "SECRET");
    CHECK(symlink(tp("outside/victim"), tp("store/evil")) == 0);
    CHECK(symlink(tp("outside/victim"), tp("store/evil2")) == 0);
    CHECK(symlink(tp("outside/dir"), tp("store/d@")) == 0);

    st_backend *b = open_root();
    if (!b)
        return;
    st_bytes got = {0};
    uint64_t sz;

    /* A put onto a symlink replaces the link, never writes through it. */
    CHECK_OK(st_put(b, "evil", "NEW", 3));
    CHECK(file_is(tp("outside/victim"), "ORIGINAL"));
    CHECK(file_is(tp("store/evil"), "NEW"));
    CHECK_OK(st_get(b, "evil", 0, ST_GET_TO_END, &got));
    CHECK(got.len == 3 && memcmp(got.data, "NEW", 3) == 0);

    /* Reads do not follow a link either. */
    CHECK_ERR(st_get(b, "evil2", 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat(b, "evil2", &sz), ST_ERR_NOT_FOUND);

    /* A linked directory component is never entered. */
    CHECK(st_put(b, "d/y", "Y", 1) != ST_OK);
    CHECK(!exists(tp("outside/dir/y")));
    CHECK_ERR(st_get(b, "d/x", 0, ST_GET_TO_END, &got), ST_ERR_NOT_FOUND);
    CHECK_ERR(st_stat(b, "d/x", &sz), ST_ERR_NOT_FOUND);
    bc_listed l = {0};
    CHECK_OK(st_list(b, "", bc_collect, &l));
    CHECK(l.n == 1 && strcmp(l.keys[0], "evil") == 0);
    bc_listed_free(&l);
    CHECK_OK(st_list(b, "d/", bc_collect, &l));
    CHECK(l.n == 0);
    bc_listed_free(&l);
    CHECK_OK(st_del(b, "d/x"));
    CHECK(file_is(tp("outside/dir/x"), "SECRET"));

    /* del of a link removes the link only. */
    CHECK_OK(st_del(b, "evil2"));
    CHECK(!exists(tp("store/evil2")) && file_is(tp("outside/victim"), "ORIGINAL"));
    CHECK_OK(st_del(b, "evil"));
    CHECK(file_is(tp("outside/victim"), "ORIGINAL"));
    CHECK(unlink(tp("store/d@")) == 0);
    CHECK(dir_entries(root) == 0);
    CHECK(dir_entries(tp("outside/dir")) == 1);
    st_bytes_free(&got);
    st_backend_close(b);
}

/* ---- put racing the empty-directory prune of del ---- */

typedef struct prune_racer {
    st_backend *b;
    int id;
    int failures;
    char first[600];
} prune_racer;

/*
 * Each thread puts and deletes its own key in one shared deep directory, so
 * other threads' dels keep removing the directories this thread's put has
 * just created or opened. Every put must still succeed (the backend retries
 * from the root), and read back intact before its del.
 */
static void *prune_racer_main(void *arg)
{
    prune_racer *r = arg;
    st_bytes got = {0};
    char key[64];
    snprintf(key, sizeof key, "race/p/q/r/s/t%d", r->id);
    for (int i = 0; i < 1000; i++) {
        uint8_t data[16];
        ut_rand_fill(data, sizeof data, (uint64_t)(r->id * 1000 + i + 1));
        st_err e = st_put(r->b, key, data, sizeof data);
        if (e == ST_OK)
            e = st_get(r->b, key, 0, ST_GET_TO_END, &got);
        if (e == ST_OK && (got.len != sizeof data || memcmp(got.data, data, sizeof data)))
            e = st_seterr(ST_ERR_CORRUPT, "read back differs");
        if (e == ST_OK)
            e = st_del(r->b, key);
        if (e != ST_OK && !r->failures++)
            snprintf(r->first, sizeof r->first, "%s: %.500s", st_strerror(e), st_errmsg());
    }
    st_bytes_free(&got);
    return NULL;
}

static void test_put_races_prune(void)
{
    st_backend *b = open_root();
    if (!b)
        return;
    enum { N = 4 };
    pthread_t th[N];
    prune_racer r[N];
    for (int i = 0; i < N; i++) {
        r[i] = (prune_racer){.b = b, .id = i};
        CHECK(pthread_create(&th[i], NULL, prune_racer_main, &r[i]) == 0);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        CHECK(r[i].failures == 0);
        if (r[i].failures)
            fprintf(stderr, "  thread %d: %d failures, first: %s\n", i, r[i].failures, r[i].first);
    }
    CHECK(dir_entries(root) == 0 && count_tmp(root) == 0);
    st_backend_close(b);
}

/* ---- a full disk ---- */

static void test_no_space(void)
{
    const char *mnt = tp("small");
    CHECK(mkdir(mnt, 0755) == 0);
    if (mount("tmpfs", mnt, "tmpfs", 0, "size=256k") != 0) {
        char why[160];
        snprintf(why, sizeof why, "test_no_space needs a 256k tmpfs (root): mount: %s",
                 strerror(errno));
        UT_SKIP(why);
        rmdir(mnt);
        return;
    }
    char small_root[PATH_MAX];
    snprintf(small_root, sizeof small_root, "%s/store", mnt);
    st_backend *b = NULL;
    CHECK_OK(st_backend_file_open(small_root, &b));
    if (b) {
        uint8_t buf[40000];
        st_err e = ST_OK;
        int stored = 0;
        for (int i = 0; i < 100 && e == ST_OK; i++) {
            char key[32];
            snprintf(key, sizeof key, "fill/o%d", i);
            ut_rand_fill(buf, sizeof buf, (uint64_t)i + 1);
            e = st_put(b, key, buf, sizeof buf);
            if (e == ST_OK)
                stored++;
        }
        CHECK_ERR(e, ST_ERR_NOSPACE);
        CHECK(stored > 0);
        CHECK(count_tmp(small_root) == 0);
        /* What was stored before the disk filled is intact. */
        st_bytes got = {0};
        for (int i = 0; i < stored; i++) {
            char key[32];
            snprintf(key, sizeof key, "fill/o%d", i);
            ut_rand_fill(buf, sizeof buf, (uint64_t)i + 1);
            CHECK_OK(st_get(b, key, 0, ST_GET_TO_END, &got));
            CHECK(got.len == sizeof buf && memcmp(got.data, buf, sizeof buf) == 0);
        }
        st_bytes_free(&got);
        st_backend_close(b);
    }
    umount2(mnt, MNT_DETACH);
    rmdir(mnt);
}

/* ---- a put leaves nothing in the page cache ---- */

static void test_put_leaves_no_cached_pages(void)
{
    if (ut_on_tmpfs(root)) {
        UT_SKIP("test_put_leaves_no_cached_pages needs a disk under /tmp, not a tmpfs");
        return;
    }
    st_backend *b = open_root();
    enum { SIZE = 4 << 20 };
    uint8_t *buf = malloc(SIZE);
    CHECK(b && buf);
    if (!b || !buf) {
        free(buf);
        st_backend_close(b);
        return;
    }
    ut_rand_fill(buf, SIZE, 77);
    CHECK_OK(st_put(b, "cache/pack", buf, SIZE));
    const char *obj = tp("store/cache@/pack");
    CHECK(ut_resident_pages(obj) == 0);
    /* What was dropped reads back from the disk as the bytes put, and that
     * read brings every page in: the residency check can fail. */
    st_bytes got = {0};
    CHECK_OK(st_get(b, "cache/pack", 0, ST_GET_TO_END, &got));
    CHECK(got.len == SIZE && memcmp(got.data, buf, SIZE) == 0);
    st_bytes_free(&got);
    CHECK(ut_resident_pages(obj) == SIZE / sysconf(_SC_PAGESIZE));
    CHECK_OK(st_del(b, "cache/pack"));
    free(buf);
    st_backend_close(b);
}

/* ---- nothing outside the roots ---- */

static void test_nothing_outside(void)
{
    /* T holds exactly what the tests made on purpose. */
    const char *allowed[] = {"store", "outside", "afile"};
    DIR *d = opendir(tdir);
    CHECK(d != NULL);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        int ok = 0;
        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
            ok |= strcmp(de->d_name, allowed[i]) == 0;
        CHECK(ok);
        if (!ok)
            fprintf(stderr, "  unexpected %s/%s\n", tdir, de->d_name);
    }
    if (d)
        closedir(d);
    CHECK(dir_entries(outside) == 2);
    CHECK(file_is(tp("outside/victim"), "ORIGINAL"));
    CHECK(dir_entries(tp("outside/dir")) == 1 && file_is(tp("outside/dir/x"), "SECRET"));
    CHECK(file_is(tp("afile"), "plain"));
}

int main(void)
{
    umask(022);
    snprintf(tdir, sizeof tdir, "/tmp/ckpt-bf-XXXXXX");
    if (!mkdtemp(tdir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(root, sizeof root, "%s/store", tdir);
    snprintf(outside, sizeof outside, "%s/outside", tdir);

    RUN(test_conformance);
    RUN(test_url_valid);
    RUN(test_url_invalid);
    RUN(test_root_creation);
    RUN(test_root_not_a_directory);
    RUN(test_layout);
    RUN(test_temp_and_foreign_entries);
    RUN(test_symlinks);
    RUN(test_put_races_prune);
    RUN(test_no_space);
    RUN(test_put_leaves_no_cached_pages);
    RUN(test_nothing_outside);

    rm_rf(tdir);
    return ut_finish();
}
