/*
 * st_gcrun — what the phases of one GC run share (st_gc.c runs them in
 * order: retention in st_gcretain.c, the sweep in st_gcsweep.c): the run's
 * context, the listings of a job's steps, packs, markers and pins, and the
 * batched deletes with their report, progress and stop (docs/GC.md,
 * "Batches").
 *
 * Below the phases: calls only the backend, the key layout and the store's
 * clock (st_store_age), never a phase. Internal to the engine's GC.
 * Threads: one thread per run.
 */
#ifndef ST_GCRUN_H
#define ST_GCRUN_H

#include "engine/st_gc.h"
#include "util/st_idmap.h"
#include "engine/st_catalog.h"

#define GC_DEFAULT_BATCH 1000

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
    int restorable; /* consistent, and every pack it needs is listed, long enough */
    int young;      /* partial, and a part record may be younger than grace (store's clock) */
    int settled;    /* (known if settled_known) every part record older than grace */
    int settled_known;
    int deleted;  /* retention (or the mount) deletes it */
    int finished; /* a stale intent's deletion of it was finished */
} gc_step;

/* A listing: keys and sizes. */
typedef struct obj_list {
    gc_obj *v;
    size_t n, cap;
    size_t prefix_len;
    int ids; /* keep only keys named <prefix><pack id> */
    int oom;
} obj_list;

typedef struct step_list {
    const char *job;
    gc_step *steps;
    size_t n, cap;
    int oom;
} step_list;

typedef struct u64_list {
    uint64_t *v;
    size_t n, cap;
    int oom;
} u64_list;

/* Keys queued for one batched delete (st_del_many: S3 DeleteObjects, up to
 * 1000 keys a request), with their sizes for the report. keys[] are owned
 * copies; items[i].key points at keys[i]. */
typedef struct del_queue {
    st_del_item *items;
    char **keys;
    uint64_t *sizes;
    size_t n, items_cap, keys_cap, sizes_cap;
} del_queue;

/* One run: what every phase needs. */
typedef struct gc_run {
    st_backend *b;
    const char *job;
    const st_gc_policy *p;
    int dry_run;
    int64_t grace;
    st_gc_report *r;
    uint32_t batch;    /* objects per batch */
    uint32_t in_batch; /* objects deleted since the last progress report */
    u64_list pins;
    st_gc_warn_fn warn;
    void *warn_arg;
    del_queue q; /* keys waiting for the next gc_flush */
} gc_run;

typedef struct pack_obj {
    st_id id;
    uint64_t size;
    int marked;       /* a pending marker exists */
    int64_t age_ns;   /* of the marker at the run's t0, by the store's clock (at least) */
    int64_t grace_ns; /* the marker's own grace */
    int64_t pending_size, retired_size; /* of its markers; -1: none */
} pack_obj;

typedef struct pack_list {
    size_t prefix_len;
    pack_obj *v;
    size_t n, cap;
    st_idmap index; /* id -> position in v */
    int oom;
} pack_list;

/* ---- listings (st_list; NOMEM when a listing ran out of memory) ---- */

/* The objects of every step of job, grouped by step, ascending; each step's
 * nodes with a part record. */
st_err gc_list_steps(st_backend *b, const char *job, step_list *l);
/* st_list callback of gc_list_steps (arg: a step_list with job set). */
int gc_collect_step_obj(void *arg, const char *key, uint64_t size);
void gc_step_list_free(step_list *l);
/* The objects under jobs/<job>/<what>/; with ids, only those whose name is a
 * pack id (markers). */
st_err gc_list_objs(gc_run *g, const char *what, int ids, obj_list *l);
void gc_obj_list_free(obj_list *l);
/* The pack id a marker of l is named by. */
st_id gc_marker_id(const obj_list *l, size_t i);
/* The packs of the job (id -> size). */
st_err gc_list_packs(gc_run *g, pack_list *packs);
void gc_pack_list_free(pack_list *packs);
/* The pinned steps of job. */
st_err gc_list_pins(st_backend *b, const char *job, u64_list *l);
int gc_u64_in(const u64_list *l, uint64_t v);
/* *old = 1 when key is surely at least age_ns old by the store's clock, or
 * gone (docs/GC.md, "Clocks"). */
st_err gc_key_older_than(gc_run *g, const char *key, int64_t age_ns, int *old);

/* ---- deletes, the report, progress and stop ---- */

/* Deletes key now (unless a dry run) and reports it. */
st_err gc_delete_key(gc_run *g, const char *key, uint64_t size);
/* Queues key for the next gc_flush. */
st_err gc_queue_key(gc_run *g, const char *key, uint64_t size);
void gc_queue_clear(del_queue *q);
void gc_queue_free(del_queue *q);
/* Deletes the queued keys in one batched delete, in no particular order;
 * ok[i] (may be NULL): which went. The queue is empty afterwards. */
st_err gc_flush(gc_run *g, unsigned char *ok);
/* gc_flush, adding how many keys went to *counter (a report field). */
st_err gc_flush_counting(gc_run *g, uint64_t *counter);
/* Ends a unit of queued single objects: flushes them, if any, and looks at
 * stop (gc_unit_done). */
st_err gc_flush_unit(gc_run *g, uint64_t *counter);
/* Queues key and, once the queue holds a batch, flushes it as a unit. */
st_err gc_queue_batched(gc_run *g, const char *key, uint64_t size, uint64_t *counter);
/* 1 (and r->stopped) if the caller asked the run to stop. */
int gc_stop_requested(gc_run *g);
/* At the end of every unit a stop must not split: once a batch is full,
 * reports progress and looks at stop. 1: stop here. */
int gc_unit_done(gc_run *g);
void gc_warn(gc_run *g, const char *msg);

/* ---- the phases ---- */

/* st_gcretain.c: decides which steps of l go under the run's policy. */
void gc_pick_steps(gc_run *g, step_list *l, const u64_list *pins, const st_gc_policy *p);
/* st_gcretain.c: 1 if partial step st may still be filling (a part record
 * younger than grace by the store's clock). */
int gc_partial_step_young(gc_run *g, const gc_step *st);
/* st_gcretain.c: finishes the step deletions of interrupted runs. */
st_err gc_finish_intents(gc_run *g, step_list *l);
/* st_gcretain.c: deletes the steps of l marked deleted, under an intent. */
st_err gc_delete_picked(gc_run *g, step_list *l);
/* st_gcsweep.c: steps 2-4 of a run (st_gc.c); first: the steps listed by
 * step 1 (a dry run leaves out those it would have deleted). */
st_err gc_sweep(gc_run *g, const step_list *first);

#endif
