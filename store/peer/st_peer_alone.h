/*
 * st_peer_alone — what a reader lists and reads when its object store
 * cannot be reached: the replicated parts its peers hold (docs/PEERS.md,
 * "Restoring from peers alone").
 *
 * A read-only backend that stands in for the store under the reader's view
 * (st_peer_read.h). Opening it asks every peer for its listing
 * (GET /v1/replicas), takes per (job, step, node) the newest revision
 * listed with a record, fetches that record from a peer that lists it and
 * keeps it only if it decodes (its checksum; its part record names its
 * manifest and revision), its manifest is the one listed (id and size),
 * decodes and is of that job, step and node, and every pack the manifest
 * names is held by one of the record's holders that answers (HEAD). It
 * then holds, as the store would, joblist/<job> and each kept record under
 * jobs/<job>/steps/<step20>/replicas/<node>.r<rev>; the view above turns
 * each into a published part and reads its packs from the holders, and the
 * step rules decide from the part records which steps are complete.
 *
 * Everything else is ST_ERR_TRANSIENT ("the store cannot be reached"): a
 * pack no peer gives, a stat of the store's clock. PUT and DELETE are
 * refused (ST_ERR_PERMANENT): writers and GC never use this backend.
 *
 * Threads: after open, the kept objects are read-only; any thread may read.
 */
#ifndef ST_PEER_ALONE_H
#define ST_PEER_ALONE_H

#include "backend/st_backend.h"
#include "peer/st_peer_auth.h"
#include "peer/st_peer_read.h"
#include "st_error.h"
#include "util/st_keyring.h"

typedef struct st_peer_alone_opts {
    const char *peers;            /* "HOST:PORT,HOST:PORT,..." (at most 64) */
    const char *self_node;        /* this node's name (for the peers' MAC) */
    const st_peer_secret *secret; /* borrowed for the open only */
    const st_keyring *keyring;    /* opens sealed records (an encrypted store); NULL: none */
    const char *job;              /* list this job only; NULL: every job */
    const char *store_error;      /* why the store was given up, for messages; may be NULL */
    const char *store_down;       /* the store already failed transiently (its message): not
                                   * looked at again; NULL: st_peer_reader_open looks */
    void (*log)(void *arg, const char *msg); /* a peer left out, a record refused; may be NULL */
    void *log_arg;
} st_peer_alone_opts;

/*!
 * Builds the backend from the peers' answers into *out. ST_ERR_TRANSIENT
 * when no peer answered ("store unreachable and no peer answered"),
 * ST_ERR_AUTH when every peer that answered refused the secret (the
 * message names one), ST_ERR_INVALID (a malformed peer list), ST_ERR_NOMEM.
 * Peers that answer with nothing usable give an empty backend, not an
 * error.
 */
st_err st_peer_alone_open(const st_peer_alone_opts *o, st_backend **out);

/*!
 * A reader's backend (docs/PEERS.md, "What a reader does" and "Restoring
 * from peers alone"): looks at the store once (a listing of the job
 * registry); if the store answers, or fails otherwise than with
 * ST_ERR_TRANSIENT, or no peers are given (ao->peers NULL), the view of
 * st_peer_read_wrap over *store; if it fails transiently (past the retry
 * bound of the backend below), the same view over st_peer_alone_open
 * (*store is then closed) and *alone is set. *store is owned from now on
 * (also on failure). ao->store_error is filled here. On failure *out is
 * NULL: the store's error when no peer was needed, else that of
 * st_peer_alone_open.
 */
st_err st_peer_reader_open(st_backend *store, const st_peer_read_opts *ro,
                           const st_peer_alone_opts *ao, int *alone, st_backend **out);

/*! Parts kept from the peers (0 for a backend that is not one). */
size_t st_peer_alone_parts(st_backend *b);

#endif
