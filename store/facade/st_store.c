/*
 * st_store — the facade (ckptstore.h), writing side: opening a store (the
 * backend wrapped in a request counter, the local state), put of a whole
 * directory as a step, the job list. Reading (list, latest, restore,
 * verify, stats) is st_store_read.c.
 *
 * Write order for a put is the protocol of docs/PROTOCOL.md: packs (inside
 * st_ingest), then the job registry entry, this node's manifest and, last,
 * the part record (st_catalog_publish).
 */
#include "facade/st_store_impl.h"
#include "backend/st_backend_open.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/st_backend_count.h"
#include "util/st_array.h"
#include "util/st_fsutil.h"
#include "engine/st_ingest.h"
#include "format/st_manifest.h"
#include "peer/st_peer_alone.h"
#include "util/st_logf.h"
#include "peer/st_peer_auth.h"
#include "peer/st_peer_read.h"
#include "engine/st_restore.h"
#include "engine/st_state.h"
#include "format/st_part.h"
#include "engine/st_catalog.h"
#include "engine/st_envelope.h"
#include "engine/st_replay.h"
#include "util/st_keyring.h"

void st_store_warnf(st_store *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st_vlogf(s->warn, s->warn_arg, fmt, ap);
    va_end(ap);
}

/* $env/suffix, or $HOME/fallback/suffix. */
static char *xdg_path(char *buf, size_t cap, const char *env, const char *fallback,
                      const char *suffix)
{
    const char *base = getenv(env);
    int n;
    if (base && base[0] == '/')
        n = snprintf(buf, cap, "%s/%s", base, suffix);
    else {
        const char *home = getenv("HOME");
        n = snprintf(buf, cap, "%s/%s/%s", home && home[0] == '/' ? home : "/tmp", fallback,
                     suffix);
    }
    return n < 0 || (size_t)n >= cap ? NULL : buf;
}

char *st_default_store_url(char *buf, size_t cap)
{
    char path[PATH_MAX];
    if (!xdg_path(path, sizeof path, "XDG_DATA_HOME", ".local/share", "ckptfs/store"))
        return NULL;
    int n = snprintf(buf, cap, "file://%s", path);
    return n < 0 || (size_t)n >= cap ? NULL : buf;
}

/* Default local state dir: $XDG_CACHE_HOME/ckptfs (or ~/.cache/ckptfs). */
static char *default_state_dir(char *buf, size_t cap)
{
    return xdg_path(buf, cap, "XDG_CACHE_HOME", ".cache", "ckptfs");
}

/* The read view with replicated steps (docs/PEERS.md, "What a reader
 * does"); its pack cache is a directory of this process under state_dir.
 * Given peers, a store that cannot be reached is replaced under the view by
 * what the peers hold ("Restoring from peers alone"). */
static st_err open_peer_view(st_store *s, const st_store_options *opts, const char *state_dir,
                             const char *store_down)
{
    st_backend *borrow = NULL;
    if (!(s->peer_secret = calloc(1, sizeof *s->peer_secret)))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    st_err e = st_peer_secret_load(opts->peer_secret_file, s->peer_secret);
    if (!e)
        e = st_peer_secret_set_ca(s->peer_secret, opts->peer_ca_file);
    if (e)
        return e;
    int n = snprintf(s->peer_cache, sizeof s->peer_cache, "%s/peer-read.%ld", state_dir,
                     (long)getpid());
    if (n < 0 || (size_t)n >= sizeof s->peer_cache)
        return st_seterr(ST_ERR_INVALID, "state directory path too long");
    if ((e = st_backend_count_borrow(s->backend, &s->reader_requests, &borrow)))
        return e;
    st_peer_read_opts ro = {.self_node = s->node,
                            .secret = s->peer_secret,
                            .cache_dir = s->peer_cache,
                            .log = s->warn,
                            .log_arg = s->warn_arg};
    st_peer_alone_opts ao = {.peers = opts->peers,
                             .store_down = store_down,
                             .self_node = s->node,
                             .secret = s->peer_secret,
                             .keyring = s->keyring,
                             .log = s->warn,
                             .log_arg = s->warn_arg};
    return st_peer_reader_open(borrow, &ro, &ao, &s->peers_alone, &s->reader);
}

st_err st_store_open(const st_store_options *opts, st_store **out)
{
    *out = NULL;
    st_store *s = calloc(1, sizeof *s);
    if (!s)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    s->warn = opts->warn;
    s->warn_arg = opts->warn_arg;
    s->backend_observer = (st_backend_observer){.log = s->warn, .arg = s->warn_arg};
    s->chunker = opts->chunker ? *opts->chunker : st_chunker_default_params;
    s->seal_threads = opts->seal_threads;
    st_err bad = st_ingest_compression(opts->compression, &s->compression_lz4);
    if (bad) {
        free(s);
        return bad;
    }
    if (opts->node) {
        if (!st_name_is_valid(opts->node, ST_NODE_MAX)) {
            free(s);
            return st_seterr(ST_ERR_INVALID, "invalid node name '%.64s': use A-Z a-z 0-9 . _ -",
                             opts->node);
        }
        strcpy(s->node, opts->node);
    } else {
        st_default_node_name(s->node);
    }

    char state_dir[PATH_MAX], db[PATH_MAX + 64];
    st_backend_opts bo = {.s3_endpoint = opts->s3_endpoint,
                          .s3_signature = opts->s3_signature,
                          .s3_region = opts->s3_region,
                          .s3_addressing = opts->s3_addressing,
                          .s3_ca_file = opts->s3_ca_file,
                          .s3_sse = opts->s3_sse,
                          .existing_only = opts->existing_only,
                          .observer = &s->backend_observer};
    const char *key_file = opts->encryption_key_file;
    if (!key_file || !*key_file)
        key_file = getenv("CKPT_ENCRYPTION_KEY_FILE");
    st_err e = key_file && *key_file ? st_keyring_load(key_file, &s->keyring) : ST_OK;
    if (!e)
        e = st_backend_open_opts(opts->url, &bo, &s->backend);
    /* The mixing rule's HEAD (and listing) before the counter: the counts
     * are the verb's own requests, as before encryption. */
    /* Why the store could not be read here, when peers may stand in for it. */
    char store_down[512] = "";
    if (!e)
        e = st_envelope_check(s->backend, s->keyring, opts->url);
    if (e == ST_ERR_TRANSIENT && opts->peers && opts->peer_secret_file) {
        /* Unreachable, and peers are given: the reader from the peers
         * alone (open_peer_view) takes over without asking the store again,
         * and never writes (docs/PEERS.md, "Restoring from peers alone"). */
        snprintf(store_down, sizeof store_down, "%s", st_errmsg());
        st_clearerr();
        e = ST_OK;
    }
    if (!e)
        e = st_backend_count_wrap(&s->backend, &s->requests);
    if (!e && s->keyring)
        e = st_envelope_wrap(&s->backend, s->keyring);
    if (e)
        goto fail;
    if (opts->state_dir)
        snprintf(state_dir, sizeof state_dir, "%s", opts->state_dir);
    else if (!default_state_dir(state_dir, sizeof state_dir)) {
        e = st_seterr(ST_ERR_INVALID, "cannot derive the local state directory");
        goto fail;
    }
    if ((e = st_mkdir_p(state_dir)))
        goto fail;
    /* One index per store: its content describes that store only. */
    snprintf(db, sizeof db, "%s/index-%016" PRIx64 ".db", state_dir,
             st_hash64(opts->url, strlen(opts->url)));
    if ((e = st_state_open(db, &s->state)))
        goto fail;
    /* Every part record read or written is judged against the same
     * database (docs/ENCRYPTION.md, "Replay"), above the envelope. */
    if ((e = st_replay_wrap(&s->backend, db)))
        goto fail;
    s->reader = s->backend;
    if ((opts->peers || opts->peer_ca_file) && !opts->peer_secret_file) {
        e = st_seterr(ST_ERR_INVALID, "peers need the cluster secret (peer_secret_file)");
        goto fail;
    }
    if (opts->peer_secret_file &&
        (e = open_peer_view(s, opts, state_dir, store_down[0] ? store_down : NULL))) {
        s->reader = s->backend;
        goto fail;
    }
    *out = s;
    return ST_OK;
fail:
    st_store_close(s);
    return e;
}

void st_store_close(st_store *s)
{
    if (!s)
        return;
    st_state_close(s->state);
    if (s->reader && s->reader != s->backend) {
        st_backend_close(s->reader); /* empties the cache directory */
        rmdir(s->peer_cache);
    }
    if (s->peer_secret) {
        st_peer_secret_wipe(s->peer_secret);
        free(s->peer_secret);
    }
    st_backend_close(s->backend);
    st_keyring_free(s->keyring);
    free(s);
}

/* ---- the dedup index learns what other writers stored ---- */

/* ---- put ---- */

typedef struct walk_ctx {
    st_store *s;
    st_ingest *ingest;
    uint64_t skipped;
} walk_ctx;

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted entry names of a directory (without . and ..). */
static st_err read_dir_sorted(const char *path, char ***names, size_t *n)
{
    DIR *d = opendir(path);
    *names = NULL;
    *n = 0;
    if (!d)
        return st_seterr(ST_ERR_IO, "open directory %s: %s", path, strerror(errno));
    size_t cap = 0;
    st_err e = ST_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if ((e = st_array_grow((void **)names, &cap, *n + 1, sizeof **names)))
            break;
        if (!((*names)[*n] = strdup(de->d_name))) {
            e = st_seterr(ST_ERR_NOMEM, "out of memory");
            break;
        }
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(*names, *n, sizeof **names, cmp_names);
    return e;
}

/* Stores everything under root/rel (rel "" for the root itself), in tree
 * order (st_path_cmp): depth first, each directory's names sorted by byte,
 * which puts "d/x" before "d-b" as tree order does (a name holds no '/').
 * The ingest wants that order (st_ingest.h). */
static st_err walk_put(walk_ctx *w, const char *root, const char *rel)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    char **names;
    size_t n;
    st_err e = read_dir_sorted(path, &names, &n);
    for (size_t i = 0; !e && i < n; i++) {
        char child_rel[PATH_MAX], child[PATH_MAX];
        if (snprintf(child_rel, sizeof child_rel, "%s%s%s", rel, rel[0] ? "/" : "", names[i]) >=
                (int)sizeof child_rel ||
            snprintf(child, sizeof child, "%s/%s", root, child_rel) >= (int)sizeof child) {
            e = st_seterr(ST_ERR_INVALID, "path too long under %s", root);
            break;
        }
        struct stat st;
        if (lstat(child, &st) < 0) {
            e = st_seterr(ST_ERR_IO, "stat %s: %s", child, strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            e = walk_put(w, root, child_rel);
        } else if (S_ISREG(st.st_mode)) {
            int fd = open(child, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
            if (fd < 0)
                e = st_seterr(ST_ERR_IO, "open %s: %s", child, strerror(errno));
            else if (fstat(fd, &st) < 0)
                e = st_seterr(ST_ERR_IO, "stat %s: %s", child, strerror(errno));
            else
                e = st_ingest_file(w->ingest, fd, child_rel, &st, -1);
            if (fd >= 0)
                close(fd);
        } else {
            w->skipped++;
            st_store_warnf(w->s, "skipping %s: not a regular file or directory", child);
        }
    }
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return e;
}

st_err st_store_put_dir(st_store *s, const char *job, uint64_t step, const char *dir,
                        st_put_result *res)
{
    char key[ST_KEY_MAX];
    uint64_t size;
    st_put_result r = {0};
    st_ingest *ingest = NULL;
    st_manifest m = {0};
    const uint64_t heads0 = st_backend_counts_of(&s->requests, ST_REQ_STAT);
    const uint64_t gets0 = st_backend_counts_of(&s->requests, ST_REQ_GET);
    const uint64_t lists0 = st_backend_counts_of(&s->requests, ST_REQ_LIST);
    st_err e = st_key_part(key, sizeof key, job, step, s->node);
    if (e)
        return e;
    e = st_stat(s->backend, key, &size);
    if (e == ST_OK)
        return st_seterr(ST_ERR_EXISTS, "step %" PRIu64 " of job %s already exists in the store",
                         step, job);
    if (e != ST_ERR_NOT_FOUND)
        return e;
    struct stat st;
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
        return st_seterr(ST_ERR_INVALID, "%s is not a directory", dir);

    if ((e = st_catalog_sync_index(s->backend, s->state, job, s->warn, s->warn_arg)))
        return e;

    walk_ctx w = {.s = s};
    if ((e = st_ingest_new(s->backend, s->state, job, &s->chunker, &ingest)))
        goto out;
    if (s->seal_threads)
        st_ingest_set_seal_threads(ingest, s->seal_threads);
    st_ingest_set_lz4_only(ingest, s->compression_lz4);
    st_ingest_set_keyring(ingest, s->keyring);
    w.ingest = ingest;
    if ((e = walk_put(&w, dir, "")))
        goto out;
    if ((e = st_ingest_finish(ingest, &m)))
        goto out;
    m.step = step;
    m.created_ns = st_now_ns();
    m.node = s->node;
    m.job = (char *)job;
    st_part part = {.revision = 1, .complete = 1}; /* ckptctl put: one writer, whole step */
    const st_publish_check look = st_ingest_last_look(ingest);
    e = st_catalog_publish(s->backend, &m, &part, &look, 1, &r.puts);
    m.node = m.job = NULL; /* borrowed, not st_manifest_free()'s to free */
    if (e)
        goto out;

    const st_ingest_stats *is = st_ingest_get_stats(ingest);
    r.files = is->files;
    r.skipped = w.skipped;
    r.logical_bytes = is->logical_bytes;
    r.chunks = is->chunks;
    r.new_chunks = is->new_chunks;
    r.new_raw_bytes = is->new_raw_bytes;
    r.stored_bytes = is->stored_bytes;
    r.packs = is->packs;
    r.bundles = is->bundles;
    r.bundled_files = is->bundled_files;
    r.puts += is->packs;
    r.heads = st_backend_counts_of(&s->requests, ST_REQ_STAT) - heads0;
    r.gets = st_backend_counts_of(&s->requests, ST_REQ_GET) - gets0;
    r.lists = st_backend_counts_of(&s->requests, ST_REQ_LIST) - lists0;
    if (res)
        *res = r;
out:
    st_manifest_free(&m);
    st_ingest_free(ingest);
    return e;
}

/* ---- listings ---- */

st_err st_store_list_jobs(st_store *s, char ***jobs, size_t *n)
{
    return st_catalog_list_jobs(s->reader, jobs, n);
}

void st_store_free_names(char **names, size_t n)
{
    st_catalog_free_names(names, n);
}
