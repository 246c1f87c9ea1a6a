/*
 * ckptctl_mount — the verbs that talk to a local ckptfs mount through its
 * control files, never to the store: commit, wait, status.
 *
 *   MOUNT/.ckptfs/status  read-only JSON (docs/MOUNT.md lists the fields)
 *   MOUNT/.ckptfs/commit  write-only; one line "JOB STEP RANK WORLD\n" per write()
 *
 * A missing control file means there is no ckptfs at MOUNT (or an older one
 * without that file): exit 3 with a message that says which.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckptctl.h"

enum { STATUS_MAX = 64 << 20 }; /* refuse to slurp a status file larger than this */

static int need_mount(const cli *c)
{
    if (!c->mount) {
        fprintf(stderr, "ckptctl %s: no mount: pass --mount M (a ckptfs mount point)\n", c->verb);
        return 0;
    }
    return 1;
}

static int no_mount_error(const char *mount, const char *file, int err)
{
    struct stat st;
    if (stat(mount, &st) < 0)
        fprintf(stderr, "ckptctl: %s: %s\n", mount, strerror(errno));
    else if (err == ENOENT)
        fprintf(stderr, "ckptctl: no ckptfs mounted at %s (%s/.ckptfs/%s does not exist)\n", mount,
                mount, file);
    else
        fprintf(stderr, "ckptctl: %s/.ckptfs/%s: %s\n", mount, file, strerror(err));
    return EXIT_STORE;
}

int status_read(const char *mount, char **text, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/.ckptfs/status", mount);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return no_mount_error(mount, "status", errno);
    /* A FUSE file's st_size may be stale: read to EOF. */
    size_t cap = 16384, n = 0;
    char *buf = malloc(cap);
    int rc = EXIT_OK;
    while (buf) {
        if (n + 1 >= cap) {
            char *nb = cap < STATUS_MAX ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                fprintf(stderr, "ckptctl: %s: too large or out of memory\n", path);
                rc = EXIT_STORE;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            fprintf(stderr, "ckptctl: read %s: %s\n", path, strerror(errno));
            rc = EXIT_STORE;
            break;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    if (!buf) {
        fprintf(stderr, "ckptctl: out of memory\n");
        return EXIT_STORE;
    }
    if (rc) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return EXIT_OK;
}

int status_load(const char *mount, jv *doc)
{
    char *text;
    size_t len;
    int rc = status_read(mount, &text, &len);
    if (rc)
        return rc;
    char err[128] = "";
    int bad = jv_parse(text, len, doc, err, sizeof err);
    if (!bad && doc->type != JV_OBJ) {
        snprintf(err, sizeof err, "not a JSON object");
        jv_free(doc);
        bad = 1;
    }
    if (bad) {
        fprintf(stderr, "ckptctl: %s/.ckptfs/status: malformed: %s\n", mount, err);
        free(text);
        return EXIT_STORE;
    }
    free(text);
    return EXIT_OK;
}

/* ---- commit ---- */

int run_commit(cli *c, st_store *s)
{
    (void)s;
    if (!need(c, 1, 1) || !need_mount(c))
        return EXIT_USAGE;
    if (!c->have_rank || !c->have_world) {
        fprintf(stderr, "ckptctl commit: pass --rank R and --world-size W\n");
        return EXIT_USAGE;
    }
    if ((uint64_t)c->rank >= c->world_size) {
        fprintf(stderr, "ckptctl commit: rank %d is not below the world size %" PRIu32 "\n",
                c->rank, c->world_size);
        return EXIT_USAGE;
    }
    if (c->argc) {
        fprintf(stderr, "ckptctl commit: unexpected argument '%s'\n", c->argv[0]);
        return EXIT_USAGE;
    }
    if (strpbrk(c->job, " \t\n")) {
        fprintf(stderr, "ckptctl commit: invalid job name '%s'\n", c->job);
        return EXIT_USAGE;
    }
    char line[512];
    int len = snprintf(line, sizeof line, "%s %" PRIu64 " %d %" PRIu32 "\n", c->job, c->step,
                       c->rank, c->world_size);
    if (len < 0 || (size_t)len >= sizeof line) {
        fprintf(stderr, "ckptctl commit: job name too long\n");
        return EXIT_USAGE;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/.ckptfs/commit", c->mount);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return no_mount_error(c->mount, "commit", errno);
    /* One write(): the daemon takes one line per write call. */
    ssize_t wrote;
    do
        wrote = write(fd, line, (size_t)len);
    while (wrote < 0 && errno == EINTR);
    int err = wrote < 0 ? errno : 0;
    if (close(fd) < 0 && !err)
        err = errno;
    if (!err && wrote != len)
        err = EIO;
    if (err) {
        fprintf(stderr,
                "ckptctl: commit of step %" PRIu64 " of job %s, rank %d of %" PRIu32
                " at %s refused: %s\n",
                c->step, c->job, c->rank, c->world_size, c->mount, strerror(err));
        return err == EINVAL ? EXIT_USAGE : err == ENOENT ? EXIT_NOT_FOUND : EXIT_STORE;
    }
    if (!c->quiet)
        printf("committed step %" PRIu64 " of job %s for rank %d of %" PRIu32 "\n", c->step, c->job,
               c->rank, c->world_size);
    return EXIT_OK;
}

/* ---- wait ---- */

/* The state of job's step in a parsed status file, or NULL if not listed. */
static const char *step_state(const jv *doc, const char *job, uint64_t step)
{
    const jv *steps = jv_get(doc, "steps");
    if (!steps || steps->type != JV_ARR)
        return NULL;
    for (size_t i = 0; i < steps->n; i++) {
        const jv *st = &steps->items[i];
        if (!strcmp(jv_str(st, "job"), job) && jv_num(st, "step") == (double)step)
            return jv_str(st, "state");
    }
    return NULL;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int run_wait(cli *c, st_store *s)
{
    (void)s;
    if (!need(c, 1, 1) || !need_mount(c))
        return EXIT_USAGE;
    if (c->argc) {
        fprintf(stderr, "ckptctl wait: unexpected argument '%s'\n", c->argv[0]);
        return EXIT_USAGE;
    }
    double deadline = c->timeout > 0 ? now_seconds() + c->timeout : 0;
    char last[32] = "not listed";
    for (;;) {
        jv doc;
        int rc = status_load(c->mount, &doc);
        if (rc)
            return rc;
        const char *state = step_state(&doc, c->job, c->step);
        snprintf(last, sizeof last, "%s", state ? state : "not listed");
        int durable = state && !strcmp(state, "durable");
        jv_free(&doc); /* state pointed into doc */
        if (durable) {
            if (!c->quiet)
                printf("step %" PRIu64 " of job %s is durable\n", c->step, c->job);
            return EXIT_OK;
        }
        if (deadline && now_seconds() >= deadline) {
            fprintf(stderr,
                    "ckptctl: timeout: step %" PRIu64 " of job %s not durable at %s after "
                    "%g s (state: %s)\n",
                    c->step, c->job, c->mount, c->timeout, last);
            return EXIT_TIMEOUT;
        }
        struct timespec pause = {0, 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
}

/* ---- status ---- */

/* What a deletion request's state means, for people. */
static const char *deletion_note(const char *state)
{
    if (!strcmp(state, "kept_newest_durable"))
        return "kept: the newest durable step, deleted once a newer step is durable";
    if (!strcmp(state, "kept_pinned"))
        return "kept: pinned, deleted once unpinned";
    if (!strcmp(state, "moving_files"))
        return "waiting: files that stay visible are being stored with another step";
    return "pending";
}

/* Deletion requests and what they deleted, per job (status "jobs"). */
static void print_deletions(const jv *doc)
{
    const jv *jobs = jv_get(doc, "jobs");
    int any = 0;
    for (size_t i = 0; jobs && jobs->type == JV_ARR && i < jobs->n; i++) {
        const jv *j = &jobs->items[i];
        const jv *dels = jv_get(j, "deletions");
        for (size_t k = 0; dels && dels->type == JV_ARR && k < dels->n; k++) {
            const jv *d = &dels->items[k];
            const char *err = jv_str(d, "error");
            printf("%-16s %s step %.0f: %s%s%s\n", any++ ? "" : "deletions", jv_str(j, "job"),
                   jv_num(d, "step"), deletion_note(jv_str(d, "state")),
                   err[0] ? "; last error: " : "", err);
        }
        if (jv_num(j, "steps_deleted") > 0 || jv_num(j, "objects_deleted") > 0)
            printf("%-16s %s: %.0f steps, %.0f objects, %.1f MiB (removed through this mount)\n",
                   any++ ? "" : "deleted", jv_str(j, "job"), jv_num(j, "steps_deleted"),
                   jv_num(j, "objects_deleted"), mib((uint64_t)jv_num(j, "bytes_freed")));
    }
    if (!any)
        printf("%-16s none pending\n", "deletions");
}

/* The background GC (status "gc"). */
static void print_gc(const jv *doc)
{
    const jv *g = jv_get(doc, "gc");
    const jv *on = jv_get(g, "enabled");
    if (!on || on->type != JV_BOOL || !on->boolean) {
        printf("%-16s off\n", "gc");
        return;
    }
    char last[32] = "-", every[32] = "-";
    if (jv_num(g, "keep_last") > 0)
        snprintf(last, sizeof last, "%.0f", jv_num(g, "keep_last"));
    if (jv_num(g, "keep_every") > 0)
        snprintf(every, sizeof every, "%.0f", jv_num(g, "keep_every"));
    const jv *running = jv_get(g, "running");
    printf("%-16s keep last %s, keep every %s, grace %g s, every %g s; %.0f runs%s\n", "gc", last,
           every, jv_num(g, "grace_s"), jv_num(g, "interval_s"), jv_num(g, "runs"),
           running && running->type == JV_BOOL && running->boolean ? ", running now" : "");
    if (jv_num(g, "runs") > 0) {
        time_t at = (time_t)(jv_num(g, "last_start_ns") / 1e9);
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&at));
        printf("%-16s %s, %.1f s: %.0f steps, %.0f objects, %.1f MiB freed\n", "gc last run", when,
               jv_num(g, "last_duration_s"), jv_num(g, "last_steps_deleted"),
               jv_num(g, "last_objects_deleted"), mib((uint64_t)jv_num(g, "last_bytes_freed")));
    }
    printf("%-16s %.0f steps, %.0f objects, %.1f MiB freed since the start\n", "gc total",
           jv_num(g, "steps_deleted"), jv_num(g, "objects_deleted"),
           mib((uint64_t)jv_num(g, "bytes_freed")));
    const char *err = jv_str(g, "last_error");
    printf("%-16s %s\n", "gc last error", err[0] ? err : "-");
}

static void print_status(const jv *doc)
{
    printf("%-16s %s\n", "node", jv_str(doc, "node"));
    printf("%-16s %.1f MiB not yet durable; %.0f steps queued for upload\n", "pending",
           mib((uint64_t)jv_num(doc, "pending_bytes")), jv_num(doc, "queue"));
    double cap = jv_num(doc, "staging_cap");
    if (cap > 0)
        printf("%-16s %.1f MiB of a %.1f MiB cap\n", "staged",
               mib((uint64_t)jv_num(doc, "staged_bytes")), mib((uint64_t)cap));
    else
        printf("%-16s %.1f MiB (no cap)\n", "staged", mib((uint64_t)jv_num(doc, "staged_bytes")));
    printf("%-16s %.1f MiB made durable, %.1f MiB of packs stored, %.1f MB/s\n", "uploaded",
           mib((uint64_t)jv_num(doc, "uploaded_bytes")), mib((uint64_t)jv_num(doc, "stored_bytes")),
           jv_num(doc, "upload_rate_mbps"));
    const char *err = jv_str(doc, "last_error");
    printf("%-16s %s\n", "last error", err[0] ? err : "-");
    print_deletions(doc);
    print_gc(doc);
    const jv *steps = jv_get(doc, "steps");
    if (!steps || steps->type != JV_ARR || steps->n == 0) {
        printf("\nno steps\n");
        return;
    }
    printf("\n%-24s %12s  %-10s %8s %7s\n", "JOB", "STEP", "STATE", "REVISION", "WRITERS");
    for (size_t i = 0; i < steps->n; i++) {
        const jv *st = &steps->items[i];
        printf("%-24s %12.0f  %-10s %8.0f %7.0f\n", jv_str(st, "job"), jv_num(st, "step"),
               jv_str(st, "state"), jv_num(st, "revision"), jv_num(st, "writers"));
    }
}

int run_status(cli *c, st_store *s)
{
    (void)s;
    if (!need_mount(c))
        return EXIT_USAGE;
    if (c->argc) {
        fprintf(stderr, "ckptctl status: unexpected argument '%s'\n", c->argv[0]);
        return EXIT_USAGE;
    }
    if (c->json) {
        /* As is: the daemon's own document, byte for byte. */
        char *text;
        size_t len;
        int rc = status_read(c->mount, &text, &len);
        if (rc)
            return rc;
        fwrite(text, 1, len, stdout);
        if (len == 0 || text[len - 1] != '\n')
            putchar('\n');
        free(text);
        return EXIT_OK;
    }
    jv doc;
    int rc = status_load(c->mount, &doc);
    if (rc)
        return rc;
    print_status(&doc);
    jv_free(&doc);
    return EXIT_OK;
}
