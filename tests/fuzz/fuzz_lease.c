/*
 * fuzz_lease — libFuzzer target for st_lease_decode(), the node lease read
 * back from the store at every mount, heartbeat and publish (docs/NODES.md).
 *
 * Properties checked (abort on violation): the decoder returns OK or
 * CORRUPT only; an accepted lease has a lowercase-hex instance and origin, a
 * positive ttl and a host of safe characters, and its canonical re-encoding
 * decodes to the same lease.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "format/st_lease.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = fuzz_exact_copy(data, size);
    if (!buf)
        return 0;
    st_lease l;
    st_err e = st_lease_decode(buf, size, &l);
    if (e == ST_OK) {
        char text[ST_LEASE_TEXT_MAX];
        size_t len;
        if (strlen(l.instance) != ST_LEASE_INSTANCE_LEN ||
            strlen(l.origin) != ST_LEASE_ORIGIN_LEN || l.ttl_ns <= 0 || l.heartbeat_ns < 0 ||
            l.pid < 0 || strpbrk(l.host, " \n\t/"))
            abort();
        if (st_lease_encode(&l, text, &len) != ST_OK)
            abort();
        /* Numbers with leading zeros or '+' decode too; the canonical text
         * must decode to the same lease. */
        st_lease again;
        if (st_lease_decode(text, len, &again) != ST_OK || memcmp(&again, &l, sizeof l))
            abort();
    } else if (e != ST_ERR_CORRUPT) {
        abort();
    }
    free(buf);
    return 0;
}
