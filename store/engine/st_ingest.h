/*
 * st_ingest — turns files into stored chunks and a manifest's file entries.
 *
 * For each file: chunk (st_chunker) → id (XXH3-128) → dedup (the chunks of
 * the open pack, then the persistent index in st_state) → encode (st_codec)
 * into the open pack → PUT the pack once it reaches ST_PACK_TARGET_SIZE, and
 * only then record its chunks in the index. A chunk the index places in a
 * pack GC retired (docs/GC.md) is stored again, into a pack of its own
 * stream. The result is a list of file
 * entries whose chunk references all name packs that are stored — once
 * st_ingest_finish() has returned, which PUTs the last partial pack.
 *
 * A file of 1 byte to ST_INGEST_DEDUP_MIN - 1 that is not all zeros is not
 * chunked on its own: its bytes go into the open bundle, one chunk of many
 * small files stored like any chunk, and the file's one extent is a slice
 * of it (docs/FORMATS.md, version 3; docs/CHUNKING.md, "Small files in
 * bundles").
 *
 * Memory is bounded whatever the input size: one read buffer, one chunk
 * buffer (the chunker's max size), one bundle buffer (64 KiB), one codec
 * scratch, and the pack buffers
 * (one being filled per stream, up to `parallel` being PUT by upload
 * threads), and the seal jobs: at most 8 chunks in flight, each with a raw
 * copy and an encode buffer, and a codec scratch per seal thread.
 *
 * Threads: an st_ingest belongs to one thread; it runs its own upload
 * threads, which only PUT finished packs, and its own seal threads, which
 * only encode new chunks (st_ingest_set_seal_threads).
 */
#ifndef ST_INGEST_H
#define ST_INGEST_H

#include <stdint.h>
#include <sys/stat.h>

#include "backend/st_backend.h"
#include "format/st_chunker.h"
#include "st_error.h"
#include "engine/st_catalog.h"
#include "format/st_manifest.h"
#include "engine/st_state.h"

/* Chunks shorter than this are deduplicated only where they continue their
 * file (as its first chunk, right after its previous one, or in its
 * previous one's pack), else stored again beside it: a GET per far tiny
 * chunk costs more than its bytes (st_ingest.c, emit_chunk;
 * docs/CHUNKING.md, "Tiny chunks and where they are stored"). */
#define ST_INGEST_DEDUP_MIN 4096

/* A bundle ends after a file once it holds at least this many bytes and the
 * low bits ST_INGEST_BUNDLE_CUT_MASK of that file's XXH3-64 are zero, and
 * before a file that would take it past ST_MANIFEST_MAX_BUNDLE. Six bits:
 * a cut candidate every ~64 files, sparse enough that a file added or
 * changed moves no cut after its own bundle (denser candidates re-cut the
 * bundles that follow; docs/CHUNKING.md, "Small files in bundles"). */
#define ST_INGEST_BUNDLE_MIN      (16u << 10)
#define ST_INGEST_BUNDLE_CUT_MASK 63u

typedef struct st_ingest_stats {
    uint64_t files;
    uint64_t logical_bytes;     /* bytes of all files ingested */
    uint64_t chunks;            /* chunk references produced */
    uint64_t new_chunks;        /* chunks that had to be stored */
    uint64_t new_raw_bytes;     /* raw bytes of those */
    uint64_t stored_bytes;      /* bytes of packs PUT */
    uint64_t packs;             /* pack PUTs */
    uint64_t rehomed_chunks;    /* of new_chunks: stored again because GC retired their pack */
    uint64_t rehomed_raw_bytes; /* raw bytes of those */
    uint64_t hole_bytes;        /* bytes recorded as hole extents: the file's holes and
                                   all-zero chunks (no chunk stored) */
    uint64_t bundles;           /* bundles closed (each one chunk reference of its files;
                                   stored, and counted in new_chunks, unless deduplicated) */
    uint64_t bundled_files;     /* files put in those bundles (one slice each) */
    uint64_t seal_encodes_here; /* chunks a seal thread encoded by a hint that was not the
                                   plan's, encoded again on the ingest thread */
} st_ingest_stats;

typedef struct st_ingest st_ingest;

/*!
 * Starts an ingest for `job`. backend and state are borrowed and must outlive
 * the ingest. chunker params NULL means the defaults.
 */
st_err st_ingest_new(st_backend *backend, st_state *state, const char *job,
                     const st_chunker_params *chunker, st_ingest **out);

/*!
 * How many pack PUTs may be in flight at once (1..32, default 4); memory is
 * (n + 1) pack buffers, one more while the ingest also re-homes chunks of a
 * pack GC retired. Only before the first file is ingested.
 */
void st_ingest_set_parallel(st_ingest *g, unsigned n);

/*!
 * Seals what the ingest writes under kr's sealing key (docs/ENCRYPTION.md):
 * its packs (CKp2) and, in its manifest (version 4), every pack's key id
 * and salt. kr is borrowed and must outlive the ingest; NULL (the default)
 * writes plain packs. Only before the first file is ingested.
 */
void st_ingest_set_keyring(st_ingest *g, const struct st_keyring *kr);

/*!
 * How many threads encode new chunks (1..8; default st_ingest_default_seal_threads()).
 * 1 encodes on the ingest thread. Whatever n, the packs, the manifest and every reference
 * are byte for byte the same (st_ingest.c, "Seal threads"). The threads inherit the
 * calling thread's priority. Only before the first new chunk.
 */
void st_ingest_set_seal_threads(st_ingest *g, unsigned n);

/*! The default number of seal threads: the online CPUs less one, at least 1
 *  and at most 8 (docs/BENCHMARKS.md, "Seal threads"). */
unsigned st_ingest_default_seal_threads(void);

/*!
 * 1: new chunks are stored with the LZ4 codecs only (0-3, docs/CODEC.md:
 * less CPU per byte to encode and to decode, more bytes stored); 0, the
 * default: every codec, zstd per byte plane where it wins. Only before the
 * first new chunk. What was stored before reads the same either way.
 */
void st_ingest_set_lz4_only(st_ingest *g, int lz4_only);

/*!
 * The compression option's value (`--compression`, st_store_options and
 * st_vfs_options .compression): "auto" or NULL (0) or "lz4" (1) into
 * *lz4_only, for st_ingest_set_lz4_only; anything else is ST_ERR_INVALID
 * naming the value.
 */
st_err st_ingest_compression(const char *name, int *lz4_only);

#ifdef CKPT_TEST_HOOKS
/* Test hook: the encode of the ingest's new chunk number n (from 0) fails
 * with ST_ERR_IO; -1 (the default) for none. */
extern long st_ingest_test_seal_fail_at;
#endif

/*!
 * Reads fd from its offset to its end and appends a file entry for relpath
 * (a clean path) with st's mode and mtime and `rank` (-1 unknown). The file
 * must not change while it is read: its size and digest are what was read.
 * The file's holes (SEEK_DATA/SEEK_HOLE) are not read, and they and chunks
 * of zeros become hole extents. A seekable fd is read with pread (its
 * offset stays where it was), a pipe with read. Whether the file is small
 * (bundled) is decided from the bytes read, never from st->st_size.
 * Add files in tree order (st_path_cmp) where that is cheap: a bundle
 * deduplicates against the previous step only if its small files come
 * in the same order, and it spares st_ingest_finish a sort.
 */
st_err st_ingest_file(st_ingest *g, int fd, const char *relpath, const struct stat *st,
                      int32_t rank);

/*!
 * Appends a file entry that is already in the store — f of manifest src —
 * under relpath (its current name), without reading any data: its chunk
 * references are re-pointed into this manifest's pack table. Used when a
 * step is published again and some of its files did not change. A slice
 * is copied as it is (its bundle stays whole in the store); a file of one
 * whole chunk whose digest src did not store gets that chunk's id, which
 * is its digest, so that a manifest without slices can store it.
 */
st_err st_ingest_add_stored(st_ingest *g, const st_manifest *src, const st_file_entry *f,
                            const char *relpath);

/*!
 * Stores the open bundle and the last open pack and moves the file entries
 * and pack table into m (whose other fields the caller fills: step, node,
 * job, created_ns). When a file is a slice, the files are sorted in tree
 * order (st_path_cmp), which version 3 requires; else they stay in the
 * order they were added.
 * After ST_OK every chunk m references is in the store. The ingest can then
 * only give its last look and be freed; m must outlive the publish.
 */
st_err st_ingest_finish(st_ingest *g, st_manifest *m);

/*!
 * The writer's last look at every pack of the finished manifest (docs/GC.md,
 * "Writers"), as a check for st_catalog_publish, which runs it in its first
 * round: every publish of an ingest's manifest must pass it. A pack pending
 * GC or gone fails it with ST_ERR_TRANSIENT ("not publishing: ...") and is
 * forgotten by the index, so the retry stores its chunks again.
 */
st_publish_check st_ingest_last_look(st_ingest *g);

const st_ingest_stats *st_ingest_get_stats(const st_ingest *g);

void st_ingest_free(st_ingest *g);

#endif
