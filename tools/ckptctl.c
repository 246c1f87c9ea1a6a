/*
 * ckptctl — the command line over the store engine and a local mount.
 *
 *   ckptctl [options] VERB [verb options]
 *
 * This file holds main: option parsing into a cli (options may appear
 * before or after the verb), the verb table with each verb's help, and
 * opening the store for the verbs that need one. It calls the verbs and
 * ckptctl_cli.c; nothing calls it. The verbs live in ckptctl_store.c (put
 * get restore ls latest verify stats), ckptctl_mount.c (commit wait status
 * drain), ckptctl_gc.c (gc pin unpin), ckptctl_warmup.c (warmup) and
 * ckptctl_keys.c (keygen); what they share (errors, exit codes, --json
 * output) is ckptctl_cli.c, below them.
 *
 * --store defaults to $CKPT_STORE, then to the embedded file:// store; --job
 * to $CKPT_JOB. Exit codes (also in --help and ckptctl(1)): 0 ok, 1 not found
 * or no consistent step, 2 usage, 3 store, I/O or key error, 4 corrupt data,
 * 5 already exists, 6 timeout, 7 gc skipped part of its work.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptctl.h"
#include "ckptctl_cli.h"

#define EXIT_CODES_TEXT                                                                            \
    "Exit codes:\n"                                                                                \
    "  0  ok\n"                                                                                    \
    "  1  not found: no such job or step, no consistent step\n"                                    \
    "  2  usage error\n"                                                                           \
    "  3  store or I/O error (also: no ckptfs mount at --mount); a key file refused\n"             \
    "  4  corrupt data: a chunk or file failed verification, or a pack is missing\n"               \
    "  5  already exists\n"                                                                        \
    "  6  timeout (wait, warmup)\n"                                                                \
    "  7  gc did only part of its work: the sweep was skipped (the report says why);\n"            \
    "     warmup: partial (not every file fitted under the staging cap)\n"                         \
    "  128+N  gc stopped early by signal N (130: SIGINT), at a safe point\n"

static const verb verbs[] = {
    {"ls", run_ls, STORE_EXISTING, OPT_JSON, "ls [--job J] [--json]",
     "Without a job: list the jobs in the store. With --job (or $CKPT_JOB): list the\n"
     "job's steps, oldest first: step, state (consistent: complete on every rank and\n"
     "durable, restorable; partial: not, with the reason; unreadable: a part record\n"
     "or manifest cannot be read, with the error), files, size, nodes that\n"
     "wrote it, ranks seen / world size; then the job's dedup ratio (logical bytes\n"
     "over stored bytes). --json: an array of job names, or of step objects with\n"
     "step, state, consistent, complete, why, files, bytes, nodes, ranks,\n"
     "world_size, created_ns.\n"},
    {"latest", run_latest, STORE_EXISTING, OPT_JSON, "latest [--json]",
     "Print the job's latest consistent step number alone on stdout (exit 0). Exit 1\n"
     "with a message on stderr when the job has no consistent step.\n"
     "--json: {\"job\": J, \"step\": N}.\n"},
    {"restore", run_restore, STORE_EXISTING,
     OPT_STEP | OPT_LATEST | OPT_RANK | OPT_NO_FALLBACK | OPT_THREADS | OPT_TO | OPT_JSON,
     "restore [--step N | --latest] [--rank R] [--no-fallback] [--threads N] --to DIR",
     "Restore a consistent step of the job into DIR (created if missing); without\n"
     "--step, the latest consistent step. Downloads run in parallel (--threads,\n"
     "default 4); every chunk and every file is verified in a staging directory\n"
     "DIR/.ckpt-restore.PID.STEP, and the files are renamed into place only once the\n"
     "whole step verified: a restore that fails or falls back leaves nothing of the\n"
     "step in DIR. A missing pack is damage, like a bad checksum (exit 4).\n"
     "--rank R restores only the files written by rank R. With --latest, a step\n"
     "that fails verification is reported and the previous consistent step is\n"
     "restored instead; --no-fallback fails (exit 4).\n"
     "A progress bar is drawn on stderr when it is a terminal.\n"
     "--json: step, files, bytes, gets, read_back_bytes, fell_back, failed_step,\n"
     "failure.\n"},
    {"get", run_get, STORE_EXISTING, OPT_STEP | OPT_TO | OPT_JSON, "get --step N --to DIR [--json]",
     "Same as restore --step N --to DIR (kept for scripts).\n"},
    {"put", run_put, STORE_CREATE, OPT_STEP | OPT_SEAL | OPT_COMPRESS | OPT_JSON,
     "put --step N [--seal-threads N] [--compression auto|lz4] DIR [--json]",
     "Store every regular file under DIR as step N of the job. Files are chunked,\n"
     "deduplicated against everything the job already stored, compressed and packed;\n"
     "the step becomes visible only once all of it is in the store. Files stored this\n"
     "way carry no rank (-1). Files under 4 KiB are stored together, in bundles.\n"
     "New chunks are compressed by --seal-threads threads (default: the online CPUs\n"
     "less one, at least 1); the stored bytes are the same for any number.\n"
     "--compression auto (default) picks per chunk, zstd per byte plane where it\n"
     "stores fewer bytes; lz4 keeps to the LZ4 codecs (less CPU, more bytes).\n"
     "--json: files, skipped, bytes, chunks, new_chunks, new_bytes, stored_bytes,\n"
     "packs, bundles, bundled_files, puts.\n"},
    {"verify", run_verify, STORE_EXISTING, OPT_STEP | OPT_JSON, "verify [--step N] [--json]",
     "Read every chunk of a step (default: the latest consistent one) and check it,\n"
     "and every file's digest, writing nothing locally. Exit 4 naming the first bad\n"
     "file when something failed. --json: step, files, chunks, bytes, bad_files, ok.\n"},
    {"stats", run_stats, STORE_EXISTING, OPT_JSON, "stats [--job J] [--json]",
     "Space accounting of the job (without a job: of every job): steps, logical bytes\n"
     "(the sum of the steps' file sizes) against stored bytes (pack objects), the\n"
     "dedup ratio (logical / stored), object counts (packs, manifests, part records),\n"
     "and the object requests this command made (PUT, GET, HEAD, LIST, DELETE).\n"},
    {"commit", run_commit, STORE_NONE, OPT_MOUNT | OPT_STEP | OPT_RANK | OPT_WORLD,
     "commit --mount M --step N --rank R --world-size W",
     "Commit step N of the job for rank R of W through the ckptfs mount at M (writes\n"
     "\"JOB N R W\" to M/.ckptfs/commit). A step whose ranks 0..W-1 are all committed is\n"
     "complete; the mount records the commit once this node's files of the step are\n"
     "durable.\n"},
    {"wait", run_wait, STORE_NONE, OPT_MOUNT | OPT_STEP | OPT_TIMEOUT,
     "wait --mount M --step N [--timeout S]",
     "Block until step N of the job is durable according to the ckptfs mount at M\n"
     "(polls M/.ckptfs/status). --timeout S gives up after S seconds with exit 6;\n"
     "without it, waits forever.\n"},
    {"status", run_status, STORE_NONE, OPT_MOUNT | OPT_JSON, "status --mount M [--json]",
     "Show the state of the ckptfs mount at M: pending (not yet durable) bytes,\n"
     "staging use, upload totals and rate, the upload queue, the last error, and\n"
     "every step the mount knows with its state. --json prints the status file as\n"
     "it is.\n"},
    {"drain", run_drain, STORE_NONE, OPT_MOUNT, "drain MOUNT | drain --mount M",
     "A preemption notice to the ckptfs mount at M (writes \"drain\" to\n"
     "M/.ckptfs/drain; SIGUSR1 to the daemon does the same): from now on it uploads\n"
     "each job's newest complete step first, then the rest, and keeps serving\n"
     "(docs/SHUTDOWN.md). Prints the estimated time until every pending byte is\n"
     "durable (status eta_durable_seconds). Then wait for the newest step with\n"
     "ckptctl wait.\n"},
    {"warmup", run_warmup, STORE_NONE, OPT_JSON | OPT_TIMEOUT,
     "warmup MOUNT/JOB[/STEP] [--timeout S] [--json]",
     "Ask the ckptfs mount to fetch a step into its staging now (writes \"JOB [STEP]\"\n"
     "to MOUNT/.ckptfs/warmup; docs/WARMUP.md), then wait until every file of it is\n"
     "local and verified, with progress on stderr (a terminal). STEP is a step number\n"
     "or a step directory's name (the last number in it); without it, the job's\n"
     "newest step. Exit 0: warm; 7: partial (the rest did not fit under\n"
     "--staging-cap); 3: a fetch failed; 6: --timeout S passed (the warm-up goes on).\n"
     "--json: the request's status object.\n"},
    {"gc", run_gc, STORE_EXISTING, OPT_GC | OPT_JSON,
     "gc [--keep-last N] [--keep-every K] [--grace SECONDS] [--repack-dead PCT] [--batch N]\n"
     "             [--compact[=PCT]] [--progress] [--dry-run] [--json]",
     "Retention and garbage collection of the job (docs/GC.md). --keep-last N keeps\n"
     "the N newest consistent steps, --keep-every K the consistent steps whose number\n"
     "is a multiple of K; other steps are deleted (part records first). Never deleted:\n"
     "the newest consistent step and anything newer, pinned steps (ckptctl pin), and\n"
     "partial steps younger than the grace period. Without --keep-last/--keep-every no\n"
     "step is deleted and gc only sweeps. The sweep marks packs no remaining step\n"
     "references; a later run deletes a marked pack once its mark is older than\n"
     "--grace (default 3600 s) and it is still unreferenced. Safe while other nodes\n"
     "write. A referenced pack at least --repack-dead PCT percent dead (default 50;\n"
     "100: never) is retired: writers store its live chunks again, in packs of their\n"
     "own, and it goes once the older steps that use it are deleted. Deletions go in\n"
     "batches of --batch N objects (default 1000); after each, a progress line on\n"
     "stderr (when it is a terminal, or with --progress), and SIGINT/SIGTERM end the\n"
     "run there, between whole steps and packs. --dry-run deletes nothing and lists\n"
     "what a real run would delete. Retention counts only restorable steps: a\n"
     "consistent step with a missing or short pack is damaged, kept if it is newer\n"
     "than the newest restorable step, and never counted by --keep-last. A part\n"
     "record or manifest that cannot be read keeps its step and makes the run skip\n"
     "the sweep: exit 7, \"sweep skipped\" on stderr.\n"
     "--compact[=PCT] (a job whose writers are gone): gc copies the live chunks of\n"
     "packs at least PCT percent dead (default 9, so every pack left is < 1.10x its\n"
     "live bytes) into new packs itself and rewrites the steps\n"
     "that use them, behind a publish fence that makes writers wait; it first waits\n"
     "half the grace period (docs/GC.md, \"Compaction\"). The old packs are then\n"
     "marked and go one grace period later. Skipped (exit 7) while another\n"
     "compaction runs.\n"
     "--json: dry_run, steps_kept, steps_deleted, deleted_steps, steps_damaged,\n"
     "steps_unreadable, packs, packs_referenced,\n"
     "packs_marked, packs_unmarked, packs_pending, packs_deleted, packs_retired,\n"
     "retired_live_bytes, parts_deleted, manifests_deleted, markers_deleted,\n"
     "objects_deleted, bytes_freed, stopped, sweep_skipped, why, compact (object:\n"
     "candidates, candidate_bytes, live_bytes, packs_written, parts_rewritten,\n"
     "steps_skipped, parts_changed, gets, puts, wait_ns, skipped, why), deleted\n"
     "(every key, in order).\n"},
    {"keygen", run_keygen, STORE_NONE, OPT_APPEND, "keygen [--append] FILE",
     "Write a new client-side encryption key file FILE (docs/ENCRYPTION.md): one\n"
     "line 'ckptfs-key v1 <base64 of 32 random bytes>', mode 0600. An existing FILE\n"
     "is never overwritten (exit 5): its keys may be all that opens a store.\n"
     "--append adds a new key as the last line of the existing key file FILE: it seals\n"
     "from now on, and the older lines still open what they sealed (rotation: run it\n"
     "once, then copy FILE to every node). The file is written whole to a temporary\n"
     "file, fsynced, then put in place. Prints the new key's id (never the key).\n"
     "Exit 3: FILE refused (not a regular file of this user with mode 0600 or\n"
     "stricter, or malformed) or not writable. No other verb takes a key file yet.\n"},
    {"pin", run_pin, STORE_EXISTING, OPT_STEP, "pin --step N",
     "Pin step N of the job: gc never deletes a pinned step.\n"},
    {"unpin", run_unpin, STORE_EXISTING, OPT_STEP, "unpin --step N",
     "Remove the pin of step N (exit 1 if it was not pinned).\n"},
};

/* Option names for "does not apply" messages, by bit. */
static const struct {
    unsigned bit;
    const char *name;
} opt_names[] = {
    {OPT_STEP, "--step"},
    {OPT_TO, "--to"},
    {OPT_JSON, "--json"},
    {OPT_LATEST, "--latest"},
    {OPT_RANK, "--rank"},
    {OPT_NO_FALLBACK, "--no-fallback"},
    {OPT_THREADS, "--threads"},
    {OPT_SEAL, "--seal-threads"},
    {OPT_COMPRESS, "--compression"},
    {OPT_APPEND, "--append"},
    {OPT_MOUNT, "--mount"},
    {OPT_WORLD, "--world-size"},
    {OPT_TIMEOUT, "--timeout"},
    {OPT_GC,
     "--keep-last/--keep-every/--grace/--dry-run/--repack-dead/--batch/--compact/--progress"},
};

static void print_warning(void *arg, const char *msg)
{
    (void)arg;
    fprintf(stderr, "ckptctl: warning: %s\n", msg);
}

static void usage(FILE *out)
{
    fprintf(out, "usage: ckptctl [options] VERB [verb options]\n\nVerbs:\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(out, "  ckptctl %s\n", verbs[i].usage);
    fprintf(
        out,
        "\nGlobal options (before or after the verb):\n"
        "  --store URL      object store: file:///abs/dir or s3://bucket/prefix\n"
        "                   (default: $CKPT_STORE, else the embedded file:// store)\n"
        "  --job J          job name (default: $CKPT_JOB; --job '' for none)\n"
        "  --state-dir DIR  local state (dedup index); default ~/.cache/ckptfs\n"
        "  --node NAME      this writer's node name (default: host name)\n"
        "  --s3-endpoint URL  S3-compatible endpoint (default: $CKPT_S3_ENDPOINT, else\n"
        "                   AWS's for the region); credentials only from\n"
        "                   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN)\n"
        "                   or the AWS_PROFILE of ~/.aws/credentials\n"
        "  --s3-signature v4|v2  request signing (default: $CKPT_S3_SIGNATURE, else v4)\n"
        "  --s3-region NAME   bucket region (default: $AWS_REGION, $AWS_DEFAULT_REGION,\n"
        "                   the profile's in ~/.aws/config, else us-east-1)\n"
        "  --s3-addressing path|virtual  (default: $CKPT_S3_ADDRESSING; virtual on AWS)\n"
        "  --s3-ca-file PEM   CA certificates for https (default: $CKPT_S3_CA_FILE, else\n"
        "                   the system store)\n"
        "  --s3-sse AES256|aws:kms[:KEY-ID]|c:FILE  server-side encryption of what is\n"
        "                   written; c:FILE: SSE-C, the 32 raw bytes of FILE (mode 0600)\n"
        "                   are the key, needed for reads too (default: $CKPT_S3_SSE)\n"
        "  --encryption-key-file FILE  client-side encryption (docs/ENCRYPTION.md): the\n"
        "                   key file (ckptctl keygen) whose keys seal what is written\n"
        "                   and open what is read; needed for every verb on an\n"
        "                   encrypted store (default: $CKPT_ENCRYPTION_KEY_FILE)\n"
        "  --peer-secret-file FILE  the peers' cluster secret: ls, latest, restore and\n"
        "                   verify also see steps replicated on peers and not yet\n"
        "                   durable, and read their packs from the peers (docs/PEERS.md)\n"
        "  --peers [https://]HOST:PORT,...  with --peer-secret-file: when the store\n"
        "                   cannot be reached, ls, latest and restore list the steps\n"
        "                   replicated on these peers and restore them from the peers alone\n"
        "  --peer-ca-file FILE  with --peer-secret-file: the PEM CA certificates that must\n"
        "                   sign the certificate of a peer named https://HOST:PORT\n"
        "                   (default: the system store)\n"
        "  -q, --quiet      print only errors (latest still prints the step)\n"
        "  -h, --help       this help, or the verb's with a verb\n"
        "  --version        print the version\n\n"
        "Verb options:\n"
        "  --step N         step number\n"
        "  --latest         the latest consistent step (restore)\n"
        "  --rank R         only the files of rank R (restore); the rank (commit)\n"
        "  --no-fallback    restore --latest fails instead of taking an older step\n"
        "  --threads N      parallel downloads (restore; default 4)\n"
        "  --seal-threads N threads compressing new chunks (put; default: CPUs - 1)\n"
        "  --compression auto|lz4  codecs for new chunks (put; default auto)\n"
        "  --to DIR         target directory (restore, get)\n"
        "  --mount M        a ckptfs mount point (commit, wait, status)\n"
        "  --world-size W   number of ranks (commit)\n"
        "  --timeout S      seconds to wait (wait, warmup; default: forever)\n"
        "  --append         add a new sealing key to an existing key file (keygen)\n"
        "  --json           one JSON document on stdout (ls latest restore get put\n"
        "                   verify stats status warmup); nothing on stdout on failure\n\n"
        "Run 'ckptctl VERB --help' for a verb's details; see also ckptctl(1).\n\n" EXIT_CODES_TEXT);
}

static void verb_help(const verb *v)
{
    printf("usage: ckptctl [options] %s\n\n%s\nGlobal options: --store URL, --job J, "
           "--state-dir DIR, --node NAME, -q;\nsee ckptctl --help.\n\n" EXIT_CODES_TEXT,
           v->usage, v->help);
}

/* ---- option parsing ---- */

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;
    if (!*s || *s == '-' || *s == '+' || *s == ' ')
        return -1;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end || errno)
        return -1;
    *out = v;
    return 0;
}

static int bad_value(const char *opt, const char *want, const char *got)
{
    fprintf(stderr, "ckptctl: %s wants %s, got '%s'\n", opt, want, got);
    return EXIT_USAGE;
}

/* Parses argv into c. Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, cli *c)
{
    enum {
        O_STORE = 256,
        O_JOB,
        O_STEP,
        O_TO,
        O_STATE,
        O_NODE,
        O_JSON,
        O_VERSION,
        O_LATEST,
        O_RANK,
        O_NO_FALLBACK,
        O_THREADS,
        O_SEAL_THREADS,
        O_COMPRESSION,
        O_MOUNT,
        O_WORLD,
        O_TIMEOUT,
        O_ENDPOINT,
        O_KEEP_LAST,
        O_KEEP_EVERY,
        O_GRACE,
        O_DRY_RUN,
        O_REPACK_DEAD,
        O_BATCH,
        O_PROGRESS,
        O_COMPACT,
        O_SIGNATURE,
        O_REGION,
        O_ADDRESSING,
        O_CA_FILE,
        O_SSE,
        O_KEY_FILE,
        O_PEER_SECRET,
        O_PEERS,
        O_PEER_CA,
        O_APPEND,
    };
    static const struct option opts[] = {
        {"store", required_argument, NULL, O_STORE},
        {"s3-endpoint", required_argument, NULL, O_ENDPOINT},
        {"s3-signature", required_argument, NULL, O_SIGNATURE},
        {"s3-region", required_argument, NULL, O_REGION},
        {"s3-addressing", required_argument, NULL, O_ADDRESSING},
        {"s3-ca-file", required_argument, NULL, O_CA_FILE},
        {"s3-sse", required_argument, NULL, O_SSE},
        {"encryption-key-file", required_argument, NULL, O_KEY_FILE},
        {"peer-secret-file", required_argument, NULL, O_PEER_SECRET},
        {"peers", required_argument, NULL, O_PEERS},
        {"peer-ca-file", required_argument, NULL, O_PEER_CA},
        {"job", required_argument, NULL, O_JOB},
        {"step", required_argument, NULL, O_STEP},
        {"to", required_argument, NULL, O_TO},
        {"state-dir", required_argument, NULL, O_STATE},
        {"node", required_argument, NULL, O_NODE},
        {"json", no_argument, NULL, O_JSON},
        {"latest", no_argument, NULL, O_LATEST},
        {"rank", required_argument, NULL, O_RANK},
        {"no-fallback", no_argument, NULL, O_NO_FALLBACK},
        {"threads", required_argument, NULL, O_THREADS},
        {"seal-threads", required_argument, NULL, O_SEAL_THREADS},
        {"compression", required_argument, NULL, O_COMPRESSION},
        {"mount", required_argument, NULL, O_MOUNT},
        {"world-size", required_argument, NULL, O_WORLD},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"keep-last", required_argument, NULL, O_KEEP_LAST},
        {"keep-every", required_argument, NULL, O_KEEP_EVERY},
        {"grace", required_argument, NULL, O_GRACE},
        {"dry-run", no_argument, NULL, O_DRY_RUN},
        {"repack-dead", required_argument, NULL, O_REPACK_DEAD},
        {"batch", required_argument, NULL, O_BATCH},
        {"progress", no_argument, NULL, O_PROGRESS},
        {"compact", optional_argument, NULL, O_COMPACT},
        {"append", no_argument, NULL, O_APPEND},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    uint64_t v;
    char *end;
    int ch;
    while ((ch = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
        switch (ch) {
        case O_STORE: c->open.url = optarg; break;
        case O_ENDPOINT: c->open.s3_endpoint = optarg; break;
        case O_SIGNATURE: c->open.s3_signature = optarg; break;
        case O_REGION: c->open.s3_region = optarg; break;
        case O_ADDRESSING: c->open.s3_addressing = optarg; break;
        case O_CA_FILE: c->open.s3_ca_file = optarg; break;
        case O_SSE: c->open.s3_sse = optarg; break;
        case O_KEY_FILE: c->open.encryption_key_file = optarg; break;
        case O_PEER_SECRET: c->open.peer_secret_file = optarg; break;
        case O_PEERS: c->open.peers = optarg; break;
        case O_PEER_CA: c->open.peer_ca_file = optarg; break;
        case O_JOB: c->job = *optarg ? optarg : NULL; break; /* "": none, as for CKPT_JOB */
        case O_STEP:
            if (parse_u64(optarg, &c->step))
                return bad_value("--step", "a non-negative integer", optarg);
            c->have_step = 1;
            c->given |= OPT_STEP;
            break;
        case O_TO:
            c->to = optarg;
            c->given |= OPT_TO;
            break;
        case O_STATE: c->open.state_dir = optarg; break;
        case O_NODE: c->open.node = optarg; break;
        case O_JSON:
            c->json = 1;
            c->given |= OPT_JSON;
            break;
        case O_LATEST:
            c->latest = 1;
            c->given |= OPT_LATEST;
            break;
        case O_RANK:
            if (parse_u64(optarg, &v) || v > INT_MAX)
                return bad_value("--rank", "a rank 0..2^31-1", optarg);
            c->rank = (int)v;
            c->have_rank = 1;
            c->given |= OPT_RANK;
            break;
        case O_NO_FALLBACK:
            c->no_fallback = 1;
            c->given |= OPT_NO_FALLBACK;
            break;
        case O_THREADS:
            if (parse_u64(optarg, &v) || v < 1 || v > 256)
                return bad_value("--threads", "a number 1..256", optarg);
            c->threads = (unsigned)v;
            c->given |= OPT_THREADS;
            break;
        case O_SEAL_THREADS:
            if (parse_u64(optarg, &v) || v < 1 || v > 8)
                return bad_value("--seal-threads", "a number 1..8", optarg);
            c->open.seal_threads = (unsigned)v;
            c->given |= OPT_SEAL;
            break;
        case O_COMPRESSION:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "lz4") != 0)
                return bad_value("--compression", "auto or lz4", optarg);
            c->open.compression = optarg;
            c->given |= OPT_COMPRESS;
            break;
        case O_MOUNT:
            c->mount = optarg;
            c->given |= OPT_MOUNT;
            break;
        case O_WORLD:
            if (parse_u64(optarg, &v) || v < 1 || v > UINT32_MAX)
                return bad_value("--world-size", "a number of ranks >= 1", optarg);
            c->world_size = (uint32_t)v;
            c->have_world = 1;
            c->given |= OPT_WORLD;
            break;
        case O_TIMEOUT:
            c->timeout = strtod(optarg, &end);
            if (!*optarg || *end || !(c->timeout > 0) || c->timeout > 1e9)
                return bad_value("--timeout", "a positive number of seconds", optarg);
            c->given |= OPT_TIMEOUT;
            break;
        case O_KEEP_LAST:
        case O_KEEP_EVERY:
            if (parse_u64(optarg, &v) || v < 1)
                return bad_value(ch == O_KEEP_LAST ? "--keep-last" : "--keep-every",
                                 "a number >= 1", optarg);
            *(ch == O_KEEP_LAST ? &c->keep_last : &c->keep_every) = v;
            c->given |= OPT_GC;
            break;
        case O_GRACE:
            c->grace = strtod(optarg, &end);
            if (!*optarg || *end || !(c->grace > 0) || c->grace > 1e9)
                return bad_value("--grace", "a positive number of seconds", optarg);
            c->given |= OPT_GC;
            break;
        case O_DRY_RUN:
            c->dry_run = 1;
            c->given |= OPT_GC;
            break;
        case O_REPACK_DEAD:
            c->repack_dead = strtod(optarg, &end);
            if (!*optarg || *end || !(c->repack_dead > 0) || c->repack_dead > 100)
                return bad_value("--repack-dead", "a percentage above 0, at most 100", optarg);
            c->given |= OPT_GC;
            break;
        case O_BATCH:
            if (parse_u64(optarg, &v) || v < 1 || v > UINT32_MAX)
                return bad_value("--batch", "a number of objects >= 1", optarg);
            c->batch = (uint32_t)v;
            c->given |= OPT_GC;
            break;
        case O_PROGRESS:
            c->progress = 1;
            c->given |= OPT_GC;
            break;
        case O_COMPACT:
            c->compact = 1;
            c->compact_dead = optarg ? strtod(optarg, &end) : 0;
            if (optarg && (!*optarg || *end || !(c->compact_dead > 0) || c->compact_dead > 100))
                return bad_value("--compact", "a percentage above 0, at most 100", optarg);
            c->given |= OPT_GC;
            break;
        case O_APPEND:
            c->append = 1;
            c->given |= OPT_APPEND;
            break;
        case 'q': c->quiet = 1; break;
        case 'h': c->help = 1; break;
        case O_VERSION: printf("ckptctl %s\n", CKPT_PROJECT_VERSION); return EXIT_OK;
        default: fprintf(stderr, "ckptctl: see ckptctl --help\n"); return EXIT_USAGE;
        }
    }
    return -1;
}

static const verb *find_verb(const char *name)
{
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(name, verbs[i].name))
            return &verbs[i];
    return NULL;
}

/* Refuses options that mean nothing to v, so a typo is not silently ignored. */
static int check_options(const cli *c, const verb *v)
{
    unsigned extra = c->given & ~v->opts;
    for (size_t i = 0; i < sizeof opt_names / sizeof opt_names[0]; i++)
        if (extra & opt_names[i].bit) {
            fprintf(stderr, "ckptctl %s: %s does not apply (see ckptctl %s --help)\n", v->name,
                    opt_names[i].name, v->name);
            return EXIT_USAGE;
        }
    return EXIT_OK;
}

int main(int argc, char **argv)
{
    cli c = {.open = {.url = getenv("CKPT_STORE")}, .job = getenv("CKPT_JOB"), .rank = -1};
    if (c.open.url && !*c.open.url)
        c.open.url = NULL;
    if (c.job && !*c.job)
        c.job = NULL;
    int rc = parse_args(argc, argv, &c);
    if (rc >= 0)
        return rc;
    if (optind >= argc) {
        usage(c.help ? stdout : stderr);
        return c.help ? EXIT_OK : EXIT_USAGE;
    }
    if (!strcmp(argv[optind], "help")) {
        const verb *hv = optind + 1 < argc ? find_verb(argv[optind + 1]) : NULL;
        if (hv)
            verb_help(hv);
        else
            usage(stdout);
        return EXIT_OK;
    }
    const verb *v = find_verb(argv[optind]);
    if (!v) {
        fprintf(stderr, "ckptctl: unknown verb '%s' (see ckptctl --help)\n", argv[optind]);
        return EXIT_USAGE;
    }
    if (c.help) {
        verb_help(v);
        return EXIT_OK;
    }
    if ((rc = check_options(&c, v)))
        return rc;
    c.verb = v->name;
    c.argc = argc - optind - 1;
    c.argv = argv + optind + 1;
    if (!v->needs_store)
        return v->run(&c, NULL);

    char default_url[PATH_MAX + 16];
    if (!c.open.url && !(c.open.url = st_default_store_url(default_url, sizeof default_url))) {
        fprintf(stderr, "ckptctl: cannot derive the default store path; pass --store\n");
        return EXIT_USAGE;
    }
    c.open.warn = print_warning;
    c.open.existing_only = v->needs_store == STORE_EXISTING; /* a typo is not an empty store */
    st_store *s;
    st_err e = st_store_open(&c.open, &s);
    if (e)
        return fail(e);
    rc = v->run(&c, s);
    st_store_close(s);
    return rc;
}
