/*
 * st_restore — rebuilds files from a manifest: ranged GETs of pack regions,
 * decode and verify every chunk, verify the whole-file digest (a file
 * without one, digest_absent, is authenticated by its chunk ids alone).
 *
 * A slice (a small file in a bundle) is its file's only extent: its bundle
 * chunk is fetched whole, decoded, checked against its id and bundle_len,
 * and kept in a bundle cache (st_bundlecache.h) so that the next files of
 * that bundle cost no GET; the file takes raw_len bytes from skip.
 *
 * Adjacent chunks of one pack (the common case: a file's new chunks are
 * written to a pack in order) are fetched with a single ranged GET, streamed
 * and decoded as it arrives, of up to ST_RESTORE_MAX_STREAM bytes (a whole
 * pack), so a restore costs about one GET per pack rather than one per
 * chunk. Chunks of one pack that are not adjacent in
 * the file's order (deduplicated repeats, reordered or nearby chunks, as in
 * a DCP shard) share that GET too when they lie inside its window or widen
 * it by at most ST_RESTORE_GAP_MAX unneeded bytes, which are dropped, or
 * when a run of them needs at least a quarter of the window it spans. A run
 * of chunks that alternates between packs (an incremental step: new chunks
 * in this save's pack, reused ones in an earlier save's) keeps one such
 * window per pack, up to ST_RESTORE_RUN_PACKS packs and ST_RESTORE_MAX_GET
 * bytes in all, and writes the run's chunks in file order once its windows
 * have arrived.
 *
 * Threads: an st_restorer belongs to one thread; its buffers are reused
 * across files so steady-state restore does not allocate.
 */
#ifndef ST_RESTORE_H
#define ST_RESTORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "backend/st_backend.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "engine/st_bundlecache.h"
#include "engine/st_side.h"
#include "format/st_manifest.h"

#define ST_RESTORE_MAX_GET (16u << 20)
/* A run that is streamed (one window, in pack order, no hole: decoded as
 * its bytes arrive, so no window is held) may read this much in one GET:
 * in practice a whole pack (ST_PACK_TARGET_SIZE, 24 MiB, plus a chunk). */
#define ST_RESTORE_MAX_STREAM (64u << 20)
/* Unneeded bytes of a pack one GET may read through to reach the next
 * needed chunk (a gap between deduplicated or reordered chunks): ~1 MiB
 * costs less than a request's round trip on S3. */
#define ST_RESTORE_GAP_MAX (1u << 20)
/* A window wider than the greedy rule allows is read when at least
 * 1/ST_RESTORE_DENSITY of it is needed (st_restore.c, plan_run), looking
 * at most ST_RESTORE_LOOKAHEAD refs past the last run that was. */
#define ST_RESTORE_DENSITY   4u
#define ST_RESTORE_LOOKAHEAD 8192u
/* Packs one run of chunks may fetch from at once, one window each (an
 * incremental step alternates between two; a third covers a pack boundary). */
#define ST_RESTORE_RUN_PACKS 4u

/*
 * Where a piece of work over f's chunks (a restore's task, a mount's run)
 * of at most `limit` bytes, holding `held` bytes up to chunk `next`, may
 * end early: at a switch to another pack once it holds half its limit. A
 * file written in one go then costs one streamed GET per pack (~24 MiB)
 * instead of two wherever a piece straddled a pack boundary; a file whose
 * chunks alternate between packs (an incremental step) never holds half
 * its limit at a switch and is cut by size alone. Side chunks (st_side.h)
 * are no switch: the piece goes on in the pack around them.
 */
int st_restore_ends_at_pack(const st_file_entry *f, size_t next, uint64_t held, uint64_t limit);

typedef struct st_restorer st_restorer;

typedef struct st_restore_stats {
    uint64_t files;
    uint64_t bytes;      /* raw bytes restored, holes included */
    uint64_t hole_bytes; /* of those, in hole extents: not fetched, not written */
    uint64_t gets;       /* object GETs issued */
    uint64_t fetched_bytes;
    uint64_t buffered_runs; /* runs fetched whole into the window buffer, then decoded */
} st_restore_stats;

/*! backend is borrowed and must outlive the restorer. */
st_err st_restorer_new(st_backend *backend, const char *job, st_restorer **out);

/*! Opens the chunks of sealed packs (a manifest of version 4) with kr,
 *  which must outlive r. Without it such a chunk is ST_ERR_KEY. */
void st_restorer_set_keyring(st_restorer *r, const struct st_keyring *kr);

/*!
 * Makes r take the bundles of slices (small files in a bundle, manifest
 * version 3) from `bundles`, shared with other restorers (borrowed: it
 * must outlive r); without it r keeps ST_BUNDLECACHE_PER_WORKER bundles of
 * its own. Files of one bundle are restored one after another, by one
 * restorer or several: a shared cache fetches each bundle once.
 */
void st_restorer_share_bundles(st_restorer *r, st_bundlecache *bundles);

/*!
 * Writes file f of manifest m to fd (from its current position, sequential
 * writes), verifying every chunk and then the file's digest. On
 * ST_ERR_CORRUPT the message names the file; what was written to fd must
 * then be discarded by the caller. A missing pack is ST_ERR_CORRUPT too
 * (damage, like a bad checksum), never ST_ERR_NOT_FOUND; likewise for
 * st_restore_chunks().
 *
 * A hole extent is neither fetched nor written: here fd is sought over it
 * (and sized with ftruncate if the file ends in one), so a regular fd must
 * start empty for the holes to read as zeros; st_restore_chunks() skips it,
 * its fd having been sized with ftruncate first. Either way the restored
 * file is sparse where the stored one was.
 */
st_err st_restore_file(st_restorer *r, const st_manifest *m, const st_file_entry *f, int fd);

/*
 * The whole-file digest of one file restored by several restorers at once
 * (st_restore_chunks_to), fed from the decoded bytes while they are in
 * memory instead of reading the file back afterwards. XXH3 needs the bytes
 * in file order: a piece that arrives at the hashing front is hashed at
 * once (then any parked pieces it joins); one that arrives ahead of the
 * front is copied ("parked") if the budget it was given allows, else only
 * noted, and read back from the file when the front reaches it (counted in
 * read_back). Holes hash as zeros without being read. Thread-safe: any
 * restorer of the file may feed it; one thread at a time hashes.
 */
typedef struct st_file_digest st_file_digest;

/* A parked copy's buffer, given back and kept for the next park. */
typedef struct st_park_spare {
    uint8_t *data;
    uint64_t cap;
} st_park_spare;

/*
 * Bytes parked by several digests together (a process's fetches, a
 * restore's files). used (atomic, so taking from the budget needs no shared
 * lock) counts the buffers of parked copies, in their capacity; max bounds
 * it. Buffers given back are kept for the next park while a digest of the
 * budget lives (spares + used <= max), and freed when the last one goes:
 * a fresh heap buffer is a page fault per 4 KiB on its first copy, because
 * glibc trims freed memory at the top of a thread's heap (docs/MEMORY.md),
 * and 3/4 of a large file's bytes are parked on their way to the digest.
 * Initialise with ST_PARK_BUDGET_INIT(max).
 */
typedef struct st_park_budget {
    _Atomic uint64_t used;
    uint64_t max;
    pthread_mutex_t lock; /* guards what follows */
    int users;            /* digests alive */
    st_park_spare *spares;
    size_t nspares, spares_cap;
    uint64_t spare_bytes;
    uint64_t fresh, reused; /* parks that allocated a buffer / took a spare */
} st_park_budget;

#define ST_PARK_BUDGET_INIT(bytes)                                                                 \
    {                                                                                              \
        .max = (bytes), .lock = PTHREAD_MUTEX_INITIALIZER                                          \
    }

/* The default budget: 4 restorers work on consecutive tasks of one file, a
 * pack's worth each (~24 MiB, st_store_read.c), so the 3 ahead of the front
 * may hold ~72 MiB; what does not fit is read back (measured: 0-18 MB of a
 * 519 MiB file). */
#define ST_RESTORE_PARK_MAX (64ull << 20)

typedef struct st_file_digest_stats {
    uint64_t hashed;    /* bytes added to the digest so far */
    uint64_t read_back; /* of those, read back from the file (not parked in time) */
} st_file_digest_stats;

/*! A digest for f (borrowed: must outlive it); budget may be NULL (nothing
 * is parked: every piece ahead of the front is read back). */
st_err st_file_digest_new(const st_file_entry *f, st_park_budget *budget, st_file_digest **out);

/*!
 * Once every chunk of f has been restored into fd through d: hashes what is
 * left (waiting for a hashing thread first), then checks the size and
 * digest: ST_ERR_CORRUPT if a byte was never offered or the digest differs
 * from f's. fd is read only for pieces that were not parked.
 */
st_err st_file_digest_finish(st_file_digest *d, int fd);

st_file_digest_stats st_file_digest_stats_of(st_file_digest *d);

/*! Frees d and returns its parked bytes to the budget; NULL is a no-op. */
void st_file_digest_free(st_file_digest *d);

/* Where st_restore_chunks_to() puts a range's chunks besides fd. */
typedef struct st_restore_to {
    /* Held for every pwrite to fd (NULL: none), a mutex shared by all
     * restorers writing into that fd. Why: the kernel takes a file's inode
     * lock exclusively for every buffered write, and its waiters spin on it
     * while the holder copies (rwsem optimistic spinning), burning a CPU per
     * waiting worker. Queueing on a mutex of ours instead puts them to sleep
     * and leaves the CPUs to the transfer, decoding and verification
     * (docs/BENCHMARKS.md, restore). */
    pthread_mutex_t *write_lock;
    /* Fed every chunk's verified bytes and every hole (NULL: none). */
    st_file_digest *digest;
    /* Called on the restoring thread after each chunk has been verified and
     * written (and each hole passed): file bytes [off, off + len) may be
     * served. NULL: not called. */
    void (*written)(void *arg, uint64_t off, uint64_t len);
    void *arg;
    /* The file's side chunks, shared by its restorers (NULL: none): they
     * are taken from there, and the runs around them streamed. */
    st_side_chunks *sides;
} st_restore_to;

/*!
 * Restores chunks [first, first + count) of f into fd with pwrite at their
 * offsets in the file, verifying each chunk (several restorers on several
 * threads can fill one file in parallel), as to says (NULL: just written).
 * The whole-file digest is then checked once, with to->digest's
 * st_file_digest_finish() or with st_restore_verify_file().
 */
st_err st_restore_chunks_to(st_restorer *r, const st_manifest *m, const st_file_entry *f,
                            size_t first, size_t count, int fd, const st_restore_to *to);

/*! st_restore_chunks_to() with to NULL. */
st_err st_restore_chunks(st_restorer *r, const st_manifest *m, const st_file_entry *f, size_t first,
                         size_t count, int fd);

/*! Reads fd back and checks f's size and whole-file digest. */
st_err st_restore_verify_file(int fd, const st_file_entry *f);

/* Called before each block st_restore_verify_file_paced() reads back; a
 * nonzero st_err stops the check with that error. It may block: that is how
 * a caller holds the read-back while others use the file or the machine. */
typedef st_err (*st_restore_pace)(void *arg);

/*! st_restore_verify_file() that asks pace(arg) before each block. */
st_err st_restore_verify_file_paced(int fd, const st_file_entry *f, st_restore_pace pace,
                                    void *arg);

/*!
 * The same check in steps, so that a file restored by several workers can be
 * verified while its later parts are still being fetched: reads bytes
 * [off, off + len) of fd back and adds them to digest (an initialised
 * st_hasher, fed consecutive ranges from 0 by one thread at a time).
 * ST_ERR_IO if fd is shorter. f names the file in messages.
 */
st_err st_restore_digest_range(int fd, const st_file_entry *f, st_hasher *digest, uint64_t off,
                               uint64_t len);

/*!
 * Checks that `hashed` (the bytes fed to digest) is f's size and that
 * digest equals f's whole-file digest (unless f->digest_absent: then its
 * chunk ids, checked as they were decoded, authenticated the bytes and the
 * size is all there is to check); ST_ERR_CORRUPT otherwise.
 */
st_err st_restore_digest_check(const st_hasher *digest, uint64_t hashed, const st_file_entry *f);

const st_restore_stats *st_restorer_stats(const st_restorer *r);
void st_restorer_free(st_restorer *r);

#endif
