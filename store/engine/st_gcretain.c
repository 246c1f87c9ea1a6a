/*
 * st_gcretain — retention (step 1 of a GC run, docs/GC.md "Retention"):
 * which steps go under keep-last, keep-every and pins, with the anchor of
 * the newest restorable step and the grace a partial step gets; the intent
 * a run writes before it deletes steps, and the finishing of intents that
 * interrupted runs left; each step's part records before its other objects.
 *
 * Calls only the run's shared listings and deletes (st_gcrun.h).
 */
#include "engine/st_gcrun.h"
#include "util/st_array.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "format/st_gcmark.h"

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
            s->settled = !gc_partial_step_young(g, s);
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
void gc_pick_steps(gc_run *g, step_list *l, const u64_list *pins, const st_gc_policy *p)
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
        int keep = i == newest || gc_u64_in(pins, s->step);
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

/* Whether partial step st may still be filling: a part record younger than
 * grace by the store's clock (a store error counts as young: kept). */
int gc_partial_step_young(gc_run *g, const gc_step *st)
{
    for (size_t i = 0; i < st->nobjs; i++) {
        int old = 0;
        if (is_part_key(st->objs[i].key) &&
            (gc_key_older_than(g, st->objs[i].key, g->grace, &old) || !old))
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
                    e = gc_queue_key(g, st->objs[i].key, st->objs[i].size);
            }
        }
        if (e)
            gc_queue_clear(&g->q);
        else
            e = gc_flush_counting(g, parts ? &g->r->parts_deleted : &g->r->manifests_deleted);
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
st_err gc_finish_intents(gc_run *g, step_list *l)
{
    obj_list intents = {0};
    st_bytes buf = {0};
    st_err e = gc_list_objs(g, "gc/deleting", 0, &intents);
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
            e = gc_key_older_than(g, intents.v[i].key, g->grace, &old);
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
                    gc_unit_done(g);
            }
        free(steps.v);
        if (!e && !g->r->stopped && !(e = gc_delete_key(g, intents.v[i].key, intents.v[i].size))) {
            g->r->markers_deleted++;
            gc_unit_done(g);
        }
    }
    gc_obj_list_free(&intents);
    st_bytes_free(&buf);
    return e;
}

/* Deletes the steps of l marked deleted, under an intent of this run. */
st_err gc_delete_picked(gc_run *g, step_list *l)
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
            gc_unit_done(g);
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
