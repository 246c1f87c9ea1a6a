/*
 * st_catalog — part records and manifests in and out of the store, and the
 * consistency rule. See st_catalog.h, docs/PROTOCOL.md, docs/CONSISTENCY.md.
 */
#define _GNU_SOURCE /* qsort_r */
#include "engine/st_catalog.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_array.h"
#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "util/st_parallel.h"
#include "format/st_gcmark.h"

/* ---- listing ---- */

typedef struct name_list {
    char **names;
    size_t n, cap;
    int oom;
} name_list;

static int collect_job(void *arg, const char *key, uint64_t size)
{
    (void)size;
    name_list *l = arg;
    const char *name = key + strlen(ST_KEY_JOBLIST);
    if (!st_name_is_valid(name, ST_JOB_MAX))
        return 0; /* garbage in the registry: not a job */
    if (st_array_grow((void **)&l->names, &l->cap, l->n + 1, sizeof *l->names) ||
        !(l->names[l->n] = strdup(name)))
        return l->oom = 1;
    l->n++;
    return 0;
}

st_err st_catalog_list_jobs(st_backend *b, char ***jobs, size_t *n)
{
    name_list l = {0};
    st_err e = st_list(b, ST_KEY_JOBLIST, collect_job, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing jobs");
    if (e) {
        st_catalog_free_names(l.names, l.n);
        return e;
    }
    *jobs = l.names;
    *n = l.n;
    return ST_OK;
}

void st_catalog_free_names(char **names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

typedef struct list_ctx {
    const char *job;
    st_step_keys *steps;
    size_t n, cap;
    size_t nodes_cap; /* capacity of steps[n - 1].nodes, the step being filled */
    /* Manifest keys listed before the step's first part record
     * ("a.r3.manifest" sorts before "b.commit"): the largest revision,
     * given to the step if a part record of it follows. */
    uint64_t pending_step;
    uint32_t pending_revision;
    int oom;
} list_ctx;

/* Notes the revision of a manifest key of step (listing order). */
static void note_revision(list_ctx *l, uint64_t step, uint32_t revision)
{
    if (l->n && l->steps[l->n - 1].step == step) {
        if (revision > l->steps[l->n - 1].max_revision)
            l->steps[l->n - 1].max_revision = revision;
        return;
    }
    if (l->pending_step != step || !l->pending_revision)
        l->pending_revision = 0;
    l->pending_step = step;
    if (revision > l->pending_revision)
        l->pending_revision = revision;
}

static int add_node(list_ctx *l, const char *node)
{
    st_step_keys *k = &l->steps[l->n - 1];
    if (st_array_grow((void **)&k->nodes, &l->nodes_cap, k->nnodes + 1, sizeof *k->nodes))
        return -1;
    snprintf(k->nodes[k->nnodes++], ST_NODE_MAX + 1, "%s", node);
    return 0;
}

static int collect_part(void *arg, const char *key, uint64_t size)
{
    (void)size;
    list_ctx *l = arg;
    uint64_t step;
    const char *rest;
    char node[ST_NODE_MAX + 1];
    uint32_t revision;
    if (st_key_parse_step(key, l->job, &step, &rest) != ST_OK)
        return 0;
    if (st_key_parse_manifest(rest, node, &revision)) {
        note_revision(l, step, revision);
        return 0;
    }
    if (!st_key_parse_part(rest, node))
        return 0;
    /* The listing is in key order, so one step's parts arrive together. */
    if (!l->n || l->steps[l->n - 1].step != step) {
        if (st_array_grow((void **)&l->steps, &l->cap, l->n + 1, sizeof *l->steps))
            return l->oom = 1;
        uint32_t listed = l->pending_step == step ? l->pending_revision : 0;
        l->steps[l->n++] = (st_step_keys){step, 0, NULL, listed};
        l->nodes_cap = 0;
    }
    if (add_node(l, node))
        return l->oom = 1;
    return 0;
}

st_err st_catalog_list_steps(st_backend *b, const char *job, st_step_keys **steps, size_t *n)
{
    char prefix[ST_KEY_MAX];
    list_ctx l = {.job = job};
    *steps = NULL;
    *n = 0;
    st_err e = st_key_steps_prefix(prefix, sizeof prefix, job);
    if (!e)
        e = st_list(b, prefix, collect_part, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing steps");
    if (e) { /* one exit: the list is the caller's only on success */
        st_step_keys_free(l.steps, l.n);
    } else {
        *steps = l.steps;
        *n = l.n;
    }
    return e;
}

void st_step_keys_free(st_step_keys *steps, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(steps[i].nodes);
    free(steps);
}

/* ---- loading ---- */

st_err st_catalog_load_part(st_backend *b, const char *job, uint64_t step, const char *node,
                            st_bytes *buf, st_part *p)
{
    char key[ST_KEY_MAX];
    memset(p, 0, sizeof *p);
    st_err e = st_key_part(key, sizeof key, job, step, node);
    if (!e)
        e = st_get(b, key, 0, ST_GET_TO_END, buf);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(e, "node %s has no part of step %" PRIu64 " of job %s", node, step, job);
    if (e)
        return e;
    e = st_part_decode(buf->data, buf->len, p);
    if (e)
        return st_seterr(e, "%s: %s", key, st_errmsg());
    if (p->step != step || strcmp(p->job, job) != 0 || strcmp(p->node, node) != 0) {
        st_part_free(p);
        return st_seterr(ST_ERR_CORRUPT, "part record %s names another step or node", key);
    }
    return ST_OK;
}

st_err st_catalog_load_manifest(st_backend *b, const st_part *p, st_bytes *buf, st_manifest *m)
{
    char key[ST_KEY_MAX];
    memset(m, 0, sizeof *m);
    st_err e = st_key_manifest(key, sizeof key, p->job, p->step, p->node, p->revision);
    if (!e)
        e = st_get(b, key, 0, ST_GET_TO_END, buf);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_CORRUPT, "%s is named by a part record but missing", key);
    if (e)
        return e;
    st_id digest = st_id_of(buf->data, buf->len);
    if (buf->len != p->manifest_len || st_id_cmp(&digest, &p->manifest_digest) != 0)
        return st_seterr(ST_ERR_CORRUPT, "%s does not match its part record", key);
    e = st_manifest_decode(buf->data, buf->len, m);
    if (e)
        return st_seterr(e, "%s: %s", key, st_errmsg());
    if (m->step != p->step || strcmp(m->job, p->job) != 0) {
        st_manifest_free(m);
        return st_seterr(ST_ERR_CORRUPT, "%s describes another step", key);
    }
    return ST_OK;
}

st_err st_catalog_load_view(st_backend *b, const char *job, const st_step_keys *k, st_bytes *buf,
                            st_stepview *v)
{
    memset(v, 0, sizeof *v);
    v->step = k->step;
    v->parts = calloc(k->nnodes ? k->nnodes : 1, sizeof *v->parts);
    v->manifests = calloc(k->nnodes ? k->nnodes : 1, sizeof *v->manifests);
    if (!v->parts || !v->manifests) {
        st_stepview_free(v);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < k->nnodes; i++) {
        st_err e = st_catalog_load_part(b, job, k->step, k->nodes[i], buf, &v->parts[i]);
        if (!e) {
            e = st_catalog_load_manifest(b, &v->parts[i], buf, &v->manifests[i]);
            if (e)
                st_part_free(&v->parts[i]);
        }
        if (e) {
            st_stepview_free(v);
            return e;
        }
        v->nparts++;
    }
    st_stepview_evaluate(v);
    return ST_OK;
}

void st_stepview_free(st_stepview *v)
{
    for (size_t i = 0; i < v->nparts; i++) {
        st_part_free(&v->parts[i]);
        st_manifest_free(&v->manifests[i]);
    }
    free(v->parts);
    free(v->manifests);
    free(v->entries);
    memset(v, 0, sizeof *v);
}

/* ---- one version per path ---- */

/* By path; among versions of one path, the winning one first (qsort_r,
 * arg: the view). */
static int entry_order(const void *pa, const void *pb, void *arg)
{
    const st_stepview *v = arg;
    const st_stepfile *a = pa, *b = pb;
    int c = strcmp(a->f->path, b->f->path);
    if (c || a->part == b->part)
        return c;
    return st_part_supersedes(&v->parts[a->part], &v->parts[b->part]) ? -1 : 1;
}

static int entry_path_cmp(const void *key, const void *elem)
{
    return strcmp(key, ((const st_stepfile *)elem)->f->path);
}

/* Sets v->conflict if a path is also the directory of another: for every
 * entry, each of its ancestors is looked up among the (sorted) entries. */
static void find_conflict(st_stepview *v)
{
    char dir[ST_MANIFEST_MAX_PATH + 1];
    v->conflict[0] = '\0';
    for (size_t i = 0; i < v->nentries; i++) {
        const char *path = v->entries[i].f->path;
        for (const char *slash = strchr(path, '/'); slash; slash = strchr(slash + 1, '/')) {
            size_t len = (size_t)(slash - path);
            if (len >= sizeof dir)
                break;
            memcpy(dir, path, len);
            dir[len] = '\0';
            const st_stepfile *file =
                bsearch(dir, v->entries, v->nentries, sizeof *v->entries, entry_path_cmp);
            if (file) {
                snprintf(v->conflict, sizeof v->conflict,
                         "%.100s is a file (node %.40s) and a directory (%.100s, node %.40s)", dir,
                         v->parts[file->part].node, path, v->parts[v->entries[i].part].node);
                return;
            }
        }
    }
}

/* Fills v->entries with the winning version of every path; 0, or -1 when
 * out of memory (no entries then). */
static int resolve_paths(st_stepview *v)
{
    size_t n = 0;
    free(v->entries);
    v->entries = NULL;
    v->nentries = 0;
    for (size_t i = 0; i < v->nparts; i++)
        n += v->manifests[i].nfiles;
    if (!(v->entries = malloc((n ? n : 1) * sizeof *v->entries)))
        return -1;
    for (size_t i = 0; i < v->nparts; i++)
        for (size_t k = 0; k < v->manifests[i].nfiles; k++)
            v->entries[v->nentries++] =
                (st_stepfile){&v->manifests[i].files[k], &v->manifests[i], i};
    qsort_r(v->entries, v->nentries, sizeof *v->entries, entry_order, v);
    size_t kept = 0;
    for (size_t i = 0; i < v->nentries; i++)
        if (!kept || strcmp(v->entries[kept - 1].f->path, v->entries[i].f->path))
            v->entries[kept++] = v->entries[i]; /* the first of a path wins */
    v->nentries = kept;
    find_conflict(v);
    return 0;
}

st_err st_stepview_check_paths(const st_stepview *v, const char *job)
{
    if (!v->conflict[0])
        return ST_OK;
    return st_seterr(ST_ERR_CORRUPT, "step %" PRIu64 " of job %s: %s", v->step, job, v->conflict);
}

/* ---- the consistency rule ---- */

/* 1 if the step holds path. */
static int has_path(const st_stepview *v, const char *path)
{
    return bsearch(path, v->entries, v->nentries, sizeof *v->entries, entry_path_cmp) != NULL;
}

/* Appends "what r1,r2,..." for the ranks < world not set in seen to why. */
static void describe_missing_ranks(char *why, size_t cap, const char *what, const uint8_t *seen,
                                   uint32_t world)
{
    size_t len = strlen(why);
    int shown = 0;
    len += (size_t)snprintf(why + len, cap - len, "%s%s ", len ? "; " : "", what);
    for (uint32_t r = 0; r < world && len < cap; r++) {
        if (seen[r])
            continue;
        if (shown == 8) {
            snprintf(why + len, cap - len, "...");
            return;
        }
        len += (size_t)snprintf(why + len, cap - len, "%s%" PRIu32, shown ? "," : "", r);
        shown++;
    }
}

void st_stepview_evaluate(st_stepview *v)
{
    uint32_t world = 0, commit_world = 0;
    int coverage = 0, any_commit = 0;
    v->complete = 0;
    v->files = v->bytes = 0;
    v->why[0] = '\0';
    uint8_t *seen = NULL, *committed = NULL;
    if (resolve_paths(v)) {
        snprintf(v->why, sizeof v->why, "out of memory evaluating the step");
        v->consistent = 0;
        goto out;
    }
    for (size_t i = 0; i < v->nparts; i++) {
        const st_part *p = &v->parts[i];
        v->complete |= p->complete;
        coverage |= p->rank_coverage;
        if (p->world_size > world)
            world = p->world_size;
        if (p->created_ns > v->created_ns)
            v->created_ns = p->created_ns;
        for (size_t c = 0; c < p->ncommits; c++) {
            any_commit = 1;
            if (p->commits[c].world_size > commit_world)
                commit_world = p->commits[c].world_size;
        }
    }
    v->files = v->nentries;
    for (size_t i = 0; i < v->nentries; i++)
        v->bytes += v->entries[i].f->size;
    v->world_size = commit_world > world ? commit_world : world;

    /* Writer ranks present among the files (bounded by the world size). */
    uint32_t span = v->world_size ? v->world_size : 1;
    seen = calloc(span, 1);
    committed = calloc(span, 1);
    if (!seen || !committed) {
        snprintf(v->why, sizeof v->why, "out of memory evaluating the step");
        v->consistent = 0;
        goto out;
    }
    v->ranks = 0;
    for (size_t i = 0; i < v->nentries; i++) {
        int32_t r = v->entries[i].f->rank;
        if (r >= 0 && (uint32_t)r < span && !seen[r]) {
            seen[r] = 1;
            v->ranks++;
        }
    }

    int ok = 1;
    if (any_commit) { /* rule 1: explicit per-rank commits decide */
        for (size_t i = 0; i < v->nparts; i++)
            for (size_t c = 0; c < v->parts[i].ncommits; c++)
                if (v->parts[i].commits[c].rank < span)
                    committed[v->parts[i].commits[c].rank] = 1;
        for (uint32_t r = 0; r < commit_world; r++)
            ok &= committed[r];
        if (!ok)
            describe_missing_ranks(v->why, sizeof v->why, "no commit from ranks", committed,
                                   commit_world);
        v->consistent = ok;
        goto out;
    }
    if (!v->complete) { /* rule 2 */
        snprintf(v->why, sizeof v->why, "not complete (no completion marker or rule yet)");
        ok = 0;
    }
    for (size_t i = 0; i < v->nparts; i++) /* rule 3 */
        for (size_t k = 0; k < v->parts[i].nexpected; k++)
            if (!has_path(v, v->parts[i].expected[k])) {
                if (ok || !strstr(v->why, "missing")) {
                    size_t len = strlen(v->why);
                    snprintf(v->why + len, sizeof v->why - len, "%smissing %s", len ? "; " : "",
                             v->parts[i].expected[k]);
                }
                ok = 0;
            }
    if (coverage && world) { /* rule 4 */
        int all = 1;
        for (uint32_t r = 0; r < world; r++)
            all &= seen[r];
        if (!all)
            describe_missing_ranks(v->why, sizeof v->why, "no files from ranks", seen, world);
        ok &= all;
    }
    v->consistent = ok;
out:
    free(seen);
    free(committed);
}

/* ---- publishing ---- */

typedef struct revision_scan {
    size_t prefix_len; /* of "jobs/J/steps/S/": every listed key starts so */
    uint32_t max;
} revision_scan;

static int max_revision_cb(void *arg, const char *key, uint64_t size)
{
    (void)size;
    revision_scan *r = arg;
    uint32_t revision;
    char node[ST_NODE_MAX + 1];
    if (strlen(key) > r->prefix_len &&
        st_key_parse_manifest(key + r->prefix_len, node, &revision) && revision > r->max)
        r->max = revision;
    return 0;
}

/* Raises part->revision past every manifest revision of the step in the
 * store: the per-step sequence of docs/CONSISTENCY.md. */
static st_err next_revision(st_backend *b, const st_manifest *m, st_part *part)
{
    char prefix[ST_KEY_MAX];
    revision_scan r = {0};
    st_err e = st_key_step_prefix(prefix, sizeof prefix, m->job, m->step);
    if (!e) {
        r.prefix_len = strlen(prefix);
        e = st_list(b, prefix, max_revision_cb, &r);
    }
    if (e)
        return e;
    if (r.max == UINT32_MAX)
        return st_seterr(ST_ERR_INVALID, "step %" PRIu64 " of job %s has no revision left", m->step,
                         m->job);
    if (part->revision <= r.max)
        part->revision = r.max + 1;
    return ST_OK;
}

/* Fences a listing holds at most; more than that (compactors run one at a
 * time, a fence lives 2 grace) counts as live without a look. */
#define FENCES_MAX 8

typedef struct fence_scan {
    size_t prefix_len;
    const char *skip; /* the caller's own fence, or NULL */
    size_t n;         /* fences listed, up to FENCES_MAX kept below */
    char keys[FENCES_MAX][ST_KEY_MAX];
    int64_t life_ns[FENCES_MAX]; /* until - t0 of each: a duration, whoever's clock */
} fence_scan;

static int fence_cb(void *arg, const char *key, uint64_t size)
{
    (void)size;
    fence_scan *f = arg;
    int64_t t0, until;
    if ((f->skip && !strcmp(key, f->skip)) ||
        st_gcmark_fence_parse(key + f->prefix_len, &t0, &until))
        return 0; /* ours, or not a fence */
    if (f->n < FENCES_MAX) {
        snprintf(f->keys[f->n], sizeof f->keys[f->n], "%s", key);
        f->life_ns[f->n] = until - t0;
    }
    f->n++;
    return 0;
}

/* A fence is live while its age by the store's clock may still be under
 * its life (docs/GC.md, "Clocks"): the times in its name are the
 * compactor's wall clock, which this host's need not match. */
static st_err fence_is_live(st_backend *b, const char *key, int64_t life_ns, int *live)
{
    int64_t age_at_least;
    st_err e = st_store_age(b, key, &age_at_least, NULL);
    *live = 0;
    if (e == ST_ERR_NOT_FOUND)
        return ST_OK; /* its compaction ended meanwhile */
    if (!e)
        *live = age_at_least < life_ns;
    return e;
}

st_err st_catalog_fence_live(st_backend *b, const char *job, const char *skip, int *live)
{
    char prefix[ST_KEY_MAX];
    fence_scan *f = calloc(1, sizeof *f);
    if (!f)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    f->skip = skip;
    st_err e = st_key_job_dir(prefix, sizeof prefix, job, "gc/compacting");
    if (!e) {
        f->prefix_len = strlen(prefix);
        e = st_list(b, prefix, fence_cb, f);
    }
    const char *first = NULL;
    int n_live = f->n > FENCES_MAX;
    for (size_t i = 0; !e && i < f->n && i < FENCES_MAX && !n_live; i++) {
        int one = 0;
        e = fence_is_live(b, f->keys[i], f->life_ns[i], &one);
        if (one && !n_live++)
            first = f->keys[i];
    }
    if (!e) {
        *live = n_live;
        if (n_live)
            st_seterr(ST_ERR_BUSY, "job %s is being compacted (%s): not publishing until it ends",
                      job, first ? first : "more fences than looked at");
    }
    free(f);
    return e;
}

st_err st_catalog_seal_part(const st_manifest *m, st_part *part, st_bytes *manifest)
{
    st_err e = st_manifest_encode(m, manifest);
    if (e)
        return e;
    part->step = m->step;
    part->created_ns = m->created_ns;
    snprintf(part->job, sizeof part->job, "%s", m->job);
    snprintf(part->node, sizeof part->node, "%s", m->node);
    part->manifest_len = manifest->len;
    part->manifest_digest = st_id_of(manifest->data, manifest->len);
    return ST_OK;
}

/* The first round of a publish: what its calls share. */
typedef struct publish_round {
    st_backend *b;
    const st_manifest *m;
    st_part *part;
    int registered; /* the job registry entry was PUT */
} publish_round;

/* The job registry entry: idempotent, and it must exist before any step of
 * the job can be found (before the part record). */
static st_err round_register(void *arg)
{
    publish_round *r = arg;
    char key[ST_KEY_MAX];
    snprintf(key, sizeof key, ST_KEY_JOBLIST "%s", r->m->job);
    st_err e = st_put(r->b, key, "", 0);
    r->registered = !e;
    return e;
}

/* The fence of a compaction (docs/GC.md, "Compaction"): looked at before
 * the manifest PUT, so a publish that saw no fence lands within one
 * publish of the fence's PUT. */
static st_err round_fence(void *arg)
{
    publish_round *r = arg;
    int fenced = 0;
    st_err e = st_catalog_fence_live(r->b, r->m->job, NULL, &fenced);
    if (!e && fenced)
        e = ST_ERR_BUSY; /* message set by st_catalog_fence_live */
    return e;
}

static st_err round_revision(void *arg)
{
    publish_round *r = arg;
    return next_revision(r->b, r->m, r->part);
}

/* A part the caller handed no lineage takes the one of the node's part
 * record it replaces (docs/ENCRYPTION.md, "Replay"). Only part->lineage is
 * written here, only part->revision by round_revision. */
static st_err round_lineage(void *arg)
{
    publish_round *r = arg;
    st_bytes buf = {0};
    st_part old;
    st_err e = st_catalog_load_part(r->b, r->m->job, r->m->step, r->m->node, &buf, &old);
    if (e == ST_OK) {
        memcpy(r->part->lineage, old.lineage, sizeof r->part->lineage);
        st_part_free(&old);
    } else if (e == ST_ERR_NOT_FOUND || e == ST_ERR_CORRUPT || e == ST_ERR_UNSUPPORTED) {
        /* None, or unreadable (a replayed one among them): publish starts a
         * new lineage. */
        e = ST_OK;
        st_clearerr();
    }
    st_bytes_free(&buf);
    return e;
}

/* Runs the first round (docs/PROTOCOL.md, "Write order"): the publish's
 * own calls, the fence's unless unfenced, and the caller's checks. */
static st_err publish_first_round(publish_round *r, int fenced, const st_publish_check *checks,
                                  size_t nchecks, uint64_t *puts)
{
    if (nchecks > ST_PUBLISH_MAX_CHECKS)
        return st_seterr(ST_ERR_INVALID, "publish: %zu checks, at most %d", nchecks,
                         ST_PUBLISH_MAX_CHECKS);
    st_parallel_call calls[4 + ST_PUBLISH_MAX_CHECKS];
    size_t n = 0;
    calls[n++] = (st_parallel_call){.fn = round_register, .arg = r};
    if (fenced)
        calls[n++] = (st_parallel_call){.fn = round_fence, .arg = r};
    calls[n++] = (st_parallel_call){.fn = round_revision, .arg = r};
    if (st_part_lineage_is_zero(r->part))
        calls[n++] = (st_parallel_call){.fn = round_lineage, .arg = r};
    for (size_t i = 0; i < nchecks; i++)
        calls[n++] = (st_parallel_call){.fn = checks[i].fn, .arg = checks[i].arg};
    st_err e = st_parallel_run(calls, n);
    if (r->registered)
        (*puts)++;
    return e;
}

static st_err publish(st_backend *b, const st_manifest *m, st_part *part, int fenced,
                      const st_publish_check *checks, size_t nchecks, uint64_t *puts)
{
    st_bytes buf = {0};
    char key[ST_KEY_MAX];
    publish_round round = {.b = b, .m = m, .part = part};
    st_err e = publish_first_round(&round, fenced, checks, nchecks, puts);
    /* A first publish of the part, or one whose record had none: a new
     * lineage (no request: the window of the round's checks is as before). */
    if (!e && st_part_lineage_is_zero(part))
        e = st_part_new_lineage(part);
    if (e)
        goto out;
    ST_CRASHPOINT("manifest-put-before");
    /* A create where the store has one: the revision is past every one
     * listed, so its key is new unless another daemon with this node name
     * picked it too, whose manifest is then not replaced (docs/PROTOCOL.md,
     * "Immutable objects are created, not replaced"). */
    if ((e = st_catalog_seal_part(m, part, &buf)) ||
        (e = st_key_manifest(key, sizeof key, m->job, m->step, m->node, part->revision)) ||
        (e = st_put_once(b, key, buf.data, buf.len, ST_ONCE_COMPARE, NULL)))
        goto out;
    (*puts)++;
    ST_CRASHPOINT("manifest-put-after");
    st_bytes_clear(&buf);
    ST_CRASHPOINT("part-put-before");
    if ((e = st_part_encode(part, &buf)) ||
        (e = st_key_part(key, sizeof key, m->job, m->step, m->node)) ||
        (e = st_put(b, key, buf.data, buf.len)))
        goto out;
    (*puts)++;
    ST_CRASHPOINT("part-put-after");
out:
    st_bytes_free(&buf);
    return e;
}

st_err st_catalog_publish(st_backend *b, const st_manifest *m, st_part *part,
                          const st_publish_check *checks, size_t nchecks, uint64_t *puts)
{
    return publish(b, m, part, 1, checks, nchecks, puts);
}

st_err st_catalog_publish_unfenced(st_backend *b, const st_manifest *m, st_part *part,
                                   const st_publish_check *checks, size_t nchecks, uint64_t *puts)
{
    return publish(b, m, part, 0, checks, nchecks, puts);
}

/* ---- the dedup index learns what other writers stored ---- */

static st_err index_manifest(st_state *state, const char *job, const st_manifest *m)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        for (size_t k = 0; k < f->nchunks; k++) {
            const st_chunk_ref *r = &f->chunks[k];
            if (st_chunk_is_hole(r)) /* nothing stored to dedup against */
                continue;
            /* A slice records its whole bundle, the chunk its id names
             * (bundle_len, not the file's raw_len): a writer that finds
             * the id takes the whole chunk, as it does any other. */
            st_chunk_loc loc = {m->packs[r->pack], r->offset, r->stored_len,
                                st_chunk_stored_raw_len(r)};
            /* The last merged place wins (docs/PROTOCOL.md, "The local
             * dedup index"): the newest step's, or compaction's copy. */
            st_err e = st_state_chunk_move(state, job, &r->id, &loc);
            if (e)
                return e;
        }
    }
    return ST_OK;
}

static void warn_skip(void (*warn)(void *, const char *), void *arg, uint64_t step)
{
    char msg[700];
    if (!warn)
        return;
    snprintf(msg, sizeof msg, "ignoring a part of step %" PRIu64 " for dedup: %s", step,
             st_errmsg());
    warn(arg, msg);
}

/* The mark of a step whose listing was merged whole: its largest manifest
 * revision and its number of part records, which every publish of the
 * step changes (docs/PROTOCOL.md, "The local dedup index"). */
static void step_synced_key(char *out, size_t cap, const char *job, const st_step_keys *k)
{
    snprintf(out, cap, "synced:%s/%020" PRIu64 "/r%" PRIu32 "/n%zu", job, k->step, k->max_revision,
             k->nnodes);
}

/* Merges node's part of step k into the index unless that version of it
 * was merged before. *revision: the revision its part record names (0 if
 * it could not be read). ST_OK also when the part or its manifest cannot be
 * read (warn hears of it, *merged stays 0): the index is a cache. */
static st_err sync_part(st_backend *b, st_state *state, const char *job, const st_step_keys *k,
                        const char *node, st_bytes *buf, uint32_t *revision, int *merged,
                        void (*warn)(void *arg, const char *msg), void *warn_arg)
{
    /* "seen" is per part version: a part stored again (a new revision) has
     * a new record and is merged again. */
    char key[ST_KEY_MAX + ST_ID_HEX_LEN + 2], hex[ST_ID_HEX_LEN + 1];
    st_part p;
    st_manifest m;
    *revision = 0;
    *merged = 0;
    if (st_catalog_load_part(b, job, k->step, node, buf, &p)) {
        warn_skip(warn, warn_arg, k->step);
        return ST_OK;
    }
    *revision = p.revision;
    st_id version = st_id_of(buf->data, buf->len);
    st_err e = st_key_part(key, ST_KEY_MAX, job, k->step, node);
    if (e) {
        st_part_free(&p);
        return e;
    }
    strcat(key, "@");
    strcat(key, st_id_hex(&version, hex));
    if (st_state_manifest_seen(state, key)) {
        *merged = 1;
        st_part_free(&p);
        return ST_OK;
    }
    if (st_catalog_load_manifest(b, &p, buf, &m)) {
        warn_skip(warn, warn_arg, k->step);
        st_part_free(&p);
        return ST_OK;
    }
    e = st_state_begin(state);
    if (!e)
        e = index_manifest(state, job, &m);
    if (!e)
        e = st_state_manifest_mark(state, key);
    if (e)
        st_state_rollback(state);
    else
        e = st_state_commit(state);
    *merged = !e;
    st_manifest_free(&m);
    st_part_free(&p);
    return e;
}

st_err st_catalog_sync_index(st_backend *b, st_state *state, const char *job,
                             void (*warn)(void *arg, const char *msg), void *warn_arg)
{
    st_step_keys *steps;
    size_t nsteps;
    st_bytes buf = {0};
    st_err e = st_catalog_list_steps(b, job, &steps, &nsteps);
    for (size_t i = 0; !e && i < nsteps; i++) {
        char synced[ST_KEY_MAX + 64];
        step_synced_key(synced, sizeof synced, job, &steps[i]);
        if (st_state_manifest_seen(state, synced))
            continue; /* unchanged since it was merged whole */
        uint32_t newest = 0;
        int whole = 1;
        for (size_t k = 0; !e && k < steps[i].nnodes; k++) {
            uint32_t revision;
            int merged;
            e = sync_part(b, state, job, &steps[i], steps[i].nodes[k], &buf, &revision, &merged,
                          warn, warn_arg);
            whole &= merged;
            if (revision > newest)
                newest = revision;
        }
        /* Marked only when no manifest is newer than every part record (a
         * publish under way, or one that crashed before its part record):
         * its part record, once written, would not change the pair. */
        if (!e && whole && newest == steps[i].max_revision)
            e = st_state_manifest_mark(state, synced);
    }
    st_step_keys_free(steps, nsteps);
    st_bytes_free(&buf);
    return e;
}

st_err st_catalog_newest_consistent(st_backend *b, const char *job, uint64_t lowest, uint64_t below,
                                    void (*skip)(void *arg, uint64_t step, const char *msg),
                                    void *arg, st_stepview *v)
{
    st_step_keys *keys;
    size_t nkeys;
    st_bytes buf = {0};
    st_err e = st_catalog_list_steps(b, job, &keys, &nkeys);
    if (e)
        return e;
    e = ST_ERR_NOT_FOUND;
    for (size_t i = nkeys; i-- > 0 && keys[i].step >= lowest;) {
        if (keys[i].step >= below)
            continue;
        st_err le = st_catalog_load_view(b, job, &keys[i], &buf, v);
        if (le && !skip) {
            e = le;
            break;
        }
        if (le) {
            skip(arg, keys[i].step, st_errmsg());
            continue;
        }
        if (v->consistent) {
            e = ST_OK;
            break;
        }
        st_stepview_free(v);
    }
    st_step_keys_free(keys, nkeys);
    st_bytes_free(&buf);
    return e;
}
