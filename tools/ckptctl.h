/*
 * ckptctl.h — what main (ckptctl.c) and the verbs share: the verb table
 * entry and each verb's entry point. What the verbs use below them (the
 * parsed command line, exit codes, errors, JSON output) is ckptctl_cli.h.
 *
 * ckptctl is single-threaded except for the restore progress callback, which
 * the store calls serialised from its download threads.
 *
 *   ckptctl.c        main: options, verb table, help, opening the store
 *   ckptctl_store.c  verbs over the store: put get restore ls latest verify stats
 *   ckptctl_mount.c  verbs over a local mount: commit wait status (the protocol
 *                    is client/ckpt_mountctl, shared with libckpt)
 *   ckptctl_gc.c     retention and GC: gc pin unpin
 *   ckptctl_warmup.c warmup: a step fetched into a mount's staging ahead of use
 *   ckptctl_keys.c   keygen: the client-side encryption key file
 *   ckptctl_cli.c    below the verbs: errors, exit codes, arguments, --json output
 *
 * Calls go one way: main calls the verbs and ckptctl_cli.c; a verb calls
 * ckptctl_cli.c, the store and client/, never main or another verb;
 * ckptctl_cli.c calls neither (tests/lint/check_cycles.py).
 */
#ifndef CKPTCTL_H
#define CKPTCTL_H

#include "ckptctl_cli.h"
#include "ckptstore.h"

/* What a verb runs: its exit code. s is NULL when the verb's needs_store is 0. */
typedef int verb_fn(cli *c, st_store *s);

/* What a verb needs of the store (verb.needs_store). */
enum {
    STORE_NONE = 0,     /* no store: it talks to a mount */
    STORE_EXISTING = 1, /* one that exists: a missing file:// directory is an error */
    STORE_CREATE = 2,   /* one it may create (put) */
};

typedef struct verb {
    const char *name;
    verb_fn *run;
    int needs_store; /* STORE_* */
    unsigned opts;   /* enum opt_bit accepted */
    const char *usage;
    const char *help;
} verb;

/* ---- verbs (one function each) ---- */
verb_fn run_put, run_get, run_restore, run_ls, run_latest, run_verify, run_stats, run_commit,
    run_wait, run_status, run_drain, run_gc, run_pin, run_unpin, run_warmup, run_keygen;

#endif
