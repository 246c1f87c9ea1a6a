/*
 * ckptstore.h — the store engine's facade: the only header fs/ and tools/
 * include. It opens a store (object backend + local state) and offers the
 * whole-step operations: store a directory as a step, restore a step into a
 * directory, list jobs and committed steps.
 *
 * Ownership: every pointer returned through an out-parameter is owned by the
 * caller and released with the matching *_free function. Errors: st_err codes
 * (st_error.h) with the detail in st_errmsg() on the calling thread.
 *
 * Threads: an st_store is used by one thread at a time.
 */
#ifndef CKPTSTORE_H
#define CKPTSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "st_chunker.h"
#include "st_error.h"

typedef struct st_store st_store;

typedef struct st_store_options {
    const char *url;       /* "file:///abs/dir" or "s3://bucket/prefix" */
    const char *state_dir; /* local state (dedup index); NULL: st_default_state_dir() */
    const char *node;      /* this writer's name; NULL: derived from the host name */
    const st_chunker_params *chunker; /* NULL: defaults */
    /* Called for non-fatal problems (a skipped symlink); may be NULL. */
    void (*warn)(void *arg, const char *msg);
    void *warn_arg;
} st_store_options;

/*! Default store URL: file://$XDG_DATA_HOME/ckptfs/store (or ~/.local/share/...).
 *  Writes into buf (cap bytes); returns buf, or NULL if it does not fit. */
char *st_default_store_url(char *buf, size_t cap);
/*! Default local state dir: $XDG_CACHE_HOME/ckptfs (or ~/.cache/ckptfs). */
char *st_default_state_dir(char *buf, size_t cap);

st_err st_store_open(const st_store_options *opts, st_store **out);
void st_store_close(st_store *s);

/*! What a put did. */
typedef struct st_put_result {
    uint64_t files;
    uint64_t skipped;       /* entries that are not regular files or dirs */
    uint64_t logical_bytes; /* bytes of the files */
    uint64_t chunks;
    uint64_t new_chunks;
    uint64_t new_raw_bytes; /* bytes that did not dedup */
    uint64_t stored_bytes;  /* pack bytes uploaded */
    uint64_t packs;
    uint64_t puts; /* object PUTs: packs + manifest + commit */
} st_put_result;

/*!
 * Stores every regular file under dir (recursively; symlinks and special
 * files are skipped with a warning) as step `step` of `job`, then writes the
 * manifest and, last, the commit record. ST_ERR_EXISTS if the step is
 * already committed. res may be NULL.
 */
st_err st_store_put_dir(st_store *s, const char *job, uint64_t step, const char *dir,
                        st_put_result *res);

typedef struct st_get_result {
    uint64_t files;
    uint64_t bytes;
    uint64_t gets;
} st_get_result;

/*!
 * Restores committed step `step` of `job` into dest (created if missing).
 * Each file is written to a temporary name, verified chunk by chunk and by
 * whole-file digest, fsynced, and only then renamed to its real name.
 * ST_ERR_NOT_FOUND if the step has no commit record.
 */
st_err st_store_get_dir(st_store *s, const char *job, uint64_t step, const char *dest,
                        st_get_result *res);

/*! One committed step. */
typedef struct st_step_info {
    uint64_t step;
    int64_t created_ns;
    uint64_t files;
    uint64_t bytes; /* logical */
    uint64_t nodes;
} st_step_info;

/*!
 * Committed steps of job in ascending order (*steps malloc'd, free()).
 * Steps whose commit record is unreadable are reported through warn and
 * left out.
 */
st_err st_store_list_steps(st_store *s, const char *job, st_step_info **steps, size_t *n);

/*! Names of the jobs in the store (malloc'd array of malloc'd strings;
 *  st_store_free_names()). */
st_err st_store_list_jobs(st_store *s, char ***jobs, size_t *n);
void st_store_free_names(char **names, size_t n);

/* The mount's file system model, for the FUSE daemon (fs/). */
#include "st_vfs.h"

#endif
