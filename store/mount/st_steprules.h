/*
 * st_steprules — which step a path belongs to, and which files complete a step.
 * Pure functions over strings and small buffers; no I/O. The rules are
 * written down for users in docs/STEPS.md.
 *
 * Paths are relative to the job directory ("step-000100/model.pt",
 * "ckpt-000100.pt", "global_step100/mp_rank_00_model_states.pt", "latest").
 *
 * Step by path: the first path component, from the job root down, made of a
 * known word (step, global_step, iter, checkpoint, ckpt, epoch; ASCII case
 * insensitive), an optional separator ('-' or '_') and a decimal number:
 * "step-000100/", "step_100/", "global_step100/", "iter_0000100/",
 * "checkpoint-500/". A directory component must be exactly that; a final
 * component (a file) may carry an extension after the number:
 * "ckpt-000100.pt", "epoch_3.safetensors" (a "flat" or single-file step).
 * A user pattern (--step-pattern, POSIX extended regex with one capture group
 * for the number, matched against each component) replaces the built-in rule.
 *
 * Completion markers: files that frameworks write last for a step, which
 * make the step complete once closed:
 *   <step dir>/.metadata                     PyTorch DCP (rank 0, after all shards)
 *   <step dir>/trainer_state.json            HF Trainer
 *   <step dir>/.ckpt-complete                explicit marker (any framework)
 *   latest                                   DeepSpeed: content names the step dir
 *                                            ("global_step100")
 *   latest_checkpointed_iteration.txt        Megatron: content is the iteration
 *                                            number ("100", or "release")
 * A marker outside a step directory (latest, latest_checkpointed_iteration.txt)
 * belongs to the step its content names; its content is read when it is closed.
 *
 * Threads: rules are immutable after creation and may be shared.
 */
#ifndef ST_STEPRULES_H
#define ST_STEPRULES_H

#include <stddef.h>
#include <stdint.h>

#include "st_error.h"

typedef struct st_steprules st_steprules;

/*!
 * Creates the rules. pattern NULL means the built-in rule; otherwise a POSIX
 * extended regex with exactly one capture group for the number, which must
 * match a whole path component (anchors implied). ST_ERR_INVALID with a
 * message for a bad pattern. Free with st_steprules_free().
 */
st_err st_steprules_new(const char *pattern, st_steprules **out);
void st_steprules_free(st_steprules *r);

typedef struct st_step_match {
    int matched;       /* 0: the path belongs to no step by its name */
    uint64_t step;     /* the step number when matched */
    size_t prefix_len; /* bytes of path up to and including the step component */
    int single_file;   /* the step component is the path's final component */
} st_step_match;

/*! Finds the step a path belongs to by its name. Never fails: a path with no
 *  step component, or a number that does not fit in 63 bits, gives matched 0. */
void st_steprules_match(const st_steprules *r, const char *path, st_step_match *m);

/*!
 * 1 if a directory component of path is the temporary name of a step
 * directory, "tmp-" followed by a step directory component
 * ("tmp-checkpoint-500/pytorch_model.bin": HF Trainer writes there, then
 * renames the directory to "checkpoint-500"); *step (may be NULL) gets that
 * step. Such files belong to no step until renamed, and rule R6 never gives
 * them to another one (docs/STEPS.md §3). 0 otherwise.
 */
int st_steprules_in_temp_dir(const st_steprules *r, const char *path, uint64_t *step);

typedef enum st_marker_kind {
    ST_MARKER_NONE = 0,
    ST_MARKER_IN_STEP = 1,   /* inside a step dir: completes that step */
    ST_MARKER_NAMES_STEP = 2 /* outside: its content names the step it completes */
} st_marker_kind;

/*! Whether path is a completion marker, and of which kind (by name only). */
st_marker_kind st_steprules_marker_kind(const st_steprules *r, const char *path);

/*!
 * For an ST_MARKER_NAMES_STEP file: the step its content names. content is
 * the file's bytes (the caller reads at most 4096). Returns ST_OK and *step,
 * or ST_ERR_NOT_FOUND when the content names no step (e.g. Megatron's
 * "release", garbage, empty).
 */
st_err st_steprules_marker_step(const st_steprules *r, const char *path, const uint8_t *content,
                                size_t len, uint64_t *step);

#endif
