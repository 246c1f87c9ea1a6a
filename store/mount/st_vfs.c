/*
 * st_vfs — the mount model's life: st_vfs_open (options, the staging
 * directory, the store, recovery from the journal, the first look at the
 * store), st_vfs_start (the background threads), st_vfs_close (what the
 * kernel left open, the drain, the threads stopped, everything freed) and
 * the mount-wide queries (statfs, waiting until uploads are idle).
 *
 * The operations of st_vfs.h live in the modules below it, which
 * st_vfs_impl.h lists bottom to top; st_vfs.h has the contract, and
 * st_vfs_impl.h the shared state, the file and step life cycles and the
 * locking rule.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include "mount/st_vfs_impl.h"
#include "backend/st_backend_open.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "backend/st_backend_fault.h"
#include "util/st_fsutil.h"
#include "util/st_parallel.h"
#include "util/st_thread.h"
#include "util/st_keyring.h"
#include "engine/st_envelope.h"
#include "engine/st_replay.h"
#include "engine/st_gc.h"
#include "engine/st_ingest.h"

/* ---- mount-wide queries ---- */

st_err st_vfs_statfs(st_vfs *v, struct statvfs *out)
{
    if (statvfs(v->staging, out) < 0)
        return st_seterr(ST_ERR_IO, "statfs staging: %s", strerror(errno));
    out->f_bsize = out->f_frsize; /* blocks below are counted in f_frsize */
    if (v->opts.staging_cap) {
        pthread_mutex_lock(&v->lock);
        uint64_t cap_blocks = v->opts.staging_cap / out->f_frsize;
        uint64_t used = v->staged_bytes / out->f_frsize;
        pthread_mutex_unlock(&v->lock);
        uint64_t left = cap_blocks > used ? cap_blocks - used : 0;
        out->f_blocks = cap_blocks < out->f_blocks ? cap_blocks : out->f_blocks;
        out->f_bavail = left < out->f_bavail ? left : out->f_bavail;
        out->f_bfree = left < out->f_bfree ? left : out->f_bfree;
    }
    return ST_OK;
}

st_err st_vfs_wait_idle(st_vfs *v, double timeout_s)
{
    int64_t deadline = st_mono_ns() + (int64_t)(timeout_s * 1e9);
    pthread_mutex_lock(&v->lock);
    while ((v->nqueue || v->uploader_busy) && st_mono_ns() < deadline)
        vfs_timedwait(v, st_mono_ns() + 100 * 1000000);
    int idle = !v->nqueue && !v->uploader_busy;
    pthread_mutex_unlock(&v->lock);
    return idle ? ST_OK : ST_ERR_BUSY;
}

/* ---- open / close ---- */

/* Recovery of a naming marker's version kept for its step: the step is
 * queued as a step with files to upload is. */
static void recover_kept(void *arg, const char *job, uint64_t step, const char *path, uint64_t sid,
                         uint32_t mode, int64_t mtime_ns)
{
    st_vfs *v = arg;
    if (!vfs_kept_restore(v, job, step, path, sid, mode, mtime_ns))
        return;
    vjob *j = vfs_job(v, job, 0);
    vstep *s = j ? vfs_step(j, step, 0) : NULL;
    if (s && s->complete)
        vfs_enqueue(v, j->name, s->step);
    else if (s) { /* published eagerly once quiet */
        s->dirty = 1;
        s->last_activity_ns = st_mono_ns();
    }
}

/* A restart: the namespace and steps from the journal, then the deletion
 * requests it holds (before anything is queued: a step whose deletion was
 * requested is never published again), then the upload queue. Lock held. */
static st_err recover(st_vfs *v)
{
    vfs_recovered_deletion *dels = NULL;
    size_t ndels = 0;
    st_err e = vfs_journal_recover(v, &dels, &ndels);
    for (size_t i = 0; !e && i < ndels; i++)
        e = vfs_deletion_restore(v, dels[i].job, dels[i].step, dels[i].path, dels[i].requested_ns);
    vfs_recovered_deletions_free(dels, ndels);
    if (!e)
        e = vfs_journal_each_kept(v, recover_kept, v);
    if (e)
        return e;
    /* Queue the complete steps that still have files to upload. */
    for (uint64_t i = 0; i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        if (!n || !S_ISREG(n->mode) || !n->sid || n->state == VFILE_DURABLE ||
            n->step == VFS_NO_STEP)
            continue;
        vnode *jd = vfs_job_dir(n);
        vjob *j = jd ? vfs_job(v, jd->name, 0) : NULL;
        vstep *s = j ? vfs_step(j, n->step, 0) : NULL;
        /* The completion rules (R1 markers, R3 single-file steps) run at the
         * release, after close() has returned: a crash in between left an
         * acknowledged file whose step never completed. Nothing is open for
         * writing now, so they run again (docs/MOUNT_MODEL.md, "Crash and
         * restart"). */
        if (s && !s->complete)
            vfs_step_file_settled(v, j, n, 0);
        if (s && s->complete)
            vfs_enqueue(v, j->name, s->step);
        else if (s) { /* published eagerly once quiet */
            s->dirty = 1;
            s->last_activity_ns = st_mono_ns();
        }
    }
    vfs_note_failed_files(v); /* last_error names a file that holds its step back */
    return ST_OK;
}

/* One read of the first look at the store, at open, under the look's
 * bound (which is per thread: vfs_bound_set). */
typedef struct open_look {
    st_vfs *v;
    vfs_bound bound;
    st_err (*read)(st_vfs *v);
} open_look;

static st_err look(void *arg)
{
    open_look *l = arg;
    vfs_bound outer = vfs_bound_set(l->bound);
    st_err e = l->read(l->v);
    vfs_bound_set(outer);
    return e;
}

/* The mixing rule of client-side encryption (docs/ENCRYPTION.md): a key
 * against a plain store with steps, or none against an encrypted one. */
static st_err read_encryption(st_vfs *v)
{
    return st_envelope_check(v->backend, v->keyring,
                             v->store_url ? v->store_url : "the mount's store");
}

/* The store's steps, this node's lease and the encryption marker, read at
 * once (none needs another's answer: on Ceph RGW each is a round trip of
 * ~45 ms, and a mount waited for them in a row). They share one bound, so a
 * dead endpoint delays the mount once, not thrice (docs/NODES.md); a store
 * that does not answer within it is left to the refresher thread
 * (docs/MOUNT_MODEL.md, "The store is down"). Only a live holder of the node
 * name and the mixing rule fail the open. */
static st_err first_look(st_vfs *v)
{
    const vfs_bound bound = {.stop_at_ns = st_mono_ns() + VFS_OPEN_STORE_WAIT_NS,
                             .outage_budget_ns = VFS_OPEN_OUTAGE_NS};
    open_look steps = {v, bound, vfs_remote_refresh}, lease = {v, bound, vfs_lease_read},
              crypt = {v, bound, read_encryption};
    st_parallel_call calls[] = {
        {.fn = look, .arg = &steps}, {.fn = look, .arg = &lease}, {.fn = look, .arg = &crypt}};
    (void)st_parallel_run(calls, 3); /* each result is looked at below */
    if (calls[2].err == ST_ERR_KEY)
        return st_seterr(ST_ERR_KEY, "%s", calls[2].msg);
    if (calls[2].err)
        vfs_log(v, 1, "cannot check whether the store is encrypted yet: %s", calls[2].msg);
    if (calls[0].err)
        vfs_log(v, 1, "cannot load the store's steps yet (the refresher keeps trying): %s",
                calls[0].msg);
    if (calls[1].err == ST_ERR_BUSY)
        return st_seterr(ST_ERR_BUSY, "%s", calls[1].msg);
    if (calls[1].err)
        vfs_log(v, 1,
                "cannot read the lease of node '%s' yet (%s); checked again before publishing",
                v->node, calls[1].msg);
    return ST_OK;
}

/* An option with two values: value (NULL: the first) sets *is_second to 1 if
 * it is the second, 0 if the first; anything else is ST_ERR_INVALID. */
static st_err option_choice(const char *what, const char *value, const char *first,
                            const char *second, int *is_second)
{
    if (!value)
        value = first;
    *is_second = strcmp(value, second) == 0;
    if (*is_second || strcmp(value, first) == 0)
        return ST_OK;
    return st_seterr(ST_ERR_INVALID, "%s '%.32s': use %s or %s", what, value, first, second);
}

/* Loads the key file (docs/ENCRYPTION.md) and, with keys, wraps
 * v->store_backend in the envelope. */
static st_err open_encryption(st_vfs *v, const st_vfs_options *opts)
{
    const char *key_file = opts->encryption_key_file;
    if (!key_file || !*key_file)
        key_file = getenv("CKPT_ENCRYPTION_KEY_FILE");
    st_err e = key_file && *key_file ? st_keyring_load(key_file, &v->keyring) : ST_OK;
    if (e || !v->keyring)
        return e;
    /* The mixing rule is checked in first_look, under the open's bound. */
    if (opts->backend)
        return st_envelope_borrow(opts->backend, v->keyring, &v->store_backend);
    return st_envelope_wrap(&v->store_backend, v->keyring);
}

/* Wraps v->store_backend (above the envelope: it judges plaintext) in the
 * replay check over this node's STAGING/index.db (docs/ENCRYPTION.md,
 * "Replay"); the wrapper owns what it wraps unless that is opts.backend. */
static st_err open_replay_check(st_vfs *v)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/index.db", v->staging);
    if (n < 0 || (size_t)n >= sizeof path)
        return st_seterr(ST_ERR_INVALID, "staging directory path too long");
    if (v->store_backend == v->opts.backend)
        return st_replay_borrow(v->opts.backend, path, &v->store_backend);
    return st_replay_wrap(&v->store_backend, path);
}

st_err st_vfs_open(const st_vfs_options *opts, st_vfs **out)
{
    *out = NULL;
    st_vfs *v = calloc(1, sizeof *v);
    if (!v)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    v->opts = *opts;
    if (v->opts.refresh_seconds <= 0)
        v->opts.refresh_seconds = 5;
    if (v->opts.drain_seconds <= 0)
        v->opts.drain_seconds = 60;
    if (v->opts.gc_grace_seconds <= 0)
        v->opts.gc_grace_seconds = (double)ST_GC_DEFAULT_GRACE_NS / 1e9;
    if (v->opts.gc_interval_seconds <= 0)
        v->opts.gc_interval_seconds = 600;
    st_err bad = option_choice("close sync", opts->close_sync, "disk", "background",
                               &v->close_in_background);
    if (!bad)
        bad = option_choice("control access", opts->control_access, "owner", "all",
                            &v->control_public);
    if (!bad)
        bad = st_ingest_compression(opts->compression, &v->compression_lz4);
    if (bad) {
        free(v);
        return bad;
    }
    v->user = (st_vfs_owner){(uint32_t)getuid(), (uint32_t)getgid()};
    pthread_mutex_init(&v->lock, NULL);
    pthread_cond_init(&v->changed, NULL);
    vfs_health_init(v);
    v->next_sid = 1;
    v->staging_lock_fd = -1;
    st_err e = ST_OK;
    v->store_url = strdup(opts->store_url ? opts->store_url : "");
    v->staging = strdup(opts->staging_dir);
    if (!v->store_url || !v->staging) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (opts->node) {
        if (!st_name_is_valid(opts->node, ST_NODE_MAX)) {
            e = st_seterr(ST_ERR_INVALID, "invalid node name '%.64s'", opts->node);
            goto fail;
        }
        snprintf(v->node, sizeof v->node, "%s", opts->node);
    } else {
        st_default_node_name(v->node);
    }
    if ((e = st_steprules_new(opts->step_pattern, &v->rules)) ||
        (e = st_bundlecache_new(ST_BUNDLECACHE_MOUNT, &v->bundle_cache)))
        goto fail;
    /* First: nothing in staging is touched before the lock is held. */
    if ((e = vfs_staging_take(v)) || (e = vfs_spare_open(v)))
        goto fail;
    if (!v->opts.warmup_max_bytes)
        v->opts.warmup_max_bytes = vfs_staging_free_bytes(v) / 2;
    st_backend_opts bo = {.s3_endpoint = opts->s3_endpoint,
                          .s3_signature = opts->s3_signature,
                          .s3_region = opts->s3_region,
                          .s3_addressing = opts->s3_addressing,
                          .s3_ca_file = opts->s3_ca_file,
                          .s3_sse = opts->s3_sse,
                          .observer = &v->health.observer};
#ifdef CKPT_TEST_HOOKS
    const char *fault = getenv("CKPT_FAULT"); /* test builds only: st_backend_fault.h */
    if (fault && *fault && !opts->backend)
        vfs_log(v, 1, "test hook: CKPT_FAULT=%.200s wraps the store", fault);
#else
    const char *fault = NULL; /* a test run against this build must not pass by accident */
    if (getenv("CKPT_FAULT"))
        vfs_log(v, 2, "CKPT_FAULT is set but IGNORED: built without -DCKPT_TEST_HOOKS=ON");
#endif
    if (opts->backend)
        v->store_backend = opts->backend; /* borrowed: see st_vfs_options */
    else if ((e = st_backend_open_opts(opts->store_url, &bo, &v->store_backend)))
        goto fail;
    v->retry_backend = opts->backend ? NULL : v->store_backend;
    if (!opts->backend && fault && *fault && (e = st_backend_fault_wrap(&v->store_backend, fault)))
        goto fail;
    if ((e = open_encryption(v, opts)) || (e = open_replay_check(v)))
        goto fail;
    /* inodes 0 (unused), 1 root; 2 to ST_VFS_LAST_CTL_INO are the virtual
     * control entries */
    /* Counted outermost: one request per call the mount makes, whatever
     * the retries and the injected faults did below it. */
    if ((e = st_backend_count_borrow(v->store_backend, &v->requests, &v->backend)))
        goto fail;
    /* inodes 0 (unused), 1 root; 2 to 5 are the virtual control entries */
    v->ninodes = 1;
    if (!(v->root = vfs_node_new(v, NULL, "", S_IFDIR | 0755))) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto fail;
    }
    v->root->nsubdirs = 1; /* .ckptfs, not among its kids */
    v->ninodes = ST_VFS_LAST_CTL_INO + 1;
    pthread_mutex_lock(&v->lock);
    e = vfs_journal_open(v);
    if (!e)
        e = recover(v);
    if (!e)
        e = vfs_journal_mark_boot(v);
    pthread_mutex_unlock(&v->lock);
    if (e)
        goto fail;
    if ((e = vfs_peers_open(v)) || (e = vfs_lease_open(v)) || (e = first_look(v)))
        goto fail;
    *out = v;
    return ST_OK;
fail:
    st_vfs_close(v);
    return e;
}

/* The background threads (the uploader: seal and PUTs; the refresher; gc)
 * run VFS_BACKGROUND_NICE steps nicer than the daemon, and the threads they
 * start (the ingest's upload workers) inherit it: a trainer's save, served by
 * libfuse's threads at the daemon's own priority, must not wait behind the
 * chunking, hashing and compression of earlier steps (docs/MOUNT_MODEL.md,
 * "Background work yields to the writer"). On Linux the nice value is a
 * thread's own (setpriority of its tid). It only lowers the share of the
 * CPU the background gets while the writer runs: alone, it has all of it. */
#define VFS_BACKGROUND_NICE 5

typedef struct background_start {
    void *(*body)(void *);
    st_vfs *v;
    char name[16]; /* the thread's name (top -H, /proc/PID/task/TID/comm) */
} background_start;

static void *background_main(void *arg)
{
    background_start start = *(background_start *)arg;
    free(arg);
    (void)pthread_setname_np(pthread_self(), start.name);
    st_thread_nicer(VFS_BACKGROUND_NICE, 0);
    return start.body(start.v);
}

static st_err start_thread(pthread_t *t, int *started, void *(*body)(void *), st_vfs *v,
                           const char *what)
{
    background_start *start = malloc(sizeof *start);
    if (!start)
        return st_seterr(ST_ERR_NOMEM, "cannot start the %s thread", what);
    start->body = body;
    start->v = v;
    snprintf(start->name, sizeof start->name, "ckpt-%s", what);
    if (pthread_create(t, NULL, background_main, start) != 0) {
        free(start);
        return st_seterr(ST_ERR_NOMEM, "cannot start the %s thread", what);
    }
    *started = 1;
    return ST_OK;
}

/* Tells every background thread to stop (they all watch v->stopping) and
 * joins this one. */
static void stop_thread(st_vfs *v, pthread_t t, int *started)
{
    if (!*started)
        return;
    pthread_mutex_lock(&v->lock);
    v->stopping = 1;
    pthread_cond_broadcast(&v->changed);
    pthread_mutex_unlock(&v->lock);
    pthread_join(t, NULL);
    *started = 0;
}

st_err st_vfs_start(st_vfs *v)
{
    vfs_staging_mark_pid(v);
    st_err e = start_thread(&v->uploader, &v->uploader_started, vfs_uploader_main, v, "uploader");
    if (!e)
        e = start_thread(&v->refresher, &v->refresher_started, vfs_refresher_main, v, "refresher");
    if (!e && v->opts.gc_enabled)
        e = start_thread(&v->gc, &v->gc_started, vfs_gc_main, v, "gc");
    return e;
}

void st_vfs_close(st_vfs *v)
{
    if (!v)
        return;
    v->gc_stop = 1; /* a GC run under way ends after its current batch */
    /* Handles the kernel never released: a SIGTERM ends the connection with
     * files open, and no close() of theirs can succeed any more. Released
     * here before R8 looks at the steps, so a file cut off mid-write holds
     * its step back now and after a restart (unacknowledged_release), and a
     * deferred sync of an acknowledged close still runs. No FUSE request
     * runs any more, and no other thread touches the list. */
    while (v->open_handles)
        st_vfs_release(v, v->open_handles);
    if (v->uploader_started) {
        /* Draining before R8 queues the steps it completes: the newest of
         * them goes first (docs/SHUTDOWN.md, "SIGTERM and unmount"). */
        st_vfs_drain(v);
        st_vfs_complete_all(v, NULL, 1);
        if (st_vfs_wait_idle(v, v->opts.drain_seconds) != ST_OK)
            vfs_log(v, 1, "unmounting with uploads pending; they resume at the next start");
    }
    /* Past the drain nothing waits for the store: requests in flight and
     * retry waits of every thread end within 100 ms (docs/MOUNT_MODEL.md). */
    vfs_health_stop_all(v);
    vfs_fetch_stop_all(v); /* fetches and warm-up end after their runs in flight */
    stop_thread(v, v->gc, &v->gc_started);
    stop_thread(v, v->refresher, &v->refresher_started);
    stop_thread(v, v->uploader, &v->uploader_started);
    vfs_peers_close(v);
    pthread_mutex_lock(&v->lock);
    vfs_journal_close(v);
    vfs_spare_close(v);
    vfs_kept_close(v);
    pthread_mutex_unlock(&v->lock);
    vfs_staging_let_go(v); /* last of staging: the journal is closed */
    for (uint64_t i = 0; i < v->ninodes && v->inodes; i++)
        if (v->inodes[i])
            vfs_node_free(v, v->inodes[i]);
    free(v->inodes);
    for (size_t i = 0; i < v->njobs; i++) {
        for (size_t k = 0; k < v->jobs[i].nsteps; k++)
            free(v->jobs[i].steps[k].commits);
        free(v->jobs[i].steps);
        for (size_t k = 0; k < v->jobs[i].ndels; k++)
            free(v->jobs[i].dels[k].path);
        free(v->jobs[i].dels);
    }
    free(v->jobs);
    free(v->queue);
    st_steprules_free(v->rules);
    st_bundlecache_free(v->bundle_cache);
    st_backend_close(v->backend);            /* the count wrapper only */
    if (v->store_backend != v->opts.backend) /* ours, or a wrapper of the lent one */
        st_backend_close(v->store_backend);
    st_keyring_free(v->keyring);
    free(v->store_url);
    free(v->staging);
    pthread_cond_destroy(&v->changed);
    pthread_mutex_destroy(&v->lock);
    vfs_health_destroy(v);
    free(v);
}
