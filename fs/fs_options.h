/*
 * fs_options — ckptfs's settings and the one table of its options. The same
 * rows drive the command line (getopt_long), the configuration file
 * (fs_config: a key is a long option's name) and --help, so an option is
 * added by adding one row to fs_option_table in fs_options.c.
 *
 * No I/O but fs_options_usage(); single-threaded (main, before the mount).
 */
#ifndef FS_OPTIONS_H
#define FS_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "st_vfs.h"

/* Log priorities are syslog's (LOG_ERR .. LOG_DEBUG), so --log-level is a
 * threshold on them. */
enum { FS_LOG_ERROR = 3, FS_LOG_WARN = 4, FS_LOG_INFO = 6, FS_LOG_DEBUG = 7 };

/* A path option's value made absolute (FS_VAL_PATH), owned by the settings. */
typedef struct fs_owned_path {
    struct fs_owned_path *next;
    char path[];
} fs_owned_path;

/* Everything the options decide. String fields are borrowed: from argv or
 * from the fs_config that set them (which outlives the mount); fuse_opts and
 * the absolute forms of relative paths are owned (fs_settings_free). */
typedef struct fs_settings {
    st_vfs_options vo; /* the store's options (store_url, staging_dir: see below) */
    const char *store;
    const char *staging;
    const char *mountpoint;
    const char *config;         /* --config FILE, the source of fstab/mount -t fuse.ckptfs */
    char *fuse_opts;            /* every -o / fuse-options value joined with ',' */
    fs_owned_path *owned_paths; /* FS_VAL_PATH values that were relative */
    int log_level;              /* FS_LOG_*: messages above it are dropped */
    const char *metrics_listen; /* --metrics-listen HOST:PORT, NULL: no port */
    const char *prefetch;       /* --prefetch latest|none|JOB,...: warm-up at start */
    /* Configuration file only (FS_OPT_SECRET), never argv: */
    const char *aws_access_key_id;
    const char *aws_secret_access_key;
} fs_settings;

/* Row flags. */
enum {
    FS_OPT_GC = 1,       /* setting it turns the background GC on */
    FS_OPT_SECRET = 2,   /* a credential: configuration file only, value never echoed */
    FS_OPT_CLI_ONLY = 4, /* not a configuration key (--config itself) */
};

typedef enum fs_value_kind {
    FS_VAL_STRING,    /* any non-empty text */
    FS_VAL_PATH,      /* a file or directory: a relative one is taken from the
                       * directory ckptfs started in and stored absolute,
                       * because libfuse leaves that directory for / when it
                       * starts serving (fuse_daemonize, foreground or not) */
    FS_VAL_SIZE,      /* bytes with an optional K/M/G/T suffix */
    FS_VAL_COUNT,     /* a whole number >= 1 */
    FS_VAL_THREADS,   /* a whole number 1..32 */
    FS_VAL_SECONDS,   /* seconds > 0, fractions allowed */
    FS_VAL_SECONDS0,  /* seconds >= 0 */
    FS_VAL_LOG_LEVEL, /* error|warn|info|debug */
    FS_VAL_APPEND,    /* FUSE options, appended to fs_settings.fuse_opts */
} fs_value_kind;

typedef struct fs_option {
    const char *name;    /* --NAME on the command line, NAME = ... in the file */
    char short_name;     /* 0, or the one-letter option (-o) */
    const char *metavar; /* the value's name in --help */
    fs_value_kind kind;
    size_t field;     /* offsetof(fs_settings, ...) of the value */
    unsigned flags;   /* FS_OPT_* */
    const char *help; /* lines separated by '\n' */
} fs_option;

extern const fs_option fs_option_table[];
extern const size_t fs_option_count;

/*! Sets defaults (log level info, everything else unset). */
void fs_settings_init(fs_settings *s);

/*! Frees what *s owns (fuse_opts); the borrowed strings stay their owners'. */
void fs_settings_free(fs_settings *s);

/*! The row named NAME, or NULL. */
const fs_option *fs_option_find(const char *name);

/*! Parses VALUE as row O says and stores it in *s (VALUE is borrowed for
 *  string kinds: it must outlive *s). Returns 0, or -1 with a message in
 *  why[cap] such as "wants a whole number >= 1, got '0'" (the value is not
 *  repeated for FS_OPT_SECRET rows). */
int fs_option_set(const fs_option *o, const char *value, fs_settings *s, char *why, size_t cap);

/* getopt_long returns FS_OPT_VAL_BASE + i for fs_option_table[i]. */
#define FS_OPT_VAL_BASE 256

struct option;

/*! The getopt_long table: every row but the FS_OPT_SECRET ones, then the
 *  N_EXTRA options of EXTRA (flags that are not settings: --help), then
 *  the zero row; shortopts[cap] gets SHORT_EXTRA followed by the rows'
 *  one-letter options. Returns a malloc'ed array (free it), NULL when out
 *  of memory or cap is too small. */
struct option *fs_options_getopt(const struct option *extra, size_t n_extra,
                                 const char *short_extra, char *shortopts, size_t cap);

/*! The row getopt_long's return value CH stands for (FS_OPT_VAL_BASE + i,
 *  or a row's short_name), or NULL. */
const fs_option *fs_option_for_getopt(int ch);

/*! Writes the option list of --help, one row per option (without the
 *  FS_OPT_SECRET ones, which are the file's: ckptfs.conf(5)). */
void fs_options_usage(FILE *out);

/*! A log level's name ("warn") or NULL. */
const char *fs_log_level_name(int level);

#endif
