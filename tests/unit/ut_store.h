/*
 * ut_store.h — what the tests of a file:// store (test_store, test_gc,
 * test_compact) share: opening the store with its state in the test's temp
 * tree, and opening the same store as a raw backend to look at (or damage)
 * its objects directly. Include after ut.h.
 */
#ifndef UT_STORE_H
#define UT_STORE_H

#include <stdio.h>

#include "ckptstore.h"
#include "backend/st_backend.h"
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

#endif
