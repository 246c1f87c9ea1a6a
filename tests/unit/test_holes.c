/*
 * Sparse files through the engine (docs/FORMATS.md, version 2: hole
 * extents), on an in-memory backend that counts requests: ingest finds the
 * file's holes (SEEK_DATA/SEEK_HOLE) and written runs of zeros and stores
 * neither (no pack bytes, no PUT); the manifest round-trips; restore, both
 * sequential and by chunk ranges, writes holes as holes (the result is
 * sparse and byte-identical) and fetches nothing for them.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend_count.h"
#include "engine/st_ingest.h"
#include "engine/st_restore.h"
#include "st_backend_mem.h"
#include "ut.h"

#define MIB (1ull << 20)

static char root[] = "/tmp/ckpt-test-holes-XXXXXX";

/* The sparse file: 256 MiB long, data at 64 MiB (1 MiB) and at 200 MiB
 * (100 KiB), 3 MiB of written zeros at 100 MiB, a hole at its end. */
#define SPARSE_SIZE (256 * MIB)
static const struct {
    uint64_t off, len;
    int zeros;
} sparse_writes[] = {{64 * MIB, MIB, 0}, {100 * MIB, 3 * MIB, 1}, {200 * MIB, 100000, 0}};
#define SPARSE_DATA (MIB + 100000) /* bytes that are not zeros */

static void make_sparse(const char *path)
{
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK(ftruncate(fd, SPARSE_SIZE) == 0);
    uint8_t *buf = malloc(3 * MIB);
    for (size_t i = 0; i < sizeof sparse_writes / sizeof sparse_writes[0]; i++) {
        if (sparse_writes[i].zeros)
            memset(buf, 0, sparse_writes[i].len);
        else
            ut_rand_fill(buf, sparse_writes[i].len, 40 + i);
        CHECK(pwrite(fd, buf, sparse_writes[i].len, (off_t)sparse_writes[i].off) ==
              (ssize_t)sparse_writes[i].len);
    }
    free(buf);
    close(fd);
}

static int files_equal(const char *a, const char *b)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

/* Bytes the file really occupies on disk. */
static uint64_t allocated(const char *path)
{
    struct stat st;
    CHECK(stat(path, &st) == 0);
    return (uint64_t)st.st_blocks * 512;
}

static uint64_t hole_bytes_of(const st_file_entry *f, size_t *nholes)
{
    uint64_t n = 0;
    *nholes = 0;
    for (size_t i = 0; i < f->nchunks; i++)
        if (st_chunk_is_hole(&f->chunks[i])) {
            n += f->chunks[i].raw_len;
            (*nholes)++;
        }
    return n;
}

/* An in-memory store whose requests are counted, and an index at db. */
static void open_engine(const char *db, st_backend **b, st_backend_counts *counts, st_state **state)
{
    CHECK_OK(st_backend_mem_open(b));
    CHECK_OK(st_backend_count_wrap(b, counts));
    CHECK_OK(st_state_open(db, state));
}

/* Ingests path as one file into a manifest stored in backend b. */
static void ingest_one(st_backend *b, st_state *state, const char *path, st_manifest *m,
                       st_ingest_stats *stats)
{
    st_ingest *g = NULL;
    CHECK_OK(st_ingest_new(b, state, "job", NULL, &g));
    int fd = open(path, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    CHECK_OK(st_ingest_file(g, fd, "ckpt/model.bin", &st, 0));
    close(fd);
    CHECK_OK(st_ingest_finish(g, m));
    *stats = *st_ingest_get_stats(g);
    st_ingest_free(g);
    m->step = 1;
    m->node = strdup("node");
    m->job = strdup("job");
}

static void test_sparse_roundtrip(void)
{
    char src[300], seq[300], par[300], db[300];
    snprintf(src, sizeof src, "%s/sparse.bin", root);
    snprintf(seq, sizeof seq, "%s/restored-seq.bin", root);
    snprintf(par, sizeof par, "%s/restored-par.bin", root);
    snprintf(db, sizeof db, "%s/state.db", root);
    make_sparse(src);
    CHECK(allocated(src) < 8 * MIB); /* the file system keeps holes: else the test proves nothing */

    st_backend *b = NULL;
    st_backend_counts counts = {0};
    st_state *state = NULL;
    open_engine(db, &b, &counts, &state);

    st_manifest m = {0}, d = {0};
    st_ingest_stats stats;
    ingest_one(b, state, src, &m, &stats);
    CHECK(m.nfiles == 1);
    const st_file_entry *f = &m.files[0];
    size_t nholes = 0;
    uint64_t holes = hole_bytes_of(f, &nholes);
    printf("  ingest: %zu extents, %zu holes (%llu bytes), %llu new raw bytes, %llu PUTs\n",
           f->nchunks, nholes, (unsigned long long)holes, (unsigned long long)stats.new_raw_bytes,
           (unsigned long long)st_backend_counts_of(&counts, ST_REQ_PUT));
    CHECK(f->size == SPARSE_SIZE);
    CHECK(holes == stats.hole_bytes);
    /* Everything but the random data is a hole: the file's holes and the
     * written zeros (up to the chunks the data shares with them). */
    CHECK(holes >= SPARSE_SIZE - SPARSE_DATA - 2 * 2 * MIB);
    CHECK(stats.new_raw_bytes <= SPARSE_DATA + 2 * 2 * MIB);
    CHECK(stats.new_raw_bytes >= SPARSE_DATA);
    CHECK(st_backend_counts_of(&counts, ST_REQ_PUT) == 1); /* one pack */
    CHECK(nholes <= 8);                                    /* adjacent holes merged */

    /* The manifest is version 2 and round-trips. */
    st_bytes enc = {0};
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 2);
    CHECK_OK(st_manifest_decode(enc.data, enc.len, &d));
    CHECK(d.nfiles == 1 && d.files[0].nchunks == f->nchunks);

    /* Sequential restore into an empty file: sparse, identical, and GETs
     * only for the chunks. */
    st_restorer *r = NULL;
    CHECK_OK(st_restorer_new(b, "job", &r));
    uint64_t gets = st_backend_counts_of(&counts, ST_REQ_GET);
    int fd = open(seq, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    CHECK_OK(st_restore_file(r, &d, &d.files[0], fd));
    close(fd);
    uint64_t seq_gets = st_backend_counts_of(&counts, ST_REQ_GET) - gets;
    CHECK(files_equal(src, seq));
    CHECK(allocated(seq) < 8 * MIB);
    CHECK(seq_gets >= 1 && seq_gets <= 4);
    CHECK(st_restorer_stats(r)->hole_bytes == holes);
    CHECK(st_restorer_stats(r)->fetched_bytes < 4 * MIB);

    /* By chunk ranges into a file sized first (the parallel restore's way),
     * then the digest read back: holes are hashed, not read. */
    gets = st_backend_counts_of(&counts, ST_REQ_GET);
    fd = open(par, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)d.files[0].size) == 0);
    size_t half = d.files[0].nchunks / 2;
    CHECK_OK(st_restore_chunks(r, &d, &d.files[0], 0, half, fd));
    CHECK_OK(st_restore_chunks(r, &d, &d.files[0], half, d.files[0].nchunks - half, fd));
    CHECK_OK(st_restore_verify_file(fd, &d.files[0]));
    close(fd);
    CHECK(files_equal(src, par));
    CHECK(allocated(par) < 8 * MIB);
    CHECK(st_backend_counts_of(&counts, ST_REQ_GET) - gets <= 5);

    /* The same with the digest fed from memory, second half first and
     * nothing parked: the holes hash as zeros, only the second half's data
     * is read back (fewer bytes than its size: its holes are not read). */
    fd = open(par, O_RDWR | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)d.files[0].size) == 0);
    st_file_digest *dg = NULL;
    CHECK_OK(st_file_digest_new(&d.files[0], NULL, &dg));
    const st_restore_to to = {.digest = dg};
    uint64_t second = 0, second_holes = 0;
    for (size_t i = half; i < d.files[0].nchunks; i++) {
        second += d.files[0].chunks[i].raw_len;
        second_holes += st_chunk_is_hole(&d.files[0].chunks[i]) ? d.files[0].chunks[i].raw_len : 0;
    }
    CHECK_OK(st_restore_chunks_to(r, &d, &d.files[0], half, d.files[0].nchunks - half, fd, &to));
    CHECK_OK(st_restore_chunks_to(r, &d, &d.files[0], 0, half, fd, &to));
    CHECK_OK(st_file_digest_finish(dg, fd));
    CHECK(st_file_digest_stats_of(dg).read_back == second - second_holes);
    st_file_digest_free(dg);
    close(fd);
    CHECK(files_equal(src, par));

    /* Verify's way: a restore to /dev/null checks the digest, holes included. */
    fd = open("/dev/null", O_WRONLY);
    CHECK_OK(st_restore_file(r, &d, &d.files[0], fd));
    close(fd);

    /* A damaged hole length is caught by the digest, not restored as is. */
    for (size_t i = 0; i < d.files[0].nchunks; i++)
        if (st_chunk_is_hole(&d.files[0].chunks[i])) {
            d.files[0].chunks[i].raw_len--;
            d.files[0].size--;
            break;
        }
    fd = open("/dev/null", O_WRONLY);
    CHECK_ERR(st_restore_file(r, &d, &d.files[0], fd), ST_ERR_CORRUPT);
    close(fd);

    st_restorer_free(r);
    st_bytes_free(&enc);
    st_manifest_free(&d);
    st_manifest_free(&m);
    st_state_close(state);
    st_backend_close(b);
}

/* A file of written zeros (no holes on disk) is stored as holes too, and a
 * file without zeros still gets a version 1 manifest. */
static void test_written_zeros_and_dense(void)
{
    char zeros[300], dense[300], db[300];
    snprintf(zeros, sizeof zeros, "%s/zeros.bin", root);
    snprintf(dense, sizeof dense, "%s/dense.bin", root);
    snprintf(db, sizeof db, "%s/state2.db", root);
    size_t len = 5 * MIB + 123;
    uint8_t *buf = calloc(1, len);
    int fd = open(zeros, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
    close(fd);
    ut_rand_fill(buf, len, 5);
    fd = open(dense, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
    close(fd);
    free(buf);

    st_backend *b = NULL;
    st_backend_counts counts = {0};
    st_state *state = NULL;
    open_engine(db, &b, &counts, &state);
    st_manifest m = {0};
    st_ingest_stats stats;
    ingest_one(b, state, zeros, &m, &stats);
    size_t nholes = 0;
    CHECK(hole_bytes_of(&m.files[0], &nholes) == len && nholes == 1);
    CHECK(stats.new_raw_bytes == 0 &&
          st_backend_counts_of(&counts, ST_REQ_PUT) == 0); /* nothing stored at all */
    st_manifest_free(&m);

    ingest_one(b, state, dense, &m, &stats);
    CHECK(hole_bytes_of(&m.files[0], &nholes) == 0);
    st_bytes enc = {0};
    CHECK_OK(st_manifest_encode(&m, &enc));
    CHECK(enc.len > 8 && st_le16_get(enc.data + 4) == 1);
    st_bytes_free(&enc);
    st_manifest_free(&m);
    st_state_close(state);
    st_backend_close(b);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_sparse_roundtrip);
    RUN(test_written_zeros_and_dense);
    ut_rmtree(root);
    return ut_finish();
}
