/*
 * ckptctl_cli.h — what every ckptctl verb uses, below the verbs and main:
 * the parsed command line (cli), the exit codes, and the helpers for errors,
 * arguments and --json output (json-c), in ckptctl_cli.c.
 *
 * ckptctl_cli.c may call the store's facade (error text), json-c and libc;
 * never a verb and never main. main (ckptctl.c) fills a cli from argv; a
 * verb reads it. Single-threaded: only main's thread calls these.
 */
#ifndef CKPTCTL_CLI_H
#define CKPTCTL_CLI_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "ckptstore.h"

/* Exit codes; the numbers are part of the interface (man page, --help). */
enum exit_code {
    EXIT_OK = 0,
    EXIT_NOT_FOUND = 1, /* no such step or job; no consistent step */
    EXIT_USAGE = 2,
    EXIT_STORE = 3,   /* store or local I/O error; a key file refused or not holding a key */
    EXIT_CORRUPT = 4, /* data failed verification */
    EXIT_EXISTS = 5,
    EXIT_TIMEOUT = 6, /* wait gave up */
    EXIT_PARTIAL = 7, /* gc did only part of its work (the sweep was skipped) */
};

/* Options a verb accepts, besides the global ones (store, job, state-dir,
 * node, quiet, help). */
enum opt_bit {
    OPT_STEP = 1 << 0,
    OPT_TO = 1 << 1,
    OPT_JSON = 1 << 2,
    OPT_LATEST = 1 << 3,
    OPT_RANK = 1 << 4,
    OPT_NO_FALLBACK = 1 << 5,
    OPT_THREADS = 1 << 6,
    OPT_MOUNT = 1 << 7,
    OPT_WORLD = 1 << 8,
    OPT_TIMEOUT = 1 << 9,
    OPT_GC = 1 << 10, /* --keep-last --keep-every --grace --dry-run --repack-dead --batch --compact
                         --progress */
    OPT_SEAL = 1 << 11,     /* --seal-threads */
    OPT_COMPRESS = 1 << 12, /* --compression */
    OPT_APPEND = 1 << 13,   /* --append (keygen) */
};

typedef struct cli {
    /* What st_store_open() gets, filled by the options themselves: --store
     * (url), --state (state_dir), --node, --s3-* (NULL: $CKPT_S3_*). */
    st_store_options open;
    const char *job, *to, *mount; /* --job (NULL: $CKPT_JOB), --to, --mount */
    uint64_t step;
    int have_step;
    int latest;
    int rank; /* -1: all ranks */
    int have_rank;
    int no_fallback;
    unsigned threads;
    uint32_t world_size;
    int have_world;
    double timeout;                 /* seconds; <= 0: wait forever */
    uint64_t keep_last, keep_every; /* gc: 0 = rule not given */
    double grace;                   /* gc: seconds; <= 0: the default (1 h) */
    int dry_run;
    double repack_dead;  /* gc: percent dead that retires a pack; 0: the default (50) */
    uint32_t batch;      /* gc: objects per batch; 0: the default (1000) */
    int progress;        /* gc: progress lines on stderr even when it is not a terminal */
    int compact;         /* gc: compact mostly-dead packs (docs/GC.md, "Compaction") */
    double compact_dead; /* gc: percent dead that makes a pack a candidate; 0: the default (9) */
    int append;          /* keygen: add a sealing key to an existing key file */
    int json;
    int quiet;
    int help;
    unsigned given; /* enum opt_bit of the options on the command line */
    int argc;       /* positional arguments after the verb */
    char **argv;
    const char *verb;
} cli;

/* ---- errors ---- */

/*! The exit code for a store error. */
int exit_for(st_err e);
/*! Prints the store's message for e ("ckptctl: ...") and returns exit_for(e). */
int fail(st_err e);
/*! Checks that a job (and with want_step a --step) was given; prints what
 *  is missing. Returns 1 if all is there, 0 otherwise (exit EXIT_USAGE). */
int need(const cli *c, int want_job, int want_step);
/*! Checks that no positional argument follows the verb; prints the first
 *  one otherwise. Returns 1 if there is none, 0 otherwise (exit EXIT_USAGE). */
int no_positional(const cli *c);

/*! Bytes as MiB for human output. */
double mib(uint64_t bytes);

/* ---- JSON output (json-c) ----
 * A verb builds its one document with json-c and hands it to json_print.
 * The setters take over val (json-c's reference) and return 0, or -1 when
 * obj or val is NULL (a json-c constructor ran out of memory) or the
 * insertion failed; a verb ORs their results and passes that on. */
int json_set(json_object *obj, const char *key, json_object *val);
/*! s as a string; NULL s: null. */
int json_set_str(json_object *obj, const char *key, const char *s);
int json_set_null(json_object *obj, const char *key);
/*! v with 3 decimals ("1.500"); inf/nan: null (JSON has neither). */
int json_set_num(json_object *obj, const char *key, double v);
/*! One unsigned field of a --json answer: its documented key, its value. */
typedef struct json_u64 {
    const char *key;
    uint64_t value;
} json_u64;
/*! json_set of each of the n fields, in order, as JSON integers; the ORed
 *  results. A verb lists its counters as one table of rows. */
int json_set_u64s(json_object *obj, const json_u64 *fields, size_t n);
#define JSON_FIELDS(table) (table), sizeof(table) / sizeof *(table)
/*! Appends val to array arr; as json_set. */
int json_push(json_object *arr, json_object *val);
/*! Prints doc compactly on one line on stdout, as ckptctl always did, and
 *  releases it. With failed set (a setter failed) it prints "out of memory"
 *  on stderr instead. Returns EXIT_OK or EXIT_STORE. */
int json_print(json_object *doc, int failed);

#endif
