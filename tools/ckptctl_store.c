/*
 * ckptctl_store — the verbs that work on the store through the facade
 * (ckptstore.h): put, get, restore, ls, latest, verify, stats.
 *
 * Each verb checks its arguments, makes its store calls, and prints either a
 * line for people on stdout or, with --json, one JSON document. On failure
 * nothing goes to stdout: the message is on stderr and the exit code says
 * what kind of failure it was (ckptctl_cli.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckptctl.h"
#include "ckptctl_cli.h"

/* Logical over stored bytes; 0 when nothing is stored. */
static double dedup_ratio(uint64_t logical, uint64_t stored)
{
    return stored ? (double)logical / (double)stored : 0.0;
}

/* ---- put ---- */

int run_put(cli *c, st_store *s)
{
    if (!need(c, 1, 1))
        return EXIT_USAGE;
    if (c->argc != 1) {
        fprintf(stderr, "ckptctl put: expected one directory, got %d arguments\n", c->argc);
        return EXIT_USAGE;
    }
    st_put_result r;
    st_err e = st_store_put_dir(s, c->job, c->step, c->argv[0], &r);
    if (e)
        return fail(e);
    if (c->json) {
        json_object *o = json_object_new_object();
        int bad = json_set_str(o, "job", c->job);
        const json_u64 fields[] = {{"step", c->step},
                                   {"files", r.files},
                                   {"skipped", r.skipped},
                                   {"bytes", r.logical_bytes},
                                   {"chunks", r.chunks},
                                   {"new_chunks", r.new_chunks},
                                   {"new_bytes", r.new_raw_bytes},
                                   {"stored_bytes", r.stored_bytes},
                                   {"packs", r.packs},
                                   {"bundles", r.bundles},
                                   {"bundled_files", r.bundled_files},
                                   {"puts", r.puts},
                                   {"heads", r.heads},
                                   {"gets", r.gets},
                                   {"lists", r.lists}};
        bad |= json_set_u64s(o, JSON_FIELDS(fields));
        return json_print(o, bad);
    }
    if (!c->quiet) {
        double dedup = r.logical_bytes
                           ? 100.0 * (1.0 - (double)r.new_raw_bytes / (double)r.logical_bytes)
                           : 0.0;
        printf("stored step %" PRIu64 " of job %s: %" PRIu64 " files, %.1f MiB; "
               "%.1f MiB new (%.1f%% deduplicated), %.1f MiB in %" PRIu64 " packs, %" PRIu64
               " PUTs\n",
               c->step, c->job, r.files, mib(r.logical_bytes), mib(r.new_raw_bytes), dedup,
               mib(r.stored_bytes), r.packs, r.puts);
    }
    return EXIT_OK;
}

/* What a replicated step is called: from peers beside the store, or from
 * the peers alone when the store cannot be reached (docs/PEERS.md). */
static const char *replicated_label(st_store *s)
{
    return st_store_peers_alone(s) ? "replicated (store unreachable)" : "replicated";
}

/* The STATE column of ls: consistent (durable), replicated (restorable from
 * peers, not yet durable: docs/PEERS.md), partial, or unreadable. */
static const char *step_state(st_store *s, const st_step_info *si)
{
    return si->unreadable    ? "unreadable"
           : !si->consistent ? "partial"
           : si->replicated  ? replicated_label(s)
                             : "consistent";
}

/* How a consistent step can be restored, for --json: from the store, or
 * from peers until it is durable. */
static const char *restorable(st_store *s, int consistent, int replicated)
{
    return !consistent ? NULL : replicated ? replicated_label(s) : "durable";
}

/* Said on stderr (even with -q) whenever what is shown comes from the
 * peers alone: the caller must know the store was not consulted. */
static void say_peers_alone(st_store *s)
{
    if (st_store_peers_alone(s))
        fprintf(stderr, "ckptctl: the store cannot be reached: reading steps replicated on "
                        "peers, from the peers alone (none known to be durable)\n");
}

/* fail(), and when reading from the peers alone a step not found there is
 * said to be one the store may still have. */
static int fail_alone(st_store *s, st_err e)
{
    int rc = fail(e);
    if (e == ST_ERR_NOT_FOUND && st_store_peers_alone(s))
        fprintf(stderr, "ckptctl: the store cannot be reached, and no such step is complete on "
                        "the peers that answered\n");
    return rc;
}

/* ---- restore and get ---- */

/* The progress bar: drawn on stderr, only when it is a terminal. The store
 * calls progress_update from its download threads, one at a time. */
typedef struct progress {
    struct timespec start;
    double last_draw;
    int drawn;
} progress;

static double seconds_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0->tv_sec) + (double)(now.tv_nsec - t0->tv_nsec) / 1e9;
}

static void progress_update(void *arg, uint64_t done, uint64_t total)
{
    progress *p = arg;
    double t = seconds_since(&p->start);
    int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct > 100)
        pct = 100;
    /* Redraw at most 10 times a second, and always at the end. */
    if (p->drawn && done < total && t - p->last_draw < 0.1)
        return;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    int full = pct * WIDTH / 100;
    for (int i = 0; i < WIDTH; i++)
        bar[i] = i < full ? '#' : '.';
    bar[WIDTH] = 0;
    fprintf(stderr, "\rrestoring [%s] %3d%%  %.1f/%.1f MiB  %.1f MiB/s\033[K", bar, pct, mib(done),
            mib(total), t > 0 ? mib(done) / t : 0.0);
    fflush(stderr);
    p->last_draw = t;
    p->drawn = 1;
}

static void progress_finish(progress *p)
{
    if (p->drawn) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
}

static int print_restore_json(const cli *c, st_store *s, const st_restore_result *r)
{
    json_object *o = json_object_new_object();
    int bad = json_set_str(o, "job", c->job);
    bad |= json_set(o, "step", json_object_new_uint64(r->step));
    bad |= json_set_str(o, "restorable",
                        restorable(s, 1, st_store_step_replicated(s, c->job, r->step)));
    bad |= json_set_str(o, "to", c->to);
    bad |= c->have_rank ? json_set(o, "rank", json_object_new_int64(c->rank))
                        : json_set_null(o, "rank");
    const json_u64 fields[] = {{"files", r->files},
                               {"bytes", r->bytes},
                               {"gets", r->gets},
                               {"read_back_bytes", r->read_back}};
    bad |= json_set_u64s(o, JSON_FIELDS(fields));
    bad |= json_set(o, "fell_back", json_object_new_boolean(r->fell_back));
    if (r->fell_back) {
        bad |= json_set(o, "failed_step", json_object_new_uint64(r->failed_step));
        bad |= json_set_str(o, "failure", r->failure);
    } else {
        bad |= json_set_null(o, "failed_step");
        bad |= json_set_null(o, "failure");
    }
    return json_print(o, bad);
}

/* Restores c->step, or with latest the latest consistent step. */
static int restore_into(cli *c, st_store *s, int latest)
{
    progress prog = {.drawn = 0};
    clock_gettime(CLOCK_MONOTONIC, &prog.start);
    st_restore_opts ro = {
        .rank = c->have_rank ? c->rank : -1,
        .latest = latest,
        .no_fallback = c->no_fallback,
        .threads = c->threads,
    };
    if (!c->quiet && isatty(STDERR_FILENO)) {
        ro.progress = progress_update;
        ro.progress_arg = &prog;
    }
    st_restore_result r;
    memset(&r, 0, sizeof r);
    say_peers_alone(s);
    st_err e = st_store_restore(s, c->job, latest ? 0 : c->step, c->to, &ro, &r);
    progress_finish(&prog);
    if (e) {
        int rc = fail_alone(s, e);
        if (e == ST_ERR_CORRUPT && latest && c->no_fallback)
            fprintf(stderr, "ckptctl: not falling back to an older step (--no-fallback)\n");
        return rc;
    }
    /* Said even with -q: the caller got older data than it asked for. */
    if (r.fell_back)
        fprintf(stderr,
                "ckptctl: latest step %" PRIu64 " failed verification: %s\n"
                "ckptctl: fell back to step %" PRIu64 ", the previous consistent step\n",
                r.failed_step, r.failure[0] ? r.failure : "(no detail)", r.step);
    if (c->have_rank && r.files == 0 && !c->quiet)
        fprintf(stderr,
                "ckptctl: rank %d wrote no files of step %" PRIu64 ": nothing restored "
                "(files stored with 'ckptctl put' carry no rank)\n",
                c->rank, r.step);
    if (c->json)
        return print_restore_json(c, s, &r);
    if (!c->quiet)
        printf("restored step %" PRIu64 "%s of job %s into %s: %" PRIu64 " files, %.1f MiB, "
               "verified, %" PRIu64 " GETs%s\n",
               r.step, r.fell_back ? " (fallback)" : "", c->job, c->to, r.files, mib(r.bytes),
               r.gets, st_store_peers_alone(s) ? ", from peers alone (store unreachable)" : "");
    return EXIT_OK;
}

/* What restore and get both need: a job, no positional argument and a
 * target directory; no_to is the command's own words for a missing --to. */
static int need_target(const cli *c, int want_step, const char *no_to)
{
    if (!need(c, 1, want_step) || !no_positional(c))
        return 0;
    if (!c->to) {
        fprintf(stderr, "%s\n", no_to);
        return 0;
    }
    return 1;
}

int run_restore(cli *c, st_store *s)
{
    if (!need_target(c, 0, "ckptctl restore: no target: pass --to DIR"))
        return EXIT_USAGE;
    if (c->have_step && c->latest) {
        fprintf(stderr, "ckptctl restore: pass --step N or --latest, not both\n");
        return EXIT_USAGE;
    }
    if (c->have_step && c->no_fallback) {
        fprintf(stderr, "ckptctl restore: --no-fallback goes with --latest, not --step\n");
        return EXIT_USAGE;
    }
    return restore_into(c, s, !c->have_step);
}

int run_get(cli *c, st_store *s)
{
    if (!need_target(c, 1, "ckptctl get: expected --to DIR and no other arguments"))
        return EXIT_USAGE;
    return restore_into(c, s, 0);
}

/* ---- ls ---- */

static int list_jobs(cli *c, st_store *s)
{
    char **jobs;
    size_t n;
    st_err e = st_store_list_jobs(s, &jobs, &n);
    if (e)
        return fail(e);
    int rc = EXIT_OK;
    if (c->json) {
        json_object *a = json_object_new_array();
        int bad = !a;
        for (size_t i = 0; i < n; i++)
            bad |= json_push(a, json_object_new_string(jobs[i]));
        rc = json_print(a, bad);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", jobs[i]);
    }
    st_store_free_names(jobs, n);
    return rc;
}

static int print_steps_json(st_store *s, const st_step_info *steps, size_t n)
{
    json_object *a = json_object_new_array();
    int bad = !a;
    for (size_t i = 0; i < n; i++) {
        const st_step_info *si = &steps[i];
        json_object *o = json_object_new_object();
        bad |= json_set(o, "step", json_object_new_uint64(si->step));
        bad |= json_set_str(o, "state", step_state(s, si));
        bad |= json_set(o, "consistent", json_object_new_boolean(si->consistent));
        bad |= json_set(o, "complete", json_object_new_boolean(si->complete));
        const char *how = restorable(s, si->consistent, si->replicated);
        bad |= how ? json_set_str(o, "restorable", how) : json_set_null(o, "restorable");
        bad |= json_set_str(o, "why", si->why);
        const json_u64 fields[] = {{"files", si->files},
                                   {"bytes", si->bytes},
                                   {"nodes", si->nodes},
                                   {"ranks", si->ranks},
                                   {"world_size", si->world_size}};
        bad |= json_set_u64s(o, JSON_FIELDS(fields));
        bad |= json_set(o, "created_ns", json_object_new_int64(si->created_ns));
        bad |= json_push(a, o);
    }
    return json_print(a, bad);
}

static void print_steps_text(const cli *c, st_store *s, const st_step_info *steps, size_t n)
{
    if (!c->quiet)
        printf("%12s  %-10s %7s %12s %5s %9s  %s\n", "STEP", "STATE", "FILES", "SIZE MiB", "NODES",
               "RANKS", "WHY");
    size_t consistent = 0;
    for (size_t i = 0; i < n; i++) {
        const st_step_info *si = &steps[i];
        char ranks[32];
        if (si->world_size)
            snprintf(ranks, sizeof ranks, "%" PRIu32 "/%" PRIu32, si->ranks, si->world_size);
        else if (si->ranks)
            snprintf(ranks, sizeof ranks, "%" PRIu32 "/?", si->ranks);
        else
            snprintf(ranks, sizeof ranks, "-");
        consistent += si->consistent != 0;
        printf("%12" PRIu64 "  %-10s %7" PRIu64 " %12.1f %5" PRIu64 " %9s  %s\n", si->step,
               step_state(s, si), si->files, mib(si->bytes), si->nodes, ranks,
               si->consistent ? ""
               : si->why[0]   ? si->why
                              : "not complete");
    }
    if (c->quiet || st_store_peers_alone(s))
        return; /* the dedup ratio is the store's */
    st_store_stats st;
    st_err e = st_store_stats_job(s, c->job, &st);
    if (e) {
        fprintf(stderr, "ckptctl: warning: no dedup ratio: %s\n",
                st_errmsg()[0] ? st_errmsg() : st_strerror(e));
        return;
    }
    printf("job %s: %zu steps (%zu consistent); %.1f MiB logical, %.1f MiB stored", c->job, n,
           consistent, mib(st.logical_bytes), mib(st.stored_bytes));
    if (st.stored_bytes)
        printf(", dedup ratio %.2fx\n", dedup_ratio(st.logical_bytes, st.stored_bytes));
    else
        printf("\n");
}

int run_ls(cli *c, st_store *s)
{
    if (!no_positional(c))
        return EXIT_USAGE;
    if (!c->job)
        return list_jobs(c, s);
    st_step_info *steps;
    size_t n;
    say_peers_alone(s);
    st_err e = st_store_list_steps(s, c->job, &steps, &n);
    if (e)
        return fail(e);
    int rc = EXIT_OK;
    if (c->json)
        rc = print_steps_json(s, steps, n);
    else
        print_steps_text(c, s, steps, n);
    free(steps);
    return rc;
}

/* ---- latest ---- */

int run_latest(cli *c, st_store *s)
{
    if (!need(c, 1, 0) || !no_positional(c))
        return EXIT_USAGE;
    uint64_t step;
    say_peers_alone(s);
    st_err e = st_store_latest(s, c->job, &step);
    if (e)
        return fail_alone(s, e);
    if (c->json) {
        json_object *o = json_object_new_object();
        int bad = json_set_str(o, "job", c->job);
        bad |= json_set(o, "step", json_object_new_uint64(step));
        bad |= json_set_str(o, "restorable",
                            restorable(s, 1, st_store_step_replicated(s, c->job, step)));
        return json_print(o, bad);
    }
    printf("%" PRIu64 "\n", step); /* even with -q: it is the answer */
    if (!c->quiet && st_store_step_replicated(s, c->job, step) && !st_store_peers_alone(s))
        fprintf(stderr, "ckptctl: step %" PRIu64 " is replicated on peers, not yet durable\n",
                step);
    return EXIT_OK;
}

/* ---- verify ---- */

int run_verify(cli *c, st_store *s)
{
    if (!need(c, 1, 0) || !no_positional(c))
        return EXIT_USAGE;
    uint64_t step = c->step;
    st_err e;
    say_peers_alone(s);
    if (!c->have_step && (e = st_store_latest(s, c->job, &step)))
        return fail_alone(s, e);
    st_verify_result r;
    memset(&r, 0, sizeof r);
    e = st_store_verify(s, c->job, step, &r);
    if (e && e != ST_ERR_CORRUPT)
        return fail(e);
    /* Corruption is the answer verify was asked for: report it in full. */
    char why[512] = "";
    if (e)
        snprintf(why, sizeof why, "%s", st_errmsg()[0] ? st_errmsg() : st_strerror(e));
    if (c->json) {
        json_object *o = json_object_new_object();
        int bad = json_set_str(o, "job", c->job);
        bad |= json_set(o, "step", json_object_new_uint64(step));
        bad |= json_set(o, "ok", json_object_new_boolean(!e));
        const json_u64 fields[] = {{"files", r.files},
                                   {"chunks", r.chunks},
                                   {"bytes", r.bytes},
                                   {"bad_files", r.bad_files}};
        bad |= json_set_u64s(o, JSON_FIELDS(fields));
        bad |= json_set_str(o, "error", e ? why : NULL);
        int rc = json_print(o, bad);
        if (rc && !e)
            return rc;
    } else if (!e && !c->quiet) {
        printf("verified step %" PRIu64 " of job %s: %" PRIu64 " files, %" PRIu64
               " chunks, %.1f MiB: all good\n",
               step, c->job, r.files, r.chunks, mib(r.bytes));
    }
    if (e) {
        fprintf(stderr, "ckptctl: %s\n", why);
        fprintf(stderr,
                "ckptctl: step %" PRIu64 " of job %s is damaged: %" PRIu64 " of %" PRIu64
                " files failed verification\n",
                step, c->job, r.bad_files, r.files);
        return EXIT_CORRUPT;
    }
    return EXIT_OK;
}

/* ---- stats ---- */

static void stats_add(st_store_stats *sum, const st_store_stats *x)
{
    sum->steps += x->steps;
    sum->consistent_steps += x->consistent_steps;
    sum->logical_bytes += x->logical_bytes;
    sum->stored_bytes += x->stored_bytes;
    sum->packs += x->packs;
    sum->manifests += x->manifests;
    sum->part_records += x->part_records;
}

/* The counters of st into o; json_set's result. */
static int stats_json_fields(json_object *o, const st_store_stats *st)
{
    const json_u64 sizes[] = {{"steps", st->steps},
                              {"consistent_steps", st->consistent_steps},
                              {"logical_bytes", st->logical_bytes},
                              {"stored_bytes", st->stored_bytes}};
    const json_u64 objects[] = {
        {"packs", st->packs}, {"manifests", st->manifests}, {"part_records", st->part_records}};
    int bad = json_set_u64s(o, JSON_FIELDS(sizes));
    bad |= st->stored_bytes
               ? json_set_num(o, "dedup_ratio", dedup_ratio(st->logical_bytes, st->stored_bytes))
               : json_set_null(o, "dedup_ratio");
    bad |= json_set_u64s(o, JSON_FIELDS(objects));
    return bad;
}

static void stats_text(const char *label, const st_store_stats *st)
{
    printf("%-14s %s\n", "job", label);
    printf("%-14s %" PRIu64 " (%" PRIu64 " consistent)\n", "steps", st->steps,
           st->consistent_steps);
    printf("%-14s %.1f MiB (%" PRIu64 " bytes)\n", "logical", mib(st->logical_bytes),
           st->logical_bytes);
    printf("%-14s %.1f MiB (%" PRIu64 " bytes)\n", "stored", mib(st->stored_bytes),
           st->stored_bytes);
    if (st->stored_bytes)
        printf("%-14s %.2fx\n", "dedup ratio", dedup_ratio(st->logical_bytes, st->stored_bytes));
    else
        printf("%-14s -\n", "dedup ratio");
    printf("%-14s %" PRIu64 " packs, %" PRIu64 " manifests, %" PRIu64 " part records\n", "objects",
           st->packs, st->manifests, st->part_records);
}

int run_stats(cli *c, st_store *s)
{
    if (!no_positional(c))
        return EXIT_USAGE;
    char *one[1] = {(char *)c->job};
    char **jobs = one;
    size_t n = 1;
    st_err e;
    if (!c->job && (e = st_store_list_jobs(s, &jobs, &n)))
        return fail(e);
    st_store_stats *per = calloc(n ? n : 1, sizeof *per);
    st_store_stats total;
    memset(&total, 0, sizeof total);
    int rc = EXIT_OK;
    if (!per) {
        fprintf(stderr, "ckptctl: out of memory\n");
        rc = EXIT_STORE;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if ((e = st_store_stats_job(s, jobs[i], &per[i]))) {
            rc = fail(e);
            goto out;
        }
        stats_add(&total, &per[i]);
    }
    st_request_counts rq;
    st_store_requests(s, &rq);
    if (c->json) {
        json_object *o = json_object_new_object();
        int bad = json_set_str(o, "job", c->job);
        bad |= stats_json_fields(o, &total);
        if (!c->job) { /* filled before it goes in: json_set releases it on failure */
            json_object *a = json_object_new_array();
            for (size_t i = 0; i < n; i++) {
                json_object *j = json_object_new_object();
                bad |= json_set_str(j, "job", jobs[i]);
                bad |= stats_json_fields(j, &per[i]);
                bad |= json_push(a, j);
            }
            bad |= json_set(o, "jobs", a);
        }
        json_object *q = json_object_new_object();
        const json_u64 requests[] = {{"put", rq.put},    {"get", rq.get},
                                     {"stat", rq.stat},  {"list", rq.list},
                                     {"delete", rq.del}, {"delete_batch", rq.del_batch}};
        bad |= json_set_u64s(q, JSON_FIELDS(requests));
        bad |= json_set(o, "requests", q);
        rc = json_print(o, bad);
    } else if (!c->quiet) {
        if (!c->job)
            for (size_t i = 0; i < n; i++) {
                stats_text(jobs[i], &per[i]);
                printf("\n");
            }
        char label[64];
        snprintf(label, sizeof label, "(all %zu jobs)", n);
        stats_text(c->job ? c->job : label, &total);
        printf("%-14s %" PRIu64 " PUT, %" PRIu64 " GET, %" PRIu64 " HEAD, %" PRIu64
               " LIST, %" PRIu64 " DELETE, %" PRIu64 " batched DELETE (made by this command)\n",
               "requests", rq.put, rq.get, rq.stat, rq.list, rq.del, rq.del_batch);
    }
out:
    free(per);
    if (!c->job)
        st_store_free_names(jobs, n);
    return rc;
}
