/*
 * st_store_read — the facade's reading side: steps as readers see them
 * (docs/CONSISTENCY.md), the latest consistent step, restore with parallel
 * verified downloads and fallback, verify, space accounting.
 *
 * Restore splits the chosen files into tasks of up to TASK_BYTES of chunks;
 * `threads` workers take tasks from a shared cursor, each with its own
 * restorer, and write with pwrite into the file's temporary name, one
 * worker at a time per file (rfile.write_lock, see
 * st_restore_chunks_locked() for why).
 *
 * The whole-file digest is computed while the file is still being fetched:
 * whenever the tasks at the front of a file's unhashed part are done, one
 * worker at a time (rfile.hashing) reads them back and feeds them to the
 * file's digest, so only the last tasks are left to read back at the end,
 * rather than the whole file by one thread while the others sit idle. The
 * worker whose hashing reaches the end of the file checks the digest, fsyncs
 * the file and renames it into place, so a file appears under its name only
 * whole and verified.
 */
#include "facade/st_store_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_array.h"
#include "util/st_fsutil.h"
#include "engine/st_restore.h"
#include "engine/st_catalog.h"

#define TASK_BYTES      (64ull << 20)
#define DEFAULT_THREADS 4

/* ---- steps ---- */

static void info_of(const st_stepview *v, st_step_info *si)
{
    memset(si, 0, sizeof *si);
    si->step = v->step;
    si->created_ns = v->created_ns;
    si->files = v->files;
    si->bytes = v->bytes;
    si->nodes = v->nparts;
    si->consistent = v->consistent;
    si->complete = v->complete;
    si->world_size = v->world_size;
    si->ranks = v->ranks;
    snprintf(si->why, sizeof si->why, "%s", v->why);
}

st_err st_store_list_steps(st_store *s, const char *job, st_step_info **steps, size_t *n)
{
    st_step_keys *keys;
    size_t nkeys, count = 0;
    st_bytes buf = {0};
    *steps = NULL;
    *n = 0;
    st_err e = st_catalog_list_steps(s->backend, job, &keys, &nkeys);
    if (e)
        return e;
    st_step_info *out = calloc(nkeys ? nkeys : 1, sizeof *out);
    if (!out)
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !e && i < nkeys; i++) {
        st_stepview v;
        if (st_catalog_load_view(s->backend, job, &keys[i], &buf, &v)) {
            st_store_warnf(s, "step %" PRIu64 ": %s", keys[i].step, st_errmsg());
            continue;
        }
        info_of(&v, &out[count++]);
        st_stepview_free(&v);
    }
    st_step_keys_free(keys, nkeys);
    st_bytes_free(&buf);
    if (e) {
        free(out);
        return e;
    }
    *steps = out;
    *n = count;
    return ST_OK;
}

static void warn_unreadable(void *arg, uint64_t step, const char *msg)
{
    st_store_warnf(arg, "step %" PRIu64 ": %s", step, msg);
}

/* Loads the view of the newest consistent step strictly below `below`;
 * unreadable steps are warned about and skipped. */
static st_err newest_consistent(st_store *s, const char *job, uint64_t below, st_stepview *v)
{
    st_err e = st_catalog_newest_consistent(s->backend, job, 0, below, warn_unreadable, s, v);
    if (e == ST_ERR_NOT_FOUND)
        st_seterr(e, "job %s has no consistent step%s", job,
                  below == UINT64_MAX ? "" : " before that");
    return e;
}

st_err st_store_latest(st_store *s, const char *job, uint64_t *step)
{
    st_stepview v;
    st_err e = newest_consistent(s, job, UINT64_MAX, &v);
    if (!e) {
        *step = v.step;
        st_stepview_free(&v);
    }
    return e;
}

/* Loads the view of one step; ST_ERR_NOT_FOUND unless it has parts. */
static st_err load_step(st_store *s, const char *job, uint64_t step, st_stepview *v)
{
    st_step_keys *keys;
    size_t nkeys;
    st_bytes buf = {0};
    st_err e = st_catalog_list_steps(s->backend, job, &keys, &nkeys);
    if (e)
        return e;
    e = st_seterr(ST_ERR_NOT_FOUND, "step %" PRIu64 " of job %s is not in the store", step, job);
    for (size_t i = 0; i < nkeys; i++)
        if (keys[i].step == step) {
            e = st_catalog_load_view(s->backend, job, &keys[i], &buf, v);
            break;
        }
    st_step_keys_free(keys, nkeys);
    st_bytes_free(&buf);
    return e;
}

/* ---- restore ---- */

typedef struct rfile {
    const st_manifest *m;
    const st_file_entry *f;
    int parent_fd;
    char tmp[NAME_MAX + 1];
    const char *base;
    int fd;
    pthread_mutex_t write_lock; /* held for each pwrite to fd; lives while workers run */
    size_t first_task, ntasks;  /* its tasks: consecutive in rjob.tasks */
    st_hasher digest;           /* of bytes [0, hashed); used by the worker that set hashing */
    int digest_init;
    /* guarded by the job lock: */
    size_t tasks_hashed; /* its first tasks_hashed tasks are in digest */
    uint64_t hashed;
    int hashing; /* a worker is adding done tasks to digest */
} rfile;

typedef struct rtask {
    size_t file;
    size_t first, count;
    uint64_t bytes; /* raw bytes */
    int done;       /* guarded by the job lock */
} rtask;

typedef struct rjob {
    st_backend *backend;
    const char *job;
    rfile *files;
    size_t nfiles;
    rtask *tasks;
    size_t ntasks, next;
    pthread_mutex_t lock;
    st_err err;
    char msg[512];
    uint64_t done, total, gets;
    void (*progress)(void *, uint64_t, uint64_t);
    void *progress_arg;
} rjob;

static void rjob_fail(rjob *j, st_err e)
{
    pthread_mutex_lock(&j->lock);
    if (!j->err) {
        j->err = e;
        snprintf(j->msg, sizeof j->msg, "%s", st_errmsg());
    }
    pthread_mutex_unlock(&j->lock);
}

/* A file is whole and hashed: check, persist and publish it. */
static st_err finish_file(rfile *rf)
{
    const st_file_entry *f = rf->f;
    st_err e = st_restore_digest_check(&rf->digest, rf->hashed, f);
    if (!e) {
        struct timespec times[2] = {{0, UTIME_OMIT},
                                    {f->mtime_ns / 1000000000, f->mtime_ns % 1000000000}};
        if (fchmod(rf->fd, f->mode & 07777) < 0 || futimens(rf->fd, times) < 0 || fsync(rf->fd) < 0)
            e = st_seterr(ST_ERR_IO, "finish %s: %s", f->path, strerror(errno));
    }
    if (!e && renameat(rf->parent_fd, rf->tmp, rf->parent_fd, rf->base) < 0)
        e = st_seterr(ST_ERR_IO, "rename into place %s: %s", f->path, strerror(errno));
    return e;
}

/* Under the job lock: takes rf's hashing if its next unhashed task is done. */
static int claim_hashing(rjob *j, rfile *rf)
{
    if (rf->hashing || rf->tasks_hashed == rf->ntasks ||
        !j->tasks[rf->first_task + rf->tasks_hashed].done)
        return 0;
    rf->hashing = 1;
    return 1;
}

/*
 * Holding rf's hashing: feeds its done tasks, in file order, to its digest
 * until the next one is not done, then gives hashing up. The worker that
 * hashes the last task finishes the file.
 */
static st_err advance_digest(rjob *j, rfile *rf)
{
    for (;;) {
        pthread_mutex_lock(&j->lock);
        size_t k = rf->tasks_hashed;
        uint64_t off = rf->hashed, len = 0;
        while (k < rf->ntasks && j->tasks[rf->first_task + k].done)
            len += j->tasks[rf->first_task + k++].bytes;
        if (k == rf->tasks_hashed) {
            rf->hashing = 0;
            pthread_mutex_unlock(&j->lock);
            return ST_OK;
        }
        pthread_mutex_unlock(&j->lock);
        st_err e = st_restore_digest_range(rf->fd, rf->f, &rf->digest, off, len);
        pthread_mutex_lock(&j->lock);
        if (!e) {
            rf->tasks_hashed = k;
            rf->hashed += len;
        }
        int whole = !e && k == rf->ntasks;
        if (e || whole)
            rf->hashing = 0;
        pthread_mutex_unlock(&j->lock);
        if (e || whole)
            return e ? e : finish_file(rf);
    }
}

static void *restore_worker(void *arg)
{
    rjob *j = arg;
    st_restorer *rs = NULL;
    st_err e = st_restorer_new(j->backend, j->job, &rs);
    if (e)
        rjob_fail(j, e);
    while (!e) {
        pthread_mutex_lock(&j->lock);
        if (j->err || j->next == j->ntasks) {
            pthread_mutex_unlock(&j->lock);
            break;
        }
        rtask *t = &j->tasks[j->next++];
        pthread_mutex_unlock(&j->lock);
        rfile *rf = &j->files[t->file];
        uint64_t gets_before = st_restorer_stats(rs)->gets;
        e = st_restore_chunks_locked(rs, rf->m, rf->f, t->first, t->count, rf->fd, &rf->write_lock);
        pthread_mutex_lock(&j->lock);
        j->gets += st_restorer_stats(rs)->gets - gets_before;
        int hash = 0;
        if (!e) {
            t->done = 1;
            j->done += t->bytes;
            if (j->progress)
                j->progress(j->progress_arg, j->done, j->total);
            hash = claim_hashing(j, rf);
        }
        pthread_mutex_unlock(&j->lock);
        if (hash)
            e = advance_digest(j, rf);
        if (e)
            rjob_fail(j, e);
    }
    st_restorer_free(rs);
    return NULL;
}

/* Creates rf's temporary file (and its directories) under dest_fd. */
static st_err open_temp(rfile *rf, int dest_fd, unsigned serial)
{
    const char *path = rf->f->path;
    const char *slash = strrchr(path, '/');
    char rel[PATH_MAX];
    rf->base = slash ? slash + 1 : path;
    snprintf(rf->tmp, sizeof rf->tmp, ".ckpt-restore.%ld.%u", (long)getpid(), serial);
    snprintf(rel, sizeof rel, "%.*s%s", slash ? (int)(slash - path) + 1 : 0, path, rf->tmp);
    rf->fd = st_open_beneath(dest_fd, rel, O_RDWR | O_CREAT | O_EXCL, 0600, 1, &rf->parent_fd);
    if (rf->fd < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO,
                         "create %s in the target directory: %s", rel, strerror(errno));
    if (ftruncate(rf->fd, (off_t)rf->f->size) < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "size %s: %s", path,
                         strerror(errno));
    return ST_OK;
}

/* Splits every file into tasks of about TASK_BYTES. */
static st_err plan_tasks(rjob *j)
{
    size_t cap = 0;
    for (size_t i = 0; i < j->nfiles; i++) {
        const st_file_entry *f = j->files[i].f;
        size_t first = 0;
        j->files[i].first_task = j->ntasks;
        do {
            uint64_t bytes = 0;
            size_t count = 0;
            while (first + count < f->nchunks && (count == 0 || bytes < TASK_BYTES))
                bytes += f->chunks[first + count++].raw_len;
            st_err e = st_array_grow((void **)&j->tasks, &cap, j->ntasks + 1, sizeof *j->tasks);
            if (e)
                return e;
            j->tasks[j->ntasks++] = (rtask){i, first, count, bytes, 0};
            j->files[i].ntasks++;
            first += count;
        } while (first < f->nchunks);
        j->total += f->size;
    }
    return ST_OK;
}

/* Restores the files of v selected by rank into dest. */
static st_err restore_view(st_store *s, const char *job, const st_stepview *v, const char *dest,
                           const st_restore_opts *o, st_restore_result *res)
{
    rjob j = {.backend = s->backend,
              .job = job,
              .progress = o->progress,
              .progress_arg = o->progress_arg};
    pthread_mutex_init(&j.lock, NULL);
    size_t cap = 0;
    int dest_fd = -1;
    st_err e = st_mkdir_p(dest);
    if (!e && (dest_fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        e = st_seterr(ST_ERR_IO, "open %s: %s", dest, strerror(errno));
    for (size_t p = 0; !e && p < v->nparts; p++)
        for (size_t k = 0; !e && k < v->manifests[p].nfiles; k++) {
            const st_file_entry *f = &v->manifests[p].files[k];
            if (o->rank >= 0 && f->rank != o->rank)
                continue;
            if ((e = st_array_grow((void **)&j.files, &cap, j.nfiles + 1, sizeof *j.files)))
                break;
            rfile *rf = &j.files[j.nfiles++];
            memset(rf, 0, sizeof *rf);
            rf->m = &v->manifests[p];
            rf->f = f;
            rf->parent_fd = -1;
            if (st_hasher_init(&rf->digest))
                e = st_seterr(ST_ERR_NOMEM, "out of memory");
            else
                rf->digest_init = 1;
            if (!e)
                e = open_temp(rf, dest_fd, (unsigned)j.nfiles);
        }
    if (!e)
        e = plan_tasks(&j);
    if (!e && j.ntasks) {
        unsigned nthreads = o->threads ? o->threads : DEFAULT_THREADS;
        if (nthreads > j.ntasks)
            nthreads = (unsigned)j.ntasks;
        /* Here, not while j.files still grows: a mutex must not move. */
        for (size_t i = 0; i < j.nfiles; i++)
            pthread_mutex_init(&j.files[i].write_lock, NULL);
        pthread_t *th = calloc(nthreads, sizeof *th);
        unsigned started = 0;
        for (; th && started < nthreads; started++)
            if (pthread_create(&th[started], NULL, restore_worker, &j) != 0)
                break;
        if (!started)
            restore_worker(&j); /* no thread could start: restore here */
        for (unsigned i = 0; i < started; i++)
            pthread_join(th[i], NULL);
        free(th);
        for (size_t i = 0; i < j.nfiles; i++)
            pthread_mutex_destroy(&j.files[i].write_lock);
        if (j.err)
            e = st_seterr(j.err, "%s", j.msg);
    }
    if (!e && dest_fd >= 0 && fsync(dest_fd) < 0)
        e = st_seterr(ST_ERR_IO, "fsync %s: %s", dest, strerror(errno));
    for (size_t i = 0; i < j.nfiles; i++) {
        rfile *rf = &j.files[i];
        if (rf->fd >= 0 && rf->parent_fd >= 0) {
            close(rf->fd);
            unlinkat(rf->parent_fd, rf->tmp, 0); /* gone after a successful rename */
        }
        if (rf->parent_fd >= 0)
            close(rf->parent_fd);
        if (rf->digest_init)
            st_hasher_free(&rf->digest);
    }
    if (!e) {
        res->step = v->step;
        res->files = j.nfiles;
        res->bytes = j.total;
        res->gets += j.gets;
    }
    if (dest_fd >= 0)
        close(dest_fd);
    free(j.files);
    free(j.tasks);
    pthread_mutex_destroy(&j.lock);
    return e;
}

st_err st_store_restore(st_store *s, const char *job, uint64_t step, const char *dest,
                        const st_restore_opts *opts, st_restore_result *res)
{
    st_restore_opts o = opts ? *opts : (st_restore_opts){.rank = -1};
    st_restore_result r;
    memset(&r, 0, sizeof r);
    st_stepview v;
    st_err e = o.latest ? newest_consistent(s, job, UINT64_MAX, &v) : load_step(s, job, step, &v);
    if (e)
        return e;
    if (!v.consistent) {
        e = st_seterr(ST_ERR_NOT_FOUND, "step %" PRIu64 " of job %s is not consistent: %s", v.step,
                      job, v.why);
        st_stepview_free(&v);
        return e;
    }
    e = restore_view(s, job, &v, dest, &o, &r);
    if (e == ST_ERR_CORRUPT && o.latest && !o.no_fallback) {
        /* The latest consistent step is damaged: say so, take the one before. */
        r.fell_back = 1;
        r.failed_step = v.step;
        snprintf(r.failure, sizeof r.failure, "%s", st_errmsg());
        uint64_t below = v.step;
        st_stepview_free(&v);
        e = newest_consistent(s, job, below, &v);
        if (e)
            return st_seterr(ST_ERR_CORRUPT,
                             "step %" PRIu64 " failed verification and no older "
                             "consistent step exists: %s",
                             below, r.failure);
        e = restore_view(s, job, &v, dest, &o, &r);
    }
    st_stepview_free(&v);
    if (!e && res)
        *res = r;
    return e;
}

/* ---- verify ---- */

st_err st_store_verify(st_store *s, const char *job, uint64_t step, st_verify_result *res)
{
    st_stepview v;
    st_verify_result r = {0};
    st_restorer *rs = NULL;
    st_err e = load_step(s, job, step, &v);
    if (e)
        return e;
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devnull < 0)
        e = st_seterr(ST_ERR_IO, "open /dev/null: %s", strerror(errno));
    if (!e)
        e = st_restorer_new(s->backend, job, &rs);
    char first_bad[300] = "";
    for (size_t p = 0; !e && p < v.nparts; p++)
        for (size_t k = 0; k < v.manifests[p].nfiles; k++) {
            const st_file_entry *f = &v.manifests[p].files[k];
            st_err fe = st_restore_file(rs, &v.manifests[p], f, devnull);
            r.files++;
            r.chunks += f->nchunks;
            r.bytes += f->size;
            if (fe == ST_ERR_CORRUPT) {
                if (!r.bad_files++)
                    snprintf(first_bad, sizeof first_bad, "%s", st_errmsg());
            } else if (fe) {
                e = fe;
                break;
            }
        }
    if (!e && r.bad_files)
        e = st_seterr(ST_ERR_CORRUPT,
                      "%" PRIu64 " of %" PRIu64 " files failed verification; "
                      "first: %s",
                      r.bad_files, r.files, first_bad);
    if (res)
        *res = r;
    st_restorer_free(rs);
    if (devnull >= 0)
        close(devnull);
    st_stepview_free(&v);
    return e;
}

/* ---- stats ---- */

typedef struct stats_ctx {
    st_store_stats *st;
} stats_ctx;

static int count_object(void *arg, const char *key, uint64_t size)
{
    stats_ctx *c = arg;
    size_t len = strlen(key);
    if (len > 5 && !strcmp(key + len - 5, ".pack")) {
        c->st->packs++;
        c->st->stored_bytes += size;
    } else if (len > 9 && !strcmp(key + len - 9, ".manifest")) {
        c->st->manifests++;
        c->st->stored_bytes += size;
    } else if (len > 7 && !strcmp(key + len - 7, ".commit")) {
        c->st->part_records++;
        c->st->stored_bytes += size;
    }
    return 0;
}

st_err st_store_stats_job(st_store *s, const char *job, st_store_stats *out)
{
    memset(out, 0, sizeof *out);
    st_step_info *steps;
    size_t n;
    st_err e = st_store_list_steps(s, job, &steps, &n);
    if (e)
        return e;
    for (size_t i = 0; i < n; i++) {
        out->steps++;
        out->consistent_steps += steps[i].consistent;
        out->logical_bytes += steps[i].bytes;
    }
    free(steps);
    char prefix[ST_KEY_MAX];
    snprintf(prefix, sizeof prefix, "jobs/%s/", job);
    stats_ctx c = {out};
    return st_list(s->backend, prefix, count_object, &c);
}

void st_store_requests(const st_store *s, st_request_counts *out)
{
    out->put = atomic_load(&s->requests.put);
    out->get = atomic_load(&s->requests.get);
    out->stat = atomic_load(&s->requests.stat);
    out->list = atomic_load(&s->requests.list);
    out->del = atomic_load(&s->requests.del);
}
