/*
 * st_gc — retention, the time-fenced sweep and repack by retirement
 * (docs/GC.md; st_gc.h).
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
#include "util/st_array.h"
#include "engine/st_gc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "util/st_idmap.h"
#include "engine/st_catalog.h"
#include "engine/st_compact.h"
#include "engine/st_packuse.h"
#include "format/st_gcmark.h"
#include "format/st_part.h"

#define DEFAULT_BATCH       1000
#define DEFAULT_REPACK_DEAD 0.5

st_err st_gc_pack_usable(st_backend *b, const char *job, const st_id *pack,
                         int64_t *young_ok_until_ns)
{
    return st_packuse_check(b, job, pack, young_ok_until_ns);
}

/* Keys one listing page carries (S3 ListObjectsV2's max-keys default and
 * cap): what a listing's request count is estimated from. */
#define LIST_PAGE_KEYS 1000

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

/* ---- the listing of a job's steps ---- */

typedef struct gc_obj {
    char *key;
    uint64_t size;
} gc_obj;

typedef struct gc_step {
    uint64_t step;
    st_step_keys keys; /* nodes with a part record */
    size_t nodes_cap;
    gc_obj *objs; /* every object under the step's prefix, ascending */
    size_t nobjs, objs_cap;
    int consistent;
    int restorable; /* consistent, and every pack it needs is listed, long enough */
    int young;      /* partial, and a part record may be younger than grace (store's clock) */
    int settled;    /* (known if settled_known) every part record older than grace */
    int settled_known;
    int deleted;  /* retention (or the mount) deletes it */
    int finished; /* a stale intent's deletion of it was finished */
} gc_step;

/* Appends a copy of key to *v. 0, or -1 when out of memory. */
static int obj_push(gc_obj **v, size_t *n, size_t *cap, const char *key, uint64_t size)
{
    if (st_array_grow((void **)v, cap, *n + 1, sizeof **v) || !((*v)[*n].key = strdup(key)))
        return -1;
    (*v)[(*n)++].size = size;
    return 0;
}

/* A listing: keys and sizes. */
typedef struct obj_list {
    gc_obj *v;
    size_t n, cap;
    size_t prefix_len;
    int ids; /* keep only keys named <prefix><pack id> */
    int oom;
} obj_list;

static int collect_obj(void *arg, const char *key, uint64_t size)
{
    obj_list *l = arg;
    st_id id;
    if (l->ids && st_id_parse(key + l->prefix_len, &id))
        return 0; /* not a marker */
    return l->oom = obj_push(&l->v, &l->n, &l->cap, key, size) != 0;
}

static void obj_list_free(obj_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].key);
    free(l->v);
    memset(l, 0, sizeof *l);
}

typedef struct step_list {
    const char *job;
    gc_step *steps;
    size_t n, cap;
    int oom;
} step_list;

static void step_list_free(step_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->steps[i].keys.nodes);
        for (size_t j = 0; j < l->steps[i].nobjs; j++)
            free(l->steps[i].objs[j].key);
        free(l->steps[i].objs);
    }
    free(l->steps);
    memset(l, 0, sizeof *l);
}

static int collect_step_obj(void *arg, const char *key, uint64_t size)
{
    step_list *l = arg;
    uint64_t step;
    const char *rest;
    if (st_key_parse_step(key, l->job, &step, &rest))
        return 0; /* not of a step's shape: not ours to judge */
    if (!l->n || l->steps[l->n - 1].step != step) {
        if (st_array_grow((void **)&l->steps, &l->cap, l->n + 1, sizeof *l->steps))
            return l->oom = 1;
        memset(&l->steps[l->n], 0, sizeof *l->steps);
        l->steps[l->n].step = step;
        l->steps[l->n].keys.step = step;
        l->n++;
    }
    gc_step *s = &l->steps[l->n - 1];
    if (obj_push(&s->objs, &s->nobjs, &s->objs_cap, key, size))
        return l->oom = 1;
    char node[ST_NODE_MAX + 1];
    if (st_key_parse_part(rest, node)) {
        if (st_array_grow((void **)&s->keys.nodes, &s->nodes_cap, s->keys.nnodes + 1,
                          sizeof *s->keys.nodes))
            return l->oom = 1;
        memcpy(s->keys.nodes[s->keys.nnodes++], node, sizeof node);
    }
    return 0;
}

static st_err list_steps(st_backend *b, const char *job, step_list *l)
{
    char prefix[ST_KEY_MAX];
    memset(l, 0, sizeof *l);
    l->job = job;
    st_err e = st_key_steps_prefix(prefix, sizeof prefix, job);
    if (!e)
        e = st_list(b, prefix, collect_step_obj, l);
    if (!e && l->oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing steps");
    if (e)
        step_list_free(l);
    return e;
}

/* ---- the report, batches and stop ---- */

typedef struct u64_list {
    uint64_t *v;
    size_t n, cap;
    int oom;
} u64_list;

/* Keys queued for one batched delete (st_del_many: S3 DeleteObjects, up to
 * 1000 keys a request), with their sizes for the report. keys[] are owned
 * copies; items[i].key points at keys[i]. */
typedef struct del_queue {
    st_del_item *items;
    char **keys;
    uint64_t *sizes;
    size_t n, items_cap, keys_cap, sizes_cap;
} del_queue;

/* One run: what every phase needs. */
typedef struct gc_run {
    st_backend *b;
    const char *job;
    const st_gc_policy *p;
    int dry_run;
    int64_t grace;
    st_gc_report *r;
    uint32_t batch;    /* objects per batch */
    uint32_t in_batch; /* objects deleted since the last progress report */
    u64_list pins;
    st_gc_warn_fn warn;
    void *warn_arg;
    del_queue q; /* keys waiting for the next gc_flush */
} gc_run;

static st_err report_key(st_gc_report *r, const char *key, uint64_t size)
{
    if (st_array_grow((void **)&r->deleted, &r->deleted_cap, r->ndeleted + 1, sizeof *r->deleted) ||
        !(r->deleted[r->ndeleted] = strdup(key)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    r->ndeleted++;
    r->objects_deleted++;
    r->bytes_freed += size;
    return ST_OK;
}

/* Deletes key (unless a dry run) and reports it. */
static st_err delete_key(gc_run *g, const char *key, uint64_t size)
{
    st_err e = g->dry_run ? ST_OK : st_del(g->b, key);
    if (e)
        return e;
    g->in_batch++;
    return report_key(g->r, key, size);
}

/* Queues key for the next gc_flush. */
static st_err queue_key(gc_run *g, const char *key, uint64_t size)
{
    del_queue *q = &g->q;
    if (st_array_grow((void **)&q->keys, &q->keys_cap, q->n + 1, sizeof *q->keys) ||
        st_array_grow((void **)&q->sizes, &q->sizes_cap, q->n + 1, sizeof *q->sizes) ||
        st_array_grow((void **)&q->items, &q->items_cap, q->n + 1, sizeof *q->items) ||
        !(q->keys[q->n] = strdup(key)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    q->sizes[q->n] = size;
    q->items[q->n] = (st_del_item){.key = q->keys[q->n]};
    q->n++;
    return ST_OK;
}

static void queue_clear(del_queue *q)
{
    for (size_t i = 0; i < q->n; i++)
        free(q->keys[i]);
    q->n = 0;
}

static void queue_free(del_queue *q)
{
    queue_clear(q);
    free(q->keys);
    free(q->sizes);
    free(q->items);
    memset(q, 0, sizeof *q);
}

/*
 * Deletes the queued keys in one st_del_many (unless a dry run): they go in
 * no particular order, so a caller that needs "a before b" flushes between
 * them. Every key deleted is reported, in queue order, also when others
 * failed; ok[i] (may be NULL; one per queued key) says which went. Returns
 * the first failure. The queue is empty afterwards.
 */
static st_err gc_flush(gc_run *g, unsigned char *ok)
{
    del_queue *q = &g->q;
    st_err e = g->dry_run || !q->n ? ST_OK : st_del_many(g->b, q->items, q->n);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", e ? st_errmsg() : "");
    st_err re = ST_OK;
    for (size_t i = 0; i < q->n; i++) {
        int gone = g->dry_run || q->items[i].err == ST_OK;
        if (ok)
            ok[i] = (unsigned char)gone;
        if (gone && !re) {
            g->in_batch++;
            re = report_key(g->r, q->keys[i], q->sizes[i]);
        }
    }
    queue_clear(q);
    if (e)
        return st_seterr(e, "%s", msg);
    return re;
}

/* gc_flush, adding how many keys went to *counter (a report field). */
static st_err flush_counting(gc_run *g, uint64_t *counter)
{
    size_t before = g->r->ndeleted;
    st_err e = gc_flush(g, NULL);
    *counter += g->r->ndeleted - before;
    return e;
}

static int unit_done(gc_run *g);

/* Ends a unit of queued single objects (markers, manifests: each a unit of
 * its own): flushes them, if any, and looks at stop (unit_done). */
static st_err flush_unit(gc_run *g, uint64_t *counter)
{
    if (!g->q.n)
        return ST_OK;
    st_err e = flush_counting(g, counter);
    if (!e)
        unit_done(g);
    return e;
}

/* Queues key and, once the queue holds a batch, flushes it as a unit. */
static st_err queue_batched(gc_run *g, const char *key, uint64_t size, uint64_t *counter)
{
    st_err e = queue_key(g, key, size);
    return e || g->q.n < g->batch ? e : flush_unit(g, counter);
}

/* 1 (and r->stopped) if the caller asked the run to stop. */
static int stop_requested(gc_run *g)
{
    if (g->p->stop && *g->p->stop)
        g->r->stopped = 1;
    return g->r->stopped;
}

/* Called at the end of every unit a stop must not split: once a batch is
 * full, reports progress and looks at stop. 1: stop here. */
static int unit_done(gc_run *g)
{
    if (g->in_batch < g->batch)
        return 0;
    g->in_batch = 0;
    if (g->p->progress)
        g->p->progress(g->p->progress_arg, g->r);
    return stop_requested(g);
}

static void gc_warn(gc_run *g, const char *msg)
{
    if (g->warn)
        g->warn(g->warn_arg, msg);
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

/* Lists the objects under jobs/<job>/<what>/ into l; with ids, only those
 * whose name is a pack id (markers). */
static st_err list_objs(gc_run *g, const char *what, int ids, obj_list *l)
{
    char prefix[ST_KEY_MAX];
    st_err e = st_key_job_dir(prefix, sizeof prefix, g->job, what);
    l->prefix_len = strlen(prefix);
    l->ids = ids;
    if (!e)
        e = st_list(g->b, prefix, collect_obj, l);
    if (!e && l->oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing %s", prefix);
    return e;
}

/* The pack id a marker of l is named by. */
static st_id marker_id(const obj_list *l, size_t i)
{
    st_id id = {{0}};
    st_id_parse(l->v[i].key + l->prefix_len, &id); /* checked by collect_obj */
    return id;
}

/* ---- pins ---- */

static int collect_pin(void *arg, const char *key, uint64_t size)
{
    (void)size;
    u64_list *l = arg;
    const char *name = strrchr(key, '/');
    name = name ? name + 1 : key;
    if (strlen(name) != ST_STEP_DIGITS || strspn(name, "0123456789") != ST_STEP_DIGITS)
        return 0;
    if (st_array_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v))
        return l->oom = 1;
    l->v[l->n++] = strtoull(name, NULL, 10);
    return 0;
}

static st_err list_pins(st_backend *b, const char *job, u64_list *l)
{
    char prefix[ST_KEY_MAX];
    memset(l, 0, sizeof *l);
    st_err e = st_key_job_dir(prefix, sizeof prefix, job, "pins");
    if (!e)
        e = st_list(b, prefix, collect_pin, l);
    if (!e && l->oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing pins");
    return e;
}

static int u64_in(const u64_list *l, uint64_t v)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return 1;
    return 0;
}

/* ---- retention ---- */

static int partial_step_young(gc_run *g, const gc_step *st);

/* 1 if a restorable step newer than l->steps[i] (up to newest) has been
 * consistent for grace: each of its part records is older than grace by the
 * store's clock. Asked of the nearest newer steps first (the oldest of them,
 * the likeliest to be settled), each at most once per run. */
static int settled_newer(gc_run *g, step_list *l, size_t i, size_t newest)
{
    for (size_t j = i + 1; j <= newest; j++) {
        gc_step *s = &l->steps[j];
        if (!s->restorable)
            continue;
        if (!s->settled_known) {
            s->settled = !partial_step_young(g, s);
            s->settled_known = 1;
        }
        if (s->settled)
            return 1;
    }
    return 0;
}

/*
 * Decides which steps go (sets deleted) under policy p. Only restorable
 * steps count: the newest restorable step anchors retention (it and every
 * newer step stay, damaged ones included), and keep_last keeps the N newest
 * restorable steps, so a damaged step never stands in for one that a
 * restore could use (docs/GC.md, "Damaged steps").
 *
 * A partial step older than the anchor goes only when no part record of it
 * is younger than grace and a restorable step newer than it has been
 * consistent for grace: a node drains its steps newest first, so the rest
 * of a partial step can be published just after the newer step that made
 * it older than the anchor, long after its other parts (a compaction's
 * fence held both back, up to 2 grace).
 */
static void pick_steps(gc_run *g, step_list *l, const u64_list *pins, const st_gc_policy *p)
{
    size_t newest = SIZE_MAX; /* index of the newest restorable step */
    for (size_t i = l->n; i-- > 0 && newest == SIZE_MAX;)
        if (l->steps[i].keys.nnodes && l->steps[i].restorable)
            newest = i;
    if (newest == SIZE_MAX || (!p->keep_last && !p->keep_every))
        return; /* nothing restorable yet, or no policy: every step stays */
    uint64_t restorable_seen = 0;
    for (size_t i = newest + 1; i-- > 0;) {
        gc_step *s = &l->steps[i];
        if (!s->keys.nnodes)
            continue; /* no part record: not a step (an in-flight first publish) */
        int keep = i == newest || u64_in(pins, s->step);
        if (s->consistent) {
            restorable_seen += s->restorable != 0;
            keep |= p->keep_last && s->restorable && restorable_seen <= p->keep_last;
            keep |= p->keep_every && s->step % p->keep_every == 0;
        } else {
            /* a partial step may still be filling */
            keep = keep || s->young || !settled_newer(g, l, i, newest);
        }
        s->deleted = !keep;
    }
}

/* 1 if key names a part record (<...>.commit). */
static int is_part_key(const char *key)
{
    static const char suffix[] = ".commit";
    size_t len = strlen(key);
    return len > sizeof suffix - 1 && !strcmp(key + len - (sizeof suffix - 1), suffix);
}

/* *old = 1 when key is surely at least age_ns old by the store's clock
 * (docs/GC.md, "Clocks"), or gone; 0 when it may be younger. Every age GC
 * acts on is judged so, never by comparing a stamp written by another host
 * with this host's clock. */
static st_err key_older_than(gc_run *g, const char *key, int64_t age_ns, int *old)
{
    int64_t at_least;
    st_err e = st_store_age(g->b, key, &at_least, NULL);
    *old = e == ST_ERR_NOT_FOUND || (!e && at_least >= age_ns);
    return e == ST_ERR_NOT_FOUND ? ST_OK : e;
}

/* Whether partial step st may still be filling: a part record younger than
 * grace by the store's clock (a store error counts as young: kept). */
static int partial_step_young(gc_run *g, const gc_step *st)
{
    for (size_t i = 0; i < st->nobjs; i++) {
        int old = 0;
        if (is_part_key(st->objs[i].key) &&
            (key_older_than(g, st->objs[i].key, g->grace, &old) || !old))
            return 1;
    }
    return 0;
}

/* Deletes every object of steps[0..n): their part records first (each
 * step is then invisible), then every other object under their prefixes:
 * two batches, so that no other object goes before the last part record. */
static st_err delete_step_objects(gc_run *g, const gc_step *const *steps, size_t n)
{
    st_err e = ST_OK;
    for (int parts = 1; parts >= 0 && !e; parts--) {
        for (size_t k = 0; k < n && !e; k++) {
            const gc_step *st = steps[k];
            ST_CRASHPOINT_IF(!parts && !k && st->nobjs, "delete-parts-gone");
            for (size_t i = 0; i < st->nobjs && !e; i++) {
                if (is_part_key(st->objs[i].key) == parts)
                    e = queue_key(g, st->objs[i].key, st->objs[i].size);
            }
        }
        if (e)
            queue_clear(&g->q);
        else
            e = flush_counting(g, parts ? &g->r->parts_deleted : &g->r->manifests_deleted);
    }
    return e;
}

/* Deletes steps[0..n) that retention picked (or the mount asked for), as
 * one unit, and records them. */
static st_err delete_steps(gc_run *g, const gc_step *const *steps, size_t n)
{
    st_gc_report *r = g->r;
    st_err e = delete_step_objects(g, steps, n);
    if (!e && st_array_grow((void **)&r->deleted_steps, &r->deleted_steps_cap, r->steps_deleted + n,
                            sizeof *r->deleted_steps))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t k = 0; k < n && !e; k++)
        r->deleted_steps[r->steps_deleted++] = steps[k]->step;
    return e;
}

/* ---- intents: the steps a run is about to delete (docs/GC.md) ---- */

/* PUTs "ckptfs-gc-deleting v1 <t0>\n<step>\n..." for the steps of l marked
 * deleted under a key of this run's own (key, cap bytes). */
static st_err intent_put(gc_run *g, const step_list *l, char *key, size_t cap)
{
    const int64_t t0 = st_now_ns();
    st_err e = st_key_job_dir(key, cap, g->job, "gc/deleting");
    if (e)
        return e;
    size_t len = strlen(key);
    int n = snprintf(key + len, cap - len, "%020lld.%ld", (long long)t0, (long)getpid());
    if (n < 0 || (size_t)n >= cap - len)
        return st_seterr(ST_ERR_INVALID, "intent key too long");
    uint64_t *steps = malloc((l->n ? l->n : 1) * sizeof *steps);
    size_t nsteps = 0;
    if (!steps)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < l->n; i++)
        if (l->steps[i].deleted)
            steps[nsteps++] = l->steps[i].step;
    st_bytes text = {0};
    e = st_gcmark_intent_encode(t0, steps, nsteps, &text);
    if (!e)
        e = st_put(g->b, key, text.data, text.len);
    st_bytes_free(&text);
    free(steps);
    return e;
}

/* Finishes the step deletions of interrupted runs: for every intent older
 * than grace, each step it lists that has objects and no part record loses
 * those objects; then the intent goes. */
static st_err finish_intents(gc_run *g, step_list *l)
{
    obj_list intents = {0};
    st_bytes buf = {0};
    st_err e = list_objs(g, "gc/deleting", 0, &intents);
    for (size_t i = 0; i < intents.n && !e && !g->r->stopped; i++) {
        u64_list steps = {0};
        int64_t t0 = 0;
        e = st_get(g->b, intents.v[i].key, 0, ST_GET_TO_END, &buf);
        if (e == ST_ERR_NOT_FOUND) {
            e = ST_OK; /* another run finished it */
            continue;
        }
        if (!e && (e = st_gcmark_intent_decode(buf.data, buf.len, &t0, &steps.v, &steps.n)) ==
                      ST_ERR_CORRUPT) {
            char msg[ST_KEY_MAX + 64];
            snprintf(msg, sizeof msg, "gc: %s is not a GC intent; deleting it", intents.v[i].key);
            gc_warn(g, msg);
            e = ST_OK;
            t0 = 0; /* nothing to finish: just delete it */
            steps.n = 0;
        }
        int old = !t0; /* a garbage intent goes at once */
        if (!e && !old)
            e = key_older_than(g, intents.v[i].key, g->grace, &old);
        if (!e && !old) {
            free(steps.v);
            continue; /* its run may still be at work */
        }
        for (size_t k = 0; k < steps.n && !e && !g->r->stopped; k++)
            for (size_t j = 0; j < l->n && !e; j++) {
                gc_step *st = &l->steps[j];
                if (st->step != steps.v[k] || st->keys.nnodes || !st->nobjs || st->finished)
                    continue;
                st->finished = 1; /* once, even if two intents list it */
                if (!(e = delete_step_objects(g, (const gc_step *const[]){st}, 1)))
                    unit_done(g);
            }
        free(steps.v);
        if (!e && !g->r->stopped && !(e = delete_key(g, intents.v[i].key, intents.v[i].size))) {
            g->r->markers_deleted++;
            unit_done(g);
        }
    }
    obj_list_free(&intents);
    st_bytes_free(&buf);
    return e;
}

/* Deletes the steps of l marked deleted, under an intent of this run. */
static st_err delete_picked(gc_run *g, step_list *l)
{
    char intent[ST_KEY_MAX];
    int any = 0;
    st_err e = ST_OK;
    for (size_t i = 0; i < l->n; i++)
        any |= l->steps[i].deleted;
    if (!any)
        return ST_OK;
    if (!g->dry_run && (e = intent_put(g, l, intent, sizeof intent)))
        return e;
    /* Steps go a batch at a time: as many whole steps as hold about
     * g->batch objects (at least one). */
    const gc_step **group = malloc(l->n * sizeof *group);
    size_t ngroup = 0, nobjs = 0;
    if (!group)
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < l->n && !e && !g->r->stopped; i++) {
        if (!l->steps[i].deleted)
            continue;
        group[ngroup++] = &l->steps[i];
        nobjs += l->steps[i].nobjs;
        int last = 1;
        for (size_t j = i + 1; j < l->n && last; j++)
            last = !l->steps[j].deleted;
        if ((nobjs >= g->batch || last) && !(e = delete_steps(g, group, ngroup))) {
            ngroup = nobjs = 0;
            unit_done(g);
        }
    }
    free(group);
    /* Every step it names is whole again (deleted, or not touched). Not
     * reported: the run made it itself. Left behind on an error, for the
     * next run to finish. */
    if (!e && !g->dry_run)
        e = st_del(g->b, intent);
    return e;
}

/* ---- the sweep ---- */

typedef struct pack_obj {
    st_id id;
    uint64_t size;
    int marked;       /* a pending marker exists */
    int64_t age_ns;   /* of the marker at the run's t0, by the store's clock (at least) */
    int64_t grace_ns; /* the marker's own grace */
    int64_t pending_size, retired_size; /* of its markers; -1: none */
} pack_obj;

typedef struct pack_list {
    size_t prefix_len;
    pack_obj *v;
    size_t n, cap;
    st_idmap index; /* id -> position in v */
    int oom;
} pack_list;

static int collect_pack(void *arg, const char *key, uint64_t size)
{
    pack_list *l = arg;
    /* jobs/<job>/packs/<hh>/<hex>.pack */
    const char *p = key + l->prefix_len;
    char hex[ST_ID_HEX_LEN + 1];
    st_id id;
    if (strlen(p) != 3 + ST_ID_HEX_LEN + 5 || p[2] != '/' || strcmp(p + 3 + ST_ID_HEX_LEN, ".pack"))
        return 0;
    memcpy(hex, p + 3, ST_ID_HEX_LEN);
    hex[ST_ID_HEX_LEN] = '\0';
    if (st_id_parse(hex, &id))
        return 0;
    if (st_array_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) ||
        st_idmap_put(&l->index, &id, (uint32_t)l->n))
        return l->oom = 1;
    l->v[l->n++] = (pack_obj){.id = id, .size = size, .pending_size = -1, .retired_size = -1};
    return 0;
}

/* Lists the packs of the job into packs (id -> size). */
static st_err list_packs(gc_run *g, pack_list *packs)
{
    char prefix[ST_KEY_MAX];
    snprintf(prefix, sizeof prefix, "jobs/%s/packs/", g->job);
    packs->prefix_len = strlen(prefix);
    st_err e = st_list(g->b, prefix, collect_pack, packs);
    if (!e && packs->oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing packs");
    return e;
}

static void pack_list_free(pack_list *packs)
{
    free(packs->v);
    st_idmap_free(&packs->index);
    memset(packs, 0, sizeof *packs);
}

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
    return u64_in(&g->pins, step) || (g->p->keep_every && step % g->p->keep_every == 0);
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
    for (size_t i = 0; i < l->n && !e && !stop_requested(g); i++) {
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
                        e = key_older_than(g, key, g->grace, &part_old);
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
            e = queue_key(g, key, due[i]->size);
    if (e)
        queue_clear(&g->q);
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
            me = queue_key(g, key, (uint64_t)due[i]->pending_size);
        if (!me && due[i]->retired_size >= 0 &&
            !(me = st_key_gc_retired(key, sizeof key, g->job, &due[i]->id)))
            me = queue_key(g, key, (uint64_t)due[i]->retired_size);
    }
    if (me)
        queue_clear(&g->q);
    else
        me = flush_counting(g, &g->r->markers_deleted);
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
        const st_id id = marker_id(pending, i);
        int exists = st_idmap_get(&packs->index, &id, &at);
        int referenced = st_idmap_get(&refs->index, &id, &ref);
        if (!exists || referenced) {
            g->r->packs_unmarked += exists && referenced;
            e = queue_batched(g, m->key, m->size, &g->r->markers_deleted);
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
        const st_id id = marker_id(retired, i);
        if (st_idmap_get(&packs->index, &id, &at)) {
            packs->v[at].retired_size = (int64_t)retired->v[i].size;
            continue;
        }
        e = queue_batched(g, retired->v[i].key, retired->v[i].size, &g->r->markers_deleted);
    }
    if (!e)
        e = flush_unit(g, &g->r->markers_deleted);
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

static st_err sweep(gc_run *g, const step_list *first)
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
        e = list_objs(g, "gc/pending", 1, &pending);
    if (!e)
        e = list_objs(g, "gc/retired", 1, &retired);
    if (!e)
        e = list_packs(g, &packs);
    if (e)
        goto out;
    r->packs = packs.n;

    /* 3. the references, from a fresh listing (a real run: after the
     *    deletions; a dry run: the same steps minus those it would delete). */
    if ((e = list_steps(g->b, g->job, &now_steps)))
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
        e = queue_batched(g, old[i].key, old[i].size, &r->manifests_deleted);
    if (!e)
        e = flush_unit(g, &r->manifests_deleted);

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
            unit_done(g);
        }
    }
    if (!e && ndue && !(e = delete_packs(g, due, ndue)))
        unit_done(g);
out:
    free(due);
    pack_list_free(&packs);
    obj_list_free(&pending);
    obj_list_free(&retired);
    step_list_free(&now_steps);
    ref_set_free(&refs);
    free(old);
    return e;
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
 * kept, and its references are unknown, so the sweep will be skipped by
 * scan_references.
 */
static st_err judge_steps(gc_run *g, step_list *l)
{
    pack_list packs = {0};
    st_bytes buf = {0};
    char msg[700], why[200];
    st_err e = list_packs(g, &packs);
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
        st->young = !v.consistent && partial_step_young(g, st);
        if (v.consistent && !st->restorable) {
            snprintf(msg, sizeof msg,
                     "gc: step %" PRIu64 " is damaged (%s): it does not count as a kept step",
                     st->step, why);
            gc_warn(g, msg);
            g->r->steps_damaged++;
        }
        st_stepview_free(&v);
    }
    pack_list_free(&packs);
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
        .batch = p->batch ? p->batch : DEFAULT_BATCH,
        .warn = warn,
        .warn_arg = warn_arg,
    };
    memset(r, 0, sizeof *r);
    r->dry_run = dry_run;
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);

    step_list l;
    st_err e = list_steps(b, job, &l);
    if (e)
        return e;
    if ((e = list_pins(b, job, &g.pins)))
        goto out;

    /* 1. judge every step, then retention. */
    if ((e = judge_steps(&g, &l)))
        goto out;
    e = finish_intents(&g, &l);
    pick_steps(&g, &l, &g.pins, p);
    for (size_t i = 0; i < l.n; i++)
        r->steps_kept += l.steps[i].keys.nnodes && !l.steps[i].deleted;
    if (!e && !r->stopped)
        e = delete_picked(&g, &l);
    /* Compaction between retention and the sweep: the sweep's scan then
     * sees the rewritten part records and marks the old packs. */
    if (!e && p->compact && !stop_requested(&g))
        e = st_compact_run(b, job, p, g.grace, dry_run, r);
    if (!e && !stop_requested(&g))
        e = sweep(&g, &l);
out:
    step_list_free(&l);
    free(g.pins.v);
    queue_free(&g.q);
    return e;
}

st_err st_gc_delete_step(st_backend *b, const char *job, uint64_t step, st_gc_report *r)
{
    static const st_gc_policy none = {0};
    char prefix[ST_KEY_MAX];
    step_list l = {.job = job};
    gc_run g = {.b = b, .job = job, .p = &none, .r = r, .batch = DEFAULT_BATCH};
    memset(r, 0, sizeof *r);
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    st_err e = st_key_step_prefix(prefix, sizeof prefix, job, step);
    if (!e)
        e = st_list(b, prefix, collect_step_obj, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing step %" PRIu64, step);
    for (size_t i = 0; i < l.n; i++)
        l.steps[i].deleted = l.steps[i].step == step; /* even without a part record */
    if (!e)
        e = delete_picked(&g, &l);
    step_list_free(&l);
    queue_free(&g.q);
    return e;
}
