/*
 * st_peer_cache — a peer's directory of replicas. See the header for the
 * layout, the replica states and the eviction order.
 *
 * The tables are plain arrays searched linearly: a peer holds a few
 * thousand packs (24 MiB each) and far fewer replicas. Every field of
 * struct st_peer_cache below `lock` is guarded by it; the directory fds
 * are set at open and read only afterwards.
 */
#include "peer/st_peer_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/st_pack.h"
#include "format/st_part.h"
#include "util/st_array.h"
#include "util/st_fsutil.h"

#define STATE_MAGIC   "ckptfs-peer-state v1"
#define STATE_MAX     (1u << 20) /* bytes of a state file */
#define HASH_BUF      (1u << 20) /* bytes read at a time to check a pack */
#define PART_PATH_MAX (ST_JOB_MAX + ST_NODE_MAX + 80)

typedef struct cached_pack {
    st_id id;
    uint64_t size;
    uint32_t refs;      /* replicas that list it */
    int64_t arrival_ns; /* monotonic; at open: the time of the open */
} cached_pack;

typedef struct cached_part {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    char node[ST_NODE_MAX + 1];
    uint32_t rev;
    int durable;
    uint64_t arrival; /* order of arrival, kept in the state file */
    uint64_t manifest_size;
    st_id manifest_id;    /* XXH3-128 of the manifest's bytes (the listing says it) */
    uint64_t record_size; /* the replica record's bytes held; 0: none */
    st_id *packs;
    size_t npacks;
} cached_part;

struct st_peer_cache {
    int root_fd, tmp_fd;
    uint64_t cap;
    int64_t orphan_grace_ns;
    pthread_mutex_t lock;
    cached_pack *packs; /* lock */
    size_t npacks, packs_alloc;
    cached_part *parts; /* lock */
    size_t nparts, parts_alloc;
    uint64_t bytes, next_arrival, tmp_seq;                                              /* lock */
    uint64_t packs_received, bytes_received, evictions, refusals_full, corrupt_refused; /* lock */
    const st_keyring *keyring; /* set before serving, read only afterwards; NULL: none */
};

/* ---- paths ---- */

static void pack_path(const st_id *id, char *dir, char *file)
{
    char hex[ST_ID_HEX_LEN + 1];
    st_id_hex(id, hex);
    snprintf(dir, 16, "packs/%.2s", hex);
    snprintf(file, 64, "packs/%.2s/%s.pack", hex, hex);
}

/* parts/<job>/<step20> into dir, and with "/<node>.r<rev>.<ext>" into file. */
static void part_path(const st_peer_part_name *p, const char *ext, char *dir, char *file)
{
    /* Precisions: names are at most 128 bytes (validated), which the
     * compiler cannot know. */
    snprintf(dir, PART_PATH_MAX, "parts/%.128s/%020" PRIu64, p->job, p->step);
    snprintf(file, PART_PATH_MAX, "%.160s/%.128s.r%" PRIu32 ".%.8s", dir, p->node, p->rev, ext);
}

static int part_is(const cached_part *r, const st_peer_part_name *p)
{
    return r->step == p->step && r->rev == p->rev && !strcmp(r->job, p->job) &&
           !strcmp(r->node, p->node);
}

static st_peer_part_name name_of(const cached_part *r)
{
    return (st_peer_part_name){r->job, r->step, r->node, r->rev};
}

static st_err fsync_dir_at(st_peer_cache *c, const char *rel)
{
    int fd = openat(c->root_fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    st_err e = ST_OK;
    if (fd < 0 || fsync(fd) < 0)
        e = st_seterr(ST_ERR_IO, "peer cache: fsync of directory %s: %s", rel, strerror(errno));
    if (fd >= 0)
        close(fd);
    return e;
}

/* mkdir of every component of the relative path rel under the root, 0700;
 * the parent of a directory made here is fsynced, so the new entry lasts. */
static st_err mkdirs_at(st_peer_cache *c, const char *rel)
{
    char buf[PART_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", rel);
    char *parent_end = NULL; /* the '/' before the component at hand */
    for (char *p = buf;; p++) {
        if (*p != '/' && *p)
            continue;
        char was = *p;
        *p = '\0';
        st_err e = ST_OK;
        if (mkdirat(c->root_fd, buf, 0700) == 0) {
            if (parent_end)
                *parent_end = '\0';
            e = fsync_dir_at(c, parent_end ? buf : ".");
            if (parent_end)
                *parent_end = '/';
        } else if (errno != EEXIST) {
            e = st_seterr(st_err_of_write_errno(errno), "peer cache: mkdir %s: %s", buf,
                          strerror(errno));
        }
        if (e || !was)
            return e;
        *p = was;
        parent_end = p;
    }
}

/* Publishes tmp/name (fd open on it) as the relative path file in dir:
 * fsync, rename, fsync of dir. */
static st_err publish_tmp(st_peer_cache *c, const char *name, int fd, const char *dir,
                          const char *file)
{
    st_err e = mkdirs_at(c, dir);
    if (!e && fsync(fd) < 0)
        e = st_seterr(ST_ERR_IO, "peer cache: fsync of %s: %s", file, strerror(errno));
    if (!e && renameat(c->tmp_fd, name, c->root_fd, file) < 0)
        e = st_seterr(ST_ERR_IO, "peer cache: rename into %s: %s", file, strerror(errno));
    return e ? e : fsync_dir_at(c, dir);
}

/* Writes data as the relative path file in dir, through tmp/. Under lock
 * (for tmp_seq). */
static st_err publish_bytes(st_peer_cache *c, const char *dir, const char *file, const void *data,
                            size_t len)
{
    char name[64];
    snprintf(name, sizeof name, "%" PRIu64 ".file", c->tmp_seq++);
    int fd = openat(c->tmp_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
        return st_seterr(st_err_of_write_errno(errno), "peer cache: create tmp/%s: %s", name,
                         strerror(errno));
    st_err e = st_write_all(fd, data, len, file);
    if (!e)
        e = publish_tmp(c, name, fd, dir, file);
    close(fd);
    if (e)
        unlinkat(c->tmp_fd, name, 0);
    return e;
}

/* ---- tables (under lock) ---- */

static cached_pack *find_pack(st_peer_cache *c, const st_id *id)
{
    for (size_t i = 0; i < c->npacks; i++)
        if (!st_id_cmp(&c->packs[i].id, id))
            return &c->packs[i];
    return NULL;
}

static st_err add_pack(st_peer_cache *c, const st_id *id, uint64_t size)
{
    st_err e = st_array_grow((void **)&c->packs, &c->packs_alloc, c->npacks + 1, sizeof *c->packs);
    if (e)
        return e;
    c->packs[c->npacks++] = (cached_pack){*id, size, 0, st_mono_ns()};
    c->bytes += size;
    return ST_OK;
}

/* Deletes the pack's file and its entry. */
static void drop_pack(st_peer_cache *c, cached_pack *p)
{
    char dir[16], file[64];
    pack_path(&p->id, dir, file);
    unlinkat(c->root_fd, file, 0);
    c->bytes -= p->size;
    *p = c->packs[--c->npacks];
}

/* Lets go of r's packs; with drop, a pack no replica references any more
 * goes too (eviction, a replica replaced), else it stays as an orphan. */
static void unref_packs(st_peer_cache *c, const cached_part *r, int drop)
{
    for (size_t i = 0; i < r->npacks; i++) {
        cached_pack *p = find_pack(c, &r->packs[i]);
        if (p && p->refs && --p->refs == 0 && drop)
            drop_pack(c, p);
    }
}

static cached_part *find_part(st_peer_cache *c, const st_peer_part_name *n)
{
    for (size_t i = 0; i < c->nparts; i++)
        if (part_is(&c->parts[i], n))
            return &c->parts[i];
    return NULL;
}

/* Forgets a replica; with delete_files, its manifest and state go too, and
 * the packs no other replica references. */
static void drop_part(st_peer_cache *c, cached_part *r, int delete_files)
{
    if (delete_files) {
        char dir[PART_PATH_MAX], file[PART_PATH_MAX];
        st_peer_part_name n = name_of(r);
        part_path(&n, "state", dir, file);
        unlinkat(c->root_fd, file, 0);
        part_path(&n, "manifest", dir, file);
        unlinkat(c->root_fd, file, 0);
        part_path(&n, "record", dir, file);
        unlinkat(c->root_fd, file, 0);
        unref_packs(c, r, 1);
    }
    c->bytes -= r->manifest_size + r->record_size;
    free(r->packs);
    *r = c->parts[--c->nparts];
}

static st_err add_part(st_peer_cache *c, const cached_part *r)
{
    st_err e = st_array_grow((void **)&c->parts, &c->parts_alloc, c->nparts + 1, sizeof *c->parts);
    if (e)
        return e;
    c->parts[c->nparts++] = *r;
    c->bytes += r->manifest_size + r->record_size;
    return ST_OK;
}

/* The oldest durable replica, or NULL. */
static cached_part *oldest_durable(st_peer_cache *c)
{
    cached_part *best = NULL;
    for (size_t i = 0; i < c->nparts; i++)
        if (c->parts[i].durable && (!best || c->parts[i].arrival < best->arrival))
            best = &c->parts[i];
    return best;
}

/* The oldest pack no replica references that arrived orphan_grace_ns ago. */
static cached_pack *oldest_orphan(st_peer_cache *c)
{
    int64_t now = st_mono_ns();
    cached_pack *best = NULL;
    for (size_t i = 0; i < c->npacks; i++) {
        cached_pack *p = &c->packs[i];
        if (!p->refs && now - p->arrival_ns >= c->orphan_grace_ns &&
            (!best || p->arrival_ns < best->arrival_ns))
            best = p;
    }
    return best;
}

static int fits(const st_peer_cache *c, uint64_t bytes)
{
    return !c->cap || (c->bytes <= c->cap && bytes <= c->cap - c->bytes);
}

/* Evicts in the header's order until bytes more fit; ST_ERR_NOSPACE
 * (counted) when they cannot. */
static st_err make_room(st_peer_cache *c, uint64_t bytes)
{
    while (!fits(c, bytes)) {
        cached_part *r = oldest_durable(c);
        cached_pack *p = r ? NULL : oldest_orphan(c);
        if (!r && !p) {
            c->refusals_full++;
            return st_seterr(ST_ERR_NOSPACE,
                             "peer cache full: %" PRIu64 " of %" PRIu64
                             " bytes held by replicas not yet durable, %" PRIu64 " more wanted",
                             c->bytes, c->cap, bytes);
        }
        if (r)
            drop_part(c, r, 1);
        else
            drop_pack(c, p);
        c->evictions++;
    }
    return ST_OK;
}

/* ---- state files ---- */

static st_err write_state(st_peer_cache *c, const cached_part *r)
{
    st_bytes b = {0};
    char line[96], hex[ST_ID_HEX_LEN + 1];
    int n = snprintf(line, sizeof line, "%s\nstate %s\narrival %" PRIu64 "\n", STATE_MAGIC,
                     r->durable ? "durable" : "held", r->arrival);
    st_err e = st_bytes_append(&b, line, (size_t)n);
    for (size_t i = 0; !e && i < r->npacks; i++) {
        n = snprintf(line, sizeof line, "pack %s\n", st_id_hex(&r->packs[i], hex));
        e = st_bytes_append(&b, line, (size_t)n);
    }
    char dir[PART_PATH_MAX], file[PART_PATH_MAX];
    st_peer_part_name name = name_of(r);
    part_path(&name, "state", dir, file);
    if (!e)
        e = publish_bytes(c, dir, file, b.data, b.len);
    st_bytes_free(&b);
    return e;
}

/* Parses a state file's text into r's state, arrival and packs. 0 or -1. */
static int parse_state(char *text, cached_part *r)
{
    char *save = NULL;
    char *line = strtok_r(text, "\n", &save);
    if (!line || strcmp(line, STATE_MAGIC))
        return -1;
    int have_state = 0;
    size_t packs_alloc = 0;
    while ((line = strtok_r(NULL, "\n", &save))) {
        if (!strcmp(line, "state held") || !strcmp(line, "state durable")) {
            r->durable = !strcmp(line, "state durable");
            have_state = 1;
        } else if (!strncmp(line, "arrival ", 8)) {
            r->arrival = strtoull(line + 8, NULL, 10);
        } else if (!strncmp(line, "pack ", 5)) {
            st_id id;
            if (st_id_parse(line + 5, &id) ||
                st_array_grow((void **)&r->packs, &packs_alloc, r->npacks + 1, sizeof id))
                return -1;
            r->packs[r->npacks++] = id;
        }
    }
    return have_state ? 0 : -1;
}

/* ---- open: rebuild the tables from the files ---- */

typedef int (*entry_cb)(st_peer_cache *c, int dirfd, const char *rel, const char *name);

/* Calls cb for every entry of the directory rel (under the root) but . and
 * .., stopping at the first non-zero return (which it returns). */
static int for_each_entry(st_peer_cache *c, const char *rel, entry_cb cb)
{
    int fd = openat(c->root_fd, rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0; /* nothing there */
    }
    int rc = 0;
    struct dirent *de;
    while (!rc && (de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            rc = cb(c, dirfd(d), rel, de->d_name);
    closedir(d);
    return rc;
}

static int load_pack_file(st_peer_cache *c, int dirfd, const char *rel, const char *name)
{
    st_id id;
    char hex[ST_ID_HEX_LEN + 1];
    struct stat st;
    size_t n = strlen(name);
    if (n != ST_ID_HEX_LEN + 5 || strcmp(name + ST_ID_HEX_LEN, ".pack"))
        return 0;
    memcpy(hex, name, ST_ID_HEX_LEN);
    hex[ST_ID_HEX_LEN] = '\0';
    if (st_id_parse(hex, &id) || strncmp(rel + 6, hex, 2) ||
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
        find_pack(c, &id))
        return 0;
    return add_pack(c, &id, (uint64_t)st.st_size) ? -1 : 0;
}

static int load_pack_dir(st_peer_cache *c, int dirfd, const char *rel, const char *name)
{
    (void)dirfd;
    (void)rel;
    char sub[16];
    if (strlen(name) != 2 || st_hex_value(name[0]) < 0 || st_hex_value(name[1]) < 0)
        return 0;
    snprintf(sub, sizeof sub, "packs/%s", name);
    return for_each_entry(c, sub, load_pack_file);
}

/* The XXH3-128 of the manifest file `name` (size bytes) in dirfd; 0 or -1. */
static int manifest_id_at(int dirfd, const char *name, uint64_t size, st_id *id)
{
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return -1;
    st_bytes b = {0};
    size_t got = 0;
    int rc = st_bytes_reserve(&b, (size_t)size) ||
             st_read_full(fd, b.data, (size_t)size, &got, name) || got != size;
    if (!rc)
        *id = st_id_of(b.data, got);
    st_bytes_free(&b);
    close(fd);
    return rc ? -1 : 0;
}

/* Reads the state file `name` in the step directory rel into a replica. */
static int load_state_file(st_peer_cache *c, int dirfd, const char *rel, const char *name)
{
    cached_part r = {0};
    const char *job = rel + 6, *slash = strchr(job, '/');
    /* The last ".r": a node name may hold one too ("gpu.rack1"). */
    const char *dot_r = NULL;
    for (const char *at = strstr(name, ".r"); at; at = strstr(at + 1, ".r"))
        dot_r = at;
    size_t n = strlen(name);
    if (!slash || !dot_r || n < 6 || strcmp(name + n - 6, ".state"))
        return 0;
    snprintf(r.job, sizeof r.job, "%.*s", (int)(slash - job), job);
    snprintf(r.node, sizeof r.node, "%.*s", (int)(dot_r - name), name);
    char *end;
    r.step = strtoull(slash + 1, NULL, 10);
    unsigned long rev = strtoul(dot_r + 2, &end, 10);
    if (strcmp(end, ".state") || rev > UINT32_MAX || !st_name_is_valid(r.node, ST_NODE_MAX))
        return 0;
    r.rev = (uint32_t)rev;
    char manifest[PART_PATH_MAX];
    snprintf(manifest, sizeof manifest, "%s.r%" PRIu32 ".manifest", r.node, r.rev);
    struct stat st;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char *text = calloc(1, STATE_MAX + 1);
    size_t got = 0;
    int ok = fd >= 0 && text && !st_read_full(fd, text, STATE_MAX, &got, name) &&
             !parse_state(text, &r) && fstatat(dirfd, manifest, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
             S_ISREG(st.st_mode);
    if (fd >= 0)
        close(fd);
    free(text);
    if (!ok) {
        /* A state without its manifest, or unreadable: not a replica. */
        free(r.packs);
        unlinkat(dirfd, name, 0);
        return 0;
    }
    r.manifest_size = (uint64_t)st.st_size;
    if (manifest_id_at(dirfd, manifest, r.manifest_size, &r.manifest_id)) {
        free(r.packs);
        unlinkat(dirfd, name, 0);
        return 0;
    }
    char record[PART_PATH_MAX];
    snprintf(record, sizeof record, "%s.r%" PRIu32 ".record", r.node, r.rev);
    if (fstatat(dirfd, record, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
        r.record_size = (uint64_t)st.st_size;
    for (size_t i = 0; i < r.npacks; i++) {
        cached_pack *p = find_pack(c, &r.packs[i]);
        if (p)
            p->refs++;
    }
    if (r.arrival >= c->next_arrival)
        c->next_arrival = r.arrival + 1;
    if (add_part(c, &r)) {
        free(r.packs);
        return -1;
    }
    return 0;
}

static int load_step_dir(st_peer_cache *c, int dirfd, const char *rel, const char *name)
{
    (void)dirfd;
    char sub[PART_PATH_MAX];
    if (strlen(name) != ST_STEP_DIGITS || strspn(name, "0123456789") != ST_STEP_DIGITS)
        return 0;
    snprintf(sub, sizeof sub, "%.160s/%.20s", rel, name);
    return for_each_entry(c, sub, load_state_file);
}

static int load_job_dir(st_peer_cache *c, int dirfd, const char *rel, const char *name)
{
    (void)dirfd;
    (void)rel;
    char sub[PART_PATH_MAX];
    if (!st_name_is_valid(name, ST_JOB_MAX))
        return 0;
    snprintf(sub, sizeof sub, "parts/%s", name);
    return for_each_entry(c, sub, load_step_dir);
}

static int remove_tmp_entry(st_peer_cache *c, int dirfd, const char *rel, const char *name)
{
    (void)c;
    (void)rel;
    unlinkat(dirfd, name, 0);
    return 0;
}

st_err st_peer_cache_open(const char *dir, uint64_t cap, int64_t orphan_grace_ns,
                          st_peer_cache **out)
{
    *out = NULL;
    st_err e = st_mkdir_p_mode(dir, 0700);
    if (!e)
        e = st_dir_check_private(dir, 0, "peer directory");
    if (e)
        return e;
    st_peer_cache *c = calloc(1, sizeof *c);
    if (!c)
        return st_seterr(ST_ERR_NOMEM, "peer cache: out of memory");
    c->cap = cap;
    c->orphan_grace_ns = orphan_grace_ns > 0 ? orphan_grace_ns : ST_PEER_ORPHAN_NS;
    c->tmp_fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    c->root_fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c->root_fd < 0) {
        e = st_seterr(ST_ERR_IO, "peer directory %s: %s", dir, strerror(errno));
        goto out;
    }
    if ((e = mkdirs_at(c, "packs")) || (e = mkdirs_at(c, "parts")) || (e = mkdirs_at(c, "tmp")))
        goto out;
    if (for_each_entry(c, "tmp", remove_tmp_entry) || for_each_entry(c, "packs", load_pack_dir) ||
        for_each_entry(c, "parts", load_job_dir)) {
        e = st_seterr(ST_ERR_NOMEM, "peer directory %s: out of memory reading it", dir);
        goto out;
    }
    c->tmp_fd = openat(c->root_fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (c->tmp_fd < 0)
        e = st_seterr(ST_ERR_IO, "peer directory %s/tmp: %s", dir, strerror(errno));
out:
    if (e) {
        st_peer_cache_close(c);
        return e;
    }
    *out = c;
    return ST_OK;
}

void st_peer_cache_close(st_peer_cache *c)
{
    if (!c)
        return;
    while (c->nparts)
        drop_part(c, &c->parts[c->nparts - 1], 0);
    free(c->parts);
    free(c->packs);
    if (c->root_fd >= 0)
        close(c->root_fd);
    if (c->tmp_fd >= 0)
        close(c->tmp_fd);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- packs ---- */

int st_peer_cache_has_pack(st_peer_cache *c, const st_id *pack)
{
    pthread_mutex_lock(&c->lock);
    int has = find_pack(c, pack) != NULL;
    pthread_mutex_unlock(&c->lock);
    return has;
}

st_err st_peer_cache_could_fit(st_peer_cache *c, uint64_t bytes)
{
    pthread_mutex_lock(&c->lock);
    uint64_t evictable = 0;
    for (size_t i = 0; i < c->nparts; i++)
        if (c->parts[i].durable)
            evictable += c->parts[i].manifest_size + c->parts[i].record_size;
    int64_t now = st_mono_ns();
    for (size_t i = 0; i < c->npacks; i++) {
        const cached_pack *p = &c->packs[i];
        int held = 0;
        for (size_t j = 0; !held && j < c->nparts; j++)
            for (size_t k = 0; !held && !c->parts[j].durable && k < c->parts[j].npacks; k++)
                held = !st_id_cmp(&c->parts[j].packs[k], &p->id);
        if (!held && (p->refs || now - p->arrival_ns >= c->orphan_grace_ns))
            evictable += p->size;
    }
    st_err e = ST_OK;
    if (c->cap && (bytes > c->cap || c->bytes - evictable > c->cap - bytes)) {
        c->refusals_full++;
        e = st_seterr(ST_ERR_NOSPACE, "peer cache full: %" PRIu64 " more bytes do not fit", bytes);
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

st_err st_peer_cache_tmp_create(st_peer_cache *c, int *fd, char name[64])
{
    pthread_mutex_lock(&c->lock);
    snprintf(name, 64, "%" PRIu64 ".pack", c->tmp_seq++);
    pthread_mutex_unlock(&c->lock);
    *fd = openat(c->tmp_fd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (*fd < 0)
        return st_seterr(st_err_of_write_errno(errno), "peer cache: create tmp/%s: %s", name,
                         strerror(errno));
    return ST_OK;
}

void st_peer_cache_tmp_remove(st_peer_cache *c, const char *name)
{
    unlinkat(c->tmp_fd, name, 0);
}

void st_peer_cache_count_corrupt(st_peer_cache *c)
{
    pthread_mutex_lock(&c->lock);
    c->corrupt_refused++;
    pthread_mutex_unlock(&c->lock);
}

void st_peer_cache_set_keyring(st_peer_cache *c, const st_keyring *kr)
{
    c->keyring = kr;
}

/* The trailer (with its footer) of the pack in fd, size bytes, whose footer
 * said trailer_len: st_pack_sealed_trailer_decode or st_pack_trailer_decode
 * on what it reads. */
static st_err decode_tail(const st_peer_cache *c, int fd, uint64_t size, uint32_t trailer_len,
                          int sealed)
{
    size_t tail_len = (size_t)trailer_len + ST_PACK_FOOTER_LEN;
    uint8_t *tail = malloc(tail_len);
    if (!tail)
        return st_seterr(ST_ERR_NOMEM, "peer cache: out of memory");
    st_pack_entry *entries = NULL;
    size_t n = 0;
    st_err e = ST_ERR_CORRUPT;
    uint8_t header[ST_PACK_HEADER_LEN];
    st_pack_seal seal;
    st_crypt_objkey k;
    if (pread(fd, tail, tail_len, (off_t)(size - tail_len)) != (ssize_t)tail_len)
        e = ST_ERR_CORRUPT;
    else if (!sealed)
        e = st_pack_trailer_decode(tail, tail_len, size, &entries, &n);
    else if (size < ST_PACK_HEADER_LEN ||
             pread(fd, header, sizeof header, 0) != (ssize_t)sizeof header ||
             st_pack_header_decode("the pack sent", header, &seal))
        e = ST_ERR_CORRUPT;
    else if (!(e = st_pack_key(c->keyring, "the pack sent", &seal, &k))) {
        e = st_pack_sealed_trailer_decode(&k, "the pack sent", &seal, tail, tail_len, size,
                                          &entries, &n);
        st_crypt_objkey_wipe(&k);
    }
    free(entries);
    free(tail);
    return e;
}

/* Decodes the trailer of the pack in fd (size bytes), a sealed one (CKp2)
 * with the keyring as the store's reader does. ST_OK, ST_ERR_CORRUPT, or
 * ST_ERR_KEY for a sealed pack this peer holds no key of. */
static st_err check_trailer(const st_peer_cache *c, int fd, uint64_t size)
{
    uint8_t footer[ST_PACK_FOOTER_LEN];
    uint32_t trailer_len = 0, count = 0;
    int sealed = 0;
    if (size < ST_PACK_FOOTER_LEN ||
        pread(fd, footer, sizeof footer, (off_t)(size - ST_PACK_FOOTER_LEN)) !=
            (ssize_t)sizeof footer ||
        st_pack_any_footer_decode(footer, &trailer_len, &count, &sealed) ||
        (uint64_t)trailer_len + ST_PACK_FOOTER_LEN > size)
        return st_seterr(ST_ERR_CORRUPT, "not a pack: its footer does not decode");
    if (sealed && !c->keyring)
        return st_seterr(ST_ERR_KEY, "a sealed pack: this peer holds no encryption key "
                                     "(--encryption-key-file)");
    st_err e = decode_tail(c, fd, size, trailer_len, sealed);
    if (e == ST_ERR_CORRUPT)
        return st_seterr(e, "not a pack: its trailer does not decode");
    return e;
}

st_err st_peer_cache_admit_pack(st_peer_cache *c, const st_id *pack, const char *name, int fd,
                                uint64_t size, int *was_held)
{
    *was_held = 0;
    st_err e = check_trailer(c, fd, size);
    if (e == ST_ERR_CORRUPT)
        st_peer_cache_count_corrupt(c);
    if (e) {
        st_peer_cache_tmp_remove(c, name);
        return e;
    }
    char dir[16], file[64];
    pack_path(pack, dir, file);
    /* The long fsync outside the lock; the one in publish_tmp finds
     * nothing left to write. */
    if (fsync(fd) < 0) {
        e = st_seterr(ST_ERR_IO, "peer cache: fsync of tmp/%s: %s", name, strerror(errno));
        st_peer_cache_tmp_remove(c, name);
        return e;
    }
    pthread_mutex_lock(&c->lock);
    if (find_pack(c, pack)) {
        *was_held = 1;
    } else if (!(e = make_room(c, size)) && !(e = publish_tmp(c, name, fd, dir, file))) {
        e = add_pack(c, pack, size);
        if (!e) {
            c->packs_received++;
            c->bytes_received += size;
        }
    }
    pthread_mutex_unlock(&c->lock);
    if (e || *was_held)
        st_peer_cache_tmp_remove(c, name);
    return e;
}

/* 1 if the bytes of fd (size bytes) hash to id. */
static int pack_bytes_match(int fd, uint64_t size, const st_id *id)
{
    st_hasher h;
    uint8_t *buf = malloc(HASH_BUF);
    if (!buf || st_hasher_init(&h)) {
        free(buf);
        return 1; /* out of memory: not evidence of corruption */
    }
    uint64_t at = 0;
    int ok = 1;
    while (ok && at < size) {
        size_t want = size - at < HASH_BUF ? (size_t)(size - at) : HASH_BUF;
        ssize_t got = pread(fd, buf, want, (off_t)at);
        ok = got > 0;
        if (ok) {
            st_hasher_update(&h, buf, (size_t)got);
            at += (uint64_t)got;
        }
    }
    st_id got_id = st_hasher_final(&h);
    st_hasher_free(&h);
    free(buf);
    return ok && !st_id_cmp(&got_id, id);
}

st_err st_peer_cache_open_pack(st_peer_cache *c, const st_id *pack, int *fd, uint64_t *size)
{
    char dir[16], file[64], hex[ST_ID_HEX_LEN + 1];
    pack_path(pack, dir, file);
    st_id_hex(pack, hex);
    pthread_mutex_lock(&c->lock);
    *fd = find_pack(c, pack) ? openat(c->root_fd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    pthread_mutex_unlock(&c->lock);
    if (*fd < 0)
        return st_seterr(ST_ERR_NOT_FOUND, "pack %s is not held here", hex);
    struct stat st;
    if (fstat(*fd, &st) == 0 && pack_bytes_match(*fd, (uint64_t)st.st_size, pack)) {
        *size = (uint64_t)st.st_size;
        return ST_OK;
    }
    /* Never served: dropped, so the writer sends it again or a reader asks
     * another peer or the store. Only if the file is still the one read: an
     * eviction and a new copy may have passed meanwhile. */
    pthread_mutex_lock(&c->lock);
    cached_pack *p = find_pack(c, pack);
    struct stat now;
    if (p && fstatat(c->root_fd, file, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino &&
        now.st_dev == st.st_dev)
        drop_pack(c, p);
    c->corrupt_refused++;
    pthread_mutex_unlock(&c->lock);
    close(*fd);
    *fd = -1;
    return st_seterr(ST_ERR_NOT_FOUND, "pack %s was corrupt on this peer's disk and is dropped",
                     hex);
}

/* ---- replicas ---- */

st_err st_peer_cache_put_part(st_peer_cache *c, const st_peer_part_name *p, const st_id *packs,
                              size_t npacks, const uint8_t *manifest, size_t manifest_len)
{
    char hex[ST_ID_HEX_LEN + 1], dir[PART_PATH_MAX], file[PART_PATH_MAX];
    cached_part r = {.step = p->step,
                     .rev = p->rev,
                     .manifest_size = manifest_len,
                     .manifest_id = st_id_of(manifest, manifest_len)};
    snprintf(r.job, sizeof r.job, "%s", p->job);
    snprintf(r.node, sizeof r.node, "%s", p->node);
    if (npacks && !(r.packs = malloc(npacks * sizeof *packs)))
        return st_seterr(ST_ERR_NOMEM, "peer cache: out of memory");
    if (npacks)
        memcpy(r.packs, packs, npacks * sizeof *packs);
    r.npacks = npacks;
    pthread_mutex_lock(&c->lock);
    st_err e = ST_OK;
    for (size_t i = 0; !e && i < npacks; i++)
        if (!find_pack(c, &packs[i]))
            e = st_seterr(ST_ERR_NOT_FOUND,
                          "replica %s/%" PRIu64 "/%s r%" PRIu32 ": pack %s is not held here",
                          p->job, p->step, p->node, p->rev, st_id_hex(&packs[i], hex));
    /* The new replica's packs are pinned first, so making room for its
     * manifest cannot evict them with an older replica that shared them. */
    for (size_t i = 0; !e && i < npacks; i++)
        find_pack(c, &packs[i])->refs++;
    if (!e && (e = make_room(c, manifest_len)))
        unref_packs(c, &r, 0);
    if (!e) {
        r.arrival = c->next_arrival++;
        part_path(p, "manifest", dir, file);
        if ((e = publish_bytes(c, dir, file, manifest, manifest_len)) || (e = write_state(c, &r)))
            unref_packs(c, &r, 0);
    }
    if (!e) {
        /* A replica sent again replaces the old one, which lets go of its
         * packs only now. */
        cached_part *old = find_part(c, p);
        if (old) {
            unref_packs(c, old, 1);
            drop_part(c, old, 0);
            /* The old record names the old manifest: the writer sends a new one. */
            part_path(p, "record", dir, file);
            unlinkat(c->root_fd, file, 0);
        }
        e = add_part(c, &r);
        if (!e)
            r.packs = NULL; /* the table's now */
    }
    pthread_mutex_unlock(&c->lock);
    free(r.packs);
    return e;
}

/* The replica's file of extension ext ("manifest" or "record") into out. */
static st_err read_part_file(st_peer_cache *c, const st_peer_part_name *p, const char *ext,
                             st_bytes *out)
{
    char dir[PART_PATH_MAX], file[PART_PATH_MAX];
    part_path(p, ext, dir, file);
    int record = !strcmp(ext, "record");
    pthread_mutex_lock(&c->lock);
    cached_part *r = find_part(c, p);
    uint64_t size = !r ? 0 : record ? r->record_size : r->manifest_size;
    int fd = r && size ? openat(c->root_fd, file, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    pthread_mutex_unlock(&c->lock);
    if (fd < 0)
        return st_seterr(ST_ERR_NOT_FOUND, "no replica %s%s/%" PRIu64 "/%s r%" PRIu32 " here",
                         record ? "record of " : "", p->job, p->step, p->node, p->rev);
    size_t got = 0;
    st_bytes_clear(out);
    st_err e = st_bytes_reserve(out, (size_t)size);
    if (!e)
        e = st_read_full(fd, out->data, (size_t)size, &got, file);
    if (!e && got != size)
        e = st_seterr(ST_ERR_IO, "peer cache: %s is shorter than recorded", file);
    out->len = e ? 0 : got;
    close(fd);
    return e;
}

st_err st_peer_cache_get_part(st_peer_cache *c, const st_peer_part_name *p, st_bytes *out)
{
    return read_part_file(c, p, "manifest", out);
}

st_err st_peer_cache_get_record(st_peer_cache *c, const st_peer_part_name *p, st_bytes *out)
{
    return read_part_file(c, p, "record", out);
}

st_err st_peer_cache_put_record(st_peer_cache *c, const st_peer_part_name *p, const uint8_t *record,
                                size_t len)
{
    char dir[PART_PATH_MAX], file[PART_PATH_MAX];
    part_path(p, "record", dir, file);
    pthread_mutex_lock(&c->lock);
    cached_part *r = find_part(c, p);
    uint64_t old = r ? r->record_size : 0;
    st_err e = r ? ST_OK
                 : st_seterr(ST_ERR_NOT_FOUND, "no replica %s/%" PRIu64 "/%s r%" PRIu32 " here",
                             p->job, p->step, p->node, p->rev);
    /* Room is made before the record is counted: eviction moves entries of
     * the table, so the replica is looked up again after it. */
    if (!e && len > old)
        e = make_room(c, len - old);
    if (!e && !(r = find_part(c, p))) /* evicted to make room: it was durable */
        e = st_seterr(ST_ERR_NOT_FOUND, "replica %s/%" PRIu64 "/%s r%" PRIu32 " evicted", p->job,
                      p->step, p->node, p->rev);
    if (!e)
        e = publish_bytes(c, dir, file, record, len);
    if (!e) {
        c->bytes = c->bytes - r->record_size + len;
        r->record_size = len;
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

st_err st_peer_cache_mark_durable(st_peer_cache *c, const st_peer_part_name *p)
{
    pthread_mutex_lock(&c->lock);
    cached_part *r = find_part(c, p);
    st_err e = ST_OK;
    if (!r)
        e = st_seterr(ST_ERR_NOT_FOUND, "no replica %s/%" PRIu64 "/%s r%" PRIu32 " here", p->job,
                      p->step, p->node, p->rev);
    else if (!r->durable) {
        r->durable = 1;
        e = write_state(c, r);
    }
    pthread_mutex_unlock(&c->lock);
    return e;
}

void st_peer_cache_get_stats(st_peer_cache *c, st_peer_cache_stats *out)
{
    pthread_mutex_lock(&c->lock);
    *out = (st_peer_cache_stats){.bytes = c->bytes,
                                 .cap = c->cap,
                                 .replicas = c->nparts,
                                 .packs = c->npacks,
                                 .packs_received = c->packs_received,
                                 .bytes_received = c->bytes_received,
                                 .evictions = c->evictions,
                                 .refusals_full = c->refusals_full,
                                 .corrupt_refused = c->corrupt_refused};
    pthread_mutex_unlock(&c->lock);
}

static int newer_first(const void *a, const void *b)
{
    uint64_t x = (*(const cached_part *const *)a)->arrival,
             y = (*(const cached_part *const *)b)->arrival;
    return x < y ? 1 : x > y ? -1 : 0;
}

st_err st_peer_cache_list_replicas(st_peer_cache *c, const char *job, st_peer_listed *out,
                                   size_t max, size_t *n, int *truncated)
{
    *n = 0;
    *truncated = 0;
    pthread_mutex_lock(&c->lock);
    const cached_part **match = malloc((c->nparts ? c->nparts : 1) * sizeof *match);
    if (!match) {
        pthread_mutex_unlock(&c->lock);
        return st_seterr(ST_ERR_NOMEM, "peer cache: out of memory");
    }
    size_t nmatch = 0;
    for (size_t i = 0; i < c->nparts; i++)
        if (!job || !strcmp(c->parts[i].job, job))
            match[nmatch++] = &c->parts[i];
    qsort(match, nmatch, sizeof *match, newer_first);
    *truncated = nmatch > max;
    for (size_t i = 0; i < nmatch && i < max; i++) {
        const cached_part *r = match[i];
        st_peer_listed *it = &out[(*n)++];
        *it = (st_peer_listed){.step = r->step,
                               .rev = r->rev,
                               .durable = r->durable,
                               .manifest_id = r->manifest_id,
                               .manifest_len = r->manifest_size,
                               .record_len = r->record_size};
        snprintf(it->job, sizeof it->job, "%s", r->job);
        snprintf(it->node, sizeof it->node, "%s", r->node);
    }
    pthread_mutex_unlock(&c->lock);
    free(match);
    return ST_OK;
}

st_err st_peer_cache_list_parts(st_peer_cache *c, st_peer_part_cb cb, void *arg)
{
    pthread_mutex_lock(&c->lock);
    for (size_t i = 0; i < c->nparts; i++) {
        st_peer_part_name n = name_of(&c->parts[i]);
        if (cb(arg, &n, c->parts[i].durable))
            break;
    }
    pthread_mutex_unlock(&c->lock);
    return ST_OK;
}
