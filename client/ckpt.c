/*
 * ckpt.c — libckpt: the public C API (include/ckpt/ckpt.h) over the store
 * engine's facade (store/ckptstore.h), plus the two calls that talk to a
 * local ckptfs mount, over ckpt_mountctl (the protocol, shared with ckptctl).
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

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt_mountctl.h"
#include "ckptstore.h"

#define ERRMSG_CAP CKPT_MOUNTCTL_MSG_CAP

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
    case ST_ERR_PERMANENT:
    case ST_ERR_AUTH: return CKPT_ESTORE;
    case ST_ERR_CORRUPT: return CKPT_ECORRUPT;
    case ST_ERR_INVALID:
    case ST_ERR_KEY: /* a key file refused or not holding a key: the caller's to fix */
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
    case ST_ERR_TOO_LONG:
    case ST_ERR_TOO_BIG: return CKPT_EIO;
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
    static const ckpt_options no_options; /* NULL opts: every field unset */
    if (!opts)
        opts = &no_options;
    const st_store_options so = {
        .url = store_url,
        .state_dir = opts->state_dir,
        .node = opts->node,
        .warn = opts->warn,
        .warn_arg = opts->warn_arg,
        .s3_endpoint = opts->s3_endpoint,
        .s3_signature = opts->s3_signature,
        .s3_region = opts->s3_region,
        .s3_addressing = opts->s3_addressing,
        .s3_ca_file = opts->s3_ca_file,
        .encryption_key_file = opts->encryption_key_file,
    };
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
    static const ckpt_restore_options defaults = {.rank = -1}; /* as _options_init() */
    if (!opts)
        opts = &defaults;
    if (opts->rank < -1)
        return fail(store, CKPT_EINVAL, "rank %d: must be -1 (all) or >= 0", opts->rank);
    const st_restore_opts so = {
        .rank = opts->rank,
        .latest = opts->latest,
        .no_fallback = opts->no_fallback,
        .threads = opts->threads,
        .progress = opts->progress,
        .progress_arg = opts->progress_arg,
    };
    st_restore_result sr;
    memset(&sr, 0, sizeof sr);
    st_err e = st_store_restore(store->st, job, step, dest_dir, &so, &sr);
    if (e)
        return fail_st(store, e);
    if (res) {
        *res = (ckpt_restore_result){
            .step = sr.step,
            .files = sr.files,
            .bytes = sr.bytes,
            .gets = sr.gets,
            .fell_back = sr.fell_back,
            .failed_step = sr.failed_step,
        };
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

/* The one place where mount-control errors become public codes. */
static ckpt_code code_from_mountctl(ckpt_mountctl_err e)
{
    switch (e) {
    case CKPT_MOUNTCTL_OK: return CKPT_OK;
    case CKPT_MOUNTCTL_EINVAL: return CKPT_EINVAL;
    case CKPT_MOUNTCTL_ENOMOUNT:
    case CKPT_MOUNTCTL_ENOJOB: return CKPT_ENOTFOUND;
    case CKPT_MOUNTCTL_EIO: return CKPT_EIO;
    case CKPT_MOUNTCTL_ECORRUPT: return CKPT_ECORRUPT;
    case CKPT_MOUNTCTL_ENOMEM: return CKPT_ENOMEM;
    case CKPT_MOUNTCTL_ETIMEDOUT: return CKPT_ETIMEDOUT;
    }
    return CKPT_EIO;
}

/* The mount-control message lands in this thread's buffer (no handle). */
ckpt_code ckpt_commit(const char *mountpoint, const char *job, uint64_t step, int rank,
                      int world_size)
{
    return code_from_mountctl(
        ckpt_mountctl_commit(mountpoint, job, step, rank, world_size, tls_errmsg));
}

ckpt_code ckpt_wait_durable(const char *mountpoint, const char *job, uint64_t step,
                            double timeout_s)
{
    return code_from_mountctl(
        ckpt_mountctl_wait_durable(mountpoint, job, step, timeout_s, tls_errmsg));
}

ckpt_code ckpt_drain(const char *mountpoint)
{
    return code_from_mountctl(ckpt_mountctl_drain(mountpoint, tls_errmsg));
}
