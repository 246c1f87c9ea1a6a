/*
 * test_ingest_tiny — tiny chunks are stored again where the file's other
 * bytes go, never referenced where they were first stored (st_ingest.c,
 * emit_chunk; ST_INGEST_DEDUP_MIN).
 *
 * Why: format-aware cuts make tiny chunks (a DCP shard: each tensor's
 * record headers, the same in every rank's file), and referencing them
 * where they first went sent each file's restore back and forth between
 * packs: a 4-rank 256 MiB DCP step took ~3,500 GETs to restore.
 *
 * How: two safetensors files (the chunker cuts at every tensor) whose
 * tensors alternate 200 KiB of random bytes (their own per file) and 200
 * bytes of one fixed pattern (the same everywhere), ingested in one ingest.
 * Each file's chunks must then lie in its packs in file order, back to
 * back: no reference goes back.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "engine/st_ingest.h"
#include "engine/st_state.h"
#include "st_backend_mem.h"
#include "ut.h"

#define NT    24 /* tensors per file: even ones big, odd ones tiny */
#define BIG   (200u << 10)
#define SMALL 200u

static char root[] = "/tmp/ckpt-ingest-tiny-XXXXXX";

/* Writes a safetensors file of NT U8 tensors to path; big tensors get
 * random bytes from seed, tiny ones the fixed pattern. */
static void write_safetensors(const char *path, uint64_t seed)
{
    char json[8192];
    size_t n = 0, off = 0;
    n += (size_t)snprintf(json + n, sizeof json - n, "{");
    for (int i = 0; i < NT; i++) {
        size_t len = i % 2 ? SMALL : BIG;
        n += (size_t)snprintf(json + n, sizeof json - n,
                              "%s\"t%02d\":{\"dtype\":\"U8\",\"shape\":[%zu],"
                              "\"data_offsets\":[%zu,%zu]}",
                              i ? "," : "", i, len, off, off + len);
        off += len;
    }
    n += (size_t)snprintf(json + n, sizeof json - n, "}");
    while (n % 8)
        json[n++] = ' ';
    size_t total = 8 + n + off;
    uint8_t *buf = malloc(total);
    CHECK(buf != NULL);
    if (!buf)
        return;
    for (int k = 0; k < 8; k++)
        buf[k] = (uint8_t)((uint64_t)n >> (8 * k));
    memcpy(buf + 8, json, n);
    uint8_t *p = buf + 8 + n;
    for (int i = 0; i < NT; i++) {
        if (i % 2) {
            memset(p, 0x5A, SMALL);
            p += SMALL;
        } else {
            ut_rand_fill(p, BIG, seed + (uint64_t)i);
            p += BIG;
        }
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0 && write(fd, buf, total) == (ssize_t)total);
    close(fd);
    free(buf);
}

static void ingest_path(st_ingest *g, const char *path, const char *rel)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    CHECK(fd >= 0 && fstat(fd, &st) == 0);
    CHECK_OK(st_ingest_file(g, fd, rel, &st, -1));
    close(fd);
}

/* 1 if f's chunks lie back to back in file order within each pack, from
 * its second on (its first, the header, may be where an identical header
 * already is). */
static int in_file_order(const st_file_entry *f, size_t *tiny)
{
    *tiny = 0;
    for (size_t i = 0; i < f->nchunks; i++)
        *tiny += f->chunks[i].raw_len < ST_INGEST_DEDUP_MIN;
    for (size_t i = 2; i < f->nchunks; i++) {
        if (f->chunks[i].pack == f->chunks[i - 1].pack &&
            f->chunks[i].offset != f->chunks[i - 1].offset + f->chunks[i - 1].stored_len) {
            fprintf(stderr, "%s: chunk %zu at %llu, the one before ends at %llu\n", f->path, i,
                    (unsigned long long)f->chunks[i].offset,
                    (unsigned long long)(f->chunks[i - 1].offset + f->chunks[i - 1].stored_len));
            return 0;
        }
    }
    return 1;
}

static void test_tiny_chunks_stored_in_file_order(void)
{
    char a[300], b[300], db[300];
    snprintf(a, sizeof a, "%s/a.safetensors", root);
    snprintf(b, sizeof b, "%s/b.safetensors", root);
    snprintf(db, sizeof db, "%s/state.db", root);
    write_safetensors(a, 100);
    write_safetensors(b, 200);
    st_backend *store = NULL;
    st_state *state = NULL;
    st_ingest *g = NULL;
    st_manifest m = {0};
    CHECK_OK(st_backend_mem_open(&store));
    CHECK_OK(st_state_open(db, &state));
    CHECK_OK(st_ingest_new(store, state, "job", NULL, &g));
    if (!g)
        return;
    ingest_path(g, a, "a.safetensors");
    ingest_path(g, b, "b.safetensors");
    CHECK_OK(st_ingest_finish(g, &m));
    CHECK(m.nfiles == 2);
    for (size_t i = 0; i < m.nfiles; i++) {
        size_t tiny = 0;
        CHECK(in_file_order(&m.files[i], &tiny));
        CHECK(tiny >= NT / 2); /* the cuts did make the tiny chunks */
    }
    st_manifest_free(&m);
    st_ingest_free(g);
    st_state_close(state);
    st_backend_close(store);
}

int main(void)
{
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(test_tiny_chunks_stored_in_file_order);
    ut_rmtree(root);
    return ut_finish();
}
