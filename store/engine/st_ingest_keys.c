/*
 * st_ingest_keys — what an ingest with a keyring (docs/ENCRYPTION.md) adds:
 * its pack writers seal (CKp2), and its manifest (version 4) gives the key
 * id and salt of every pack it names. A new pack's seal comes from its
 * writer, an old pack's from the manifest whose files were carried over or,
 * for a chunk the dedup index found, from the pack's header (one ranged GET
 * of ST_PACK_HEADER_LEN bytes per old pack and ingest). A plain pack where
 * a sealed one belongs is ST_ERR_KEY: ckptfs does not mix. Ingest thread.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/st_ingest_impl.h"
#include "format/st_part.h"
#include "util/st_array.h"

void st_ingest_set_keyring(st_ingest *g, const st_keyring *kr)
{
    g->kr = kr;
}

st_err ingest_note_seal(st_ingest *g, const st_id *pack, const st_pack_seal *seal)
{
    uint32_t at;
    if (st_idmap_get(&g->seal_index, pack, &at))
        return ST_OK;
    st_err e = st_array_grow((void **)&g->known_seals, &g->known_cap, g->nknown + 1,
                             sizeof *g->known_seals);
    if (e)
        return e;
    g->known_seals[g->nknown] = *seal;
    e = st_idmap_put(&g->seal_index, pack, (uint32_t)g->nknown);
    if (!e)
        g->nknown++;
    return e;
}

/* The seal of an old pack the index found, from its header. */
static st_err read_seal(st_ingest *g, const st_id *pack, st_pack_seal *seal)
{
    char key[ST_KEY_MAX];
    st_bytes head = {0};
    st_err e = st_key_pack(key, sizeof key, g->job, pack);
    if (!e)
        e = st_get(g->backend, key, 0, ST_PACK_HEADER_LEN, &head);
    if (!e && (head.len < ST_PACK_HEADER_LEN || memcmp(head.data, "CKp2", 4) != 0))
        e = st_seterr(ST_ERR_KEY,
                      "%s is not encrypted; ckptfs does not mix encrypted and plain packs in one "
                      "step",
                      key);
    if (!e)
        e = st_pack_header_decode(key, head.data, seal);
    st_bytes_free(&head);
    return e;
}

st_err ingest_pack_seals(st_ingest *g, st_pack_seal **seals)
{
    *seals = NULL;
    if (!g->kr || !g->npacks)
        return ST_OK;
    st_pack_seal *out = malloc(g->npacks * sizeof *out);
    if (!out)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < g->npacks; i++) {
        uint32_t at;
        if (st_idmap_get(&g->seal_index, &g->packs[i], &at))
            out[i] = g->known_seals[at];
        else if (!(e = read_seal(g, &g->packs[i], &out[i])))
            e = ingest_note_seal(g, &g->packs[i], &out[i]);
    }
    if (e) {
        free(out);
        return e;
    }
    *seals = out;
    return ST_OK;
}

void ingest_free_seals(st_ingest *g)
{
    st_idmap_free(&g->seal_index);
    free(g->known_seals);
    g->known_seals = NULL;
    g->nknown = g->known_cap = 0;
}
