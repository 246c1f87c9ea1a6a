/*
 * st_idmap — linear-probing map st_id -> uint32. See st_idmap.h.
 */
#include "util/st_idmap.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(const st_id *key, size_t cap)
{
    uint64_t h;
    memcpy(&h, key->b, sizeof h);
    return (size_t)h & (cap - 1);
}

int st_idmap_get(const st_idmap *m, const st_id *key, uint32_t *value)
{
    if (!m->cap)
        return 0;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (!m->used[i])
            return 0;
        if (st_id_cmp(&m->keys[i], key) == 0) {
            *value = m->values[i];
            return 1;
        }
    }
}

static void insert_slot(st_idmap *m, const st_id *key, uint32_t value)
{
    size_t i = slot_of(key, m->cap);
    while (m->used[i] && st_id_cmp(&m->keys[i], key) != 0)
        i = (i + 1) & (m->cap - 1);
    if (!m->used[i])
        m->count++;
    m->used[i] = 1;
    m->keys[i] = *key;
    m->values[i] = value;
}

static st_err grow(st_idmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    st_idmap bigger = {0};
    bigger.keys = malloc(cap * sizeof *bigger.keys);
    bigger.values = malloc(cap * sizeof *bigger.values);
    bigger.used = calloc(cap, 1);
    if (!bigger.keys || !bigger.values || !bigger.used) {
        st_idmap_free(&bigger);
        return st_seterr(ST_ERR_NOMEM, "out of memory growing an id map to %zu slots", cap);
    }
    bigger.cap = cap;
    for (size_t i = 0; i < m->cap; i++)
        if (m->used[i])
            insert_slot(&bigger, &m->keys[i], m->values[i]);
    st_idmap_free(m);
    *m = bigger;
    return ST_OK;
}

st_err st_idmap_put(st_idmap *m, const st_id *key, uint32_t value)
{
    if ((m->count + 1) * 2 > m->cap) {
        st_err e = grow(m);
        if (e)
            return e;
    }
    insert_slot(m, key, value);
    return ST_OK;
}

void st_idmap_free(st_idmap *m)
{
    free(m->keys);
    free(m->values);
    free(m->used);
    memset(m, 0, sizeof *m);
}
