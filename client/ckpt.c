/*
 * ckpt.c — libckpt: the public C API (include/ckpt/ckpt.h) over the store
 * engine's facade (store/ckptstore.h), plus the two calls that talk to a
 * local ckptfs mount through its control files (.ckptfs/commit, .ckptfs/status).
 *
 * Invariants: st_err codes become ckpt_codes in exactly one place
 * (code_from_st); every failing path leaves a sentence in the handle's error
 * buffer (or, for calls without a handle, in this thread's buffer) before it
 * returns. Nothing here keeps global mutable state apart from those
 * thread-local buffers.
 *
 * Threads: a ckpt_store is used by one thread at a time (the engine's st_store
 * has the same rule); the engine may run its own threads during a restore
 * and calls the progress callback from them, serialised.
 */
#include "ckpt/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_json.h"
#include "ckptstore.h"

#define ERRMSG_CAP   768
#define STATUS_MAX   (16u << 20) /* largest status file we read */
#define JOB_NAME_MAX 128         /* ST_JOB_MAX; the daemon checks the rest */

struct ckpt_store {
    st_store *st;
    char errmsg[ERRMSG_CAP]; /* the last failure with this handle */
};

/* The last failure of a call without a handle, per thread. */
static __thread char tls_errmsg[ERRMSG_CAP];

/* ---------------------------------------------------------- version, errors */

#define STR_(x) #x
#define STR(x)  STR_(x)

unsigned ckpt_version(void)
{
    return CKPT_VERSION_NUMBER;
}

const char *ckpt_version_string(void)
{
    return STR(CKPT_VERSION_MAJOR) "." STR(CKPT_VERSION_MINOR) "." STR(CKPT_VERSION_PATCH);
}

const char *ckpt_strerror(int code)
{
    switch (code) {
    case CKPT_OK: return "success";
    case CKPT_ENOTFOUND: return "not found";
    case CKPT_EINVAL: return "invalid argument";
    case CKPT_EIO: return "local I/O error";
    case CKPT_ECORRUPT: return "data failed verification";
    case CKPT_ESTORE: return "object store unreachable or refusing";
    case CKPT_ENOMEM: return "out of memory";
    case CKPT_ETIMEDOUT: return "timed out";
    case CKPT_EEXIST: return "already exists";
    case CKPT_ENOSPC: return "no space left on the local disk";
    case CKPT_EUNSUPPORTED: return "format or feature not supported by this libckpt";
    }
    return "unknown error code";
}

/* The one place where engine codes become public codes. */
static ckpt_code code_from_st(st_err e)
{
    switch (e) {
    case ST_OK: return CKPT_OK;
    case ST_ERR_NOMEM: return CKPT_ENOMEM;
    case ST_ERR_NOT_FOUND: return CKPT_ENOTFOUND;
    case ST_ERR_TRANSIENT: /* still failing after the retry wrapper gave up */
    case ST_ERR_PERMANENT: return CKPT_ESTORE;
    case ST_ERR_CORRUPT: return CKPT_ECORRUPT;
    case ST_ERR_INVALID:
    case ST_ERR_NAME: return CKPT_EINVAL;
    case ST_ERR_NOSPACE: return CKPT_ENOSPC;
    case ST_ERR_EXISTS: return CKPT_EEXIST;
    case ST_ERR_UNSUPPORTED: return CKPT_EUNSUPPORTED;
    case ST_ERR_IO:
    case ST_ERR_NOT_DIR:
    case ST_ERR_IS_DIR:
    case ST_ERR_NOT_EMPTY:
    case ST_ERR_READ_ONLY:
    case ST_ERR_BUSY:
    case ST_ERR_CROSS:
    case ST_ERR_TOO_LONG: return CKPT_EIO;
    }
    return CKPT_EIO;
}

static void vsetmsg(char *buf, const char *fmt, va_list ap)
{
    vsnprintf(buf, ERRMSG_CAP, fmt, ap);
}

/* Records a failure on the handle (or this thread's buffer if h is NULL). */
static ckpt_code fail(ckpt_store *h, ckpt_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ckpt_code fail(ckpt_store *h, ckpt_code code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsetmsg(h ? h->errmsg : tls_errmsg, fmt, ap);
    va_end(ap);
    return code;
}

/* Maps an engine failure and copies its detail (st_errmsg is per thread and
 * overwritten by the next engine call, so the handle keeps its own copy). */
static ckpt_code fail_st(ckpt_store *h, st_err e)
{
    const char *m = st_errmsg();
    return fail(h, code_from_st(e), "%s", m && *m ? m : st_strerror(e));
}

const char *ckpt_errmsg(const ckpt_store *store)
{
    return store ? store->errmsg : tls_errmsg;
}

/* Checks the arguments every handle call shares. */
static ckpt_code check_handle(ckpt_store *h, const char *job, const void *out)
{
    if (!h)
        return fail(NULL, CKPT_EINVAL, "store handle is NULL");
    if (!job || !*job)
        return fail(h, CKPT_EINVAL, "job name is empty");
    if (!out)
        return fail(h, CKPT_EINVAL, "output argument is NULL");
    return CKPT_OK;
}

/* ------------------------------------------------------------- open, close */

ckpt_code ckpt_open(const char *store_url, const ckpt_options *opts, ckpt_store **out)
{
    char defurl[PATH_MAX + 16];
    if (!out)
        return fail(NULL, CKPT_EINVAL, "ckpt_open: out is NULL");
    *out = NULL;
    if (!store_url || !*store_url) {
        store_url = getenv("CKPT_STORE");
        if (!store_url || !*store_url)
            store_url = st_default_store_url(defurl, sizeof defurl);
        if (!store_url)
            return fail(NULL, CKPT_EINVAL, "no store URL given and the default does not fit");
    }
    ckpt_store *h = calloc(1, sizeof *h);
    if (!h)
        return fail(NULL, CKPT_ENOMEM, "out of memory");
    st_store_options so = {0};
    so.url = store_url;
    if (opts) {
        so.state_dir = opts->state_dir;
        so.node = opts->node;
        so.warn = opts->warn;
        so.warn_arg = opts->warn_arg;
    }
    st_err e = st_store_open(&so, &h->st);
    if (e) {
        ckpt_code c = fail_st(NULL, e);
        free(h);
        return c;
    }
    *out = h;
    return CKPT_OK;
}

void ckpt_close(ckpt_store *store)
{
    if (!store)
        return;
    st_store_close(store->st);
    free(store);
}

/* ----------------------------------------------------------------- listings */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

ckpt_code ckpt_list_jobs(ckpt_store *store, char ***jobs, size_t *n)
{
    if (!store)
        return fail(NULL, CKPT_EINVAL, "store handle is NULL");
    if (!jobs || !n)
        return fail(store, CKPT_EINVAL, "output argument is NULL");
    char **names = NULL;
    size_t count = 0;
    st_err e = st_store_list_jobs(store->st, &names, &count);
    if (e)
        return fail_st(store, e);
    if (count > 1)
        qsort(names, count, sizeof *names, cmp_names);
    *jobs = names;
    *n = count;
    return CKPT_OK;
}

void ckpt_free_jobs(char **jobs, size_t n)
{
    if (jobs)
        st_store_free_names(jobs, n);
}

ckpt_code ckpt_list_steps(ckpt_store *store, const char *job, ckpt_step **steps, size_t *n)
{
    ckpt_code c = check_handle(store, job, steps);
    if (c)
        return c;
    if (!n)
        return fail(store, CKPT_EINVAL, "output argument is NULL");
    st_step_info *info = NULL;
    size_t count = 0;
    st_err e = st_store_list_steps(store->st, job, &info, &count);
    if (e)
        return fail_st(store, e);
    ckpt_step *out = calloc(count ? count : 1, sizeof *out);
    if (!out) {
        free(info);
        return fail(store, CKPT_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < count; i++) {
        out[i].step = info[i].step;
        out[i].created_ns = info[i].created_ns;
        out[i].files = info[i].files;
        out[i].bytes = info[i].bytes;
        out[i].nodes = info[i].nodes;
        out[i].consistent = info[i].consistent;
        out[i].complete = info[i].complete;
        out[i].world_size = info[i].world_size;
        out[i].ranks = info[i].ranks;
        snprintf(out[i].why, sizeof out[i].why, "%s", info[i].why);
    }
    free(info);
    *steps = out;
    *n = count;
    return CKPT_OK;
}

void ckpt_free_steps(ckpt_step *steps)
{
    free(steps);
}

ckpt_code ckpt_latest(ckpt_store *store, const char *job, uint64_t *step)
{
    ckpt_code c = check_handle(store, job, step);
    if (c)
        return c;
    uint64_t s;
    st_err e = st_store_latest(store->st, job, &s);
    if (e)
        return fail_st(store, e);
    *step = s;
    return CKPT_OK;
}

/* ------------------------------------------------------------------ restore */

void ckpt_restore_options_init(ckpt_restore_options *opts)
{
    if (!opts)
        return;
    memset(opts, 0, sizeof *opts);
    opts->rank = -1;
}

ckpt_code ckpt_restore(ckpt_store *store, const char *job, uint64_t step,
                       const ckpt_restore_options *opts, const char *dest_dir,
                       ckpt_restore_result *res)
{
    ckpt_code c = check_handle(store, job, dest_dir);
    if (c)
        return c;
    if (!*dest_dir)
        return fail(store, CKPT_EINVAL, "destination directory is empty");
    st_restore_opts so = {.rank = -1};
    if (opts) {
        if (opts->rank < -1)
            return fail(store, CKPT_EINVAL, "rank %d: must be -1 (all) or >= 0", opts->rank);
        so.rank = opts->rank;
        so.latest = opts->latest;
        so.no_fallback = opts->no_fallback;
        so.threads = opts->threads;
        so.progress = opts->progress;
        so.progress_arg = opts->progress_arg;
    }
    st_restore_result sr;
    memset(&sr, 0, sizeof sr);
    st_err e = st_store_restore(store->st, job, step, dest_dir, &so, &sr);
    if (e)
        return fail_st(store, e);
    if (res) {
        memset(res, 0, sizeof *res);
        res->step = sr.step;
        res->files = sr.files;
        res->bytes = sr.bytes;
        res->gets = sr.gets;
        res->fell_back = sr.fell_back;
        res->failed_step = sr.failed_step;
        snprintf(res->failure, sizeof res->failure, "%s", sr.failure);
    }
    return CKPT_OK;
}

ckpt_code ckpt_verify(ckpt_store *store, const char *job, uint64_t step, ckpt_verify_result *res)
{
    ckpt_code c = check_handle(store, job, "");
    if (c)
        return c;
    st_verify_result vr;
    memset(&vr, 0, sizeof vr);
    st_err e = st_store_verify(store->st, job, step, &vr);
    if (res && (e == ST_OK || e == ST_ERR_CORRUPT)) {
        res->files = vr.files;
        res->chunks = vr.chunks;
        res->bytes = vr.bytes;
        res->bad_files = vr.bad_files;
    }
    return e ? fail_st(store, e) : CKPT_OK;
}

/* --------------------------------------------------------------- accounting */

ckpt_code ckpt_stats_job(ckpt_store *store, const char *job, ckpt_stats *out)
{
    ckpt_code c = check_handle(store, job, out);
    if (c)
        return c;
    st_store_stats ss;
    memset(&ss, 0, sizeof ss);
    st_err e = st_store_stats_job(store->st, job, &ss);
    if (e)
        return fail_st(store, e);
    out->steps = ss.steps;
    out->consistent_steps = ss.consistent_steps;
    out->logical_bytes = ss.logical_bytes;
    out->stored_bytes = ss.stored_bytes;
    out->packs = ss.packs;
    out->manifests = ss.manifests;
    out->part_records = ss.part_records;
    return CKPT_OK;
}

void ckpt_requests(const ckpt_store *store, ckpt_request_counts *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!store)
        return;
    st_request_counts rc;
    memset(&rc, 0, sizeof rc);
    st_store_requests(store->st, &rc);
    out->put = rc.put;
    out->get = rc.get;
    out->stat = rc.stat;
    out->list = rc.list;
    out->del = rc.del;
}

/* ------------------------------------------------------- the local mount */

/* The daemon validates job names fully; this catches what would break the
 * one-line commit format (white space, control characters) or a path. */
static int job_fits_line(const char *job)
{
    size_t len = strlen(job);
    if (len == 0 || len > JOB_NAME_MAX)
        return 0;
    for (const unsigned char *p = (const unsigned char *)job; *p; p++)
        if (*p <= ' ' || *p == 0x7f || *p == '/')
            return 0;
    return 1;
}

static ckpt_code control_path(const char *mountpoint, const char *name, char *buf, size_t cap)
{
    if (!mountpoint || !*mountpoint)
        return fail(NULL, CKPT_EINVAL, "mountpoint is empty");
    int n = snprintf(buf, cap, "%s/.ckptfs/%s", mountpoint, name);
    if (n < 0 || (size_t)n >= cap)
        return fail(NULL, CKPT_EINVAL, "mountpoint path too long");
    return CKPT_OK;
}

ckpt_code ckpt_commit(const char *mountpoint, const char *job, uint64_t step, int rank,
                      int world_size)
{
    char path[PATH_MAX], line[JOB_NAME_MAX + 64];
    ckpt_code c = control_path(mountpoint, "commit", path, sizeof path);
    if (c)
        return c;
    if (!job || !job_fits_line(job))
        return fail(NULL, CKPT_EINVAL, "invalid job name \"%s\"", job ? job : "(null)");
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return fail(NULL, CKPT_EINVAL, "rank %d of world size %d: need 0 <= rank < world size",
                    rank, world_size);
    int len = snprintf(line, sizeof line, "%s %" PRIu64 " %d %d\n", job, step, rank, world_size);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return fail(NULL, CKPT_ENOTFOUND,
                        "%s: %s (not a ckptfs mount, or a daemon that does not take commits)", path,
                        strerror(err));
        return fail(NULL, CKPT_EIO, "open %s: %s", path, strerror(err));
    }
    ssize_t w;
    do
        w = write(fd, line, (size_t)len);
    while (w < 0 && errno == EINTR);
    int werr = errno;
    int cerr = close(fd) < 0 ? errno : 0;
    line[len - 1] = '\0'; /* for the messages */
    if (w < 0) {
        if (werr == EINVAL || werr == ENOENT)
            return fail(NULL, werr == EINVAL ? CKPT_EINVAL : CKPT_ENOTFOUND,
                        "the mount refused the commit \"%s\": %s", line, strerror(werr));
        return fail(NULL, CKPT_EIO, "commit \"%s\" through %s: %s", line, path, strerror(werr));
    }
    if (w != len)
        return fail(NULL, CKPT_EIO, "commit \"%s\" through %s: short write (%zd of %d bytes)", line,
                    path, w, len);
    if (cerr)
        return fail(NULL, CKPT_EIO, "commit \"%s\": close %s: %s", line, path, strerror(cerr));
    return CKPT_OK;
}

/* Reads the whole status file (at most STATUS_MAX bytes) into *out (malloc'd). */
static ckpt_code read_status(const char *path, char **out, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return fail(NULL, CKPT_ENOTFOUND, "%s: %s (not a ckptfs mount?)", path, strerror(err));
        return fail(NULL, CKPT_EIO, "open %s: %s", path, strerror(err));
    }
    size_t cap = 64 << 10, n = 0;
    char *buf = malloc(cap);
    ckpt_code c = buf ? CKPT_OK : fail(NULL, CKPT_ENOMEM, "out of memory");
    while (!c) {
        if (n == cap) {
            if (cap >= STATUS_MAX) {
                c = fail(NULL, CKPT_ECORRUPT, "%s: larger than %u bytes", path, STATUS_MAX);
                break;
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                c = fail(NULL, CKPT_ENOMEM, "out of memory");
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            c = fail(NULL, CKPT_EIO, "read %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (c) {
        free(buf);
        return c;
    }
    *out = buf;
    *len = n;
    return CKPT_OK;
}

/* What one look at the status file found for (job, step). */
typedef struct step_seen {
    char state[32];       /* "" when the mount does not list the step */
    char last_error[256]; /* the daemon's last_error */
} step_seen;

static ckpt_code scan_status(const char *path, const char *job, uint64_t step, step_seen *seen)
{
    char *text = NULL;
    size_t len = 0, err_off = 0;
    ckpt_code c = read_status(path, &text, &len);
    if (c)
        return c;
    ckj_doc doc;
    int rc = ckj_parse(text, len, &doc, &err_off);
    if (rc) {
        c = rc == -2 ? fail(NULL, CKPT_ENOMEM, "%s: out of memory parsing it", path)
                     : fail(NULL, CKPT_ECORRUPT, "%s: not valid JSON (at byte %zu)", path, err_off);
        goto out;
    }
    seen->state[0] = seen->last_error[0] = '\0';
    ckj_str_copy(&doc, ckj_get(&doc, 0, "last_error"), seen->last_error, sizeof seen->last_error);
    size_t steps = ckj_get(&doc, 0, "steps");
    if (!steps || doc.toks[steps].type != CKJ_ARRAY) {
        c = fail(NULL, CKPT_ECORRUPT, "%s: no \"steps\" array", path);
        goto out;
    }
    size_t el = steps + 1;
    for (size_t i = 0; i < doc.toks[steps].size; i++, el = doc.toks[el].next) {
        uint64_t s;
        if (!ckj_str_eq(&doc, ckj_get(&doc, el, "job"), job) ||
            ckj_u64(&doc, ckj_get(&doc, el, "step"), &s) || s != step)
            continue;
        ckj_str_copy(&doc, ckj_get(&doc, el, "state"), seen->state, sizeof seen->state);
        break;
    }
out:
    ckj_free(&doc);
    free(text);
    return c;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

ckpt_code ckpt_wait_durable(const char *mountpoint, const char *job, uint64_t step,
                            double timeout_s)
{
    char path[PATH_MAX];
    ckpt_code c = control_path(mountpoint, "status", path, sizeof path);
    if (c)
        return c;
    if (!job || !*job)
        return fail(NULL, CKPT_EINVAL, "job name is empty");
    if (timeout_s != timeout_s) /* NaN */
        return fail(NULL, CKPT_EINVAL, "timeout is NaN");
    double start = now_s(), interval = 0.05;
    step_seen seen;
    for (;;) {
        if ((c = scan_status(path, job, step, &seen)))
            return c;
        if (!strcmp(seen.state, "durable"))
            return CKPT_OK;
        double left = timeout_s - (now_s() - start);
        if (timeout_s >= 0 && left <= 0)
            break;
        sleep_s(timeout_s >= 0 && left < interval ? left : interval);
        interval = interval * 2 > 0.5 ? 0.5 : interval * 2;
    }
    return fail(NULL, CKPT_ETIMEDOUT,
                "step %" PRIu64 " of job %s not durable after %.1fs (%s%s; last_error: %s)", step,
                job, timeout_s, seen.state[0] ? "state: " : "",
                seen.state[0] ? seen.state : "the mount does not list the step",
                seen.last_error[0] ? seen.last_error : "none");
}
