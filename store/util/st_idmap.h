/*
 * st_idmap — an open-addressing hash map from st_id to a uint32 value.
 *
 * Ids are already uniform hashes, so the first 8 bytes serve as the hash.
 * Used for the chunks of the pack being built (dedup inside one upload
 * before the pack reaches the persistent index) and for pack tables.
 * Grows by doubling at 50% load; no deletion (maps live for one operation).
 * Threads: one owner.
 */
#ifndef ST_IDMAP_H
#define ST_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_hash.h"

typedef struct st_idmap {
    st_id *keys;
    uint32_t *values;
    uint8_t *used;
    size_t cap; /* power of two, or 0 before the first insert */
    size_t count;
} st_idmap;

/*! Zero-initialised maps are valid and empty. */
/*! Returns 1 and sets *value if present, else 0. */
int st_idmap_get(const st_idmap *m, const st_id *key, uint32_t *value);
/*! Inserts or replaces. ST_OK or ST_ERR_NOMEM. */
st_err st_idmap_put(st_idmap *m, const st_id *key, uint32_t value);
void st_idmap_free(st_idmap *m);

#endif
