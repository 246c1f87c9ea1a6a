/*
 * st_spool — a writer's pack spool (st_spool.h; docs/PEERS.md).
 */
#include "peer/st_spool.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_part.h"
#include "util/st_fsutil.h"

#define SPOOL_THREADS_MAX 16

typedef struct spool_key {
    struct spool_key *next;
    uint64_t len;
    char key[];
} spool_key;

/* A FIFO of keys. */
typedef struct key_list {
    spool_key *head, *tail;
} key_list;

struct st_spool {
    st_backend backend; /* what the upload writes through: ops below, ctx this */
    st_backend *store;  /* borrowed */
    st_backend *disk;   /* file:// at the spool directory */
    pthread_mutex_t lock;
    pthread_cond_t work;    /* a key queued, or stop */
    pthread_cond_t settled; /* the queue emptied and nothing is in flight */
    key_list queue, failed;
    unsigned in_flight;
    st_err first_err;
    char first_msg[256];
    int stop;
    st_spool_hook hook;
    void *hook_arg;
    st_spool_stats stats;
    unsigned nthreads;
    pthread_t threads[SPOOL_THREADS_MAX];
};

static void list_push(key_list *l, spool_key *k)
{
    k->next = NULL;
    if (l->tail)
        l->tail->next = k;
    else
        l->head = k;
    l->tail = k;
}

static spool_key *list_pop(key_list *l)
{
    spool_key *k = l->head;
    if (k && !(l->head = k->next))
        l->tail = NULL;
    return k;
}

static void list_free(key_list *l)
{
    spool_key *k;
    while ((k = list_pop(l)))
        free(k);
}

static int is_pack_key(const char *key)
{
    char job[ST_JOB_MAX + 1];
    st_id id;
    return st_key_parse_pack(key, job, &id);
}

/* Queues key (lock held). */
static st_err enqueue(st_spool *s, const char *key, uint64_t len)
{
    size_t n = strlen(key) + 1;
    spool_key *k = malloc(sizeof *k + n);
    if (!k)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    memcpy(k->key, key, n);
    k->len = len;
    list_push(&s->queue, k);
    s->stats.queued_bytes += len;
    pthread_cond_signal(&s->work);
    return ST_OK;
}

/* One spooled pack to the store, then out of the spool. The spool does not
 * fsync (a scratch backend: the seal must not wait on the disk), so a crash
 * can leave a spooled pack short or empty: its bytes are checked against
 * its id before the PUT, and one that fails is dropped, never stored. The
 * dedup index may still name it: the ingest's look at the store finds the
 * pack gone and stores its chunks again (docs/PROTOCOL.md, "The local
 * dedup index"). */
static st_err store_one(st_spool *s, const char *key, st_bytes *buf, int *dropped)
{
    *dropped = 0;
    char job[ST_JOB_MAX + 1];
    st_id want, got;
    st_err e = st_get(s->disk, key, 0, ST_GET_TO_END, buf);
    if (e == ST_ERR_NOT_FOUND) { /* gone from the spool: nothing to PUT, ever */
        *dropped = 1;
        return st_seterr(e, "spooled pack %s is gone from the spool", key);
    }
    if (!e && st_key_parse_pack(key, job, &want) &&
        (got = st_id_of(buf->data, buf->len), st_id_cmp(&got, &want))) {
        st_del(s->disk, key);
        *dropped = 1;
        return st_seterr(ST_ERR_CORRUPT,
                         "spooled pack %s: its bytes fail its id (a crash cut it?); "
                         "dropped, its chunks are stored again",
                         key);
    }
    if (!e)
        e = st_put(s->store, key, buf->data, buf->len);
    if (!e)
        e = st_del(s->disk, key); /* a copy left behind is PUT again at the next open: harmless */
    return e;
}

static void *spool_thread(void *arg)
{
    st_spool *s = arg;
    st_bytes buf = {0};
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->stop && !s->queue.head)
            pthread_cond_wait(&s->work, &s->lock);
        if (s->stop)
            break;
        spool_key *k = list_pop(&s->queue);
        s->in_flight++;
        pthread_mutex_unlock(&s->lock);
        int dropped = 0;
        st_err e = store_one(s, k->key, &buf, &dropped);
        st_bytes_free(&buf); /* a pack is up to ST_PACK_MAX_SIZE: not kept between PUTs */
        pthread_mutex_lock(&s->lock);
        s->in_flight--;
        if (e) {
            s->stats.failed_puts++;
            if (!s->first_err) {
                s->first_err = e;
                snprintf(s->first_msg, sizeof s->first_msg, "%s", st_errmsg());
            }
            if (dropped) { /* the flush still fails: the step must not be published */
                s->stats.queued_bytes -= k->len;
                free(k);
            } else
                list_push(&s->failed, k); /* queued again by the next flush */
        } else {
            s->stats.stored_packs++;
            s->stats.queued_bytes -= k->len;
            free(k);
        }
        if (!s->queue.head && !s->in_flight)
            pthread_cond_broadcast(&s->settled);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static st_err spool_put(void *ctx, const char *key, const void *data, size_t len)
{
    st_spool *s = ctx;
    pthread_mutex_lock(&s->lock);
    st_spool_hook hook = s->hook;
    void *hook_arg = s->hook_arg;
    pthread_mutex_unlock(&s->lock);
    if (!hook || !is_pack_key(key))
        return st_put(s->store, key, data, len);
    st_err e = st_put(s->disk, key, data, len);
    if (e)
        return e;
    hook(hook_arg, key, data, len);
    pthread_mutex_lock(&s->lock);
    s->stats.spooled_packs++;
    s->stats.spooled_bytes += len;
    e = enqueue(s, key, len);
    pthread_mutex_unlock(&s->lock);
    return e;
}

/* A pack still spooled is read from the spool; anything else, and a pack
 * the spool no longer has, from the store. */
static st_err spool_get(void *ctx, const char *key, uint64_t off, uint64_t len, st_bytes *out)
{
    st_spool *s = ctx;
    if (is_pack_key(key)) {
        st_err e = st_get(s->disk, key, off, len, out);
        if (e != ST_ERR_NOT_FOUND)
            return e;
    }
    return st_get(s->store, key, off, len, out);
}

static st_err spool_get_stream(void *ctx, const char *key, uint64_t off, uint64_t len,
                               const st_get_sink *sink)
{
    return st_get_stream_by_get(spool_get, ctx, key, off, len, sink);
}

static st_err spool_stat(void *ctx, const char *key, uint64_t *size)
{
    st_spool *s = ctx;
    if (is_pack_key(key)) {
        st_err e = st_stat(s->disk, key, size);
        if (e != ST_ERR_NOT_FOUND)
            return e;
    }
    return st_stat(s->store, key, size);
}

static st_err spool_stat_time(void *ctx, const char *key, st_store_time *t)
{
    st_spool *s = ctx;
    return st_stat_time(s->store, key, t);
}

static st_err spool_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    st_spool *s = ctx;
    return st_list(s->store, prefix, cb, arg);
}

static st_err spool_del(void *ctx, const char *key)
{
    st_spool *s = ctx;
    return st_del(s->store, key);
}

static void spool_close_nothing(void *ctx)
{
    (void)ctx; /* the backend is the spool's: st_spool_close frees it */
}

static const st_backend_ops spool_ops = {
    .scheme = "spool",
    .put = spool_put,
    .get = spool_get,
    .get_stream = spool_get_stream,
    .stat = spool_stat,
    .stat_time = spool_stat_time,
    .list = spool_list,
    .del = spool_del,
    .close = spool_close_nothing,
};

/* Queues a pack left in the spool by an earlier life. */
static int requeue_cb(void *arg, const char *key, uint64_t size)
{
    st_spool *s = arg;
    if (is_pack_key(key) && enqueue(s, key, size))
        return 1;
    return 0;
}

st_err st_spool_open(const char *dir, st_backend *store, unsigned threads, st_spool **out)
{
    st_spool *s = calloc(1, sizeof *s);
    if (!s)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    s->backend.ops = &spool_ops;
    s->backend.ctx = s;
    s->store = store;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->settled, NULL);
    st_err e = st_mkdir_p_mode(dir, 0700);
    if (!e)
        e = st_backend_file_open_scratch(dir, &s->disk);
    if (!e) {
        pthread_mutex_lock(&s->lock);
        e = st_list(s->disk, "jobs/", requeue_cb, s);
        pthread_mutex_unlock(&s->lock);
    }
    unsigned want = threads ? threads : 1;
    if (want > SPOOL_THREADS_MAX)
        want = SPOOL_THREADS_MAX;
    for (; !e && s->nthreads < want; s->nthreads++)
        if (pthread_create(&s->threads[s->nthreads], NULL, spool_thread, s))
            e = st_seterr(ST_ERR_NOMEM, "cannot start a spool thread");
    if (e) {
        st_spool_close(s);
        return e;
    }
    *out = s;
    return ST_OK;
}

st_backend *st_spool_backend(st_spool *s)
{
    return &s->backend;
}

void st_spool_set_hook(st_spool *s, st_spool_hook hook, void *arg)
{
    pthread_mutex_lock(&s->lock);
    s->hook = hook;
    s->hook_arg = arg;
    pthread_mutex_unlock(&s->lock);
}

st_err st_spool_flush(st_spool *s)
{
    pthread_mutex_lock(&s->lock);
    while (s->queue.head || s->in_flight)
        pthread_cond_wait(&s->settled, &s->lock);
    st_err e = s->first_err;
    char msg[sizeof s->first_msg];
    memcpy(msg, s->first_msg, sizeof msg);
    s->first_err = ST_OK;
    spool_key *k;
    while ((k = list_pop(&s->failed))) { /* the next flush tries them again */
        list_push(&s->queue, k);
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->lock);
    return e ? st_seterr(e, "spooled pack to the store: %s", msg) : ST_OK;
}

void st_spool_get_stats(st_spool *s, st_spool_stats *out)
{
    pthread_mutex_lock(&s->lock);
    *out = s->stats;
    pthread_mutex_unlock(&s->lock);
}

void st_spool_close(st_spool *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->lock);
    for (unsigned i = 0; i < s->nthreads; i++)
        pthread_join(s->threads[i], NULL);
    list_free(&s->queue);
    list_free(&s->failed);
    st_backend_close(s->disk);
    pthread_cond_destroy(&s->settled);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
