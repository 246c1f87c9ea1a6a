/*
 * fs_options — the table of ckptfs's options and the parsing of their
 * values (fs_options.h). One row per option, in fs_options.def: the command
 * line (fs_options_getopt), the configuration file (fs_config) and --help
 * (fs_options_usage) are all read from fs_option_table.
 *
 * Values are checked strictly (a trailing unit that is not one, a negative
 * count, a NaN): a daemon that starts with a typo in its configuration is
 * worse than one that refuses to start.
 */
#include "fs_options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One fs_option per row of fs_options.def. */
#define FS_OPTION(name, short_name, metavar, kind, field, flags, help)                             \
    {name, short_name, metavar, kind, offsetof(fs_settings, field), flags, help},
const fs_option fs_option_table[] = {
#include "fs_options.def"
};
#undef FS_OPTION

const size_t fs_option_count = sizeof fs_option_table / sizeof fs_option_table[0];

static const char *const level_names[] = {[FS_LOG_ERROR] = "error",
                                          [FS_LOG_WARN] = "warn",
                                          [FS_LOG_INFO] = "info",
                                          [FS_LOG_DEBUG] = "debug"};

const char *fs_log_level_name(int level)
{
    if (level < 0 || (size_t)level >= sizeof level_names / sizeof level_names[0])
        return NULL;
    return level_names[level];
}

void fs_settings_init(fs_settings *s)
{
    memset(s, 0, sizeof *s);
    s->log_level = FS_LOG_INFO;
    s->vo.staging_spare = ST_VFS_DEFAULT_STAGING_SPARE;
    s->vo.staging_wait_seconds = ST_VFS_DEFAULT_STAGING_WAIT;
}

void fs_settings_free(fs_settings *s)
{
    free(s->fuse_opts);
    s->fuse_opts = NULL;
    while (s->owned_paths) {
        fs_owned_path *next = s->owned_paths->next;
        free(s->owned_paths);
        s->owned_paths = next;
    }
}

const fs_option *fs_option_find(const char *name)
{
    for (size_t i = 0; i < fs_option_count; i++)
        if (strcmp(fs_option_table[i].name, name) == 0)
            return &fs_option_table[i];
    return NULL;
}

static int parse_size(const char *s, uint64_t *out)
{
    static const char units[] = "KMGT";
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *s == '-' || errno)
        return -1;
    unsigned shift = 0;
    int unit = *end & ~0x20; /* upper case; 0 for a space */
    const char *u = unit ? strchr(units, unit) : NULL;
    if (u) {
        shift = 10 * (unsigned)(u - units + 1);
        end++;
    }
    if (*end || (shift && v > (UINT64_MAX >> shift)))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_whole(const char *s, unsigned long long lo, unsigned long long hi,
                       unsigned long long *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end || *s == '-' || errno || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_seconds(const char *s, int zero_ok, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v) || v < 0 || (v == 0 && !zero_ok) || v > 1e9)
        return -1;
    *out = v;
    return 0;
}

static int parse_level(const char *s, int *out)
{
    for (int l = 0; l < (int)(sizeof level_names / sizeof level_names[0]); l++)
        if (level_names[l] && strcmp(level_names[l], s) == 0) {
            *out = l;
            return 0;
        }
    return -1;
}

/* Appends OPTS to the comma-separated list *list (owned). */
static int append_opts(char **list, const char *opts)
{
    size_t old = *list ? strlen(*list) : 0, add = strlen(opts);
    char *grown = realloc(*list, old + add + 2);
    if (!grown)
        return -1;
    if (old)
        grown[old++] = ',';
    memcpy(grown + old, opts, add + 1);
    *list = grown;
    return 0;
}

/* Sets *field to value, made absolute against the working directory if it
 * is relative (FS_VAL_PATH). Returns 0, or -1 with why set. */
static int set_path(const char *value, const char **field, fs_settings *s, char *why, size_t cap)
{
    if (value[0] == '/') {
        *field = value;
        return 0;
    }
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) {
        snprintf(why, cap, "is relative ('%s') and the working directory is unknown: %s", value,
                 strerror(errno));
        return -1;
    }
    size_t len = strlen(cwd) + 1 + strlen(value) + 1;
    fs_owned_path *p = malloc(sizeof *p + len);
    if (!p) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    snprintf(p->path, len, "%s/%s", strcmp(cwd, "/") ? cwd : "", value);
    p->next = s->owned_paths;
    s->owned_paths = p;
    *field = p->path;
    return 0;
}

/* What a kind accepts, for the error message. */
static const char *kind_wants(fs_value_kind k)
{
    switch (k) {
    case FS_VAL_STRING:
    case FS_VAL_PATH: return "a non-empty value";
    case FS_VAL_SIZE: return "a size in bytes (K, M, G, T suffixes)";
    case FS_VAL_COUNT: return "a whole number >= 1";
    case FS_VAL_THREADS: return "a whole number 1..32";
    case FS_VAL_SECONDS: return "a number of seconds > 0";
    case FS_VAL_SECONDS0: return "a number of seconds >= 0";
    case FS_VAL_LOG_LEVEL: return "error, warn, info or debug";
    case FS_VAL_APPEND: return "FUSE options";
    }
    return "a value";
}

int fs_option_set(const fs_option *o, const char *value, fs_settings *s, char *why, size_t cap)
{
    void *field = (char *)s + o->field;
    unsigned long long whole;
    int bad = !*value;
    if (!bad) {
        switch (o->kind) {
        case FS_VAL_STRING: *(const char **)field = value; break;
        case FS_VAL_PATH:
            if (set_path(value, field, s, why, cap))
                return -1;
            break;
        case FS_VAL_SIZE: bad = parse_size(value, field); break;
        case FS_VAL_COUNT:
            bad = parse_whole(value, 1, UINT64_MAX, &whole);
            if (!bad)
                *(uint64_t *)field = whole;
            break;
        case FS_VAL_THREADS:
            bad = parse_whole(value, 1, 32, &whole);
            if (!bad)
                *(unsigned *)field = (unsigned)whole;
            break;
        case FS_VAL_SECONDS:
        case FS_VAL_SECONDS0: bad = parse_seconds(value, o->kind == FS_VAL_SECONDS0, field); break;
        case FS_VAL_LOG_LEVEL: bad = parse_level(value, field); break;
        case FS_VAL_APPEND:
            if (append_opts(field, value)) {
                snprintf(why, cap, "out of memory");
                return -1;
            }
            break;
        }
    }
    if (bad) {
        if (o->flags & FS_OPT_SECRET)
            snprintf(why, cap, "wants %s", kind_wants(o->kind));
        else
            snprintf(why, cap, "wants %s, got '%s'", kind_wants(o->kind), value);
        return -1;
    }
    if (o->flags & FS_OPT_GC)
        s->vo.gc_enabled = 1;
    return 0;
}

/* --help: a row's head ("  --NAME METAVAR") and its help text, which starts
 * in HELP_COLUMN (or two spaces after a longer head) and is wrapped to end
 * before USAGE_WIDTH, at spaces and at the text's own '\n'. */
#define HELP_COLUMN 23
#define USAGE_WIDTH 80

/* The length of the next line of text that fits in room columns: up to its
 * '\n', else up to the last space that fits (a longer word stands alone). */
static size_t wrapped_line_len(const char *text, size_t room)
{
    size_t n = strcspn(text, "\n");
    if (n <= room)
        return n;
    size_t cut = room;
    while (cut > 0 && text[cut] != ' ')
        cut--;
    return cut ? cut : strcspn(text, " \n");
}

static void write_help_text(FILE *out, size_t column, const char *text)
{
    while (*text) {
        size_t n = wrapped_line_len(text, USAGE_WIDTH - 1 - column);
        fprintf(out, "%.*s\n", (int)n, text);
        text += n;
        if (*text == ' ' || *text == '\n')
            text++;
        if (*text)
            fprintf(out, "%*s", HELP_COLUMN, "");
        column = HELP_COLUMN;
    }
}

void fs_options_usage(FILE *out)
{
    for (size_t i = 0; i < fs_option_count; i++) {
        const fs_option *o = &fs_option_table[i];
        if (o->flags & FS_OPT_SECRET)
            continue;
        char head[64];
        int len = snprintf(head, sizeof head, "  --%s %s", o->name, o->metavar);
        int pad = len < HELP_COLUMN - 1 ? HELP_COLUMN - len : 2;
        fprintf(out, "%s%*s", head, pad, "");
        write_help_text(out, (size_t)(len + pad), o->help);
    }
}

struct option *fs_options_getopt(const struct option *extra, size_t n_extra,
                                 const char *short_extra, char *shortopts, size_t cap)
{
    struct option *lopts = calloc(fs_option_count + n_extra + 1, sizeof *lopts);
    size_t n = 0, used = strlen(short_extra);
    if (!lopts || used >= cap) {
        free(lopts);
        return NULL;
    }
    memcpy(shortopts, short_extra, used + 1);
    for (size_t i = 0; i < fs_option_count; i++) {
        const fs_option *o = &fs_option_table[i];
        if (o->flags & FS_OPT_SECRET)
            continue;
        lopts[n++] = (struct option){o->name, required_argument, NULL, FS_OPT_VAL_BASE + (int)i};
        if (o->short_name) {
            if (used + 3 > cap) {
                free(lopts);
                return NULL;
            }
            shortopts[used++] = o->short_name;
            shortopts[used++] = ':';
            shortopts[used] = '\0';
        }
    }
    memcpy(lopts + n, extra, n_extra * sizeof *extra);
    return lopts;
}

const fs_option *fs_option_for_getopt(int ch)
{
    if (ch >= FS_OPT_VAL_BASE && (size_t)(ch - FS_OPT_VAL_BASE) < fs_option_count)
        return &fs_option_table[ch - FS_OPT_VAL_BASE];
    for (size_t i = 0; i < fs_option_count; i++)
        if (ch > 0 && fs_option_table[i].short_name == ch)
            return &fs_option_table[i];
    return NULL;
}
