/*
 * ckptctl_json — JSON for ckptctl: a writer for --json output.
 *
 * The writer tracks, per nesting level, whether a comma is due, so verbs
 * write values in order without counting. Strings are always escaped: job
 * names, paths and store messages may hold quotes or control bytes.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "ckptctl.h"

/* ---- writer ---- */

void json_print_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        switch (ch) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (ch < 0x20 || ch == 0x7f)
                fprintf(f, "\\u%04x", ch);
            else
                fputc(ch, f);
        }
    }
    fputc('"', f);
}

/* Comma and key before a value at the current level. */
static void jw_prefix(jw *w, const char *key)
{
    if (w->depth > 0) {
        if (!w->first[w->depth])
            putchar(',');
        w->first[w->depth] = 0;
    }
    if (key) {
        json_print_string(stdout, key);
        putchar(':');
    }
}

static void jw_open(jw *w, const char *key, char ch)
{
    jw_prefix(w, key);
    putchar(ch);
    if (w->depth + 1 < (int)sizeof w->first)
        w->depth++;
    w->first[w->depth] = 1;
}

static void jw_close(jw *w, char ch)
{
    putchar(ch);
    if (w->depth > 0)
        w->depth--;
}

void jw_begin_obj(jw *w, const char *key)
{
    jw_open(w, key, '{');
}
void jw_end_obj(jw *w)
{
    jw_close(w, '}');
}
void jw_begin_arr(jw *w, const char *key)
{
    jw_open(w, key, '[');
}
void jw_end_arr(jw *w)
{
    jw_close(w, ']');
}

void jw_str(jw *w, const char *key, const char *val)
{
    jw_prefix(w, key);
    if (val)
        json_print_string(stdout, val);
    else
        fputs("null", stdout);
}

void jw_u64(jw *w, const char *key, uint64_t val)
{
    jw_prefix(w, key);
    printf("%" PRIu64, val);
}

void jw_i64(jw *w, const char *key, int64_t val)
{
    jw_prefix(w, key);
    printf("%" PRId64, val);
}

void jw_num(jw *w, const char *key, double val)
{
    jw_prefix(w, key);
    if (isfinite(val))
        printf("%.3f", val);
    else
        fputs("null", stdout); /* JSON has no inf/nan */
}

void jw_bool(jw *w, const char *key, int val)
{
    jw_prefix(w, key);
    fputs(val ? "true" : "false", stdout);
}

void jw_null(jw *w, const char *key)
{
    jw_prefix(w, key);
    fputs("null", stdout);
}

void jw_done(jw *w)
{
    (void)w;
    putchar('\n');
}
