/*
 * st_step — where a job's objects live in the store, and the commit record
 * that makes a step durable (docs/PROTOCOL.md).
 *
 * Key names:
 *   jobs/<job>/packs/<hh>/<packid>.pack
 *   jobs/<job>/steps/<step:020>/nodes/<node>.r<revision>.manifest
 *   jobs/<job>/steps/<step:020>/commit
 *
 * Commit record encoding:
 *   magic "CKs1", version (LE u16 = 1), flags (LE u16 = 0),
 *   step (varint), created_ns (varint, ns since the epoch), job (str),
 *   node count (varint), per node: name (str), revision (varint),
 *   manifest length (varint), manifest digest (16 bytes, XXH3-128 of the
 *   manifest object);
 *   XXH3-64 of everything above (LE u64).
 * The decoder accepts any byte string and either returns a valid record or
 * ST_ERR_CORRUPT / ST_ERR_UNSUPPORTED.
 */
#ifndef ST_STEP_H
#define ST_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"
#include "st_hash.h"
#include "st_wire.h"

/* The job registry: an empty object joblist/<job> per job, so the list of
 * jobs is one short listing, not a walk over every pack. */
#define ST_KEY_JOBLIST "joblist/"

#define ST_JOB_MAX 128
#define ST_NODE_MAX 128
#define ST_STEP_DIGITS 20
#define ST_STEP_MAX_NODES 65536

/*! 1 if name is a valid job or node name: 1..max bytes of [A-Za-z0-9._-],
 *  not starting with '.'. */
int st_name_is_valid(const char *name, size_t max);

/* Each key builder writes a NUL-terminated key into out (cap bytes) and
 * returns ST_OK, or ST_ERR_INVALID for a bad name or a too-small buffer. */
st_err st_key_pack(char *out, size_t cap, const char *job, const st_id *pack);
st_err st_key_steps_prefix(char *out, size_t cap, const char *job);
st_err st_key_step_prefix(char *out, size_t cap, const char *job, uint64_t step);
/* A node that stores a step again (files added or changed after the step was
 * first made durable) writes its manifest under a new revision, then a commit
 * record naming that revision: readers never pair a commit with a manifest it
 * does not describe. */
st_err st_key_manifest(char *out, size_t cap, const char *job, uint64_t step, const char *node,
                       uint32_t revision);
st_err st_key_commit(char *out, size_t cap, const char *job, uint64_t step);

/*!
 * Parses a key under jobs/<job>/steps/: sets *step and returns the rest
 * after "<step20>/" in *rest. ST_ERR_INVALID if the key is not of that shape.
 */
st_err st_key_parse_step(const char *key, const char *job, uint64_t *step, const char **rest);

typedef struct st_commit_node {
    char name[ST_NODE_MAX + 1];
    uint32_t revision;
    uint64_t manifest_len;
    st_id manifest_digest;
} st_commit_node;

typedef struct st_commit {
    uint64_t step;
    int64_t created_ns;
    char job[ST_JOB_MAX + 1];
    size_t nnodes;
    st_commit_node *nodes; /* malloc'd; st_commit_free() */
} st_commit;

st_err st_commit_encode(const st_commit *c, st_bytes *out);
/*! On success *c owns nodes (st_commit_free); on failure *c is empty. */
st_err st_commit_decode(const uint8_t *buf, size_t len, st_commit *c);
void st_commit_free(st_commit *c);

#endif
