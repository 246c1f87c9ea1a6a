/*
 * st_store_impl — the facade's internals shared by st_store.c (open, put,
 * jobs) and st_store_read.c (list, latest, restore, verify, stats).
 * Threads: an st_store is used by one thread at a time (ckptstore.h); the
 * restore workers it starts touch only the backend and their own buffers.
 */
#ifndef ST_STORE_IMPL_H
#define ST_STORE_IMPL_H

#include "ckptstore.h"
#include "format/st_chunker.h"
#include "backend/st_backend.h"
#include "backend/st_backend_count.h"
#include "engine/st_state.h"
#include "format/st_part.h"

struct st_store {
    st_backend *backend; /* wrapped in the request counter */
    /* What reads go through: backend, or with a peer secret the view that
     * adds replicated steps (peer/st_peer_read.h) over a borrow of it.
     * Puts and GC use backend: a replicated step is not durable. */
    st_backend *reader;
    int peers_alone; /* reader stands on the peers alone: the store cannot be reached */
    st_backend_counts reader_requests; /* the borrow's own count (unused) */
    struct st_peer_secret *peer_secret;
    char peer_cache[4096]; /* the view's pack cache directory, removed at close */
    st_state *state;
    struct st_keyring *keyring; /* --encryption-key-file's; NULL: a plain store */
    char node[ST_NODE_MAX + 1];
    st_chunker_params chunker;
    unsigned seal_threads; /* 0: the ingest's default */
    int compression_lz4;   /* opts->compression is "lz4" */
    void (*warn)(void *arg, const char *msg);
    void *warn_arg;
    /* Hands what the backend says besides results (the S3 probe's answer,
     * CKPT_RETRY_TRACE's retries) to warn; outlives backend. */
    st_backend_observer backend_observer;
    st_backend_counts requests;
};

void st_store_warnf(st_store *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
