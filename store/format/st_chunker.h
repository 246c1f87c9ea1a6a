/*
 * st_chunker — where to cut a byte stream into chunks.
 *
 * Format-aware first, content-defined second. The chunker sniffs the first
 * bytes of a stream and, for formats trainers write, forces a cut at every
 * record boundary:
 *   - ZIP archives as torch.save writes them: at each local file header and at
 *     the start of each record's data; central directory and end records are
 *     walked too, and a new archive directly after an end record (DCP shard
 *     files written by torch 1.13 are concatenated torch.save archives) is
 *     followed the same way;
 *   - safetensors: after the JSON header and at each tensor's data offset;
 * and between forced cuts (inside large records, and everywhere in unknown
 * data) it uses FastCDC with normalized chunking over a gear hash. The CDC
 * state restarts at every forced cut, so a record's content chunks the same
 * wherever the record sits in the file.
 *
 * Streaming contract: cut positions are a pure function of the byte stream
 * and the parameters, identical whatever sizes the stream is fed in. The
 * chunker never copies or buffers the caller's data (only a small fixed
 * parse window for headers) and never allocates after st_chunker_new().
 *
 * Threads: one st_chunker per stream; no shared state.
 */
#ifndef ST_CHUNKER_H
#define ST_CHUNKER_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

typedef struct st_chunker_params {
    uint32_t min_size; /* no content-defined cut before this many bytes */
    uint32_t avg_size; /* normalized-chunking target, a power of two */
    uint32_t max_size; /* always cut here; also bounds a chunk's memory */
} st_chunker_params;

/*! The defaults, chosen by measurement (docs/CHUNKING.md). */
extern const st_chunker_params st_chunker_default_params;

/*! The largest chunk st_chunker_next() can ever produce with these params. */
static inline size_t st_chunker_max_chunk(const st_chunker_params *p)
{
    return p->max_size;
}

typedef struct st_chunker st_chunker;

/*!
 * Creates a chunker for one stream. params NULL means the defaults. Returns
 * ST_ERR_INVALID (params not 64 <= min <= avg <= max <= 64 MiB, avg a power
 * of two) or ST_ERR_NOMEM. Free with st_chunker_free().
 */
st_err st_chunker_new(const st_chunker_params *params, st_chunker **out);

/*! Forgets the stream so the chunker can start a new one (keeps params). */
void st_chunker_reset(st_chunker *c);

/*!
 * Scans buf[0..len) — the next bytes of the stream — for the next cut.
 * Returns the number of bytes consumed, n <= len. If *cut is set to 1, the
 * current chunk ends after those n bytes (so the chunk is everything fed
 * since the previous cut, up to and including buf[n-1]); otherwise all len
 * bytes were consumed with no cut and the caller feeds more. At end of
 * stream the bytes since the last cut (if any) are the final chunk.
 */
size_t st_chunker_next(st_chunker *c, const uint8_t *buf, size_t len, int *cut);

/*! What the sniffer decided the stream is (for stats and tests). */
typedef enum st_format {
    ST_FORMAT_UNKNOWN = 0, /* not decided yet, or plain CDC data */
    ST_FORMAT_ZIP = 1,
    ST_FORMAT_SAFETENSORS = 2,
} st_format;
st_format st_chunker_format(const st_chunker *c);

void st_chunker_free(st_chunker *c);

#endif
