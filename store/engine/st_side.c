/*
 * st_side — a file's side chunks, fetched once and served from memory.
 * See st_side.h.
 */
#include "engine/st_side.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_part.h"
#include "util/st_array.h"

typedef enum side_state { SIDE_TODO = 0, SIDE_LOADING, SIDE_READY } side_state;

/* One GET's worth of side chunks: bytes [lo, end) of one pack. */
typedef struct side_window {
    uint32_t pack;
    uint64_t lo, end;
    uint8_t *data; /* set once SIDE_READY, then never changed */
    side_state state;
} side_window;

struct st_side_chunks {
    const st_manifest *m;
    const st_file_entry *f;
    uint32_t *window_of; /* per chunk ref: its window, or NO_WINDOW */
    side_window *win;
    size_t nwin;
    pthread_mutex_t lock;
    pthread_cond_t loaded;
};

#define NO_WINDOW UINT32_MAX

static int is_large(const st_chunk_ref *c)
{
    return !st_chunk_is_hole(c) && c->stored_len > ST_SIDE_CHUNK_MAX;
}

/* The nearest large ref from i going by step (-1 or +1): 1 and its pack in
 * *pack, 0 at the file's edge, -1 when ST_SIDE_SCAN refs hold none. */
static int large_neighbour(const st_file_entry *f, size_t i, int step, uint32_t *pack)
{
    for (size_t k = 1; k <= ST_SIDE_SCAN; k++) {
        if (step < 0 ? i < k : i + k >= f->nchunks)
            return 0;
        const st_chunk_ref *c = &f->chunks[step < 0 ? i - k : i + k];
        if (is_large(c)) {
            *pack = c->pack;
            return 1;
        }
    }
    return -1;
}

int st_chunk_is_side(const st_file_entry *f, size_t i)
{
    const st_chunk_ref *c = &f->chunks[i];
    if (st_chunk_is_hole(c) || st_chunk_is_slice(c) || is_large(c)) /* a slice: its bundle cache */
        return 0;
    uint32_t before = 0, after = 0;
    int b = large_neighbour(f, i, -1, &before), a = large_neighbour(f, i, +1, &after);
    if (b < 0 || a < 0 || (!b && !a))
        return 0;
    return (!b || before != c->pack) && (!a || after != c->pack);
}

/* A side ref in pack order, for grouping them into windows. */
typedef struct side_ref {
    uint32_t pack;
    uint64_t offset, end;
    size_t index;
} side_ref;

static int side_ref_cmp(const void *pa, const void *pb)
{
    const side_ref *a = pa, *b = pb;
    if (a->pack != b->pack)
        return a->pack < b->pack ? -1 : 1;
    return a->offset < b->offset ? -1 : a->offset > b->offset;
}

/* Groups the sorted refs into s->win (room for n windows at most): a new
 * window where the pack changes or the gap exceeds ST_SIDE_GAP_MAX. 0 if
 * the windows' spans exceed ST_SIDE_BYTES_MAX. */
static int group_windows(st_side_chunks *s, const side_ref *refs, size_t n)
{
    uint64_t spans = 0;
    for (size_t j = 0; j < n; j++) {
        const side_ref *r = &refs[j];
        side_window *w = s->nwin ? &s->win[s->nwin - 1] : NULL;
        if (!w || w->pack != r->pack || r->offset > w->end + ST_SIDE_GAP_MAX) {
            w = &s->win[s->nwin++];
            *w = (side_window){.pack = r->pack, .lo = r->offset, .end = r->offset};
        }
        if (r->end > w->end) {
            spans += r->end - w->end;
            w->end = r->end;
        }
        if (spans > ST_SIDE_BYTES_MAX)
            return 0;
        s->window_of[r->index] = (uint32_t)(s->nwin - 1);
    }
    return 1;
}

void st_side_chunks_free(st_side_chunks *s)
{
    if (!s)
        return;
    for (size_t k = 0; k < s->nwin; k++)
        free(s->win[k].data);
    free(s->win);
    free(s->window_of);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->loaded);
    free(s);
}

st_err st_side_chunks_new(const st_manifest *m, const st_file_entry *f, st_side_chunks **out)
{
    *out = NULL;
    side_ref *refs = NULL; /* the side refs, in file order (one scan: each is_side looks around) */
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < f->nchunks; i++) {
        if (!st_chunk_is_side(f, i))
            continue;
        if (st_array_grow((void **)&refs, &cap, n + 1, sizeof *refs)) {
            free(refs);
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        }
        const st_chunk_ref *c = &f->chunks[i];
        refs[n++] = (side_ref){c->pack, c->offset, c->offset + c->stored_len, i};
    }
    if (!n)
        return ST_OK;
    st_side_chunks *s = calloc(1, sizeof *s);
    if (s) {
        s->window_of = malloc(f->nchunks * sizeof *s->window_of);
        s->win = calloc(n, sizeof *s->win);
    }
    if (!s || !s->window_of || !s->win) {
        free(refs);
        if (s) {
            free(s->window_of);
            free(s->win);
        }
        free(s);
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    }
    s->m = m;
    s->f = f;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->loaded, NULL);
    for (size_t i = 0; i < f->nchunks; i++)
        s->window_of[i] = NO_WINDOW;
    qsort(refs, n, sizeof *refs, side_ref_cmp);
    int fits = group_windows(s, refs, n);
    free(refs);
    if (!fits) {
        st_side_chunks_free(s);
        return ST_OK;
    }
    *out = s;
    return ST_OK;
}

int st_side_has(const st_side_chunks *s, size_t i)
{
    return s && s->window_of[i] != NO_WINDOW;
}

/* Fetches window w (no lock held): its bytes in *data, or an error. */
static st_err fetch_window(const st_side_chunks *s, const side_window *w, st_backend *backend,
                           const char *job, uint8_t **data, uint64_t *fetched)
{
    char key[ST_KEY_MAX];
    const uint64_t span = w->end - w->lo;
    uint64_t received = 0;
    st_err e = st_key_pack(key, sizeof key, job, &s->m->packs[w->pack]);
    if (e)
        return e;
    uint8_t *buf = malloc(span);
    if (!buf)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    e = st_get_into(backend, key, w->lo, span, buf, &received);
    *fetched += received;
    if (e == ST_ERR_NOT_FOUND) /* a part record names it: its loss is damage */
        e = st_seterr(ST_ERR_CORRUPT, "restoring %s: pack %s is missing", s->f->path, key);
    else if (e)
        e = st_seterr(e, "restoring %s: %s", s->f->path, st_errmsg());
    else if (received != span)
        e = st_seterr(ST_ERR_CORRUPT, "restoring %s: pack %s is shorter than the manifest says",
                      s->f->path, key);
    if (e) {
        free(buf);
        return e;
    }
    *data = buf;
    return ST_OK;
}

st_err st_side_load(st_side_chunks *s, st_backend *backend, const char *job, size_t i,
                    uint64_t *gets, uint64_t *fetched)
{
    side_window *w = &s->win[s->window_of[i]];
    pthread_mutex_lock(&s->lock);
    while (w->state == SIDE_LOADING)
        pthread_cond_wait(&s->loaded, &s->lock);
    if (w->state == SIDE_READY) {
        pthread_mutex_unlock(&s->lock);
        return ST_OK;
    }
    w->state = SIDE_LOADING;
    pthread_mutex_unlock(&s->lock);
    uint8_t *data = NULL;
    st_err e = fetch_window(s, w, backend, job, &data, fetched);
    pthread_mutex_lock(&s->lock);
    if (!e) {
        w->data = data;
        (*gets)++;
    }
    w->state = e ? SIDE_TODO : SIDE_READY;
    pthread_cond_broadcast(&s->loaded);
    pthread_mutex_unlock(&s->lock);
    return e;
}

const uint8_t *st_side_bytes(const st_side_chunks *s, size_t i)
{
    const side_window *w = &s->win[s->window_of[i]];
    return w->data + (s->f->chunks[i].offset - w->lo);
}
