/*
 * st_part — where a job's objects live in the store, and the part record
 * with which a node makes its part of a step durable (docs/PROTOCOL.md,
 * docs/CONSISTENCY.md).
 *
 * Key names:
 *   joblist/<job>
 *   jobs/<job>/packs/<hh>/<packid>.pack
 *   jobs/<job>/steps/<step:020>/nodes/<node>.r<revision>.manifest
 *   jobs/<job>/steps/<step:020>/nodes/<node>.commit        (the part record)
 *
 * Part record encoding (all integers varints unless said otherwise):
 *   magic "CKs2", version (LE u16: 2, or 3 with a lineage), flags (LE u16:
 *   bit 0 complete, bit 1 rank_coverage), step, created_ns, job (str),
 *   node (str), revision, manifest length, manifest digest (16 bytes),
 *   world_size, expected count + each path (str),
 *   commit count + each (rank, world_size);
 *   version 3 only: the lineage (16 bytes);
 *   XXH3-64 of everything above (LE u64).
 * A record with a zero lineage is written as version 2, which every build
 * reads; version 2 decodes to a zero lineage.
 * The decoder accepts any byte string and either returns a valid record or
 * ST_ERR_CORRUPT / ST_ERR_UNSUPPORTED.
 */
#ifndef ST_PART_H
#define ST_PART_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_wire.h"

/* The job registry: an empty object joblist/<job> per job, so the list of
 * jobs is one short listing, not a walk over every pack. */
#define ST_KEY_JOBLIST "joblist/"

#define ST_JOB_MAX        128
#define ST_NODE_MAX       128
#define ST_STEP_DIGITS    20
#define ST_STEP_MAX_NODES 65536

/*! 1 if name is a valid job or node name: 1..max bytes of [A-Za-z0-9._-],
 *  not starting with '.'. */
int st_name_is_valid(const char *name, size_t max);

/*! This host's name squeezed into a valid node name (invalid characters
 *  become '-'), or "node". out holds ST_NODE_MAX + 1 bytes. */
void st_default_node_name(char *out);

/* Each key builder writes a NUL-terminated key into out (cap bytes) and
 * returns ST_OK, or ST_ERR_INVALID for a bad name or a too-small buffer. */
st_err st_key_pack(char *out, size_t cap, const char *job, const st_id *pack);
/*! For a key jobs/<job>/packs/<hh>/<packid>.pack (as st_key_pack makes
 *  it) copies the job name into job (ST_JOB_MAX + 1 bytes), sets *pack and
 *  returns 1, else 0. */
int st_key_parse_pack(const char *key, char *job, st_id *pack);
st_err st_key_steps_prefix(char *out, size_t cap, const char *job);
st_err st_key_step_prefix(char *out, size_t cap, const char *job, uint64_t step);
/* A node that stores a step again (files added or changed after its part
 * was first made durable) writes its manifest under a new revision, then a
 * part record naming that revision: readers never pair a part record with a
 * manifest it does not describe. */
st_err st_key_manifest(char *out, size_t cap, const char *job, uint64_t step, const char *node,
                       uint32_t revision);
st_err st_key_part(char *out, size_t cap, const char *job, uint64_t step, const char *node);

/*!
 * Parses a key under jobs/<job>/steps/: sets *step and returns the rest
 * after "<step20>/" in *rest. ST_ERR_INVALID if the key is not of that shape.
 */
st_err st_key_parse_step(const char *key, const char *job, uint64_t *step, const char **rest);

/*! For a rest of "nodes/<node>.commit" (see st_key_parse_step) copies the
 *  node name into node (ST_NODE_MAX + 1 bytes) and returns 1, else 0. */
int st_key_parse_part(const char *rest, char *node);

/*! For a rest of "<dir><node>.r<revision><suffix>" (dir ends in '/')
 *  copies the node name into node (ST_NODE_MAX + 1 bytes), sets *revision
 *  and returns 1, else 0. */
int st_key_parse_node_rev(const char *rest, const char *dir, const char *suffix, char *node,
                          uint32_t *revision);

/*! For a rest of "nodes/<node>.r<revision>.manifest" copies the node name
 *  into node (ST_NODE_MAX + 1 bytes), sets *revision and returns 1, else 0. */
int st_key_parse_manifest(const char *rest, char *node, uint32_t *revision);

#define ST_PART_MAX_EXPECTED 65536
#define ST_PART_LINEAGE_LEN  16
#define ST_PART_MAX_COMMITS  65536

typedef struct st_rank_commit {
    uint32_t rank;
    uint32_t world_size;
} st_rank_commit;

/*! One node's part of a step (docs/CONSISTENCY.md). */
typedef struct st_part {
    uint64_t step;
    int64_t created_ns;
    char job[ST_JOB_MAX + 1];
    char node[ST_NODE_MAX + 1];
    uint32_t revision;
    /* Random, chosen when the node first publishes its part of the step and
     * kept by every publish of it again; all zero in a record of a build
     * before lineages (docs/ENCRYPTION.md, "Replay"). */
    uint8_t lineage[ST_PART_LINEAGE_LEN];
    uint64_t manifest_len;
    st_id manifest_digest;
    int complete;        /* this node saw the step complete */
    int rank_coverage;   /* a layout where every rank writes */
    uint32_t world_size; /* 0: unknown */
    size_t nexpected;
    char **expected; /* paths that must be in the step (malloc'd) */
    size_t ncommits;
    st_rank_commit *commits; /* explicit per-rank commits (malloc'd) */
} st_part;

st_err st_part_encode(const st_part *p, st_bytes *out);
/*! On success *p owns its arrays (st_part_free); on failure *p is empty. */
st_err st_part_decode(const uint8_t *buf, size_t len, st_part *p);
void st_part_free(st_part *p);

/*! 1 if p's lineage is all zero (a record of a build before lineages, or
 *  one not chosen yet). */
int st_part_lineage_is_zero(const st_part *p);

/*! Gives p a new random lineage (libcrypto's RAND_bytes): a part published
 *  for the first time, or whose record has none. ST_OK or ST_ERR_IO. */
st_err st_part_new_lineage(st_part *p);

/*!
 * 1 if part a's version of a path wins over part b's when both parts of one
 * step hold that path (docs/CONSISTENCY.md, "One version per path"): the
 * larger revision, then the larger node name (strcmp). 0 if b wins or a is b.
 */
int st_part_supersedes(const st_part *a, const st_part *b);

#endif
