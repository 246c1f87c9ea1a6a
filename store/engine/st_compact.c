/*
 * st_compact — compaction of a job whose writers are gone (st_compact.h;
 * the protocol and its safety argument: docs/GC.md, "Compaction").
 *
 * One run, in this order (the order is the argument):
 *   1. LIST the fences: another live one -> skip;
 *   2. PUT ours, LIST again: another live one -> delete ours, skip;
 *   3. wait until t0 + grace/2 (every publish that missed our fence has
 *      landed by then);
 *   4. load every part record and its manifest; one keeper place per live
 *      chunk id (duplicate copies count once: docs/GC.md, "Duplicate
 *      copies"); live bytes per pack = the chunks it keeps; candidates:
 *      dead fraction at least the threshold, and not referenced by a step
 *      whose parts share a path (rewriting one of those could flip which
 *      version wins);
 *   5. copy the chunks the candidates keep (ranged GETs, each chunk
 *      decoded and checked against its id) into new packs, PUT each;
 *   6. the writer's last look at the new packs and at the packs a rewrite
 *      newly references (st_packuse_check), then
 *      rewrite every part record that references a candidate and is still
 *      there at the revision loaded (re-read: unfenced step deletions):
 *      manifest, then part record (st_catalog_publish_unfenced), only while
 *      the clock is before t0 + 1.5 grace (and a young marker's grace/2);
 *   7. delete the fence.
 * Compaction deletes nothing else: the old packs are left to the sweep.
 *
 * Invariant: a rewritten manifest has the same files, sizes, digests and
 * chunk ids as the one it replaces; only where the chunks live changed.
 *
 * Threads: one thread per run; nothing static but constants.
 */
#include "engine/st_compact.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/st_array.h"
#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "util/st_idmap.h"
#include "engine/st_catalog.h"
#include "engine/st_packuse.h"
#include "format/st_codec.h"
#include "format/st_gcmark.h"
#include "format/st_pack.h"
#include "format/st_part.h"

/* Ranged GETs of adjacent live chunks are merged up to this many bytes. */
#define COPY_RUN_MAX (8u << 20)

/* One node's part of a step and the manifest it names. */
typedef struct cpart {
    st_part part;
    st_manifest m;
    uint32_t *at;   /* m's pack slot -> position in compactor.packs */
    int left_alone; /* its step has parts that share a path */
} cpart;

/* A pack some loaded manifest references. */
typedef struct cpack {
    st_id id;
    uint64_t size;
    uint64_t placed; /* distinct (offset) places referenced */
    uint64_t live;   /* stored bytes of the chunks it keeps */
    int blocked;     /* referenced by a step left alone, or missing */
    int missing;     /* not in the store */
    int candidate;   /* the chunks it keeps are copied */
    int borrowed;    /* a rewrite points chunks of a candidate at it */
} cpack;

/* Where a copied chunk lives now. */
typedef struct creloc {
    uint32_t newpack; /* index into compactor.newpacks */
    uint64_t offset;
    uint32_t stored_len;
} creloc;

/* One live chunk of a pack, as the copy reads it. */
typedef struct cchunk {
    st_id id;
    uint64_t offset;
    uint32_t stored_len, raw_len;
} cchunk;

/* The one live place of a chunk id that keeps it. */
typedef struct ckeeper {
    cchunk at;
    uint32_t pack; /* position in compactor.packs */
} ckeeper;

typedef struct compactor {
    st_backend *b;
    const char *job;
    const st_gc_policy *p;
    st_gc_report *r;
    int64_t grace;
    cpart *parts;
    size_t nparts, parts_cap;
    cpack *packs;
    size_t npacks, packs_cap;
    st_idmap pack_index; /* pack id -> position in packs */
    st_idmap counted;    /* location id -> 1: counted in placed */
    ckeeper *keepers;
    size_t nkeepers, keepers_cap;
    st_idmap keeper_of; /* chunk id -> position in keepers */
    st_idmap by_chunk;  /* chunk id -> position in relocs */
    creloc *relocs;
    size_t nrelocs, relocs_cap;
    st_id *newpacks;
    size_t nnew, newpacks_cap;
} compactor;

/* The id of a chunk's location: its pack and offset. */
static st_id location_id(const st_id *pack, uint64_t offset)
{
    uint8_t where[ST_ID_LEN + 8];
    memcpy(where, pack->b, ST_ID_LEN);
    for (int i = 0; i < 8; i++)
        where[ST_ID_LEN + i] = (uint8_t)(offset >> (8 * i));
    return st_id_of(where, sizeof where);
}

static int stop_requested(const compactor *c)
{
    return c->p->stop && *c->p->stop;
}

static void compact_skip(compactor *c, const char *why)
{
    c->r->compact_skipped = 1;
    snprintf(c->r->compact_why, sizeof c->r->compact_why, "%s", why);
}

/* ---- 4. what is referenced, and how much of each pack lives ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* 1 if two of the parts[0..n) hold the same path. */
static int parts_share_a_path(const cpart *parts, size_t n, int *oom)
{
    size_t total = 0, k = 0;
    for (size_t i = 0; i < n; i++)
        total += parts[i].m.nfiles;
    const char **paths = malloc((total ? total : 1) * sizeof *paths);
    if (!paths)
        return *oom = 1;
    for (size_t i = 0; i < n; i++)
        for (size_t f = 0; f < parts[i].m.nfiles; f++)
            paths[k++] = parts[i].m.files[f].path;
    qsort(paths, total, sizeof *paths, cmp_str);
    int shared = 0;
    for (size_t i = 1; i < total && !shared; i++)
        shared = !strcmp(paths[i - 1], paths[i]);
    free(paths);
    return shared;
}

/* Loads every part record of the job and the manifest it names. */
static st_err load_parts(compactor *c)
{
    st_step_keys *steps = NULL;
    size_t nsteps = 0;
    st_bytes buf = {0};
    st_err e = st_catalog_list_steps(c->b, c->job, &steps, &nsteps);
    for (size_t s = 0; !e && s < nsteps && !stop_requested(c); s++) {
        const size_t first = c->nparts;
        for (size_t k = 0; !e && k < steps[s].nnodes; k++) {
            if (st_array_grow((void **)&c->parts, &c->parts_cap, c->nparts + 1, sizeof *c->parts)) {
                e = st_seterr(ST_ERR_NOMEM, "out of memory");
                break;
            }
            cpart *cp = &c->parts[c->nparts];
            memset(cp, 0, sizeof *cp);
            e = st_catalog_load_part(c->b, c->job, steps[s].step, steps[s].nodes[k], &buf,
                                     &cp->part);
            if (e == ST_ERR_NOT_FOUND) { /* deleted since the listing */
                e = ST_OK;
                continue;
            }
            if (!e && (e = st_catalog_load_manifest(c->b, &cp->part, &buf, &cp->m)))
                st_part_free(&cp->part);
            /* Moving chunks between sealed packs (CKp2) would open and seal
             * each record again: not built (docs/ENCRYPTION.md, "Where it
             * lives"). Refused before anything is written. */
            if (!e && cp->m.pack_seals) {
                st_manifest_free(&cp->m);
                st_part_free(&cp->part);
                e = st_seterr(ST_ERR_UNSUPPORTED,
                              "compaction of an encrypted store is not built yet; gc without "
                              "--compact deletes what the policy drops");
            }
            if (!e)
                c->nparts++;
            else
                st_seterr(e, "step %" PRIu64 " node %s: %s", steps[s].step, steps[s].nodes[k],
                          st_errmsg());
        }
        int oom = 0;
        if (!e && c->nparts - first > 1 &&
            parts_share_a_path(&c->parts[first], c->nparts - first, &oom)) {
            for (size_t i = first; i < c->nparts; i++)
                c->parts[i].left_alone = 1;
            c->r->compact_steps_skipped++;
        }
        if (oom)
            e = st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    st_step_keys_free(steps, nsteps);
    st_bytes_free(&buf);
    return e;
}

/* Position of pack in c->packs, added on first sight. */
static st_err pack_at(compactor *c, const st_id *pack, uint32_t *at)
{
    if (st_idmap_get(&c->pack_index, pack, at))
        return ST_OK;
    if (st_array_grow((void **)&c->packs, &c->packs_cap, c->npacks + 1, sizeof *c->packs))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    *at = (uint32_t)c->npacks;
    c->packs[c->npacks++] = (cpack){.id = *pack};
    return st_idmap_put(&c->pack_index, pack, *at);
}

/* Calls fn for every chunk reference (holes skipped) of every loaded part. */
typedef st_err (*ref_fn)(compactor *c, const cpart *cp, const st_chunk_ref *ch);

static st_err each_ref(compactor *c, ref_fn fn)
{
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < c->nparts; i++) {
        const st_manifest *m = &c->parts[i].m;
        for (size_t f = 0; !e && f < m->nfiles; f++)
            for (size_t k = 0; !e && k < m->files[f].nchunks; k++)
                if (!st_chunk_is_hole(&m->files[f].chunks[k]))
                    e = fn(c, &c->parts[i], &m->files[f].chunks[k]);
    }
    return e;
}

/* Adds each part's packs to c->packs (cp->at) and marks a left-alone
 * part's packs blocked. */
static st_err index_packs(compactor *c)
{
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < c->nparts; i++) {
        cpart *cp = &c->parts[i];
        cp->at = malloc((cp->m.npacks ? cp->m.npacks : 1) * sizeof *cp->at);
        if (!cp->at)
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        for (size_t p = 0; !e && p < cp->m.npacks; p++)
            if (!(e = pack_at(c, &cp->m.packs[p], &cp->at[p])))
                c->packs[cp->at[p]].blocked |= cp->left_alone;
    }
    return e;
}

/* Counts a reference's place once in its pack's placed bytes. */
static st_err count_place(compactor *c, const cpart *cp, const st_chunk_ref *ch)
{
    uint32_t one;
    st_id where = location_id(&cp->m.packs[ch->pack], ch->offset);
    if (st_idmap_get(&c->counted, &where, &one))
        return ST_OK;
    c->packs[cp->at[ch->pack]].placed += ch->stored_len;
    return st_idmap_put(&c->counted, &where, 1);
}

/* How much a place is worth keeping: a missing pack's never, a blocked
 * pack's always (it stays whatever happens), else by its pack's placed
 * bytes (the fuller pack stays). */
static int keeper_rank(const cpack *p)
{
    return p->missing ? 0 : p->blocked ? 2 : 1;
}

/* 1 if place (pack a, offset oa) keeps a chunk better than (b, ob); ties go
 * to the lower pack id, then offset, so the same state picks the same
 * keepers (and writes the same packs). */
static int better_keeper(const compactor *c, uint32_t a, uint64_t oa, uint32_t b, uint64_t ob)
{
    const cpack *x = &c->packs[a], *y = &c->packs[b];
    if (keeper_rank(x) != keeper_rank(y))
        return keeper_rank(x) > keeper_rank(y);
    if (x->placed != y->placed)
        return x->placed > y->placed;
    int cmp = st_id_cmp(&x->id, &y->id);
    return cmp ? cmp < 0 : oa < ob;
}

/* The keeper of ch's chunk at ch's place in pack (a position in c->packs). */
static ckeeper keeper_at(uint32_t pack, const st_chunk_ref *ch)
{
    /* A slice's chunk is its whole bundle: copied and verified whole, while
     * each slice keeps its skip and bundle_len (relocate_manifest). */
    return (ckeeper){{ch->id, ch->offset, ch->stored_len, st_chunk_stored_raw_len(ch)}, pack};
}

/* Makes a reference's place its chunk's keeper if it is the best so far. */
static st_err choose_keeper(compactor *c, const cpart *cp, const st_chunk_ref *ch)
{
    const uint32_t pack = cp->at[ch->pack];
    uint32_t k;
    if (st_idmap_get(&c->keeper_of, &ch->id, &k)) {
        ckeeper *kp = &c->keepers[k];
        if (better_keeper(c, pack, ch->offset, kp->pack, kp->at.offset))
            *kp = keeper_at(pack, ch);
        return ST_OK;
    }
    if (st_array_grow((void **)&c->keepers, &c->keepers_cap, c->nkeepers + 1, sizeof *c->keepers))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    c->keepers[c->nkeepers] = keeper_at(pack, ch);
    return st_idmap_put(&c->keeper_of, &ch->id, (uint32_t)c->nkeepers++);
}

/* A chunk whose keeper fell in a candidate, referenced also in a pack that
 * stays, is kept there: its bytes stay anyway. */
static st_err keep_where_it_stays(compactor *c, const cpart *cp, const st_chunk_ref *ch)
{
    const uint32_t pack = cp->at[ch->pack];
    uint32_t k;
    if (!st_idmap_get(&c->keeper_of, &ch->id, &k))
        return st_seterr(ST_ERR_CORRUPT, "a chunk without a keeper");
    ckeeper *kp = &c->keepers[k];
    if (c->packs[kp->pack].candidate && !c->packs[pack].candidate && !c->packs[pack].missing)
        *kp = keeper_at(pack, ch);
    return ST_OK;
}

/* Marks the packs that a rewrite will newly point references at. */
static st_err mark_borrowed(compactor *c, const cpart *cp, const st_chunk_ref *ch)
{
    uint32_t k;
    if (!c->packs[cp->at[ch->pack]].candidate || !st_idmap_get(&c->keeper_of, &ch->id, &k))
        return ST_OK;
    cpack *keeper = &c->packs[c->keepers[k].pack];
    keeper->borrowed |= !keeper->candidate;
    return ST_OK;
}

/* The sizes of the packs that may be candidates (one HEAD each). */
static st_err stat_packs(compactor *c)
{
    char key[ST_KEY_MAX];
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < c->npacks && !stop_requested(c); i++) {
        cpack *p = &c->packs[i];
        if (p->blocked || (e = st_key_pack(key, sizeof key, c->job, &p->id)))
            continue;
        e = st_stat(c->b, key, &p->size);
        if (e == ST_ERR_NOT_FOUND) { /* a damaged step's: nothing to copy from */
            p->blocked = p->missing = 1;
            e = ST_OK;
        }
    }
    return e;
}

/* Counts what every referenced pack keeps, then picks candidates. */
static st_err pick_candidates(compactor *c, double dead_threshold)
{
    st_err e = index_packs(c);
    if (!e)
        e = each_ref(c, count_place);
    if (!e)
        e = stat_packs(c);
    if (!e && !stop_requested(c))
        e = each_ref(c, choose_keeper);
    if (e || stop_requested(c))
        return e;
    for (size_t k = 0; k < c->nkeepers; k++)
        c->packs[c->keepers[k].pack].live += c->keepers[k].at.stored_len;
    for (size_t i = 0; i < c->npacks; i++)
        c->r->compact_duplicate_bytes += c->packs[i].placed - c->packs[i].live;
    for (size_t i = 0; i < c->npacks; i++) {
        cpack *p = &c->packs[i];
        if (!p->blocked && p->size && p->live < p->size &&
            1.0 - (double)p->live / (double)p->size >= dead_threshold) {
            p->candidate = 1;
            c->r->compact_candidates++;
            c->r->compact_candidate_bytes += p->size;
        }
    }
    if (!(e = each_ref(c, keep_where_it_stays)))
        e = each_ref(c, mark_borrowed);
    return e;
}

/* ---- 5. copy the live chunks into new packs ---- */

static int cmp_chunk_offset(const void *a, const void *b)
{
    const cchunk *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_pack_id(const void *a, const void *b)
{
    return st_id_cmp(&(*(cpack *const *)a)->id, &(*(cpack *const *)b)->id);
}

/* The chunks pack p keeps, ascending offset (*out: malloc'd). */
static st_err kept_chunks(const compactor *c, const cpack *p, cchunk **out, size_t *n)
{
    const uint32_t at = (uint32_t)(p - c->packs);
    size_t cap = 0;
    *out = NULL;
    *n = 0;
    for (size_t k = 0; k < c->nkeepers; k++) {
        const ckeeper *kp = &c->keepers[k];
        if (kp->pack != at)
            continue;
        if (st_array_grow((void **)out, &cap, *n + 1, sizeof **out))
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        (*out)[(*n)++] = kp->at;
    }
    if (*n > 1) /* none kept: *out is NULL, which qsort must not be given */
        qsort(*out, *n, sizeof **out, cmp_chunk_offset);
    return ST_OK;
}

/* Closes the new pack in w and PUTs it; its position is c->nnew - 1. */
static st_err put_new_pack(compactor *c, st_pack_writer *w)
{
    char key[ST_KEY_MAX];
    st_id id;
    if (st_array_grow((void **)&c->newpacks, &c->newpacks_cap, c->nnew + 1, sizeof *c->newpacks))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    st_err e = st_pack_finish(w, &id);
    if (!e)
        e = st_key_pack(key, sizeof key, c->job, &id);
    if (!e)
        e = st_put_once(c->b, key, w->data.data, w->data.len, ST_ONCE_NAMED_BY_CONTENT, NULL);
    if (e)
        return e;
    c->r->compact_puts++;
    c->r->compact_packs_written++;
    c->newpacks[c->nnew++] = id;
    st_pack_writer_reset(w);
    ST_CRASHPOINT("compact-pack-put-after");
    if (c->p->progress)
        c->p->progress(c->p->progress_arg, c->r);
    return ST_OK;
}

/* Scratch for verifying one chunk. */
typedef struct verify_buf {
    uint8_t *raw, *scratch;
    size_t cap; /* raw bytes raw and scratch are sized for */
} verify_buf;

/* Decodes enc (one stored chunk) to check it is the chunk id names. */
static st_err verify_chunk(verify_buf *v, const uint8_t *enc, const cchunk *ch)
{
    size_t raw_len;
    if (ch->raw_len > v->cap) {
        free(v->raw);
        free(v->scratch);
        v->cap = ch->raw_len;
        v->raw = malloc(v->cap ? v->cap : 1);
        v->scratch = malloc(st_codec_scratch_bound(v->cap));
        if (!v->raw || !v->scratch) {
            v->cap = 0;
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        }
    }
    return st_codec_decode(enc, ch->stored_len, &ch->id, v->raw, v->cap, &raw_len, v->scratch);
}

/* Appends one verified chunk to w and records where it lives now (each
 * chunk has one keeper, so it is copied once). */
static st_err move_chunk(compactor *c, st_pack_writer *w, const cchunk *ch, const uint8_t *enc)
{
    uint32_t at;
    uint64_t offset;
    if (st_array_grow((void **)&c->relocs, &c->relocs_cap, c->nrelocs + 1, sizeof *c->relocs))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    uint8_t *dst = st_pack_append_begin(w, ch->stored_len);
    if (!dst)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    memcpy(dst, enc, ch->stored_len);
    st_err e = st_pack_append_commit(w, ch->stored_len, &offset);
    if (e)
        return e;
    at = (uint32_t)c->nrelocs;
    c->relocs[c->nrelocs++] = (creloc){(uint32_t)c->nnew, offset, ch->stored_len};
    c->r->compact_live_bytes += ch->stored_len;
    return st_idmap_put(&c->by_chunk, &ch->id, at);
}

/* Copies the live chunks of candidate p into w, putting full packs. */
static st_err copy_pack(compactor *c, st_pack_writer *w, verify_buf *v, const cpack *p)
{
    char key[ST_KEY_MAX], hex[ST_ID_HEX_LEN + 1];
    cchunk *chunks = NULL;
    size_t n = 0;
    st_bytes run = {0};
    st_err e = st_key_pack(key, sizeof key, c->job, &p->id);
    if (!e)
        e = kept_chunks(c, p, &chunks, &n);
    for (size_t i = 0; !e && i < n;) {
        /* A run of adjacent chunks is one ranged GET. */
        size_t j = i + 1;
        const uint64_t start = chunks[i].offset;
        uint64_t end = start + chunks[i].stored_len;
        while (j < n && chunks[j].offset == end && end - chunks[i].offset < COPY_RUN_MAX)
            end += chunks[j++].stored_len;
        if ((e = st_get(c->b, key, start, end - start, &run)))
            break;
        c->r->compact_gets++;
        if (run.len != end - start) {
            e = st_seterr(ST_ERR_CORRUPT, "pack %s is shorter than its manifests say",
                          st_id_hex(&p->id, hex));
            break;
        }
        for (; !e && i < j; i++) {
            const uint8_t *enc = run.data + (chunks[i].offset - start);
            if ((e = verify_chunk(v, enc, &chunks[i])))
                st_seterr(e, "pack %s offset %" PRIu64 ": %s", st_id_hex(&p->id, hex),
                          chunks[i].offset, st_errmsg());
            else
                e = move_chunk(c, w, &chunks[i], enc);
            if (!e && st_pack_writer_size(w) >= ST_PACK_TARGET_SIZE)
                e = put_new_pack(c, w);
        }
    }
    free(chunks);
    st_bytes_free(&run);
    return e;
}

/* Copies every candidate, in ascending pack id (same state, same packs). */
static st_err copy_candidates(compactor *c)
{
    st_pack_writer w = {0};
    verify_buf v = {0};
    size_t n = 0;
    cpack **order = malloc((c->npacks ? c->npacks : 1) * sizeof *order);
    st_err e = order ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !e && i < c->npacks; i++)
        if (c->packs[i].candidate)
            order[n++] = &c->packs[i];
    if (!e)
        qsort(order, n, sizeof *order, cmp_pack_id);
    for (size_t i = 0; !e && i < n && !stop_requested(c); i++)
        e = copy_pack(c, &w, &v, order[i]);
    if (!e && !stop_requested(c) && w.count)
        e = put_new_pack(c, &w);
    if (!e && stop_requested(c))
        c->r->stopped = 1;
    st_pack_writer_free(&w);
    free(v.raw);
    free(v.scratch);
    free(order);
    return e;
}

/* ---- 6. rewrite the part records ---- */

/* 1 if m references a candidate pack. */
static int references_candidate(const compactor *c, const st_manifest *m)
{
    uint32_t at;
    for (size_t p = 0; p < m->npacks; p++)
        if (st_idmap_get(&c->pack_index, &m->packs[p], &at) && c->packs[at].candidate)
            return 1;
    return 0;
}

/* The slot of pack id in a table being built (appended on first use). */
static st_err table_slot(st_id *table, size_t *n, st_idmap *slots, const st_id *id, uint32_t *slot)
{
    if (st_idmap_get(slots, id, slot))
        return ST_OK;
    *slot = (uint32_t)*n;
    table[(*n)++] = *id;
    return st_idmap_put(slots, id, *slot);
}

/* Where the chunk of a reference into a candidate lives after the copy:
 * its keeper's place, or the keeper's copy in a new pack. */
static st_err kept_place(const compactor *c, const st_chunk_ref *ch, const char *path,
                         const st_id **pack, uint64_t *offset, uint32_t *stored_len)
{
    uint32_t k, r;
    if (!st_idmap_get(&c->keeper_of, &ch->id, &k))
        return st_seterr(ST_ERR_CORRUPT, "%s: a chunk has no keeper", path);
    const ckeeper *kp = &c->keepers[k];
    if (!c->packs[kp->pack].candidate) {
        *pack = &c->packs[kp->pack].id;
        *offset = kp->at.offset;
        *stored_len = kp->at.stored_len;
        return ST_OK;
    }
    if (!st_idmap_get(&c->by_chunk, &ch->id, &r))
        return st_seterr(ST_ERR_CORRUPT, "%s: a chunk was not copied", path);
    *pack = &c->newpacks[c->relocs[r].newpack];
    *offset = c->relocs[r].offset;
    *stored_len = c->relocs[r].stored_len;
    return ST_OK;
}

/*
 * Points m's chunks in candidate packs at their kept places (kept_place).
 * The new pack table is m's packs that stay, then the packs those chunks
 * now point at, in first use. The stored length comes with the place: the
 * same chunk may be encoded another way there.
 */
static st_err relocate_manifest(const compactor *c, st_manifest *m)
{
    size_t cap = m->npacks + c->nnew + c->npacks, n = 0;
    st_id *table = malloc(cap * sizeof *table);
    uint32_t *old_to_new = malloc((m->npacks ? m->npacks : 1) * sizeof *old_to_new);
    st_idmap slots = {0};
    st_err e = table && old_to_new ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t p = 0; !e && p < m->npacks; p++) {
        uint32_t at;
        old_to_new[p] = UINT32_MAX;
        if (!st_idmap_get(&c->pack_index, &m->packs[p], &at) || !c->packs[at].candidate)
            e = table_slot(table, &n, &slots, &m->packs[p], &old_to_new[p]);
    }
    for (size_t f = 0; !e && f < m->nfiles; f++)
        for (size_t k = 0; !e && k < m->files[f].nchunks; k++) {
            st_chunk_ref *ch = &m->files[f].chunks[k];
            const st_id *pack = NULL;
            uint64_t offset = 0;
            uint32_t stored_len = 0, slot = 0;
            if (st_chunk_is_hole(ch))
                continue;
            if (old_to_new[ch->pack] != UINT32_MAX) {
                ch->pack = old_to_new[ch->pack];
                continue;
            }
            e = kept_place(c, ch, m->files[f].path, &pack, &offset, &stored_len);
            if (!e)
                e = table_slot(table, &n, &slots, pack, &slot);
            if (!e) {
                ch->pack = slot;
                ch->offset = offset;
                ch->stored_len = stored_len;
            }
        }
    if (!e) {
        free(m->packs);
        m->packs = table;
        m->npacks = n;
        table = NULL;
    }
    free(table);
    free(old_to_new);
    st_idmap_free(&slots);
    return e;
}

/* The writer's last look (docs/GC.md, "Writers") at every new pack: a pack
 * with these very bytes may have been written before and be pending
 * deletion; and at every kept pack a rewrite newly references (an
 * unfenced step deletion may have left it unreferenced and marked).
 * Lowers *deadline to the end of the grace/2 a young marker leaves;
 * ST_ERR_BUSY for one too old (or a pack gone). */
static st_err last_look(compactor *c, int64_t *deadline)
{
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < c->nnew; i++)
        e = st_packuse_check(c->b, c->job, &c->newpacks[i], deadline);
    for (size_t i = 0; !e && i < c->npacks; i++)
        if (c->packs[i].borrowed)
            e = st_packuse_check(c->b, c->job, &c->packs[i].id, deadline);
    return e;
}

/* 1 if the part record cp was loaded from is still there with the same
 * revision: a GC run without compaction (retention, a step removed through
 * a mount) is not fenced and may have deleted the step meanwhile; writing
 * it again would bring a deleted step back. */
static st_err part_unchanged(compactor *c, const cpart *cp, int *same)
{
    st_bytes buf = {0};
    st_part now;
    st_err e = st_catalog_load_part(c->b, c->job, cp->part.step, cp->part.node, &buf, &now);
    c->r->compact_gets++;
    *same = 0;
    if (e == ST_ERR_NOT_FOUND)
        e = ST_OK;
    else if (!e) {
        *same = now.revision == cp->part.revision;
        st_part_free(&now);
    }
    st_bytes_free(&buf);
    return e;
}

/* Rewrites every part record that references a candidate, while this
 * process's monotonic clock is before deadline (docs/GC.md: the fence's
 * life covers only that, and the last look at the new packs). */
static st_err rewrite_parts(compactor *c, int64_t deadline)
{
    st_err e = last_look(c, &deadline);
    if (e == ST_ERR_BUSY) { /* a later run, once the sweep took that pack */
        char why[320];
        snprintf(why, sizeof why, "a pack to reference is not usable yet: %s", st_errmsg());
        compact_skip(c, why);
        return ST_OK;
    }
    for (size_t i = 0; !e && i < c->nparts; i++) {
        cpart *cp = &c->parts[i];
        if (cp->left_alone || !references_candidate(c, &cp->m))
            continue;
        if (stop_requested(c) || st_mono_ns() >= deadline) {
            c->r->stopped = 1;
            break;
        }
        uint64_t puts = 0;
        int same = 0;
        if ((e = part_unchanged(c, cp, &same)))
            break;
        if (!same) { /* deleted (or changed) since it was loaded: not ours */
            c->r->compact_parts_changed++;
            continue;
        }
        if ((e = relocate_manifest(c, &cp->m)))
            break;
        cp->m.created_ns = st_now_ns();
        e = st_catalog_publish_unfenced(c->b, &cp->m, &cp->part, NULL, 0, &puts);
        c->r->compact_puts += puts;
        if (!e) {
            c->r->compact_parts_rewritten++;
            ST_CRASHPOINT("compact-part-put-after");
        }
    }
    if (!e && c->p->progress)
        c->p->progress(c->p->progress_arg, c->r);
    return e;
}

/* ---- the fence, and the run ---- */

/* Waits until the monotonic clock (st_mono_ns) reaches until_ns, or a stop. */
static void wait_until(const compactor *c, int64_t until_ns)
{
    for (int64_t now = st_mono_ns(); now < until_ns && !stop_requested(c); now = st_mono_ns()) {
        int64_t left = until_ns - now;
        struct timespec ts = {0, left < 100000000 ? (long)left : 100000000};
        nanosleep(&ts, NULL);
    }
}

static void compactor_free(compactor *c)
{
    for (size_t i = 0; i < c->nparts; i++) {
        st_part_free(&c->parts[i].part);
        st_manifest_free(&c->parts[i].m);
        free(c->parts[i].at);
    }
    free(c->parts);
    free(c->packs);
    st_idmap_free(&c->pack_index);
    st_idmap_free(&c->counted);
    free(c->keepers);
    st_idmap_free(&c->keeper_of);
    st_idmap_free(&c->by_chunk);
    free(c->relocs);
    free(c->newpacks);
}

/* 4-6 (behind the fence in a real run). */
static st_err compact_fenced(compactor *c, double dead_threshold, int dry_run, int64_t deadline)
{
    st_err e = load_parts(c);
    if (e == ST_ERR_NOMEM || e == ST_ERR_TRANSIENT || e == ST_ERR_PERMANENT)
        return e;
    if (e) { /* an unreadable record: its references are unknown */
        char why[320];
        snprintf(why, sizeof why, "references unknown, nothing compacted: %s", st_errmsg());
        compact_skip(c, why);
        return ST_OK;
    }
    if (stop_requested(c) || (e = pick_candidates(c, dead_threshold)))
        return e;
    if (dry_run || !c->r->compact_candidates)
        return ST_OK;
    if (!(e = copy_candidates(c)) && !c->r->stopped)
        e = rewrite_parts(c, deadline);
    return e;
}

st_err st_compact_run(st_backend *b, const char *job, const st_gc_policy *policy, int64_t grace_ns,
                      int dry_run, st_gc_report *r)
{
    const double dead_threshold =
        policy->compact_dead > 0 ? policy->compact_dead : ST_COMPACT_DEFAULT_DEAD;
    char fence[ST_KEY_MAX];
    compactor c = {.b = b, .job = job, .p = policy, .r = r, .grace = grace_ns};
    int live = 0, fenced = 0;
    st_err e = ST_OK;
    if (dead_threshold >= 1)
        return ST_OK; /* repack disabled: nothing is ever dead enough */
    if (dry_run) {
        e = compact_fenced(&c, dead_threshold, 1, 0);
        goto out;
    }
    /* 1-2. at most one compactor rewrites. */
    if ((e = st_catalog_fence_live(b, job, NULL, &live)))
        goto out;
    if (live) {
        compact_skip(&c, st_errmsg());
        goto out;
    }
    /* The fence's times in its name are this host's wall clock, for people;
     * its life is judged by the store's clock (its write time, docs/GC.md,
     * "Clocks"), and this run measures its own waits from before the PUT on
     * the monotonic clock, which no clock step or skew moves. */
    const int64_t t0 = st_now_ns(), mono0 = st_mono_ns();
    uint64_t nonce = (uint64_t)t0 ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&c;
    if ((e = st_key_gc_fence(fence, sizeof fence, job, t0, t0 + 2 * grace_ns, nonce)) ||
        (e = st_put(b, fence, "", 0)))
        goto out;
    fenced = 1;
    r->compact_puts++;
    ST_CRASHPOINT("compact-fence-put-after");
    if ((e = st_catalog_fence_live(b, job, fence, &live)))
        goto out;
    if (live) {
        compact_skip(&c, "another compaction started at the same time: skipped by both");
        goto out;
    }
    /* 3. every publish that missed the fence has landed by t0 + grace/2. */
    wait_until(&c, mono0 + grace_ns / 2);
    r->compact_wait_ns = st_mono_ns() - mono0;
    if (stop_requested(&c)) {
        r->stopped = 1;
        goto out;
    }
    e = compact_fenced(&c, dead_threshold, 0, mono0 + grace_ns + grace_ns / 2);
out:
    if (fenced) { /* 7. also after an error: writers wait no longer than needed */
        st_err de = st_del(b, fence);
        if (!e)
            e = de;
    }
    compactor_free(&c);
    return e;
}
