/*
 * st_fmtcheck — truncation check for closed checkpoint files. See header.
 */
#include "format/st_fmtcheck.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/st_wire.h"

#define EOCD_LEN               22
#define EOCD_SEARCH            (EOCD_LEN + 65535) /* the record plus the longest comment */
#define SAFETENSORS_MAX_HEADER (100ull << 20)

static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

static int zip_has_end(int fd, uint64_t size)
{
    size_t tail = size < EOCD_SEARCH ? (size_t)size : EOCD_SEARCH;
    uint8_t *buf = malloc(tail);
    int ok = 0;
    if (!buf || pread_full(fd, buf, tail, size - tail) != 0)
        goto out;
    for (size_t i = tail >= EOCD_LEN ? tail - EOCD_LEN + 1 : 0; i-- > 0;) {
        if (memcmp(buf + i, "PK\x05\x06", 4) == 0 &&
            i + EOCD_LEN + st_le16_get(buf + i + 20) == tail) {
            ok = 1;
            break;
        }
    }
out:
    free(buf);
    return ok;
}

int st_file_looks_complete(int fd, uint64_t size)
{
    uint8_t head[9];
    if (size < sizeof head)
        return 1;
    if (pread_full(fd, head, sizeof head, 0) != 0)
        return 0;
    if (memcmp(head, "PK\x03\x04", 4) == 0)
        return zip_has_end(fd, size);
    uint64_t n = st_le64_get(head);
    if (head[8] == '{' && n >= 2 && n <= SAFETENSORS_MAX_HEADER)
        return size >= 8 + n;
    return 1;
}
