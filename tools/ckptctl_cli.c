/*
 * ckptctl_cli — what the ckptctl verbs share, below them: store errors as
 * exit codes and messages, the checks of a verb's arguments, sizes for
 * people, and the --json document (built with json-c, printed here).
 *
 * Calls only the store's error text (ckptstore.h), json-c and libc: never a
 * verb and never main, so every verb and main can call it
 * (tests/lint/check_cycles.py). Single-threaded.
 */
#include <math.h>
#include <stdio.h>

#include "ckptctl_cli.h"

int exit_for(st_err e)
{
    switch (e) {
    case ST_OK: return EXIT_OK;
    case ST_ERR_NOT_FOUND: return EXIT_NOT_FOUND;
    case ST_ERR_INVALID: return EXIT_USAGE;
    case ST_ERR_CORRUPT: return EXIT_CORRUPT;
    case ST_ERR_EXISTS: return EXIT_EXISTS;
    case ST_ERR_KEY: return EXIT_STORE; /* exit 3, as docs/ENCRYPTION.md says */
    default: return EXIT_STORE;
    }
}

int fail(st_err e)
{
    fprintf(stderr, "ckptctl: %s\n", st_errmsg()[0] ? st_errmsg() : st_strerror(e));
    return exit_for(e);
}

int need(const cli *c, int want_job, int want_step)
{
    if (want_job && !c->job) {
        fprintf(stderr, "ckptctl %s: no job: pass --job J or set CKPT_JOB\n", c->verb);
        return 0;
    }
    if (want_step && !c->have_step) {
        fprintf(stderr, "ckptctl %s: no step: pass --step N\n", c->verb);
        return 0;
    }
    return 1;
}

int no_positional(const cli *c)
{
    if (c->argc) {
        fprintf(stderr, "ckptctl %s: unexpected argument '%s'\n", c->verb, c->argv[0]);
        return 0;
    }
    return 1;
}

double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

int json_set(json_object *obj, const char *key, json_object *val)
{
    if (!obj || !val || json_object_object_add(obj, key, val)) {
        json_object_put(val);
        return -1;
    }
    return 0;
}

int json_set_u64s(json_object *obj, const json_u64 *fields, size_t n)
{
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= json_set(obj, fields[i].key, json_object_new_uint64(fields[i].value));
    return bad;
}

int json_set_str(json_object *obj, const char *key, const char *s)
{
    return s ? json_set(obj, key, json_object_new_string(s)) : json_set_null(obj, key);
}

int json_set_null(json_object *obj, const char *key)
{
    return obj && !json_object_object_add(obj, key, NULL) ? 0 : -1;
}

int json_set_num(json_object *obj, const char *key, double v)
{
    char text[64];
    if (!isfinite(v))
        return json_set_null(obj, key);
    snprintf(text, sizeof text, "%.3f", v); /* printed as written, not as %.17g */
    return json_set(obj, key, json_object_new_double_s(v, text));
}

int json_push(json_object *arr, json_object *val)
{
    if (!arr || !val || json_object_array_add(arr, val)) {
        json_object_put(val);
        return -1;
    }
    return 0;
}

int json_print(json_object *doc, int failed)
{
    /* Compact, '/' not escaped: the bytes ckptctl's own writer produced. */
    const char *text = failed || !doc
                           ? NULL
                           : json_object_to_json_string_ext(
                                 doc, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    int rc = EXIT_OK;
    if (text) {
        printf("%s\n", text);
    } else {
        fprintf(stderr, "ckptctl: out of memory\n");
        rc = EXIT_STORE;
    }
    json_object_put(doc);
    return rc;
}
