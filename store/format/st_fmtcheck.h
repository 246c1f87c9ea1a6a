/*
 * st_fmtcheck — does a closed file look whole? A trainer killed in the middle
 * of torch.save still closes its file (the kernel does it), and rule R3
 * (a single-file step is complete when its file is closed) must not publish
 * that stump as the newest checkpoint. Formats we know carry their end:
 *   - ZIP (torch.save): the end-of-central-directory record, whose comment
 *     length must reach exactly the end of the file;
 *   - safetensors: the file must hold at least its whole JSON header.
 * Anything else is assumed whole (we cannot tell).
 *
 * Pure function over an fd (pread only). Thread-safe.
 */
#ifndef ST_FMTCHECK_H
#define ST_FMTCHECK_H

#include <stdint.h>

/*! 1 if the file of `size` bytes behind fd looks complete, 0 if it is a
 *  known format cut short (or unreadable). */
int st_file_looks_complete(int fd, uint64_t size);

#endif
