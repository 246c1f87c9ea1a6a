/*
 * fuzz_status — libFuzzer target for the reading of MOUNT/.ckptfs/status
 * (client/ckpt_mountctl.c), which libckpt's wait_durable and ckptctl parse
 * from whatever the file holds: ckpt_mountctl_status_parse(), the member
 * getters and ckpt_mountctl_step_state().
 *
 * Input: the status document itself (any bytes).
 *
 * Properties checked (abort on violation):
 *   - parse returns OK with a JSON object, or CORRUPT/NOMEM with no document
 *     and a message;
 *   - an accepted document, written back by json-c, parses again to an equal
 *     document (skipped when it holds a non-finite number, which JSON cannot
 *     write);
 *   - step_state finds, for each (job, step) the "steps" array holds, the
 *     state of the first element with that job and step, and "" for a step
 *     no element has;
 *   - the getters never return NULL, on any member of any object.
 * ASan/UBSan/LSan (linked in) catch overreads, UB and leaks.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "ckpt_mountctl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Calls the getters on every member of every object under v; returns 1 when
 * v holds a non-finite double. Depth is bounded by the parser's limit. */
static int walk(json_object *v)
{
    int nonfinite = 0;
    if (json_object_is_type(v, json_type_double))
        return !isfinite(json_object_get_double(v));
    if (json_object_is_type(v, json_type_array)) {
        for (size_t i = 0, n = json_object_array_length(v); i < n; i++)
            nonfinite |= walk(json_object_array_get_idx(v, i));
    } else if (json_object_is_type(v, json_type_object)) {
        json_object_object_foreach(v, key, member)
        {
            uint64_t u;
            json_object *named; /* not always member: a key with a \u0000 is cut short */
            if (!ckpt_mountctl_get_str(v, key) || !json_object_object_get_ex(v, key, &named))
                abort();
            if (!ckpt_mountctl_get_u64(v, key, &u) && !json_object_is_type(named, json_type_int))
                abort(); /* a step number that is no integer */
            nonfinite |= walk(member);
        }
    }
    return nonfinite;
}

static void check_reparse(json_object *doc)
{
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    size_t len;
    const char *text = json_object_to_json_string_length(doc, JSON_C_TO_STRING_PLAIN, &len);
    json_object *again;
    if (!text)
        return; /* out of memory */
    ckpt_mountctl_err e = ckpt_mountctl_status_parse(text, len, "reparse", &again, msg);
    if (e == CKPT_MOUNTCTL_ENOMEM)
        return;
    if (e || !json_object_equal(doc, again))
        abort();
    json_object_put(again);
}

/* The first element of steps with this job and step: what step_state must
 * report. */
static const char *first_state(json_object *steps, const char *job, uint64_t step)
{
    for (size_t i = 0, n = json_object_array_length(steps); i < n; i++) {
        json_object *el = json_object_array_get_idx(steps, i), *j;
        uint64_t s;
        if (json_object_object_get_ex(el, "job", &j) && json_object_is_type(j, json_type_string) &&
            !strcmp(json_object_get_string(j), job) &&
            (size_t)json_object_get_string_len(j) == strlen(job) &&
            !ckpt_mountctl_get_u64(el, "step", &s) && s == step)
            return ckpt_mountctl_get_str(el, "state");
    }
    return "";
}

static void check_steps(json_object *doc)
{
    char state[32], err[256];
    json_object *steps;
    int has = json_object_object_get_ex(doc, "steps", &steps) &&
              json_object_is_type(steps, json_type_array);
    if (ckpt_mountctl_step_state(doc, "job", 0, state, sizeof state, err, sizeof err) !=
        (has ? 0 : -1))
        abort();
    if (strncmp(err, ckpt_mountctl_get_str(doc, "last_error"), sizeof err - 1))
        abort();
    if (!has)
        return;
    for (size_t i = 0, n = json_object_array_length(steps); i < n && i < 16; i++) {
        json_object *el = json_object_array_get_idx(steps, i);
        const char *job = ckpt_mountctl_get_str(el, "job");
        uint64_t step;
        if (ckpt_mountctl_get_u64(el, "step", &step))
            continue;
        if (ckpt_mountctl_step_state(doc, job, step, state, sizeof state, err, sizeof err) ||
            strncmp(state, first_state(steps, job, step), sizeof state - 1))
            abort();
        /* A step number one past it names another step (or none). */
        if (step != UINT64_MAX &&
            (ckpt_mountctl_step_state(doc, job, step + 1, state, sizeof state, err, sizeof err) ||
             strncmp(state, first_state(steps, job, step + 1), sizeof state - 1)))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* An exact-size copy: any read past the input is an ASan report. */
    char *text = malloc(size ? size : 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    char msg[CKPT_MOUNTCTL_MSG_CAP];
    msg[0] = '\0';
    json_object *doc = (json_object *)1;
    ckpt_mountctl_err e = ckpt_mountctl_status_parse(text, size, "status", &doc, msg);
    if (e == CKPT_MOUNTCTL_OK) {
        if (!json_object_is_type(doc, json_type_object))
            abort();
        if (!walk(doc))
            check_reparse(doc);
        check_steps(doc);
        json_object_put(doc);
    } else if ((e != CKPT_MOUNTCTL_ECORRUPT && e != CKPT_MOUNTCTL_ENOMEM) || doc || !msg[0] ||
               !memchr(msg, '\0', sizeof msg)) {
        abort();
    }
    free(text);
    return 0;
}
