/*
 * st_ingest_impl — what the ingest's two files share: st_ingest.c (reading,
 * chunking, dedup, the seal threads, the manifest; its file comment is the
 * design) and st_ingest_upload.c (the pack buffers and the threads that
 * PUT them). Internal to the ingest.
 */
#ifndef ST_INGEST_IMPL_H
#define ST_INGEST_IMPL_H

#include <pthread.h>
#include <stdint.h>

#include "engine/st_gc.h"
#include "engine/st_ingest.h"
#include "format/st_codec.h"
#include "format/st_pack.h"
#include "util/st_hash.h"
#include "util/st_idmap.h"

#define DEFAULT_PARALLEL 4
#define MAX_PARALLEL     32

/* Seal jobs in flight at most, and the fixed commit lag (st_ingest.c, "Seal threads"). Also
 * the most seal threads that can be kept busy. */
#define SEAL_LAG 8

/* st_chunk_ref.pack of a reference to a chunk still being sealed: its
 * offset is then the chunk's index into open_chunks. */
#define SLOT_PENDING (ST_CHUNK_HOLE - 1)

/* The codec plans: of the file being read (reset at each file), and of the
 * bundles (one stream to the codec for the whole ingest). */
enum { PLAN_FILE, PLAN_BUNDLE, NPLANS };

/* The pack streams of an ingest: the step's new chunks, and chunks stored
 * again because their pack was retired. */
enum { STREAM_NEW, STREAM_REHOME, NSTREAMS };

/* A chunk this ingest stored: its id, its pack's slot and where it sits. */
typedef struct open_chunk {
    st_id id;
    uint32_t slot;
    uint64_t offset;
    uint32_t stored_len;
    uint32_t raw_len;
} open_chunk;

/* A seal job: the encode of one new chunk (open_chunks[seq]). FREE → QUEUED
 * (dispatched to the workers) → RUNNING → DONE → committed and FREE again;
 * with one seal thread FREE → DONE inline. state is guarded by seal_lock;
 * the rest belongs to the ingest thread while FREE or DONE, to the worker
 * while RUNNING. */
typedef enum { JOB_FREE, JOB_QUEUED, JOB_RUNNING, JOB_DONE } job_state;

typedef struct seal_job {
    job_state state;
    size_t seq;
    int stream;
    int plan;          /* PLAN_FILE or PLAN_BUNDLE */
    uint64_t plan_gen; /* that plan's generation at dispatch (its file) */
    st_id id;
    uint64_t at;        /* the chunk's offset in its file (a bundle's: 0) */
    st_codec_hint hint; /* the predicted hint the worker encodes by */
    uint8_t *raw;       /* a copy of the chunk (the largest chunk's size) */
    size_t raw_len;
    int encoded;  /* a worker encoded it (not with one seal thread) */
    uint8_t *enc; /* st_codec_bound of the largest chunk (seal threads > 1) */
    size_t enc_len;
    st_codec_outcome outcome;
    st_err err;
    char msg[512];
} seal_job;

/* One pack buffer: being filled, waiting, being PUT, or PUT and not yet
 * indexed. Guarded by st_ingest.lock once handed to the pool. */
typedef enum { BUF_FREE, BUF_FILLING, BUF_QUEUED, BUF_RUNNING, BUF_DONE } buf_state;

typedef struct pack_buf {
    st_pack_writer w;
    buf_state state;
    int stream; /* STREAM_NEW or STREAM_REHOME */
    st_id id;
    uint32_t slot;
    /* Its chunks are those of open_chunks[first_chunk, end_chunk) whose slot
     * is its own (the other stream's chunks interleave). */
    size_t first_chunk, end_chunk;
    st_err err;
    char msg[512];
} pack_buf;

struct st_ingest {
    st_backend *backend;
    st_state *state;
    char job[ST_JOB_MAX + 1];
    st_chunker *chunker;
    size_t max_chunk;

    uint8_t *read_buf;
    uint8_t *chunk_buf;
    size_t chunk_len;
    uint8_t *scratch;
    size_t largest; /* the largest chunk: the chunker's max or a bundle */
    /* The codec choice of the file being read and of the bundles
     * (docs/CODEC.md). p is the plan as of the last committed chunk, the
     * one that decides; gen counts the files begun (dispatch side),
     * committed_gen the file p belongs to: p restarts at the first chunk
     * committed of a later file. */
    struct {
        st_codec_plan p;
        uint64_t gen, committed_gen;
    } plans[NPLANS];
    int lz4_only;     /* every plan starts with it (st_ingest_set_lz4_only) */
    uint64_t file_at; /* the file offset of the file's next chunk or hole */

    /* The open bundle: its bytes, and the files whose slice it holds (by
     * index into files[]: that array moves as it grows). */
    uint8_t *bundle;
    size_t bundle_len;
    size_t *bundle_files;
    size_t nbundle_files, bundle_files_cap;
    int has_slice; /* a file is a slice: st_ingest_finish sorts */

    /* Pack buffers: one being filled per open stream, the rest free or with
     * the upload pool. */
    pack_buf bufs[MAX_PARALLEL + NSTREAMS];
    int nbufs;
    struct {
        int open;
        int cur; /* the buffer being filled, when open */
    } streams[NSTREAMS];
    st_idmap new_ids; /* id -> index into open_chunks: every chunk stored here */
    open_chunk *open_chunks;
    size_t nopen, open_cap;

    /* The upload pool. */
    pthread_mutex_t lock;
    pthread_cond_t changed;
    pthread_t workers[MAX_PARALLEL];
    int nworkers, stopping;
    st_err upload_err;
    char upload_msg[512];

    /* Sealing (st_ingest_set_keyring; NULL: plain packs and manifests):
     * the key id and salt of every sealed pack the manifest may name, new
     * or old, by pack id (seal_index -> known_seals), for its version 4
     * pack table (st_ingest_keys.c). Ingest thread only. */
    const st_keyring *kr;
    st_idmap seal_index;
    st_pack_seal *known_seals;
    size_t nknown, known_cap;

    /* The manifest under construction. */
    st_id *packs;
    size_t npacks, packs_cap;
    st_idmap pack_slots;
    st_idmap gc_checked;   /* old pack id -> 1 usable, 2 pending GC or gone (once per ingest) */
    st_gc_listing listing; /* markers and packs listed for first use (docs/GC.md) */
    int retired_listed;    /* the retire markers were listed (once per ingest); -1 while failing */
    st_idmap retired;      /* retired pack id -> 1 */
    st_file_entry *files;
    size_t nfiles, files_cap;
    const st_manifest *finished; /* st_ingest_finish's, for the last look */

    /* Seal jobs: open_chunks[seq] is sealed by jobs[seq % SEAL_LAG]; those
     * of [ncommitted, nopen) are in flight. */
    seal_job jobs[SEAL_LAG];
    size_t ncommitted;
    int seal_threads;
    pthread_mutex_t seal_lock;
    pthread_cond_t seal_changed;
    pthread_t seal_workers[SEAL_LAG];
    int nseal_workers, seal_stopping;
    st_err seal_err; /* sticky: the first commit that failed */
    char seal_msg[512];

    st_ingest_stats stats;
};

/* st_ingest_upload.c. Each is called on the ingest's own thread. */

/*! Opens a pack buffer for stream (waiting for a free one: at most
 *  g->nbufs in use). */
st_err ingest_open_pack(st_ingest *g, int stream);
/*! Finishes stream's open pack and queues it for an upload thread. */
st_err ingest_flush_pack(st_ingest *g, int stream);
/*! Waits for every queued pack's PUT and records their chunks in the index;
 *  the first error. */
st_err ingest_drain_uploads(st_ingest *g);

/* st_ingest_keys.c. Each is called on the ingest's own thread. */

/*! Remembers that pack is sealed with seal (a pack this ingest wrote, or
 *  one a manifest it carries files from names). */
st_err ingest_note_seal(st_ingest *g, const st_id *pack, const st_pack_seal *seal);
/*! With a keyring: the manifest's pack table's seals, parallel to
 *  g->packs (malloc'd into *seals), the header of an old pack whose seal
 *  is not known read from the store (one ranged GET per pack). ST_ERR_KEY
 *  for a plain pack (the store mixes). Without: *seals NULL. */
st_err ingest_pack_seals(st_ingest *g, st_pack_seal **seals);
/*! Frees what ingest_note_seal kept. */
void ingest_free_seals(st_ingest *g);

#endif
