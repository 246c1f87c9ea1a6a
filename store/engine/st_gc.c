/*
 * st_gc — retention, the time-fenced sweep and repack by retirement
 * (docs/GC.md; st_gc.h): the run's order, and the pack usability checks
 * writers make. The phases live in st_gcretain.c (retention) and
 * st_gcsweep.c (the sweep), over st_gcrun.c (listings, batched deletes).
 *
 * One run, in this order (the order is the safety argument, docs/GC.md):
 *   1. list every object under jobs/<job>/steps/ once; judge each step
 *      (st_catalog_load_view) and pick the steps retention deletes; finish
 *      the step deletions listed by stale intents of interrupted runs; PUT
 *      this run's intent, delete each picked step's part records first (it
 *      is then invisible), then the rest of its objects; delete the intent;
 *   2. t0 = now; list the pending markers (reading each), the retire
 *      markers and the packs;
 *   3. list the steps again and load the manifest every part record names:
 *      the referenced set, the live bytes of each referenced pack (distinct
 *      chunk references) and the superseded manifest revisions;
 *   4. per pack: referenced -> drop its pending marker, and retire it if it
 *      is mostly dead; unreferenced without marker -> write one (t0,
 *      grace); unreferenced with a marker at least `grace` older than t0 ->
 *      delete the pack, then its markers.
 * A dry run does 1-4 without writing or deleting anything and reports the
 * same list of keys a real run would delete.
 *
 * Batches: deletions are counted; at the end of the unit that fills a batch
 * (a whole step, a batch of packs with their markers, a batch of markers or
 * manifests) the run reports progress and looks at policy.stop, so a stop
 * never splits a unit. Keys go in batched deletes (st_del_many: one S3
 * DeleteObjects request per 1000 keys), which delete in no particular
 * order, so an order the protocol needs is two batches: a step's part
 * records, then its other objects; a batch of packs, then their markers.
 *
 * A part record or manifest that cannot be read makes the references
 * unknown: the sweep (3-4) is skipped and said so, never guessed.
 *
 * Threads: one thread per run; nothing static but constants.
 */
#include "engine/st_gc.h"
#include "engine/st_gcrun.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_fsutil.h"
#include "util/st_idmap.h"
#include "engine/st_catalog.h"
#include "engine/st_compact.h"
#include "engine/st_packuse.h"
#include "format/st_gcmark.h"

/* Keys one listing page carries (S3 ListObjectsV2's max-keys default and
 * cap): what a listing's request count is estimated from. */
#define LIST_PAGE_KEYS 1000

st_err st_gc_pack_usable(st_backend *b, const char *job, const st_id *pack,
                         int64_t *young_ok_until_ns)
{
    return st_packuse_check(b, job, pack, young_ok_until_ns);
}

/* One listing of an st_gc_listing: the pack ids it names go into ids. */
typedef struct look_list {
    st_idmap *ids;
    size_t prefix_len;
    int pack_keys;     /* keys are <hh>/<id>.pack (else <id>, markers) */
    uint64_t keys;     /* keys listed so far */
    uint64_t max_keys; /* cut the listing short past this many */
    int cut, oom;
} look_list;

static int collect_look(void *arg, const char *key, uint64_t size)
{
    (void)size;
    look_list *l = arg;
    if (++l->keys > l->max_keys)
        return l->cut = 1;
    const char *name = key + l->prefix_len;
    char hex[ST_ID_HEX_LEN + 1];
    st_id id;
    if (l->pack_keys) { /* "<hh>/<id>.pack" */
        if (strlen(name) != 3 + ST_ID_HEX_LEN + 5 || strcmp(name + 3 + ST_ID_HEX_LEN, ".pack"))
            return 0;
        memcpy(hex, name + 3, ST_ID_HEX_LEN);
        hex[ST_ID_HEX_LEN] = '\0';
        name = hex;
    }
    if (!st_id_parse(name, &id) && st_idmap_put(l->ids, &id, 1))
        return l->oom = 1;
    return 0;
}

/* Lists jobs/<job>/<what>/ into ids, at most max_keys keys (*cut if more). */
static st_err look_list_run(st_backend *b, const char *job, const char *what, int pack_keys,
                            uint64_t max_keys, st_idmap *ids, int *cut)
{
    char prefix[ST_KEY_MAX];
    look_list l = {.ids = ids, .pack_keys = pack_keys, .max_keys = max_keys};
    st_err e = st_key_job_dir(prefix, sizeof prefix, job, what);
    if (e)
        return e;
    l.prefix_len = strlen(prefix);
    e = st_list(b, prefix, collect_look, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing %s", prefix);
    *cut = l.cut;
    return e;
}

st_err st_gc_listing_take(st_backend *b, const char *job, uint64_t max_keys, st_gc_listing *l)
{
    st_gc_listing_free(l);
    l->taken_ns = st_mono_ns();
    /* The markers first, then the packs: the GC deletes a pack before its
     * marker (see st_gc_pack_usable). A cut-short marker listing proves
     * nothing, so the packs are not listed then. */
    st_err e = look_list_run(b, job, "gc/pending", 0, max_keys, &l->marked, &l->markers_cut);
    if (!e && !l->markers_cut)
        e = look_list_run(b, job, "packs", 1, max_keys, &l->present, &l->packs_cut);
    if (e)
        st_gc_listing_free(l);
    return e;
}

int st_gc_listing_clear(const st_gc_listing *l, const st_id *pack)
{
    uint32_t one;
    return l->taken_ns && !l->markers_cut && !st_idmap_get(&l->marked, pack, &one) &&
           st_idmap_get(&l->present, pack, &one);
}

void st_gc_listing_free(st_gc_listing *l)
{
    st_idmap_free(&l->marked);
    st_idmap_free(&l->present);
    memset(l, 0, sizeof *l);
}

st_err st_gc_packs_usable(st_backend *b, const char *job, const st_id *packs, size_t n,
                          int64_t *young_ok_until_ns, size_t *bad)
{
    st_gc_listing l = {0};
    st_err e = ST_OK;
    /* Two listings cost at least two requests: worth it from two packs on.
     * Each may take as many pages as the HEADs it replaces (one per pack). */
    if (n >= 2)
        e = st_gc_listing_take(b, job, (uint64_t)n * LIST_PAGE_KEYS, &l);
    for (size_t i = 0; !e && i < n; i++) {
        if (st_gc_listing_clear(&l, &packs[i]))
            continue; /* no marker, then the pack: usable */
        e = st_gc_pack_usable(b, job, &packs[i], young_ok_until_ns);
        if (e == ST_ERR_BUSY && bad)
            *bad = i;
    }
    st_gc_listing_free(&l);
    return e;
}

void st_gc_report_free(st_gc_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->ndeleted; i++)
        free(r->deleted[i]);
    free(r->deleted);
    free(r->deleted_steps);
    memset(r, 0, sizeof *r);
}

/*
 * 1 if every pack the manifests of v reference is in packs and long enough
 * for every chunk they read from it; else 0, with why (cap bytes) naming the
 * first pack that is not.
 */
static int view_restorable(const st_stepview *v, const pack_list *packs, char *why, size_t cap)
{
    char hex[ST_ID_HEX_LEN + 1];
    if (v->conflict[0]) { /* st_stepview_check_paths: restore refuses it */
        snprintf(why, cap, "%.190s", v->conflict);
        return 0;
    }
    for (size_t e = 0; e < v->nentries; e++) { /* the versions restore reads */
        const st_manifest *m = v->entries[e].m;
        const st_file_entry *f = v->entries[e].f;
        for (size_t k = 0; k < f->nchunks; k++) {
            const st_chunk_ref *c = &f->chunks[k];
            uint32_t at;
            if (st_chunk_is_hole(c)) /* needs no pack */
                continue;
            if (!st_idmap_get(&packs->index, &m->packs[c->pack], &at)) {
                snprintf(why, cap, "pack %s is missing", st_id_hex(&m->packs[c->pack], hex));
                return 0;
            }
            if (c->offset + c->stored_len > packs->v[at].size) {
                snprintf(why, cap, "pack %s is shorter than %s needs",
                         st_id_hex(&m->packs[c->pack], hex), f->path);
                return 0;
            }
        }
    }
    return 1;
}

/*
 * Judges every step of l: consistent, and restorable (its packs exist, from
 * one listing of the packs made after the listing of the steps, so that a
 * step published meanwhile is not in l, and the packs of every step in l
 * were stored before its part record was listed). An unreadable step is
 * kept, and its references are unknown, so the gc_sweep will be skipped by
 * scan_references.
 */
static st_err judge_steps(gc_run *g, step_list *l)
{
    pack_list packs = {0};
    st_bytes buf = {0};
    char msg[700], why[200];
    st_err e = gc_list_packs(g, &packs);
    for (size_t i = 0; !e && i < l->n; i++) {
        gc_step *st = &l->steps[i];
        if (!st->keys.nnodes)
            continue;
        st_stepview v;
        if (st_catalog_load_view(g->b, g->job, &st->keys, &buf, &v)) {
            snprintf(msg, sizeof msg, "gc: step %" PRIu64 " kept: %s", st->step, st_errmsg());
            gc_warn(g, msg);
            g->r->steps_unreadable++;
            st->young = 1; /* treated as young and partial */
            continue;
        }
        st->consistent = v.consistent;
        st->restorable = v.consistent && view_restorable(&v, &packs, why, sizeof why);
        st->young = !v.consistent && gc_partial_step_young(g, st);
        if (v.consistent && !st->restorable) {
            snprintf(msg, sizeof msg,
                     "gc: step %" PRIu64 " is damaged (%s): it does not count as a kept step",
                     st->step, why);
            gc_warn(g, msg);
            g->r->steps_damaged++;
        }
        st_stepview_free(&v);
    }
    gc_pack_list_free(&packs);
    st_bytes_free(&buf);
    return e;
}

st_err st_gc_run(st_backend *b, const char *job, const st_gc_policy *policy, int dry_run,
                 st_gc_report *r, st_gc_warn_fn warn, void *warn_arg)
{
    static const st_gc_policy none = {0};
    const st_gc_policy *p = policy ? policy : &none;
    gc_run g = {
        .b = b,
        .job = job,
        .p = p,
        .dry_run = dry_run,
        .grace = p->grace_ns > 0 ? p->grace_ns : ST_GC_DEFAULT_GRACE_NS,
        .r = r,
        .batch = p->batch ? p->batch : GC_DEFAULT_BATCH,
        .warn = warn,
        .warn_arg = warn_arg,
    };
    memset(r, 0, sizeof *r);
    r->dry_run = dry_run;
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);

    step_list l;
    st_err e = gc_list_steps(b, job, &l);
    if (e)
        return e;
    if ((e = gc_list_pins(b, job, &g.pins)))
        goto out;

    /* 1. judge every step, then retention. */
    if ((e = judge_steps(&g, &l)))
        goto out;
    e = gc_finish_intents(&g, &l);
    gc_pick_steps(&g, &l, &g.pins, p);
    for (size_t i = 0; i < l.n; i++)
        r->steps_kept += l.steps[i].keys.nnodes && !l.steps[i].deleted;
    if (!e && !r->stopped)
        e = gc_delete_picked(&g, &l);
    /* Compaction between retention and the gc_sweep: the gc_sweep's scan then
     * sees the rewritten part records and marks the old packs. */
    if (!e && p->compact && !gc_stop_requested(&g))
        e = st_compact_run(b, job, p, g.grace, dry_run, r);
    if (!e && !gc_stop_requested(&g))
        e = gc_sweep(&g, &l);
out:
    gc_step_list_free(&l);
    free(g.pins.v);
    gc_queue_free(&g.q);
    return e;
}

st_err st_gc_delete_step(st_backend *b, const char *job, uint64_t step, st_gc_report *r)
{
    static const st_gc_policy none = {0};
    char prefix[ST_KEY_MAX];
    step_list l = {.job = job};
    gc_run g = {.b = b, .job = job, .p = &none, .r = r, .batch = GC_DEFAULT_BATCH};
    memset(r, 0, sizeof *r);
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    st_err e = st_key_step_prefix(prefix, sizeof prefix, job, step);
    if (!e)
        e = st_list(b, prefix, gc_collect_step_obj, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing step %" PRIu64, step);
    for (size_t i = 0; i < l.n; i++)
        l.steps[i].deleted = l.steps[i].step == step; /* even without a part record */
    if (!e)
        e = gc_delete_picked(&g, &l);
    gc_step_list_free(&l);
    gc_queue_free(&g.q);
    return e;
}
