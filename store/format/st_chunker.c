/*
 * st_chunker — where to cut a byte stream into chunks (see st_chunker.h and
 * docs/CHUNKING.md for the measurements behind the defaults).
 *
 * Two machines look at every byte, side by side:
 *
 *   1. the format parser (parse_*): sniffs the stream start, then walks the
 *      records of a ZIP (torch.save) or safetensors file and reports *forced*
 *      cuts at record boundaries. It never looks ahead: every boundary it
 *      reports is known by the time the byte before it is consumed, so a cut
 *      is always "after the bytes consumed so far".
 *   2. FastCDC (cdc_scan): a gear hash with normalized chunking. Between
 *      forced cuts it cuts where the content says so, never before min_size,
 *      always at max_size. Its state restarts at every cut, forced or not, so
 *      a record's data chunks the same wherever the record sits.
 *
 * Invariants:
 *   - Cut positions are a pure function of (bytes, params): every parser
 *     decision depends on bytes and absolute offsets only, never on where a
 *     feed ended. Headers that straddle feeds are gathered in win[] (at most
 *     46 bytes, a ZIP central directory header).
 *   - No chunk is empty, none is longer than max_size, and none is shorter
 *     than min_size except one ending at a forced cut or at end of stream.
 *   - st_chunker_next() never allocates; the only allocation is the
 *     safetensors offset table made by st_chunker_new().
 *   - Hostile input cannot make the parser read outside win[] or the caller's
 *     buffer: sizes are only ever used to compute skip targets (saturating),
 *     and an implausible structure drops the stream to plain CDC.
 *
 * ZIP data descriptors: torch 1.13 writes every record with flag bit 3 and
 * zero sizes in the local header; the sizes follow the data in a descriptor
 * "PK\x07\x08" crc csize usize (4-byte sizes, or 8-byte ones when the local
 * header carries a zip64 extra). The parser finds the end of such a record by
 * scanning for that signature and accepting it only if the descriptor's size
 * equals the bytes since the data start (a false match in tensor data would
 * also need the right 32-bit length right behind it). A descriptor without a
 * signature is never found: the stream then stays plain CDC to its end.
 *
 * Threads: one st_chunker per stream; no shared state.
 */
#define _GNU_SOURCE /* memmem */
#include "format/st_chunker.h"

#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "util/st_wire.h"

const st_chunker_params st_chunker_default_params = {
    .min_size = 64 * 1024,
    .avg_size = 256 * 1024,
    .max_size = 1024 * 1024,
};

#define CHUNKER_MAX_SIZE (64u * 1024 * 1024)

/* The gear hash's bit k depends on the last k+1 bytes only: the top bits see
 * exactly a 64-byte window. Hashing starts 64 bytes before min_size, so every
 * cut decision depends on that window's content and the chunk length alone. */
#define GEAR_WINDOW 64

/* Normalized chunking (FastCDC "level 2"): two more mask bits than log2(avg)
 * before avg (cuts rarer), two fewer after (cuts likelier). */
#define NORM_LEVEL 2

/* Safetensors: the largest JSON header we follow, and how many tensor offsets
 * we remember. A file beyond either is chunked as unknown data after its
 * header; the offset table (8 bytes an entry) is allocated by st_chunker_new. */
#define ST_HEADER_MAX  (100u * 1024 * 1024)
#define ST_OFFSETS_MAX 16384u

/* ZIP signatures, as st_le32_get() reads them. */
#define ZIP_LFH     0x04034b50u /* PK\3\4 local file header */
#define ZIP_CDH     0x02014b50u /* PK\1\2 central directory header */
#define ZIP_EOCD    0x06054b50u /* PK\5\6 end of central directory */
#define ZIP_Z64EOCD 0x06064b50u /* PK\6\6 zip64 end of central directory */
#define ZIP_Z64LOC  0x07064b50u /* PK\6\7 zip64 end locator */
/* PK\7\8 data descriptor, as the big-endian rolling register sees it. */
#define ZIP_DESC_BE 0x504b0708u
static const uint8_t zip_desc_sig[4] = {'P', 'K', 7, 8};

#define ZIP_LFH_LEN         30
#define ZIP_CDH_LEN         46
#define ZIP_EOCD_LEN        22
#define ZIP_Z64EOCD_MIN     12 /* signature + 8-byte record size */
#define ZIP_Z64LOC_LEN      20
#define ZIP_FLAG_DESCRIPTOR 0x0008u
#define ZIP_EXTRA_ZIP64     0x0001u

/*
 * Parser states. Each waits for one of: `need` bytes gathered in win[]
 * (COLLECT), the stream reaching `target` (SKIP), a descriptor signature
 * (SCAN), the end of the safetensors header (JSON), or nothing (UNKNOWN).
 *
 *   SNIFF ─PK34─▶ ZIP_LFH ─▶ ZIP_NAME ─▶ (ZIP_XHDR ─▶ [ZIP_X64] ─▶ ZIP_XSKIP)* ─cut─▶
 *       data: bit 3 ? ZIP_SCAN ─▶ ZIP_DESC : ZIP_DATA ─cut─▶ ZIP_SIG
 *       (ZIP_DESC ─sizes match─cut─▶ ZIP_SIG; ─false match─▶ ZIP_SCAN)
 *   ZIP_SIG ─PK34▶ ZIP_LFH | PK12▶ ZIP_CDH | PK66▶ ZIP_Z64E | PK67/CDH/Z64E▶ ZIP_SKIPREC ▶ ZIP_SIG
 *           ─PK56▶ ZIP_EOCD ─▶ ZIP_EOCDEND ─cut─▶ ZIP_AFTER ─PK34▶ ZIP_LFH
 *   SNIFF ─safetensors─▶ ST_JSON ─cut─▶ (ST_DATA ─cut─▶)* UNKNOWN
 *   anything unexpected ─▶ UNKNOWN (plain CDC to the end of the stream)
 */
enum parse_state {
    PS_SNIFF,
    PS_UNKNOWN,
    PS_ZIP_SIG,
    PS_ZIP_LFH,
    PS_ZIP_NAME,
    PS_ZIP_XHDR,
    PS_ZIP_X64,
    PS_ZIP_XSKIP,
    PS_ZIP_DATA,
    PS_ZIP_SCAN,
    PS_ZIP_DESC,
    PS_ZIP_CDH,
    PS_ZIP_Z64E,
    PS_ZIP_EOCD,
    PS_ZIP_SKIPREC,
    PS_ZIP_EOCDEND,
    PS_ZIP_AFTER,
    PS_ST_JSON,
    PS_ST_DATA,
};

enum parse_kind { K_COLLECT, K_SKIP, K_SCAN, K_JSON, K_NONE };

/* Minimal streaming JSON reader: it only needs the first number of every
 * "data_offsets" array that is a value in a depth-2 object. */
typedef struct json_reader {
    uint64_t arr_bits; /* bit d: the container at depth d is an array */
    uint64_t num;
    uint32_t depth;
    uint32_t num_idx;
    uint8_t in_str, esc, expect_key, reading_key, key_pos, key_match;
    uint8_t key_hit, want_offsets, in_offsets, have_digit, done, failed;
} json_reader;

struct st_chunker {
    st_chunker_params p;
    uint64_t mask_s, mask_l;
    uint32_t hash_start;

    /* CDC: state of the chunk in progress */
    uint64_t fp;
    uint64_t clen; /* bytes since the last cut */

    /* parser */
    uint64_t pos; /* stream offset of the next byte */
    st_format fmt;
    enum parse_state ps;
    uint8_t win[64];
    uint32_t got, need;
    uint64_t target;

    /* ZIP record in progress */
    uint64_t hdr;        /* offset of the current header */
    uint64_t data_start; /* offset of the current record's data */
    uint64_t x_end;      /* end of the local header's extra = data start */
    uint64_t field_end;  /* end of the current extra field */
    uint64_t csize, usize;
    uint64_t sig_pos;   /* offset of a descriptor signature being checked */
    uint64_t scan_hit;  /* end of the next descriptor signature, 0 = none known */
    uint64_t scan_upto; /* no signature ends in (pos, scan_upto] except scan_hit */
    uint32_t sh;        /* last 4 bytes consumed while scanning, big-endian */
    uint16_t zflags, zmethod;
    uint8_t zip64;

    /* safetensors */
    uint64_t st_base; /* 8 + header length: where offsets count from */
    uint64_t *st_off;
    uint32_t st_n, st_next;
    json_reader js;

    uint64_t gear[256];
};

/* ---- small helpers ---- */

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

static size_t min_sz(size_t a, size_t b)
{
    return a < b ? a : b;
}

static uint64_t top_mask(unsigned bits)
{
    if (bits == 0)
        return 0;
    if (bits >= 64)
        return UINT64_MAX;
    return ((UINT64_C(1) << bits) - 1) << (64 - bits);
}

static unsigned log2_u32(uint32_t v)
{
    unsigned r = 0;
    while (v >>= 1)
        r++;
    return r;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* In-place heapsort: qsort may allocate, and this runs inside next(). */
static void sift_down(uint64_t *a, size_t root, size_t n)
{
    for (;;) {
        size_t child = 2 * root + 1;
        if (child >= n)
            return;
        if (child + 1 < n && a[child + 1] > a[child])
            child++;
        if (a[root] >= a[child])
            return;
        uint64_t t = a[root];
        a[root] = a[child];
        a[child] = t;
        root = child;
    }
}

static void sort_u64(uint64_t *a, size_t n)
{
    size_t i;
    for (i = 1; i < n && a[i - 1] <= a[i]; i++)
        ;
    if (i >= n)
        return; /* the usual case: safetensors lists tensors in file order */
    for (i = n / 2; i-- > 0;)
        sift_down(a, i, n);
    for (i = n; i-- > 1;) {
        uint64_t t = a[0];
        a[0] = a[i];
        a[i] = t;
        sift_down(a, 0, i);
    }
}

/* ---- FastCDC ---- */

/* First index in p[0..n) at which the chunk length before that byte reaches x. */
static size_t cdc_index(uint64_t len0, uint64_t x, size_t n)
{
    if (x <= len0)
        return 0;
    return (size_t)(x - len0 < n ? x - len0 : n);
}

/*
 * Runs the content-defined cut search over p[0..n). Returns the bytes taken:
 * k < n or k == n with *cut = 1 if the chunk ends after p[k-1], else n.
 * Regions by chunk length L after a byte: L <= min-64 not hashed; up to min-1
 * hashed only; [min, avg) cut where the hash has mask_s bits clear;
 * [avg, max) mask_l; L == max always cuts.
 */
static size_t cdc_scan(st_chunker *c, const uint8_t *p, size_t n, int *cut)
{
    const uint64_t *gear = c->gear;
    const uint64_t ms = c->mask_s, ml = c->mask_l;
    uint64_t fp = c->fp;
    const uint64_t len0 = c->clen;
    size_t i = cdc_index(len0, c->hash_start, n);
    const size_t i_min = cdc_index(len0, c->p.min_size - 1, n);
    const size_t i_avg = cdc_index(len0, c->p.avg_size - 1, n);
    const size_t i_max = cdc_index(len0, c->p.max_size - 1, n);

    *cut = 0;
    for (; i < i_min; i++)
        fp = (fp << 1) + gear[p[i]];
    for (; i < i_avg; i++) {
        fp = (fp << 1) + gear[p[i]];
        if (!(fp & ms))
            goto found;
    }
    for (; i < i_max; i++) {
        fp = (fp << 1) + gear[p[i]];
        if (!(fp & ml))
            goto found;
    }
    if (i_max < n) {
        i = i_max; /* this byte makes the chunk max_size long */
        goto found;
    }
    c->fp = fp;
    c->clen = len0 + n;
    return n;
found:
    c->clen = len0 + i + 1;
    *cut = 1;
    return i + 1;
}

/* ---- parser: state changes ---- */

static void go_collect(st_chunker *c, enum parse_state s, uint32_t need)
{
    c->ps = s;
    c->need = need; /* win[0..got) is kept: headers grow in place */
}

static void go_collect_new(st_chunker *c, enum parse_state s, uint32_t need)
{
    c->ps = s;
    c->got = 0;
    c->need = need;
    c->hdr = c->pos;
}

static void go_skip(st_chunker *c, enum parse_state s, uint64_t target)
{
    c->ps = s;
    c->target = target;
}

static void go_unknown(st_chunker *c)
{
    c->ps = PS_UNKNOWN;
}

static enum parse_kind parse_kind_of(enum parse_state s)
{
    switch (s) {
    case PS_SNIFF:
    case PS_ZIP_SIG:
    case PS_ZIP_LFH:
    case PS_ZIP_XHDR:
    case PS_ZIP_X64:
    case PS_ZIP_DESC:
    case PS_ZIP_CDH:
    case PS_ZIP_Z64E:
    case PS_ZIP_EOCD:
    case PS_ZIP_AFTER: return K_COLLECT;
    case PS_ZIP_NAME:
    case PS_ZIP_XSKIP:
    case PS_ZIP_DATA:
    case PS_ZIP_SKIPREC:
    case PS_ZIP_EOCDEND:
    case PS_ST_DATA: return K_SKIP;
    case PS_ZIP_SCAN: return K_SCAN;
    case PS_ST_JSON: return K_JSON;
    case PS_UNKNOWN: break;
    }
    return K_NONE;
}

/* ---- ZIP ---- */

static void zip_expect_sig(st_chunker *c, enum parse_state s)
{
    go_collect_new(c, s, 4);
}

static void zip_scan_from_here(st_chunker *c)
{
    c->ps = PS_ZIP_SCAN;
    c->scan_hit = 0;
    c->scan_upto = c->pos;
}

/* After the name or an extra field: the next extra field, or the data. */
static int zip_next_extra(st_chunker *c)
{
    if (c->pos >= c->x_end)
        return 1;
    if (c->x_end - c->pos >= 4)
        go_collect_new(c, PS_ZIP_XHDR, 4);
    else
        go_skip(c, PS_ZIP_XSKIP, c->x_end); /* a stub too short for a field */
    return 0;
}

/* At a record's data start (a forced cut has just been made). */
static void zip_begin_data(st_chunker *c)
{
    c->data_start = c->pos;
    if (c->zflags & ZIP_FLAG_DESCRIPTOR) {
        /* Sizes follow the data: find the descriptor. sh = 0 so that header
         * bytes can never complete a signature with data bytes. */
        c->sh = 0;
        zip_scan_from_here(c);
    } else if (c->csize == 0xFFFFFFFFu) {
        go_unknown(c); /* zip64 size promised but no zip64 extra */
    } else {
        go_skip(c, PS_ZIP_DATA, sat_add(c->pos, c->csize));
    }
}

static int zip_desc16_ok(const st_chunker *c, uint64_t len)
{
    return len <= 0xFFFFFFFFu && st_le32_get(c->win + 4) == len &&
           (c->zmethod != 0 || st_le32_get(c->win + 8) == len);
}

static int zip_desc24_ok(const st_chunker *c, uint64_t len)
{
    return st_le64_get(c->win + 4) == len && (c->zmethod != 0 || st_le64_get(c->win + 12) == len);
}

/* A signature whose descriptor did not check out. The bytes gathered after it
 * may hold the real signature: look there before scanning on. */
static void zip_desc_rescan(st_chunker *c)
{
    for (uint32_t o = 0; o + 4 <= c->got; o++) {
        if (memcmp(c->win + o, zip_desc_sig, 4) == 0) {
            c->sig_pos = c->pos - c->got + o;
            memmove(c->win, c->win + o + 4, c->got - o - 4);
            c->got -= o + 4;
            c->need = c->got <= 12 ? 12 : 20;
            return;
        }
    }
    const uint8_t *t = c->win + c->got - 4; /* got >= 12 here */
    c->sh = (uint32_t)t[0] << 24 | (uint32_t)t[1] << 16 | (uint32_t)t[2] << 8 | t[3];
    zip_scan_from_here(c);
}

/* Dispatch on a 4-byte signature at a record boundary. */
static void zip_dispatch(st_chunker *c, int after_eocd)
{
    uint32_t sig = st_le32_get(c->win);
    if (sig == ZIP_LFH) {
        go_collect(c, PS_ZIP_LFH, ZIP_LFH_LEN);
        return;
    }
    if (after_eocd) {
        go_unknown(c); /* not another archive: the rest is unknown data */
        return;
    }
    switch (sig) {
    case ZIP_CDH: go_collect(c, PS_ZIP_CDH, ZIP_CDH_LEN); break;
    case ZIP_Z64EOCD: go_collect(c, PS_ZIP_Z64E, ZIP_Z64EOCD_MIN); break;
    case ZIP_Z64LOC: go_skip(c, PS_ZIP_SKIPREC, c->hdr + ZIP_Z64LOC_LEN); break;
    case ZIP_EOCD: go_collect(c, PS_ZIP_EOCD, ZIP_EOCD_LEN); break;
    default: go_unknown(c); break;
    }
}

/* ---- safetensors ---- */

static const char json_key_offsets[] = "data_offsets";
#define JSON_KEY_OFFSETS_LEN 12

static void json_end_number(st_chunker *c)
{
    json_reader *j = &c->js;
    if (!j->have_digit) {
        j->failed = 1;
        return;
    }
    if (j->num_idx == 0) {
        if (c->st_n < ST_OFFSETS_MAX)
            c->st_off[c->st_n++] = j->num;
        else
            j->failed = 1; /* too many tensors to remember: treat as unknown */
    }
    j->num = 0;
    j->have_digit = 0;
}

static void json_push(json_reader *j, int is_array)
{
    if (j->depth >= 63) {
        j->failed = 1;
        return;
    }
    j->depth++;
    if (is_array)
        j->arr_bits |= UINT64_C(1) << j->depth;
    else
        j->arr_bits &= ~(UINT64_C(1) << j->depth);
}

static void json_pop(json_reader *j, int is_array)
{
    if (j->depth == 0 || !!(j->arr_bits >> j->depth & 1) != is_array) {
        j->failed = 1;
        return;
    }
    j->depth--;
    j->expect_key = 0;
    if (j->depth == 0)
        j->done = 1;
}

static void json_feed(st_chunker *c, uint8_t b)
{
    json_reader *j = &c->js;
    if (j->failed || j->done)
        return; /* after the top-level object: padding */
    if (j->in_str) {
        if (j->esc) {
            j->esc = 0;
            j->key_match = 0;
        } else if (b == '\\') {
            j->esc = 1;
            j->key_match = 0;
        } else if (b == '"') {
            j->in_str = 0;
            if (j->reading_key)
                j->key_hit = j->key_match && j->key_pos == JSON_KEY_OFFSETS_LEN && j->depth == 2;
            j->reading_key = 0;
        } else if (j->reading_key) {
            if (j->key_pos < JSON_KEY_OFFSETS_LEN && b == (uint8_t)json_key_offsets[j->key_pos])
                j->key_pos++;
            else
                j->key_match = 0;
        }
        return;
    }
    if (b == ' ' || b == '\t' || b == '\n' || b == '\r')
        return;
    int want = j->want_offsets;
    j->want_offsets = 0;
    if (j->in_offsets) {
        if (b >= '0' && b <= '9') {
            if (j->num > (UINT64_MAX - 9) / 10) {
                j->failed = 1;
                return;
            }
            j->num = j->num * 10 + (uint64_t)(b - '0');
            j->have_digit = 1;
        } else if (b == ',') {
            json_end_number(c);
            j->num_idx++;
        } else if (b == ']') {
            json_end_number(c);
            j->in_offsets = 0;
            json_pop(j, 1);
        } else {
            j->failed = 1; /* offsets are plain non-negative integers */
        }
        return;
    }
    switch (b) {
    case '"':
        j->in_str = 1;
        j->reading_key = j->expect_key;
        j->expect_key = 0;
        j->key_pos = 0;
        j->key_match = 1;
        j->key_hit = 0;
        break;
    case ':':
        j->want_offsets = j->key_hit;
        j->key_hit = 0;
        break;
    case '{':
        json_push(j, 0);
        j->expect_key = 1;
        break;
    case '[':
        json_push(j, 1);
        if (want && j->depth == 3) {
            j->in_offsets = 1;
            j->num_idx = 0;
            j->num = 0;
            j->have_digit = 0;
        }
        break;
    case '}': json_pop(j, 0); break;
    case ']': json_pop(j, 1); break;
    case ',': j->expect_key = j->depth > 0 && !(j->arr_bits >> j->depth & 1); break;
    default: break; /* numbers, true/false/null elsewhere: not ours */
    }
}

/* Skip to the next tensor offset past pos, or give the rest to CDC. */
static void st_next_target(st_chunker *c)
{
    while (c->st_next < c->st_n) {
        uint64_t t = sat_add(c->st_base, c->st_off[c->st_next++]);
        if (t > c->pos) {
            go_skip(c, PS_ST_DATA, t);
            return;
        }
    }
    go_unknown(c);
}

static void st_header_done(st_chunker *c)
{
    const json_reader *j = &c->js;
    if (j->failed || !j->done || c->st_n == 0) {
        go_unknown(c);
        return;
    }
    sort_u64(c->st_off, c->st_n);
    c->st_next = 0;
    st_next_target(c);
}

/* ---- parser: main step ---- */

static int parse_ready(const st_chunker *c)
{
    switch (parse_kind_of(c->ps)) {
    case K_COLLECT: return c->got >= c->need;
    case K_SKIP: return c->pos >= c->target;
    case K_SCAN: return c->scan_hit != 0 && c->pos == c->scan_hit;
    case K_JSON: return c->pos >= c->target;
    case K_NONE: break;
    }
    return 0;
}

/* Sniff the first bytes: ZIP local header, or a plausible safetensors header. */
static void parse_sniff(st_chunker *c)
{
    if (c->got == 4 && st_le32_get(c->win) == ZIP_LFH) {
        c->fmt = ST_FORMAT_ZIP;
        c->hdr = 0;
        go_collect(c, PS_ZIP_LFH, ZIP_LFH_LEN);
        return;
    }
    if (c->got < 9) {
        c->need = 9;
        return;
    }
    uint64_t hlen = st_le64_get(c->win);
    if (c->win[8] == '{' && hlen >= 2 && hlen <= ST_HEADER_MAX) {
        c->fmt = ST_FORMAT_SAFETENSORS;
        c->st_base = 8 + hlen;
        memset(&c->js, 0, sizeof c->js);
        json_feed(c, '{');
        c->ps = PS_ST_JSON;
        c->target = c->st_base;
        return;
    }
    go_unknown(c);
}

/*
 * Runs every state whose wait is over. Returns 1 if a record boundary lies at
 * c->pos (a forced cut). Zero-length steps (an empty name, an empty record)
 * chain within one call.
 */
static int parse_act(st_chunker *c)
{
    int force = 0;
    while (parse_ready(c)) {
        switch (c->ps) {
        case PS_SNIFF: parse_sniff(c); break;
        case PS_ZIP_SIG: zip_dispatch(c, 0); break;
        case PS_ZIP_AFTER: zip_dispatch(c, 1); break;
        case PS_ZIP_LFH: {
            uint16_t name_len = st_le16_get(c->win + 26);
            uint16_t extra_len = st_le16_get(c->win + 28);
            c->zflags = st_le16_get(c->win + 6);
            c->zmethod = st_le16_get(c->win + 8);
            c->csize = st_le32_get(c->win + 18);
            c->usize = st_le32_get(c->win + 22);
            c->zip64 = 0;
            c->x_end = c->hdr + ZIP_LFH_LEN + name_len + extra_len;
            go_skip(c, PS_ZIP_NAME, c->hdr + ZIP_LFH_LEN + name_len);
            break;
        }
        case PS_ZIP_NAME:
        case PS_ZIP_XSKIP:
            if (zip_next_extra(c)) {
                force = 1; /* data start */
                zip_begin_data(c);
            }
            break;
        case PS_ZIP_XHDR: {
            uint16_t id = st_le16_get(c->win);
            uint64_t end = c->pos + st_le16_get(c->win + 2);
            c->field_end = end < c->x_end ? end : c->x_end;
            if (id == ZIP_EXTRA_ZIP64 && c->field_end > c->pos)
                go_collect_new(c, PS_ZIP_X64, (uint32_t)min_sz(c->field_end - c->pos, 16));
            else
                go_skip(c, PS_ZIP_XSKIP, c->field_end);
            break;
        }
        case PS_ZIP_X64: {
            /* Local-header zip64 extra: original size, then compressed size,
             * each present only where the header field is 0xFFFFFFFF. */
            uint32_t off = 0;
            c->zip64 = 1;
            if (c->usize == 0xFFFFFFFFu && off + 8 <= c->got) {
                c->usize = st_le64_get(c->win + off);
                off += 8;
            }
            if (c->csize == 0xFFFFFFFFu && off + 8 <= c->got)
                c->csize = st_le64_get(c->win + off);
            go_skip(c, PS_ZIP_XSKIP, c->field_end);
            break;
        }
        case PS_ZIP_DATA:
            force = 1; /* record end = next header */
            zip_expect_sig(c, PS_ZIP_SIG);
            break;
        case PS_ZIP_SCAN:
            c->sig_pos = c->pos - 4;
            c->scan_hit = 0;
            go_collect_new(c, PS_ZIP_DESC, 12);
            break;
        case PS_ZIP_DESC: {
            uint64_t len = c->sig_pos - c->data_start;
            if (c->got == 12 && zip_desc16_ok(c, len) && !(c->zip64 && len == 0)) {
                force = 1;
                zip_expect_sig(c, PS_ZIP_SIG);
            } else if (c->got < 20) {
                c->need = 20;
            } else if (zip_desc24_ok(c, len)) {
                force = 1;
                zip_expect_sig(c, PS_ZIP_SIG);
            } else {
                zip_desc_rescan(c);
            }
            break;
        }
        case PS_ZIP_CDH: {
            uint64_t var = (uint64_t)st_le16_get(c->win + 28) + st_le16_get(c->win + 30) +
                           st_le16_get(c->win + 32);
            go_skip(c, PS_ZIP_SKIPREC, c->hdr + ZIP_CDH_LEN + var);
            break;
        }
        case PS_ZIP_Z64E:
            go_skip(c, PS_ZIP_SKIPREC, sat_add(c->hdr + ZIP_Z64EOCD_MIN, st_le64_get(c->win + 4)));
            break;
        case PS_ZIP_SKIPREC:
            zip_expect_sig(c, PS_ZIP_SIG); /* no cut inside the central directory */
            break;
        case PS_ZIP_EOCD:
            go_skip(c, PS_ZIP_EOCDEND, c->hdr + ZIP_EOCD_LEN + st_le16_get(c->win + 20));
            break;
        case PS_ZIP_EOCDEND:
            force = 1; /* archive end: another archive may follow */
            zip_expect_sig(c, PS_ZIP_AFTER);
            break;
        case PS_ST_JSON:
            force = 1; /* header end */
            st_header_done(c);
            break;
        case PS_ST_DATA:
            force = 1; /* tensor start */
            st_next_target(c);
            break;
        case PS_UNKNOWN: return force;
        }
    }
    return force;
}

/*
 * First "PK\x07\x08" in p[0..n), or NULL. This runs over every byte of a
 * torch.save record, so it is vectorised where SSE2 is (all x86-64): four
 * shifted 16-byte compares find every start in a block at once. glibc's
 * memmem ran at about half the speed of the gear hash here.
 */
static const uint8_t *find_desc_sig(const uint8_t *p, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i v0 = _mm_set1_epi8('P'), v1 = _mm_set1_epi8('K');
    const __m128i v2 = _mm_set1_epi8(7), v3 = _mm_set1_epi8(8);
    for (; i + 16 + 3 <= n; i += 16) {
        __m128i m0 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i)), v0);
        __m128i m1 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i + 1)), v1);
        __m128i m2 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i + 2)), v2);
        __m128i m3 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i + 3)), v3);
        int mask = _mm_movemask_epi8(_mm_and_si128(_mm_and_si128(m0, m1), _mm_and_si128(m2, m3)));
        if (mask)
            return p + i + __builtin_ctz((unsigned)mask);
    }
#endif
    return i < n ? memmem(p + i, n - i, zip_desc_sig, 4) : NULL;
}

/*
 * How many of the next n bytes the parser can take before it must act. In
 * SCAN it searches for the next descriptor signature and remembers the result
 * (scan_hit / scan_upto), so that content cuts inside a long record do not
 * make it search the same bytes again.
 */
static size_t parse_span(st_chunker *c, const uint8_t *p, size_t n)
{
    switch (parse_kind_of(c->ps)) {
    case K_COLLECT: return min_sz(n, c->need - c->got);
    case K_SKIP:
    case K_JSON: return (size_t)min_sz(n, c->target - c->pos);
    case K_SCAN: {
        if (c->scan_hit)
            return min_sz(n, c->scan_hit - c->pos);
        if (c->scan_upto > c->pos)
            return min_sz(n, c->scan_upto - c->pos);
        /* a signature may straddle the previous bytes: check the first three */
        uint32_t s = c->sh;
        size_t head = min_sz(n, 3);
        for (size_t j = 0; j < head; j++) {
            s = s << 8 | p[j];
            if (s == ZIP_DESC_BE) {
                c->scan_hit = c->pos + j + 1;
                return j + 1;
            }
        }
        const uint8_t *q = find_desc_sig(p, n);
        if (q) {
            c->scan_hit = c->pos + (uint64_t)(q - p) + 4;
            return (size_t)(q - p) + 4;
        }
        c->scan_upto = c->pos + n;
        return n;
    }
    case K_NONE: break;
    }
    return n;
}

/* The parser takes p[0..k) (k <= the last parse_span); returns a forced cut. */
static int parse_consume(st_chunker *c, const uint8_t *p, size_t k)
{
    switch (parse_kind_of(c->ps)) {
    case K_COLLECT:
        memcpy(c->win + c->got, p, k);
        c->got += (uint32_t)k;
        break;
    case K_SCAN:
        if (k >= 4) {
            c->sh = (uint32_t)p[k - 4] << 24 | (uint32_t)p[k - 3] << 16 | (uint32_t)p[k - 2] << 8 |
                    p[k - 1];
        } else {
            for (size_t j = 0; j < k; j++)
                c->sh = c->sh << 8 | p[j];
        }
        break;
    case K_JSON:
        for (size_t j = 0; j < k; j++)
            json_feed(c, p[j]);
        break;
    case K_SKIP:
    case K_NONE: break;
    }
    c->pos += k;
    if (parse_kind_of(c->ps) == K_NONE)
        return 0;
    return parse_act(c);
}

/* ---- public API ---- */

static int params_valid(const st_chunker_params *p)
{
    return p->min_size >= 64 && p->min_size <= p->avg_size && p->avg_size <= p->max_size &&
           p->max_size <= CHUNKER_MAX_SIZE && (p->avg_size & (p->avg_size - 1)) == 0;
}

st_err st_chunker_new(const st_chunker_params *params, st_chunker **out)
{
    st_chunker *c = NULL;
    *out = NULL;
    if (!params)
        params = &st_chunker_default_params;
    if (!params_valid(params))
        return st_seterr(ST_ERR_INVALID,
                         "chunker params min %u avg %u max %u: need 64 <= min <= avg <= max <= "
                         "64 MiB and avg a power of two",
                         params->min_size, params->avg_size, params->max_size);
    c = calloc(1, sizeof *c);
    if (!c)
        goto nomem;
    c->st_off = malloc(ST_OFFSETS_MAX * sizeof *c->st_off);
    if (!c->st_off)
        goto nomem;
    c->p = *params;
    unsigned bits = log2_u32(params->avg_size);
    c->mask_s = top_mask(bits + NORM_LEVEL);
    c->mask_l = top_mask(bits > NORM_LEVEL ? bits - NORM_LEVEL : 0);
    c->hash_start = params->min_size - GEAR_WINDOW;
    /* A fixed seed: cut points (and so chunk ids) must agree across
     * processes, machines and versions. Changing it changes every chunk. */
    uint64_t seed = UINT64_C(0x636b707466736765); /* "ckptfsge" */
    for (int i = 0; i < 256; i++)
        c->gear[i] = splitmix64(&seed);
    st_chunker_reset(c);
    *out = c;
    return ST_OK;
nomem:
    st_chunker_free(c);
    return st_seterr(ST_ERR_NOMEM, "chunker: out of memory");
}

void st_chunker_reset(st_chunker *c)
{
    c->fp = 0;
    c->clen = 0;
    c->pos = 0;
    c->fmt = ST_FORMAT_UNKNOWN;
    c->got = 0;
    c->need = 4;
    c->ps = PS_SNIFF;
    c->target = 0;
    c->hdr = c->data_start = c->x_end = c->field_end = 0;
    c->csize = c->usize = c->sig_pos = c->scan_hit = c->scan_upto = 0;
    c->sh = 0;
    c->zflags = c->zmethod = 0;
    c->zip64 = 0;
    c->st_base = 0;
    c->st_n = c->st_next = 0;
    memset(&c->js, 0, sizeof c->js);
}

size_t st_chunker_next(st_chunker *c, const uint8_t *buf, size_t len, int *cut)
{
    size_t i = 0;
    *cut = 0;
    while (i < len) {
        size_t n = parse_span(c, buf + i, len - i);
        int cdc_cut;
        size_t k = cdc_scan(c, buf + i, n, &cdc_cut);
        int force = parse_consume(c, buf + i, k);
        i += k;
        if (cdc_cut || force) {
            /* k >= 1, so the chunk ending here is never empty */
            c->fp = 0;
            c->clen = 0;
            *cut = 1;
            return i;
        }
    }
    return len;
}

st_format st_chunker_format(const st_chunker *c)
{
    return c->fmt;
}

void st_chunker_free(st_chunker *c)
{
    if (!c)
        return;
    free(c->st_off);
    free(c);
}
