/*
 * st_stepio — commit records and manifests in and out of the store.
 * See st_stepio.h and docs/PROTOCOL.md.
 */
#include "st_stepio.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct step_list {
    uint64_t *steps;
    size_t n, cap;
    const char *job;
    int oom;
} step_list;

static int collect_committed(void *arg, const char *key, uint64_t size)
{
    (void)size;
    step_list *l = arg;
    uint64_t step;
    const char *rest;
    if (st_key_parse_step(key, l->job, &step, &rest) != ST_OK || strcmp(rest, "commit") != 0)
        return 0;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        uint64_t *p = realloc(l->steps, cap * sizeof *p);
        if (!p)
            return l->oom = 1;
        l->steps = p;
        l->cap = cap;
    }
    l->steps[l->n++] = step;
    return 0;
}

st_err st_stepio_list_committed(st_backend *b, const char *job, uint64_t **steps, size_t *n)
{
    char prefix[ST_KEY_MAX];
    step_list l = {.job = job};
    *steps = NULL;
    *n = 0;
    st_err e = st_key_steps_prefix(prefix, sizeof prefix, job);
    if (!e)
        e = st_list(b, prefix, collect_committed, &l);
    if (!e && l.oom)
        e = st_seterr(ST_ERR_NOMEM, "out of memory listing steps");
    if (e) {
        free(l.steps);
        return e;
    }
    *steps = l.steps;
    *n = l.n;
    return ST_OK;
}

st_err st_stepio_load_commit(st_backend *b, const char *job, uint64_t step, st_bytes *buf,
                             st_commit *c)
{
    char key[ST_KEY_MAX];
    memset(c, 0, sizeof *c);
    st_err e = st_key_commit(key, sizeof key, job, step);
    if (!e)
        e = st_get(b, key, 0, ST_GET_TO_END, buf);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(e, "step %" PRIu64 " of job %s is not committed in the store", step,
                         job);
    if (e)
        return e;
    e = st_commit_decode(buf->data, buf->len, c);
    if (e)
        return st_seterr(e, "%s: %s", key, st_errmsg());
    if (c->step != step || strcmp(c->job, job) != 0) {
        st_commit_free(c);
        return st_seterr(ST_ERR_CORRUPT, "commit record %s names another step", key);
    }
    return ST_OK;
}

st_err st_stepio_load_manifest(st_backend *b, const char *job, uint64_t step,
                               const st_commit_node *node, st_bytes *buf, st_manifest *m)
{
    char key[ST_KEY_MAX];
    memset(m, 0, sizeof *m);
    st_err e = st_key_manifest(key, sizeof key, job, step, node->name, node->revision);
    if (!e)
        e = st_get(b, key, 0, ST_GET_TO_END, buf);
    if (e == ST_ERR_NOT_FOUND)
        return st_seterr(ST_ERR_CORRUPT, "%s is named by the commit record but missing", key);
    if (e)
        return e;
    st_id digest = st_id_of(buf->data, buf->len);
    if (buf->len != node->manifest_len || st_id_cmp(&digest, &node->manifest_digest) != 0)
        return st_seterr(ST_ERR_CORRUPT, "%s does not match its commit record", key);
    e = st_manifest_decode(buf->data, buf->len, m);
    if (e)
        return st_seterr(e, "%s: %s", key, st_errmsg());
    if (m->step != step || strcmp(m->job, job) != 0) {
        st_manifest_free(m);
        return st_seterr(ST_ERR_CORRUPT, "%s describes another step", key);
    }
    return ST_OK;
}

st_err st_stepio_publish(st_backend *b, const st_manifest *m, uint32_t revision,
                         const st_commit *existing, uint64_t *puts)
{
    st_bytes buf = {0};
    char key[ST_KEY_MAX];
    st_commit c = {.step = m->step, .created_ns = m->created_ns};
    size_t cap = 1 + (existing ? existing->nnodes : 0);
    st_commit_node *nodes = calloc(cap, sizeof *nodes);
    if (!nodes)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; existing && i < existing->nnodes; i++)
        if (strcmp(existing->nodes[i].name, m->node) != 0)
            nodes[c.nnodes++] = existing->nodes[i];
    st_commit_node *node = &nodes[c.nnodes++];
    node->revision = revision;
    /* The job registry entry first: idempotent, and it must exist before any
     * step of the job can be found. */
    snprintf(key, sizeof key, ST_KEY_JOBLIST "%s", m->job);
    st_err e = st_put(b, key, "", 0);
    if (e)
        goto out;
    (*puts)++;
    e = st_manifest_encode(m, &buf);
    if (!e)
        e = st_key_manifest(key, sizeof key, m->job, m->step, m->node, revision);
    if (!e)
        e = st_put(b, key, buf.data, buf.len);
    if (e)
        goto out;
    (*puts)++;
    snprintf(node->name, sizeof node->name, "%s", m->node);
    snprintf(c.job, sizeof c.job, "%s", m->job);
    node->manifest_len = buf.len;
    node->manifest_digest = st_id_of(buf.data, buf.len);
    c.nodes = nodes;
    st_bytes_clear(&buf);
    e = st_commit_encode(&c, &buf);
    if (!e)
        e = st_key_commit(key, sizeof key, m->job, m->step);
    if (!e)
        e = st_put(b, key, buf.data, buf.len);
    if (!e)
        (*puts)++;
out:
    free(nodes);
    st_bytes_free(&buf);
    return e;
}

static st_err index_manifest(st_state *state, const char *job, const st_manifest *m)
{
    for (size_t i = 0; i < m->nfiles; i++) {
        const st_file_entry *f = &m->files[i];
        for (size_t k = 0; k < f->nchunks; k++) {
            const st_chunk_ref *r = &f->chunks[k];
            st_chunk_loc loc = {m->packs[r->pack], r->offset, r->stored_len, r->raw_len};
            st_err e = st_state_chunk_add(state, job, &r->id, &loc);
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
    snprintf(msg, sizeof msg, "ignoring step %" PRIu64 " for dedup: %s", step, st_errmsg());
    warn(arg, msg);
}

st_err st_stepio_sync_index(st_backend *b, st_state *state, const char *job,
                            void (*warn)(void *arg, const char *msg), void *warn_arg)
{
    uint64_t *steps;
    size_t nsteps;
    st_bytes buf = {0};
    st_err e = st_stepio_list_committed(b, job, &steps, &nsteps);
    for (size_t i = 0; !e && i < nsteps; i++) {
        /* "seen" is per commit version: a step stored again (a new revision)
         * has a new commit record and is merged again. */
        char key[ST_KEY_MAX + ST_ID_HEX_LEN + 2], hex[ST_ID_HEX_LEN + 1];
        st_commit c;
        if (st_stepio_load_commit(b, job, steps[i], &buf, &c)) {
            warn_skip(warn, warn_arg, steps[i]);
            continue;
        }
        st_id version = st_id_of(buf.data, buf.len);
        if ((e = st_key_commit(key, ST_KEY_MAX, job, steps[i]))) {
            st_commit_free(&c);
            break;
        }
        strcat(key, "@");
        strcat(key, st_id_hex(&version, hex));
        if (st_state_manifest_seen(state, key)) {
            st_commit_free(&c);
            continue;
        }
        e = st_state_begin(state);
        for (size_t n = 0; !e && n < c.nnodes; n++) {
            st_manifest m;
            if (st_stepio_load_manifest(b, job, steps[i], &c.nodes[n], &buf, &m)) {
                warn_skip(warn, warn_arg, steps[i]);
                continue;
            }
            e = index_manifest(state, job, &m);
            st_manifest_free(&m);
        }
        if (!e)
            e = st_state_manifest_mark(state, key);
        if (e)
            st_state_rollback(state);
        else
            e = st_state_commit(state);
        st_commit_free(&c);
    }
    free(steps);
    st_bytes_free(&buf);
    return e;
}
