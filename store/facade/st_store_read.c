/*
 * st_store_read — the facade's reading side: steps as readers see them
 * (docs/CONSISTENCY.md), the latest consistent step, restore with parallel
 * verified downloads and fallback, verify, space accounting.
 *
 * Restore stages a step (docs/CONSISTENCY.md, "Restore"): every chosen file
 * is written to a staging directory `.ckpt-restore.<pid>.<step>` under the
 * target, named by its index, and only once every file of the step has
 * verified are they renamed into place; on a failure the staging directory
 * is removed, so the target holds all of a step or nothing of it.
 *
 * The files are split into tasks of up to TASK_BYTES of chunks, cut where
 * the chunks move to another pack (a task per pack); `threads`
 * workers take tasks from a shared cursor, each with its own restorer, and
 * write with pwrite into the staged file, one worker at a time per file
 * (rfile.write_lock, see st_restore_chunks_locked() for why: not for
 * correctness, pwrites at disjoint offsets need no lock, but the kernel
 * serialises buffered writes to one inode anyway and its waiters spin, so
 * the lock costs no parallelism and saves the CPU the spinning would burn;
 * measured in df4090b, kept). A task opens
 * its file and closes it when done, so a restore holds a few descriptors
 * per worker whatever the number of files.
 *
 * The whole-file digest is computed from the decoded chunks while they are
 * in memory (st_file_digest): a chunk at the file's hashing front is hashed
 * as it is written; one that a worker ahead of the front decoded is parked
 * (the restore's budget: ST_RESTORE_PARK_MAX in all) or, over it, read
 * back from the staged file when the front gets there (read_back_bytes). The
 * worker that finishes a file's last task checks the digest and fsyncs it.
 */
#include "facade/st_store_impl.h"
#include "peer/st_peer_read.h"

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
#include "util/st_keyring.h"

/* A task ends at TASK_BYTES, or at a switch to another pack once it holds
 * half that: a file written in one go is then one task, and one streamed
 * GET, per pack (~24 MiB, ST_PACK_TARGET_SIZE). 16 MiB tasks cut across
 * packs took 52 GETs for a 20-pack file where 20 do, and each GET costs the
 * server (s3rver: ~4 ms of CPU; docs/BENCHMARKS.md, "Where restore's time
 * goes"). The 3 workers ahead of a file's hashing front park up
 * to 3 tasks; past the budget (ST_RESTORE_PARK_MAX) a chunk is read back. */
#define TASK_BYTES      (32ull << 20)
#define DEFAULT_THREADS 4

/* ---- steps ---- */

static void info_of(const st_stepview *v, st_step_info *si)
{
    *si = (st_step_info){
        .step = v->step,
        .created_ns = v->created_ns,
        .files = v->files,
        .bytes = v->bytes,
        .nodes = v->nparts,
        .consistent = v->consistent,
        .complete = v->complete,
        .world_size = v->world_size,
        .ranks = v->ranks,
    };
    snprintf(si->why, sizeof si->why, "%s", v->why);
}

st_err st_store_list_steps(st_store *s, const char *job, st_step_info **steps, size_t *n)
{
    st_step_keys *keys;
    size_t nkeys, count = 0;
    st_bytes buf = {0};
    *steps = NULL;
    *n = 0;
    st_err e = st_catalog_list_steps(s->reader, job, &keys, &nkeys);
    if (e)
        return e;
    st_step_info *out = calloc(nkeys ? nkeys : 1, sizeof *out);
    if (!out)
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    for (size_t i = 0; !e && i < nkeys; i++) {
        st_stepview v;
        if (st_catalog_load_view(s->reader, job, &keys[i], &buf, &v)) {
            /* A row all the same: a step nobody can read is news to whoever
             * lists the job, not something to leave out. */
            st_step_info *si = &out[count++];
            memset(si, 0, sizeof *si);
            si->step = keys[i].step;
            si->nodes = keys[i].nnodes;
            si->unreadable = 1;
            snprintf(si->why, sizeof si->why, "unreadable: %s", st_errmsg());
            st_store_warnf(s, "step %" PRIu64 ": %s", keys[i].step, st_errmsg());
            continue;
        }
        info_of(&v, &out[count]);
        out[count++].replicated = st_store_step_replicated(s, job, keys[i].step);
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

int st_store_peers_alone(const st_store *s)
{
    return s->peers_alone;
}

int st_store_step_replicated(st_store *s, const char *job, uint64_t step)
{
    return st_peer_read_is_replicated(s->reader, job, step, NULL);
}

static void warn_unreadable(void *arg, uint64_t step, const char *msg)
{
    st_store_warnf(arg, "step %" PRIu64 ": %s", step, msg);
}

/* Loads the view of the newest consistent step strictly below `below`;
 * unreadable steps are warned about and skipped. */
static st_err newest_consistent(st_store *s, const char *job, uint64_t below, st_stepview *v)
{
    st_err e = st_catalog_newest_consistent(s->reader, job, 0, below, warn_unreadable, s, v);
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
    st_err e = st_catalog_list_steps(s->reader, job, &keys, &nkeys);
    if (e)
        return e;
    e = st_seterr(ST_ERR_NOT_FOUND, "step %" PRIu64 " of job %s is not in the store", step, job);
    for (size_t i = 0; i < nkeys; i++)
        if (keys[i].step == step) {
            e = st_catalog_load_view(s->reader, job, &keys[i], &buf, v);
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
    char staged[24];            /* its name in the staging directory: its index */
    pthread_mutex_t write_lock; /* held for each pwrite to it; lives while workers run */
    size_t first_task, ntasks;  /* its tasks: consecutive in rjob.tasks */
    st_file_digest *digest;     /* fed by every task's chunks; thread-safe */
    st_side_chunks *sides;      /* its side chunks, shared by its tasks (NULL: none) */
    size_t tasks_done;          /* guarded by the job lock */
} rfile;

typedef struct rtask {
    size_t file;
    size_t first, count;
    uint64_t bytes; /* raw bytes */
    int done;       /* guarded by the job lock */
} rtask;

typedef struct rjob {
    st_backend *backend;
    const st_keyring *kr; /* opens sealed packs; NULL: a plain store */
    const char *job;
    int stage_fd; /* the staging directory; every file is written there */
    rfile *files;
    size_t nfiles;
    rtask *tasks;
    size_t ntasks, next;
    pthread_mutex_t lock;
    st_err err;
    char msg[512];
    uint64_t done, total, gets, read_back;
    st_park_budget park; /* of every file's digest */
    /* Decoded bundles of small files (manifest version 3), shared by the
     * workers: consecutive files of one bundle go to different workers,
     * and each bundle is fetched once (ST_BUNDLECACHE_PER_WORKER each). */
    st_bundlecache *bundles;
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

/* Every task of a staged file is done: check its digest and persist it (fd:
 * open on it). It stays in the staging directory until the whole step is
 * verified. */
static st_err finish_file(rjob *j, rfile *rf, int fd)
{
    const st_file_entry *f = rf->f;
    st_err e = st_file_digest_finish(rf->digest, fd);
    pthread_mutex_lock(&j->lock);
    j->read_back += st_file_digest_stats_of(rf->digest).read_back;
    pthread_mutex_unlock(&j->lock);
    if (!e) {
        struct timespec times[2] = {{0, UTIME_OMIT},
                                    {f->mtime_ns / 1000000000, f->mtime_ns % 1000000000}};
        if (fchmod(fd, f->mode & 07777) < 0 || futimens(fd, times) < 0 || fsync(fd) < 0)
            e = st_seterr(ST_ERR_IO, "finish %s: %s", f->path, strerror(errno));
    }
    return e;
}

/* Opens rf's staged file for one task. The descriptor lives only as long as
 * the task: a restore holds at most one per worker, whatever the file count. */
static st_err open_staged(const rjob *j, const rfile *rf, int *fd)
{
    *fd = openat(j->stage_fd, rf->staged, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (*fd < 0)
        return st_seterr(ST_ERR_IO, "open the staged copy of %s: %s", rf->f->path, strerror(errno));
    return ST_OK;
}

/* Fetches task t into its file (hashing it as it goes); the last task of
 * the file finishes it. */
static st_err run_task(rjob *j, st_restorer *rs, rtask *t)
{
    rfile *rf = &j->files[t->file];
    int fd;
    st_err e = open_staged(j, rf, &fd);
    if (e)
        return e;
    uint64_t gets_before = st_restorer_stats(rs)->gets;
    const st_restore_to to = {
        .write_lock = &rf->write_lock, .digest = rf->digest, .sides = rf->sides};
    e = st_restore_chunks_to(rs, rf->m, rf->f, t->first, t->count, fd, &to);
    pthread_mutex_lock(&j->lock);
    j->gets += st_restorer_stats(rs)->gets - gets_before;
    int last = 0;
    if (!e) {
        t->done = 1;
        j->done += t->bytes;
        if (j->progress)
            j->progress(j->progress_arg, j->done, j->total);
        last = ++rf->tasks_done == rf->ntasks;
    }
    pthread_mutex_unlock(&j->lock);
    if (last) {
        e = finish_file(j, rf, fd);
        /* no task of the file is left to take a side chunk */
        st_side_chunks_free(rf->sides);
        rf->sides = NULL;
    }
    close(fd);
    return e;
}

static void *restore_worker(void *arg)
{
    rjob *j = arg;
    st_restorer *rs = NULL;
    st_err e = st_restorer_new(j->backend, j->job, &rs);
    if (e) {
        rjob_fail(j, e);
    } else {
        st_restorer_share_bundles(rs, j->bundles);
        st_restorer_set_keyring(rs, j->kr);
    }
    while (!e) {
        pthread_mutex_lock(&j->lock);
        if (j->err || j->next == j->ntasks) {
            pthread_mutex_unlock(&j->lock);
            break;
        }
        rtask *t = &j->tasks[j->next++];
        pthread_mutex_unlock(&j->lock);
        if ((e = run_task(j, rs, t)))
            rjob_fail(j, e);
    }
    st_restorer_free(rs);
    return NULL;
}

/* Creates rf's staged file, sized, in the staging directory (closed again). */
static st_err create_staged(const rjob *j, rfile *rf, size_t index)
{
    snprintf(rf->staged, sizeof rf->staged, "%zu", index);
    int fd =
        openat(j->stage_fd, rf->staged, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    st_err e = ST_OK;
    if (fd < 0 || ftruncate(fd, (off_t)rf->f->size) < 0)
        e = st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "stage %s: %s", rf->f->path,
                      strerror(errno));
    if (fd >= 0)
        close(fd);
    return e;
}

/* Splits every file into tasks (TASK_BYTES: of a pack each, where it can). */
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
            while (first + count < f->nchunks &&
                   (count == 0 || (bytes < TASK_BYTES &&
                                   !st_restore_ends_at_pack(f, first + count, bytes, TASK_BYTES))))
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

/* Picks the files of v selected by rank (one version per path: v->entries)
 * and stages an empty copy of each. */
static st_err collect_files(rjob *j, const st_stepview *v, int rank)
{
    size_t cap = 0;
    for (size_t i = 0; i < v->nentries; i++) {
        const st_file_entry *f = v->entries[i].f;
        if (rank >= 0 && f->rank != rank)
            continue;
        if (st_array_grow((void **)&j->files, &cap, j->nfiles + 1, sizeof *j->files))
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        rfile *rf = &j->files[j->nfiles++];
        memset(rf, 0, sizeof *rf);
        rf->m = v->entries[i].m;
        rf->f = f;
        st_err e = st_file_digest_new(f, &j->park, &rf->digest);
        if (!e)
            e = st_side_chunks_new(rf->m, f, &rf->sides);
        if (!e)
            e = create_staged(j, rf, j->nfiles - 1);
        if (e)
            return e;
    }
    return ST_OK;
}

/* Runs the tasks of j on `threads` workers (0: DEFAULT_THREADS). */
static st_err fetch_all(rjob *j, unsigned threads)
{
    if (!j->ntasks)
        return ST_OK;
    unsigned nthreads = threads ? threads : DEFAULT_THREADS;
    if (nthreads > j->ntasks)
        nthreads = (unsigned)j->ntasks;
    st_err e = st_bundlecache_new((size_t)nthreads * ST_BUNDLECACHE_PER_WORKER, &j->bundles);
    if (e)
        return e;
    /* Here, not while j->files still grows: a mutex must not move. */
    for (size_t i = 0; i < j->nfiles; i++)
        pthread_mutex_init(&j->files[i].write_lock, NULL);
    pthread_t *th = calloc(nthreads, sizeof *th);
    unsigned started = 0;
    for (; th && started < nthreads; started++)
        if (pthread_create(&th[started], NULL, restore_worker, j) != 0)
            break;
    if (!started)
        restore_worker(j); /* no thread could start: restore here */
    for (unsigned i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    free(th);
    for (size_t i = 0; i < j->nfiles; i++)
        pthread_mutex_destroy(&j->files[i].write_lock);
    st_bundlecache_free(j->bundles);
    j->bundles = NULL;
    return j->err ? st_seterr(j->err, "%s", j->msg) : ST_OK;
}

/* The target's directories that the commit opened: the current one is kept
 * open (files of a directory come together), each is fsynced when left. */
typedef struct commit_dir {
    int fd;
    char path[PATH_MAX];
} commit_dir;

static st_err commit_dir_leave(commit_dir *d)
{
    st_err e = ST_OK;
    if (d->fd >= 0 && fsync(d->fd) < 0)
        e = st_seterr(ST_ERR_IO, "fsync %s: %s", d->path[0] ? d->path : ".", strerror(errno));
    if (d->fd >= 0)
        close(d->fd);
    d->fd = -1;
    return e;
}

/* Opens (creating it and its parents) the directory of path under dest_fd. */
static st_err commit_dir_enter(commit_dir *d, int dest_fd, const char *path)
{
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (d->fd >= 0 && strlen(d->path) == n && !strncmp(d->path, path, n))
        return ST_OK;
    st_err e = commit_dir_leave(d);
    if (e)
        return e;
    snprintf(d->path, sizeof d->path, "%.*s", (int)n, path);
    if (!n)
        d->fd = dup(dest_fd);
    else {
        /* "<dir>/." opens <dir> itself, creating every component before it
         * (manifest paths are clean: "." is never a name of theirs). */
        char rel[sizeof d->path + 2];
        snprintf(rel, sizeof rel, "%s/.", d->path);
        d->fd = st_open_beneath(dest_fd, rel, O_RDONLY | O_DIRECTORY, 0, 1, NULL);
    }
    if (d->fd < 0)
        return st_seterr(ST_ERR_IO, "create directory %s in the target: %s", d->path,
                         strerror(errno));
    return ST_OK;
}

/*
 * Every file of the step is verified and fsynced in the staging directory:
 * renames each into place, then fsyncs the directories. If a rename fails,
 * the files already placed are removed again, so a failed restore leaves
 * nothing of the step (docs/CONSISTENCY.md, "Restore").
 */
static st_err commit_files(rjob *j, int dest_fd)
{
    commit_dir d = {.fd = -1};
    size_t placed = 0;
    st_err e = ST_OK;
    for (; placed < j->nfiles && !e; placed++) {
        const char *path = j->files[placed].f->path, *slash = strrchr(path, '/');
        if ((e = commit_dir_enter(&d, dest_fd, path)))
            break;
        if (renameat(j->stage_fd, j->files[placed].staged, d.fd, slash ? slash + 1 : path) < 0) {
            e = st_seterr(ST_ERR_IO, "rename into place %s: %s", path, strerror(errno));
            break;
        }
    }
    if (!e)
        e = commit_dir_leave(&d);
    if (e) {
        commit_dir_leave(&d);
        for (size_t i = 0; i < placed; i++) {
            int parent = -1, fd = st_open_beneath(dest_fd, j->files[i].f->path,
                                                  O_RDONLY | O_NONBLOCK, 0, 0, &parent);
            if (fd >= 0) {
                close(fd);
                const char *slash = strrchr(j->files[i].f->path, '/');
                unlinkat(parent, slash ? slash + 1 : j->files[i].f->path, 0);
                close(parent);
            }
        }
    }
    return e;
}

/* Removes the staging directory `name` under dest_fd and what is left in it
 * (nothing after a commit; the staged files after a failure). */
static void remove_stage(rjob *j, int dest_fd, const char *name)
{
    for (size_t i = 0; j->stage_fd >= 0 && i < j->nfiles; i++)
        unlinkat(j->stage_fd, j->files[i].staged, 0); /* ENOENT once renamed */
    if (j->stage_fd >= 0)
        close(j->stage_fd);
    j->stage_fd = -1;
    unlinkat(dest_fd, name, AT_REMOVEDIR);
}

/*
 * Restores the files of v selected by rank into dest: every file is fetched,
 * verified and fsynced in a staging directory under dest, and only once the
 * whole step has verified are they renamed into place; on any failure the
 * staging directory is removed and dest holds nothing of the step.
 */
static st_err restore_view(st_store *s, const char *job, const st_stepview *v, const char *dest,
                           const st_restore_opts *o, st_restore_result *res)
{
    rjob j = {.backend = s->reader,
              .kr = s->keyring,
              .job = job,
              .stage_fd = -1,
              .park = ST_PARK_BUDGET_INIT(ST_RESTORE_PARK_MAX),
              .progress = o->progress,
              .progress_arg = o->progress_arg};
    pthread_mutex_init(&j.lock, NULL);
    char stage[64];
    int dest_fd = -1, staged = 0;
    snprintf(stage, sizeof stage, ".ckpt-restore.%ld.%" PRIu64, (long)getpid(), v->step);
    st_err e = st_stepview_check_paths(v, job); /* before anything is staged */
    if (!e)
        e = st_mkdir_p(dest);
    if (!e && (dest_fd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        e = st_seterr(ST_ERR_IO, "open %s: %s", dest, strerror(errno));
    if (!e && mkdirat(dest_fd, stage, 0700) < 0)
        e = st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "create %s/%s: %s", dest, stage,
                      strerror(errno));
    else if (!e)
        staged = 1;
    if (!e &&
        (j.stage_fd = openat(dest_fd, stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        e = st_seterr(ST_ERR_IO, "open %s/%s: %s", dest, stage, strerror(errno));
    if (!e)
        e = collect_files(&j, v, o->rank);
    if (!e)
        e = plan_tasks(&j);
    if (!e)
        e = fetch_all(&j, o->threads);
    if (!e)
        e = commit_files(&j, dest_fd);
    if (staged)
        remove_stage(&j, dest_fd, stage);
    if (!e && fsync(dest_fd) < 0)
        e = st_seterr(ST_ERR_IO, "fsync %s: %s", dest, strerror(errno));
    for (size_t i = 0; i < j.nfiles; i++) {
        st_file_digest_free(j.files[i].digest);
        st_side_chunks_free(j.files[i].sides);
    }
    if (!e) {
        res->step = v->step;
        res->files = j.nfiles;
        res->bytes = j.total;
        res->gets += j.gets;
        res->read_back += j.read_back;
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
    int devnull = -1;
    /* What restore would refuse, verify fails the same way. */
    e = st_stepview_check_paths(&v, job);
    if (!e && (devnull = open("/dev/null", O_WRONLY | O_CLOEXEC)) < 0)
        e = st_seterr(ST_ERR_IO, "open /dev/null: %s", strerror(errno));
    if (!e)
        e = st_restorer_new(s->reader, job, &rs);
    if (!e)
        st_restorer_set_keyring(rs, s->keyring);
    char first_bad[300] = "";
    /* The versions restore would give back (v.entries), not the shadowed. */
    for (size_t i = 0; !e && i < v.nentries; i++) {
        const st_file_entry *f = v.entries[i].f;
        st_err fe = st_restore_file(rs, v.entries[i].m, f, devnull);
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
    out->put = st_backend_counts_of(&s->requests, ST_REQ_PUT);
    out->get = st_backend_counts_of(&s->requests, ST_REQ_GET);
    out->stat = st_backend_counts_of(&s->requests, ST_REQ_STAT);
    out->list = st_backend_counts_of(&s->requests, ST_REQ_LIST);
    out->del = st_backend_counts_of(&s->requests, ST_REQ_DELETE);
    out->del_batch = st_backend_counts_of(&s->requests, ST_REQ_DELETE_BATCH);
}
