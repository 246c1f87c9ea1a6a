/*
 * st_gcsweep — the sweep (steps 2 to 4 of a GC run, docs/GC.md): the
 * markers and packs listed at t0, the references of every step's current
 * manifests, then per pack: referenced -> its pending marker dropped, and
 * retired if mostly dead; unreferenced -> marked, or deleted once its
 * marker is older than grace by the store's clock; superseded manifest
 * revisions go too.
 *
 * Calls only the run's shared listings and deletes (st_gcrun.h) and the
 * catalog (part records, manifests).
 */
#include "engine/st_gcrun.h"
#include "util/st_array.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_fsutil.h"
#include "engine/st_catalog.h"
#include "format/st_gcmark.h"
#include "format/st_part.h"

#define DEFAULT_REPACK_DEAD 0.5

/* What the referenced set knows of one pack. */
typedef struct pack_ref {
    uint64_t live; /* bytes of its distinct referenced chunks */
    int held;      /* referenced by a pinned or keep_every step */
} pack_ref;

typedef struct ref_set {
    st_idmap index; /* pack id -> position in v */
    pack_ref *v;
    size_t n, cap;
    int count_live;
    st_idmap counted; /* (pack, offset) ids of the chunks counted in live */
} ref_set;

static void ref_set_free(ref_set *s)
{
    st_idmap_free(&s->index);
    st_idmap_free(&s->counted);
    free(s->v);
}

/* Position of pack in s, added on first sight. */
static st_err ref_pack(ref_set *s, const st_id *pack, uint32_t *at)
{
    if (st_idmap_get(&s->index, pack, at))
        return ST_OK;
    if (st_array_grow((void **)&s->v, &s->cap, s->n + 1, sizeof *s->v))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    *at = (uint32_t)s->n;
    s->v[s->n++] = (pack_ref){0, 0};
    return st_idmap_put(&s->index, pack, *at);
}

/* Adds the packs m references to s, and with count_live the bytes of its
 * chunks that no manifest counted yet. */
static st_err ref_manifest(ref_set *s, const st_manifest *m, int held)
{
    uint32_t *at = malloc((m->npacks ? m->npacks : 1) * sizeof *at);
    st_err e = at ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t p = 0; !e && p < m->npacks; p++)
        if (!(e = ref_pack(s, &m->packs[p], &at[p])))
            s->v[at[p]].held |= held;
    for (size_t f = 0; !e && s->count_live && f < m->nfiles; f++)
        for (size_t k = 0; !e && k < m->files[f].nchunks; k++) {
            const st_chunk_ref *c = &m->files[f].chunks[k];
            uint8_t where[ST_ID_LEN + 8];
            uint32_t one;
            if (st_chunk_is_hole(c)) /* in no pack */
                continue;
            memcpy(where, m->packs[c->pack].b, ST_ID_LEN);
            for (int i = 0; i < 8; i++)
                where[ST_ID_LEN + i] = (uint8_t)(c->offset >> (8 * i));
            st_id id = st_id_of(where, sizeof where);
            if (st_idmap_get(&s->counted, &id, &one))
                continue;
            if (!(e = st_idmap_put(&s->counted, &id, 1)))
                s->v[at[c->pack]].live += c->stored_len;
        }
    free(at);
    return e;
}

/* 1 if retention keeps step for good (pinned, or a multiple of keep_every). */
static int step_held(const gc_run *g, uint64_t step)
{
    return gc_u64_in(&g->pins, step) || (g->p->keep_every && step % g->p->keep_every == 0);
}

/* Adds what the manifest named by each part record of the (not deleted)
 * steps of l references to refs; reports superseded manifest revisions
 * older than grace as deletable (keys into *old). Stops early, leaving the
 * set incomplete, if the caller asks the run to stop. */
static st_err scan_references(gc_run *g, const step_list *l, const step_list *deleted_from,
                              ref_set *refs, gc_obj **old, size_t *nold)
{
    st_bytes buf = {0};
    size_t old_cap = 0;
    st_err e = ST_OK;
    for (size_t i = 0; i < l->n && !e && !gc_stop_requested(g); i++) {
        const gc_step *st = &l->steps[i];
        int gone = 0;
        for (size_t j = 0; deleted_from && j < deleted_from->n; j++)
            gone |= deleted_from->steps[j].step == st->step && deleted_from->steps[j].deleted;
        if (gone)
            continue; /* a dry run: this step would be deleted by now */
        for (size_t k = 0; k < st->keys.nnodes && !e; k++) {
            st_part part;
            st_manifest m;
            e = st_catalog_load_part(g->b, g->job, st->step, st->keys.nodes[k], &buf, &part);
            if (e == ST_ERR_NOT_FOUND) {
                e = ST_OK; /* deleted since the listing: it references nothing now */
                continue;
            }
            if (e)
                break;
            e = st_catalog_load_manifest(g->b, &part, &buf, &m);
            if (!e) {
                e = ref_manifest(refs, &m, step_held(g, st->step));
                st_manifest_free(&m);
            }
            /* Revisions this part record superseded, once it is older than
             * grace by the store's clock (a reader that fetched the older
             * record is done). Asked only when there is one. */
            int part_old = -1;
            for (size_t o = 0; !e && o < st->nobjs && part_old; o++) {
                uint64_t step;
                const char *rest;
                char node[ST_NODE_MAX + 1];
                uint32_t rev;
                if (st_key_parse_step(st->objs[o].key, g->job, &step, &rest) ||
                    !st_key_parse_manifest(rest, node, &rev) || strcmp(node, part.node) ||
                    rev >= part.revision)
                    continue;
                if (part_old < 0) {
                    char key[ST_KEY_MAX];
                    if (!(e = st_key_part(key, sizeof key, g->job, st->step, part.node)))
                        e = gc_key_older_than(g, key, g->grace, &part_old);
                    if (e || !part_old)
                        continue;
                }
                if (st_array_grow((void **)old, &old_cap, *nold + 1, sizeof **old))
                    e = st_seterr(ST_ERR_NOMEM, "out of memory");
                else
                    (*old)[(*nold)++] = st->objs[o];
            }
            st_part_free(&part);
        }
        if (e)
            st_seterr(e, "step %" PRIu64 ": %s", st->step, st_errmsg());
    }
    st_bytes_free(&buf);
    return e;
}

/* The retirement threshold of policy p, or a value >= 1 for "never". */
static double repack_threshold(const st_gc_policy *p)
{
    return p->repack_dead > 0 ? p->repack_dead : DEFAULT_REPACK_DEAD;
}

/* Writes pack's retire marker if it is mostly dead and may be retired. */
static st_err maybe_retire(gc_run *g, const pack_obj *p, const pack_ref *ref, int64_t t0)
{
    char key[ST_KEY_MAX], text[160];
    const double threshold = repack_threshold(g->p);
    if (threshold >= 1 || ref->held || p->retired_size >= 0 || !p->size || ref->live >= p->size ||
        1.0 - (double)ref->live / (double)p->size < threshold)
        return ST_OK;
    g->r->packs_retired++;
    g->r->retired_live_bytes += ref->live;
    if (g->dry_run)
        return ST_OK;
    size_t len;
    st_err e = st_gcmark_retired_encode(text, sizeof text, t0, ref->live, p->size, &len);
    if (!e)
        e = st_key_gc_retired(key, sizeof key, g->job, &p->id);
    return e ? e : st_put(g->b, key, text, len);
}

/* Deletes unreferenced packs whose grace is over, due[0..n), as one unit:
 * the packs in one batch, then the pending and retire markers of those that
 * went in a second (writers look at the pending marker before the pack,
 * docs/GC.md: a pack's marker never goes before the pack). */
static st_err delete_packs(gc_run *g, pack_obj *const *due, size_t n)
{
    char key[ST_KEY_MAX];
    unsigned char *gone = calloc(n ? n : 1, 1);
    st_err e = gone ? ST_OK : st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n && !e; i++)
        if (!(e = st_key_pack(key, sizeof key, g->job, &due[i]->id)))
            e = gc_queue_key(g, key, due[i]->size);
    if (e)
        gc_queue_clear(&g->q);
    else
        e = gc_flush(g, gone);
    /* The markers of the packs that went, also when others did not. */
    st_err me = ST_OK;
    for (size_t i = 0; gone && i < n && !me; i++) {
        if (!gone[i])
            continue;
        g->r->packs_deleted++;
        if (due[i]->pending_size >= 0 &&
            !(me = st_key_gc_pending(key, sizeof key, g->job, &due[i]->id)))
            me = gc_queue_key(g, key, (uint64_t)due[i]->pending_size);
        if (!me && due[i]->retired_size >= 0 &&
            !(me = st_key_gc_retired(key, sizeof key, g->job, &due[i]->id)))
            me = gc_queue_key(g, key, (uint64_t)due[i]->retired_size);
    }
    if (me)
        gc_queue_clear(&g->q);
    else
        me = gc_flush_counting(g, &g->r->markers_deleted);
    free(gone);
    return e ? e : me;
}

/* Reads the pending markers of packs that exist and are unreferenced into
 * packs; deletes the other pending markers and the retire markers whose
 * pack is gone. */
static st_err sort_markers(gc_run *g, pack_list *packs, const obj_list *pending,
                           const obj_list *retired, const ref_set *refs,
                           const st_store_time *store_t0)
{
    st_bytes buf = {0};
    st_err e = ST_OK;
    for (size_t i = 0; i < pending->n && !e && !g->r->stopped; i++) {
        uint32_t at, ref;
        const gc_obj *m = &pending->v[i];
        const st_id id = gc_marker_id(pending, i);
        int exists = st_idmap_get(&packs->index, &id, &at);
        int referenced = st_idmap_get(&refs->index, &id, &ref);
        if (!exists || referenced) {
            g->r->packs_unmarked += exists && referenced;
            e = gc_queue_batched(g, m->key, m->size, &g->r->markers_deleted);
            continue;
        }
        pack_obj *p = &packs->v[at];
        /* Its age is the store's: when the store wrote it, against the
         * store's time before the reference scan began (docs/GC.md,
         * "Clocks"). The stamp in its text is the marking host's clock and
         * only informs. */
        st_store_time mt;
        int64_t marked_ns;
        e = st_stat_time(g->b, m->key, &mt);
        if (!e)
            e = st_get(g->b, m->key, 0, ST_GET_TO_END, &buf);
        if (e == ST_ERR_NOT_FOUND) {
            e = ST_OK; /* another GC run dropped it */
            continue;
        }
        p->pending_size = (int64_t)m->size;
        p->marked = !e;
        p->age_ns = store_t0->now_ns - mt.mtime_ns - mt.slack_ns;
        /* An unreadable marker ages with this run's grace. */
        if (!e && st_gcmark_pending_decode(buf.data, buf.len, &marked_ns, &p->grace_ns) != ST_OK)
            p->grace_ns = g->grace;
    }
    for (size_t i = 0; i < retired->n && !e && !g->r->stopped; i++) {
        uint32_t at;
        const st_id id = gc_marker_id(retired, i);
        if (st_idmap_get(&packs->index, &id, &at)) {
            packs->v[at].retired_size = (int64_t)retired->v[i].size;
            continue;
        }
        e = gc_queue_batched(g, retired->v[i].key, retired->v[i].size, &g->r->markers_deleted);
    }
    if (!e)
        e = gc_flush_unit(g, &g->r->markers_deleted);
    st_bytes_free(&buf);
    return e;
}

/* A pack that a later run frees, from FREE_NS on (st_gc_report). */
static void note_pending(st_gc_report *r, uint64_t size, int64_t free_ns)
{
    r->pending_bytes += size;
    if (!r->pending_free_first_ns || free_ns < r->pending_free_first_ns)
        r->pending_free_first_ns = free_ns;
    if (free_ns > r->pending_free_last_ns)
        r->pending_free_last_ns = free_ns;
}

st_err gc_sweep(gc_run *g, const step_list *first)
{
    char key[ST_KEY_MAX], text[128];
    st_gc_report *r = g->r;
    pack_list packs = {0};
    obj_list pending = {0}, retired = {0};
    step_list now_steps = {0};
    ref_set refs = {.count_live = repack_threshold(g->p) < 1};
    gc_obj *old = NULL;
    size_t nold = 0;
    pack_obj **due = NULL; /* packs to delete, up to a batch */

    /* 2. t0, then markers and packs: every age below is measured at t0,
     *    before the reference scan starts, on the store's clock. t0 on
     *    this host's clock only stamps new markers' text and dates the
     *    report. */
    const int64_t t0 = st_now_ns();
    st_store_time store_t0;
    st_err e = st_stat_time(g->b, NULL, &store_t0);
    if (!e)
        e = gc_list_objs(g, "gc/pending", 1, &pending);
    if (!e)
        e = gc_list_objs(g, "gc/retired", 1, &retired);
    if (!e)
        e = gc_list_packs(g, &packs);
    if (e)
        goto out;
    r->packs = packs.n;

    /* 3. the references, from a fresh listing (a real run: after the
     *    deletions; a dry run: the same steps minus those it would delete). */
    if ((e = gc_list_steps(g->b, g->job, &now_steps)))
        goto out;
    e = scan_references(g, &now_steps, g->dry_run ? first : NULL, &refs, &old, &nold);
    if (e) {
        r->sweep_skipped = 1;
        snprintf(r->why, sizeof r->why, "references unknown, nothing swept: %s", st_errmsg());
        e = ST_OK;
        goto out;
    }
    if (r->stopped)
        goto out; /* the references are incomplete: nothing may be judged */

    /* 4a. superseded manifest revisions. */
    for (size_t i = 0; i < nold && !e && !r->stopped; i++)
        e = gc_queue_batched(g, old[i].key, old[i].size, &r->manifests_deleted);
    if (!e)
        e = gc_flush_unit(g, &r->manifests_deleted);

    /* 4b. markers. */
    if (!e && !r->stopped)
        e = sort_markers(g, &packs, &pending, &retired, &refs, &store_t0);

    /* 4c. packs: those due for deletion go a batch at a time. */
    size_t ndue = 0;
    if (!e && !(due = malloc((packs.n ? packs.n : 1) * sizeof *due)))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < packs.n && !e && !r->stopped; i++) {
        pack_obj *p = &packs.v[i];
        uint32_t at;
        if (st_idmap_get(&refs.index, &p->id, &at)) {
            r->packs_referenced++;
            e = maybe_retire(g, p, &refs.v[at], t0);
            continue;
        }
        if (!p->marked) {
            size_t len;
            r->packs_marked++;
            note_pending(r, p->size, t0 + g->grace);
            st_key_gc_pending(key, sizeof key, g->job, &p->id);
            if (!g->dry_run &&
                !(e = st_gcmark_pending_encode(text, sizeof text, t0, g->grace, &len)))
                e = st_put(g->b, key, text, len);
            continue;
        }
        int64_t need = p->grace_ns > g->grace ? p->grace_ns : g->grace;
        if (p->age_ns < need) {
            r->packs_pending++;
            note_pending(r, p->size, t0 + (need - p->age_ns));
            continue;
        }
        due[ndue++] = p;
        if (ndue == g->batch && !(e = delete_packs(g, due, ndue))) {
            ndue = 0;
            gc_unit_done(g);
        }
    }
    if (!e && ndue && !(e = delete_packs(g, due, ndue)))
        gc_unit_done(g);
out:
    free(due);
    gc_pack_list_free(&packs);
    gc_obj_list_free(&pending);
    gc_obj_list_free(&retired);
    gc_step_list_free(&now_steps);
    ref_set_free(&refs);
    free(old);
    return e;
}
