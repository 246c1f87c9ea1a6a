/*
 * st_gc — retention and the time-fenced sweep (docs/GC.md; st_gc.h).
 *
 * One run, in this order (the order is the safety argument, docs/GC.md):
 *   1. list every object under jobs/<job>/steps/ once; judge each step
 *      (st_stepio_load_view) and pick the steps retention deletes; delete
 *      each one's part records first (it is then invisible), then the rest
 *      of its objects (manifests);
 *   2. t0 = now; list the pending markers (reading each) and the packs;
 *   3. list the steps again and load the manifest every part record names:
 *      the referenced set (and the superseded manifest revisions);
 *   4. per pack: referenced -> drop its marker; unreferenced without marker
 *      -> write one (t0, grace); unreferenced with a marker at least
 *      `grace` older than t0 -> delete the pack, then its marker.
 * A dry run does 1-4 without writing or deleting anything and reports the
 * same list of keys a real run would delete.
 *
 * A part record or manifest that cannot be read makes the references
 * unknown: the sweep (3-4) is skipped and said so, never guessed.
 *
 * Threads: one thread per run; nothing static.
 */
#include "st_gc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "st_fsutil.h"
#include "st_idmap.h"
#include "st_store_impl.h"
#include "st_stepio.h"

#define MARKER_MAGIC "ckptfs-gc-pending v1"

/* ---- keys and markers ---- */

st_err st_key_gc_pending_prefix(char *out, size_t cap, const char *job)
{
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    int n = snprintf(out, cap, "jobs/%s/gc/pending/", job);
    return n < 0 || (size_t)n >= cap ? ST_ERR_INVALID : ST_OK;
}

st_err st_key_gc_pending(char *out, size_t cap, const char *job, const st_id *pack)
{
    char hex[ST_ID_HEX_LEN + 1];
    st_err e = st_key_gc_pending_prefix(out, cap, job);
    if (e)
        return e;
    size_t len = strlen(out);
    int n = snprintf(out + len, cap - len, "%s", st_id_hex(pack, hex));
    return n < 0 || (size_t)n >= cap - len ? ST_ERR_INVALID : ST_OK;
}

static st_err key_pins_prefix(char *out, size_t cap, const char *job)
{
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    int n = snprintf(out, cap, "jobs/%s/pins/", job);
    return n < 0 || (size_t)n >= cap ? ST_ERR_INVALID : ST_OK;
}

st_err st_key_pin(char *out, size_t cap, const char *job, uint64_t step)
{
    st_err e = key_pins_prefix(out, cap, job);
    if (e)
        return e;
    size_t len = strlen(out);
    int n = snprintf(out + len, cap - len, "%020" PRIu64, step);
    return n < 0 || (size_t)n >= cap - len ? ST_ERR_INVALID : ST_OK;
}

st_err st_gc_marker_decode(const void *buf, size_t len, int64_t *marked_ns, int64_t *grace_ns)
{
    char text[128];
    if (len >= sizeof text)
        return st_seterr(ST_ERR_CORRUPT, "GC marker too long");
    memcpy(text, buf, len);
    text[len] = '\0';
    long long m, g;
    char magic[32], tail;
    if (sscanf(text, "%31s v1 %lld %lld%c", magic, &m, &g, &tail) != 4 || tail != '\n' ||
        strncmp(text, MARKER_MAGIC " ", sizeof MARKER_MAGIC) || m < 0 || g < 0)
        return st_seterr(ST_ERR_CORRUPT, "not a GC marker");
    *marked_ns = m;
    *grace_ns = g;
    return ST_OK;
}

static st_err marker_encode(char *out, size_t cap, int64_t marked_ns, int64_t grace_ns, size_t *len)
{
    int n =
        snprintf(out, cap, MARKER_MAGIC " %lld %lld\n", (long long)marked_ns, (long long)grace_ns);
    if (n < 0 || (size_t)n >= cap)
        return st_seterr(ST_ERR_INVALID, "GC marker does not fit");
    *len = (size_t)n;
    return ST_OK;
}

st_err st_gc_pack_usable(st_backend *b, const char *job, const st_id *pack,
                         int64_t *young_ok_until_ns)
{
    char key[ST_KEY_MAX], hex[ST_ID_HEX_LEN + 1];
    uint64_t size;
    st_err e = st_key_gc_pending(key, sizeof key, job, pack);
    if (e)
        return e;
    /* The marker first: the GC deletes a pack before its marker, so "no
     * marker, then the pack" cannot both hold for a pack being deleted. */
    e = st_stat(b, key, &size);
    if (e == ST_OK) {
        if (!young_ok_until_ns)
            return st_seterr(ST_ERR_BUSY, "pack %s is pending deletion by GC",
                             st_id_hex(pack, hex));
        st_bytes buf = {0};
        int64_t marked, grace;
        e = st_get(b, key, 0, ST_GET_TO_END, &buf);
        if (!e)
            e = st_gc_marker_decode(buf.data, buf.len, &marked, &grace);
        st_bytes_free(&buf);
        if (e == ST_ERR_NOT_FOUND)
            e = ST_OK; /* unmarked meanwhile: look at the pack below */
        else if (e)
            return e;
        else if (st_now_ns() >= marked + grace / 2)
            return st_seterr(ST_ERR_BUSY,
                             "pack %s was marked for GC %.1f s ago (grace %.1f s): too late "
                             "to publish a reference to it",
                             st_id_hex(pack, hex), (double)(st_now_ns() - marked) / 1e9,
                             (double)grace / 1e9);
        else if (marked + grace / 2 < *young_ok_until_ns)
            *young_ok_until_ns = marked + grace / 2;
    } else if (e != ST_ERR_NOT_FOUND) {
        return e;
    }
    if ((e = st_key_pack(key, sizeof key, job, pack)))
        return e;
    e = st_stat(b, key, &size);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_BUSY, "pack %s is gone (deleted by GC)", st_id_hex(pack, hex));
    return e;
}

/* ---- growing arrays ---- */

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *p = realloc(*arr, n * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = n;
    return 0;
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
    int64_t created_ns;
    int deleted;
} gc_step;

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
        if (grow((void **)&l->steps, &l->cap, l->n + 1, sizeof *l->steps))
            return l->oom = 1;
        memset(&l->steps[l->n], 0, sizeof *l->steps);
        l->steps[l->n].step = step;
        l->steps[l->n].keys.step = step;
        l->n++;
    }
    gc_step *s = &l->steps[l->n - 1];
    if (grow((void **)&s->objs, &s->objs_cap, s->nobjs + 1, sizeof *s->objs) ||
        !(s->objs[s->nobjs].key = strdup(key)))
        return l->oom = 1;
    s->objs[s->nobjs++].size = size;
    char node[ST_NODE_MAX + 1];
    if (st_key_parse_part(rest, node)) {
        if (grow((void **)&s->keys.nodes, &s->nodes_cap, s->keys.nnodes + 1, sizeof *s->keys.nodes))
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

/* For "nodes/<node>.r<rev>.manifest": the node and revision, 1; else 0. */
static int parse_manifest_rest(const char *rest, char *node, uint32_t *rev)
{
    static const char prefix[] = "nodes/", suffix[] = ".manifest";
    size_t len = strlen(rest), pl = sizeof prefix - 1, sl = sizeof suffix - 1;
    if (len <= pl + sl || strncmp(rest, prefix, pl) || strcmp(rest + len - sl, suffix))
        return 0;
    const char *end = rest + len - sl, *p = end;
    while (p > rest + pl && p[-1] >= '0' && p[-1] <= '9')
        p--;
    if (p == end || p - 2 < rest + pl || p[-1] != 'r' || p[-2] != '.')
        return 0;
    uint64_t v = 0;
    for (const char *q = p; q < end; q++)
        if ((v = v * 10 + (uint64_t)(*q - '0')) > UINT32_MAX)
            return 0;
    size_t n = (size_t)(p - 2 - (rest + pl));
    if (n == 0 || n > ST_NODE_MAX)
        return 0;
    memcpy(node, rest + pl, n);
    node[n] = '\0';
    *rev = (uint32_t)v;
    return 1;
}

/* ---- the report ---- */

static st_err report_key(st_gc_report *r, const char *key, uint64_t size)
{
    if (grow((void **)&r->deleted, &r->deleted_cap, r->ndeleted + 1, sizeof *r->deleted) ||
        !(r->deleted[r->ndeleted] = strdup(key)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    r->ndeleted++;
    r->objects_deleted++;
    r->bytes_freed += size;
    return ST_OK;
}

/* Deletes key (unless dry_run) and reports it. */
static st_err delete_key(st_backend *b, int dry_run, st_gc_report *r, const char *key,
                         uint64_t size)
{
    st_err e = dry_run ? ST_OK : st_del(b, key);
    return e ? e : report_key(r, key, size);
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

/* ---- pins ---- */

typedef struct u64_list {
    uint64_t *v;
    size_t n, cap;
    int oom;
} u64_list;

static int collect_pin(void *arg, const char *key, uint64_t size)
{
    (void)size;
    u64_list *l = arg;
    const char *name = strrchr(key, '/');
    name = name ? name + 1 : key;
    if (strlen(name) != ST_STEP_DIGITS || strspn(name, "0123456789") != ST_STEP_DIGITS)
        return 0;
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v))
        return l->oom = 1;
    l->v[l->n++] = strtoull(name, NULL, 10);
    return 0;
}

static st_err list_pins(st_backend *b, const char *job, u64_list *l)
{
    char prefix[ST_KEY_MAX];
    memset(l, 0, sizeof *l);
    st_err e = key_pins_prefix(prefix, sizeof prefix, job);
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

st_err st_store_pin(st_store *s, const char *job, uint64_t step, int pin)
{
    char key[ST_KEY_MAX];
    uint64_t size;
    st_err e = st_key_pin(key, sizeof key, job, step);
    if (e)
        return e;
    if (!pin) {
        e = st_stat(s->backend, key, &size);
        if (e == ST_ERR_NOT_FOUND)
            return st_seterr(ST_ERR_NOT_FOUND, "step %" PRIu64 " of job %s is not pinned", step,
                             job);
        return e ? e : st_del(s->backend, key);
    }
    step_list l;
    if ((e = list_steps(s->backend, job, &l)))
        return e;
    int found = 0;
    for (size_t i = 0; i < l.n; i++)
        found |= l.steps[i].step == step && l.steps[i].keys.nnodes > 0;
    step_list_free(&l);
    if (!found)
        return st_seterr(ST_ERR_NOT_FOUND, "job %s has no step %" PRIu64, job, step);
    return st_put(s->backend, key, "", 0);
}

st_err st_store_pins(st_store *s, const char *job, uint64_t **steps, size_t *n)
{
    u64_list l;
    st_err e = list_pins(s->backend, job, &l);
    if (e) {
        free(l.v);
        return e;
    }
    *steps = l.v;
    *n = l.n;
    return ST_OK;
}

/* ---- retention ---- */

/* Decides which steps go (sets deleted) under policy p. */
static void pick_steps(step_list *l, const u64_list *pins, const st_gc_policy *p, int64_t grace,
                       int64_t now)
{
    size_t newest = SIZE_MAX; /* index of the newest consistent step */
    for (size_t i = l->n; i-- > 0 && newest == SIZE_MAX;)
        if (l->steps[i].keys.nnodes && l->steps[i].consistent)
            newest = i;
    if (newest == SIZE_MAX || (!p->keep_last && !p->keep_every))
        return; /* nothing consistent yet, or no policy: every step stays */
    uint64_t consistent_seen = 0;
    for (size_t i = newest + 1; i-- > 0;) {
        gc_step *s = &l->steps[i];
        if (!s->keys.nnodes)
            continue; /* no part record: not a step (an in-flight first publish) */
        int keep = i == newest || u64_in(pins, s->step);
        if (s->consistent) {
            consistent_seen++;
            keep |= p->keep_last && consistent_seen <= p->keep_last;
            keep |= p->keep_every && s->step % p->keep_every == 0;
        } else {
            keep |= now - s->created_ns < grace; /* a partial step may still be filling */
        }
        s->deleted = !keep;
    }
}

/* Deletes one step: its part records first (it is then invisible), then
 * every other object under its prefix. */
static st_err delete_step(st_backend *b, int dry_run, st_gc_report *r, const gc_step *st)
{
    static const char suffix[] = ".commit";
    st_err e = ST_OK;
    for (int parts = 1; parts >= 0 && !e; parts--)
        for (size_t i = 0; i < st->nobjs && !e; i++) {
            size_t len = strlen(st->objs[i].key);
            int is_part = len > sizeof suffix - 1 &&
                          !strcmp(st->objs[i].key + len - (sizeof suffix - 1), suffix);
            if (is_part == parts) {
                e = delete_key(b, dry_run, r, st->objs[i].key, st->objs[i].size);
                if (!e && is_part)
                    r->parts_deleted++;
                else if (!e)
                    r->manifests_deleted++;
            }
        }
    if (!e && !grow((void **)&r->deleted_steps, &r->deleted_steps_cap, r->steps_deleted + 1,
                    sizeof *r->deleted_steps))
        r->deleted_steps[r->steps_deleted++] = st->step;
    else if (!e)
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    return e;
}

/* ---- the sweep ---- */

typedef struct pack_obj {
    st_id id;
    uint64_t size;
    int marked; /* a marker exists */
    int64_t marked_ns, grace_ns;
} pack_obj;

typedef struct pack_list {
    const char *job;
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
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) ||
        st_idmap_put(&l->index, &id, (uint32_t)l->n))
        return l->oom = 1;
    l->v[l->n++] = (pack_obj){.id = id, .size = size};
    return 0;
}

typedef struct marker_obj {
    st_id id;
    uint64_t size;
} marker_obj;

typedef struct marker_list {
    size_t prefix_len;
    marker_obj *v;
    size_t n, cap;
    int oom;
} marker_list;

static int collect_marker(void *arg, const char *key, uint64_t size)
{
    marker_list *l = arg;
    st_id id;
    if (st_id_parse(key + l->prefix_len, &id))
        return 0;
    if (grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v))
        return l->oom = 1;
    l->v[l->n++] = (marker_obj){id, size};
    return 0;
}

/* Adds every pack the manifest named by each part record of the (not
 * deleted) steps of l references to refs; reports superseded manifest
 * revisions older than grace as deletable (keys into *old). */
static st_err scan_references(st_backend *b, const char *job, const step_list *l,
                              const step_list *deleted_from, st_idmap *refs, gc_obj **old,
                              size_t *nold, int64_t grace, int64_t now)
{
    st_bytes buf = {0};
    size_t old_cap = 0;
    st_err e = ST_OK;
    for (size_t i = 0; i < l->n && !e; i++) {
        const gc_step *st = &l->steps[i];
        int gone = 0;
        for (size_t j = 0; deleted_from && j < deleted_from->n; j++)
            gone |= deleted_from->steps[j].step == st->step && deleted_from->steps[j].deleted;
        if (gone)
            continue; /* a dry run: this step would be deleted by now */
        for (size_t k = 0; k < st->keys.nnodes && !e; k++) {
            st_part part;
            st_manifest m;
            e = st_stepio_load_part(b, job, st->step, st->keys.nodes[k], &buf, &part);
            if (e == ST_ERR_NOT_FOUND) {
                e = ST_OK; /* deleted since the listing: it references nothing now */
                continue;
            }
            if (e)
                break;
            e = st_stepio_load_manifest(b, &part, &buf, &m);
            if (!e) {
                for (size_t p = 0; !e && p < m.npacks; p++)
                    e = st_idmap_put(refs, &m.packs[p], 1);
                st_manifest_free(&m);
            }
            /* Revisions this part record superseded, once it is older than
             * grace (a reader that fetched the older record is done). */
            for (size_t o = 0; !e && o < st->nobjs && now - part.created_ns >= grace; o++) {
                uint64_t step;
                const char *rest;
                char node[ST_NODE_MAX + 1];
                uint32_t rev;
                if (st_key_parse_step(st->objs[o].key, job, &step, &rest) ||
                    !parse_manifest_rest(rest, node, &rev) || strcmp(node, part.node) ||
                    rev >= part.revision)
                    continue;
                if (grow((void **)old, &old_cap, *nold + 1, sizeof **old))
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

static st_err sweep(st_backend *b, const char *job, const step_list *first, int dry_run,
                    int64_t grace, st_gc_report *r)
{
    char prefix[ST_KEY_MAX], key[ST_KEY_MAX], text[128];
    pack_list packs = {.job = job};
    marker_list markers = {0};
    step_list now_steps = {0};
    st_idmap refs = {0};
    gc_obj *old = NULL;
    size_t nold = 0;
    st_bytes buf = {0};

    /* 2. t0, then markers and packs: every age below is measured at t0,
     *    before the reference scan starts. */
    const int64_t t0 = st_now_ns();
    st_err e = st_key_gc_pending_prefix(prefix, sizeof prefix, job);
    markers.prefix_len = strlen(prefix);
    if (!e)
        e = st_list(b, prefix, collect_marker, &markers);
    if (!e && markers.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing GC markers");
    if (!e) {
        snprintf(prefix, sizeof prefix, "jobs/%s/packs/", job);
        packs.prefix_len = strlen(prefix);
        e = st_list(b, prefix, collect_pack, &packs);
    }
    if (!e && packs.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing packs");
    if (e)
        goto out;
    r->packs = packs.n;

    /* 3. the references, from a fresh listing (a real run: after the
     *    deletions; a dry run: the same steps minus those it would delete). */
    if ((e = list_steps(b, job, &now_steps)))
        goto out;
    e = scan_references(b, job, &now_steps, dry_run ? first : NULL, &refs, &old, &nold, grace, t0);
    if (e) {
        r->sweep_skipped = 1;
        snprintf(r->why, sizeof r->why, "references unknown, nothing swept: %s", st_errmsg());
        e = ST_OK;
        goto out;
    }

    /* 4a. superseded manifest revisions. */
    for (size_t i = 0; i < nold && !e; i++)
        if (!(e = delete_key(b, dry_run, r, old[i].key, old[i].size)))
            r->manifests_deleted++;

    /* 4b. markers: read each; drop those whose pack is gone or referenced. */
    for (size_t i = 0; i < markers.n && !e; i++) {
        uint32_t at, one;
        st_key_gc_pending(key, sizeof key, job, &markers.v[i].id);
        int exists = st_idmap_get(&packs.index, &markers.v[i].id, &at);
        int referenced = st_idmap_get(&refs, &markers.v[i].id, &one);
        if (!exists || referenced) {
            if (!(e = delete_key(b, dry_run, r, key, markers.v[i].size))) {
                r->markers_deleted++;
                r->packs_unmarked += exists && referenced;
            }
            continue;
        }
        e = st_get(b, key, 0, ST_GET_TO_END, &buf);
        if (e == ST_ERR_NOT_FOUND) {
            e = ST_OK; /* another GC run dropped it */
            continue;
        }
        if (!e && st_gc_marker_decode(buf.data, buf.len, &packs.v[at].marked_ns,
                                      &packs.v[at].grace_ns) == ST_OK)
            packs.v[at].marked = 1;
        /* An unreadable marker counts as written now: it ages from here. */
        else if (!e)
            packs.v[at] = (pack_obj){packs.v[at].id, packs.v[at].size, 1, t0, grace};
    }

    /* 4c. packs. */
    for (size_t i = 0; i < packs.n && !e; i++) {
        pack_obj *p = &packs.v[i];
        uint32_t one;
        if (st_idmap_get(&refs, &p->id, &one)) {
            r->packs_referenced++;
            continue;
        }
        if (!p->marked) {
            size_t len;
            r->packs_marked++;
            st_key_gc_pending(key, sizeof key, job, &p->id);
            if (!dry_run && !(e = marker_encode(text, sizeof text, t0, grace, &len)))
                e = st_put(b, key, text, len);
            continue;
        }
        int64_t need = p->grace_ns > grace ? p->grace_ns : grace;
        if (t0 - p->marked_ns < need) {
            r->packs_pending++;
            continue;
        }
        /* The pack first, then its marker (writers look at them in the
         * opposite order, docs/GC.md). */
        if ((e = st_key_pack(key, sizeof key, job, &p->id)) ||
            (e = delete_key(b, dry_run, r, key, p->size)))
            break;
        r->packs_deleted++;
        st_key_gc_pending(key, sizeof key, job, &p->id);
        for (size_t m = 0; m < markers.n; m++)
            if (!memcmp(&markers.v[m].id, &p->id, sizeof p->id) &&
                !(e = delete_key(b, dry_run, r, key, markers.v[m].size)))
                r->markers_deleted++;
    }
out:
    free(packs.v);
    st_idmap_free(&packs.index);
    free(markers.v);
    step_list_free(&now_steps);
    st_idmap_free(&refs);
    free(old);
    st_bytes_free(&buf);
    return e;
}

st_err st_gc_run(st_backend *b, const char *job, const st_gc_policy *policy, int dry_run,
                 st_gc_report *r, st_gc_warn_fn warn, void *warn_arg)
{
    static const st_gc_policy none = {0};
    const st_gc_policy *p = policy ? policy : &none;
    const int64_t grace = p->grace_ns > 0 ? p->grace_ns : ST_GC_DEFAULT_GRACE_NS;
    memset(r, 0, sizeof *r);
    r->dry_run = dry_run;
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);

    step_list l;
    u64_list pins = {0};
    st_bytes buf = {0};
    st_err e = list_steps(b, job, &l);
    if (e)
        return e;
    if ((e = list_pins(b, job, &pins)))
        goto out;

    /* 1. judge every step; an unreadable one is kept, and its references
     *    are unknown, so the sweep will be skipped by scan_references. */
    for (size_t i = 0; i < l.n; i++) {
        gc_step *st = &l.steps[i];
        if (!st->keys.nnodes)
            continue;
        st_stepview v;
        if (st_stepio_load_view(b, job, &st->keys, &buf, &v)) {
            if (warn) {
                char msg[600];
                snprintf(msg, sizeof msg, "gc: step %" PRIu64 " kept: %s", st->step, st_errmsg());
                warn(warn_arg, msg);
            }
            st->created_ns = st_now_ns(); /* treated as young and partial */
            continue;
        }
        st->consistent = v.consistent;
        st->created_ns = v.created_ns;
        st_stepview_free(&v);
    }
    pick_steps(&l, &pins, p, grace, st_now_ns());
    for (size_t i = 0; i < l.n && !e; i++) {
        if (!l.steps[i].keys.nnodes)
            continue;
        if (l.steps[i].deleted)
            e = delete_step(b, dry_run, r, &l.steps[i]);
        else
            r->steps_kept++;
    }
    if (!e)
        e = sweep(b, job, &l, dry_run, grace, r);
out:
    step_list_free(&l);
    free(pins.v);
    st_bytes_free(&buf);
    return e;
}

st_err st_gc_delete_step(st_backend *b, const char *job, uint64_t step, st_gc_report *r)
{
    char prefix[ST_KEY_MAX];
    step_list l = {.job = job};
    memset(r, 0, sizeof *r);
    if (!st_name_is_valid(job, ST_JOB_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid job name '%.64s'", job);
    st_err e = st_key_step_prefix(prefix, sizeof prefix, job, step);
    if (!e)
        e = st_list(b, prefix, collect_step_obj, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing step %" PRIu64, step);
    for (size_t i = 0; i < l.n && !e; i++)
        if (l.steps[i].step == step)
            e = delete_step(b, 0, r, &l.steps[i]);
    step_list_free(&l);
    return e;
}

static void store_warn(void *arg, const char *msg)
{
    st_store_warnf(arg, "%s", msg);
}

st_err st_store_gc(st_store *s, const char *job, const st_gc_policy *policy, int dry_run,
                   st_gc_report *r)
{
    return st_gc_run(s->backend, job, policy, dry_run, r, store_warn, s);
}
