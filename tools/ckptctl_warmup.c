/*
 * ckptctl_warmup — `ckptctl warmup MOUNT/JOB[/STEP]`: asks the ckptfs mount
 * to fetch a step into its staging before anybody opens it (docs/WARMUP.md),
 * then follows the request in the status file until it is warm, partial or
 * failed, printing progress on stderr.
 *
 * The target is a path into the mount: the mount is the nearest directory
 * above it that has .ckptfs/status, JOB the first component below it, STEP
 * a step number or a step directory's name (its last run of digits, as in
 * step-000120 or checkpoint-1200); no STEP: the job's newest step.
 * Single-threaded.
 */
#include <ctype.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt_mountctl.h"
#include "ckptctl.h"
#include "ckptctl_cli.h"

/* How often the status file is read while waiting. */
#define POLL_NS (200ll * 1000000)

/* The last run of digits of name as a step number; 0 if it has none or it
 * is out of range (*ok says which). */
static uint64_t step_in_name(const char *name, int *ok)
{
    const char *end = name + strlen(name);
    while (end > name && !isdigit((unsigned char)end[-1]))
        end--;
    const char *start = end;
    while (start > name && isdigit((unsigned char)start[-1]))
        start--;
    *ok = start < end && end - start <= 19;
    return *ok ? strtoull(start, NULL, 10) : 0;
}

static int is_mount(const char *dir)
{
    char p[PATH_MAX];
    struct stat st;
    return snprintf(p, sizeof p, "%s/.ckptfs/status", dir) < (int)sizeof p && stat(p, &st) == 0;
}

/* Splits target into mount, job and step (UINT64_MAX: none); 0 or an exit
 * code after saying why. mount and job are written into the caller's
 * buffers. */
static int split_target(const char *target, char *mount, size_t mcap, char *job, size_t jcap,
                        uint64_t *step)
{
    char path[PATH_MAX], given[PATH_MAX];
    /* A bare step number (MOUNT/JOB/120) names no entry: resolve its parent. */
    snprintf(given, sizeof given, "%s", target);
    size_t len = strlen(given);
    while (len > 1 && given[len - 1] == '/')
        given[--len] = '\0';
    char *last = strrchr(given, '/');
    const char *number = NULL;
    if (!realpath(given, path) && last && last[1] &&
        strspn(last + 1, "0123456789") == strlen(last + 1)) {
        number = last + 1;
        *last = '\0';
        if (!realpath(given[0] ? given : "/", path))
            number = NULL;
    }
    if (!number && !realpath(target, path)) {
        fprintf(stderr, "ckptctl warmup: %s: no such file or directory in a mount\n", target);
        return EXIT_NOT_FOUND;
    }
    if (number && strlen(path) + 1 + strlen(number) < sizeof path)
        strcat(strcat(path, "/"), number);
    /* Walk up to the mount; remember the last two components passed. */
    char *below = NULL, *below2 = NULL;
    for (;;) {
        if (is_mount(path))
            break;
        char *slash = strrchr(path, '/');
        if (!slash || slash == path) {
            fprintf(stderr, "ckptctl warmup: %s is not inside a ckptfs mount\n", target);
            return EXIT_STORE;
        }
        *slash = '\0';
        below2 = below;
        below = slash + 1;
    }
    if (!below) {
        fprintf(stderr, "ckptctl warmup: %s is the mount itself: name a job (MOUNT/JOB)\n", target);
        return EXIT_USAGE;
    }
    snprintf(mount, mcap, "%s", path);
    snprintf(job, jcap, "%s", below);
    *step = UINT64_MAX;
    if (below2) {
        int ok;
        *step = step_in_name(below2, &ok);
        if (!ok) {
            fprintf(stderr, "ckptctl warmup: '%s' names no step number\n", below2);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* The newest request of job (of step, unless UINT64_MAX) in the status
 * document, or NULL. Borrowed from doc. */
static json_object *find_request(json_object *doc, const char *job, uint64_t step)
{
    json_object *w, *reqs;
    if (!json_object_object_get_ex(doc, "warmup", &w) ||
        !json_object_object_get_ex(w, "requests", &reqs) ||
        !json_object_is_type(reqs, json_type_array))
        return NULL;
    for (size_t i = json_object_array_length(reqs); i-- > 0;) {
        json_object *r = json_object_array_get_idx(reqs, i);
        uint64_t s;
        if (strcmp(ckpt_mountctl_get_str(r, "job"), job))
            continue;
        if (step == UINT64_MAX || (!ckpt_mountctl_get_u64(r, "step", &s) && s == step))
            return r;
    }
    return NULL;
}

static uint64_t u64_or0(const json_object *o, const char *key)
{
    uint64_t v;
    return ckpt_mountctl_get_u64(o, key, &v) ? 0 : v;
}

static void print_progress(const json_object *r, const char *job)
{
    fprintf(stderr, "warming %s step %" PRIu64 ": %" PRIu64 "/%" PRIu64 " files, %.1f/%.1f MiB\n",
            job, u64_or0(r, "step"), u64_or0(r, "files_warm"), u64_or0(r, "files"),
            mib(u64_or0(r, "bytes_warm")), mib(u64_or0(r, "bytes")));
}

/* Follows the request until it ends; its exit code. */
static int follow(cli *c, const char *mount, const char *job, uint64_t step)
{
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int progress = !c->quiet && !c->json && isatty(STDERR_FILENO);
    uint64_t shown = UINT64_MAX;
    for (;;) {
        json_object *doc = NULL;
        ckpt_mountctl_err e = ckpt_mountctl_status_load(mount, &doc, msg);
        if (e) {
            fprintf(stderr, "ckptctl: %s\n", msg);
            return EXIT_STORE;
        }
        json_object *r = find_request(doc, job, step);
        const char *state = r ? ckpt_mountctl_get_str(r, "state") : "";
        int ended = !strcmp(state, "warm") || !strcmp(state, "partial") || !strcmp(state, "failed");
        if (r && progress && (ended || u64_or0(r, "bytes_warm") != shown)) {
            shown = u64_or0(r, "bytes_warm");
            print_progress(r, job);
        }
        int rc = -1;
        if (!r) {
            fprintf(stderr, "ckptctl warmup: the mount lists no warm-up request of %s\n", job);
            rc = EXIT_STORE;
        } else if (ended) {
            rc = !strcmp(state, "warm")      ? EXIT_OK
                 : !strcmp(state, "partial") ? EXIT_PARTIAL
                                             : EXIT_STORE;
            if (c->json) {
                rc = json_print(json_object_get(r), 0) ? EXIT_STORE : rc;
            } else if (rc == EXIT_STORE) {
                fprintf(stderr, "ckptctl warmup: %s\n", ckpt_mountctl_get_str(r, "error"));
            } else if (!c->quiet) {
                printf("step %" PRIu64 " of %s is %s: %" PRIu64 " of %" PRIu64
                       " files, %.1f MiB local%s\n",
                       u64_or0(r, "step"), job, state, u64_or0(r, "files_warm"),
                       u64_or0(r, "files"), mib(u64_or0(r, "bytes_warm")),
                       rc == EXIT_PARTIAL ? " (the rest did not fit under --staging-cap)" : "");
            }
        }
        json_object_put(doc);
        if (rc >= 0)
            return rc;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited = (double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9;
        if (c->timeout > 0 && waited >= c->timeout) {
            fprintf(stderr, "ckptctl warmup: not warm after %.0f s (still %s)\n", c->timeout,
                    state);
            return EXIT_TIMEOUT;
        }
        struct timespec ts = {0, POLL_NS};
        nanosleep(&ts, NULL);
    }
}

int run_warmup(cli *c, st_store *s)
{
    (void)s;
    if (c->argc != 1) {
        fprintf(stderr, "ckptctl warmup: pass one MOUNT/JOB or MOUNT/JOB/STEP\n");
        return EXIT_USAGE;
    }
    char mount[PATH_MAX], job[NAME_MAX + 1];
    uint64_t step;
    int rc = split_target(c->argv[0], mount, sizeof mount, job, sizeof job, &step);
    if (rc)
        return rc;
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    ckpt_mountctl_err e = ckpt_mountctl_warmup(mount, job, step, msg);
    if (e) {
        fprintf(stderr, "ckptctl: %s\n", msg);
        return e == CKPT_MOUNTCTL_EINVAL ? EXIT_USAGE : EXIT_STORE;
    }
    return follow(c, mount, job, step);
}
