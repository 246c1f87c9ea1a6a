/*
 * ckptctl — the command line over the store engine.
 *
 *   ckptctl [--store URL] [--job J] put --step N DIR
 *   ckptctl [--store URL] [--job J] get --step N --to DIR
 *   ckptctl [--store URL] [--job J] ls
 *
 * Options may appear before or after the verb. --store defaults to
 * $CKPT_STORE, then to the embedded file:// store; --job to $CKPT_JOB.
 * Exit codes (also in the man page): 0 success, 1 not found, 2 usage,
 * 3 store or I/O error, 4 corrupt data, 5 already exists.
 */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptstore.h"

enum exit_code {
    EXIT_OK = 0,
    EXIT_NOT_FOUND = 1,
    EXIT_USAGE = 2,
    EXIT_STORE = 3,
    EXIT_CORRUPT = 4,
    EXIT_EXISTS = 5,
};

typedef struct cli {
    const char *store;
    const char *job;
    const char *state_dir;
    const char *node;
    const char *to;
    uint64_t step;
    int have_step;
    int json;
    int quiet;
    int help;
    int argc; /* positional arguments after the verb */
    char **argv;
} cli;

typedef struct verb {
    const char *name;
    int (*run)(cli *c, st_store *s);
    const char *usage;
    const char *help;
} verb;

static int exit_for(st_err e)
{
    switch (e) {
    case ST_OK: return EXIT_OK;
    case ST_ERR_NOT_FOUND: return EXIT_NOT_FOUND;
    case ST_ERR_INVALID: return EXIT_USAGE;
    case ST_ERR_CORRUPT: return EXIT_CORRUPT;
    case ST_ERR_EXISTS: return EXIT_EXISTS;
    default: return EXIT_STORE;
    }
}

static int fail(st_err e)
{
    fprintf(stderr, "ckptctl: %s\n", st_errmsg()[0] ? st_errmsg() : st_strerror(e));
    return exit_for(e);
}

static void print_warning(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "ckptctl: warning: %s\n", msg);
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* Prints a JSON string literal (escapes quotes, backslashes, controls). */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            printf("\\%c", ch);
        else if (ch < 0x20)
            printf("\\u%04x", ch);
        else
            putchar(ch);
    }
    putchar('"');
}

static int need(cli *c, int want_job, int want_step)
{
    if (want_job && !c->job) {
        fprintf(stderr, "ckptctl: no job: pass --job J or set CKPT_JOB\n");
        return 0;
    }
    if (want_step && !c->have_step) {
        fprintf(stderr, "ckptctl: no step: pass --step N\n");
        return 0;
    }
    return 1;
}

static int run_put(cli *c, st_store *s)
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
    double dedup =
        r.logical_bytes ? 100.0 * (1.0 - (double)r.new_raw_bytes / r.logical_bytes) : 0.0;
    if (c->json)
        printf("{\"job\":\"%s\",\"step\":%" PRIu64 ",\"files\":%" PRIu64 ",\"skipped\":%" PRIu64
               ",\"bytes\":%" PRIu64 ",\"chunks\":%" PRIu64 ",\"new_chunks\":%" PRIu64
               ",\"new_bytes\":%" PRIu64 ",\"stored_bytes\":%" PRIu64 ",\"packs\":%" PRIu64
               ",\"puts\":%" PRIu64 "}\n",
               c->job, c->step, r.files, r.skipped, r.logical_bytes, r.chunks, r.new_chunks,
               r.new_raw_bytes, r.stored_bytes, r.packs, r.puts);
    else if (!c->quiet)
        printf("stored step %" PRIu64 " of job %s: %" PRIu64 " files, %.1f MiB; "
               "%.1f MiB new (%.1f%% deduplicated), %.1f MiB in %" PRIu64 " packs, %" PRIu64
               " PUTs\n",
               c->step, c->job, r.files, mib(r.logical_bytes), mib(r.new_raw_bytes), dedup,
               mib(r.stored_bytes), r.packs, r.puts);
    return EXIT_OK;
}

static int run_get(cli *c, st_store *s)
{
    if (!need(c, 1, 1))
        return EXIT_USAGE;
    if (!c->to || c->argc) {
        fprintf(stderr, "ckptctl get: expected --to DIR and no other arguments\n");
        return EXIT_USAGE;
    }
    st_get_result r;
    st_err e = st_store_get_dir(s, c->job, c->step, c->to, &r);
    if (e)
        return fail(e);
    if (c->json)
        printf("{\"job\":\"%s\",\"step\":%" PRIu64 ",\"files\":%" PRIu64 ",\"bytes\":%" PRIu64
               ",\"gets\":%" PRIu64 "}\n",
               c->job, c->step, r.files, r.bytes, r.gets);
    else if (!c->quiet)
        printf("restored step %" PRIu64 " of job %s into %s: %" PRIu64 " files, %.1f MiB, "
               "verified\n",
               c->step, c->job, c->to, r.files, mib(r.bytes));
    return EXIT_OK;
}

static int list_jobs(cli *c, st_store *s)
{
    char **jobs;
    size_t n;
    st_err e = st_store_list_jobs(s, &jobs, &n);
    if (e)
        return fail(e);
    if (c->json) {
        printf("[");
        for (size_t i = 0; i < n; i++) {
            printf(i ? "," : "");
            json_string(jobs[i]);
        }
        printf("]\n");
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s\n", jobs[i]);
    }
    st_store_free_names(jobs, n);
    return EXIT_OK;
}

static int run_ls(cli *c, st_store *s)
{
    if (!c->job)
        return list_jobs(c, s);
    st_step_info *steps;
    size_t n;
    st_err e = st_store_list_steps(s, c->job, &steps, &n);
    if (e)
        return fail(e);
    if (c->json) {
        printf("[");
        for (size_t i = 0; i < n; i++)
            printf("%s{\"step\":%" PRIu64 ",\"files\":%" PRIu64 ",\"bytes\":%" PRIu64
                   ",\"nodes\":%" PRIu64 ",\"created_ns\":%" PRId64 ",\"state\":\"durable\"}",
                   i ? "," : "", steps[i].step, steps[i].files, steps[i].bytes, steps[i].nodes,
                   steps[i].created_ns);
        printf("]\n");
    } else {
        if (!c->quiet)
            printf("%12s %8s %12s %s\n", "STEP", "FILES", "MIB", "STATE");
        for (size_t i = 0; i < n; i++)
            printf("%12" PRIu64 " %8" PRIu64 " %12.1f %s\n", steps[i].step, steps[i].files,
                   mib(steps[i].bytes), "durable");
    }
    free(steps);
    return EXIT_OK;
}

static const verb verbs[] = {
    {"put", run_put, "put --step N DIR",
     "Store every regular file under DIR as step N of the job. Files are chunked,\n"
     "deduplicated against everything the job already stored, compressed and packed;\n"
     "the step becomes visible only once all of it is in the store.\n"},
    {"get", run_get, "get --step N --to DIR",
     "Restore step N of the job into DIR (created if missing). Every chunk and every\n"
     "file is verified; a file appears under its name only once it is complete.\n"},
    {"ls", run_ls, "ls",
     "Without --job: list the jobs in the store. With --job: list its committed steps.\n"},
};

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ckptctl [options] VERB [verb options]\n\n"
            "Verbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(out, "  ckptctl %s\n", verbs[i].usage);
    fprintf(out,
            "\nOptions:\n"
            "  --store URL      object store: file:///abs/dir or s3://bucket/prefix\n"
            "                   (default: $CKPT_STORE, else the embedded file:// store)\n"
            "  --job J          job name (default: $CKPT_JOB)\n"
            "  --step N         step number\n"
            "  --to DIR         target directory for get\n"
            "  --state-dir DIR  local state (dedup index); default ~/.cache/ckptfs\n"
            "  --node NAME      this writer's node name (default: host name)\n"
            "  --json           machine-readable output\n"
            "  -q, --quiet      print only errors\n"
            "  -h, --help       this help, or the verb's with a verb\n"
            "  --version        print the version\n\n"
            "Exit codes: 0 ok, 1 not found, 2 usage, 3 store or I/O error, 4 corrupt data,\n"
            "5 already exists.\n");
}

static int parse_step(const char *s, uint64_t *out)
{
    char *end;
    if (!*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    enum { O_STORE = 256, O_JOB, O_STEP, O_TO, O_STATE, O_NODE, O_JSON, O_VERSION };
    static const struct option opts[] = {
        {"store", required_argument, NULL, O_STORE}, {"job", required_argument, NULL, O_JOB},
        {"step", required_argument, NULL, O_STEP},   {"to", required_argument, NULL, O_TO},
        {"state-dir", required_argument, NULL, O_STATE},
        {"node", required_argument, NULL, O_NODE},   {"json", no_argument, NULL, O_JSON},
        {"quiet", no_argument, NULL, 'q'},           {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},   {NULL, 0, NULL, 0},
    };
    cli c = {.store = getenv("CKPT_STORE"), .job = getenv("CKPT_JOB")};
    if (c.store && !*c.store)
        c.store = NULL;
    if (c.job && !*c.job)
        c.job = NULL;
    int ch;
    while ((ch = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (ch) {
        case O_STORE: c.store = optarg; break;
        case O_JOB: c.job = optarg; break;
        case O_STEP:
            if (parse_step(optarg, &c.step)) {
                fprintf(stderr, "ckptctl: --step wants a non-negative integer, got '%s'\n",
                        optarg);
                return EXIT_USAGE;
            }
            c.have_step = 1;
            break;
        case O_TO: c.to = optarg; break;
        case O_STATE: c.state_dir = optarg; break;
        case O_NODE: c.node = optarg; break;
        case O_JSON: c.json = 1; break;
        case 'q': c.quiet = 1; break;
        case 'h': c.help = 1; break;
        case O_VERSION: printf("ckptctl 0.1.0\n"); return EXIT_OK;
        default: usage(stderr); return EXIT_USAGE;
        }
    }
    if (optind >= argc) {
        usage(c.help ? stdout : stderr);
        return c.help ? EXIT_OK : EXIT_USAGE;
    }
    const verb *v = NULL;
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[optind], verbs[i].name))
            v = &verbs[i];
    if (!v && !strcmp(argv[optind], "help")) {
        usage(stdout);
        return EXIT_OK;
    }
    if (!v) {
        fprintf(stderr, "ckptctl: unknown verb '%s' (see ckptctl --help)\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (c.help) {
        printf("usage: ckptctl [options] %s\n\n%s\nSee ckptctl --help for the options.\n",
               v->usage, v->help);
        return EXIT_OK;
    }
    c.argc = argc - optind - 1;
    c.argv = argv + optind + 1;

    char default_url[PATH_MAX + 16];
    if (!c.store && !(c.store = st_default_store_url(default_url, sizeof default_url))) {
        fprintf(stderr, "ckptctl: cannot derive the default store path; pass --store\n");
        return EXIT_USAGE;
    }
    st_store_options so = {.url = c.store, .state_dir = c.state_dir, .node = c.node,
                           .warn = print_warning};
    st_store *s;
    st_err e = st_store_open(&so, &s);
    if (e)
        return fail(e);
    int rc = v->run(&c, s);
    st_store_close(s);
    return rc;
}
