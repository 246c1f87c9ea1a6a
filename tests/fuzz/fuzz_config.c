/*
 * fuzz_config — libFuzzer target for ckptfs's configuration file parser,
 * fs_config_parse() (fs/fs_config.c) with the value parsers of the option
 * table (fs/fs_options.c): the file an administrator, a package or a
 * container image puts in front of the daemon.
 *
 * Input: the file's text (any bytes).
 *
 * Properties checked (abort on violation):
 *   - it returns 0 with a loaded file, or -1 with none and a message that
 *     starts with the file's name;
 *   - on success every value is in its kind's range: strings non-empty,
 *     without a line break or blanks at either end; threads 1..32, counts
 *     >= 1, seconds finite and > 0 (>= 0 for --drain), a known log level;
 *     the secret line is reported exactly when a credential is set;
 *   - an error on a credential's line does not depend on the credential's
 *     value: the same file with the value replaced by another of the same
 *     length gives the same message (a secret is never quoted).
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs_config.h"
#include "fs_options.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NAME "fuzz.conf"

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static void check_string(const char *v)
{
    size_t n = v ? strlen(v) : 1;
    if (!v)
        return;
    if (!n || strchr(v, '\n') || is_blank(v[0]) || is_blank(v[n - 1]))
        abort();
}

/* A path option's value: a string, and absolute (FS_VAL_PATH). */
static void check_path(const char *v)
{
    check_string(v);
    if (v && v[0] != '/')
        abort();
}

static void check_settings(const fs_settings *s, unsigned secret_line)
{
    for (size_t i = 0; i < fs_option_count; i++) {
        const fs_option *o = &fs_option_table[i];
        const char *field = (const char *)s + o->field;
        double secs;
        switch (o->kind) {
        case FS_VAL_STRING: check_string(*(const char *const *)field); break;
        case FS_VAL_PATH: check_path(*(const char *const *)field); break;
        case FS_VAL_APPEND: check_string(*(const char *const *)field); break;
        case FS_VAL_SIZE: break;  /* any uint64_t */
        case FS_VAL_COUNT: break; /* 0 = unset, else >= 1 by type */
        case FS_VAL_THREADS:
            if (*(const unsigned *)field > 32)
                abort();
            break;
        case FS_VAL_SECONDS:
        case FS_VAL_SECONDS0:
            memcpy(&secs, field, sizeof secs);
            if (!isfinite(secs) || secs < 0)
                abort();
            break;
        case FS_VAL_LOG_LEVEL:
            if (!fs_log_level_name(*(const int *)field))
                abort();
            break;
        }
    }
    if (!secret_line != !(s->aws_access_key_id || s->aws_secret_access_key))
        abort();
}

/* The value of line LINENO of text when its key is a credential: *begin
 * and *end bound it (trimmed). Returns 0 when the line holds none. */
static int secret_value(char *text, size_t len, unsigned lineno, char **begin, char **end)
{
    char *line = text, *stop = text + len;
    for (unsigned n = 1; n < lineno; n++) {
        char *nl = memchr(line, '\n', (size_t)(stop - line));
        if (!nl)
            return 0;
        line = nl + 1;
    }
    char *nl = memchr(line, '\n', (size_t)(stop - line));
    char *eol = nl ? nl : stop;
    char *eq = memchr(line, '=', (size_t)(eol - line));
    if (!eq)
        return 0;
    char key[64];
    char *k = line, *ke = eq;
    while (k < ke && is_blank(*k))
        k++;
    while (ke > k && is_blank(ke[-1]))
        ke--;
    if ((size_t)(ke - k) >= sizeof key)
        return 0;
    memcpy(key, k, (size_t)(ke - k));
    key[ke - k] = '\0';
    const fs_option *o = fs_option_find(key);
    if (!o || !(o->flags & FS_OPT_SECRET))
        return 0;
    *begin = eq + 1;
    *end = eol;
    while (*begin < *end && is_blank(**begin))
        (*begin)++;
    while (*end > *begin && is_blank((*end)[-1]))
        (*end)--;
    return *end > *begin;
}

/* Parses text; the message into why[cap]. */
static int parse(const char *text, size_t len, fs_settings *s, unsigned *secret_line, char *why,
                 size_t cap)
{
    fs_config *c = (fs_config *)1;
    fs_settings_init(s);
    why[0] = '\0';
    int rc = fs_config_parse(NAME, text, len, s, secret_line, &c, why, cap);
    if (rc == 0) {
        if (!c)
            abort();
        check_settings(s, *secret_line);
    } else if (rc != -1 || c || strncmp(why, NAME ":", strlen(NAME ":")) ||
               !memchr(why, '\0', cap)) {
        abort();
    }
    fs_settings_free(s);
    fs_config_free(c);
    return rc;
}

static void check_secret_unquoted(const uint8_t *data, size_t size, const char *why)
{
    unsigned lineno;
    char *begin, *end;
    if (sscanf(why, NAME ":%u:", &lineno) != 1)
        return;
    char *text = malloc(size ? size : 1);
    if (!text)
        return;
    memcpy(text, data, size);
    if (secret_value(text, size, lineno, &begin, &end)) {
        for (char *p = begin; p < end; p++)
            if (!is_blank(*p))
                *p = *p == 'x' ? 'y' : 'x';
        fs_settings s;
        unsigned secret_line;
        char why2[512];
        if (parse(text, size, &s, &secret_line, why2, sizeof why2) != -1 || strcmp(why, why2))
            abort(); /* the message depends on the secret's value */
    }
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy: any read past the input is an ASan report. */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    fs_settings s;
    unsigned secret_line;
    char why[512];
    if (parse(text, size, &s, &secret_line, why, sizeof why))
        check_secret_unquoted(data, size, why);
    free(text);
    return 0;
}
