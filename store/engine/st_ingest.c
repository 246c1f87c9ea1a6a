/*
 * st_ingest — chunk, dedup, encode, pack, upload. See st_ingest.h.
 *
 * Pack table: the manifest under construction lists every pack its chunk
 * references name, each by index. The open pack gets its slot when it is
 * opened; its id (the hash of its bytes) is only known when it is finished,
 * so the slot is filled in then. Old packs found through the index get a
 * slot on first use (pack_slots maps id -> slot).
 *
 * Parallel uploads: a finished pack is handed to a small pool of upload
 * threads (st_ingest_set_parallel, default 4) while the ingest thread goes on
 * chunking into the next pack buffer. At most `parallel` packs are in flight,
 * plus the one being filled, so memory stays bounded by (parallel + 1) pack
 * buffers. The ingest thread alone touches the index: a pack's chunks enter
 * it when the ingest thread sees that pack's PUT succeed. Chunks of packs
 * still in flight dedup through new_ids (every chunk this ingest stored).
 *
 * GC (docs/GC.md): an old pack found through the index is looked at once
 * per ingest (its pending marker, then the pack: by a listing of both, at
 * most a minute old, else st_gc_pack_usable's HEADs); one
 * that is pending deletion or gone is forgotten by the index and its chunks
 * are stored again. st_ingest_last_look looks at every pack of the
 * manifest once more, in the publish's first round (st_catalog_publish), so
 * that the time between the last look and the publish is one publish, not
 * a whole ingest.
 *
 * Repack (docs/GC.md, Repack by retirement): at the first chunk the index
 * finds in an old pack, the ingest lists the job's retire markers once. A
 * chunk whose indexed pack is retired is stored again, in the "rehome"
 * stream: a second open pack, uploaded by the same workers, that holds only
 * such long-lived chunks (never the step's new ones); once its pack is
 * stored, the chunk's new location replaces the old one in the index.
 *
 * Holes (docs/FORMATS.md, version 2): a file's own holes are found with
 * SEEK_DATA/SEEK_HOLE and never read; a chunk of read data that is all
 * zeros is not stored either. Both become hole extents of the file entry
 * (adjacent ones merged), which cost no pack bytes and no PUT; the digest
 * still covers their zeros. After a file's hole the chunker starts afresh,
 * as at a file's start.
 *
 * Bundles (docs/FORMATS.md, version 3; docs/CHUNKING.md, "Small files in
 * bundles"): a file of fewer than ST_INGEST_DEDUP_MIN bytes, read whole by
 * read_head, is appended to the open bundle instead of being chunked. Its
 * one extent is a slice whose location is filled in when the bundle is
 * closed and stored (close_bundle) like any chunk: id, codec, dedup, pack.
 * Until then the files waiting on it are known by index into files[],
 * which may move as it grows. A bundle ends after a file once it holds
 * ST_INGEST_BUNDLE_MIN bytes and that file's XXH3-64 has its low bits
 * zero (a cut that depends on content, so a changed file changes its own
 * bundle, and the next ones only if it moves a cut), before a file that
 * would take it past ST_MANIFEST_MAX_BUNDLE, and at st_ingest_finish.
 *
 * Streams and buffers: each stream (new, rehome) fills at most one buffer
 * at a time; upload threads are `parallel`, buffers (parallel + 2), of
 * which a stream uses at most (parallel + 1) plus the other stream's one
 * being filled: with one stream, memory is what it was before.
 *
 * Seal threads (st_ingest_set_seal_threads): the encode of a new chunk, the
 * costly step, runs on one of `seal_threads` workers; everything else stays
 * on the ingest thread in chunk order: chunking, ids, dedup, the codec
 * plan, pack assembly, offsets, file entries. Each new chunk is a seal job
 * numbered by its index in open_chunks (its sequence number). A job is
 * dispatched with a copy of its bytes and a guessed codec hint, encoded by
 * a worker into its own buffer, and committed on the ingest thread in
 * sequence order: its bytes appended to its stream's open pack (opening and
 * flushing packs as before), its location written to open_chunks.
 *
 * Determinism: the packs, their boundaries and ids, the manifest and every
 * reference are the same for any number of seal threads and any timing,
 * and the same as one thread's:
 *   - The codec plan decides at commit, in chunk order, exactly as a single
 *     thread does: the hint of chunk s is drawn from the plan as it stands
 *     after chunk s - 1's outcome (docs/CODEC.md, "A choice that sticks").
 *     An encode is a pure function of the chunk's bytes and its hint, so a
 *     worker's encoding, made by a guessed hint (predict_hint), is taken
 *     only when it is what the plan's hint gives (st_codec_outcome_serves);
 *     else the chunk is encoded again, here, by the plan's hint. A guess
 *     changes the CPU spent, never a byte.
 *   - *When* a job is committed is a function of the input alone. Job s is
 *     committed right before job s + SEAL_LAG is dispatched, or at a drain
 *     (st_ingest_finish; a tiny chunk whose dedup rule needs a location
 *     still in flight, see place_chunk), never earlier because a worker
 *     happened to be fast. So the slots of new packs (reserved at commit)
 *     interleave with the slots of old packs (reserved at dedup) in an
 *     order fixed by the input. With one seal thread nothing is guessed:
 *     each chunk is encoded at its commit, with the same lag.
 *
 * A reference to a chunk still in flight (its own, or a dedup of it) says
 * pack SLOT_PENDING and offset = its sequence number; st_ingest_finish,
 * after the drain, fills in its slot, offset and stored length. At most
 * SEAL_LAG jobs are in flight, each with a raw copy and (with more than one
 * seal thread) an encode buffer (docs/MEMORY.md), plus a codec scratch per
 * worker.
 */
#define _GNU_SOURCE /* SEEK_DATA, SEEK_HOLE */
#include "util/st_array.h"
#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "engine/st_ingest.h"
#include "engine/st_ingest_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/st_codec.h"
#include "engine/st_gc.h"
#include "format/st_gcmark.h"
#include "util/st_hash.h"
#include "util/st_idmap.h"
#include "format/st_pack.h"
#include "format/st_part.h"

#define READ_BUF_SIZE (1u << 20)

/* First use of old packs by listing (docs/GC.md, "Writers"): a listing
 * answers for FIRST_USE_MAX_AGE_NS, and one of a job with more keys than
 * FIRST_USE_MAX_KEYS is cut short (its packs then get HEADs). */
#define FIRST_USE_MAX_AGE_NS (60 * 1000000000LL)
#define FIRST_USE_MAX_KEYS   (16 * 1000)

#ifdef CKPT_TEST_HOOKS
long st_ingest_test_seal_fail_at = -1;
/* The test hook: the encode of chunk seq st_ingest_test_seal_fail_at fails. */
#define ST_TEST_HOOK_SEAL_ENCODED(e, seq)                                                          \
    do {                                                                                           \
        if (!(e) && (long)(seq) == st_ingest_test_seal_fail_at)                                    \
            (e) = st_seterr(ST_ERR_IO, "test hook: seal of chunk %zu failed", (size_t)(seq));      \
    } while (0)
#else
#define ST_TEST_HOOK_SEAL_ENCODED(e, seq) ((void)0)
#endif

st_err st_ingest_new(st_backend *backend, st_state *state, const char *job,
                     const st_chunker_params *chunker, st_ingest **out)
{
    *out = NULL;
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    st_ingest *g = calloc(1, sizeof *g);
    if (!g)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    g->backend = backend;
    g->state = state;
    strcpy(g->job, job);
    g->nbufs = DEFAULT_PARALLEL + NSTREAMS;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->changed, NULL);
    pthread_mutex_init(&g->seal_lock, NULL);
    pthread_cond_init(&g->seal_changed, NULL);
    st_ingest_set_seal_threads(g, st_ingest_default_seal_threads());
    st_err e = st_chunker_new(chunker, &g->chunker);
    if (e)
        goto fail;
    g->max_chunk = st_chunker_max_chunk(chunker ? chunker : &st_chunker_default_params);
    g->read_buf = malloc(READ_BUF_SIZE);
    g->chunk_buf = malloc(g->max_chunk);
    /* The scratch serves chunks and bundles (the chunker's max may be
     * smaller than a bundle). */
    size_t largest = g->max_chunk > ST_MANIFEST_MAX_BUNDLE ? g->max_chunk : ST_MANIFEST_MAX_BUNDLE;
    g->largest = largest;
    g->scratch = malloc(st_codec_scratch_bound(largest));
    g->bundle = malloc(ST_MANIFEST_MAX_BUNDLE);
    if (!g->read_buf || !g->chunk_buf || !g->scratch || !g->bundle) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory allocating ingest buffers");
        goto fail;
    }
    *out = g;
    return ST_OK;
fail:
    st_ingest_free(g);
    return e;
}

/* Slot of a pack in the manifest's pack table, adding it on first use. */
static st_err pack_slot(st_ingest *g, const st_id *pack, uint32_t *slot)
{
    if (st_idmap_get(&g->pack_slots, pack, slot))
        return ST_OK;
    st_err e = st_array_grow((void **)&g->packs, &g->packs_cap, g->npacks + 1, sizeof *g->packs);
    if (e)
        return e;
    *slot = (uint32_t)g->npacks;
    g->packs[g->npacks++] = *pack;
    return st_idmap_put(&g->pack_slots, pack, *slot);
}

/* Appends a reference to the current file entry. */
static st_err add_ref(st_ingest *g, st_file_entry *f, size_t *refs_cap, const st_chunk_ref *ref)
{
    st_err e = st_array_grow((void **)&f->chunks, refs_cap, f->nchunks + 1, sizeof *f->chunks);
    if (e)
        return e;
    f->chunks[f->nchunks++] = *ref;
    g->stats.chunks++;
    return ST_OK;
}

/* Sets *usable to 1 if the old pack may be referenced, 0 if it is pending
 * GC or gone (the index then forgets it, so its chunks are stored again). */
static st_err old_pack_usable(st_ingest *g, const st_id *pack, int *usable)
{
    uint32_t v;
    if (st_idmap_get(&g->gc_checked, pack, &v)) {
        *usable = v == 1;
        return ST_OK;
    }
    st_err e = ST_OK;
    if (!g->listing.taken_ns || st_mono_ns() - g->listing.taken_ns > FIRST_USE_MAX_AGE_NS)
        e = st_gc_listing_take(g->backend, g->job, FIRST_USE_MAX_KEYS, &g->listing);
    if (e)
        return e;
    if (st_gc_listing_clear(&g->listing, pack))
        e = ST_OK; /* listed, without a marker listed before it */
    else
        e = st_gc_pack_usable(g->backend, g->job, pack, NULL);
    *usable = e == ST_OK;
    if (e == ST_ERR_BUSY)
        e = st_state_pack_forget(g->state, g->job, pack);
    return e ? e : st_idmap_put(&g->gc_checked, pack, *usable ? 1 : 2);
}

static int collect_retired(void *arg, const char *key, uint64_t size)
{
    (void)size;
    st_ingest *g = arg;
    st_id id;
    const char *name = strrchr(key, '/');
    if (name && !st_id_parse(name + 1, &id) && st_idmap_put(&g->retired, &id, 1))
        return g->retired_listed = -1; /* out of memory: stop listing */
    return 0;
}

/* Sets *retired to 1 if GC retired the old pack (docs/GC.md): its chunks
 * are then stored again instead of referenced. Lists the retire markers at
 * the first call of the ingest. */
static st_err old_pack_retired(st_ingest *g, const st_id *pack, int *retired)
{
    char prefix[ST_KEY_MAX];
    uint32_t one;
    if (!g->retired_listed) {
        st_err e = st_key_gc_retired_prefix(prefix, sizeof prefix, g->job);
        if (!e)
            e = st_list(g->backend, prefix, collect_retired, g);
        if (!e && g->retired_listed < 0)
            e = st_seterr(ST_ERR_NOMEM, "out of memory listing retired packs");
        if (e) {
            g->retired_listed = 0;
            return e;
        }
        g->retired_listed = 1;
    }
    *retired = st_idmap_get(&g->retired, pack, &one);
    return ST_OK;
}

/* A seal worker: encodes queued jobs, lowest sequence first, until told to
 * stop. Its scratch is its own. */
static void *seal_main(void *arg)
{
    st_ingest *g = arg;
    uint8_t *scratch = malloc(st_codec_scratch_bound(g->largest));
    pthread_mutex_lock(&g->seal_lock);
    for (;;) {
        seal_job *job = NULL;
        for (int i = 0; i < SEAL_LAG; i++)
            if (g->jobs[i].state == JOB_QUEUED && (!job || g->jobs[i].seq < job->seq))
                job = &g->jobs[i];
        if (g->seal_stopping)
            break;
        if (!job) {
            pthread_cond_wait(&g->seal_changed, &g->seal_lock);
            continue;
        }
        job->state = JOB_RUNNING;
        job->encoded = 1;
        pthread_mutex_unlock(&g->seal_lock);
        st_err e = scratch ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory for a seal scratch");
        if (!e)
            e = st_codec_encode_hinted(job->raw, job->raw_len, &job->id, job->enc,
                                       st_codec_bound(g->largest), &job->enc_len, scratch,
                                       &job->hint, &job->outcome);
        ST_TEST_HOOK_SEAL_ENCODED(e, job->seq);
        pthread_mutex_lock(&g->seal_lock);
        job->err = e;
        if (e)
            snprintf(job->msg, sizeof job->msg, "%s", st_errmsg());
        job->state = JOB_DONE;
        pthread_cond_broadcast(&g->seal_changed);
    }
    pthread_mutex_unlock(&g->seal_lock);
    free(scratch);
    return NULL;
}

/* Every online CPU but one, at least 1 and at most SEAL_LAG: the seal
 * scales with a node's cores while one is left to the trainer, the FUSE
 * threads and the uploads. On 2 cores that is 1: there a second thread
 * took 1.10x the CPU and made a put to an S3 server on the same cores
 * 1.11x slower, for 1.15x the throughput when nothing else ran
 * (docs/BENCHMARKS.md, "Seal threads"). */
unsigned st_ingest_default_seal_threads(void)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus <= 2 ? 1 : cpus - 1 > SEAL_LAG ? SEAL_LAG : (unsigned)(cpus - 1);
}

void st_ingest_set_seal_threads(st_ingest *g, unsigned n)
{
    if (g->nopen)
        return; /* only before the first new chunk */
    g->seal_threads = n < 1 ? 1 : n > SEAL_LAG ? SEAL_LAG : (int)n;
}

/* A plan before its first chunk. */
static st_codec_plan fresh_plan(const st_ingest *g)
{
    return (st_codec_plan){.lz4_only = g->lz4_only};
}

void st_ingest_set_lz4_only(st_ingest *g, int lz4_only)
{
    if (g->nopen)
        return; /* only before the first new chunk */
    g->lz4_only = lz4_only != 0;
    for (int i = 0; i < NPLANS; i++) /* the bundles' plan never restarts */
        g->plans[i].p = fresh_plan(g);
}

st_err st_ingest_compression(const char *name, int *lz4_only)
{
    *lz4_only = name && strcmp(name, "lz4") == 0;
    if (!name || *lz4_only || strcmp(name, "auto") == 0)
        return ST_OK;
    return st_seterr(ST_ERR_INVALID, "compression '%.32s': use auto or lz4", name);
}

/* Commits the oldest job in flight (ingest thread): draws its hint from
 * its plan, as of the chunk before it; takes the worker's encoding if it is
 * the one that hint gives, else encodes the chunk by it here, straight into
 * its stream's open pack; teaches the plan and records where the chunk
 * sits; flushes the pack once full. A failed commit fails every later one
 * (the ingest is then only freed). */
static st_err seal_commit_one(st_ingest *g)
{
    if (g->seal_err)
        return st_seterr(g->seal_err, "%s", g->seal_msg);
    const size_t seq = g->ncommitted;
    seal_job *job = &g->jobs[seq % SEAL_LAG];
    pthread_mutex_lock(&g->seal_lock);
    while (job->state != JOB_DONE)
        pthread_cond_wait(&g->seal_changed, &g->seal_lock);
    pthread_mutex_unlock(&g->seal_lock);
    st_err e = job->err ? st_seterr(job->err, "%s", job->msg) : ST_OK;
    if (!e && !g->streams[job->stream].open)
        e = ingest_open_pack(g, job->stream);
    pack_buf *b = e ? NULL : &g->bufs[g->streams[job->stream].cur];
    open_chunk *c = &g->open_chunks[seq];
    size_t enc_len = 0;
    if (!e) {
        if (g->plans[job->plan].committed_gen != job->plan_gen) { /* a file's first */
            g->plans[job->plan].p = fresh_plan(g);
            g->plans[job->plan].committed_gen = job->plan_gen;
        }
        st_codec_plan *plan = &g->plans[job->plan].p;
        st_codec_hint hint;
        st_codec_outcome outcome;
        st_codec_plan_next(plan, job->at, &hint);
        if (job->encoded && st_codec_outcome_serves(&job->outcome, &hint, &outcome)) {
            enc_len = job->enc_len;
            uint8_t *dst = st_pack_append_begin(&b->w, enc_len);
            if (!dst)
                e = st_seterr(ST_ERR_NOMEM, "out of memory growing a pack");
            else
                memcpy(dst, job->enc, enc_len);
        } else {
            const size_t bound = st_codec_bound(job->raw_len);
            uint8_t *dst = st_pack_append_begin(&b->w, bound);
            if (!dst)
                e = st_seterr(ST_ERR_NOMEM, "out of memory growing a pack");
            else
                e = st_codec_encode_hinted(job->raw, job->raw_len, &job->id, dst, bound, &enc_len,
                                           g->scratch, &hint, &outcome);
            ST_TEST_HOOK_SEAL_ENCODED(e, seq);
            g->stats.seal_encodes_here += job->encoded;
        }
        if (!e)
            st_codec_plan_learn(plan, job->at, &outcome);
    }
    if (!e)
        e = st_pack_append_commit(&b->w, enc_len, &c->offset);
    pthread_mutex_lock(&g->seal_lock); /* the workers scan job states */
    job->state = JOB_FREE;
    pthread_mutex_unlock(&g->seal_lock);
    if (!e) {
        c->slot = b->slot;
        c->stored_len = (uint32_t)st_pack_record_len(&b->w, enc_len);
        g->ncommitted++;
        if (st_pack_writer_size(&b->w) >= ST_PACK_TARGET_SIZE)
            e = ingest_flush_pack(g, job->stream);
    }
    if (e && !g->seal_err) {
        g->seal_err = e;
        snprintf(g->seal_msg, sizeof g->seal_msg, "%s", st_errmsg());
    }
    return e;
}

/* The hint a worker encodes the next chunk of plan by: a guess at the one
 * its commit will draw. The plan as last committed, carried over the jobs
 * of the same file in flight as if their outcomes taught it nothing: a
 * stuck codec stays stuck, its rechecks fall where they fall, and chunks
 * whose plan is still sampling are sampled (a sample that chooses the codec
 * the plan then sticks to serves as well). A wrong guess costs an encode on
 * the ingest thread, never a byte of output. */
static void predict_hint(const st_ingest *g, int plan, uint64_t at, st_codec_hint *hint)
{
    const uint64_t gen = g->plans[plan].gen;
    st_codec_plan p = g->plans[plan].committed_gen == gen ? g->plans[plan].p : fresh_plan(g);
    for (size_t s = g->ncommitted; s < g->nopen; s++) {
        const seal_job *job = &g->jobs[s % SEAL_LAG];
        st_codec_hint h;
        if (job->plan == plan && job->plan_gen == gen)
            st_codec_plan_next(&p, job->at, &h);
    }
    st_codec_plan_next(&p, at, hint);
}

/* Commits every job in flight. */
static st_err seal_drain(st_ingest *g)
{
    st_err e = ST_OK;
    while (!e && g->ncommitted < g->nopen)
        e = seal_commit_one(g);
    return e;
}

static st_err start_seal_workers(st_ingest *g)
{
    for (int i = g->nseal_workers; i < g->seal_threads; i++) {
        if (pthread_create(&g->seal_workers[i], NULL, seal_main, g) != 0)
            break;
        g->nseal_workers++;
    }
    return g->nseal_workers ? ST_OK : st_seterr(ST_ERR_NOMEM, "cannot start seal threads");
}

/* Points ref at open_chunks[idx]: its location once committed, else
 * SLOT_PENDING (filled in by st_ingest_finish). */
static void ref_open_chunk(const st_ingest *g, st_chunk_ref *ref, size_t idx)
{
    if (idx < g->ncommitted) {
        ref->pack = g->open_chunks[idx].slot;
        ref->offset = g->open_chunks[idx].offset;
        ref->stored_len = g->open_chunks[idx].stored_len;
    } else {
        ref->pack = SLOT_PENDING;
        ref->offset = idx;
        ref->stored_len = 0;
    }
}

/* Fills in ref's location if it was pending and its chunk is committed. */
static void resolve_ref(const st_ingest *g, st_chunk_ref *ref)
{
    if (ref->pack == SLOT_PENDING && ref->offset < g->ncommitted)
        ref_open_chunk(g, ref, (size_t)ref->offset);
}

/* Stores the chunk data[0..ref->raw_len) into stream: copies it into a
 * seal job, handed to a worker (with more than one seal thread) to encode
 * by a predicted hint, and points ref at it. The jobs up to SEAL_LAG before
 * it are committed first (see the top of the file). */
static st_err store_chunk(st_ingest *g, int stream, const uint8_t *data, st_chunk_ref *ref,
                          int plan)
{
    const size_t len = ref->raw_len;
    const size_t seq = g->nopen;
    const int workers = g->seal_threads > 1;
    st_err e = ST_OK;
    while (!e && g->ncommitted + SEAL_LAG <= seq)
        e = seal_commit_one(g);
    if (!e && g->seal_err)
        e = st_seterr(g->seal_err, "%s", g->seal_msg);
    if (!e)
        e = st_array_grow((void **)&g->open_chunks, &g->open_cap, seq + 1, sizeof *g->open_chunks);
    if (e)
        return e;
    seal_job *job = &g->jobs[seq % SEAL_LAG];
    if (!job->raw && !(job->raw = malloc(g->largest)))
        return st_seterr(ST_ERR_NOMEM, "out of memory for a seal buffer");
    if (workers && !job->enc && !(job->enc = malloc(st_codec_bound(g->largest))))
        return st_seterr(ST_ERR_NOMEM, "out of memory for a seal buffer");
    if (workers && !g->nseal_workers && (e = start_seal_workers(g)))
        return e;
    g->open_chunks[seq] = (open_chunk){ref->id, SLOT_PENDING, 0, 0, ref->raw_len};
    if ((e = st_idmap_put(&g->new_ids, &ref->id, (uint32_t)seq)))
        return e;
    memcpy(job->raw, data, len);
    job->seq = seq;
    job->stream = stream;
    job->plan = plan;
    job->plan_gen = g->plans[plan].gen;
    job->at = plan == PLAN_FILE ? g->file_at : 0;
    job->id = ref->id;
    job->raw_len = len;
    job->err = ST_OK;
    job->encoded = 0;
    if (workers)
        predict_hint(g, plan, job->at, &job->hint);
    g->nopen++;
    pthread_mutex_lock(&g->seal_lock);
    job->state = workers ? JOB_QUEUED : JOB_DONE; /* one thread: encoded at its commit */
    pthread_cond_broadcast(&g->seal_changed);
    pthread_mutex_unlock(&g->seal_lock);
    ref_open_chunk(g, ref, seq);
    g->stats.new_chunks++;
    g->stats.new_raw_bytes += len;
    if (stream == STREAM_REHOME) {
        g->stats.rehomed_chunks++;
        g->stats.rehomed_raw_bytes += len;
    }
    return ST_OK;
}

/* Appends len zero bytes to f as hole extents, extending a hole that ends
 * the file so far (each extent at most ST_MANIFEST_MAX_HOLE bytes). */
static st_err add_hole(st_ingest *g, st_file_entry *f, size_t *refs_cap, uint64_t len)
{
    g->stats.hole_bytes += len;
    while (len) {
        st_chunk_ref *last = f->nchunks ? &f->chunks[f->nchunks - 1] : NULL;
        if (!last || !st_chunk_is_hole(last) || last->raw_len == ST_MANIFEST_MAX_HOLE) {
            st_err e =
                st_array_grow((void **)&f->chunks, refs_cap, f->nchunks + 1, sizeof *f->chunks);
            if (e)
                return e;
            last = &f->chunks[f->nchunks++];
            *last = (st_chunk_ref){.pack = ST_CHUNK_HOLE};
        }
        uint64_t room = ST_MANIFEST_MAX_HOLE - last->raw_len;
        uint64_t take = len < room ? len : room;
        last->raw_len += (uint32_t)take;
        len -= take;
    }
    return ST_OK;
}

/* 1 if buf[0..len) is all zeros (len > 0): one pass over bytes in cache. */
static int is_all_zero(const uint8_t *buf, size_t len)
{
    return buf[0] == 0 && memcmp(buf, buf + 1, len - 1) == 0;
}

/* f's last chunk that is not a hole, or NULL (also for f NULL). */
static st_chunk_ref *last_data_ref(const st_file_entry *f)
{
    for (size_t i = f ? f->nchunks : 0; i > 0; i--)
        if (!st_chunk_is_hole(&f->chunks[i - 1]))
            return &f->chunks[i - 1];
    return NULL;
}

/* 1 if a chunk at (pack slot, offset) continues f: f has no chunk yet, or
 * its last one ends right there in the same pack. */
static int follows_last(const st_file_entry *f, uint32_t slot, uint64_t offset)
{
    const st_chunk_ref *p = last_data_ref(f);
    return !p || (p->pack == slot && p->offset + p->stored_len == offset);
}

/* 1 if a chunk the index located in a stored pack is in the pack of f's
 * last chunk (or f has none yet). Looser than follows_last(): the index
 * keeps one location per chunk, so a file saved again unchanged, whose
 * tiny chunks (the same record headers in each checkpoint of a directory)
 * were stored once per occurrence, finds each in its own pack but not
 * always right after its neighbour; it then adds no pack. */
static int loc_in_last_pack(const st_ingest *g, const st_file_entry *f, const st_chunk_loc *loc)
{
    uint32_t slot;
    const st_chunk_ref *p = last_data_ref(f);
    return !p || (st_idmap_get(&g->pack_slots, &loc->pack, &slot) && slot == p->pack);
}

/* Finds the chunk data[0..ref->raw_len), whose id ref->id is, in this
 * ingest's packs or the index, or stores it (codec chosen through plan),
 * and fills ref's location. f is the file the chunk continues, for the
 * tiny-chunk rule below; NULL for a bundle, which continues no file (it is
 * the first chunk of each of its files). */
static st_err place_chunk(st_ingest *g, const st_file_entry *f, const uint8_t *data,
                          st_chunk_ref *ref, int plan)
{
    const size_t len = ref->raw_len;

    /* A tiny chunk is deduplicated only where it continues the file: as
     * its first, or, among this ingest's chunks, right after the file's
     * previous one; in the index, in the pack of the previous one
     * (loc_in_last_pack). Elsewhere it is stored again, beside the file's
     * other bytes. Format-aware cuts make many of them (a DCP
     * shard: every tensor's record headers, 18-208 bytes, the same in every
     * rank's file and for every tensor): referenced where they were first
     * stored, they sent each file's restore back to a far pack or far back
     * in its own, and a 4-rank 256 MiB step took ~3,500 GETs to restore.
     * Cost: their bytes, ~0.3% of a DCP shard (docs/BENCHMARKS.md). */
    const int tiny = f && len < ST_INGEST_DEDUP_MIN;
    uint32_t idx;
    const int stored_here = st_idmap_get(&g->new_ids, &ref->id, &idx);
    st_err e = ST_OK;
    /* The rule needs locations: the file's last chunk's and the earlier
     * copy's. One still being sealed is committed first, at a point that
     * depends on the input alone (the top of the file). */
    st_chunk_ref *last = tiny ? last_data_ref(f) : NULL;
    if (tiny &&
        ((last && last->pack == SLOT_PENDING && last->offset >= g->ncommitted) ||
         (stored_here && idx >= g->ncommitted)) &&
        (e = seal_drain(g)))
        return e;
    if (last)
        resolve_ref(g, last);
    if (stored_here &&
        (!tiny || follows_last(f, g->open_chunks[idx].slot, g->open_chunks[idx].offset))) {
        ref_open_chunk(g, ref, idx);
        return ST_OK;
    }
    st_chunk_loc loc;
    int stream = STREAM_NEW, retired = 0, usable = 0;
    e = st_state_chunk_lookup(g->state, g->job, &ref->id, &loc);
    if (e == ST_OK && tiny && !loc_in_last_pack(g, f, &loc))
        e = ST_ERR_NOT_FOUND; /* not where the file goes on: stored again */
    if (e == ST_OK && (e = old_pack_retired(g, &loc.pack, &retired)))
        return e;
    if (e == ST_OK && !retired && (e = old_pack_usable(g, &loc.pack, &usable)))
        return e;
    if (e == ST_OK && usable) {
        ref->offset = loc.offset;
        ref->stored_len = loc.stored_len;
        return pack_slot(g, &loc.pack, &ref->pack);
    }
    if (e != ST_OK && e != ST_ERR_NOT_FOUND)
        return e;
    /* New, in a pack pending GC (forgotten by the index), or in a retired
     * pack: store it (the last into the rehome stream). */
    if (retired)
        stream = STREAM_REHOME;
    return store_chunk(g, stream, data, ref, plan);
}

/* Stores (or dedups) the chunk data[0..len) and appends its reference; an
 * all-zero chunk becomes a hole instead. data is chunk_buf or, for a chunk
 * that lies whole in one read, the read buffer itself (no copy). */
static st_err emit_chunk(st_ingest *g, st_file_entry *f, size_t *refs_cap, const uint8_t *data,
                         size_t len)
{
    st_err e;
    if (is_all_zero(data, len)) {
        e = add_hole(g, f, refs_cap, len);
    } else {
        st_chunk_ref ref = {.id = st_id_of(data, len), .raw_len = (uint32_t)len};
        e = place_chunk(g, f, data, &ref, PLAN_FILE);
        if (!e)
            e = add_ref(g, f, refs_cap, &ref);
    }
    g->file_at += len;
    return e;
}

/* Stores the open bundle (if it holds anything) as one chunk and fills in
 * the slice of every file waiting on it. The id rule, codec choice and
 * dedup are any chunk's, so a bundle of the same files with the same bytes
 * as in an earlier step is found by id and not stored again. */
static st_err close_bundle(st_ingest *g)
{
    if (!g->bundle_len)
        return ST_OK;
    st_chunk_ref ref = {.id = st_id_of(g->bundle, g->bundle_len),
                        .raw_len = (uint32_t)g->bundle_len};
    st_err e = place_chunk(g, NULL, g->bundle, &ref, PLAN_BUNDLE);
    if (e)
        return e;
    for (size_t i = 0; i < g->nbundle_files; i++) {
        st_chunk_ref *slice = &g->files[g->bundle_files[i]].chunks[0];
        slice->id = ref.id;
        slice->pack = ref.pack;
        slice->offset = ref.offset;
        slice->stored_len = ref.stored_len;
        slice->bundle_len = ref.raw_len;
    }
    g->stats.bundles++;
    g->stats.bundled_files += g->nbundle_files;
    g->bundle_len = 0;
    g->nbundle_files = 0;
    return ST_OK;
}

/* Makes f (the entry files[nfiles] being built) a slice of the open bundle
 * holding data[0..len) (1 <= len < ST_INGEST_DEDUP_MIN), first closing the
 * bundle if len would take it past ST_MANIFEST_MAX_BUNDLE. The slice's
 * location is filled in by close_bundle. */
static st_err add_to_bundle(st_ingest *g, st_file_entry *f, const uint8_t *data, size_t len)
{
    st_err e = ST_OK;
    if (g->bundle_len + len > ST_MANIFEST_MAX_BUNDLE && (e = close_bundle(g)))
        return e;
    if ((e = st_array_grow((void **)&g->bundle_files, &g->bundle_files_cap, g->nbundle_files + 1,
                           sizeof *g->bundle_files)))
        return e;
    if (!(f->chunks = malloc(sizeof *f->chunks)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    f->nchunks = 1;
    f->chunks[0] = (st_chunk_ref){.raw_len = (uint32_t)len, .skip = (uint32_t)g->bundle_len};
    f->size = len;
    f->digest_absent = 1; /* the bundle's id authenticates its bytes */
    memcpy(g->bundle + g->bundle_len, data, len);
    g->bundle_len += len;
    g->bundle_files[g->nbundle_files++] = g->nfiles;
    g->stats.chunks++;
    g->has_slice = 1;
    return ST_OK;
}

/* Emits the chunk gathered in chunk_buf (the one that spans reads). */
static st_err emit_buffered(st_ingest *g, st_file_entry *f, size_t *refs_cap)
{
    const size_t len = g->chunk_len;
    g->chunk_len = 0;
    return emit_chunk(g, f, refs_cap, g->chunk_buf, len);
}

/*
 * Finds the data region at or after off: *data is where it starts (off if
 * off is in data; the file's size if only a hole follows) and *data_end
 * where the next hole starts (the size at the latest; UINT64_MAX if the file
 * system cannot tell, which then reads as data to the end).
 */
static st_err find_data(int fd, uint64_t off, uint64_t *data, uint64_t *data_end,
                        const char *relpath)
{
    off_t d = lseek(fd, (off_t)off, SEEK_DATA);
    if (d < 0 && errno == ENXIO) { /* nothing but a hole up to the end */
        struct stat st;
        if (fstat(fd, &st) < 0)
            return st_seterr(ST_ERR_IO, "stat %s: %s", relpath, strerror(errno));
        *data = *data_end = (uint64_t)st.st_size > off ? (uint64_t)st.st_size : off;
        return ST_OK;
    }
    if (d < 0) /* no hole support (EINVAL): all data */
        return ST_OK;
    off_t h = lseek(fd, d, SEEK_HOLE);
    *data = (uint64_t)d;
    *data_end = h > d ? (uint64_t)h : UINT64_MAX;
    return ST_OK;
}

/*
 * Reads fd from *off up to data_end (or its end: *eof = 1) through the
 * chunker into f, hashing what it reads into digest. A seekable fd is read
 * with pread (the hole search moves its offset), a pipe with read. The
 * first *prefilled bytes are in read_buf already (read_head's, from a
 * pipe, which cannot read them again); *prefilled is then 0.
 */
static st_err ingest_data(st_ingest *g, int fd, int seekable, uint64_t *off, uint64_t data_end,
                          st_file_entry *f, size_t *refs_cap, st_hasher *digest, int *eof,
                          size_t *prefilled)
{
    st_err e;
    while (*off < data_end) {
        size_t want = data_end - *off < READ_BUF_SIZE ? (size_t)(data_end - *off) : READ_BUF_SIZE;
        ssize_t n = *prefilled ? (ssize_t)*prefilled
                    : seekable ? pread(fd, g->read_buf, want, (off_t)*off)
                               : read(fd, g->read_buf, want);
        *prefilled = 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return st_seterr(ST_ERR_IO, "read %s: %s", f->path, strerror(errno));
        if (n == 0) {
            *eof = 1;
            return ST_OK;
        }
        st_hasher_update(digest, g->read_buf, (size_t)n);
        f->size += (uint64_t)n;
        *off += (uint64_t)n;
        const uint8_t *p = g->read_buf;
        size_t left = (size_t)n;
        while (left) {
            int cut = 0;
            size_t used = st_chunker_next(g->chunker, p, left, &cut);
            if (g->chunk_len + used > g->max_chunk)
                return st_seterr(ST_ERR_CORRUPT, "chunker exceeded its maximum chunk size");
            const uint8_t *chunk = p;
            p += used;
            left -= used;
            /* A chunk whole in this read is sealed from read_buf; only one
             * that spans reads is gathered in chunk_buf (a copy). */
            if (cut && !g->chunk_len) {
                if ((e = emit_chunk(g, f, refs_cap, chunk, used)))
                    return e;
                continue;
            }
            memcpy(g->chunk_buf + g->chunk_len, chunk, used);
            g->chunk_len += used;
            if (cut && (e = emit_buffered(g, f, refs_cap)))
                return e;
        }
    }
    return ST_OK;
}

/*
 * Reads the first bytes of fd (from off) into read_buf, up to
 * ST_INGEST_DEDUP_MIN of them: *len, and *eof = 1 if the file ended there.
 * A file is small, and goes into a bundle, by what this read finds, not by
 * a size the caller passed (the mount's uploader had none to pass).
 */
static st_err read_head(st_ingest *g, int fd, int seekable, uint64_t off, size_t *len, int *eof,
                        const char *relpath)
{
    *len = 0;
    *eof = 0;
    while (*len < ST_INGEST_DEDUP_MIN) {
        size_t want = ST_INGEST_DEDUP_MIN - *len;
        ssize_t n = seekable ? pread(fd, g->read_buf + *len, want, (off_t)(off + *len))
                             : read(fd, g->read_buf + *len, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return st_seterr(ST_ERR_IO, "read %s: %s", relpath, strerror(errno));
        if (n == 0) {
            *eof = 1;
            break;
        }
        *len += (size_t)n;
    }
    return ST_OK;
}

/* Counts f, the entry files[nfiles] just completed, as part of the ingest. */
static void file_added(st_ingest *g, const st_file_entry *f)
{
    g->nfiles++;
    g->stats.files++;
    g->stats.logical_bytes += f->size;
}

st_err st_ingest_file(st_ingest *g, int fd, const char *relpath, const struct stat *st,
                      int32_t rank)
{
    size_t plen = strlen(relpath);
    if (!st_path_is_clean(relpath, plen))
        return st_seterr(ST_ERR_INVALID, "path '%s' cannot be stored (not a clean relative path)",
                         relpath);
    st_err e = st_array_grow((void **)&g->files, &g->files_cap, g->nfiles + 1, sizeof *g->files);
    if (e)
        return e;
    st_file_entry *f = &g->files[g->nfiles];
    memset(f, 0, sizeof *f);
    f->path = strdup(relpath);
    if (!f->path)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    f->mode = st->st_mode & 07777;
    f->mtime_ns = (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
    f->rank = rank;

    st_hasher digest;
    if (st_hasher_init(&digest)) {
        free(f->path);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    size_t refs_cap = 0;
    st_chunker_reset(g->chunker);
    g->chunk_len = 0;
    g->plans[PLAN_FILE].gen++; /* a new plan from its first chunk's commit */
    off_t start = lseek(fd, 0, SEEK_CUR);
    const int seekable = start >= 0; /* a pipe has no holes to find */
    uint64_t off = seekable ? (uint64_t)start : 0;
    g->file_at = off;
    size_t head = 0;
    int head_eof = 0;
    if ((e = read_head(g, fd, seekable, off, &head, &head_eof, relpath)))
        goto fail;
    /* A small file goes into the bundle; one of only zeros stays a hole
     * extent, as the chunks of zeros of a larger file do: it costs no
     * bundle bytes and nothing to fetch when read, and it leaves the
     * bundle's bytes (and so their dedup) alone. Its digest, stored as for
     * any file with a hole, is the same for every such file of one size,
     * which the manifest's compression all but removes. */
    if (head_eof && head && head < ST_INGEST_DEDUP_MIN && !is_all_zero(g->read_buf, head)) {
        const uint64_t cut_hash = st_hash64(g->read_buf, head);
        if ((e = add_to_bundle(g, f, g->read_buf, head)))
            goto fail;
        st_hasher_free(&digest);
        file_added(g, f);
        if (g->bundle_len >= ST_INGEST_BUNDLE_MIN && !(cut_hash & ST_INGEST_BUNDLE_CUT_MASK))
            return close_bundle(g);
        return ST_OK;
    }
    /* A larger file is read again from its start with the hole search (from
     * the page cache); a pipe's bytes cannot be, so they are passed on. */
    size_t prefilled = seekable ? 0 : head;
    for (;;) {
        uint64_t data = off, data_end = UINT64_MAX;
        if (seekable && (e = find_data(fd, off, &data, &data_end, relpath)))
            goto fail;
        if (data > off) { /* a hole: the chunk before it ends here */
            if (g->chunk_len && (e = emit_buffered(g, f, &refs_cap)))
                goto fail;
            if ((e = add_hole(g, f, &refs_cap, data - off)))
                goto fail;
            g->file_at += data - off;
            st_hasher_update_zeros(&digest, data - off);
            st_chunker_reset(g->chunker);
            f->size += data - off;
            off = data;
        }
        if (data == data_end)
            break; /* the file ends in (or is) a hole */
        int eof = 0;
        if ((e = ingest_data(g, fd, seekable, &off, data_end, f, &refs_cap, &digest, &eof,
                             &prefilled)))
            goto fail;
        if (eof)
            break;
    }
    if (g->chunk_len && (e = emit_buffered(g, f, &refs_cap)))
        goto fail;
    f->digest = st_hasher_final(&digest);
    st_hasher_free(&digest);
    file_added(g, f);
    return ST_OK;
fail:
    st_hasher_free(&digest);
    free(f->path);
    free(f->chunks);
    memset(f, 0, sizeof *f);
    return e;
}

st_err st_ingest_add_stored(st_ingest *g, const st_manifest *src, const st_file_entry *f,
                            const char *relpath)
{
    if (!st_path_is_clean(relpath, strlen(relpath)))
        return st_seterr(ST_ERR_INVALID, "path '%s' cannot be stored", relpath);
    st_err e = st_array_grow((void **)&g->files, &g->files_cap, g->nfiles + 1, sizeof *g->files);
    if (e)
        return e;
    st_file_entry *dst = &g->files[g->nfiles];
    *dst = *f;
    dst->path = strdup(relpath);
    dst->chunks = f->nchunks ? malloc(f->nchunks * sizeof *dst->chunks) : NULL;
    if (!dst->path || (f->nchunks && !dst->chunks)) {
        free(dst->path);
        free(dst->chunks);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < f->nchunks && !e; i++) {
        dst->chunks[i] = f->chunks[i];        /* a slice as it is: its bundle stays whole */
        if (!st_chunk_is_hole(&f->chunks[i])) /* a hole is in no pack */
            e = pack_slot(g, &src->packs[f->chunks[i].pack], &dst->chunks[i].pack);
        if (!e && src->pack_seals && !st_chunk_is_hole(&f->chunks[i]))
            e = ingest_note_seal(g, &src->packs[f->chunks[i].pack],
                                 &src->pack_seals[f->chunks[i].pack]);
        g->has_slice |= st_chunk_is_slice(&f->chunks[i]);
    }
    /* Version 3 stores no digest for a file of one whole chunk: it is that
     * chunk's id. Restored, it lets a manifest without slices (version 1 or
     * 2, which store every digest) carry the file. */
    if (f->digest_absent && f->nchunks == 1 && !st_chunk_is_hole(&f->chunks[0]) &&
        !st_chunk_is_slice(&f->chunks[0]) && f->chunks[0].raw_len == f->size) {
        dst->digest = f->chunks[0].id;
        dst->digest_absent = 0;
    }
    if (e) {
        free(dst->path);
        free(dst->chunks);
        return e;
    }
    file_added(g, dst);
    g->stats.chunks += f->nchunks;
    return ST_OK;
}

static int cmp_file_path(const void *a, const void *b)
{
    return st_path_cmp(((const st_file_entry *)a)->path, ((const st_file_entry *)b)->path);
}

st_err st_ingest_finish(st_ingest *g, st_manifest *m)
{
    st_err e = close_bundle(g);
    if (!e)
        e = seal_drain(g);
    if (!e)
        e = ingest_flush_pack(g, STREAM_NEW);
    if (!e)
        e = ingest_flush_pack(g, STREAM_REHOME);
    st_err e2 = ingest_drain_uploads(g);
    if (e || (e = e2))
        return e;
    for (size_t i = 0; i < g->nfiles; i++)
        for (size_t k = 0; k < g->files[i].nchunks; k++)
            resolve_ref(g, &g->files[i].chunks[k]);
    /* Version 3 (written when a file is a slice) lists files in tree order
     * and refuses any other; its bundle table follows from the file order,
     * so sorting after the bundles were made changes nothing stored. */
    st_pack_seal *seals = NULL;
    if ((e = ingest_pack_seals(g, &seals)))
        return e;
    /* Version 4 (sealed packs) keeps version 3's tree order too. */
    if ((g->has_slice || seals) && g->nfiles > 1)
        qsort(g->files, g->nfiles, sizeof *g->files, cmp_file_path);
    m->pack_seals = seals;
    m->packs = g->packs;
    m->npacks = g->npacks;
    m->files = g->files;
    m->nfiles = g->nfiles;
    g->packs = NULL;
    g->files = NULL;
    g->npacks = g->nfiles = 0;
    g->finished = m;
    return ST_OK;
}

/* The last look before the publish (docs/GC.md, "Writers"), at every pack
 * the finished manifest names. A young marker is accepted: the GC's next
 * scan, no earlier than grace after the marking, will find this publish.
 * Runs on a thread of the publish's first round while the ingest's own
 * thread waits in st_catalog_publish, so it alone touches g meanwhile. */
static st_err last_look(void *arg)
{
    st_ingest *g = arg;
    const st_manifest *m = g->finished;
    if (!m)
        return st_seterr(ST_ERR_INVALID, "last look before st_ingest_finish");
    int64_t deadline = INT64_MAX;
    size_t bad = 0;
    st_err e = st_gc_packs_usable(g->backend, g->job, m->packs, m->npacks, &deadline, &bad);
    if (e == ST_ERR_BUSY) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_errmsg());
        st_state_pack_forget(g->state, g->job, &m->packs[bad]);
        return st_seterr(ST_ERR_TRANSIENT,
                         "not publishing: %s; its chunks will be stored again on retry", msg);
    }
    return e;
}

st_publish_check st_ingest_last_look(st_ingest *g)
{
    return (st_publish_check){.fn = last_look, .arg = g};
}

const st_ingest_stats *st_ingest_get_stats(const st_ingest *g)
{
    return &g->stats;
}

void st_ingest_free(st_ingest *g)
{
    if (!g)
        return;
    st_chunker_free(g->chunker);
    free(g->read_buf);
    free(g->chunk_buf);
    free(g->scratch);
    free(g->bundle);
    free(g->bundle_files);
    pthread_mutex_lock(&g->seal_lock);
    g->seal_stopping = 1;
    pthread_cond_broadcast(&g->seal_changed);
    pthread_mutex_unlock(&g->seal_lock);
    for (int i = 0; i < g->nseal_workers; i++)
        pthread_join(g->seal_workers[i], NULL);
    for (int i = 0; i < SEAL_LAG; i++) {
        free(g->jobs[i].raw);
        free(g->jobs[i].enc);
    }
    pthread_cond_destroy(&g->seal_changed);
    pthread_mutex_destroy(&g->seal_lock);
    pthread_mutex_lock(&g->lock);
    g->stopping = 1;
    pthread_cond_broadcast(&g->changed);
    pthread_mutex_unlock(&g->lock);
    for (int i = 0; i < g->nworkers; i++)
        pthread_join(g->workers[i], NULL);
    for (int i = 0; i < MAX_PARALLEL + NSTREAMS; i++)
        st_pack_writer_free(&g->bufs[i].w);
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->lock);
    st_idmap_free(&g->new_ids);
    st_idmap_free(&g->pack_slots);
    ingest_free_seals(g);
    st_idmap_free(&g->gc_checked);
    st_gc_listing_free(&g->listing);
    st_idmap_free(&g->retired);
    free(g->open_chunks);
    free(g->packs);
    for (size_t i = 0; i < g->nfiles; i++) {
        free(g->files[i].path);
        free(g->files[i].chunks);
    }
    free(g->files);
    free(g);
}
