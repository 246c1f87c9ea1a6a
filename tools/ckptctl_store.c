/*
 * ckptctl_store — the verbs that work on the store through the facade
 * (ckptstore.h): put, get, restore, ls, latest, verify, stats.
 *
 * Each verb checks its arguments, makes its store calls, and prints either a
 * line for people on stdout or, with --json, one JSON document. On failure
 * nothing goes to stdout: the message is on stderr and the exit code says
 * what kind of failure it was (ckptctl.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ckptctl.h"

static int no_positional(const cli *c)
{
    if (c->argc) {
        fprintf(stderr, "ckptctl %s: unexpected argument '%s'\n", c->verb, c->argv[0]);
        return 0;
    }
    return 1;
}

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
        jw w = {0};
        jw_begin_obj(&w, NULL);
        jw_str(&w, "job", c->job);
        jw_u64(&w, "step", c->step);
        jw_u64(&w, "files", r.files);
        jw_u64(&w, "skipped", r.skipped);
        jw_u64(&w, "bytes", r.logical_bytes);
        jw_u64(&w, "chunks", r.chunks);
        jw_u64(&w, "new_chunks", r.new_chunks);
        jw_u64(&w, "new_bytes", r.new_raw_bytes);
        jw_u64(&w, "stored_bytes", r.stored_bytes);
        jw_u64(&w, "packs", r.packs);
        jw_u64(&w, "puts", r.puts);
        jw_end_obj(&w);
        jw_done(&w);
    } else if (!c->quiet) {
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

static void print_restore_json(const cli *c, const st_restore_result *r)
{
    jw w = {0};
    jw_begin_obj(&w, NULL);
    jw_str(&w, "job", c->job);
    jw_u64(&w, "step", r->step);
    jw_str(&w, "to", c->to);
    if (c->have_rank)
        jw_i64(&w, "rank", c->rank);
    else
        jw_null(&w, "rank");
    jw_u64(&w, "files", r->files);
    jw_u64(&w, "bytes", r->bytes);
    jw_u64(&w, "gets", r->gets);
    jw_bool(&w, "fell_back", r->fell_back);
    if (r->fell_back) {
        jw_u64(&w, "failed_step", r->failed_step);
        jw_str(&w, "failure", r->failure);
    } else {
        jw_null(&w, "failed_step");
        jw_null(&w, "failure");
    }
    jw_end_obj(&w);
    jw_done(&w);
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
    st_err e = st_store_restore(s, c->job, latest ? 0 : c->step, c->to, &ro, &r);
    progress_finish(&prog);
    if (e) {
        int rc = fail(e);
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
        print_restore_json(c, &r);
    else if (!c->quiet)
        printf("restored step %" PRIu64 "%s of job %s into %s: %" PRIu64 " files, %.1f MiB, "
               "verified, %" PRIu64 " GETs\n",
               r.step, r.fell_back ? " (fallback)" : "", c->job, c->to, r.files, mib(r.bytes),
               r.gets);
    return EXIT_OK;
}

int run_restore(cli *c, st_store *s)
{
    if (!need(c, 1, 0) || !no_positional(c))
        return EXIT_USAGE;
    if (!c->to) {
        fprintf(stderr, "ckptctl restore: no target: pass --to DIR\n");
        return EXIT_USAGE;
    }
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
    if (!need(c, 1, 1) || !no_positional(c))
        return EXIT_USAGE;
    if (!c->to) {
        fprintf(stderr, "ckptctl get: expected --to DIR and no other arguments\n");
        return EXIT_USAGE;
    }
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
    if (c->json) {
        jw w = {0};
        jw_begin_arr(&w, NULL);
        for (size_t i = 0; i < n; i++)
            jw_str(&w, NULL, jobs[i]);
        jw_end_arr(&w);
        jw_done(&w);
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", jobs[i]);
    }
    st_store_free_names(jobs, n);
    return EXIT_OK;
}

/* The STATE column of ls: consistent, partial, or unreadable. */
static const char *step_state(const st_step_info *si)
{
    return si->unreadable ? "unreadable" : si->consistent ? "consistent" : "partial";
}

static void print_steps_json(const st_step_info *steps, size_t n)
{
    jw w = {0};
    jw_begin_arr(&w, NULL);
    for (size_t i = 0; i < n; i++) {
        const st_step_info *si = &steps[i];
        jw_begin_obj(&w, NULL);
        jw_u64(&w, "step", si->step);
        jw_str(&w, "state", step_state(si));
        jw_bool(&w, "consistent", si->consistent);
        jw_bool(&w, "complete", si->complete);
        jw_str(&w, "why", si->why);
        jw_u64(&w, "files", si->files);
        jw_u64(&w, "bytes", si->bytes);
        jw_u64(&w, "nodes", si->nodes);
        jw_u64(&w, "ranks", si->ranks);
        jw_u64(&w, "world_size", si->world_size);
        jw_i64(&w, "created_ns", si->created_ns);
        jw_end_obj(&w);
    }
    jw_end_arr(&w);
    jw_done(&w);
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
               step_state(si), si->files, mib(si->bytes), si->nodes, ranks,
               si->consistent ? ""
               : si->why[0]   ? si->why
                              : "not complete");
    }
    if (c->quiet)
        return;
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
    st_err e = st_store_list_steps(s, c->job, &steps, &n);
    if (e)
        return fail(e);
    if (c->json)
        print_steps_json(steps, n);
    else
        print_steps_text(c, s, steps, n);
    free(steps);
    return EXIT_OK;
}

/* ---- latest ---- */

int run_latest(cli *c, st_store *s)
{
    if (!need(c, 1, 0) || !no_positional(c))
        return EXIT_USAGE;
    uint64_t step;
    st_err e = st_store_latest(s, c->job, &step);
    if (e)
        return fail(e);
    if (c->json) {
        jw w = {0};
        jw_begin_obj(&w, NULL);
        jw_str(&w, "job", c->job);
        jw_u64(&w, "step", step);
        jw_end_obj(&w);
        jw_done(&w);
    } else {
        printf("%" PRIu64 "\n", step); /* even with -q: it is the answer */
    }
    return EXIT_OK;
}

/* ---- verify ---- */

int run_verify(cli *c, st_store *s)
{
    if (!need(c, 1, 0) || !no_positional(c))
        return EXIT_USAGE;
    uint64_t step = c->step;
    st_err e;
    if (!c->have_step && (e = st_store_latest(s, c->job, &step)))
        return fail(e);
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
        jw w = {0};
        jw_begin_obj(&w, NULL);
        jw_str(&w, "job", c->job);
        jw_u64(&w, "step", step);
        jw_bool(&w, "ok", !e);
        jw_u64(&w, "files", r.files);
        jw_u64(&w, "chunks", r.chunks);
        jw_u64(&w, "bytes", r.bytes);
        jw_u64(&w, "bad_files", r.bad_files);
        jw_str(&w, "error", e ? why : NULL);
        jw_end_obj(&w);
        jw_done(&w);
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

static void stats_json_fields(jw *w, const st_store_stats *st)
{
    jw_u64(w, "steps", st->steps);
    jw_u64(w, "consistent_steps", st->consistent_steps);
    jw_u64(w, "logical_bytes", st->logical_bytes);
    jw_u64(w, "stored_bytes", st->stored_bytes);
    if (st->stored_bytes)
        jw_num(w, "dedup_ratio", dedup_ratio(st->logical_bytes, st->stored_bytes));
    else
        jw_null(w, "dedup_ratio");
    jw_u64(w, "packs", st->packs);
    jw_u64(w, "manifests", st->manifests);
    jw_u64(w, "part_records", st->part_records);
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
        jw w = {0};
        jw_begin_obj(&w, NULL);
        jw_str(&w, "job", c->job);
        stats_json_fields(&w, &total);
        if (!c->job) {
            jw_begin_arr(&w, "jobs");
            for (size_t i = 0; i < n; i++) {
                jw_begin_obj(&w, NULL);
                jw_str(&w, "job", jobs[i]);
                stats_json_fields(&w, &per[i]);
                jw_end_obj(&w);
            }
            jw_end_arr(&w);
        }
        jw_begin_obj(&w, "requests");
        jw_u64(&w, "put", rq.put);
        jw_u64(&w, "get", rq.get);
        jw_u64(&w, "stat", rq.stat);
        jw_u64(&w, "list", rq.list);
        jw_u64(&w, "delete", rq.del);
        jw_end_obj(&w);
        jw_end_obj(&w);
        jw_done(&w);
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
               " LIST, %" PRIu64 " DELETE (made by this command)\n",
               "requests", rq.put, rq.get, rq.stat, rq.list, rq.del);
    }
out:
    free(per);
    if (!c->job)
        st_store_free_names(jobs, n);
    return rc;
}
