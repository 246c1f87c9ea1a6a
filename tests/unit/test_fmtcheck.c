/*
 * Unit tests of st_fmtcheck: a ZIP or safetensors file cut anywhere before
 * its end is recognised as cut short; whole files and unknown data pass.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/st_fmtcheck.h"
#include "util/st_wire.h"
#include "ut.h"

static char path[] = "/tmp/ckpt-test-fmtcheck-XXXXXX";

static int check(const uint8_t *data, size_t len)
{
    int fd = open(path, O_RDWR | O_TRUNC);
    if (fd < 0 || write(fd, data, len) != (ssize_t)len) {
        perror("write");
        exit(1);
    }
    int whole = st_file_looks_complete(fd, len);
    close(fd);
    return whole;
}

/* A stored ZIP with one record and a comment, as torch.save-like bytes. */
static size_t make_zip(uint8_t *out, size_t payload, uint16_t comment)
{
    size_t n = 0;
    memcpy(out, "PK\x03\x04", 4);
    memset(out + 4, 0, 26);
    st_le16_put(out + 26, 4); /* name length */
    memcpy(out + 30, "data", 4);
    n = 34;
    ut_rand_fill(out + n, payload, 5);
    n += payload;
    size_t cd = n;
    memcpy(out + n, "PK\x01\x02", 4);
    memset(out + n + 4, 0, 42);
    st_le16_put(out + n + 28, 4);
    memcpy(out + n + 46, "data", 4);
    n += 50;
    memcpy(out + n, "PK\x05\x06", 4);
    memset(out + n + 4, 0, 18);
    st_le32_put(out + n + 12, 50);
    st_le32_put(out + n + 16, (uint32_t)cd);
    st_le16_put(out + n + 20, comment);
    n += 22;
    memset(out + n, 'c', comment);
    return n + comment;
}

static void test_zip(void)
{
    uint8_t *buf = malloc(1 << 20);
    size_t len = make_zip(buf, 200000, 0);
    CHECK(check(buf, len) == 1);
    int cut_ok = 0, cuts = 0;
    for (size_t cut = 9; cut < len; cut += 997, cuts++)
        cut_ok += check(buf, cut) == 0;
    CHECK(cut_ok == cuts);
    CHECK(check(buf, len - 1) == 0);
    len = make_zip(buf, 1000, 300); /* an archive comment */
    CHECK(check(buf, len) == 1);
    CHECK(check(buf, len - 1) == 0);
    free(buf);
}

static void test_safetensors(void)
{
    uint8_t buf[4096];
    const char *hdr = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
    size_t n = strlen(hdr);
    st_le64_put(buf, n);
    memcpy(buf + 8, hdr, n);
    memset(buf + 8 + n, 1, 16);
    CHECK(check(buf, 8 + n + 16) == 1);
    CHECK(check(buf, 8 + n / 2) == 0);
}

static void test_unknown_and_tiny(void)
{
    uint8_t buf[5000];
    ut_rand_fill(buf, sizeof buf, 3);
    buf[0] = 'x';
    CHECK(check(buf, sizeof buf) == 1);
    CHECK(check(buf, 3) == 1);
    CHECK(check((const uint8_t *)"PK\x03\x04", 4) == 1); /* too short to judge */
}

int main(void)
{
    int fd = mkstemp(path);
    if (fd < 0) {
        perror("mkstemp");
        return 1;
    }
    close(fd);
    RUN(test_zip);
    RUN(test_safetensors);
    RUN(test_unknown_and_tiny);
    unlink(path);
    return ut_finish();
}
