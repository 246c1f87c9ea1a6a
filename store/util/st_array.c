/*
 * st_array — growing malloc'd arrays by doubling, searching sorted ones
 * (st_array.h).
 */
#include "util/st_array.h"

#include <stdint.h>
#include <stdlib.h>

st_err st_array_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return ST_OK;
    size_t n = *cap ? *cap : 16;
    while (n < need && n <= SIZE_MAX / 2)
        n *= 2;
    if (n < need || n > SIZE_MAX / elem)
        return st_seterr(ST_ERR_NOMEM, "array size overflow");
    void *p = realloc(*arr, n * elem);
    if (!p)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    *arr = p;
    *cap = n;
    return ST_OK;
}

size_t st_array_lower_bound(const void *base, size_t n, size_t elem, const void *key,
                            int (*cmp)(const void *key, const void *element), int *found)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp(key, (const char *)base + mid * elem);
        if (c == 0) {
            *found = 1;
            return mid;
        }
        if (c > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = 0;
    return lo;
}
