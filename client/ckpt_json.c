/*
 * ckpt_json — strict bounded JSON reader (see ckpt_json.h).
 *
 * Recursive descent over the text with an explicit depth limit, so hostile
 * input can neither overflow the stack nor make the token array grow past
 * CKJ_MAX_TOKENS. Every index is checked against len before it is read.
 */
#include "ckpt_json.h"

#include <stdlib.h>
#include <string.h>

typedef struct parser {
    ckj_doc *doc;
    size_t pos;
    int oom;
} parser;

static void skip_ws(parser *p)
{
    const char *t = p->doc->text;
    while (p->pos < p->doc->len &&
           (t[p->pos] == ' ' || t[p->pos] == '\t' || t[p->pos] == '\n' || t[p->pos] == '\r'))
        p->pos++;
}

/* Appends a token; returns its index or (size_t)-1 with p->oom set. */
static size_t new_tok(parser *p, ckj_type type)
{
    ckj_doc *d = p->doc;
    if (d->ntoks == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        if (cap > CKJ_MAX_TOKENS)
            cap = CKJ_MAX_TOKENS;
        if (cap == d->ntoks) {
            p->oom = 1;
            return (size_t)-1;
        }
        ckj_tok *t = realloc(d->toks, cap * sizeof *t);
        if (!t) {
            p->oom = 1;
            return (size_t)-1;
        }
        d->toks = t;
        d->cap = cap;
    }
    ckj_tok *t = &d->toks[d->ntoks];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->start = p->pos;
    return d->ntoks++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* At the opening quote. Leaves pos after the closing quote. */
static int parse_string(parser *p)
{
    const char *t = p->doc->text;
    size_t len = p->doc->len;
    p->pos++; /* the quote */
    size_t i = new_tok(p, CKJ_STRING);
    if (i == (size_t)-1)
        return -1;
    while (p->pos < len) {
        unsigned char c = (unsigned char)t[p->pos];
        if (c == '"') {
            p->doc->toks[i].end = p->pos;
            p->doc->toks[i].next = p->doc->ntoks;
            p->pos++;
            return 0;
        }
        if (c < 0x20)
            return -1;
        if (c == '\\') {
            if (p->pos + 1 >= len)
                return -1;
            char e = t[p->pos + 1];
            if (e == 'u') {
                if (p->pos + 6 > len)
                    return -1;
                for (int k = 2; k < 6; k++)
                    if (hexval(t[p->pos + k]) < 0)
                        return -1;
                p->pos += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == 0)
                return -1;
            p->pos += 2;
            continue;
        }
        p->pos++;
    }
    return -1;
}

static int parse_number(parser *p)
{
    const char *t = p->doc->text;
    size_t len = p->doc->len;
    size_t i = new_tok(p, CKJ_NUMBER);
    if (i == (size_t)-1)
        return -1;
    if (p->pos < len && t[p->pos] == '-')
        p->pos++;
    if (p->pos >= len)
        return -1;
    if (t[p->pos] == '0') {
        p->pos++;
    } else if (t[p->pos] >= '1' && t[p->pos] <= '9') {
        while (p->pos < len && t[p->pos] >= '0' && t[p->pos] <= '9')
            p->pos++;
    } else {
        return -1;
    }
    if (p->pos < len && t[p->pos] == '.') {
        p->pos++;
        size_t digits = p->pos;
        while (p->pos < len && t[p->pos] >= '0' && t[p->pos] <= '9')
            p->pos++;
        if (p->pos == digits)
            return -1;
    }
    if (p->pos < len && (t[p->pos] == 'e' || t[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < len && (t[p->pos] == '+' || t[p->pos] == '-'))
            p->pos++;
        size_t digits = p->pos;
        while (p->pos < len && t[p->pos] >= '0' && t[p->pos] <= '9')
            p->pos++;
        if (p->pos == digits)
            return -1;
    }
    p->doc->toks[i].end = p->pos;
    p->doc->toks[i].next = p->doc->ntoks;
    return 0;
}

static int parse_literal(parser *p)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t w = 0; w < 3; w++) {
        size_t n = strlen(words[w]);
        if (p->doc->len - p->pos >= n && !memcmp(p->doc->text + p->pos, words[w], n)) {
            size_t i = new_tok(p, CKJ_LITERAL);
            if (i == (size_t)-1)
                return -1;
            p->pos += n;
            p->doc->toks[i].end = p->pos;
            p->doc->toks[i].next = p->doc->ntoks;
            return 0;
        }
    }
    return -1;
}

static int parse_value(parser *p, int depth);

/* At '{' or '['. */
static int parse_container(parser *p, int depth, int is_object)
{
    const char *t = p->doc->text;
    size_t i = new_tok(p, is_object ? CKJ_OBJECT : CKJ_ARRAY);
    if (i == (size_t)-1)
        return -1;
    char close = is_object ? '}' : ']';
    size_t count = 0;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->doc->len && t[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            if (is_object) {
                skip_ws(p);
                if (p->pos >= p->doc->len || t[p->pos] != '"' || parse_string(p))
                    return -1;
                skip_ws(p);
                if (p->pos >= p->doc->len || t[p->pos] != ':')
                    return -1;
                p->pos++;
            }
            if (parse_value(p, depth + 1))
                return -1;
            count++;
            skip_ws(p);
            if (p->pos >= p->doc->len)
                return -1;
            if (t[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (t[p->pos] != close)
                return -1;
            p->pos++;
            break;
        }
    }
    ckj_tok *tok = &p->doc->toks[i];
    tok->end = p->pos;
    tok->size = count;
    tok->next = p->doc->ntoks;
    return 0;
}

static int parse_value(parser *p, int depth)
{
    if (depth > CKJ_MAX_DEPTH)
        return -1;
    skip_ws(p);
    if (p->pos >= p->doc->len)
        return -1;
    char c = p->doc->text[p->pos];
    if (c == '{' || c == '[')
        return parse_container(p, depth, c == '{');
    if (c == '"')
        return parse_string(p);
    if (c == '-' || (c >= '0' && c <= '9'))
        return parse_number(p);
    return parse_literal(p);
}

int ckj_parse(const char *text, size_t len, ckj_doc *doc, size_t *err_off)
{
    memset(doc, 0, sizeof *doc);
    doc->text = text;
    doc->len = len;
    parser p = {doc, 0, 0};
    int rc = parse_value(&p, 1);
    if (!rc) {
        skip_ws(&p);
        if (p.pos != len)
            rc = -1;
    }
    if (rc && err_off)
        *err_off = p.pos;
    return rc ? (p.oom ? -2 : -1) : 0;
}

void ckj_free(ckj_doc *doc)
{
    if (!doc)
        return;
    free(doc->toks);
    doc->toks = NULL;
    doc->ntoks = doc->cap = 0;
}

size_t ckj_get(const ckj_doc *doc, size_t obj, const char *key)
{
    if (obj >= doc->ntoks || doc->toks[obj].type != CKJ_OBJECT)
        return 0;
    size_t k = obj + 1;
    for (size_t m = 0; m < doc->toks[obj].size; m++) {
        size_t v = k + 1;
        if (ckj_str_eq(doc, k, key))
            return v;
        k = doc->toks[v].next;
    }
    return 0;
}

/* Decodes one character of a string token at *pos (< end) into out (UTF-8,
 * up to 4 bytes); returns its length. The parser validated the escapes. */
static size_t unescape_one(const ckj_doc *doc, size_t *pos, size_t end, char out[4])
{
    const char *t = doc->text;
    if (t[*pos] != '\\') {
        out[0] = t[(*pos)++];
        return 1;
    }
    char e = t[*pos + 1];
    *pos += 2;
    switch (e) {
    case 'b': out[0] = '\b'; return 1;
    case 'f': out[0] = '\f'; return 1;
    case 'n': out[0] = '\n'; return 1;
    case 'r': out[0] = '\r'; return 1;
    case 't': out[0] = '\t'; return 1;
    case 'u': break;
    default: out[0] = e; return 1;
    }
    unsigned cp = 0;
    for (int k = 0; k < 4; k++)
        cp = cp * 16 + (unsigned)hexval(t[*pos + k]);
    *pos += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF && *pos + 6 <= end && t[*pos] == '\\' && t[*pos + 1] == 'u') {
        unsigned lo = 0;
        for (int k = 2; k < 6; k++)
            lo = lo * 16 + (unsigned)hexval(t[*pos + k]);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            *pos += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
    }
    /* A lone surrogate becomes U+FFFD rather than invalid UTF-8. */
    if (cp >= 0xD800 && cp <= 0xDFFF)
        cp = 0xFFFD;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int ckj_str_eq(const ckj_doc *doc, size_t t, const char *s)
{
    if (t >= doc->ntoks || doc->toks[t].type != CKJ_STRING)
        return 0;
    size_t pos = doc->toks[t].start, end = doc->toks[t].end, slen = strlen(s), at = 0;
    while (pos < end) {
        char ch[4];
        size_t n = unescape_one(doc, &pos, end, ch);
        if (at + n > slen || memcmp(s + at, ch, n))
            return 0;
        at += n;
    }
    return at == slen;
}

int ckj_str_copy(const ckj_doc *doc, size_t t, char *buf, size_t cap)
{
    if (t >= doc->ntoks || doc->toks[t].type != CKJ_STRING)
        return -1;
    size_t pos = doc->toks[t].start, end = doc->toks[t].end, at = 0;
    while (pos < end) {
        char ch[4];
        size_t n = unescape_one(doc, &pos, end, ch);
        if (at + n + 1 > cap)
            break;
        memcpy(buf + at, ch, n);
        at += n;
    }
    if (cap)
        buf[at < cap ? at : cap - 1] = '\0';
    return 0;
}

int ckj_u64(const ckj_doc *doc, size_t t, uint64_t *v)
{
    if (t >= doc->ntoks || doc->toks[t].type != CKJ_NUMBER)
        return -1;
    uint64_t x = 0;
    for (size_t i = doc->toks[t].start; i < doc->toks[t].end; i++) {
        char c = doc->text[i];
        if (c < '0' || c > '9')
            return -1;
        unsigned d = (unsigned)(c - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}
