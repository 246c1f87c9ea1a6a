/*
 * ckptctl_gc — retention and garbage collection verbs over the facade
 * (st_store_gc, st_store_pin; docs/GC.md): gc, pin, unpin.
 *
 * gc prints a summary for people (with --dry-run, every key it would delete)
 * or one JSON document with --json; the same keys, in the same order, are
 * what the real run deletes, so scripts can compare the two. While it runs,
 * a progress line per batch goes to stderr (a terminal, or --progress), and
 * SIGINT/SIGTERM ask the run to stop at its next safe point (a second one
 * kills as usual).
 */
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "ckptctl.h"
#include "ckptctl_cli.h"

/* The signal that asked the run to stop (0: none); the GC run looks at it
 * between units. */
static volatile sig_atomic_t gc_stop;

static void on_stop_signal(int sig)
{
    gc_stop = sig;
    signal(sig, SIG_DFL); /* a second signal ends the process */
}

/* Called by the run on this thread after each batch. */
static void print_progress(void *arg, const st_gc_report *r)
{
    (void)arg;
    fprintf(stderr,
            "ckptctl gc: %s %" PRIu64 " object(s), %.1f MiB so far (%" PRIu64 " step(s), %" PRIu64
            " pack(s))\n",
            r->dry_run ? "would delete" : "deleted", r->objects_deleted, mib(r->bytes_freed),
            r->steps_deleted, r->packs_deleted);
    if (r->compact_packs_written || r->compact_parts_rewritten)
        fprintf(stderr,
                "ckptctl gc: compact: %.1f MiB copied into %" PRIu64 " new pack(s), %" PRIu64
                " part record(s) rewritten\n",
                mib(r->compact_live_bytes), r->compact_packs_written, r->compact_parts_rewritten);
}

/* "2026-12-01 23:40:00 UTC (in 59 min)" for a wall-clock time in ns. */
static void format_when(int64_t ns, char *out, size_t cap)
{
    time_t t = (time_t)(ns / 1000000000);
    struct tm tm;
    char stamp[32] = "?";
    if (gmtime_r(&t, &tm))
        strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S UTC", &tm);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    double left = (double)(ns - ((int64_t)now.tv_sec * 1000000000 + now.tv_nsec)) / 1e9;
    if (left <= 0)
        snprintf(out, cap, "%s (now)", stamp);
    else if (left < 120)
        snprintf(out, cap, "%s (in %.0f s)", stamp, left);
    else if (left < 7200)
        snprintf(out, cap, "%s (in %.0f min)", stamp, left / 60);
    else
        snprintf(out, cap, "%s (in %.1f h)", stamp, left / 3600);
}

/* Packs only marked (or still in their grace period) free nothing now: say
 * how much comes back and from when, so "0.0 MiB freed" is never the whole
 * story (docs/GC.md). */
static void report_pending(const st_gc_report *r)
{
    char first[80], last[80];
    if (!r->pending_bytes)
        return;
    format_when(r->pending_free_first_ns, first, sizeof first);
    printf("%.1f MiB in %" PRIu64 " unreferenced pack(s) %s freed by a gc run after the grace "
           "period: from %s",
           mib(r->pending_bytes), r->packs_marked + r->packs_pending,
           r->dry_run ? "would be" : "will be", first);
    if (r->pending_free_last_ns > r->pending_free_first_ns) {
        format_when(r->pending_free_last_ns, last, sizeof last);
        printf(", all of it from %s", last);
    }
    printf("\n");
}

static int report_json(const st_gc_report *r)
{
    json_object *o = json_object_new_object();
    int bad = json_set(o, "dry_run", json_object_new_boolean(r->dry_run));
    bad |= json_set(o, "steps_kept", json_object_new_uint64(r->steps_kept));
    bad |= json_set(o, "steps_deleted", json_object_new_uint64(r->steps_deleted));
    json_object *steps = json_object_new_array();
    for (uint64_t i = 0; i < r->steps_deleted; i++)
        bad |= json_push(steps, json_object_new_uint64(r->deleted_steps[i]));
    bad |= json_set(o, "deleted_steps", steps);
    bad |= json_set(o, "steps_damaged", json_object_new_uint64(r->steps_damaged));
    bad |= json_set(o, "steps_unreadable", json_object_new_uint64(r->steps_unreadable));
    bad |= json_set(o, "packs", json_object_new_uint64(r->packs));
    bad |= json_set(o, "packs_referenced", json_object_new_uint64(r->packs_referenced));
    bad |= json_set(o, "packs_marked", json_object_new_uint64(r->packs_marked));
    bad |= json_set(o, "packs_unmarked", json_object_new_uint64(r->packs_unmarked));
    bad |= json_set(o, "packs_pending", json_object_new_uint64(r->packs_pending));
    bad |= json_set(o, "packs_deleted", json_object_new_uint64(r->packs_deleted));
    bad |= json_set(o, "packs_retired", json_object_new_uint64(r->packs_retired));
    bad |= json_set(o, "retired_live_bytes", json_object_new_uint64(r->retired_live_bytes));
    bad |= json_set(o, "parts_deleted", json_object_new_uint64(r->parts_deleted));
    bad |= json_set(o, "manifests_deleted", json_object_new_uint64(r->manifests_deleted));
    bad |= json_set(o, "markers_deleted", json_object_new_uint64(r->markers_deleted));
    bad |= json_set(o, "objects_deleted", json_object_new_uint64(r->objects_deleted));
    bad |= json_set(o, "bytes_freed", json_object_new_uint64(r->bytes_freed));
    bad |= json_set(o, "pending_bytes", json_object_new_uint64(r->pending_bytes));
    bad |= json_set(o, "pending_free_first_ns",
                    json_object_new_uint64((uint64_t)r->pending_free_first_ns));
    bad |= json_set(o, "pending_free_last_ns",
                    json_object_new_uint64((uint64_t)r->pending_free_last_ns));
    bad |= json_set(o, "stopped", json_object_new_boolean(r->stopped));
    bad |= json_set(o, "sweep_skipped", json_object_new_boolean(r->sweep_skipped));
    bad |= json_set_str(o, "why", r->why);
    json_object *k = json_object_new_object();
    bad |= json_set(k, "candidates", json_object_new_uint64(r->compact_candidates));
    bad |= json_set(k, "candidate_bytes", json_object_new_uint64(r->compact_candidate_bytes));
    bad |= json_set(k, "live_bytes", json_object_new_uint64(r->compact_live_bytes));
    bad |= json_set(k, "duplicate_bytes", json_object_new_uint64(r->compact_duplicate_bytes));
    bad |= json_set(k, "packs_written", json_object_new_uint64(r->compact_packs_written));
    bad |= json_set(k, "parts_rewritten", json_object_new_uint64(r->compact_parts_rewritten));
    bad |= json_set(k, "steps_skipped", json_object_new_uint64(r->compact_steps_skipped));
    bad |= json_set(k, "parts_changed", json_object_new_uint64(r->compact_parts_changed));
    bad |= json_set(k, "gets", json_object_new_uint64(r->compact_gets));
    bad |= json_set(k, "puts", json_object_new_uint64(r->compact_puts));
    bad |= json_set(k, "wait_ns", json_object_new_uint64((uint64_t)r->compact_wait_ns));
    bad |= json_set(k, "skipped", json_object_new_boolean(r->compact_skipped));
    bad |= json_set_str(k, "why", r->compact_why);
    bad |= json_set(o, "compact", k);
    json_object *keys = json_object_new_array();
    for (size_t i = 0; i < r->ndeleted; i++)
        bad |= json_push(keys, json_object_new_string(r->deleted[i]));
    bad |= json_set(o, "deleted", keys);
    return json_print(o, bad);
}

/* On stderr, even with -q or --json: what the run did not do. */
static void report_notes(const st_gc_report *r)
{
    if (r->stopped)
        fprintf(stderr, "ckptctl gc: stopped early; run it again to go on\n");
    if (r->steps_damaged || r->steps_unreadable)
        fprintf(stderr,
                "ckptctl gc: %" PRIu64 " damaged step(s) not counted as kept, %" PRIu64
                " unreadable step(s) kept\n",
                r->steps_damaged, r->steps_unreadable);
    /* The run did not do all it was asked to: exit 7. */
    if (r->sweep_skipped)
        fprintf(stderr, "ckptctl gc: sweep skipped: %s\n", r->why);
    if (r->compact_skipped)
        fprintf(stderr, "ckptctl gc: compaction skipped: %s\n", r->compact_why);
}

static void report_text(const cli *c, const st_gc_report *r)
{
    const char *did = r->dry_run ? "would delete" : "deleted";
    if (r->dry_run)
        for (size_t i = 0; i < r->ndeleted; i++)
            printf("%s\n", r->deleted[i]);
    if (c->quiet)
        return;
    printf("%s %" PRIu64 " step(s)", did, r->steps_deleted);
    for (uint64_t i = 0; i < r->steps_deleted; i++)
        printf("%s%" PRIu64, i ? "," : " (", r->deleted_steps[i]);
    printf("%s, kept %" PRIu64 "; packs: %" PRIu64 " listed, %" PRIu64 " referenced, %" PRIu64
           " newly marked, %" PRIu64 " pending, %" PRIu64 " %s, %" PRIu64 " %s (%.1f MiB live)"
           "; %" PRIu64 " object(s), %.1f MiB %s\n",
           r->steps_deleted ? ")" : "", r->steps_kept, r->packs, r->packs_referenced,
           r->packs_marked, r->packs_pending, r->packs_deleted, did, r->packs_retired,
           r->dry_run ? "would be retired" : "retired", mib(r->retired_live_bytes),
           r->objects_deleted, mib(r->bytes_freed), r->dry_run ? "would be freed" : "freed");
    if (r->compact_candidates || r->compact_steps_skipped)
        printf("compact: %" PRIu64 " pack(s) of %.1f MiB at least %s dead, %.1f MiB live %s into "
               "%" PRIu64 " new pack(s), %" PRIu64 " part record(s) %s (%" PRIu64 " GET, %" PRIu64
               " PUT; waited %.1f s behind the fence); %.1f MiB referenced twice (duplicate "
               "copies, counted once); %" PRIu64 " step(s) left alone (a path in two parts)\n",
               r->compact_candidates, mib(r->compact_candidate_bytes), "the threshold",
               mib(r->compact_live_bytes), r->dry_run ? "would be copied" : "copied",
               r->compact_packs_written, r->compact_parts_rewritten,
               r->dry_run ? "would be rewritten" : "rewritten", r->compact_gets, r->compact_puts,
               (double)r->compact_wait_ns / 1e9, mib(r->compact_duplicate_bytes),
               r->compact_steps_skipped);
    report_pending(r);
}

int run_gc(cli *c, st_store *s)
{
    if (!need(c, 1, 0) || !no_positional(c))
        return EXIT_USAGE;
    st_gc_policy p = {
        .keep_last = c->keep_last,
        .keep_every = c->keep_every,
        .grace_ns = c->grace > 0 ? (int64_t)(c->grace * 1e9) : 0,
        .repack_dead = c->repack_dead / 100.0,
        .batch = c->batch,
        .compact = c->compact,
        .compact_dead = c->compact_dead / 100.0,
        .stop = &gc_stop,
    };
    if (c->progress || (!c->quiet && isatty(STDERR_FILENO)))
        p.progress = print_progress;
    struct sigaction stop = {.sa_handler = on_stop_signal, .sa_flags = SA_RESTART}, old_int,
                     old_term;
    sigemptyset(&stop.sa_mask);
    sigaction(SIGINT, &stop, &old_int);
    sigaction(SIGTERM, &stop, &old_term);
    st_gc_report r;
    st_err e = st_store_gc(s, c->job, &p, c->dry_run, &r);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    /* Stopped by a signal: the report of what was done, then the shell's
     * convention for "ended by signal N" (130 for SIGINT), so that a script
     * never takes a stopped run for a finished one. */
    int rc = e                                      ? fail(e)
             : r.stopped && gc_stop                 ? 128 + (int)gc_stop
             : r.sweep_skipped || r.compact_skipped ? EXIT_PARTIAL
                                                    : EXIT_OK;
    if (!e && c->json) {
        int printed = report_json(&r);
        if (printed && rc == EXIT_OK)
            rc = printed;
    } else if (!e)
        report_text(c, &r);
    if (!e)
        report_notes(&r);
    st_gc_report_free(&r);
    return rc;
}

static int pin(cli *c, st_store *s, int on)
{
    if (!need(c, 1, 1) || !no_positional(c))
        return EXIT_USAGE;
    st_err e = st_store_pin(s, c->job, c->step, on);
    if (e)
        return fail(e);
    if (!c->quiet)
        printf("step %" PRIu64 " of %s %s\n", c->step, c->job, on ? "pinned" : "unpinned");
    return EXIT_OK;
}

int run_pin(cli *c, st_store *s)
{
    return pin(c, s, 1);
}

int run_unpin(cli *c, st_store *s)
{
    return pin(c, s, 0);
}
