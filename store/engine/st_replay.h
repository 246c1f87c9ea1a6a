/*
 * st_replay — refusing a replayed (rolled-back) part record
 * (docs/ENCRYPTION.md, "Replay"): a backend wrapper that judges every part
 * record it GETs or PUTs against what this node's local state remembers of
 * that part (st_state's parts_seen: the current lineage, the highest
 * revision seen of it, the last lineages replaced), refuses one that goes
 * back, and remembers one that goes forward. Everything else passes
 * through. It sits above the envelope, so it sees plaintext, and applies
 * whether the store is encrypted or not.
 *
 * Threads: ops run concurrently like the inner ones; the wrapper's own
 * database connection is used under a mutex, and a row is moved forward in
 * a transaction that reads it again, so two processes sharing the database
 * never move it back.
 */
#ifndef ST_REPLAY_H
#define ST_REPLAY_H

#include "backend/st_backend.h"
#include "engine/st_state.h"
#include "format/st_part.h"
#include "st_error.h"

/*!
 * The rule, pure: judges part record p, read or written under key (for the
 * message), against known (NULL: the part was never seen). ST_OK and
 * *next, what is known once p is accepted (*changed: 1 when it differs from
 * known, so it must be remembered); ST_ERR_CORRUPT naming key and both
 * revisions when p has known's lineage and a lower revision, or a lineage
 * known lists as replaced.
 */
st_err st_replay_judge(const st_part_seen *known, const st_part *p, const char *key,
                       st_part_seen *next, int *changed);

/*!
 * Judges p (read or about to be written under key) against the part's row
 * in s and moves the row forward when p is accepted. ST_OK, ST_ERR_CORRUPT
 * as st_replay_judge, or the database's error.
 */
st_err st_replay_check(st_state *s, const char *key, const st_part *p);

/*!
 * Replaces *b by a wrapper that judges part records against the local
 * state database at state_path (opened here: its own connection) and owns
 * the old *b (closed with it). On failure *b is left as it was.
 */
st_err st_replay_wrap(st_backend **b, const char *state_path);

/*! As st_replay_wrap, but *out does not own inner: closing *out leaves
 *  inner open (a backend the caller lent). */
st_err st_replay_borrow(st_backend *inner, const char *state_path, st_backend **out);

#endif
