/*
 * bench_crypt — the cost of client-side encryption (util/st_crypt.h,
 * docs/ENCRYPTION.md): AES-256-GCM seal and open throughput on records of
 * --record KiB (default 1024), against memcpy of the same bytes.
 *
 *   bench_crypt [--size MIB] [--record KIB] [--reps N]
 *
 * Over --size MiB of random data (default 256), cut into records:
 *   memcpy        the floor: each record copied once
 *   seal record   st_crypt_seal_record, as a pack's chunk records will be
 *   open record   st_crypt_open_record of those (tag checked)
 *   seal object   st_crypt_seal_object: an envelope per record (salt, HKDF)
 *   open object   st_crypt_open_object of those
 * Each row is warmed up once, then timed --reps times (default 5); the
 * table shows the best and the median in MB/s (10^6 bytes/s of plaintext).
 * The machine is noisy: compare rows of one run.
 *
 * Single-threaded. Default run: well under 20 s.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/st_crypt.h"
#include "util/st_keyring.h"

#include "bench_util.h"

#define NAME "jobs/bench/steps/00000000000000000001/nodes/n.r1.manifest"

static volatile uint64_t sink; /* keeps the copy from being optimised away */

enum work { W_MEMCPY, W_SEAL_RECORD, W_OPEN_RECORD, W_SEAL_OBJECT, W_OPEN_OBJECT };

typedef struct bench {
    const st_keyring *kr;
    st_crypt_objkey pack_key;
    uint8_t header[48]; /* stands for a pack header */
    const uint8_t *plain;
    size_t len, record;
    uint8_t *sealed_records; /* record + tag each */
    uint8_t *sealed_objects; /* record + envelope each */
    uint8_t *out;            /* one record */
} bench;

/* One pass of w over every record; 0, or -1 with st_errmsg() set. */
static int run(bench *b, enum work w)
{
    size_t rec_stride = b->record + ST_CRYPT_TAG_LEN;
    size_t obj_stride = st_crypt_object_bound(b->record);
    size_t n;
    for (size_t i = 0, off = 0; off < b->len; i++, off += b->record) {
        const uint8_t *plain = b->plain + off;
        uint8_t *rec = b->sealed_records + i * rec_stride;
        uint8_t *obj = b->sealed_objects + i * obj_stride;
        st_err e = ST_OK;
        switch (w) {
        case W_MEMCPY:
            memcpy(b->out, plain, b->record);
            sink += b->out[i % b->record];
            break;
        case W_SEAL_RECORD:
            e = st_crypt_seal_record(&b->pack_key, b->header, sizeof b->header, off, plain,
                                     b->record, rec);
            break;
        case W_OPEN_RECORD:
            e = st_crypt_open_record(&b->pack_key, "bench.pack", b->header, sizeof b->header, off,
                                     rec, rec_stride, b->out);
            break;
        case W_SEAL_OBJECT:
            e = st_crypt_seal_object(b->kr, ST_CRYPT_MANIFEST, NAME, plain, b->record, obj,
                                     obj_stride, &n);
            break;
        case W_OPEN_OBJECT:
            e = st_crypt_open_object(b->kr, ST_CRYPT_MANIFEST, NAME, obj, obj_stride, b->out,
                                     b->record, &n);
            break;
        }
        if (e)
            return -1;
    }
    return 0;
}

static int bench_row(bench *b, enum work w, int reps)
{
    static const char *names[] = {"memcpy", "seal record", "open record", "seal object",
                                  "open object"};
    double t[64];
    if (reps > 64)
        reps = 64;
    for (int r = -1; r < reps; r++) { /* r == -1: warm-up (and the seals the opens read) */
        double t0 = bench_now();
        if (run(b, w)) {
            fprintf(stderr, "%s: %s\n", names[w], st_errmsg());
            return -1;
        }
        if (r >= 0)
            t[r] = bench_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof t[0], bench_cmp_double);
    double mb = (double)b->len / 1e6;
    printf("%-12s %10.1f %10.1f\n", names[w], mb / t[0], mb / t[reps / 2]);
    return 0;
}

int main(int argc, char **argv)
{
    size_t mib = 256, record_kib = 1024;
    int reps = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--size") && i + 1 < argc)
            mib = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--record") && i + 1 < argc)
            record_kib = strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            mib = 0;
    }
    if (mib == 0 || record_kib == 0 || reps < 1 || (mib << 10) % record_kib) {
        fprintf(stderr, "usage: %s [--size MIB] [--record KIB, dividing the size] [--reps N]\n",
                argv[0]);
        return 2;
    }
    bench b = {.len = mib << 20, .record = record_kib << 10};
    size_t records = b.len / b.record;
    uint8_t *plain = malloc(b.len);
    b.sealed_records = malloc(records * (b.record + ST_CRYPT_TAG_LEN));
    b.sealed_objects = malloc(records * st_crypt_object_bound(b.record));
    b.out = malloc(b.record);
    st_keyring *kr = NULL;
    uint8_t key[ST_KEY_LEN], salt[ST_CRYPT_SALT_LEN];
    memset(key, 0x42, sizeof key);
    memset(salt, 0x24, sizeof salt);
    if (!plain || !b.sealed_records || !b.sealed_objects || !b.out || st_keyring_new(&kr) ||
        st_keyring_add(kr, key) ||
        st_crypt_derive(st_keyring_sealing(kr), salt, ST_CRYPT_PACK, &b.pack_key)) {
        fprintf(stderr, "setup failed: %s\n", st_errmsg());
        return 1;
    }
    bench_fill_random(plain, b.len);
    b.kr = kr;
    b.plain = plain;
    memcpy(b.header, "CKp2", 4);

    printf("AES-256-GCM, %zu MiB of random data in %zu KiB records, %d reps (+1 warm-up)\n", mib,
           record_kib, reps);
    printf("%-12s %10s %10s\n", "work", "best MB/s", "med MB/s");
    int rc = 0;
    for (enum work w = W_MEMCPY; w <= W_OPEN_OBJECT && !rc; w++)
        rc = bench_row(&b, w, reps) ? 1 : 0;

    st_crypt_objkey_wipe(&b.pack_key);
    st_keyring_free(kr);
    free(plain);
    free(b.sealed_records);
    free(b.sealed_objects);
    free(b.out);
    return rc;
}
