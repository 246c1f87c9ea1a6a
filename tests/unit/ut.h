/*
 * ut.h — the unit tests' tiny harness.
 *
 * CHECK(cond) records a failure with file:line and goes on; CHECK_OK(expr)
 * expects an st_err of ST_OK and prints st_errmsg() when not. A test file's
 * main() calls its cases and returns ut_finish(), which prints
 * "N passed, N failed" and returns non-zero if anything failed, so ctest
 * sees the result. A case that cannot run here (no privilege to mount a
 * tmpfs) calls UT_SKIP(why): the executable then exits 77, which ctest shows
 * as skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt), never as passed; in CI
 * ($CI set, as tools/test.sh does) a skip is a failure, so CI cannot go green
 * on a machine that tests less. Deterministic pseudo-random data comes from ut_rand_fill()
 * with a fixed seed, so a failure reproduces.
 */
#ifndef UT_H
#define UT_H

#include <fcntl.h>
#include <linux/magic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "st_error.h"

static int ut_passed, ut_failed, ut_skipped;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (cond) {                                                                                \
            ut_passed++;                                                                           \
        } else {                                                                                   \
            ut_failed++;                                                                           \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        st_err ut_e_ = (expr);                                                                     \
        if (ut_e_ == ST_OK) {                                                                      \
            ut_passed++;                                                                           \
        } else {                                                                                   \
            ut_failed++;                                                                           \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__, __LINE__, #expr,         \
                    (int)ut_e_, st_strerror(ut_e_), st_errmsg());                                  \
        }                                                                                          \
    } while (0)

#define CHECK_ERR(expr, want)                                                                      \
    do {                                                                                           \
        st_err ut_e_ = (expr);                                                                     \
        if (ut_e_ == (want)) {                                                                     \
            ut_passed++;                                                                           \
        } else {                                                                                   \
            ut_failed++;                                                                           \
            fprintf(stderr, "%s:%d: %s returned %d, wanted %d (%s)\n", __FILE__, __LINE__, #expr,  \
                    (int)ut_e_, (int)(want), #want);                                               \
        }                                                                                          \
    } while (0)

/* 1 when running in CI ($CI set and not "0"/"false"): skips become failures. */
static inline int ut_in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

/* Records that the current case cannot run here (why: a short reason); the
 * case then returns. Outside CI the executable reports a skip (exit 77); in
 * CI it is a failure. */
#define UT_SKIP(why)                                                                               \
    do {                                                                                           \
        if (ut_in_ci()) {                                                                          \
            ut_failed++;                                                                           \
            fprintf(stderr, "%s:%d: cannot run in CI: %s\n", __FILE__, __LINE__, (why));           \
        } else {                                                                                   \
            ut_skipped++;                                                                          \
            fprintf(stderr, "%s:%d: SKIPPED: %s\n", __FILE__, __LINE__, (why));                    \
        }                                                                                          \
    } while (0)

/* Runs one case and names it in the log. */
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int ut_before_ = ut_failed, ut_skipped_before_ = ut_skipped;                               \
        fn();                                                                                      \
        fprintf(stderr, "%-6s %s\n",                                                               \
                ut_failed != ut_before_            ? "FAIL"                                        \
                : ut_skipped != ut_skipped_before_ ? "SKIP"                                        \
                                                   : "ok",                                         \
                #fn);                                                                              \
    } while (0)

/* Exit status for main(): 1 if a check failed, else 77 (ctest: skipped) if
 * a case was skipped, else 0. */
static inline int ut_finish(void)
{
    printf("%d passed, %d failed, %d skipped\n", ut_passed, ut_failed, ut_skipped);
    return ut_failed ? 1 : ut_skipped ? 77 : 0;
}

/* Removes a test's temp tree (a directory the test made with mkdtemp). */
static inline void ut_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

/* Writes len bytes of data to path (created, or truncated; mode 0644),
 * recording a failed CHECK if it cannot. */
static inline void ut_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, data, len) == (ssize_t)len);
    close(fd);
}

/* Writes the string text to path as a new file of exactly `mode` (whatever
 * the umask; a file already there is removed first): for the rules of
 * secret and key files. Records a failed CHECK if it cannot. */
static inline void ut_write_file_mode(const char *path, const char *text, mode_t mode)
{
    unlink(path);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    CHECK(fchmod(fd, mode) == 0);
    close(fd);
}

/* Pages of path that are in the page cache (mincore(2) of a read-only
 * mapping, which faults nothing in), -1 if it cannot be told. */
static inline long ut_resident_pages(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t npages = ((size_t)st.st_size + page - 1) / page;
    unsigned char *vec = malloc(npages);
    long n = -1;
    if (vec && mincore(map, (size_t)st.st_size, vec) == 0) {
        n = 0;
        for (size_t i = 0; i < npages; i++)
            n += vec[i] & 1;
    }
    free(vec);
    munmap(map, (size_t)st.st_size);
    return n;
}

/* 1 if path is on a tmpfs, whose pages are the file and cannot be dropped
 * (a page-cache test then has nothing to measure). */
static inline int ut_on_tmpfs(const char *path)
{
    struct statfs fs;
    return statfs(path, &fs) == 0 && fs.f_type == TMPFS_MAGIC;
}

/* ut_write_file() of a NUL-terminated text. */
static inline void ut_write_text(const char *path, const char *text)
{
    ut_write_file(path, text, strlen(text));
}

/* Makes the test's temp tree from its mkdtemp template and names a file://
 * store inside it in url. 0 on success; on failure says why, returns 1 (the
 * test's exit code). */
static inline int ut_tmp_store(char *root_template, char *url, size_t url_cap)
{
    if (!mkdtemp(root_template)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(url, url_cap, "file://%s/store", root_template);
    return 0;
}

/* main() of a test whose cases share one temp store: makes the temp tree
 * (ut_tmp_store), runs the cases (a function of RUN lines), removes the tree
 * unless a check failed (then it is kept for a look), returns ut_finish(). */
static inline int ut_main_tmp_store(char *root_template, char *url, size_t url_cap,
                                    void (*run_cases)(void))
{
    if (ut_tmp_store(root_template, url, url_cap))
        return 1;
    run_cases();
    if (!ut_failed)
        ut_rmtree(root_template);
    return ut_finish();
}

/* xorshift64*: fixed-seed pseudo-random bytes. */
static inline uint64_t ut_rand_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1DULL;
}

static inline void ut_rand_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed ? seed : 1;
    uint8_t *p = buf;
    while (len >= 8) {
        uint64_t v = ut_rand_next(&s);
        memcpy(p, &v, 8);
        p += 8;
        len -= 8;
    }
    while (len--)
        *p++ = (uint8_t)ut_rand_next(&s);
}

#endif
