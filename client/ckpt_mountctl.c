/*
 * ckpt_mountctl — the mount-control protocol (ckpt_mountctl.h): the commit
 * line, reading and parsing MOUNT/.ckptfs/status with json-c, and the one
 * wait loop for durability.
 *
 * Invariants: every failing path writes its sentence into msg before it
 * returns; arguments are checked before any file is opened; step numbers are
 * compared as uint64_t, never through a double. No global state, so any
 * thread may call in; json-c objects are per call.
 */
#include "ckpt_mountctl.h"

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

static ckpt_mountctl_err say(char *msg, ckpt_mountctl_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static ckpt_mountctl_err say(char *msg, ckpt_mountctl_err e, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, CKPT_MOUNTCTL_MSG_CAP, fmt, ap);
    va_end(ap);
    return e;
}

int ckpt_mountctl_job_ok(const char *job)
{
    size_t len = job ? strlen(job) : 0;
    if (len == 0 || len > CKPT_MOUNTCTL_JOB_MAX)
        return 0;
    for (const unsigned char *p = (const unsigned char *)job; *p; p++)
        if (*p <= ' ' || *p == 0x7f || *p == '/')
            return 0;
    return 1;
}

/* MOUNT/.ckptfs/NAME into buf. */
static ckpt_mountctl_err control_path(const char *mount, const char *name, char *buf, size_t cap,
                                      char *msg)
{
    if (!mount || !*mount)
        return say(msg, CKPT_MOUNTCTL_EINVAL, "mountpoint is empty");
    int n = snprintf(buf, cap, "%s/.ckptfs/%s", mount, name);
    if (n < 0 || (size_t)n >= cap)
        return say(msg, CKPT_MOUNTCTL_EINVAL, "mountpoint path too long");
    return CKPT_MOUNTCTL_OK;
}

/* A control file that would not open: no ckptfs there, or something else. */
static ckpt_mountctl_err open_failed(const char *mount, const char *path, int err, char *msg)
{
    if (err == ENOENT || err == ENOTDIR)
        return say(msg, CKPT_MOUNTCTL_ENOMOUNT, "no ckptfs mounted at %s (%s: %s)", mount, path,
                   strerror(err));
    return say(msg, CKPT_MOUNTCTL_EIO, "open %s: %s", path, strerror(err));
}

/* ---------------------------------------------------------- control files */

/* Writes line (len bytes, ending in '\n') to MOUNT/.ckptfs/FILE with one
 * write(): the daemon takes the lines of one write call. An error of the
 * write is the daemon's answer: EINVAL refused, ENOENT no such job. */
static ckpt_mountctl_err control_write(const char *mount, const char *file, char *line, int len,
                                       char *msg)
{
    char path[PATH_MAX];
    ckpt_mountctl_err e = control_path(mount, file, path, sizeof path, msg);
    if (e)
        return e;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return open_failed(mount, path, errno, msg);
    ssize_t w;
    do
        w = write(fd, line, (size_t)len);
    while (w < 0 && errno == EINTR);
    int werr = errno;
    int cerr = close(fd) < 0 ? errno : 0;
    line[len - 1] = '\0'; /* for the messages */
    if (w < 0 && (werr == EINVAL || werr == ENOENT))
        return say(msg, werr == EINVAL ? CKPT_MOUNTCTL_EINVAL : CKPT_MOUNTCTL_ENOJOB,
                   "the mount refused the %s \"%s\": %s", file, line, strerror(werr));
    if (w < 0)
        return say(msg, CKPT_MOUNTCTL_EIO, "%s \"%s\" through %s: %s", file, line, path,
                   strerror(werr));
    if (w != len)
        return say(msg, CKPT_MOUNTCTL_EIO, "%s \"%s\" through %s: short write (%zd of %d bytes)",
                   file, line, path, w, len);
    if (cerr)
        return say(msg, CKPT_MOUNTCTL_EIO, "%s \"%s\": close %s: %s", file, line, path,
                   strerror(cerr));
    return CKPT_MOUNTCTL_OK;
}

ckpt_mountctl_err ckpt_mountctl_commit(const char *mount, const char *job, uint64_t step,
                                       int64_t rank, int64_t world_size, char *msg)
{
    char path[PATH_MAX], line[CKPT_MOUNTCTL_JOB_MAX + 64];
    ckpt_mountctl_err e = control_path(mount, "commit", path, sizeof path, msg);
    if (e)
        return e;
    if (!ckpt_mountctl_job_ok(job))
        return say(msg, CKPT_MOUNTCTL_EINVAL, "invalid job name \"%s\"", job ? job : "(null)");
    if (world_size < 1 || world_size > UINT32_MAX || rank < 0 || rank >= world_size)
        return say(msg, CKPT_MOUNTCTL_EINVAL,
                   "rank %" PRId64 " of world size %" PRId64
                   ": need 0 <= rank < world size <= 2^32-1",
                   rank, world_size);
    int len = snprintf(line, sizeof line, "%s %" PRIu64 " %" PRId64 " %" PRId64 "\n", job, step,
                       rank, world_size);
    return control_write(mount, "commit", line, len, msg);
}

ckpt_mountctl_err ckpt_mountctl_drain(const char *mount, char *msg)
{
    char line[] = "drain\n";
    return control_write(mount, "drain", line, (int)sizeof line - 1, msg);
}

ckpt_mountctl_err ckpt_mountctl_warmup(const char *mount, const char *job, uint64_t step, char *msg)
{
    char line[CKPT_MOUNTCTL_JOB_MAX + 32];
    if (!ckpt_mountctl_job_ok(job))
        return say(msg, CKPT_MOUNTCTL_EINVAL, "invalid job name \"%s\"", job ? job : "(null)");
    int len = step == UINT64_MAX ? snprintf(line, sizeof line, "%s\n", job)
                                 : snprintf(line, sizeof line, "%s %" PRIu64 "\n", job, step);
    return control_write(mount, "warmup", line, len, msg);
}

/* ------------------------------------------------------------------ status */

ckpt_mountctl_err ckpt_mountctl_status_read(const char *mount, char **text, size_t *len, char *msg)
{
    char path[PATH_MAX];
    ckpt_mountctl_err e = control_path(mount, "status", path, sizeof path, msg);
    if (e)
        return e;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return open_failed(mount, path, errno, msg);
    /* Up to one byte over the cap, to tell a file that is larger, and a NUL. */
    const size_t most = (size_t)CKPT_MOUNTCTL_STATUS_MAX + 2;
    size_t cap = 64 << 10, n = 0;
    char *buf = malloc(cap);
    if (!buf)
        e = say(msg, CKPT_MOUNTCTL_ENOMEM, "out of memory");
    while (!e) {
        if (n > CKPT_MOUNTCTL_STATUS_MAX) {
            e = say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s: larger than %u bytes", path,
                    CKPT_MOUNTCTL_STATUS_MAX);
            break;
        }
        if (n + 1 == cap) {
            size_t ncap = cap * 2 < most ? cap * 2 : most;
            char *nb = realloc(buf, ncap);
            if (!nb) {
                e = say(msg, CKPT_MOUNTCTL_ENOMEM, "out of memory");
                break;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            e = say(msg, CKPT_MOUNTCTL_EIO, "read %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    if (e) {
        free(buf);
        return e;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return CKPT_MOUNTCTL_OK;
}

ckpt_mountctl_err ckpt_mountctl_status_parse(const char *text, size_t len, const char *what,
                                             json_object **doc, char *msg)
{
    *doc = NULL;
    if (len > CKPT_MOUNTCTL_STATUS_MAX)
        return say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s: larger than %u bytes", what,
                   CKPT_MOUNTCTL_STATUS_MAX);
    json_tokener *tok = json_tokener_new_ex(CKPT_MOUNTCTL_MAX_DEPTH);
    if (!tok)
        return say(msg, CKPT_MOUNTCTL_ENOMEM, "out of memory");
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(tok, text, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t end = json_tokener_get_parse_end(tok);
    json_tokener_free(tok);
    ckpt_mountctl_err e = CKPT_MOUNTCTL_OK;
    /* json-c 0.16 has no error code for out of memory: it shows as malformed. */
    if (je == json_tokener_continue)
        e = say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s: malformed: ends early (%zu bytes)", what, len);
    else if (je != json_tokener_success)
        e = say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s: malformed: %s at byte %zu", what,
                json_tokener_error_desc(je), end);
    else if (end != len) /* a NUL stops json-c */
        e = say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s: malformed: trailing data at byte %zu", what, end);
    else if (!json_object_is_type(root, json_type_object)) /* also "null": root is NULL */
        e = say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s: malformed: not a JSON object", what);
    if (e) {
        json_object_put(root);
        return e;
    }
    *doc = root;
    return CKPT_MOUNTCTL_OK;
}

ckpt_mountctl_err ckpt_mountctl_status_load(const char *mount, json_object **doc, char *msg)
{
    char *text = NULL, path[PATH_MAX];
    size_t len = 0;
    *doc = NULL;
    ckpt_mountctl_err e = control_path(mount, "status", path, sizeof path, msg);
    if (!e)
        e = ckpt_mountctl_status_read(mount, &text, &len, msg);
    if (!e)
        e = ckpt_mountctl_status_parse(text, len, path, doc, msg);
    free(text);
    return e;
}

int ckpt_mountctl_get_u64(const json_object *obj, const char *key, uint64_t *v)
{
    json_object *m;
    if (!json_object_object_get_ex(obj, key, &m) || !json_object_is_type(m, json_type_int) ||
        json_object_get_int64(m) < 0)
        return -1;
    *v = json_object_get_uint64(m);
    return 0;
}

const char *ckpt_mountctl_get_str(const json_object *obj, const char *key)
{
    json_object *m;
    if (!json_object_object_get_ex(obj, key, &m) || !json_object_is_type(m, json_type_string))
        return "";
    return json_object_get_string(m);
}

/* 1 when member "job" of el is exactly job (a "\u0000" inside does not end it). */
static int job_is(const json_object *el, const char *job)
{
    json_object *m;
    if (!json_object_object_get_ex(el, "job", &m) || !json_object_is_type(m, json_type_string))
        return 0;
    size_t len = strlen(job);
    return (size_t)json_object_get_string_len(m) == len &&
           !memcmp(json_object_get_string(m), job, len);
}

/* What one look at the status file found for (job, step). */
typedef struct step_seen {
    char state[32];       /* "" when the mount does not list the step */
    char last_error[256]; /* the daemon's last_error */
} step_seen;

int ckpt_mountctl_step_state(const json_object *doc, const char *job, uint64_t step, char *state,
                             size_t cap, char *last_error, size_t err_cap)
{
    json_object *steps;
    state[0] = '\0';
    snprintf(last_error, err_cap, "%s", ckpt_mountctl_get_str(doc, "last_error"));
    if (!json_object_object_get_ex(doc, "steps", &steps) ||
        !json_object_is_type(steps, json_type_array))
        return -1;
    for (size_t i = 0, n = json_object_array_length(steps); i < n; i++) {
        const json_object *el = json_object_array_get_idx(steps, i);
        uint64_t s;
        if (job_is(el, job) && !ckpt_mountctl_get_u64(el, "step", &s) && s == step) {
            snprintf(state, cap, "%s", ckpt_mountctl_get_str(el, "state"));
            break;
        }
    }
    return 0;
}

static ckpt_mountctl_err look(const char *mount, const char *job, uint64_t step, step_seen *seen,
                              char *msg)
{
    json_object *doc;
    ckpt_mountctl_err e = ckpt_mountctl_status_load(mount, &doc, msg);
    if (e)
        return e;
    if (ckpt_mountctl_step_state(doc, job, step, seen->state, sizeof seen->state, seen->last_error,
                                 sizeof seen->last_error))
        e = say(msg, CKPT_MOUNTCTL_ECORRUPT, "%s/.ckptfs/status: no \"steps\" array", mount);
    json_object_put(doc);
    return e;
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

ckpt_mountctl_err ckpt_mountctl_wait_durable(const char *mount, const char *job, uint64_t step,
                                             double timeout_s, char *msg)
{
    if (!mount || !*mount)
        return say(msg, CKPT_MOUNTCTL_EINVAL, "mountpoint is empty");
    if (!ckpt_mountctl_job_ok(job))
        return say(msg, CKPT_MOUNTCTL_EINVAL, "invalid job name \"%s\"", job ? job : "(null)");
    if (timeout_s != timeout_s)
        return say(msg, CKPT_MOUNTCTL_EINVAL, "timeout is NaN");
    double start = now_s(), interval = 0.05;
    step_seen seen;
    for (;;) {
        ckpt_mountctl_err e = look(mount, job, step, &seen, msg);
        if (e)
            return e;
        if (!strcmp(seen.state, "durable"))
            return CKPT_MOUNTCTL_OK;
        double left = timeout_s - (now_s() - start);
        if (timeout_s >= 0 && left <= 0)
            break;
        sleep_s(timeout_s >= 0 && left < interval ? left : interval);
        interval = interval * 2 > 0.5 ? 0.5 : interval * 2;
    }
    return say(msg, CKPT_MOUNTCTL_ETIMEDOUT,
               "step %" PRIu64 " of job %s not durable at %s after %g s (%s%s; last_error: %s)",
               step, job, mount, timeout_s, seen.state[0] ? "state: " : "",
               seen.state[0] ? seen.state : "the mount does not list the step",
               seen.last_error[0] ? seen.last_error : "none");
}
