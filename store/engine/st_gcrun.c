/*
 * st_gcrun — the listings and batched deletes every GC phase uses
 * (st_gcrun.h says what each does; docs/GC.md, "Batches").
 *
 * Calls only the backend, the key layout and the store's clock.
 */
#include "engine/st_gcrun.h"
#include "util/st_array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_fsutil.h"
#include "format/st_gcmark.h"
#include "format/st_part.h"

/* Appends a copy of key to *v. 0, or -1 when out of memory. */
static int obj_push(gc_obj **v, size_t *n, size_t *cap, const char *key, uint64_t size)
{
    if (st_array_grow((void **)v, cap, *n + 1, sizeof **v) || !((*v)[*n].key = strdup(key)))
        return -1;
    (*v)[(*n)++].size = size;
    return 0;
}

static int collect_obj(void *arg, const char *key, uint64_t size)
{
    obj_list *l = arg;
    st_id id;
    if (l->ids && st_id_parse(key + l->prefix_len, &id))
        return 0; /* not a marker */
    return l->oom = obj_push(&l->v, &l->n, &l->cap, key, size) != 0;
}

void gc_obj_list_free(obj_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].key);
    free(l->v);
    memset(l, 0, sizeof *l);
}

void gc_step_list_free(step_list *l)
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

int gc_collect_step_obj(void *arg, const char *key, uint64_t size)
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

st_err gc_list_steps(st_backend *b, const char *job, step_list *l)
{
    char prefix[ST_KEY_MAX];
    memset(l, 0, sizeof *l);
    l->job = job;
    st_err e = st_key_steps_prefix(prefix, sizeof prefix, job);
    if (!e)
        e = st_list(b, prefix, gc_collect_step_obj, l);
    if (!e && l->oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing steps");
    if (e)
        gc_step_list_free(l);
    return e;
}

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
st_err gc_list_packs(gc_run *g, pack_list *packs)
{
    char prefix[ST_KEY_MAX];
    snprintf(prefix, sizeof prefix, "jobs/%s/packs/", g->job);
    packs->prefix_len = strlen(prefix);
    st_err e = st_list(g->b, prefix, collect_pack, packs);
    if (!e && packs->oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing packs");
    return e;
}

void gc_pack_list_free(pack_list *packs)
{
    free(packs->v);
    st_idmap_free(&packs->index);
    memset(packs, 0, sizeof *packs);
}

/* Lists the objects under jobs/<job>/<what>/ into l; with ids, only those
 * whose name is a pack id (markers). */
st_err gc_list_objs(gc_run *g, const char *what, int ids, obj_list *l)
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
st_id gc_marker_id(const obj_list *l, size_t i)
{
    st_id id = {{0}};
    st_id_parse(l->v[i].key + l->prefix_len, &id); /* checked by collect_obj */
    return id;
}

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

st_err gc_list_pins(st_backend *b, const char *job, u64_list *l)
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

int gc_u64_in(const u64_list *l, uint64_t v)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i] == v)
            return 1;
    return 0;
}

/* *old = 1 when key is surely at least age_ns old by the store's clock
 * (docs/GC.md, "Clocks"), or gone; 0 when it may be younger. Every age GC
 * acts on is judged so, never by comparing a stamp written by another host
 * with this host's clock. */
st_err gc_key_older_than(gc_run *g, const char *key, int64_t age_ns, int *old)
{
    int64_t at_least;
    st_err e = st_store_age(g->b, key, &at_least, NULL);
    *old = e == ST_ERR_NOT_FOUND || (!e && at_least >= age_ns);
    return e == ST_ERR_NOT_FOUND ? ST_OK : e;
}

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
st_err gc_delete_key(gc_run *g, const char *key, uint64_t size)
{
    st_err e = g->dry_run ? ST_OK : st_del(g->b, key);
    if (e)
        return e;
    g->in_batch++;
    return report_key(g->r, key, size);
}

/* Queues key for the next gc_flush. */
st_err gc_queue_key(gc_run *g, const char *key, uint64_t size)
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

void gc_queue_clear(del_queue *q)
{
    for (size_t i = 0; i < q->n; i++)
        free(q->keys[i]);
    q->n = 0;
}

void gc_queue_free(del_queue *q)
{
    gc_queue_clear(q);
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
st_err gc_flush(gc_run *g, unsigned char *ok)
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
    gc_queue_clear(q);
    if (e)
        return st_seterr(e, "%s", msg);
    return re;
}

/* gc_flush, adding how many keys went to *counter (a report field). */
st_err gc_flush_counting(gc_run *g, uint64_t *counter)
{
    size_t before = g->r->ndeleted;
    st_err e = gc_flush(g, NULL);
    *counter += g->r->ndeleted - before;
    return e;
}

/* Ends a unit of queued single objects (markers, manifests: each a unit of
 * its own): flushes them, if any, and looks at stop (gc_unit_done). */
st_err gc_flush_unit(gc_run *g, uint64_t *counter)
{
    if (!g->q.n)
        return ST_OK;
    st_err e = gc_flush_counting(g, counter);
    if (!e)
        gc_unit_done(g);
    return e;
}

/* Queues key and, once the queue holds a batch, flushes it as a unit. */
st_err gc_queue_batched(gc_run *g, const char *key, uint64_t size, uint64_t *counter)
{
    st_err e = gc_queue_key(g, key, size);
    return e || g->q.n < g->batch ? e : gc_flush_unit(g, counter);
}

/* 1 (and r->stopped) if the caller asked the run to stop. */
int gc_stop_requested(gc_run *g)
{
    if (g->p->stop && *g->p->stop)
        g->r->stopped = 1;
    return g->r->stopped;
}

/* Called at the end of every unit a stop must not split: once a batch is
 * full, reports progress and looks at stop. 1: stop here. */
int gc_unit_done(gc_run *g)
{
    if (g->in_batch < g->batch)
        return 0;
    g->in_batch = 0;
    if (g->p->progress)
        g->p->progress(g->p->progress_arg, g->r);
    return gc_stop_requested(g);
}

void gc_warn(gc_run *g, const char *msg)
{
    if (g->warn)
        g->warn(g->warn_arg, msg);
}
