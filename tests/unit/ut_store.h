/*
 * ut_store.h — what the tests of a file:// store (test_store, test_gc,
 * test_compact) share: opening the store with its state in the test's temp
 * tree, and opening the same store as a raw backend to look at (or damage)
 * its objects directly. Include after ut.h.
 */
#ifndef UT_STORE_H
#define UT_STORE_H

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ckptstore.h"
#include "backend/st_backend.h"
#include "format/st_manifest.h"
#include "format/st_part.h"
#include "ut.h"

/* Opens the store at url as node, its state in dir/state_name; records a
 * failed CHECK (and returns NULL) if it cannot. */
static inline st_store *ut_open_store(const char *url, const char *dir, const char *state_name,
                                      const char *node)
{
    char state[1024];
    snprintf(state, sizeof state, "%s/%s", dir, state_name);
    st_store_options o = {.url = url, .state_dir = state, .node = node};
    st_store *s = NULL;
    CHECK_OK(st_store_open(&o, &s));
    return s;
}

/* The store that ut_tmp_store() names under dir (dir/store), opened as a
 * file backend; records a failed CHECK (and returns NULL) if it cannot. */
static inline st_backend *ut_open_store_backend(const char *dir)
{
    char path[1024];
    st_backend *b = NULL;
    snprintf(path, sizeof path, "%s/store", dir);
    CHECK_OK(st_backend_file_open(path, &b));
    return b;
}

/* Rewrites node's manifest of step of job in store b so that every file's
 * whole-file digest is wrong, and its part record so that the manifest
 * still matches it: damage only the whole-file check can find (its chunks
 * all verify). The mount tests use it on their in-memory store too. */
static inline void ut_wrong_file_digests(st_backend *b, const char *job, uint64_t step,
                                         const char *node)
{
    char part_key[ST_KEY_MAX], man_key[ST_KEY_MAX];
    st_bytes pbuf = {0}, mbuf = {0}, out = {0};
    st_part p;
    st_manifest m;
    CHECK_OK(st_key_part(part_key, sizeof part_key, job, step, node));
    CHECK_OK(st_get(b, part_key, 0, ST_GET_TO_END, &pbuf));
    CHECK_OK(st_part_decode(pbuf.data, pbuf.len, &p));
    CHECK_OK(st_key_manifest(man_key, sizeof man_key, job, step, node, p.revision));
    CHECK_OK(st_get(b, man_key, 0, ST_GET_TO_END, &mbuf));
    CHECK_OK(st_manifest_decode(mbuf.data, mbuf.len, &m));
    for (size_t i = 0; i < m.nfiles; i++)
        m.files[i].digest.b[5] ^= 0x21;
    CHECK_OK(st_manifest_encode(&m, &out));
    CHECK_OK(st_put(b, man_key, out.data, out.len));
    p.manifest_len = out.len;
    p.manifest_digest = st_id_of(out.data, out.len);
    out.len = 0;
    CHECK_OK(st_part_encode(&p, &out));
    CHECK_OK(st_put(b, part_key, out.data, out.len));
    st_manifest_free(&m);
    st_part_free(&p);
    st_bytes_free(&pbuf);
    st_bytes_free(&mbuf);
    st_bytes_free(&out);
}

/* Makes object key of the file store under dir (dir/store) look written
 * `seconds` ago to the store's clock, which is its file's mtime (the file
 * backend's layout: every directory component carries an '@'): how a test
 * lets a grace period pass without waiting for it. */
static inline void ut_backdate(const char *dir, const char *key, double seconds)
{
    char path[2048];
    size_t n = (size_t)snprintf(path, sizeof path, "%s/store/", dir);
    for (const char *k = key; *k && n + 2 < sizeof path; k++) {
        if (*k == '/')
            path[n++] = '@';
        path[n++] = *k;
    }
    path[n] = '\0';
    struct timespec now, times[2];
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t t = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - (int64_t)(seconds * 1e9);
    times[0] = times[1] = (struct timespec){t / 1000000000, t % 1000000000};
    int r = utimensat(AT_FDCWD, path, times, AT_SYMLINK_NOFOLLOW);
    CHECK(r == 0);
}

typedef struct ut_backdate_arg {
    const char *dir;
    double seconds;
} ut_backdate_arg;

static inline int ut_backdate_one(void *arg, const char *key, uint64_t size)
{
    (void)size;
    const ut_backdate_arg *a = arg;
    ut_backdate(a->dir, key, a->seconds);
    return 0;
}

/* ut_backdate of every key under prefix of the store b (which is dir/store). */
static inline void ut_backdate_all(st_backend *b, const char *dir, const char *prefix,
                                   double seconds)
{
    ut_backdate_arg a = {dir, seconds};
    CHECK_OK(st_list(b, prefix, ut_backdate_one, &a));
}

#endif
