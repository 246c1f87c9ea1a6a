/*
 * ckpt_json — a small, strict, bounded JSON reader for libckpt's own use (the
 * mount's status file). Not part of the public API: its symbols are hidden by
 * client/libckpt.map.
 *
 * ckj_parse() validates the whole text (RFC 8259 syntax; nesting depth at most
 * CKJ_MAX_DEPTH) and produces a flat array of tokens in document order, each
 * knowing where its subtree ends, so lookups walk siblings without recursion.
 * Strings stay escaped in the text; ckj_str_eq()/ckj_str_copy() unescape on
 * demand. No state outside the ckj_doc: safe on any thread.
 */
#ifndef CKPT_JSON_H
#define CKPT_JSON_H

#include <stddef.h>
#include <stdint.h>

#define CKJ_MAX_DEPTH  32
#define CKJ_MAX_TOKENS (1u << 22)

typedef enum ckj_type {
    CKJ_OBJECT,
    CKJ_ARRAY,
    CKJ_STRING,
    CKJ_NUMBER,
    CKJ_LITERAL, /* true, false, null */
} ckj_type;

typedef struct ckj_tok {
    ckj_type type;
    size_t start, end; /* the value's bytes in the text (strings: inside the quotes) */
    size_t next;       /* index of the first token after this value's subtree */
    size_t size;       /* object: members; array: elements; else 0 */
} ckj_tok;

typedef struct ckj_doc {
    const char *text; /* borrowed: must outlive the doc */
    size_t len;
    ckj_tok *toks; /* toks[0] is the root value */
    size_t ntoks, cap;
} ckj_doc;

/*! Parses text[0..len). Returns 0, -1 (malformed; *err_off is the byte
 *  offset where parsing failed) or -2 (out of memory, or more than
 *  CKJ_MAX_TOKENS tokens). Release with ckj_free() whatever it returned. */
int ckj_parse(const char *text, size_t len, ckj_doc *doc, size_t *err_off);
void ckj_free(ckj_doc *doc);

/*! The value of member `key` of object token obj, or 0 when obj is not an
 *  object or has no such member (0 is the root, never a member's value). */
size_t ckj_get(const ckj_doc *doc, size_t obj, const char *key);

/*! 1 when string token t unescapes to exactly s. */
int ckj_str_eq(const ckj_doc *doc, size_t t, const char *s);

/*! Unescapes string token t into buf (cap bytes, NUL-terminated, truncated
 *  on a character boundary is not promised). Returns 0, or -1 if t is not
 *  a string. */
int ckj_str_copy(const ckj_doc *doc, size_t t, char *buf, size_t cap);

/*! The value of number token t as a non-negative integer; -1 if t is not a
 *  number, has a sign, fraction or exponent, or overflows. */
int ckj_u64(const ckj_doc *doc, size_t t, uint64_t *v);

#endif
