/*
 * st_restore — manifest file entry -> verified bytes in a local fd.
 * See st_restore.h.
 */
#define _GNU_SOURCE /* SEEK_DATA, SEEK_HOLE */
#include "engine/st_restore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/st_bundlecache.h"
#include "engine/st_envelope.h"
#include "format/st_codec.h"
#include "util/st_array.h"
#include "util/st_fsutil.h"
#include "util/st_hash.h"
#include "format/st_part.h"

struct st_restorer {
    st_backend *backend;
    char job[ST_JOB_MAX + 1];
    /* A buffered run's windows, one after another (window_base): one
     * buffer for all, grown to the largest run and kept, within
     * ST_RESTORE_MAX_GET. (A buffer per window, each in a slot of its own,
     * was freed and grown again whenever a run split its bytes between
     * packs another way than the run before, into fresh pages: a page
     * fault per 4 KiB on every GET's copy; docs/BENCHMARKS.md.) */
    uint8_t *arena;
    size_t arena_cap;
    uint8_t *stage; /* one chunk that arrived split across stream pieces */
    size_t stage_cap;
    uint8_t *raw; /* one decoded chunk */
    size_t raw_cap;
    uint8_t *scratch;
    size_t scratch_cap;
    /* Decoded bundles its slices come from: shared (st_restorer_share_bundles),
     * or its own of ST_BUNDLECACHE_PER_WORKER slots, made at the first slice. */
    st_bundlecache *bundles;
    int owns_bundles;
    const st_keyring *kr; /* opens sealed packs (st_restorer_set_keyring); NULL: none */
    uint8_t *opened;      /* one opened record of a sealed pack */
    size_t opened_cap;
    st_pack_opener opener; /* the key of the last sealed pack read */
    st_restore_stats stats;
};

void st_restorer_set_keyring(st_restorer *r, const st_keyring *kr)
{
    r->kr = kr;
}

st_err st_restorer_new(st_backend *backend, const char *job, st_restorer **out)
{
    *out = NULL;
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    st_restorer *r = calloc(1, sizeof *r);
    if (!r)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    r->backend = backend;
    strcpy(r->job, job);
    *out = r;
    return ST_OK;
}

/* Grows the allocation *data of *cap bytes to exactly need bytes if it is
 * smaller (its bytes are not kept: the caller overwrites them). */
static st_err grow_buffer(uint8_t **data, size_t *cap, size_t need)
{
    if (need <= *cap)
        return ST_OK;
    uint8_t *p = realloc(*data, need);
    if (!p)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    *data = p;
    *cap = need;
    return ST_OK;
}

/* Makes sure the decode buffers hold a chunk of raw_len bytes. */
static st_err reserve_decode(st_restorer *r, size_t raw_len)
{
    st_err e = grow_buffer(&r->raw, &r->raw_cap, raw_len);
    return e ? e : grow_buffer(&r->scratch, &r->scratch_cap, st_codec_scratch_bound(raw_len));
}

/*
 * Planning a run: the refs [first, first + n) that one set of ranged GETs
 * serves, at most one GET (a window) per pack. An incremental step's file
 * alternates between packs (a frozen-backbone fine-tune: each record's new
 * header in this save's pack, its data in the first save's; measured on RGW:
 * 268 GETs for a 16 MiB file, one per pack switch, when windows were cut at
 * every switch), so a run keeps one window open for each pack it touches.
 *
 * A window is acceptable under either rule: the greedy (gap) rule, every
 * ref added since it opened lay inside it or widened it by at most
 * ST_RESTORE_GAP_MAX bytes of unneeded data (a repeat, a reordered or nearby
 * chunk); or the dense rule, at least 1/ST_RESTORE_DENSITY of it is needed
 * bytes (a DCP shard's own chunks interleaved with first copies of repeated
 * records megabytes away: measured 2,276 GETs for an 8 MiB 4-rank step
 * under the gap rule alone, 5 with it). A repeat counts its bytes again, so
 * the density is an estimate; the waste is bounded by the window. The run
 * is the longest prefix whose windows are all acceptable, found in one scan
 * that stops at a hard limit: the windows' spans together beyond
 * ST_RESTORE_MAX_GET (they are all held until the run's bytes are written in
 * file order, so this is the restorer's memory, as one GET's was), a pack
 * beyond ST_RESTORE_RUN_PACKS, or ST_RESTORE_LOOKAHEAD refs past the last
 * acceptable prefix (bounds the scan where neither rule holds).
 *
 * A run that is *streamable* (one window, its refs in pack order without
 * overlap, no hole) holds no window: each chunk is decoded as soon as the
 * stream has passed its last byte. Its limit is ST_RESTORE_MAX_STREAM
 * instead, so that a file's run through one pack is one GET of the pack
 * rather than one per 16 MiB. A ref that would make it unstreamable ends it
 * when it holds more than ST_RESTORE_MAX_GET, and also when no ref in the
 * next ST_RESTORE_MAX_GET bytes comes back to its pack: a buffered run
 * would then cost the same GETs (one per pack) and hold a window of up to
 * ST_RESTORE_MAX_GET per thread, each page a fault the first time, while
 * streamed, the decoding overlaps the transfer (a file cut into 16 MiB
 * tasks crosses a pack boundary in one task in three: docs/BENCHMARKS.md,
 * "Where restore's time goes").
 */
typedef struct restore_window {
    uint32_t pack; /* index into the manifest's packs */
    uint64_t lo;   /* [lo, end): the bytes of the pack one GET reads */
    uint64_t end;
    uint64_t needed; /* stored bytes of the refs it serves */
    int gaps_ok;     /* every ref kept within the gap rule */
} restore_window;

typedef struct restore_plan {
    restore_window win[ST_RESTORE_RUN_PACKS];
    size_t nwin;
    uint64_t spans; /* the windows' spans added up */
    int streamable; /* one window, refs in pack order, no hole: streamed */
} restore_plan;

/* The slot of pack's window in plan, or plan->nwin if it has none. */
static size_t window_slot(const restore_plan *plan, uint32_t pack)
{
    size_t k = 0;
    while (k < plan->nwin && plan->win[k].pack != pack)
        k++;
    return k;
}

/* Adds chunk ref b (not a hole) to plan; 0 if that takes the spans past
 * max_spans or breaks another hard limit (plan then unchanged). */
static int plan_add(restore_plan *plan, const st_chunk_ref *b, uint64_t max_spans)
{
    size_t k = window_slot(plan, b->pack);
    if (k == plan->nwin) { /* a pack new to the run: a window of its own */
        if (k == ST_RESTORE_RUN_PACKS || (k && plan->spans + b->stored_len > max_spans))
            return 0;
        plan->win[plan->nwin++] = (restore_window){.pack = b->pack,
                                                   .lo = b->offset,
                                                   .end = b->offset + b->stored_len,
                                                   .needed = b->stored_len,
                                                   .gaps_ok = 1};
        plan->spans += b->stored_len;
        return 1;
    }
    restore_window *w = &plan->win[k];
    uint64_t b_end = b->offset + b->stored_len;
    uint64_t lo = b->offset < w->lo ? b->offset : w->lo;
    uint64_t end = b_end > w->end ? b_end : w->end;
    uint64_t growth = (end - lo) - (w->end - w->lo);
    if (plan->spans + growth > max_spans)
        return 0;
    if (growth > b->stored_len && growth - b->stored_len > ST_RESTORE_GAP_MAX)
        w->gaps_ok = 0;
    w->lo = lo;
    w->end = end;
    w->needed += b->stored_len;
    plan->spans += growth;
    return 1;
}

/* 1 if every window of plan is acceptable under the gap or the dense rule. */
static int plan_acceptable(const restore_plan *plan)
{
    for (size_t k = 0; k < plan->nwin; k++) {
        const restore_window *w = &plan->win[k];
        if (!w->gaps_ok && w->needed * ST_RESTORE_DENSITY < w->end - w->lo)
            return 0;
    }
    return 1;
}

/* 1 if a ref of pack among refs [from, limit) lies within the next
 * ST_RESTORE_MAX_GET stored bytes: a buffered run could share its window. */
static int pack_comes_back(const st_file_entry *f, size_t from, size_t limit, uint32_t pack)
{
    uint64_t bytes = 0;
    for (size_t i = from; i < limit && bytes <= ST_RESTORE_MAX_GET; i++) {
        const st_chunk_ref *b = &f->chunks[i];
        if (st_chunk_is_hole(b))
            continue;
        if (b->pack == pack)
            return 1;
        bytes += b->stored_len;
    }
    return 0;
}

/* The run from ref first (before limit): its length (>= 1) and, in *best,
 * its windows. Holes join a run without a window; so do the refs sides
 * serves, without making it unstreamable. */
static size_t plan_run(const st_file_entry *f, const st_side_chunks *sides, size_t first,
                       size_t limit, restore_plan *best)
{
    restore_plan cur = {.nwin = 0, .streamable = 1};
    size_t n_best = 0;
    uint64_t stream_end = 0; /* where the last ref ended in its pack */
    *best = cur;
    for (size_t n = 0; first + n < limit && n - n_best < ST_RESTORE_LOOKAHEAD; n++) {
        const st_chunk_ref *b = &f->chunks[first + n];
        if (st_chunk_is_slice(b)) /* restored on its own: restore_span() */
            break;
        if (st_side_has(sides, first + n)) {
            if (plan_acceptable(&cur)) {
                *best = cur;
                n_best = n + 1;
            }
            continue;
        }
        int hole = st_chunk_is_hole(b);
        int streams = cur.streamable && !hole &&
                      (!cur.nwin || (b->pack == cur.win[0].pack && b->offset >= stream_end));
        /* A streamed run ends where the stream breaks unless the refs ahead
         * come back to its pack: only then does a buffered run save a GET. */
        if (!streams && cur.streamable && cur.nwin &&
            (cur.spans > ST_RESTORE_MAX_GET ||
             !pack_comes_back(f, first + n, limit, cur.win[0].pack)))
            break;
        cur.streamable = streams;
        if (!hole && !plan_add(&cur, b, streams ? ST_RESTORE_MAX_STREAM : ST_RESTORE_MAX_GET))
            break;
        if (!hole)
            stream_end = b->offset + b->stored_len;
        if (plan_acceptable(&cur)) {
            *best = cur;
            n_best = n + 1;
        }
    }
    return n_best;
}

static st_err digest_offer(st_file_digest *d, int fd, uint64_t off, const uint8_t *data,
                           uint64_t len);

int st_restore_ends_at_pack(const st_file_entry *f, size_t next, uint64_t held, uint64_t limit)
{
    if (next == 0 || next >= f->nchunks || held < limit / 2 || st_chunk_is_side(f, next))
        return 0;
    /* The pack the piece is in: its last ref's before next that is not a
     * side chunk (side chunks are few and far between; the scan is bounded). */
    size_t k = next - 1;
    while (k > 0 && next - k < ST_SIDE_SCAN && st_chunk_is_side(f, k))
        k--;
    return f->chunks[next].pack != f->chunks[k].pack;
}

/* Where the bytes of one span go: see restore_span(). */
typedef struct span_sink {
    const st_manifest *m; /* f's: its packs and their seals */
    const st_file_entry *f;
    int fd;
    st_hasher *digest;       /* sequential write + whole-file digest, or NULL */
    const st_restore_to *to; /* else: pwrite, and what else to tell (not NULL) */
    st_side_chunks *sides;   /* the refs it serves are taken from it (NULL: none) */
    uint64_t pos;            /* file offset of the next chunk */
} span_sink;

/* The pwrite sink's bytes [pos, pos + len) are written and verified (data:
 * them, NULL for a hole): the shared digest and the caller hear of it. */
static st_err sink_written(span_sink *k, const uint8_t *data, uint64_t len)
{
    st_err e = k->to->digest ? digest_offer(k->to->digest, k->fd, k->pos, data, len) : ST_OK;
    if (!e && k->to->written)
        k->to->written(k->to->arg, k->pos, len);
    return e;
}

/*
 * A hole extent of len bytes at k->pos: nothing is fetched or written. The
 * sequential sink (digest set) hashes its zeros and seeks over it (the file
 * is sized at the end); the pwrite sink's file was sized before.
 */
static st_err skip_hole(st_restorer *r, span_sink *k, uint64_t len)
{
    r->stats.hole_bytes += len;
    st_err e = ST_OK;
    if (!k->digest) {
        e = sink_written(k, NULL, len);
    } else {
        st_hasher_update_zeros(k->digest, len);
        if (lseek(k->fd, (off_t)len, SEEK_CUR) < 0)
            e = st_seterr(ST_ERR_IO, "restoring %s: seek over the hole at byte %llu: %s",
                          k->f->path, (unsigned long long)k->pos, strerror(errno));
    }
    k->pos += len;
    return e;
}

static uint64_t window_span(const restore_plan *plan, size_t k)
{
    return k < plan->nwin ? plan->win[k].end - plan->win[k].lo : 0;
}

/* Where window k of plan starts in r->arena: after the windows before it. */
static uint64_t window_base(const restore_plan *plan, size_t k)
{
    uint64_t base = 0;
    for (size_t i = 0; i < k; i++)
        base += window_span(plan, i);
    return base;
}

/*
 * Decodes the stored chunk p[0..ref->stored_len), verifies it (XXH3-128, in
 * st_codec_decode_view) and only then hands its bytes to the sink: written
 * sequentially and hashed into the digest, or pwritten at their offset.
 */
static st_err deliver_bytes(span_sink *k, const uint8_t *raw, size_t raw_len);

static st_err deliver_chunk(st_restorer *r, span_sink *k, const st_chunk_ref *ref, const uint8_t *p)
{
    size_t raw_len, enc_len = ref->stored_len;
    const uint8_t *raw; /* in p (a raw chunk) or r->raw: no extra copy */
    st_err e = reserve_decode(r, ref->raw_len);
    if (!e && k->m->pack_seals) { /* a sealed pack's record: opened first */
        e = grow_buffer(&r->opened, &r->opened_cap, enc_len ? enc_len : 1);
        if (!e)
            e = st_envelope_open_chunk(&r->opener, r->kr, r->job, &k->m->packs[ref->pack],
                                       &k->m->pack_seals[ref->pack], ref->offset, p, enc_len,
                                       r->opened);
        p = r->opened;
        enc_len -= ST_CRYPT_TAG_LEN;
    }
    if (!e)
        e = st_codec_decode_view(p, enc_len, &ref->id, r->raw, r->raw_cap, &raw_len, r->scratch,
                                 &raw);
    if (!e && raw_len != ref->raw_len)
        e = st_seterr(ST_ERR_CORRUPT, "chunk length differs from the manifest");
    if (e)
        return st_seterr(e, "restoring %s at byte %llu: %s", k->f->path, (unsigned long long)k->pos,
                         st_errmsg());
    return deliver_bytes(k, raw, raw_len);
}

/* Hands raw_len verified bytes at k->pos to the sink. */
static st_err deliver_bytes(span_sink *k, const uint8_t *raw, size_t raw_len)
{
    st_err e;
    if (k->digest) {
        st_hasher_update(k->digest, raw, raw_len);
        e = st_write_all(k->fd, raw, raw_len, k->f->path);
    } else {
        if (k->to->write_lock)
            pthread_mutex_lock(k->to->write_lock);
        e = st_pwrite_all(k->fd, raw, raw_len, k->pos, k->f->path);
        if (k->to->write_lock)
            pthread_mutex_unlock(k->to->write_lock);
        if (!e)
            e = sink_written(k, raw, raw_len);
    }
    if (!e)
        k->pos += raw_len;
    return e;
}

/*
 * Slice ref i of the file (a small file in a bundle: its only extent):
 * its bytes copied out of the whole decoded bundle, which the bundle cache
 * fetches (one GET of the whole bundle chunk, never of a part of it) and
 * checks against its id and bundle_len, or already holds.
 */
static st_err deliver_slice(st_restorer *r, const st_manifest *m, span_sink *k, size_t i)
{
    const st_chunk_ref *ref = &k->f->chunks[i];
    st_err e = ST_OK;
    if (!r->bundles) {
        e = st_bundlecache_new(ST_BUNDLECACHE_PER_WORKER, &r->bundles);
        r->owns_bundles = !e;
    }
    if (!e)
        e = grow_buffer(&r->raw, &r->raw_cap, ref->raw_len ? ref->raw_len : 1);
    if (e)
        return e;
    const st_bundle_source src = {.backend = r->backend,
                                  .job = r->job,
                                  .pack = &m->packs[ref->pack],
                                  .seal = m->pack_seals ? &m->pack_seals[ref->pack] : NULL,
                                  .kr = r->kr,
                                  .path = k->f->path,
                                  .gets = &r->stats.gets,
                                  .fetched = &r->stats.fetched_bytes};
    e = st_bundlecache_read(r->bundles, &src, ref, r->raw);
    return e ? e : deliver_bytes(k, r->raw, ref->raw_len);
}

/* Delivers side chunk ref i of the file from memory (loaded before its run:
 * load_sides). */
static st_err deliver_side(st_restorer *r, span_sink *k, size_t i)
{
    return deliver_chunk(r, k, &k->f->chunks[i], st_side_bytes(k->sides, i));
}

/* Makes sure the side chunks among refs [first, first + n) are in memory,
 * before the run's own GETs: none is fetched while a stream is open. */
static st_err load_sides(st_restorer *r, const span_sink *k, size_t first, size_t n)
{
    st_err e = ST_OK;
    for (size_t i = first; !e && i < first + n; i++)
        if (st_side_has(k->sides, i))
            e = st_side_load(k->sides, r->backend, r->job, i, &r->stats.gets,
                             &r->stats.fetched_bytes);
    return e;
}

/* The message of a failed GET of pack `key` (not the sink's own errors). */
static st_err get_failed(const st_file_entry *f, const char *key, st_err e)
{
    if (e == ST_ERR_NOT_FOUND) /* a part record names it: its loss is damage */
        return st_seterr(ST_ERR_CORRUPT, "restoring %s: pack %s is missing", f->path, key);
    return st_seterr(e, "restoring %s: %s", f->path, st_errmsg());
}

static st_err pack_short(const st_file_entry *f, const char *key)
{
    return st_seterr(ST_ERR_CORRUPT, "restoring %s: pack %s is shorter than the manifest says",
                     f->path, key);
}

/*
 * One GET's window [lo, lo + span) streamed (st_get_stream): each chunk is
 * decoded, verified and written as soon as its last byte has arrived, from
 * where it lies in the transport's piece, or from r->stage when it came
 * split across pieces. The window's unneeded bytes (gaps) are dropped.
 */
typedef struct window_stream {
    st_restorer *r;
    span_sink *sink;
    const st_chunk_ref *refs; /* in pack order (restore_plan.streamable) */
    size_t n, next;           /* refs[next] is the next to decode */
    size_t first;             /* refs[0] is the file's ref first */
    uint64_t lo;              /* the window's start in the pack */
    size_t staged;            /* bytes of refs[next] in r->stage */
    uint64_t received;        /* window bytes seen */
    int sink_failed;          /* a chunk failed: its message is final */
} window_stream;

/* Takes window bytes [at, at + len) into the chunk refs[next]: decoded in
 * place if the piece holds all of it, else staged. Returns bytes used. */
static size_t window_take(window_stream *w, uint64_t at, const uint8_t *data, size_t len, st_err *e)
{
    if (st_side_has(w->sink->sides, w->first + w->next)) { /* not in the stream */
        *e = deliver_side(w->r, w->sink, w->first + w->next++);
        return 0;
    }
    const st_chunk_ref *ref = &w->refs[w->next];
    uint64_t start = ref->offset - w->lo, end = start + ref->stored_len;
    if (at < start) /* a gap before the chunk */
        return start - at < len ? (size_t)(start - at) : len;
    if (!w->staged && at == start && end - at <= len) {
        w->next++;
        *e = deliver_chunk(w->r, w->sink, ref, data);
        return ref->stored_len;
    }
    size_t take = end - at < len ? (size_t)(end - at) : len;
    if (!w->staged)
        *e = grow_buffer(&w->r->stage, &w->r->stage_cap, ref->stored_len);
    if (*e)
        return take;
    memcpy(w->r->stage + w->staged, data, take);
    w->staged += take;
    if (w->staged == ref->stored_len) {
        w->staged = 0;
        w->next++;
        *e = deliver_chunk(w->r, w->sink, ref, w->r->stage);
    }
    return take;
}

static st_err window_on_bytes(void *arg, uint64_t at, const uint8_t *data, size_t len)
{
    window_stream *w = arg;
    w->received += len;
    st_err e = ST_OK;
    while (len && w->next < w->n && !e) {
        size_t used = window_take(w, at, data, len, &e);
        at += used;
        data += used;
        len -= used;
    }
    w->sink_failed = e != ST_OK;
    return e;
}

/* A streamable run: refs [first, first + n) of the file, its window (if
 * any: a run may be side chunks alone) streamed, the side chunks after the
 * window's last ref delivered once the stream has ended. */
static st_err restore_run_streamed(st_restorer *r, const st_manifest *m, span_sink *k,
                                   const restore_plan *plan, size_t first, size_t n)
{
    window_stream w = {.r = r, .sink = k, .refs = &k->f->chunks[first], .n = n, .first = first};
    st_err e = ST_OK;
    char key[ST_KEY_MAX] = "";
    if (plan->nwin) {
        w.lo = plan->win[0].lo;
        uint64_t span = plan->win[0].end - w.lo;
        const st_get_sink sink = {window_on_bytes, &w};
        e = st_key_pack(key, sizeof key, r->job, &m->packs[plan->win[0].pack]);
        if (e)
            return e;
        e = st_get_stream(r->backend, key, w.lo, span, &sink);
        r->stats.fetched_bytes += w.received;
        if (e)
            return w.sink_failed ? e : get_failed(k->f, key, e);
        r->stats.gets++;
        if (w.received != span)
            return pack_short(k->f, key);
    }
    while (!e && w.next < n && st_side_has(k->sides, first + w.next))
        e = deliver_side(r, k, first + w.next++);
    if (!e && w.next != n)
        return pack_short(k->f, key);
    return e;
}

/* Fetches each window of plan with one ranged GET of its pack into its
 * place in r->arena (in the order the run first needs them). */
static st_err fetch_windows(st_restorer *r, const st_manifest *m, const st_file_entry *f,
                            const restore_plan *plan)
{
    st_err e = grow_buffer(&r->arena, &r->arena_cap, window_base(plan, plan->nwin));
    for (size_t k = 0; !e && k < plan->nwin; k++) {
        const restore_window *w = &plan->win[k];
        uint64_t received = 0;
        char key[ST_KEY_MAX];
        e = st_key_pack(key, sizeof key, r->job, &m->packs[w->pack]);
        if (!e)
            e = st_get_into(r->backend, key, w->lo, w->end - w->lo, r->arena + window_base(plan, k),
                            &received);
        r->stats.fetched_bytes += received;
        if (e)
            return get_failed(f, key, e);
        r->stats.gets++;
        if (received != w->end - w->lo)
            return pack_short(f, key);
    }
    return e;
}

/* A run fetched whole, window by window, then decoded in file order: for
 * runs over several packs, with holes, or whose refs repeat or go back. */
static st_err restore_run_buffered(st_restorer *r, const st_manifest *m, span_sink *k,
                                   const restore_plan *plan, size_t first, size_t n)
{
    r->stats.buffered_runs++;
    st_err e = fetch_windows(r, m, k->f, plan);
    for (size_t j = 0; !e && j < n; j++) {
        const st_chunk_ref *ref = &k->f->chunks[first + j];
        if (st_chunk_is_hole(ref)) {
            e = skip_hole(r, k, ref->raw_len);
            continue;
        }
        if (st_side_has(k->sides, first + j)) {
            e = deliver_side(r, k, first + j);
            continue;
        }
        size_t slot = window_slot(plan, ref->pack);
        e = deliver_chunk(r, k, ref,
                          r->arena + window_base(plan, slot) + (ref->offset - plan->win[slot].lo));
    }
    return e;
}

/*
 * Restores chunks [first_chunk, first_chunk + count) of f, which start at
 * byte file_off, run by run (plan_run), and hands each chunk's bytes to the
 * sink (span_sink: written sequentially and hashed into digest, or pwritten
 * at their offset as `to` says) in file order, so a sequential sink and its
 * digest see the bytes in order whichever pack holds them. A streamable run
 * is streamed (decoding overlaps the transfer); any other run is fetched
 * whole, then decoded.
 */
static st_err restore_span(st_restorer *r, const st_manifest *m, const st_file_entry *f,
                           size_t first_chunk, size_t count, uint64_t file_off, int fd,
                           st_hasher *digest, const st_restore_to *to)
{
    const size_t end_chunk = first_chunk + count;
    span_sink k = {.m = m,
                   .f = f,
                   .fd = fd,
                   .digest = digest,
                   .to = to,
                   .sides = to ? to->sides : NULL,
                   .pos = file_off};
    for (size_t i = first_chunk; i < end_chunk;) {
        if (st_chunk_is_slice(&f->chunks[i])) {
            st_err e = deliver_slice(r, m, &k, i++);
            if (e)
                return e;
            continue;
        }
        restore_plan plan;
        size_t n = plan_run(f, k.sides, i, end_chunk, &plan);
        st_err e = load_sides(r, &k, i, n);
        if (!e)
            e = plan.streamable ? restore_run_streamed(r, m, &k, &plan, i, n)
                                : restore_run_buffered(r, m, &k, &plan, i, n);
        if (e)
            return e;
        i += n;
    }
    r->stats.bytes += k.pos - file_off;
    return ST_OK;
}

/* A file that ends in a hole was sought past its end: the offset reached
 * is its end (a regular file; /dev/null, which verify writes to, has none). */
static st_err size_after_hole(int fd, const st_file_entry *f)
{
    struct stat st;
    if (fstat(fd, &st) == 0 && !S_ISREG(st.st_mode))
        return ST_OK;
    off_t end = lseek(fd, 0, SEEK_CUR);
    if (end < 0 || ftruncate(fd, end) < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "restoring %s: size: %s",
                         f->path, strerror(errno));
    return ST_OK;
}

st_err st_restore_file(st_restorer *r, const st_manifest *m, const st_file_entry *f, int fd)
{
    st_hasher digest;
    if (st_hasher_init(&digest))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    uint64_t before = r->stats.bytes;
    st_err e = restore_span(r, m, f, 0, f->nchunks, 0, fd, &digest, NULL);
    uint64_t written = r->stats.bytes - before;
    if (!e && f->nchunks && st_chunk_is_hole(&f->chunks[f->nchunks - 1]))
        e = size_after_hole(fd, f);
    if (!e && written != f->size)
        e = st_seterr(ST_ERR_CORRUPT, "restoring %s: got %llu bytes, manifest says %llu", f->path,
                      (unsigned long long)written, (unsigned long long)f->size);
    if (!e && !f->digest_absent) { /* else its chunk ids authenticated every byte */
        st_id got = st_hasher_final(&digest);
        if (st_id_cmp(&got, &f->digest) != 0)
            e = st_seterr(ST_ERR_CORRUPT, "restoring %s: whole-file digest mismatch", f->path);
    }
    if (!e)
        r->stats.files++;
    st_hasher_free(&digest);
    return e;
}

st_err st_restore_chunks(st_restorer *r, const st_manifest *m, const st_file_entry *f, size_t first,
                         size_t count, int fd)
{
    return st_restore_chunks_to(r, m, f, first, count, fd, NULL);
}

st_err st_restore_chunks_to(st_restorer *r, const st_manifest *m, const st_file_entry *f,
                            size_t first, size_t count, int fd, const st_restore_to *to)
{
    static const st_restore_to just_written = {0};
    if (first > f->nchunks || count > f->nchunks - first)
        return st_seterr(ST_ERR_INVALID, "chunk range outside %s", f->path);
    uint64_t off = 0;
    for (size_t i = 0; i < first; i++)
        off += f->chunks[i].raw_len;
    return restore_span(r, m, f, first, count, off, fd, NULL, to ? to : &just_written);
}

/* Bytes of hole at pos in fd before data or the file's end (0: data at
 * pos, past the end, or no hole support). */
static uint64_t hole_at(int fd, uint64_t pos)
{
    off_t data = lseek(fd, (off_t)pos, SEEK_DATA);
    struct stat st;
    if (data < 0 && errno == ENXIO && fstat(fd, &st) == 0 && (uint64_t)st.st_size > pos)
        return (uint64_t)st.st_size - pos;
    return data > (off_t)pos ? (uint64_t)(data - (off_t)pos) : 0;
}

/* st_restore_digest_range(), asking pace(arg) (if set) before each block. */
static st_err digest_range_paced(int fd, const st_file_entry *f, st_hasher *digest, uint64_t off,
                                 uint64_t len, st_restore_pace pace, void *arg)
{
    uint8_t *buf = malloc(1 << 20);
    if (!buf)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    st_err e = ST_OK;
    uint64_t pos = off, end = off + len;
    while (pos < end && !(pace && (e = pace(arg)))) {
        /* The file's holes read as zeros: hash them without reading them
         * (up to the file's end: a short file must still fail below). */
        uint64_t zeros = hole_at(fd, pos);
        if (zeros) {
            zeros = zeros < end - pos ? zeros : end - pos;
            st_hasher_update_zeros(digest, zeros);
            pos += zeros;
            continue;
        }
        size_t want = end - pos < (1u << 20) ? (size_t)(end - pos) : (1u << 20);
        ssize_t n = pread(fd, buf, want, (off_t)pos);
        if (n <= 0) {
            e = st_seterr(ST_ERR_IO, "reading back %s: %s", f->path,
                          n < 0 ? strerror(errno) : "short file");
            break;
        }
        st_hasher_update(digest, buf, (size_t)n);
        pos += (uint64_t)n;
    }
    free(buf);
    return e;
}

st_err st_restore_digest_range(int fd, const st_file_entry *f, st_hasher *digest, uint64_t off,
                               uint64_t len)
{
    return digest_range_paced(fd, f, digest, off, len, NULL, NULL);
}

st_err st_restore_digest_check(const st_hasher *digest, uint64_t hashed, const st_file_entry *f)
{
    if (hashed != f->size)
        return st_seterr(ST_ERR_CORRUPT, "restoring %s: got %llu bytes, manifest says %llu",
                         f->path, (unsigned long long)hashed, (unsigned long long)f->size);
    if (f->digest_absent) /* nothing to compare: its chunk ids authenticated its bytes */
        return ST_OK;
    st_id got = st_hasher_final(digest);
    if (st_id_cmp(&got, &f->digest) != 0)
        return st_seterr(ST_ERR_CORRUPT, "restoring %s: whole-file digest mismatch", f->path);
    return ST_OK;
}

st_err st_restore_verify_file(int fd, const st_file_entry *f)
{
    return st_restore_verify_file_paced(fd, f, NULL, NULL);
}

st_err st_restore_verify_file_paced(int fd, const st_file_entry *f, st_restore_pace pace, void *arg)
{
    st_hasher digest;
    if (st_hasher_init(&digest))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    st_err e = digest_range_paced(fd, f, &digest, 0, f->size, pace, arg);
    if (!e)
        e = st_restore_digest_check(&digest, f->size, f);
    st_hasher_free(&digest);
    return e;
}

/* ---- the whole-file digest from memory (st_file_digest) ---- */

/* A piece of the file offered ahead of the hashing front. */
typedef struct digest_piece {
    uint64_t off, len;
    uint8_t *data; /* parked copy (a budget buffer of cap bytes), or NULL */
    uint64_t cap;
    int zeros; /* data NULL: a hole (hashes as zeros), else read back from the file */
} digest_piece;

struct st_file_digest {
    const st_file_entry *f;
    st_park_budget *budget;
    st_hasher hasher; /* used by the thread that set hashing */
    pthread_mutex_t lock;
    pthread_cond_t idle; /* hashing went to 0 */
    /* guarded by lock: */
    uint64_t front;       /* [0, front) hashed, or being hashed by the hashing thread */
    int hashing;          /* a thread adds bytes to hasher */
    digest_piece *pieces; /* offered beyond front, sorted by off, disjoint */
    size_t npieces, cap;
    st_file_digest_stats stats;
};

st_err st_file_digest_new(const st_file_entry *f, st_park_budget *budget, st_file_digest **out)
{
    *out = NULL;
    st_file_digest *d = calloc(1, sizeof *d);
    if (!d || st_hasher_init(&d->hasher)) {
        free(d);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    d->f = f;
    d->budget = budget;
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->idle, NULL);
    if (budget) {
        pthread_mutex_lock(&budget->lock);
        budget->users++;
        pthread_mutex_unlock(&budget->lock);
    }
    *out = d;
    return ST_OK;
}

/* Parked copies get buffers in steps of this, so that a spare fits the many
 * chunks a little shorter than the one it was made for (the chunker's
 * defaults cut 64 KiB to 1 MiB). */
#define PARK_GRAIN (64ull << 10)

/* Under b->lock: frees every spare. */
static void budget_drop_spares(st_park_budget *b)
{
    for (size_t i = 0; i < b->nspares; i++)
        free(b->spares[i].data);
    b->nspares = 0;
    b->spare_bytes = 0;
}

/*
 * A buffer of at least len bytes for a parked copy, taken from b: the
 * smallest spare that fits, else a fresh one (spares that do not fit are
 * freed first if the budget needs their room). NULL, with *cap 0, when the
 * budget is spent: the piece is then read back instead. ST_ERR_NOMEM when
 * malloc failed.
 */
static st_err park_buffer(st_park_budget *b, uint64_t len, uint8_t **out, uint64_t *cap)
{
    *out = NULL;
    *cap = 0;
    pthread_mutex_lock(&b->lock);
    size_t best = b->nspares;
    for (size_t i = 0; i < b->nspares; i++)
        if (b->spares[i].cap >= len &&
            (best == b->nspares || b->spares[i].cap < b->spares[best].cap))
            best = i;
    if (best < b->nspares) {
        *out = b->spares[best].data;
        *cap = b->spares[best].cap;
        b->spares[best] = b->spares[--b->nspares];
        b->spare_bytes -= *cap;
        atomic_fetch_add(&b->used, *cap);
        b->reused++;
        pthread_mutex_unlock(&b->lock);
        return ST_OK;
    }
    uint64_t want = (len + PARK_GRAIN - 1) / PARK_GRAIN * PARK_GRAIN;
    if (atomic_load(&b->used) + b->spare_bytes + want > b->max)
        budget_drop_spares(b); /* none fits: their room is worth more */
    st_err e = ST_OK;
    if (atomic_load(&b->used) + want <= b->max) {
        if ((*out = malloc(want))) {
            *cap = want;
            atomic_fetch_add(&b->used, want);
            b->fresh++;
        } else {
            e = st_seterr(ST_ERR_NOMEM, "out of memory");
        }
    }
    pthread_mutex_unlock(&b->lock);
    return e;
}

/* Gives a parked copy's buffer back to b as a spare (used + spares stay
 * within max: the buffer was counted in used). */
static void park_release(st_park_budget *b, uint8_t *data, uint64_t cap)
{
    pthread_mutex_lock(&b->lock);
    atomic_fetch_sub(&b->used, cap);
    if (st_array_grow((void **)&b->spares, &b->spares_cap, b->nspares + 1, sizeof *b->spares)) {
        free(data);
    } else {
        b->spares[b->nspares++] = (st_park_spare){data, cap};
        b->spare_bytes += cap;
    }
    pthread_mutex_unlock(&b->lock);
}

static void piece_release(st_file_digest *d, digest_piece *p)
{
    if (p->data) {
        park_release(d->budget, p->data, p->cap);
        p->data = NULL;
    }
}

/* Adds piece p to the digest (no lock held; the caller holds hashing). */
static st_err piece_hash(st_file_digest *d, int fd, digest_piece *p)
{
    st_err e = ST_OK;
    if (p->data)
        st_hasher_update(&d->hasher, p->data, p->len);
    else if (p->zeros)
        st_hasher_update_zeros(&d->hasher, p->len);
    else
        e = st_restore_digest_range(fd, d->f, &d->hasher, p->off, p->len);
    piece_release(d, p);
    return e;
}

/*
 * Holding hashing: adds the pieces that continue the front, in order, then
 * gives hashing up. A read-back failure leaves the front where it was, so
 * that st_file_digest_finish() reports the file short.
 */
static st_err digest_drain(st_file_digest *d, int fd)
{
    st_err e = ST_OK;
    pthread_mutex_lock(&d->lock);
    while (!e && d->npieces && d->pieces[0].off == d->front) {
        digest_piece p = d->pieces[0];
        memmove(d->pieces, d->pieces + 1, --d->npieces * sizeof *d->pieces);
        pthread_mutex_unlock(&d->lock);
        int read_back = !p.data && !p.zeros;
        e = piece_hash(d, fd, &p);
        pthread_mutex_lock(&d->lock);
        if (!e) {
            d->front += p.len;
            d->stats.hashed += p.len;
            d->stats.read_back += read_back ? p.len : 0;
        }
    }
    d->hashing = 0;
    pthread_cond_broadcast(&d->idle);
    pthread_mutex_unlock(&d->lock);
    return e;
}

/* Under d->lock: records [off, off + len) ahead of the front, parked if
 * data and the budget allow, merged into the piece before it when that is
 * of the same kind and ends where it starts. */
static st_err digest_park(st_file_digest *d, uint64_t off, const uint8_t *data, uint64_t len)
{
    size_t at = d->npieces;
    while (at && d->pieces[at - 1].off > off) /* pieces come mostly in order */
        at--;
    if ((at && d->pieces[at - 1].off + d->pieces[at - 1].len > off) ||
        (at < d->npieces && off + len > d->pieces[at].off) || off < d->front)
        return st_seterr(ST_ERR_INVALID, "restoring %s: bytes at %llu offered twice", d->f->path,
                         (unsigned long long)off);
    digest_piece p = {.off = off, .len = len, .zeros = !data};
    if (data && d->budget) {
        st_err e = park_buffer(d->budget, len, &p.data, &p.cap);
        if (e)
            return e;
        if (p.data)
            memcpy(p.data, data, len);
    }
    digest_piece *prev = at ? &d->pieces[at - 1] : NULL;
    if (prev && prev->off + prev->len == off && !prev->data && !p.data && prev->zeros == p.zeros) {
        prev->len += len; /* one read-back (or hole) of the whole range */
        return ST_OK;
    }
    st_err e = st_array_grow((void **)&d->pieces, &d->cap, d->npieces + 1, sizeof *d->pieces);
    if (e) {
        piece_release(d, &p);
        return e;
    }
    memmove(d->pieces + at + 1, d->pieces + at, (d->npieces - at) * sizeof *d->pieces);
    d->pieces[at] = p;
    d->npieces++;
    return ST_OK;
}

/*
 * Bytes [off, off + len) of the file are written to fd (data: them in
 * memory, NULL for a hole): hashed now if they are at the front and nobody
 * hashes (then whatever they join), else parked for the thread that hashes.
 */
static st_err digest_offer(st_file_digest *d, int fd, uint64_t off, const uint8_t *data,
                           uint64_t len)
{
    pthread_mutex_lock(&d->lock);
    if (d->hashing || off != d->front) {
        st_err e = digest_park(d, off, data, len);
        pthread_mutex_unlock(&d->lock);
        return e;
    }
    d->hashing = 1;
    d->front += len;
    d->stats.hashed += len;
    pthread_mutex_unlock(&d->lock);
    if (data)
        st_hasher_update(&d->hasher, data, len);
    else
        st_hasher_update_zeros(&d->hasher, len);
    return digest_drain(d, fd);
}

st_err st_file_digest_finish(st_file_digest *d, int fd)
{
    pthread_mutex_lock(&d->lock);
    while (d->hashing)
        pthread_cond_wait(&d->idle, &d->lock);
    d->hashing = 1;
    pthread_mutex_unlock(&d->lock);
    st_err e = digest_drain(d, fd);
    return e ? e : st_restore_digest_check(&d->hasher, d->front, d->f);
}

st_file_digest_stats st_file_digest_stats_of(st_file_digest *d)
{
    pthread_mutex_lock(&d->lock);
    st_file_digest_stats s = d->stats;
    pthread_mutex_unlock(&d->lock);
    return s;
}

void st_file_digest_free(st_file_digest *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->npieces; i++)
        piece_release(d, &d->pieces[i]);
    free(d->pieces);
    st_hasher_free(&d->hasher);
    pthread_mutex_destroy(&d->lock);
    pthread_cond_destroy(&d->idle);
    st_park_budget *b = d->budget;
    free(d);
    if (b) {
        pthread_mutex_lock(&b->lock);
        if (--b->users == 0) { /* the last digest: spares are idle memory now */
            budget_drop_spares(b);
            free(b->spares);
            b->spares = NULL;
            b->spares_cap = 0;
        }
        pthread_mutex_unlock(&b->lock);
    }
}

void st_restorer_share_bundles(st_restorer *r, st_bundlecache *bundles)
{
    if (r->owns_bundles)
        st_bundlecache_free(r->bundles);
    r->bundles = bundles;
    r->owns_bundles = 0;
}

const st_restore_stats *st_restorer_stats(const st_restorer *r)
{
    return &r->stats;
}

void st_restorer_free(st_restorer *r)
{
    if (!r)
        return;
    free(r->arena);
    free(r->stage);
    free(r->raw);
    free(r->scratch);
    free(r->opened);
    st_pack_opener_wipe(&r->opener);
    if (r->owns_bundles)
        st_bundlecache_free(r->bundles);
    free(r);
}
