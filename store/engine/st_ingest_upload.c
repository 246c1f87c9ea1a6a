/*
 * st_ingest_upload — an ingest's packs on their way to the store: the pack
 * buffers, the upload threads that PUT them, and the recording of a
 * stored pack's chunks in the dedup index once its PUT succeeded
 * (st_ingest.c's file comment, "Streams and buffers").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/st_ingest_impl.h"
#include "engine/st_state.h"
#include "util/st_array.h"
#include "util/st_crashpoint.h"

void st_ingest_set_parallel(st_ingest *g, unsigned n)
{
    if (g->nworkers || g->streams[STREAM_NEW].open || g->streams[STREAM_REHOME].open)
        return; /* only before the first pack */
    if (n < 1)
        n = 1;
    if (n > MAX_PARALLEL)
        n = MAX_PARALLEL;
    g->nbufs = (int)n + NSTREAMS;
}

/* An upload thread: PUTs queued pack buffers until told to stop. */
static void *upload_main(void *arg)
{
    st_ingest *g = arg;
    pthread_mutex_lock(&g->lock);
    for (;;) {
        pack_buf *b = NULL;
        for (int i = 0; i < g->nbufs && !b; i++)
            if (g->bufs[i].state == BUF_QUEUED)
                b = &g->bufs[i];
        if (!b) {
            if (g->stopping)
                break;
            pthread_cond_wait(&g->changed, &g->lock);
            continue;
        }
        b->state = BUF_RUNNING;
        pthread_mutex_unlock(&g->lock);
        char key[ST_KEY_MAX];
        st_err e = st_key_pack(key, sizeof key, g->job, &b->id);
        ST_CRASHPOINT("pack-put-before");
        if (!e)
            e = st_put_once(g->backend, key, b->w.data.data, b->w.data.len,
                            ST_ONCE_NAMED_BY_CONTENT, NULL);
        ST_CRASHPOINT_IF(!e, "pack-put-after");
        pthread_mutex_lock(&g->lock);
        b->err = e;
        if (e)
            snprintf(b->msg, sizeof b->msg, "%s", st_errmsg());
        b->state = BUF_DONE;
        pthread_cond_broadcast(&g->changed);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

static st_err start_workers(st_ingest *g)
{
    for (int i = g->nworkers; i < g->nbufs - NSTREAMS; i++) {
        if (pthread_create(&g->workers[i], NULL, upload_main, g) != 0)
            break;
        g->nworkers++;
    }
    return g->nworkers ? ST_OK : st_seterr(ST_ERR_NOMEM, "cannot start upload threads");
}

/* Indexes the chunks of PUT packs and frees their buffers (ingest thread,
 * lock held). The first upload error is kept in upload_err. */
static st_err collect_done(st_ingest *g)
{
    st_err e = ST_OK;
    for (int i = 0; i < g->nbufs; i++) {
        pack_buf *b = &g->bufs[i];
        if (b->state != BUF_DONE)
            continue;
        b->state = BUF_FREE;
        if (b->err) {
            if (!g->upload_err) {
                g->upload_err = b->err;
                snprintf(g->upload_msg, sizeof g->upload_msg, "%s", b->msg);
            }
            continue;
        }
        g->stats.packs++;
        g->stats.stored_bytes += b->w.data.len;
        if (!e)
            e = st_state_begin(g->state);
        uint32_t nchunks = 0;
        for (size_t k = b->first_chunk; !e && k < b->end_chunk; k++) {
            const open_chunk *c = &g->open_chunks[k];
            st_chunk_loc loc = {b->id, c->offset, c->stored_len, c->raw_len};
            if (c->slot != b->slot)
                continue;
            nchunks++;
            /* A re-homed chunk's old location is in a retired pack. */
            e = b->stream == STREAM_REHOME ? st_state_chunk_move(g->state, g->job, &c->id, &loc)
                                           : st_state_chunk_add(g->state, g->job, &c->id, &loc);
        }
        if (!e)
            e = st_state_pack_add(g->state, g->job, &b->id, b->w.data.len, nchunks);
        if (e)
            st_state_rollback(g->state);
        else
            e = st_state_commit(g->state);
        ST_CRASHPOINT_IF(!e, "chunks-indexed");
    }
    if (!e && g->upload_err)
        e = st_seterr(g->upload_err, "%s", g->upload_msg);
    return e;
}

/* Hands the open pack of stream to the upload pool. */
st_err ingest_flush_pack(st_ingest *g, int stream)
{
    if (!g->streams[stream].open)
        return ST_OK;
    pack_buf *b = &g->bufs[g->streams[stream].cur];
    st_err e = st_pack_finish(&b->w, &b->id);
    if (e)
        return e;
    ST_CRASHPOINT("pack-sealed");
    /* The slot was reserved when the pack opened; now it has its name. */
    g->packs[b->slot] = b->id;
    st_pack_seal seal;
    if (st_pack_writer_seal(&b->w, &seal) && (e = ingest_note_seal(g, &b->id, &seal)))
        return e;
    if ((e = st_idmap_put(&g->pack_slots, &b->id, b->slot)))
        return e;
    b->end_chunk = g->ncommitted; /* in flight after it: later packs */
    if (!g->nworkers && (e = start_workers(g)))
        return e;
    pthread_mutex_lock(&g->lock);
    b->state = BUF_QUEUED;
    pthread_cond_broadcast(&g->changed);
    e = collect_done(g);
    pthread_mutex_unlock(&g->lock);
    g->streams[stream].open = 0;
    return e;
}

/* Waits until every queued pack is PUT and indexed. */
st_err ingest_drain_uploads(st_ingest *g)
{
    pthread_mutex_lock(&g->lock);
    for (;;) {
        int busy = 0;
        for (int i = 0; i < g->nbufs; i++)
            busy |= g->bufs[i].state == BUF_QUEUED || g->bufs[i].state == BUF_RUNNING;
        if (!busy)
            break;
        pthread_cond_wait(&g->changed, &g->lock);
    }
    st_err e = collect_done(g);
    pthread_mutex_unlock(&g->lock);
    return e;
}

/* Opens a new pack of stream in a free buffer (waiting for one if all are
 * in flight) and reserves its slot in the pack table. */
st_err ingest_open_pack(st_ingest *g, int stream)
{
    st_err e = st_array_grow((void **)&g->packs, &g->packs_cap, g->npacks + 1, sizeof *g->packs);
    if (e)
        return e;
    /* One buffer of the nbufs is the other stream's: without it, this
     * stream has (parallel + 1) buffers, as with a single stream. */
    const int mine = g->nbufs - 1 + g->streams[!stream].open;
    pthread_mutex_lock(&g->lock);
    int free_buf = -1;
    while (free_buf < 0) {
        int busy = 0;
        e = collect_done(g);
        for (int i = 0; i < g->nbufs; i++) {
            busy += g->bufs[i].state != BUF_FREE;
            if (g->bufs[i].state == BUF_FREE && free_buf < 0)
                free_buf = i;
        }
        if (busy >= mine)
            free_buf = -1; /* wait for one of this stream's uploads */
        if (e || free_buf >= 0)
            break;
        pthread_cond_wait(&g->changed, &g->lock);
    }
    if (!e) /* under the lock: the upload threads read every buffer's state */
        g->bufs[free_buf].state = BUF_FILLING;
    pthread_mutex_unlock(&g->lock);
    if (e)
        return e;
    pack_buf *b = &g->bufs[free_buf];
    st_pack_writer_reset(&b->w);
    st_pack_writer_set_keyring(&b->w, g->kr);
    b->stream = stream;
    b->first_chunk = g->ncommitted;
    b->slot = (uint32_t)g->npacks;
    memset(&g->packs[g->npacks++], 0, sizeof(st_id));
    g->streams[stream].cur = free_buf;
    g->streams[stream].open = 1;
    return ST_OK;
}
