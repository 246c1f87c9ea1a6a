/*
 * st_envelope — sealing and opening the objects read whole, and the store
 * marker. See st_envelope.h and docs/ENCRYPTION.md.
 *
 * Which objects: the kind follows from the key alone (st_part.h's names):
 * jobs/<job>/steps/<step20>/nodes/<node>.r<rev>.manifest a manifest,
 * .../nodes/<node>.commit a part record, .../replicas/... a replica record;
 * everything else passes through as it is. A sealed object's size, as stat
 * and list give it, is its plaintext's (the envelope's 48 bytes less), so
 * readers that compare sizes see what they wrote.
 */
#include "engine/st_envelope.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/st_catalog.h"
#include "format/st_part.h"
#include "util/st_crypt.h"

typedef struct envelope_ctx {
    st_backend_wrap head; /* first: the ops it passes through are st_wrap_* */
    st_backend_ops ops;
    int owns_inner; /* close closes inner too */
    const st_keyring *kr;
    pthread_mutex_t marker_lock;
    int marker_written; /* guarded by marker_lock */
} envelope_ctx;
_Static_assert(offsetof(envelope_ctx, head) == 0, "st_wrap_* read the head at ctx");

/* The envelope kind of the object at key, or 0 for one that passes through
 * (*pack: 1 for a pack, which is sealed by its writer). */
static int kind_of_key(const char *key, int *pack)
{
    *pack = 0;
    if (strncmp(key, "jobs/", 5) != 0)
        return 0;
    const char *rest = strchr(key + 5, '/');
    if (!rest)
        return 0;
    if (!strncmp(rest, "/packs/", 7)) {
        *pack = 1;
        return 0;
    }
    if (strncmp(rest, "/steps/", 7) != 0)
        return 0;
    rest = strchr(rest + 7, '/');
    if (!rest)
        return 0;
    size_t len = strlen(rest);
    if (!strncmp(rest, "/replicas/", 10))
        return ST_CRYPT_REPLICA;
    if (strncmp(rest, "/nodes/", 7) != 0)
        return 0;
    if (len > 9 && !strcmp(rest + len - 9, ".manifest"))
        return ST_CRYPT_MANIFEST;
    if (len > 7 && !strcmp(rest + len - 7, ".commit"))
        return ST_CRYPT_PART;
    return 0;
}

/* PUTs the marker once, before the first sealed object. */
static st_err ensure_marker(envelope_ctx *x)
{
    st_err e = ST_OK;
    pthread_mutex_lock(&x->marker_lock);
    if (!x->marker_written) {
        e = x->head.inner->ops->put(x->head.inner->ctx, ST_ENVELOPE_MARKER_KEY,
                                    ST_ENVELOPE_MARKER_BODY, sizeof ST_ENVELOPE_MARKER_BODY - 1);
        x->marker_written = !e;
    }
    pthread_mutex_unlock(&x->marker_lock);
    return e;
}

/* put (create 0) and put_new (create 1): the object as the store keeps it
 * (sealed, for a sealed kind), handed to the inner's put, which replaces,
 * or put_new, which creates: a create stays a create through the
 * envelope, as the node lease's first claim and st_put_once rely on
 * (docs/NODES.md). The marker goes first, by a plain put, before any
 * sealed object or pack, so a store never holds encrypted objects without
 * saying it is encrypted. */
static st_err env_store(envelope_ctx *x, int create, const char *key, const void *data, size_t len)
{
    st_err (*send)(void *ctx, const char *key, const void *data, size_t len) =
        create ? x->head.inner->ops->put_new : x->head.inner->ops->put;
    int pack;
    int kind = kind_of_key(key, &pack);
    st_err e = kind || pack ? ensure_marker(x) : ST_OK;
    if (e || !kind)
        return e ? e : send(x->head.inner->ctx, key, data, len);
    size_t cap = st_crypt_object_bound(len), sealed_len = 0;
    uint8_t *sealed = malloc(cap);
    if (!sealed)
        return st_seterr(ST_ERR_NOMEM, "out of memory sealing %s", key);
    e = st_crypt_seal_object(x->kr, kind, key, data, len, sealed, cap, &sealed_len);
    if (!e)
        e = send(x->head.inner->ctx, key, sealed, sealed_len);
    free(sealed);
    return e;
}

static st_err env_put(void *ctx, const char *key, const void *data, size_t len)
{
    return env_store(ctx, 0, key, data, len);
}

/* Only in the table when the inner has put_new (st_backend_ops_masked). */
static st_err env_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    return env_store(ctx, 1, key, data, len);
}

/* GETs the sealed object at key whole and opens it into out, then keeps
 * [off, off + len) of the plaintext as a ranged GET would. */
static st_err get_opened(envelope_ctx *x, int kind, const char *key, uint64_t off, uint64_t len,
                         st_bytes *out)
{
    st_bytes sealed = {0};
    st_err e = x->head.inner->ops->get(x->head.inner->ctx, key, 0, ST_GET_TO_END, &sealed);
    size_t plain_len = 0;
    if (!e)
        e = st_bytes_reserve(out, sealed.len);
    if (!e) {
        out->len = 0;
        e = st_crypt_open_object(x->kr, kind, key, sealed.data, sealed.len, out->data, out->cap,
                                 &plain_len);
    }
    st_bytes_free(&sealed);
    if (e)
        return e;
    out->len = plain_len;
    return st_get_keep_range(out, key, off, len);
}

static st_err env_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    envelope_ctx *x = ctx;
    int pack;
    int kind = kind_of_key(key, &pack);
    if (!kind)
        return x->head.inner->ops->get(x->head.inner->ctx, key, off, len, out);
    return get_opened(x, kind, key, off, len, out);
}

static st_err env_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                             const st_get_sink *sink)
{
    envelope_ctx *x = ctx;
    int pack;
    int kind = kind_of_key(key, &pack);
    if (!kind)
        return st_get_stream(x->head.inner, key, off, len, sink);
    st_bytes plain = {0};
    st_err e = get_opened(x, kind, key, off, len, &plain);
    if (!e && plain.len)
        e = sink->on_bytes(sink->arg, 0, plain.data, plain.len);
    st_bytes_free(&plain);
    return e;
}

/* The size a reader sees of a sealed object stored in size bytes. */
static uint64_t plain_size(int kind, uint64_t size)
{
    return kind && size >= ST_CRYPT_OVERHEAD ? size - ST_CRYPT_OVERHEAD : size;
}

static st_err env_stat(void *ctx, const char *key, uint64_t *size)
{
    envelope_ctx *x = ctx;
    int pack;
    st_err e = x->head.inner->ops->stat(x->head.inner->ctx, key, size);
    if (!e)
        *size = plain_size(kind_of_key(key, &pack), *size);
    return e;
}

typedef struct list_arg {
    st_list_cb cb;
    void *arg;
} list_arg;

static int list_plain_sizes(void *arg, const char *key, uint64_t size)
{
    list_arg *l = arg;
    int pack;
    return l->cb(l->arg, key, plain_size(kind_of_key(key, &pack), size));
}

static st_err env_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    envelope_ctx *x = ctx;
    list_arg l = {cb, arg};
    return x->head.inner->ops->list(x->head.inner->ctx, prefix, list_plain_sizes, &l);
}

static void env_close(void *ctx)
{
    envelope_ctx *x = ctx;
    if (x->owns_inner)
        st_backend_close(x->head.inner);
    pthread_mutex_destroy(&x->marker_lock);
    free(x);
}

static const st_backend_ops envelope_ops_template = {
    .scheme = "envelope",
    .put = env_put,
    .get = env_get,
    .get_stream = env_get_stream,
    .stat = env_stat,
    .stat_time = st_wrap_stat_time,
    .put_new = env_put_new,
    .list = env_list,
    .del = st_wrap_del,
    .del_many = st_wrap_del_many,
    .close = env_close,
};

static st_err wrap(st_backend *inner, const st_keyring *kr, int owns, st_backend **out)
{
    envelope_ctx *x = calloc(1, sizeof *x);
    st_backend *w = calloc(1, sizeof *w);
    if (!x || !w) {
        free(x);
        free(w);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    x->head.inner = inner;
    x->owns_inner = owns;
    x->kr = kr;
    pthread_mutex_init(&x->marker_lock, NULL);
    x->ops = st_backend_ops_masked(&envelope_ops_template, inner);
    w->ops = &x->ops;
    w->ctx = x;
    *out = w;
    return ST_OK;
}

st_err st_envelope_wrap(st_backend **b, const st_keyring *kr)
{
    return wrap(*b, kr, 1, b);
}

st_err st_envelope_borrow(st_backend *inner, const st_keyring *kr, st_backend **out)
{
    return wrap(inner, kr, 0, out);
}

/* ---- the mixing rule ---- */

static int stop_at_first(void *arg, const char *key, uint64_t size)
{
    (void)key;
    (void)size;
    *(int *)arg = 1;
    return 1;
}

/* 1 in *any when some job of the store has a step (a key under its steps). */
static st_err store_has_steps(st_backend *b, int *any)
{
    char **jobs = NULL, prefix[ST_KEY_MAX];
    size_t n = 0;
    *any = 0;
    st_err e = st_catalog_list_jobs(b, &jobs, &n);
    for (size_t i = 0; !e && !*any && i < n; i++)
        if (!(e = st_key_steps_prefix(prefix, sizeof prefix, jobs[i])))
            e = st_list(b, prefix, stop_at_first, any);
    st_catalog_free_names(jobs, n);
    return e;
}

st_err st_envelope_check(st_backend *b, const st_keyring *kr, const char *url)
{
    /* A GET, not a HEAD: a refusal's answer then has a body, whose S3 error
     * code (SignatureDoesNotMatch, AccessDenied...) names the cause; a
     * HEAD's has none. The marker is a few dozen bytes. */
    st_bytes marker = {0};
    st_err e = st_get(b, ST_ENVELOPE_MARKER_KEY, 0, ST_GET_TO_END, &marker);
    st_bytes_free(&marker);
    if (e && e != ST_ERR_NOT_FOUND)
        return e;
    int marked = !e;
    if (!kr)
        return marked ? st_seterr(ST_ERR_KEY,
                                  "the store at %s is encrypted: give --encryption-key-file", url)
                      : ST_OK;
    if (marked)
        return ST_OK;
    int any = 0;
    if ((e = store_has_steps(b, &any)))
        return e;
    if (any)
        return st_seterr(ST_ERR_KEY,
                         "the store at %s is not encrypted; ckptfs does not mix encrypted and "
                         "plain steps in one store",
                         url);
    return ST_OK;
}

/* ---- pack records ---- */

st_err st_envelope_open_chunk(st_pack_opener *o, const st_keyring *kr, const char *job,
                              const st_id *pack, const st_pack_seal *seal, uint64_t offset,
                              const uint8_t *in, size_t len, uint8_t *out)
{
    if (!o->valid || st_id_cmp(&o->pack, pack) != 0 || memcmp(&o->seal, seal, sizeof *seal)) {
        st_pack_opener_wipe(o);
        st_err e = st_key_pack(o->name, sizeof o->name, job, pack);
        if (!e)
            e = st_pack_key(kr, o->name, seal, &o->key);
        if (e)
            return e;
        o->pack = *pack;
        o->seal = *seal;
        o->valid = 1;
    }
    return st_pack_open_record(&o->key, o->name, seal, offset, in, len, out);
}

void st_pack_opener_wipe(st_pack_opener *o)
{
    st_crypt_objkey_wipe(&o->key);
    o->valid = 0;
}
