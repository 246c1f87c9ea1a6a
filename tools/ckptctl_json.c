/*
 * ckptctl_json — JSON for ckptctl: a writer for --json output and a small
 * reader for the mount's status file.
 *
 * The writer tracks, per nesting level, whether a comma is due, so verbs
 * write values in order without counting. Strings are always escaped: job
 * names, paths and store messages may hold quotes or control bytes.
 *
 * The reader builds a tree (jv) of the whole document; status files are a
 * few KiB. It accepts strict JSON only and reports where it stopped.
 */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* ---- reader ---- */

typedef struct jparser {
    const char *p, *end;
    int depth;
    char *err;
    size_t errcap;
    const char *start;
} jparser;

enum { JV_MAX_DEPTH = 64 };

static int jerr(jparser *ps, const char *what)
{
    if (ps->err && ps->errcap)
        snprintf(ps->err, ps->errcap, "%s at byte %zu", what, (size_t)(ps->p - ps->start));
    return -1;
}

static void skip_ws(jparser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    ch = (char)tolower((unsigned char)ch);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Appends code point cp as UTF-8. */
static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

static int parse_hex4(jparser *ps, unsigned *cp)
{
    if (ps->end - ps->p < 4)
        return jerr(ps, "short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(ps->p[i]);
        if (h < 0)
            return jerr(ps, "bad \\u escape");
        v = v << 4 | (unsigned)h;
    }
    ps->p += 4;
    *cp = v;
    return 0;
}

/* Parses a string literal at ps->p (on the opening quote) into *out. */
static int parse_string(jparser *ps, char **out)
{
    ps->p++;
    /* Unescaped text is never longer than the literal. */
    const char *q = ps->p;
    while (q < ps->end && *q != '"')
        q += (*q == '\\' && q + 1 < ps->end) ? 2 : 1;
    if (q >= ps->end)
        return jerr(ps, "unterminated string");
    char *buf = malloc((size_t)(q - ps->p) + 1);
    if (!buf)
        return jerr(ps, "out of memory");
    size_t n = 0;
    while (*ps->p != '"') {
        unsigned char ch = (unsigned char)*ps->p++;
        if (ch < 0x20) {
            free(buf);
            return jerr(ps, "control character in string");
        }
        if (ch != '\\') {
            buf[n++] = (char)ch;
            continue;
        }
        char esc = *ps->p++;
        unsigned cp;
        switch (esc) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u':
            if (parse_hex4(ps, &cp)) {
                free(buf);
                return -1;
            }
            /* A \uXXXX is 6 bytes of input and at most 3 of output; a
             * surrogate pair is 12 of input and 4 of output. */
            if (cp >= 0xd800 && cp < 0xdc00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' &&
                ps->p[1] == 'u') {
                unsigned lo;
                ps->p += 2;
                if (parse_hex4(ps, &lo)) {
                    free(buf);
                    return -1;
                }
                if (lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
            }
            if (cp == 0)
                cp = '?'; /* NUL would cut the C string */
            n += put_utf8(buf + n, cp);
            break;
        default: free(buf); return jerr(ps, "bad escape in string");
        }
    }
    ps->p++;
    buf[n] = 0;
    *out = buf;
    return 0;
}

static int parse_value(jparser *ps, jv *v);

/* Appends one slot to a container; returns the new value or NULL. */
static jv *grow(jv *v, size_t *cap)
{
    if (v->n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 8;
        jv *items = realloc(v->items, ncap * sizeof *items);
        if (!items)
            return NULL;
        v->items = items;
        if (v->type == JV_OBJ) {
            char **keys = realloc(v->keys, ncap * sizeof *keys);
            if (!keys)
                return NULL;
            v->keys = keys;
        }
        *cap = ncap;
    }
    jv *slot = &v->items[v->n];
    memset(slot, 0, sizeof *slot);
    return slot;
}

static int parse_container(jparser *ps, jv *v, char close)
{
    size_t cap = 0;
    if (++ps->depth > JV_MAX_DEPTH)
        return jerr(ps, "nested too deeply");
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        ps->depth--;
        return 0;
    }
    for (;;) {
        jv *slot = grow(v, &cap);
        if (!slot)
            return jerr(ps, "out of memory");
        skip_ws(ps);
        if (v->type == JV_OBJ) {
            char *key;
            if (ps->p >= ps->end || *ps->p != '"')
                return jerr(ps, "expected a key");
            if (parse_string(ps, &key))
                return -1;
            v->keys[v->n] = key;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') {
                free(key);
                return jerr(ps, "expected ':'");
            }
            ps->p++;
        }
        v->n++; /* counted before parsing so jv_free releases a half-parsed value */
        if (parse_value(ps, slot))
            return -1;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            ps->depth--;
            return 0;
        }
        return jerr(ps, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_literal(jparser *ps, const char *word)
{
    size_t len = strlen(word);
    if ((size_t)(ps->end - ps->p) < len || memcmp(ps->p, word, len))
        return jerr(ps, "unexpected character");
    ps->p += len;
    return 0;
}

static int parse_number(jparser *ps, jv *v)
{
    char tmp[64];
    size_t n = 0;
    while (ps->p + n < ps->end && n < sizeof tmp - 1 && strchr("+-0123456789.eE", ps->p[n]))
        n++;
    memcpy(tmp, ps->p, n);
    tmp[n] = 0;
    char *end;
    v->num = strtod(tmp, &end);
    if (n == 0 || *end)
        return jerr(ps, "bad number");
    v->type = JV_NUM;
    ps->p += n;
    return 0;
}

static int parse_value(jparser *ps, jv *v)
{
    skip_ws(ps);
    if (ps->p >= ps->end)
        return jerr(ps, "unexpected end");
    switch (*ps->p) {
    case '{': v->type = JV_OBJ; return parse_container(ps, v, '}');
    case '[': v->type = JV_ARR; return parse_container(ps, v, ']');
    case '"': v->type = JV_STR; return parse_string(ps, &v->str);
    case 't':
        v->type = JV_BOOL;
        v->boolean = 1;
        return parse_literal(ps, "true");
    case 'f': v->type = JV_BOOL; return parse_literal(ps, "false");
    case 'n': v->type = JV_NULL; return parse_literal(ps, "null");
    default: return parse_number(ps, v);
    }
}

int jv_parse(const char *text, size_t len, jv *out, char *err, size_t errcap)
{
    jparser ps = {.p = text, .end = text + len, .err = err, .errcap = errcap, .start = text};
    memset(out, 0, sizeof *out);
    if (parse_value(&ps, out))
        goto bad;
    skip_ws(&ps);
    if (ps.p != ps.end) {
        jerr(&ps, "trailing data");
        goto bad;
    }
    return 0;
bad:
    jv_free(out);
    return -1;
}

void jv_free(jv *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++) {
        jv_free(&v->items[i]);
        if (v->keys)
            free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
    memset(v, 0, sizeof *v);
}

const jv *jv_get(const jv *v, const char *key)
{
    if (!v || v->type != JV_OBJ)
        return NULL;
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key))
            return &v->items[i];
    return NULL;
}

const char *jv_str(const jv *v, const char *key)
{
    const jv *m = jv_get(v, key);
    return m && m->type == JV_STR ? m->str : "";
}

double jv_num(const jv *v, const char *key)
{
    const jv *m = jv_get(v, key);
    return m && m->type == JV_NUM ? m->num : 0.0;
}
