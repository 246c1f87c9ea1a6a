/*
 * st_array — the one way a growable array grows in libckptstore: a
 * malloc'd pointer, a capacity, and st_array_grow() before each append.
 */
#ifndef ST_ARRAY_H
#define ST_ARRAY_H

#include <stddef.h>

#include "st_error.h"

/*! Grows the malloc'd array *arr (elements of elem bytes, *cap of them) so
 *  that it holds at least need elements, doubling; ST_ERR_NOMEM on failure
 *  (the array is then unchanged). */
st_err st_array_grow(void **arr, size_t *cap, size_t need, size_t elem);

#endif
