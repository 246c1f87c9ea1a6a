/*
 * st_steps — which step a path belongs to, and which files complete a step
 * (contract: st_steps.h; rules for users and for the daemon: docs/STEPS.md).
 *
 * A path is walked component by component from the job root down; the first
 * component that is a step component decides the step. One component is
 * judged by match_component(), which has three answers:
 *
 *   COMP_NO    not a step component: keep walking;
 *   COMP_STEP  a step component with a number that fits in 63 bits;
 *   COMP_STOP  has the shape of a step component but its number does not fit
 *              in 63 bits: the walk stops and the path matches nothing, so a
 *              file inside "step-99999999999999999999/" is never credited to
 *              some deeper "step-5.pt" by accident.
 *
 * Built-in rule (no pattern): word [sep] digits, where word is one of
 * step_words (ASCII case-insensitive, compared from the component's first
 * byte, so "global_step100" can only match "global_step", never "step"),
 * sep is one '-' or '_', digits are one or more ASCII decimal digits (leading
 * zeros allowed). A directory component ends right after the digits; the
 * final component may go on with an extension: '.' and at least one more
 * byte ("ckpt-5.pt", "ckpt-5.pt.tmp"). Nothing else is accepted, so
 * "stepping", "step-", "step-1a", "checkpoints" and ".step-5" match nothing.
 * Before that rule, PyTorch Lightning's names (lightning_component): fields
 * "name=value" joined by '-', the step from the "step=" field, else from
 * the "epoch=" one ("epoch=3-step=400.ckpt", a file, or a directory of
 * that name when FSDP saves sharded).
 *
 * User rule (--step-pattern): the pattern is compiled twice: once alone, to
 * validate it and count its groups (exactly one), and once wrapped as
 * "^(" pattern ")$" to anchor it, where the user's group becomes group 2.
 * Back-references are refused because the wrap renumbers groups. Each
 * component, final or not, is matched whole; the group must capture one or
 * more digits only.
 *
 * Invariants:
 *   - The match functions do no allocation of their own: a component is
 *     copied into a stack buffer of NAME_MAX + 1 bytes for regexec() (longer
 *     components cannot be file names on Linux and never match a user
 *     pattern). glibc's regexec() may allocate internally; if that fails the
 *     component is treated as not matching.
 *   - Any byte string is accepted: embedded high bytes, control bytes, empty
 *     components ("a//b"), leading or trailing '/'. Nothing reads past the
 *     terminating NUL of a path or past len of marker content.
 *   - The functions judge names only; they do not validate paths ("..") —
 *     that is the caller's job.
 *
 * Threads: st_steprules is immutable after st_steprules_new() and may be
 * shared by any number of threads (POSIX regexec() is thread-safe on a
 * shared regex_t). Errors are reported through st_seterr() (thread-local).
 */
#include "mount/st_steprules.h"

#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest file name component on Linux (NAME_MAX); a user pattern is only
 * tried on components up to this length. */
#define STEP_COMPONENT_MAX 255
/* A pattern longer than this is surely a mistake (and a cost at every open). */
#define STEP_PATTERN_MAX 1024
/* Marker content the caller may pass; more is refused, not truncated. */
#define MARKER_CONTENT_MAX 4096

struct st_steprules {
    bool has_pattern;
    regex_t re; /* valid when has_pattern: "^(" pattern ")$", 2 groups */
};

typedef enum comp_result { COMP_NO, COMP_STEP, COMP_STOP } comp_result;

/* Longest first for readability; the words share no prefix, so at most one
 * can match at a component's start whatever the order. */
static const struct {
    const char *word;
    size_t len;
} step_words[] = {
    {"global_step", 11}, {"checkpoint", 10}, {"epoch", 5}, {"step", 4}, {"iter", 4}, {"ckpt", 4},
};

/* Markers written inside a step directory, last for their step. */
static const char *const in_step_markers[] = {".metadata", "trainer_state.json", ".ckpt-complete"};
#define MARKER_DEEPSPEED "latest"
#define MARKER_MEGATRON  "latest_checkpointed_iteration.txt"

static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Python's str.strip() set restricted to ASCII, as DeepSpeed and Megatron
 * strip their tracker files with it. */
static bool is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/*
 * Parses s[0..len) as a decimal number. Returns false unless len > 0 and
 * every byte is a digit; *overflow is set when the value exceeds 2^63-1
 * (the digits are still all checked, so the caller can tell "right shape,
 * too large" from "not a number").
 */
static bool parse_decimal(const char *s, size_t len, uint64_t *value, bool *overflow)
{
    uint64_t v = 0;
    *overflow = false;
    if (len == 0)
        return false;
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i]))
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            *overflow = true;
        else
            v = v * 10 + d;
    }
    *value = v;
    return true;
}

/* One Lightning field: name, digits, then nothing or '.' and more (the
 * extension of the last field). */
static comp_result lightning_field(const char *f, size_t len, const char *name, uint64_t *value)
{
    size_t i = strlen(name);
    if (len <= i || memcmp(f, name, i) != 0)
        return COMP_NO;
    size_t digits_at = i;
    while (i < len && is_digit(f[i]))
        i++;
    if (i == digits_at || (i != len && f[i] != '.'))
        return COMP_NO;
    bool overflow;
    parse_decimal(f + digits_at, i - digits_at, value, &overflow);
    return overflow ? COMP_STOP : COMP_STEP;
}

/* PyTorch Lightning's ModelCheckpoint names its files by the metrics in its
 * filename template, "name=value" fields joined by '-' (the default
 * "{epoch}-{step}" gives "epoch=3-step=400.ckpt"; with a monitored metric,
 * "epoch=3-step=400-val_loss=0.52.ckpt"; "-v1" after a clash). The step is
 * the "step=" field's number (a "step=" field that is not a number: no
 * step), or without one the "epoch=" field's. Hidden names are never steps,
 * as in the word rule. */
static comp_result lightning_component(const char *c, size_t len, uint64_t *step)
{
    comp_result epoch = COMP_NO;
    uint64_t epoch_value = 0;
    if (len == 0 || c[0] == '.')
        return COMP_NO;
    for (size_t at = 0; at < len;) {
        size_t end = at;
        while (end < len && c[end] != '-')
            end++;
        if (end - at >= 5 && memcmp(c + at, "step=", 5) == 0) /* the step field decides */
            return lightning_field(c + at, end - at, "step=", step);
        if (epoch == COMP_NO)
            epoch = lightning_field(c + at, end - at, "epoch=", &epoch_value);
        at = end + 1;
    }
    if (epoch == COMP_STEP)
        *step = epoch_value;
    return epoch;
}

static comp_result builtin_component(const char *c, size_t len, bool is_final, uint64_t *step)
{
    comp_result lightning = lightning_component(c, len, step);
    if (lightning != COMP_NO)
        return lightning;
    size_t i = 0;
    bool found = false;
    for (size_t w = 0; w < sizeof step_words / sizeof step_words[0] && !found; w++) {
        size_t wl = step_words[w].len;
        if (len < wl)
            continue;
        size_t k = 0;
        while (k < wl && ascii_lower(c[k]) == step_words[w].word[k])
            k++;
        if (k == wl) {
            found = true;
            i = wl;
        }
    }
    if (!found)
        return COMP_NO;
    if (i < len && (c[i] == '-' || c[i] == '_'))
        i++;
    size_t digits_at = i;
    while (i < len && is_digit(c[i]))
        i++;
    size_t ndigits = i - digits_at;
    if (ndigits == 0)
        return COMP_NO;
    /* What may follow the digits: nothing, or for a file ".ext" (non-empty). */
    if (i != len && !(is_final && c[i] == '.' && i + 1 < len))
        return COMP_NO;
    bool overflow;
    uint64_t v = 0;
    parse_decimal(c + digits_at, ndigits, &v, &overflow);
    if (overflow)
        return COMP_STOP;
    *step = v;
    return COMP_STEP;
}

static comp_result pattern_component(const st_steprules *r, const char *c, size_t len,
                                     uint64_t *step)
{
    char name[STEP_COMPONENT_MAX + 1];
    regmatch_t pm[3];
    /* A NUL would end the string regexec sees early and let a prefix match;
     * a '/' cannot be in a component (only marker content can carry one). */
    if (len == 0 || len > STEP_COMPONENT_MAX || memchr(c, '\0', len) || memchr(c, '/', len))
        return COMP_NO;
    memcpy(name, c, len);
    name[len] = '\0';
    if (regexec(&r->re, name, 3, pm, 0) != 0)
        return COMP_NO;
    if (pm[2].rm_so < 0 || pm[2].rm_eo < pm[2].rm_so)
        return COMP_NO; /* the group did not take part, e.g. "run([0-9]+)?" */
    bool overflow;
    uint64_t v = 0;
    if (!parse_decimal(name + pm[2].rm_so, (size_t)(pm[2].rm_eo - pm[2].rm_so), &v, &overflow))
        return COMP_NO;
    if (overflow)
        return COMP_STOP;
    *step = v;
    return COMP_STEP;
}

static comp_result match_component(const st_steprules *r, const char *c, size_t len, bool is_final,
                                   uint64_t *step)
{
    if (r->has_pattern)
        return pattern_component(r, c, len, step);
    return builtin_component(c, len, is_final, step);
}

/* Refuses "\1".."\9": the "^(...)$" wrap would make them point elsewhere. */
static bool has_backreference(const char *p)
{
    for (; *p; p++) {
        if (*p == '\\') {
            if (p[1] >= '1' && p[1] <= '9')
                return true;
            if (p[1] == '\0')
                return false;
            p++;
        }
    }
    return false;
}

st_err st_steprules_new(const char *pattern, st_steprules **out)
{
    st_err rc = ST_OK;
    st_steprules *r = NULL;
    char *wrapped = NULL;
    regex_t probe;
    bool probe_ok = false;
    int e;

    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_steprules_new: out is NULL");
    *out = NULL;
    r = calloc(1, sizeof *r);
    if (!r)
        return st_seterr(ST_ERR_NOMEM, "step rules: out of memory");
    if (!pattern)
        goto out;

    size_t plen = strlen(pattern);
    if (plen == 0 || plen > STEP_PATTERN_MAX) {
        rc = st_seterr(ST_ERR_INVALID, "step pattern: length %zu, must be 1..%d bytes", plen,
                       STEP_PATTERN_MAX);
        goto out;
    }
    if (has_backreference(pattern)) {
        rc = st_seterr(ST_ERR_INVALID, "step pattern \"%s\": back-references are not supported",
                       pattern);
        goto out;
    }
    /* Alone first: a pattern that is invalid on its own (say "a)(b") must not
     * become valid through the parentheses of the wrap. */
    e = regcomp(&probe, pattern, REG_EXTENDED);
    if (e != 0) {
        char why[128];
        regerror(e, &probe, why, sizeof why);
        rc = st_seterr(ST_ERR_INVALID, "step pattern \"%s\": %s", pattern, why);
        goto out;
    }
    probe_ok = true;
    if (probe.re_nsub != 1) {
        rc = st_seterr(ST_ERR_INVALID,
                       "step pattern \"%s\": has %zu capture groups, needs exactly one (the step "
                       "number), e.g. \"model_([0-9]+)\\.bin\"",
                       pattern, (size_t)probe.re_nsub);
        goto out;
    }
    wrapped = malloc(plen + 5);
    if (!wrapped) {
        rc = st_seterr(ST_ERR_NOMEM, "step rules: out of memory");
        goto out;
    }
    snprintf(wrapped, plen + 5, "^(%s)$", pattern);
    e = regcomp(&r->re, wrapped, REG_EXTENDED);
    if (e != 0) {
        char why[128];
        regerror(e, &r->re, why, sizeof why);
        rc = st_seterr(ST_ERR_INVALID, "step pattern \"%s\": %s", pattern, why);
        goto out;
    }
    r->has_pattern = true;
    if (r->re.re_nsub != 2) { /* cannot happen after the probe; keeps group 2 safe */
        rc = st_seterr(ST_ERR_INVALID, "step pattern \"%s\": unexpected group count", pattern);
        goto out;
    }
out:
    if (probe_ok)
        regfree(&probe);
    free(wrapped);
    if (rc != ST_OK) {
        st_steprules_free(r);
        return rc;
    }
    *out = r;
    return ST_OK;
}

void st_steprules_free(st_steprules *r)
{
    if (!r)
        return;
    if (r->has_pattern)
        regfree(&r->re);
    free(r);
}

void st_steprules_match(const st_steprules *r, const char *path, st_step_match *m)
{
    if (!m)
        return;
    memset(m, 0, sizeof *m);
    if (!r || !path)
        return;
    size_t start = 0;
    for (;;) {
        size_t end = start;
        while (path[end] != '\0' && path[end] != '/')
            end++;
        bool is_final = path[end] == '\0';
        if (end > start) { /* empty components ("a//b", "/a", "a/") are skipped */
            uint64_t step = 0;
            comp_result cr = match_component(r, path + start, end - start, is_final, &step);
            if (cr == COMP_STOP)
                return;
            if (cr == COMP_STEP) {
                m->matched = 1;
                m->step = step;
                m->prefix_len = end;
                m->single_file = is_final;
                return;
            }
        }
        if (is_final)
            return;
        start = end + 1;
    }
}

/* HF Trainer's temporary name of a step directory: "tmp-" then a step
 * directory component ("tmp-checkpoint-500"), written, then renamed to the
 * step's real name. */
#define TEMP_STEP_PREFIX     "tmp-"
#define TEMP_STEP_PREFIX_LEN 4

int st_steprules_in_temp_dir(const st_steprules *r, const char *path, uint64_t *step)
{
    if (!r || !path)
        return 0;
    size_t start = 0;
    for (;;) {
        size_t end = start;
        while (path[end] != '\0' && path[end] != '/')
            end++;
        if (path[end] == '\0')
            return 0; /* the final component is the file itself */
        size_t len = end - start;
        uint64_t found = 0;
        if (len > TEMP_STEP_PREFIX_LEN &&
            !memcmp(path + start, TEMP_STEP_PREFIX, TEMP_STEP_PREFIX_LEN) &&
            match_component(r, path + start + TEMP_STEP_PREFIX_LEN, len - TEMP_STEP_PREFIX_LEN,
                            false, &found) == COMP_STEP) {
            if (step)
                *step = found;
            return 1;
        }
        start = end + 1;
    }
}

/* The final component of path (after the last '/'); "" for "a/". */
static const char *final_component(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

st_marker_kind st_steprules_marker_kind(const st_steprules *r, const char *path)
{
    if (!r || !path)
        return ST_MARKER_NONE;
    const char *name = final_component(path);
    if (*name == '\0')
        return ST_MARKER_NONE;
    st_step_match m;
    st_steprules_match(r, path, &m);

    for (size_t i = 0; i < sizeof in_step_markers / sizeof in_step_markers[0]; i++) {
        if (strcmp(name, in_step_markers[i]) != 0)
            continue;
        /* Only directly inside the step directory: HF Accelerate's FSDP
         * sharded save writes a DCP ".metadata" into each of
         * "checkpoint-500/pytorch_model_fsdp_0/" and ".../optimizer_0/" long
         * before the step is done; its real marker is trainer_state.json. */
        if (!m.matched || m.single_file)
            return ST_MARKER_NONE;
        for (size_t k = m.prefix_len; path + k < name; k++)
            if (path[k] != '/')
                return ST_MARKER_NONE;
        return ST_MARKER_IN_STEP;
    }
    if (strcmp(name, MARKER_DEEPSPEED) == 0 || strcmp(name, MARKER_MEGATRON) == 0) {
        /* Inside a step it is a file of that step, not its marker: HF Trainer
         * with DeepSpeed writes "checkpoint-500/latest" before the rest of
         * checkpoint-500 (optimizer, trainer_state.json). */
        return m.matched ? ST_MARKER_NONE : ST_MARKER_NAMES_STEP;
    }
    return ST_MARKER_NONE;
}

st_err st_steprules_marker_step(const st_steprules *r, const char *path, const uint8_t *content,
                                size_t len, uint64_t *step)
{
    if (!r || !path || !step || (!content && len > 0))
        return st_seterr(ST_ERR_INVALID, "st_steprules_marker_step: NULL argument");
    if (st_steprules_marker_kind(r, path) != ST_MARKER_NAMES_STEP)
        return st_seterr(ST_ERR_INVALID, "%s: not a marker that names a step", path);
    if (len == 0)
        return st_seterr(ST_ERR_NOT_FOUND, "%s: empty, names no step", path);
    if (len > MARKER_CONTENT_MAX)
        return st_seterr(ST_ERR_NOT_FOUND, "%s: %zu bytes, too long to name a step", path, len);

    /* Strip like the frameworks' own readers do (Python's .strip()). */
    size_t b = 0, e = len;
    while (b < e && is_space(content[b]))
        b++;
    while (e > b && is_space(content[e - 1]))
        e--;
    const char *text = (const char *)content + b;
    size_t tlen = e - b;
    if (tlen == 0)
        return st_seterr(ST_ERR_NOT_FOUND, "%s: blank, names no step", path);

    uint64_t v = 0;
    if (strcmp(final_component(path), MARKER_MEGATRON) == 0) {
        bool overflow;
        if (!parse_decimal(text, tlen, &v, &overflow) || overflow)
            return st_seterr(ST_ERR_NOT_FOUND,
                             "%s: not an iteration number below 2^63 (\"release\" or other "
                             "content names no step)",
                             path);
    } else {
        /* DeepSpeed: the content is the step directory's name (its "tag"). */
        if (match_component(r, text, tlen, false, &v) != COMP_STEP)
            return st_seterr(ST_ERR_NOT_FOUND, "%s: content is not a step directory name", path);
    }
    *step = v;
    return ST_OK;
}
