/*
 * ckptctl.h — what the ckptctl source files share: the parsed command line,
 * the verb table entry, exit codes, and the helpers for errors, JSON output,
 * JSON input and the mount's status file.
 *
 * ckptctl is single-threaded except for the restore progress callback, which
 * the store calls serialised from its download threads.
 *
 *   ckptctl.c        main: options, verb table, help, opening the store
 *   ckptctl_store.c  verbs over the store: put get restore ls latest verify stats
 *   ckptctl_mount.c  verbs over a local mount: commit wait status
 *   ckptctl_gc.c     retention and GC: gc pin unpin
 *   ckptctl_json.c   JSON writer (escaped strings) and a small reader for the status file
 */
#ifndef CKPTCTL_H
#define CKPTCTL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "ckptstore.h"

/* Exit codes; the numbers are part of the interface (man page, --help). */
enum exit_code {
    EXIT_OK = 0,
    EXIT_NOT_FOUND = 1, /* no such step or job; no consistent step */
    EXIT_USAGE = 2,
    EXIT_STORE = 3,   /* store or local I/O error */
    EXIT_CORRUPT = 4, /* data failed verification */
    EXIT_EXISTS = 5,
    EXIT_TIMEOUT = 6, /* wait gave up */
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
    OPT_GC =
        1 << 10, /* --keep-last --keep-every --grace --dry-run --repack-dead --batch --progress */
};

typedef struct cli {
    const char *store;
    const char *job;
    const char *state_dir;
    const char *node;
    const char *s3_endpoint; /* --s3-endpoint; NULL: $CKPT_S3_ENDPOINT */
    const char *s3_signature, *s3_region, *s3_addressing, *s3_ca_file; /* --s3-*; NULL: env */
    const char *to;
    const char *mount;
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
    double repack_dead; /* gc: percent dead that retires a pack; 0: the default (50) */
    uint32_t batch;     /* gc: objects per batch; 0: the default (1000) */
    int progress;       /* gc: progress lines on stderr even when it is not a terminal */
    int json;
    int quiet;
    int help;
    unsigned given; /* enum opt_bit of the options on the command line */
    int argc;       /* positional arguments after the verb */
    char **argv;
    const char *verb;
} cli;

typedef struct verb {
    const char *name;
    int (*run)(cli *c, st_store *s); /* s is NULL when needs_store is 0 */
    int needs_store;
    unsigned opts; /* enum opt_bit accepted */
    const char *usage;
    const char *help;
} verb;

/* ---- verbs (one function each) ---- */
int run_put(cli *c, st_store *s);
int run_get(cli *c, st_store *s);
int run_restore(cli *c, st_store *s);
int run_ls(cli *c, st_store *s);
int run_latest(cli *c, st_store *s);
int run_verify(cli *c, st_store *s);
int run_stats(cli *c, st_store *s);
int run_commit(cli *c, st_store *s);
int run_wait(cli *c, st_store *s);
int run_status(cli *c, st_store *s);
int run_gc(cli *c, st_store *s);
int run_pin(cli *c, st_store *s);
int run_unpin(cli *c, st_store *s);

/* ---- errors ---- */

/*! The exit code for a store error. */
int exit_for(st_err e);
/*! Prints the store's message for e ("ckptctl: ...") and returns exit_for(e). */
int fail(st_err e);
/*! Checks that a job (and with want_step a --step) was given; prints what
 *  is missing. Returns 1 if all is there, 0 otherwise (exit EXIT_USAGE). */
int need(const cli *c, int want_job, int want_step);

/*! Bytes as MiB for human output. */
double mib(uint64_t bytes);

/* ---- JSON output ----
 * A writer that places commas itself: open containers, then key/value calls.
 * Values outside an object take no key (pass NULL). Writes to stdout. */
typedef struct jw {
    int depth;
    unsigned char first[32]; /* per depth: nothing written yet in this container */
} jw;

void jw_begin_obj(jw *w, const char *key);
void jw_end_obj(jw *w);
void jw_begin_arr(jw *w, const char *key);
void jw_end_arr(jw *w);
void jw_str(jw *w, const char *key, const char *val); /* NULL val: null */
void jw_u64(jw *w, const char *key, uint64_t val);
void jw_i64(jw *w, const char *key, int64_t val);
void jw_num(jw *w, const char *key, double val); /* 3 decimals; inf/nan: null */
void jw_bool(jw *w, const char *key, int val);
void jw_null(jw *w, const char *key);
/*! Ends the document with a newline. */
void jw_done(jw *w);
/*! Prints s as a JSON string literal to f (quotes, backslashes and control
 *  characters escaped; other bytes as they are). */
void json_print_string(FILE *f, const char *s);

/* ---- JSON input (for the status file) ---- */
typedef enum jv_type { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_type;

typedef struct jv {
    jv_type type;
    int boolean;
    double num;
    char *str;        /* JV_STR, NUL-terminated, unescaped */
    struct jv *items; /* JV_ARR, JV_OBJ: n values */
    char **keys;      /* JV_OBJ: n keys */
    size_t n;
} jv;

/*! Parses one JSON document (text, len bytes). 0 on success (*out owned by
 *  the caller, jv_free()); -1 with a message in err otherwise. */
int jv_parse(const char *text, size_t len, jv *out, char *err, size_t errcap);
void jv_free(jv *v);
/*! The member `key` of an object, or NULL (also when v is not an object). */
const jv *jv_get(const jv *v, const char *key);
/*! Member as a string ("" if absent or not a string) / number (0). */
const char *jv_str(const jv *v, const char *key);
double jv_num(const jv *v, const char *key);

/* ---- the mount's status file ---- */

/*!
 * Reads MOUNT/.ckptfs/status into *text (malloc'd, NUL-terminated, *len
 * bytes). Returns EXIT_OK, or EXIT_STORE after printing why (no mount there,
 * unreadable).
 */
int status_read(const char *mount, char **text, size_t *len);
/*! status_read + jv_parse. EXIT_OK with *doc to jv_free(), else the exit code
 *  after printing why. */
int status_load(const char *mount, jv *doc);

#endif
