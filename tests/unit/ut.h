/*
 * ut.h — the unit tests' tiny harness.
 *
 * CHECK(cond) records a failure with file:line and goes on; CHECK_OK(expr)
 * expects an st_err of ST_OK and prints st_errmsg() when not. A test file's
 * main() calls its cases and returns ut_finish(), which prints
 * "N passed, N failed" and returns non-zero if anything failed, so ctest
 * sees the result. Deterministic pseudo-random data comes from ut_rand_fill()
 * with a fixed seed, so a failure reproduces.
 */
#ifndef UT_H
#define UT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_error.h"

static int ut_passed, ut_failed;

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

/* Runs one case and names it in the log. */
#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int ut_before_ = ut_failed;                                                                \
        fn();                                                                                      \
        fprintf(stderr, "%-6s %s\n", ut_failed == ut_before_ ? "ok" : "FAIL", #fn);                \
    } while (0)

static inline int ut_finish(void)
{
    printf("%d passed, %d failed\n", ut_passed, ut_failed);
    return ut_failed ? 1 : 0;
}

/* Removes a test's temp tree (a directory the test made with mkdtemp). */
static inline void ut_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
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
