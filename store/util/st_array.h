/*
 * st_array — the one way a growable array grows in libckptstore: a
 * malloc'd pointer, a capacity, and st_array_grow() before each append;
 * and the one binary search of a sorted array (st_array_lower_bound).
 */
#ifndef ST_ARRAY_H
#define ST_ARRAY_H

#include <stddef.h>

#include "st_error.h"

/*! Grows the malloc'd array *arr (elements of elem bytes, *cap of them) so
 *  that it holds at least need elements, doubling; ST_ERR_NOMEM on failure
 *  (the array is then unchanged). */
st_err st_array_grow(void **arr, size_t *cap, size_t need, size_t elem);

/*! Binary search of the n elements of elem bytes at base, sorted so that
 *  cmp(key, element) is negative before key's place, zero at it, positive
 *  after (bsearch's contract). Returns the index of an element equal to key
 *  (*found = 1), or where key would be inserted to keep the order
 *  (*found = 0). No allocation; cmp runs on the caller's thread. */
size_t st_array_lower_bound(const void *base, size_t n, size_t elem, const void *key,
                            int (*cmp)(const void *key, const void *element), int *found);

#endif
