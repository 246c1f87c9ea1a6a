/*
 * ckptctl_mount — the verbs that talk to a local ckptfs mount through its
 * control files, never to the store: commit, wait, status, drain. The protocol is
 * libckpt's own (client/ckpt_mountctl.h, linked in), so ckptctl and the
 * library cannot drift apart; this file maps its errors to exit codes and
 * prints the status file for people.
 *
 * A missing control file means there is no ckptfs at MOUNT (or an older one
 * without that file): exit 3 with a message that says which.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt_mountctl.h"
#include "ckptctl.h"
#include "ckptctl_cli.h"

static int need_mount(const cli *c)
{
    if (!c->mount) {
        fprintf(stderr, "ckptctl %s: no mount: pass --mount M (a ckptfs mount point)\n", c->verb);
        return 0;
    }
    return 1;
}

/* Prints msg and returns the exit code for e (ckptctl_cli.h). */
static int mountctl_fail(ckpt_mountctl_err e, const char *msg)
{
    fprintf(stderr, "ckptctl: %s\n", msg);
    switch (e) {
    case CKPT_MOUNTCTL_OK: return EXIT_OK;
    case CKPT_MOUNTCTL_EINVAL: return EXIT_USAGE;
    case CKPT_MOUNTCTL_ENOJOB: return EXIT_NOT_FOUND;
    case CKPT_MOUNTCTL_ETIMEDOUT: return EXIT_TIMEOUT;
    case CKPT_MOUNTCTL_ENOMOUNT: /* exit 3: "no ckptfs mount at --mount" */
    case CKPT_MOUNTCTL_EIO:
    case CKPT_MOUNTCTL_ECORRUPT:
    case CKPT_MOUNTCTL_ENOMEM: return EXIT_STORE;
    }
    return EXIT_STORE;
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
    if (c->argc) {
        fprintf(stderr, "ckptctl commit: unexpected argument '%s'\n", c->argv[0]);
        return EXIT_USAGE;
    }
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    ckpt_mountctl_err e =
        ckpt_mountctl_commit(c->mount, c->job, c->step, c->rank, c->world_size, msg);
    if (e)
        return mountctl_fail(e, msg);
    if (!c->quiet)
        printf("committed step %" PRIu64 " of job %s for rank %d of %" PRIu32 "\n", c->step, c->job,
               c->rank, c->world_size);
    return EXIT_OK;
}

/* ---- wait ---- */

int run_wait(cli *c, st_store *s)
{
    (void)s;
    if (!need(c, 1, 1) || !need_mount(c))
        return EXIT_USAGE;
    if (c->argc) {
        fprintf(stderr, "ckptctl wait: unexpected argument '%s'\n", c->argv[0]);
        return EXIT_USAGE;
    }
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    /* --timeout is > 0 when given; without it, wait for as long as it takes. */
    ckpt_mountctl_err e = ckpt_mountctl_wait_durable(c->mount, c->job, c->step,
                                                     c->timeout > 0 ? c->timeout : -1, msg);
    if (e)
        return mountctl_fail(e, msg);
    if (!c->quiet)
        printf("step %" PRIu64 " of job %s is durable\n", c->step, c->job);
    return EXIT_OK;
}

/* Member key of obj as a number for people: 0 when absent or not an integer. */
static uint64_t u64_of(const json_object *obj, const char *key)
{
    uint64_t v;
    return ckpt_mountctl_get_u64(obj, key, &v) ? 0 : v;
}

/* Member key of obj as a double (integers too): 0 when absent. */
static double num_of(const json_object *obj, const char *key)
{
    json_object *m;
    if (!json_object_object_get_ex(obj, key, &m) ||
        !(json_object_is_type(m, json_type_double) || json_object_is_type(m, json_type_int)))
        return 0.0;
    return json_object_get_double(m);
}

/* 1 when member key of obj is true. */
static int true_of(const json_object *obj, const char *key)
{
    json_object *m;
    return json_object_object_get_ex(obj, key, &m) && json_object_is_type(m, json_type_boolean) &&
           json_object_get_boolean(m);
}

/* Member key of obj when it is an array, else NULL. */
static const json_object *array_of(const json_object *obj, const char *key)
{
    json_object *m;
    return json_object_object_get_ex(obj, key, &m) && json_object_is_type(m, json_type_array)
               ? m
               : NULL;
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
static void print_deletions(const json_object *doc)
{
    const json_object *jobs = array_of(doc, "jobs");
    int any = 0;
    for (size_t i = 0, nj = jobs ? json_object_array_length(jobs) : 0; i < nj; i++) {
        const json_object *j = json_object_array_get_idx(jobs, i);
        const json_object *dels = array_of(j, "deletions");
        for (size_t k = 0, nd = dels ? json_object_array_length(dels) : 0; k < nd; k++) {
            const json_object *d = json_object_array_get_idx(dels, k);
            const char *err = ckpt_mountctl_get_str(d, "error");
            printf("%-16s %s step %" PRIu64 ": %s%s%s\n", any++ ? "" : "deletions",
                   ckpt_mountctl_get_str(j, "job"), u64_of(d, "step"),
                   deletion_note(ckpt_mountctl_get_str(d, "state")), err[0] ? "; last error: " : "",
                   err);
        }
        if (u64_of(j, "steps_deleted") > 0 || u64_of(j, "objects_deleted") > 0)
            printf("%-16s %s: %" PRIu64 " steps, %" PRIu64
                   " objects, %.1f MiB (removed through this mount)\n",
                   any++ ? "" : "deleted", ckpt_mountctl_get_str(j, "job"),
                   u64_of(j, "steps_deleted"), u64_of(j, "objects_deleted"),
                   mib(u64_of(j, "bytes_freed")));
    }
    if (!any)
        printf("%-16s none pending\n", "deletions");
}

/* The background GC (status "gc"). */
static void print_gc(const json_object *doc)
{
    json_object *g = NULL;
    json_object_object_get_ex(doc, "gc", &g);
    if (!true_of(g, "enabled")) {
        printf("%-16s off\n", "gc");
        return;
    }
    char last[32] = "-", every[32] = "-";
    if (u64_of(g, "keep_last") > 0)
        snprintf(last, sizeof last, "%" PRIu64, u64_of(g, "keep_last"));
    if (u64_of(g, "keep_every") > 0)
        snprintf(every, sizeof every, "%" PRIu64, u64_of(g, "keep_every"));
    printf("%-16s keep last %s, keep every %s, grace %g s, every %g s; %" PRIu64 " runs%s\n", "gc",
           last, every, num_of(g, "grace_s"), num_of(g, "interval_s"), u64_of(g, "runs"),
           true_of(g, "running") ? ", running now" : "");
    if (u64_of(g, "runs") > 0) {
        time_t at = (time_t)(num_of(g, "last_start_ns") / 1e9);
        char when[32];
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&at));
        printf("%-16s %s, %.1f s: %" PRIu64 " steps, %" PRIu64 " objects, %.1f MiB freed\n",
               "gc last run", when, num_of(g, "last_duration_s"), u64_of(g, "last_steps_deleted"),
               u64_of(g, "last_objects_deleted"), mib(u64_of(g, "last_bytes_freed")));
    }
    printf("%-16s %" PRIu64 " steps, %" PRIu64 " objects, %.1f MiB freed since the start\n",
           "gc total", u64_of(g, "steps_deleted"), u64_of(g, "objects_deleted"),
           mib(u64_of(g, "bytes_freed")));
    const char *err = ckpt_mountctl_get_str(g, "last_error");
    printf("%-16s %s\n", "gc last error", err[0] ? err : "-");
}

/* The upload order and the time to durable (docs/SHUTDOWN.md). */
static void print_drain(const json_object *doc)
{
    json_object *eta = NULL;
    char when[48] = "unknown (no upload measured yet)";
    if (json_object_object_get_ex(doc, "eta_durable_seconds", &eta) && eta)
        snprintf(when, sizeof when, "%.1f s", json_object_get_double(eta));
    printf("%-16s %s; every pending byte durable in %s\n", "upload order",
           true_of(doc, "draining") ? "draining (newest complete step first)" : "oldest first",
           when);
}

static void print_status(const json_object *doc)
{
    printf("%-16s %s\n", "node", ckpt_mountctl_get_str(doc, "node"));
    printf("%-16s %.1f MiB not yet durable; %" PRIu64 " steps queued for upload\n", "pending",
           mib(u64_of(doc, "pending_bytes")), u64_of(doc, "queue"));
    uint64_t cap = u64_of(doc, "staging_cap");
    if (cap > 0)
        printf("%-16s %.1f MiB of a %.1f MiB cap\n", "staged", mib(u64_of(doc, "staged_bytes")),
               mib(cap));
    else
        printf("%-16s %.1f MiB (no cap)\n", "staged", mib(u64_of(doc, "staged_bytes")));
    printf("%-16s %.1f MiB made durable, %.1f MiB of packs stored, %.1f MB/s\n", "uploaded",
           mib(u64_of(doc, "uploaded_bytes")), mib(u64_of(doc, "stored_bytes")),
           num_of(doc, "upload_rate_mbps"));
    print_drain(doc);
    const char *err = ckpt_mountctl_get_str(doc, "last_error");
    printf("%-16s %s\n", "last error", err[0] ? err : "-");
    print_deletions(doc);
    print_gc(doc);
    const json_object *steps = array_of(doc, "steps");
    size_t n = steps ? json_object_array_length(steps) : 0;
    if (n == 0) {
        printf("\nno steps\n");
        return;
    }
    printf("\n%-24s %12s  %-10s %8s %7s\n", "JOB", "STEP", "STATE", "REVISION", "WRITERS");
    for (size_t i = 0; i < n; i++) {
        const json_object *st = json_object_array_get_idx(steps, i);
        printf("%-24s %12" PRIu64 "  %-10s %8" PRIu64 " %7" PRIu64 "\n",
               ckpt_mountctl_get_str(st, "job"), u64_of(st, "step"),
               ckpt_mountctl_get_str(st, "state"), u64_of(st, "revision"), u64_of(st, "writers"));
    }
}

/* ---- drain ---- */

int run_drain(cli *c, st_store *s)
{
    (void)s;
    if (!c->mount && c->argc == 1) {
        c->mount = c->argv[0]; /* ckptctl drain MOUNT */
        c->argc = 0;
    }
    if (!need_mount(c))
        return EXIT_USAGE;
    if (c->argc) {
        fprintf(stderr, "ckptctl drain: unexpected argument '%s'\n", c->argv[0]);
        return EXIT_USAGE;
    }
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    ckpt_mountctl_err e = ckpt_mountctl_drain(c->mount, msg);
    if (e)
        return mountctl_fail(e, msg);
    if (c->quiet)
        return EXIT_OK;
    /* What the operator needs next: how long until it is all safe. */
    json_object *doc = NULL;
    if ((e = ckpt_mountctl_status_load(c->mount, &doc, msg)))
        return mountctl_fail(e, msg);
    printf("%s is draining: %" PRIu64 " steps queued, %.1f MiB not yet durable\n", c->mount,
           u64_of(doc, "queue"), mib(u64_of(doc, "pending_bytes")));
    print_drain(doc);
    json_object_put(doc);
    return EXIT_OK;
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
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    ckpt_mountctl_err e;
    if (c->json) {
        /* As is: the daemon's own document, byte for byte. */
        char *text;
        size_t len;
        if ((e = ckpt_mountctl_status_read(c->mount, &text, &len, msg)))
            return mountctl_fail(e, msg);
        fwrite(text, 1, len, stdout);
        if (len == 0 || text[len - 1] != '\n')
            putchar('\n');
        free(text);
        return EXIT_OK;
    }
    json_object *doc;
    if ((e = ckpt_mountctl_status_load(c->mount, &doc, msg)))
        return mountctl_fail(e, msg);
    print_status(doc);
    json_object_put(doc);
    return EXIT_OK;
}
