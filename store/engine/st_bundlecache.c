/*
 * st_bundlecache — decoded bundles shared by the readers of their slices.
 * See st_bundlecache.h.
 *
 * A slot's life (guarded by st_bundlecache.lock):
 *
 *   state     | id     | data                  | who may touch data
 *   ----------+--------+-----------------------+------------------------------
 *   EMPTY     | none   | a spare buffer or NULL | whoever claims the slot
 *   LOADING   | bundle | being filled           | the one thread that claimed it
 *   READY     | bundle | len decoded bytes      | anyone, under the lock
 *
 * EMPTY -> LOADING (a miss claims the least recently used slot that is not
 * LOADING) -> READY (fetched and verified) or EMPTY (failed); READY ->
 * LOADING when it is the least recently used slot of a later miss. Readers
 * of a LOADING bundle wait on `loaded`. A miss that finds every slot
 * LOADING (more fetches in flight than slots) fetches into a buffer of its
 * own and keeps nothing.
 */
#include "engine/st_bundlecache.h"
#include "engine/st_envelope.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_codec.h"
#include "format/st_part.h"

typedef enum slot_state { SLOT_EMPTY = 0, SLOT_LOADING, SLOT_READY } slot_state;

typedef struct bundle_slot {
    st_id id;
    slot_state state;
    uint8_t *data;
    size_t len, cap;
    uint64_t last_use; /* cache tick of its last hit or fill: LRU */
} bundle_slot;

struct st_bundlecache {
    pthread_mutex_t lock;
    pthread_cond_t loaded; /* a slot left LOADING */
    bundle_slot *slots;    /* guarded by lock (see the table above) */
    size_t nslots;
    uint64_t tick;              /* guarded by lock */
    st_bundlecache_stats stats; /* guarded by lock */
};

st_err st_bundlecache_new(size_t slots, st_bundlecache **out)
{
    *out = NULL;
    st_bundlecache *c = calloc(1, sizeof *c);
    if (c)
        c->slots = calloc(slots ? slots : 1, sizeof *c->slots);
    if (!c || !c->slots) {
        free(c);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    c->nslots = slots ? slots : 1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->loaded, NULL);
    *out = c;
    return ST_OK;
}

void st_bundlecache_free(st_bundlecache *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nslots; i++)
        free(c->slots[i].data);
    free(c->slots);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->loaded);
    free(c);
}

/* Under lock: the slot holding (or loading) id, or NULL. */
static bundle_slot *slot_of(st_bundlecache *c, const st_id *id)
{
    for (size_t i = 0; i < c->nslots; i++)
        if (c->slots[i].state != SLOT_EMPTY && st_id_cmp(&c->slots[i].id, id) == 0)
            return &c->slots[i];
    return NULL;
}

/* Under lock: the slot a miss reuses (an empty one, else the least recently
 * used ready one), or NULL if every slot is loading. */
static bundle_slot *slot_to_reuse(st_bundlecache *c)
{
    bundle_slot *best = NULL;
    for (size_t i = 0; i < c->nslots; i++) {
        bundle_slot *s = &c->slots[i];
        if (s->state == SLOT_EMPTY)
            return s;
        if (s->state == SLOT_READY && (!best || s->last_use < best->last_use))
            best = s;
    }
    return best;
}

/* Under lock: copies ref's bytes out of a bundle of len decoded bytes. */
static st_err copy_slice(const st_bundle_source *src, const st_chunk_ref *ref, const uint8_t *data,
                         size_t len, uint8_t *dst)
{
    if (len != ref->bundle_len)
        return st_seterr(ST_ERR_CORRUPT,
                         "restoring %s: its bundle decodes to %zu bytes, the manifest says %u",
                         src->path, len, ref->bundle_len);
    if (ref->skip > len || ref->raw_len > len - ref->skip)
        return st_seterr(ST_ERR_CORRUPT, "restoring %s: its slice lies outside its bundle",
                         src->path);
    memcpy(dst, data + ref->skip, ref->raw_len);
    return ST_OK;
}

/*
 * Fetches ref's whole bundle chunk and decodes it into *data (grown to at
 * least bundle_len bytes, capacity *cap), its decoded length in *len. No
 * lock held: *data belongs to the caller (a LOADING slot's, or its own).
 */
static st_err fetch_bundle(const st_bundle_source *src, const st_chunk_ref *ref, uint8_t **data,
                           size_t *cap, size_t *len)
{
    char key[ST_KEY_MAX];
    uint64_t received = 0;
    uint8_t *enc = NULL, *scratch = NULL;
    st_err e = st_key_pack(key, sizeof key, src->job, src->pack);
    if (e)
        return e;
    const size_t want = ref->bundle_len ? ref->bundle_len : 1;
    if (*cap < want) {
        uint8_t *p = realloc(*data, want);
        if (!p)
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        *data = p;
        *cap = want;
    }
    enc = malloc(ref->stored_len ? ref->stored_len : 1);
    scratch = malloc(st_codec_scratch_bound(ref->bundle_len));
    if (!enc || !scratch) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto out;
    }
    e = st_get_into(src->backend, key, ref->offset, ref->stored_len, enc, &received);
    *src->fetched += received;
    if (e == ST_ERR_NOT_FOUND) { /* a part record names it: its loss is damage */
        e = st_seterr(ST_ERR_CORRUPT, "restoring %s: pack %s is missing", src->path, key);
        goto out;
    }
    if (e) {
        e = st_seterr(e, "restoring %s: %s", src->path, st_errmsg());
        goto out;
    }
    (*src->gets)++;
    if (received != ref->stored_len) {
        e = st_seterr(ST_ERR_CORRUPT, "restoring %s: pack %s is shorter than the manifest says",
                      src->path, key);
        goto out;
    }
    size_t enc_len = ref->stored_len;
    if (src->seal) {      /* opened in place: the chunk encoding, its tag less */
        st_pack_opener o; /* a bundle is one record: no key to keep */
        memset(&o, 0, sizeof o);
        e = st_envelope_open_chunk(&o, src->kr, src->job, src->pack, src->seal, ref->offset, enc,
                                   enc_len, enc);
        st_pack_opener_wipe(&o);
        if (e) {
            e = st_seterr(e, "restoring %s: %s", src->path, st_errmsg());
            goto out;
        }
        enc_len -= ST_CRYPT_TAG_LEN;
    }
    /* Decoded into exactly bundle_len bytes of room: a chunk that claims
     * more is refused by the codec, one that decodes shorter by the length
     * check of copy_slice(). */
    e = st_codec_decode(enc, enc_len, &ref->id, *data, ref->bundle_len, len, scratch);
    if (e)
        e = st_seterr(e, "restoring %s: its bundle: %s", src->path, st_errmsg());
out:
    free(enc);
    free(scratch);
    return e;
}

st_err st_bundlecache_read(st_bundlecache *c, const st_bundle_source *src, const st_chunk_ref *ref,
                           uint8_t *dst)
{
    assert(st_chunk_is_slice(ref));
    pthread_mutex_lock(&c->lock);
    bundle_slot *s;
    while ((s = slot_of(c, &ref->id)) && s->state == SLOT_LOADING)
        pthread_cond_wait(&c->loaded, &c->lock);
    if (s) { /* READY */
        s->last_use = ++c->tick;
        c->stats.hits++;
        st_err e = copy_slice(src, ref, s->data, s->len, dst);
        pthread_mutex_unlock(&c->lock);
        return e;
    }
    s = slot_to_reuse(c);
    if (s) {
        s->id = ref->id;
        s->state = SLOT_LOADING;
    }
    c->stats.fetches++;
    pthread_mutex_unlock(&c->lock);

    uint8_t *own = NULL;
    size_t own_cap = 0, len = 0;
    st_err e = s ? fetch_bundle(src, ref, &s->data, &s->cap, &len)
                 : fetch_bundle(src, ref, &own, &own_cap, &len);
    pthread_mutex_lock(&c->lock);
    if (!e)
        e = copy_slice(src, ref, s ? s->data : own, len, dst);
    if (s) {
        s->state = e ? SLOT_EMPTY : SLOT_READY;
        s->len = e ? 0 : len;
        s->last_use = ++c->tick;
        pthread_cond_broadcast(&c->loaded);
    }
    pthread_mutex_unlock(&c->lock);
    free(own);
    return e;
}

st_bundlecache_stats st_bundlecache_stats_of(st_bundlecache *c)
{
    pthread_mutex_lock(&c->lock);
    st_bundlecache_stats s = c->stats;
    pthread_mutex_unlock(&c->lock);
    return s;
}
