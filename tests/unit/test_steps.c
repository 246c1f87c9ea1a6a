/*
 * test_steps — st_steprules: the step a path belongs to (built-in rule and user
 * patterns), completion-marker kinds, and parsing of marker content.
 *
 * Tables hold the real layouts (DeepSpeed, Megatron, HF Trainer, DCP, flat
 * files) next to the subtle and hostile cases decided in docs/STEPS.md, with
 * the exact prefix_len and single_file expected. A generator builds random
 * paths whose step is known by construction, and a fixed-seed random-bytes
 * loop checks that any input is answered consistently and without a crash
 * (run it under the ASan build: every path and content buffer is malloc'd at
 * its exact size so a read past it is caught).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mount/st_steprules.h"
#include "ut.h"

#define I64MAX ((uint64_t)INT64_MAX)

/* ---- helpers ---- */

static st_steprules *rules_or_die(const char *pattern)
{
    st_steprules *r = NULL;
    st_err e = st_steprules_new(pattern, &r);
    if (e != ST_OK || !r) {
        fprintf(stderr, "st_steprules_new(%s): %s\n", pattern ? pattern : "NULL", st_errmsg());
        exit(2);
    }
    return r;
}

/* Copies s to a malloc'd buffer of exactly strlen+1 bytes so ASan sees overreads. */
static char *exact_dup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (!p)
        exit(2);
    memcpy(p, s, n);
    return p;
}

struct path_case {
    const char *path;
    int matched;
    uint64_t step;
    const char *prefix; /* expected path[0..prefix_len) when matched */
    int single_file;
};

static int check_path_case(const st_steprules *r, const struct path_case *c)
{
    char *p = exact_dup(c->path);
    st_step_match m;
    memset(&m, 0xAB, sizeof m);
    st_steprules_match(r, p, &m);
    int ok = m.matched == c->matched;
    if (ok && c->matched) {
        size_t pl = strlen(c->prefix);
        ok = m.step == c->step && m.prefix_len == pl && memcmp(p, c->prefix, pl) == 0 &&
             m.single_file == c->single_file;
    }
    if (!ok)
        fprintf(stderr,
                "  path \"%s\": got matched=%d step=%llu prefix_len=%zu single=%d, "
                "want matched=%d step=%llu prefix=\"%s\" single=%d\n",
                c->path, m.matched, (unsigned long long)m.step, m.prefix_len, m.single_file,
                c->matched, (unsigned long long)c->step, c->prefix ? c->prefix : "",
                c->single_file);
    free(p);
    return ok;
}

/* clang-format off */
#define YES(path, step, prefix, single) {path, 1, step, prefix, single}
#define NO(path)                        {path, 0, 0, NULL, 0}
/* clang-format on */

/* ---- built-in rule ---- */

static const struct path_case builtin_cases[] = {
    /* DeepSpeed */
    YES("global_step100/mp_rank_00_model_states.pt", 100, "global_step100", 0),
    YES("global_step100/zero_pp_rank_3_mp_rank_00_optim_states.pt", 100, "global_step100", 0),
    YES("GLOBAL_STEP7/x", 7, "GLOBAL_STEP7", 0),
    YES("global_step_7/x", 7, "global_step_7", 0),
    YES("global_step-7/x", 7, "global_step-7", 0),
    NO("global-step7/x"), /* "global" is no word, and "step" must start the component */
    NO("globalstep7/x"),
    NO("latest"),
    NO("zero_to_fp32.py"),
    /* Megatron */
    YES("iter_0000100/mp_rank_00/model_optim_rng.pt", 100, "iter_0000100", 0),
    YES("iter_0000100/mp_rank_01_003/distrib_optim.pt", 100, "iter_0000100", 0),
    NO("latest_checkpointed_iteration.txt"),
    NO("iteration_100/x"),
    /* HF Trainer */
    YES("checkpoint-500/pytorch_model.bin", 500, "checkpoint-500", 0),
    YES("checkpoint-500/trainer_state.json", 500, "checkpoint-500", 0),
    YES("checkpoint-500/global_step500/mp_rank_00_model_states.pt", 500, "checkpoint-500", 0),
    YES("out/checkpoint-500/model.safetensors", 500, "out/checkpoint-500", 0),
    NO("tmp-checkpoint-500/model.safetensors"), /* newer HF writes here, then renames */
    NO("checkpoints/config.json"),
    /* DCP */
    YES("step-100/__0_0.distcp", 100, "step-100", 0),
    YES("step-100/.metadata", 100, "step-100", 0),
    YES("step-100/.metadata.tmp", 100, "step-100", 0),
    YES("Step_000100/__1_0.distcp", 100, "Step_000100", 0),
    /* flat, single-file steps */
    YES("ckpt-000100.pt", 100, "ckpt-000100.pt", 1),
    YES("ckpt_000020.pt", 20, "ckpt_000020.pt", 1),
    YES("epoch_3.safetensors", 3, "epoch_3.safetensors", 1),
    YES("step100.bin", 100, "step100.bin", 1),
    YES("ckpt-5", 5, "ckpt-5", 1),
    YES("ckpt-5.pt.tmp", 5, "ckpt-5.pt.tmp", 1),
    YES("CKPT-5.PT", 5, "CKPT-5.PT", 1),
    YES("EpOcH3.bin", 3, "EpOcH3.bin", 1),
    YES("models/ckpt-000100.pt", 100, "models/ckpt-000100.pt", 1),
    YES("checkpoint-12.tar.gz", 12, "checkpoint-12.tar.gz", 1),
    NO("ckpt-5."),         /* an extension is '.' and at least one byte */
    NO("ckpt-5_rank0.pt"), /* per-rank names need --step-pattern */
    NO("ckpt-5-rank0.pt"),
    NO("model.pt"),
    NO("ckpt.pt"),
    /* PyTorch Lightning's ModelCheckpoint: name=value fields joined by '-' */
    YES("epoch=3-step=400.ckpt", 400, "epoch=3-step=400.ckpt", 1),
    YES("checkpoints/epoch=3-step=400-val_loss=0.52.ckpt", 400,
        "checkpoints/epoch=3-step=400-val_loss=0.52.ckpt", 1),
    YES("epoch=3-step=400-v1.ckpt", 400, "epoch=3-step=400-v1.ckpt", 1),
    YES("step=400.ckpt", 400, "step=400.ckpt", 1),
    YES("val_loss=0.52-step=400", 400, "val_loss=0.52-step=400", 1),
    YES("epoch=7.ckpt", 7, "epoch=7.ckpt", 1),
    YES("epoch=7-val_loss=0.52.ckpt", 7, "epoch=7-val_loss=0.52.ckpt", 1),
    YES("epoch=0-step=100.ckpt/__0_0.distcp", 100, "epoch=0-step=100.ckpt", 0), /* FSDP */
    YES("epoch=0-step=100.ckpt/.metadata", 100, "epoch=0-step=100.ckpt", 0),
    NO("last.ckpt"),
    NO("last-v1.ckpt"),
    NO(".epoch=3-step=400.ckpt"),
    NO("epoch=3-step=4x.ckpt"),
    NO("epoch=3-step=.ckpt"),
    NO("epoch=x-step=y.ckpt"),
    NO("mystep=5.ckpt"),
    NO("epoch=3-step=99999999999999999999.ckpt"), /* too large: no epoch fallback */
    YES("epoch=3-step=99999999999999999999x.ckpt/step-5.pt", 5,
        "epoch=3-step=99999999999999999999x.ckpt/step-5.pt", 1),
    /* the first matching component decides */
    YES("checkpoints/step-10/x", 10, "checkpoints/step-10", 0),
    YES("step-10/sub/step-20.pt", 10, "step-10", 0),
    YES("step-10/step-20/x", 10, "step-10", 0),
    YES("a/b/c/iter_5/d", 5, "a/b/c/iter_5", 0),
    YES("run-3/epoch_2/ckpt-100.pt", 2, "run-3/epoch_2", 0),
    YES("ckpt-5.d/step-6/x", 6, "ckpt-5.d/step-6", 0), /* no extension on a directory */
    YES("step-1a/step-2.pt", 2, "step-1a/step-2.pt", 1),
    /* near misses */
    NO("stepping/x"),
    NO("step-/x"),
    NO("step_/x"),
    NO("step/x"),
    NO("step"),
    NO("step-1a"),
    NO("step-1a/x"),
    NO("step--5/x"),
    NO("step_-5/x"),
    NO("step-+5/x"),
    NO("step- 5/x"),
    NO("step 5/x"),
    NO("step-5 /x"),
    NO("step.5/x"),
    NO("step-0x10/x"),
    NO("xstep-5/x"),
    NO("mystep5"),
    NO("checkpoints/x"),
    NO("checkpoints5/x"),
    NO("ckpts-5.pt"),
    NO(".step-5"),
    NO(".ckpt-5.pt"),
    NO("a/.step-5/x"),
    NO("-step-5"),
    NO(""),
    NO("/"),
    NO("//"),
    NO("."),
    NO(".."),
    /* separators and odd slashes */
    YES("/step-5/x", 5, "/step-5", 0),
    YES("step-5/", 5, "step-5", 0),
    YES("step-5//x", 5, "step-5", 0),
    YES("a//step-5", 5, "a//step-5", 1),
    YES("./step-5/x", 5, "./step-5", 0),
    /* non-ASCII bytes: never letters, never digits, never case-folded */
    NO("st\xc3\xa9p-5/x"),
    NO("\xef\xbc\xb3tep-5/x"),  /* fullwidth S */
    NO("step-\xd9\xa5/x"),      /* Arabic-Indic five */
    NO("step-\xef\xbc\x95.pt"), /* fullwidth 5 */
    NO("\xc5\xbftep-5/x"),      /* long s, folds to 's' in Unicode only */
    NO("step\342\200\2205/x"),  /* Unicode hyphen */
    NO("\xe2\x80\x8bstep-5/x"), /* zero-width space first */
    YES("\xc3\xa9t\xc3\xa9/step-5/x", 5, "\xc3\xa9t\xc3\xa9/step-5", 0),
    YES("ckpt-5.\xff\xfe", 5, "ckpt-5.\xff\xfe", 1),
    YES("step-5/\x01\x02\x7f", 5, "step-5", 0),
    /* numbers */
    YES("step-0/x", 0, "step-0", 0),
    YES("step-0000000000000000000000000000000000001/x", 1,
        "step-0000000000000000000000000000000000001", 0),
    YES("step-9223372036854775807/x", I64MAX, "step-9223372036854775807", 0),
    YES("ckpt-9223372036854775807.pt", I64MAX, "ckpt-9223372036854775807.pt", 1),
    NO("step-9223372036854775808/x"),
    NO("step-18446744073709551615/x"),
    NO("step-18446744073709551616/x"),
    NO("ckpt-99999999999999999999999999999999.pt"),
    /* a too-large step stops the walk: no deeper component is credited */
    NO("step-99999999999999999999/step-5.pt"),
    NO("ckpt-99999999999999999999/iter_7/x"),
    /* but a too-large number in a non-step-shaped component does not */
    YES("step-99999999999999999999x/step-5.pt", 5, "step-99999999999999999999x/step-5.pt", 1),
};

static void test_builtin_table(void)
{
    st_steprules *r = rules_or_die(NULL);
    for (size_t i = 0; i < sizeof builtin_cases / sizeof builtin_cases[0]; i++)
        CHECK(check_path_case(r, &builtin_cases[i]));
    st_steprules_free(r);
}

/* Paths longer than any buffer the implementation might be tempted to use. */
static void test_long_paths(void)
{
    st_steprules *r = rules_or_die(NULL);
    st_step_match m;

    /* 2000 directory levels, then the step. */
    size_t depth = 2000, n = depth * 2 + 64;
    char *p = malloc(n);
    size_t off = 0;
    for (size_t i = 0; i < depth; i++) {
        p[off++] = 'a';
        p[off++] = '/';
    }
    size_t step_end = off + strlen("iter_42");
    snprintf(p + off, n - off, "iter_42/model.pt");
    char *exact = exact_dup(p);
    st_steprules_match(r, exact, &m);
    CHECK(m.matched && m.step == 42 && m.prefix_len == step_end && !m.single_file);
    free(exact);
    free(p);

    /* One 100000-byte component of leading zeros: still step 5. */
    size_t zeros = 100000;
    p = malloc(zeros + 16);
    memcpy(p, "step-", 5);
    memset(p + 5, '0', zeros);
    memcpy(p + 5 + zeros, "5.pt", 5);
    st_steprules_match(r, p, &m);
    CHECK(m.matched && m.step == 5 && m.single_file && m.prefix_len == strlen(p));
    free(p);

    /* A 100000-byte non-step component before the step. */
    p = malloc(zeros + 32);
    memset(p, 'x', zeros);
    memcpy(p + zeros, "/ckpt-7.pt", 11);
    st_steprules_match(r, p, &m);
    CHECK(m.matched && m.step == 7 && m.single_file && m.prefix_len == zeros + 10);
    free(p);
    st_steprules_free(r);
}

/* Random paths whose step is known by construction: noise directories that
 * must not match, then a step component in random case, separator, zero
 * padding and number, then (for a directory) anything at all. */
static const char *const noise_dirs[] = {
    "checkpoints",  "stepping",         "step-",       "step-1a",  ".step-5",
    "run",          "xstep5",           "ckpt-5.d",    "\xc3\xa9", "out",
    "global-step3", "tmp-checkpoint-9", "iteration_4", "step--1",  "a b",
};
static const char *const words[] = {"step", "global_step", "iter", "checkpoint", "ckpt", "epoch"};

static void random_case(char *w, uint64_t *s)
{
    for (; *w; w++)
        if (*w >= 'a' && *w <= 'z' && (ut_rand_next(s) & 1))
            *w = (char)(*w - 'a' + 'A');
}

static void test_generated_paths(void)
{
    st_steprules *r = rules_or_die(NULL);
    uint64_t s = 0x5EED0001;
    char buf[1024];
    int bad = 0;
    for (int iter = 0; iter < 20000; iter++) {
        size_t off = 0;
        unsigned ndirs = (unsigned)(ut_rand_next(&s) % 4);
        for (unsigned i = 0; i < ndirs; i++)
            off += (size_t)snprintf(
                buf + off, sizeof buf - off, "%s/",
                noise_dirs[ut_rand_next(&s) % (sizeof noise_dirs / sizeof noise_dirs[0])]);
        char word[16];
        snprintf(word, sizeof word, "%s", words[ut_rand_next(&s) % 6]);
        random_case(word, &s);
        const char *sep = (const char *[]){"", "-", "_"}[ut_rand_next(&s) % 3];
        uint64_t step = ut_rand_next(&s) >> (1 + ut_rand_next(&s) % 63); /* all magnitudes */
        int pad = (int)(ut_rand_next(&s) % 12);
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%s%0*llu", word, sep, pad,
                                (unsigned long long)step);
        int final = (int)(ut_rand_next(&s) % 2);
        size_t prefix = off;
        if (final) {
            static const char *const ext[] = {"", ".pt", ".safetensors", ".pt.tmp", ".x"};
            size_t k = ut_rand_next(&s) % 5;
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s", ext[k]);
            prefix = off;
        } else {
            static const char *const tail[] = {"/model.pt",  "/step-1/x",  "/",
                                               "/.metadata", "/ckpt-3.pt", "/\xff"};
            off += (size_t)snprintf(buf + off, sizeof buf - off, "%s", tail[ut_rand_next(&s) % 6]);
        }
        st_step_match m;
        st_steprules_match(r, buf, &m);
        int ok = m.matched && m.step == step && m.prefix_len == prefix && m.single_file == final;
        if (!ok && bad++ < 5)
            fprintf(stderr, "  generated \"%s\": got %d %llu %zu %d want step %llu prefix %zu\n",
                    buf, m.matched, (unsigned long long)m.step, m.prefix_len, m.single_file,
                    (unsigned long long)step, prefix);
    }
    CHECK(bad == 0);
    st_steprules_free(r);
}

/* ---- user patterns ---- */

static void test_pattern_model_bin(void)
{
    st_steprules *r = rules_or_die("model_([0-9]+)\\.bin");
    static const struct path_case cases[] = {
        YES("model_5.bin", 5, "model_5.bin", 1),
        YES("out/model_000123.bin", 123, "out/model_000123.bin", 1),
        YES("model_5.bin/shard", 5, "model_5.bin", 0), /* applies to every component */
        NO("model_5.bin.tmp"),                         /* anchored: the whole name */
        NO("xmodel_5.bin"),
        NO("model_5xbin"),
        NO("model_.bin"),
        NO("step-5/x"), /* the pattern replaces the built-in rule */
        NO("ckpt-5.pt"),
        NO("model_99999999999999999999.bin"),
        NO("model_99999999999999999999.bin/model_5.bin"),
        YES("model_9223372036854775807.bin", I64MAX, "model_9223372036854775807.bin", 1),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(check_path_case(r, &cases[i]));
    st_steprules_free(r);
}

static void test_pattern_run(void)
{
    st_steprules *r = rules_or_die("run([0-9]+)");
    static const struct path_case cases[] = {
        YES("run7/ckpt.pt", 7, "run7", 0),
        YES("jobs/run0007", 7, "jobs/run0007", 1),
        YES("x/run1/run2/y", 1, "x/run1", 0),
        NO("run7x/y"),
        NO("xrun7/y"),
        NO("run/y"),
        NO("RUN7/y"), /* user patterns are case-sensitive as written */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(check_path_case(r, &cases[i]));
    st_steprules_free(r);

    /* Alternation is anchored as a whole, not just its first branch. */
    r = rules_or_die("a|b([0-9]+)");
    static const struct path_case alt[] = {
        YES("b12/x", 12, "b12", 0),
        NO("a/x"), /* matches, but the group does not take part */
        NO("ab12/x"),
        NO("b12c/x"),
    };
    for (size_t i = 0; i < sizeof alt / sizeof alt[0]; i++)
        CHECK(check_path_case(r, &alt[i]));
    st_steprules_free(r);

    /* A group that can capture non-digits only matches when it captured digits. */
    r = rules_or_die("run(.*)");
    static const struct path_case any[] = {
        YES("run12/x", 12, "run12", 0), NO("runabc/x"), NO("run12a/x"), NO("run/x"), NO("run-1/x"),
    };
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        CHECK(check_path_case(r, &any[i]));
    st_steprules_free(r);

    /* Per-rank flat files, the case the built-in rule leaves out. */
    r = rules_or_die("ckpt_([0-9]+)_rank[0-9]+\\.pt");
    static const struct path_case rank[] = {
        YES("ckpt_100_rank3.pt", 100, "ckpt_100_rank3.pt", 1),
        NO("ckpt_100.pt"),
    };
    for (size_t i = 0; i < sizeof rank / sizeof rank[0]; i++)
        CHECK(check_path_case(r, &rank[i]));
    st_steprules_free(r);

    /* Components longer than a file name can be never match a pattern. */
    r = rules_or_die("x*run([0-9]+)");
    char name[400];
    memset(name, 'x', sizeof name);
    memcpy(name + 250, "run5", 5); /* 254 bytes: fits */
    st_step_match m;
    st_steprules_match(r, name, &m);
    CHECK(m.matched && m.step == 5);
    memset(name, 'x', sizeof name);
    memcpy(name + 251, "run5", 5); /* 255 bytes: fits */
    st_steprules_match(r, name, &m);
    CHECK(m.matched && m.step == 5);
    memset(name, 'x', sizeof name);
    memcpy(name + 252, "run5", 5); /* 256 bytes: too long */
    st_steprules_match(r, name, &m);
    CHECK(!m.matched);
    st_steprules_free(r);
}

static void test_pattern_invalid(void)
{
    static const char *const bad[] = {
        "",                   /* no group */
        "run[0-9]+",          /* no group */
        "a([0-9]+)b([0-9]+)", /* two groups */
        "((run)[0-9]+)",      /* nested: two groups */
        "run(",               /* unbalanced */
        "run([0-9]+",         /* unbalanced */
        "a)(b([0-9]+)",       /* would balance only inside the ^(...)$ wrap */
        "run([0-9]+))(",      /* idem */
        "([0-9]+)\\1",        /* back-reference */
        "run([0-9]+)\\",      /* trailing backslash */
        "[z-a]([0-9]+)",      /* bad range */
        "([0-9]+){2,1}",      /* bad interval */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        st_steprules *r = (st_steprules *)(uintptr_t)1;
        st_clearerr();
        st_err e = st_steprules_new(bad[i], &r);
        CHECK(e == ST_ERR_INVALID);
        CHECK(r == NULL);
        CHECK(st_errmsg()[0] != '\0');
        if (e != ST_ERR_INVALID)
            fprintf(stderr, "  pattern \"%s\" was accepted\n", bad[i]);
        if (e == ST_OK)
            st_steprules_free(r);
    }
    /* Too long a pattern. */
    char big[2100];
    memset(big, 'a', sizeof big);
    memcpy(big, "([0-9]+)", 8);
    big[sizeof big - 1] = '\0';
    st_steprules *r = NULL;
    CHECK_ERR(st_steprules_new(big, &r), ST_ERR_INVALID);
    CHECK_ERR(st_steprules_new(NULL, NULL), ST_ERR_INVALID);
    /* The wrap would renumber groups; the message says why it is refused. */
    CHECK_ERR(st_steprules_new("([0-9]+)x\\1", &r), ST_ERR_INVALID);
    CHECK(strstr(st_errmsg(), "back-reference") != NULL);
    st_steprules_free(NULL); /* a no-op */

    /* Bracket and escaped parentheses are not groups. */
    r = NULL;
    CHECK_OK(st_steprules_new("\\(x\\)[(]run([0-9]+)", &r));
    if (r) {
        st_step_match m;
        st_steprules_match(r, "(x)(run9/y", &m);
        CHECK(m.matched && m.step == 9 && m.prefix_len == 8);
        st_steprules_free(r);
    }
}

/* ---- markers ---- */

struct kind_case {
    const char *path;
    st_marker_kind kind;
};

/* rules names the rules in the failure message ("" for the built-in ones). */
static int check_kind_case(const st_steprules *r, const struct kind_case *c, const char *rules)
{
    char *p = exact_dup(c->path);
    st_marker_kind k = st_steprules_marker_kind(r, p);
    if (k != c->kind)
        fprintf(stderr, "  marker kind%s \"%s\": got %d want %d\n", rules, p, k, c->kind);
    free(p);
    return k == c->kind;
}

static void test_marker_kinds(void)
{
    static const struct kind_case builtin[] = {
        {"step-100/.metadata", ST_MARKER_IN_STEP},
        {"checkpoints/step-100/.metadata", ST_MARKER_IN_STEP},
        {"step-100//.metadata", ST_MARKER_IN_STEP},
        {"checkpoint-500/trainer_state.json", ST_MARKER_IN_STEP},
        {"global_step100/.ckpt-complete", ST_MARKER_IN_STEP},
        {"iter_0000100/.ckpt-complete", ST_MARKER_IN_STEP},
        {"ckpt-5/.ckpt-complete", ST_MARKER_IN_STEP},
        {"checkpoint-500/pytorch_model_fsdp_0/.metadata", ST_MARKER_NONE}, /* not the step root */
        {"step-10/step-20/.metadata", ST_MARKER_NONE}, /* belongs to step 10, not at its root */
        {"step-100/.metadata.tmp", ST_MARKER_NONE},
        {"step-100/.METADATA", ST_MARKER_NONE},
        {"step-100/metadata", ST_MARKER_NONE},
        {"step-100/__0_0.distcp", ST_MARKER_NONE},
        {".metadata", ST_MARKER_NONE},
        {"checkpoints/.metadata", ST_MARKER_NONE},
        {"trainer_state.json", ST_MARKER_NONE},
        {"ckpt-5.pt/.metadata", ST_MARKER_NONE},
        {"ckpt-5.pt", ST_MARKER_NONE},
        {"step-100/", ST_MARKER_NONE},
        {"latest", ST_MARKER_NAMES_STEP},
        {"checkpoints/latest", ST_MARKER_NAMES_STEP},
        {"/latest", ST_MARKER_NAMES_STEP},
        {"latest_checkpointed_iteration.txt", ST_MARKER_NAMES_STEP},
        {"checkpoints/latest_checkpointed_iteration.txt", ST_MARKER_NAMES_STEP},
        {"checkpoint-500/latest", ST_MARKER_NONE}, /* HF+DeepSpeed: a file of step 500 */
        {"global_step100/latest", ST_MARKER_NONE},
        {"iter_0000100/latest_checkpointed_iteration.txt", ST_MARKER_NONE},
        {"latest.tmp", ST_MARKER_NONE},
        {"Latest", ST_MARKER_NONE},
        {"latest/", ST_MARKER_NONE},
        {"latest/x", ST_MARKER_NONE},
        {"latest_universal", ST_MARKER_NONE},
        {"", ST_MARKER_NONE},
        {"/", ST_MARKER_NONE},
    };
    st_steprules *r = rules_or_die(NULL);
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        CHECK(check_kind_case(r, &builtin[i], ""));
    CHECK(st_steprules_marker_kind(NULL, "latest") == ST_MARKER_NONE);
    CHECK(st_steprules_marker_kind(r, NULL) == ST_MARKER_NONE);
    st_steprules_free(r);

    static const struct kind_case user[] = {
        {"run7/.metadata", ST_MARKER_IN_STEP},
        {"step-100/.metadata", ST_MARKER_NONE}, /* not a step under this pattern */
        {"run7/latest", ST_MARKER_NONE},
        {"latest", ST_MARKER_NAMES_STEP},
        {"step-100/latest", ST_MARKER_NAMES_STEP},
    };
    r = rules_or_die("run([0-9]+)");
    for (size_t i = 0; i < sizeof user / sizeof user[0]; i++)
        CHECK(check_kind_case(r, &user[i], " (run)"));
    st_steprules_free(r);
}

/* One content case: the marker's bytes and what reading them gives. */
struct content_case {
    const char *content;
    size_t len;
    st_err want;
    uint64_t step;
};

#define C(s) s, sizeof(s) - 1
#define DS   "latest"
#define MEG  "checkpoints/latest_checkpointed_iteration.txt"

/* The cases of one kind of marker, each read at every path of that kind:
 * what a content means does not depend on the folder the marker is in. */
struct content_table {
    const char *const *paths; /* NULL-terminated */
    const struct content_case *cases;
    size_t ncases;
};

#define TABLE(paths, cases)                                                                        \
    {                                                                                              \
        paths, cases, sizeof cases / sizeof cases[0]                                               \
    }

static const char *const deepspeed_paths[] = {DS, "checkpoints/latest", NULL};

/* DeepSpeed: the content is the step directory's name */
static const struct content_case deepspeed_contents[] = {
    {C("global_step100"), ST_OK, 100},
    {C("global_step100\n"), ST_OK, 100},
    {C("global_step100\r\n"), ST_OK, 100},
    {C("  global_step100 \t\r\n\n"), ST_OK, 100},
    {C("\v\fglobal_step100\f"), ST_OK, 100},
    {C("step-000042"), ST_OK, 42},
    {C("checkpoint-500\n"), ST_OK, 500},
    {C("global_step3"), ST_OK, 3},
    {C("global_step9223372036854775807"), ST_OK, I64MAX},
    {C(""), ST_ERR_NOT_FOUND, 0},
    {C("\n"), ST_ERR_NOT_FOUND, 0},
    {C(" \r\n\t "), ST_ERR_NOT_FOUND, 0},
    {C("global_step"), ST_ERR_NOT_FOUND, 0},
    {C("global_step100/"), ST_ERR_NOT_FOUND, 0},
    {C("global_step100/x"), ST_ERR_NOT_FOUND, 0},
    {C("global_step100.pt"), ST_ERR_NOT_FOUND, 0}, /* a directory name: no extension */
    {C("global_step1 00"), ST_ERR_NOT_FOUND, 0},
    {C("global_step100\0"), ST_ERR_NOT_FOUND, 0},
    {C("global_step10\0"
       "0"),
     ST_ERR_NOT_FOUND, 0},
    {C("\0global_step100"), ST_ERR_NOT_FOUND, 0},
    {C("my_tag"), ST_ERR_NOT_FOUND, 0},
    {C("100"), ST_ERR_NOT_FOUND, 0},
    {C("global_step9223372036854775808"), ST_ERR_NOT_FOUND, 0},
    {C("global_step99999999999999999999999"), ST_ERR_NOT_FOUND, 0},
    {C("\xef\xbb\xbfglobal_step100"), ST_ERR_NOT_FOUND, 0}, /* BOM is not whitespace */
    {C("global_step\xd9\xa1"), ST_ERR_NOT_FOUND, 0},
};

static const char *const megatron_paths[] = {MEG, "latest_checkpointed_iteration.txt", NULL};

/* Megatron: the content is the iteration number */
static const struct content_case megatron_contents[] = {
    {C("100"), ST_OK, 100},
    {C("100\n"), ST_OK, 100},
    {C("0000100\r\n"), ST_OK, 100},
    {C(" 7 "), ST_OK, 7},
    {C("0"), ST_OK, 0},
    {C("12"), ST_OK, 12},
    {C("9223372036854775807\n"), ST_OK, I64MAX},
    {C("release"), ST_ERR_NOT_FOUND, 0},
    {C("release\n"), ST_ERR_NOT_FOUND, 0},
    {C(""), ST_ERR_NOT_FOUND, 0},
    {C("\r\n"), ST_ERR_NOT_FOUND, 0},
    {C("-5"), ST_ERR_NOT_FOUND, 0},
    {C("+5"), ST_ERR_NOT_FOUND, 0},
    {C("1e3"), ST_ERR_NOT_FOUND, 0},
    {C("1_000"), ST_ERR_NOT_FOUND, 0},
    {C("10 0"), ST_ERR_NOT_FOUND, 0},
    {C("0x10"), ST_ERR_NOT_FOUND, 0},
    {C("iter_0000100"), ST_ERR_NOT_FOUND, 0},
    {C("100\0"), ST_ERR_NOT_FOUND, 0},
    {C("\xff\xfe"
       "1\0"
       "0"),
     ST_ERR_NOT_FOUND, 0},
    {C("\xd9\xa1\xd9\xa0\xd9\xa0"), ST_ERR_NOT_FOUND, 0},
    {C("9223372036854775808"), ST_ERR_NOT_FOUND, 0},
    {C("18446744073709551616"), ST_ERR_NOT_FOUND, 0},
    {C("123456789012345678901234567890"), ST_ERR_NOT_FOUND, 0},
};

/* Not a marker that names a step: whatever the content, a caller error. */
static const char *const non_marker_paths[] = {"step-100/.metadata", "model.pt",
                                               "checkpoint-500/latest", NULL};
static const struct content_case non_marker_contents[] = {
    {C("100"), ST_ERR_INVALID, 0},
    {C("global_step500"), ST_ERR_INVALID, 0},
};

static const struct content_table builtin_tables[] = {
    TABLE(deepspeed_paths, deepspeed_contents),
    TABLE(megatron_paths, megatron_contents),
    TABLE(non_marker_paths, non_marker_contents),
};

/* With a user pattern the DeepSpeed tag is matched by the pattern. */
static const struct content_case user_deepspeed_contents[] = {
    {C("run12\n"), ST_OK, 12},
    {C("run12\0"), ST_ERR_NOT_FOUND, 0},
    {C("run1\0"
       "2"),
     ST_ERR_NOT_FOUND, 0},
    {C("run1/2"), ST_ERR_NOT_FOUND, 0},
    {C("global_step100"), ST_ERR_NOT_FOUND, 0},
};
static const struct content_case user_megatron_contents[] = {
    {C("100\n"), ST_OK, 100},
};

static const struct content_table user_tables[] = {
    TABLE(deepspeed_paths, user_deepspeed_contents),
    TABLE(megatron_paths, user_megatron_contents),
};

static int check_content_case(const st_steprules *r, const char *path, const struct content_case *c)
{
    /* Exact-size heap copy; a zero-length case gets a 1-byte buffer it must not read. */
    uint8_t *buf = malloc(c->len ? c->len : 1);
    memcpy(buf, c->content, c->len);
    uint64_t step = 0xDEADBEEF;
    st_clearerr();
    st_err e = st_steprules_marker_step(r, path, buf, c->len, &step);
    int ok = e == c->want && (e != ST_OK || step == c->step) && (e == ST_OK || st_errmsg()[0]);
    if (!ok)
        fprintf(stderr, "  marker \"%s\" content[%zu]: got %d step %llu, want %d step %llu\n", path,
                c->len, (int)e, (unsigned long long)step, (int)c->want,
                (unsigned long long)c->step);
    free(buf);
    return ok;
}

/* Every case of every table, at every path of its table. */
static void check_content_tables(const st_steprules *r, const struct content_table *t, size_t n)
{
    for (; n; n--, t++)
        for (const char *const *path = t->paths; *path; path++)
            for (size_t i = 0; i < t->ncases; i++)
                CHECK(check_content_case(r, *path, &t->cases[i]));
}

static void test_marker_content(void)
{
    st_steprules *r = rules_or_die(NULL);
    check_content_tables(r, builtin_tables, sizeof builtin_tables / sizeof builtin_tables[0]);

    /* Size limits: 4096 bytes are read, one more is refused. */
    uint8_t *big = malloc(4097);
    memset(big, ' ', 4097);
    memcpy(big, "100", 3);
    uint64_t step = 0;
    CHECK_OK(st_steprules_marker_step(r, MEG, big, 4096, &step));
    CHECK(step == 100);
    CHECK_ERR(st_steprules_marker_step(r, MEG, big, 4097, &step), ST_ERR_NOT_FOUND);
    memcpy(big + 4096 - 14, "global_step100", 14);
    memset(big, ' ', 3);
    CHECK_OK(st_steprules_marker_step(r, DS, big, 4096, &step));
    CHECK(step == 100);
    free(big);

    /* NULL arguments. */
    CHECK_ERR(st_steprules_marker_step(r, DS, NULL, 5, &step), ST_ERR_INVALID);
    CHECK_ERR(st_steprules_marker_step(r, DS, (const uint8_t *)"x", 1, NULL), ST_ERR_INVALID);
    CHECK_ERR(st_steprules_marker_step(NULL, DS, (const uint8_t *)"x", 1, &step), ST_ERR_INVALID);
    CHECK_ERR(st_steprules_marker_step(r, NULL, (const uint8_t *)"x", 1, &step), ST_ERR_INVALID);
    CHECK_ERR(st_steprules_marker_step(r, DS, NULL, 0, &step), ST_ERR_NOT_FOUND);
    st_steprules_free(r);

    r = rules_or_die("run([0-9]+)");
    check_content_tables(r, user_tables, sizeof user_tables / sizeof user_tables[0]);
    st_steprules_free(r);
}

/* ---- robustness ---- */

/* Bytes that make hostile paths interesting: separators, digits, the
 * letters of the words, dots, whitespace, high and control bytes. */
static const char alphabet[] = "//////--__..0123456789stepSTEPglobal_iterchkpoinEPOCH \t\r\n"
                               "\x01\x7f\x80\xc3\xa9\xff";

static const char *const tokens[] = {
    "step",
    "Global_Step",
    "iter_",
    "checkpoint-",
    "ckpt",
    "epoch",
    "/",
    "/",
    "-",
    "_",
    ".pt",
    "9223372036854775807",
    "9223372036854775808",
    "000",
    "latest",
    ".metadata",
    "latest_checkpointed_iteration.txt",
    "trainer_state.json",
    "run",
    "model_",
};

static void check_match_invariants(const st_steprules *r, const char *p, int *bad)
{
    st_step_match m;
    st_steprules_match(r, p, &m);
    size_t n = strlen(p);
    if (!m.matched) {
        if (m.step || m.prefix_len || m.single_file)
            (*bad)++;
        return;
    }
    int ok = m.prefix_len > 0 && m.prefix_len <= n && m.step <= I64MAX &&
             p[m.prefix_len - 1] != '/' && (p[m.prefix_len] == '\0' || p[m.prefix_len] == '/') &&
             m.single_file == (p[m.prefix_len] == '\0');
    if (ok) {
        /* The step component alone, at the same position (final or not),
         * gives the same step. */
        size_t cs = m.prefix_len;
        while (cs > 0 && p[cs - 1] != '/')
            cs--;
        size_t cl = m.prefix_len - cs;
        char *alone = malloc(cl + 3);
        memcpy(alone, p + cs, cl);
        memcpy(alone + cl, m.single_file ? "" : "/x", m.single_file ? 1 : 3);
        st_step_match m2;
        st_steprules_match(r, alone, &m2);
        ok = m2.matched && m2.step == m.step && m2.prefix_len == cl &&
             m2.single_file == m.single_file;
        free(alone);
    }
    if (!ok && (*bad)++ < 5)
        fprintf(stderr, "  random path of %zu bytes: inconsistent match\n", n);
}

static void random_robustness(const char *pattern, uint64_t seed)
{
    st_steprules *r = rules_or_die(pattern);
    uint64_t s = seed;
    int bad = 0, matched = 0, markers = 0, named = 0;
    for (int iter = 0; iter < 30000; iter++) {
        size_t n = (size_t)(ut_rand_next(&s) % 300);
        if (iter % 1000 == 0)
            n = 5000 + (size_t)(ut_rand_next(&s) % 5000);
        char *p = malloc(n + 1);
        int raw = (int)(ut_rand_next(&s) % 4) == 0; /* any byte, else tokens and the alphabet */
        for (size_t i = 0; i < n;) {
            uint64_t v = ut_rand_next(&s);
            if (!raw && v % 3 == 0) {
                const char *t = tokens[(v >> 8) % (sizeof tokens / sizeof tokens[0])];
                size_t tl = strlen(t);
                if (tl > n - i)
                    tl = n - i;
                memcpy(p + i, t, tl);
                i += tl;
                continue;
            }
            char c = raw ? (char)(v & 0xff) : alphabet[v % (sizeof alphabet - 1)];
            p[i++] = c ? c : 'z';
        }
        p[n] = '\0';
        check_match_invariants(r, p, &bad);
        st_step_match m;
        st_steprules_match(r, p, &m);
        matched += m.matched;

        st_marker_kind k = st_steprules_marker_kind(r, p);
        if (k != ST_MARKER_NONE && k != ST_MARKER_IN_STEP && k != ST_MARKER_NAMES_STEP)
            bad++;
        markers += k != ST_MARKER_NONE;
        /* Random content against both tracker names, and the path itself. */
        static const char *const trackers[] = {"latest", "latest_checkpointed_iteration.txt"};
        const char *tp = trackers[iter & 1];
        uint64_t step = 0;
        st_err e = st_steprules_marker_step(r, tp, (const uint8_t *)p, n, &step);
        if (e != ST_OK && e != ST_ERR_NOT_FOUND)
            bad++;
        if (e == ST_OK && step > I64MAX)
            bad++;
        named += e == ST_OK;
        e = st_steprules_marker_step(r, p, (const uint8_t *)p, n, &step);
        if (e != ST_OK && e != ST_ERR_NOT_FOUND && e != ST_ERR_INVALID)
            bad++;
        if ((e == ST_ERR_INVALID) != (k != ST_MARKER_NAMES_STEP))
            bad++;
        free(p);
    }
    CHECK(bad == 0);
    /* The generator is rich enough to reach every outcome. */
    CHECK(matched > 0);
    CHECK(markers > 0);
    CHECK(named > 0);
    fprintf(stderr,
            "  %d random inputs: %d matched, %d markers, %d tracker contents named a step\n", 30000,
            matched, markers, named);
    st_steprules_free(r);
}

/* A step's temporary directory (docs/STEPS.md §3): "tmp-" + a step directory
 * component, anywhere above the file; the file itself never counts. */
static void test_temp_dirs(void)
{
    st_steprules *r = rules_or_die(NULL);
    static const struct {
        const char *path;
        int in_temp;
        uint64_t step;
    } cases[] = {
        {"tmp-checkpoint-500/pytorch_model.bin", 1, 500},
        {"tmp-checkpoint-500/global_step500/mp_rank_00_model_states.pt", 1, 500},
        {"out/tmp-step_7/x", 1, 7},
        {"tmp-checkpoint-500", 0, 0},   /* a file by that name */
        {"tmp-ckpt-5.pt", 0, 0},        /* a file */
        {"checkpoint-500/x", 0, 0},     /* the real name */
        {"tmp-checkpoint-/x", 0, 0},    /* no number */
        {"tmp-stepping/x", 0, 0},       /* not a step component */
        {"tmp-ckpt-5.d/x", 0, 0},       /* a directory takes no extension */
        {"tmpcheckpoint-500/x", 0, 0},  /* the prefix is "tmp-" */
        {"TMP-checkpoint-500/x", 0, 0}, /* as HF writes it, lower case */
        {"", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = exact_dup(cases[i].path);
        uint64_t step = 0;
        int got = st_steprules_in_temp_dir(r, p, &step);
        if (got != cases[i].in_temp || (got && step != cases[i].step))
            fprintf(stderr, "  %s: in_temp %d step %llu\n", cases[i].path, got,
                    (unsigned long long)step);
        CHECK(got == cases[i].in_temp && (!got || step == cases[i].step));
        free(p);
    }
    st_steprules_free(r);
}

static void test_random_builtin(void)
{
    random_robustness(NULL, 0xC0FFEE01);
}

static void test_random_pattern_valid(void)
{
    random_robustness("[a-z]*[-_]?([0-9]+)[^/]*", 0xC0FFEE02);
}

int main(void)
{
    RUN(test_builtin_table);
    RUN(test_long_paths);
    RUN(test_generated_paths);
    RUN(test_pattern_model_bin);
    RUN(test_pattern_run);
    RUN(test_pattern_invalid);
    RUN(test_marker_kinds);
    RUN(test_marker_content);
    RUN(test_temp_dirs);
    RUN(test_random_builtin);
    RUN(test_random_pattern_valid);
    return ut_finish();
}
