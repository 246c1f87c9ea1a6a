/*
 * st_backend_file — the file:// backend: objects are regular files under a
 * root directory (a local disk, or an NFS/Lustre mount shared by nodes).
 *
 * Layout. A key "a/b/c" is the file ROOT/a@/b@/c: every directory component
 * carries an '@' suffix. '@' is outside the key alphabet, so a directory can
 * never collide with an object, and "a/b" and "a/b/c" can both exist, as they
 * can in S3. Names starting with '.' are never keys (st_key_is_valid()), so
 * the temp files ".tmp.<pid>.<tid>.<n>" (and the clock probes
 * ".clock.<pid>.<tid>.<n>", file_now) are never listed, read or replaced by
 * a key; list() skips every name starting with '.', and anything else that is
 * not a regular file or an '@' directory with a valid name.
 *
 * Durability of put: write a temp file in the target directory → fsync it →
 * drop its now clean pages from the page cache (drop_cached_pages) →
 * close (NFS reports write-back errors there) → renameat over the target →
 * fsync the directory. A directory we create is made durable by fsyncing its
 * parent right after mkdir. put_new links the temp file to the key instead
 * (link fails with EEXIST when the key exists: an exact create), then
 * unlinks the temp name. Readers see the old object or all of the new one,
 * never a mix, because rename is atomic. Every failure removes the temp file.
 *
 * Confinement. Every path is resolved from an fd on the root, one component
 * at a time with O_NOFOLLOW (openat), and the final step is a *at() call on
 * the parent fd, so no symlink inside the root is ever followed, neither in a
 * directory component nor in the final one: a put onto a symlink replaces the
 * link itself (rename), a get of a symlink is NOT_FOUND. Keys cannot contain
 * "..", so nothing is written outside the root. The root path itself may be a
 * symlink (the administrator chose it).
 *
 * Races. del() removes the key's now-empty parent directories up to (not
 * including) the root. A put racing with it may find its directory removed
 * between mkdir and creating the temp file (ENOENT on an fd whose directory
 * is dead); it then walks again from the root, up to PUT_RETRIES times. Once
 * the temp file exists its directory is non-empty and rmdir fails.
 *
 * Threads: ops may run concurrently on one instance. The only mutable shared
 * state is the atomic temp-name counter; everything else is per call.
 */
#define _GNU_SOURCE
#include "backend/st_backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_array.h"

#define DIR_SUFFIX   '@'
#define PUT_RETRIES  16  /* walks from the root when a concurrent del removed our directory */
#define WALK_RETRIES 8   /* mkdir/open rounds for one component */
#define TMP_RETRIES  100 /* temp-name collisions (a stale temp of a dead process with our pid) */

typedef struct file_ctx {
    int rootfd;                       /* O_RDONLY|O_DIRECTORY on the root; immutable after open */
    char *root;                       /* for messages only */
    atomic_uint_fast64_t tmp_counter; /* makes temp names unique within this process */
    int scratch; /* st_backend_file_open_scratch: no fsync, pages kept cached */
} file_ctx;

/* ---- errors ---- */

/* The one place errno becomes an st_err for this backend. */
static st_err errno_class(int e)
{
    switch (e) {
    case ENOENT: return ST_ERR_NOT_FOUND;
    case ENOSPC:
    case EDQUOT: return ST_ERR_NOSPACE;
    case EACCES:
    case EPERM:
    case EROFS:
    case ENOTDIR: /* a non-directory (or symlink) where the layout needs a directory */
    case ELOOP:
    case EISDIR: return ST_ERR_PERMANENT;
    case ENAMETOOLONG: return ST_ERR_INVALID; /* a key component longer than NAME_MAX */
    case ENOMEM: return ST_ERR_NOMEM;
    case ESTALE: /* NFS: the server may come back */
    case ETIMEDOUT:
    case EAGAIN:
    case EINTR: return ST_ERR_TRANSIENT;
    default: return ST_ERR_IO;
    }
}

static st_err file_err(const file_ctx *c, int e, const char *op, const char *key, const char *what)
{
    return st_seterr(errno_class(e), "file store %s: %s %s: %s: %s", c->root, op, key, what,
                     strerror(e));
}

/* ---- path walking ---- */

/* name = component + '@' into buf[NAME_MAX + 1]; -1 (ENAMETOOLONG) if too long. */
static int dir_name(char *buf, const char *comp, size_t len)
{
    if (len + 1 > NAME_MAX) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(buf, comp, len);
    buf[len] = DIR_SUFFIX;
    buf[len + 1] = '\0';
    return 0;
}

static int open_dir_at(int dfd, const char *name)
{
    return openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/*
 * An object is written once and read rarely (a restore, often on another
 * node): its pages in the page cache would only push out what the trainer
 * uses. Once fsync has made them clean, the advice drops them at once. On
 * the project machine the mount's time to durable on a file store fell to
 * 0.81-0.85x with it, and the save stall did not change (docs/BENCHMARKS.md,
 * "The file store's pages"). Advice only: when it fails the object is
 * exactly as durable.
 */
static void drop_cached_pages(int fd)
{
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

/* fsync with EINTR retried. */
static int fsync_fd(int fd)
{
    int r;
    do
        r = fsync(fd);
    while (r < 0 && errno == EINTR);
    return r;
}

/*
 * Opens the directory that names key's first dir_len bytes (dir_len is 0 or
 * ends just after a '/'), one component at a time without following links.
 * create: make missing directories (and fsync their parent so the new entry
 * is durable). Returns an fd, or -1 with errno: ENOENT when a directory is
 * missing (or, with create, vanished under a racing del: the caller restarts),
 * ENOTDIR/ELOOP when something else sits where a directory belongs.
 */
static int walk_dirs(const file_ctx *c, const char *key, size_t dir_len, int create)
{
    int cur = openat(c->rootfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cur < 0)
        return -1;
    size_t pos = 0;
    while (pos < dir_len) {
        const char *slash = memchr(key + pos, '/', dir_len - pos);
        size_t clen = (size_t)(slash - (key + pos));
        char name[NAME_MAX + 1];
        int next = -1;
        if (dir_name(name, key + pos, clen) < 0)
            goto fail;
        for (int attempt = 0;; attempt++) {
            next = open_dir_at(cur, name);
            if (next >= 0 || errno != ENOENT || !create || attempt >= WALK_RETRIES)
                break;
            if (mkdirat(cur, name, 0755) < 0 && errno != EEXIST)
                goto fail; /* ENOENT here: cur itself was removed; caller restarts */
            /* Also after EEXIST: the racing creator may not have synced yet. */
            if (!c->scratch && fsync_fd(cur) < 0)
                goto fail;
        }
        if (next < 0)
            goto fail;
        close(cur);
        cur = next;
        pos += clen + 1;
    }
    return cur;
fail:;
    int saved = errno;
    close(cur);
    errno = saved;
    return -1;
}

/* Offset of key's last component (0 if the key has no '/'). */
static size_t leaf_offset(const char *key)
{
    const char *slash = strrchr(key, '/');
    return slash ? (size_t)(slash - key) + 1 : 0;
}

/* ---- put ---- */

static st_err write_all(int fd, const uint8_t *p, size_t len)
{
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return ST_ERR_IO;
        }
        p += w;
        len -= (size_t)w;
    }
    return ST_OK;
}

/*
 * temp → fsync → close → rename → fsync dir, all inside dfd. Returns
 * ST_ERR_NOT_FOUND (and sets no message) only when dfd's directory was
 * removed before the temp file existed, which the caller retries.
 * create_only (put_new): the temp file is linked to leaf instead of
 * renamed over it, which fails with EEXIST when leaf exists (the object
 * is not touched: ST_ERR_EXISTS), then unlinked.
 */
static st_err put_in_dir(file_ctx *c, int dfd, const char *key, const char *leaf, const void *data,
                         size_t len, int create_only)
{
    char tmp[80];
    int fd = -1;
    st_err e = ST_OK;
    const char *what = "create temp file";

    for (int attempt = 0;; attempt++) {
        uint64_t n = atomic_fetch_add(&c->tmp_counter, 1);
        snprintf(tmp, sizeof tmp, ".tmp.%ld.%ld.%" PRIu64, (long)getpid(), (long)gettid(), n);
        fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0)
            break;
        if (errno == ENOENT)
            return ST_ERR_NOT_FOUND;
        if (errno != EEXIST || attempt >= TMP_RETRIES)
            return file_err(c, errno, "put", key, what);
    }

    what = "write temp file";
    if (write_all(fd, data, len) != ST_OK)
        goto fail;
    what = "fsync temp file";
    if (!c->scratch && fsync_fd(fd) < 0)
        goto fail;
    if (!c->scratch) /* a scratch object is read again soon: keep its pages */
        drop_cached_pages(fd);
    what = "close temp file";
    int r = close(fd);
    fd = -1;
    if (r < 0)
        goto fail;
    if (create_only) {
        what = "link temp file to the object";
        if (linkat(dfd, tmp, dfd, leaf, 0) < 0) {
            if (errno != EEXIST)
                goto fail;
            unlinkat(dfd, tmp, 0);
            return st_seterr(ST_ERR_EXISTS, "file store %s: put %s: exists", c->root, key);
        }
        unlinkat(dfd, tmp, 0); /* the object keeps its name: the temp one only goes */
    } else {
        what = "rename temp file over the object";
        if (renameat(dfd, tmp, dfd, leaf) < 0)
            goto fail;
    }
    /* The object is in place; without this fsync a crash could lose the name. */
    if (!c->scratch && fsync_fd(dfd) < 0)
        return file_err(c, errno, "put", key, "fsync directory");
    return ST_OK;

fail:;
    int saved = errno;
    if (fd >= 0)
        close(fd);
    unlinkat(dfd, tmp, 0);
    e = file_err(c, saved, "put", key, what);
    if (e == ST_ERR_NOT_FOUND) /* not the "retry" signal: something odd removed the temp */
        e = st_seterr(ST_ERR_IO, "file store %s: put %s: %s: %s", c->root, key, what,
                      strerror(saved));
    return e;
}

static st_err put_object(file_ctx *c, const char *key, const void *data, size_t len,
                         int create_only)
{
    size_t leaf = leaf_offset(key);
    for (int attempt = 0; attempt <= PUT_RETRIES; attempt++) {
        int dfd = walk_dirs(c, key, leaf, 1);
        if (dfd < 0) {
            if (errno == ENOENT)
                continue;
            return file_err(c, errno, "put", key, "create parent directory");
        }
        st_err e = put_in_dir(c, dfd, key, key + leaf, data, len, create_only);
        close(dfd);
        if (e != ST_ERR_NOT_FOUND)
            return e;
    }
    return st_seterr(
        ST_ERR_TRANSIENT,
        "file store %s: put %s: parent directory kept vanishing under concurrent deletes", c->root,
        key);
}

static st_err file_put(void *ctx, const char *key, const void *data, size_t len)
{
    return put_object(ctx, key, data, len, 0);
}

static st_err file_put_new(void *ctx, const char *key, const void *data, size_t len)
{
    return put_object(ctx, key, data, len, 1);
}

/* ---- get / stat ---- */

/*
 * Opens the object for reading and fstat()s it. NOT_FOUND for anything that
 * is not a regular file reached without links: a missing key, a key under a
 * non-directory, a symlink, a directory, a fifo (O_NONBLOCK so it cannot hang).
 */
static st_err open_object(const file_ctx *c, const char *op, const char *key, int *fd_out,
                          struct stat *st)
{
    size_t leaf = leaf_offset(key);
    int dfd = walk_dirs(c, key, leaf, 0);
    if (dfd < 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
            return st_seterr(ST_ERR_NOT_FOUND, "file store %s: %s %s: no such object", c->root, op,
                             key);
        return file_err(c, errno, op, key, "open parent directory");
    }
    int fd = openat(dfd, key + leaf, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    int saved = errno;
    close(dfd);
    if (fd < 0) {
        if (saved == ENOENT || saved == ELOOP)
            return st_seterr(ST_ERR_NOT_FOUND, "file store %s: %s %s: no such object%s", c->root,
                             op, key, saved == ELOOP ? " (a symlink, not followed)" : "");
        return file_err(c, saved, op, key, "open");
    }
    if (fstat(fd, st) < 0) {
        saved = errno;
        close(fd);
        return file_err(c, saved, op, key, "fstat");
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return st_seterr(ST_ERR_NOT_FOUND,
                         "file store %s: %s %s: no such object (not a regular file)", c->root, op,
                         key);
    }
    *fd_out = fd;
    return ST_OK;
}

/* Opens key for a read of [offset, offset + len) and says how many bytes of
 * it the object has (*n, the range truncated to the object). */
static st_err open_range(const file_ctx *c, const char *key, uint64_t offset, uint64_t len,
                         int *fd_out, uint64_t *n)
{
    struct stat st;
    int fd = -1;
    st_err e = open_object(c, "get", key, &fd, &st);
    if (e)
        return e;
    uint64_t size = (uint64_t)st.st_size;
    if (offset > size) {
        close(fd);
        return st_seterr(ST_ERR_INVALID,
                         "file store %s: get %s: offset %" PRIu64 " past the end (size %" PRIu64
                         ")",
                         c->root, key, offset, size);
    }
    *n = size - offset < len ? size - offset : len;
    *fd_out = fd;
    return ST_OK;
}

/* Reads exactly n bytes at offset (an object's are never fewer: objects are
 * replaced by rename, never truncated in place). */
static st_err pread_exact(const file_ctx *c, const char *key, int fd, uint8_t *buf, size_t n,
                          uint64_t offset)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, buf + got, n - got, (off_t)(offset + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return file_err(c, errno, "get", key, "read");
        if (r == 0)
            return st_seterr(ST_ERR_IO, "file store %s: get %s: object shrank while being read",
                             c->root, key);
        got += (size_t)r;
    }
    return ST_OK;
}

static st_err file_get(void *ctx, const char *key, uint64_t offset, uint64_t len, st_bytes *out)
{
    file_ctx *c = ctx;
    int fd = -1;
    uint64_t n;
    st_bytes_clear(out);
    st_err e = open_range(c, key, offset, len, &fd, &n);
    if (e)
        return e;
    if (n > SIZE_MAX) {
        e = st_seterr(ST_ERR_NOMEM, "file store %s: get %s: %" PRIu64 " bytes do not fit in memory",
                      c->root, key, n);
        goto out;
    }
    e = st_bytes_reserve(out, (size_t)n);
    if (!e)
        e = pread_exact(c, key, fd, out->data, (size_t)n, offset);
    if (!e)
        out->len = (size_t)n;
out:
    close(fd);
    return e;
}

/* A streamed get: the range read in pieces of FILE_STREAM_PIECE into one
 * buffer and handed to the sink piece by piece, so the caller decodes the
 * start while the rest is still on disk and never holds the whole range. */
#define FILE_STREAM_PIECE (1u << 20)

static st_err file_get_stream(void *ctx, const char *key, uint64_t offset, uint64_t len,
                              const st_get_sink *sink)
{
    file_ctx *c = ctx;
    int fd = -1;
    uint64_t n;
    st_err e = open_range(c, key, offset, len, &fd, &n);
    if (e)
        return e;
    uint8_t *piece = n ? malloc(n < FILE_STREAM_PIECE ? (size_t)n : FILE_STREAM_PIECE) : NULL;
    if (n && !piece)
        e = st_seterr(ST_ERR_NOMEM, "file store %s: get %s: out of memory", c->root, key);
    for (uint64_t at = 0; !e && at < n;) {
        size_t want = n - at < FILE_STREAM_PIECE ? (size_t)(n - at) : FILE_STREAM_PIECE;
        e = pread_exact(c, key, fd, piece, want, offset + at);
        if (!e)
            e = sink->on_bytes(sink->arg, at, piece, want);
        at += want;
    }
    free(piece);
    close(fd);
    return e;
}

/* The struct stat of the regular file that holds key (lstat: a symlink is
 * no object). */
static st_err stat_object(const file_ctx *c, const char *key, struct stat *st)
{
    size_t leaf = leaf_offset(key);
    int dfd = walk_dirs(c, key, leaf, 0);
    if (dfd < 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
            return st_seterr(ST_ERR_NOT_FOUND, "file store %s: stat %s: no such object", c->root,
                             key);
        return file_err(c, errno, "stat", key, "open parent directory");
    }
    int r = fstatat(dfd, key + leaf, st, AT_SYMLINK_NOFOLLOW);
    int saved = errno;
    close(dfd);
    if (r < 0) {
        if (saved == ENOENT)
            return st_seterr(ST_ERR_NOT_FOUND, "file store %s: stat %s: no such object", c->root,
                             key);
        return file_err(c, saved, "stat", key, "fstatat");
    }
    if (!S_ISREG(st->st_mode))
        return st_seterr(ST_ERR_NOT_FOUND,
                         "file store %s: stat %s: no such object (not a regular file)", c->root,
                         key);
    return ST_OK;
}

static st_err file_stat(void *ctx, const char *key, uint64_t *size)
{
    struct stat st;
    st_err e = stat_object(ctx, key, &st);
    if (!e)
        *size = (uint64_t)st.st_size;
    return e;
}

static int64_t mtime_ns_of(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/*
 * The store's clock is the clock of the file system that holds the root:
 * an object's time is its mtime, and "now" is the mtime the file system
 * gives a file created at once in the root (a probe, unlinked right away).
 * On a local disk both come from this kernel; on NFS both come from the
 * server, so nodes whose own clocks disagree still read one clock. Both
 * stamps come from that one clock, so their difference is what the
 * protocols need with no slack; its tick (a few ms) is inside the margin
 * of GC's bound (docs/GC.md, "Clocks"). One quirk: a kernel may stamp a
 * file it was asked about with the fine clock and a fresh one (the probe)
 * with the coarse one, a tick behind; an object up to FILE_CLOCK_TICK_NS
 * ahead of the probe was written at the same instant, not in the future.
 */
#define FILE_CLOCK_SLACK_NS 0
#define FILE_CLOCK_TICK_NS  (50 * 1000000ll)

static st_err file_now(file_ctx *c, int64_t *now_ns)
{
    char probe[80];
    int fd = -1;
    for (int i = 0; i < TMP_RETRIES && fd < 0; i++) {
        uint64_t n = atomic_fetch_add(&c->tmp_counter, 1);
        snprintf(probe, sizeof probe, ".clock.%ld.%ld.%" PRIu64, (long)getpid(), (long)gettid(), n);
        fd = openat(c->rootfd, probe, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            return file_err(c, errno, "clock", probe, "create the clock probe");
    }
    if (fd < 0)
        return file_err(c, EEXIST, "clock", probe, "create the clock probe");
    /* fstatat, as stat_object: the one call for both stamps, so that
     * whatever shifts a process's view of file times (libfaketime does,
     * for some calls and not others) shifts both alike. */
    struct stat st;
    close(fd);
    int r = fstatat(c->rootfd, probe, &st, AT_SYMLINK_NOFOLLOW);
    int saved = errno;
    unlinkat(c->rootfd, probe, 0);
    if (r < 0)
        return file_err(c, saved, "clock", probe, "fstat the clock probe");
    *now_ns = mtime_ns_of(&st);
    return ST_OK;
}

static st_err file_stat_time(void *ctx, const char *key, st_store_time *t)
{
    file_ctx *c = ctx;
    struct stat st;
    st_err e = key ? stat_object(c, key, &st) : ST_OK;
    if (!e && key)
        t->mtime_ns = mtime_ns_of(&st);
    if (!e)
        e = file_now(c, &t->now_ns);
    if (!e && key && t->mtime_ns > t->now_ns && t->mtime_ns - t->now_ns <= FILE_CLOCK_TICK_NS)
        t->now_ns = t->mtime_ns;
    t->slack_ns = FILE_CLOCK_SLACK_NS;
    return e;
}

/* ---- del ---- */

/*
 * Removes the now-empty directories of key from the deepest up, stopping at
 * the first that is not empty (or is gone, or is being refilled by a put).
 * Climbs with ".." from the fd we already hold; a removed directory has no
 * "..", which also ends the climb. Never touches the root: the last rmdir is
 * of the key's first component, inside it. Best effort: errors are ignored,
 * an empty directory left behind is harmless.
 */
static void prune_empty_dirs(int dfd, const char *key, size_t leaf)
{
    size_t end = leaf - 1; /* the '/' before the leaf */
    int cur = dfd;
    for (;;) {
        size_t start = end;
        while (start > 0 && key[start - 1] != '/')
            start--;
        char name[NAME_MAX + 1];
        if (dir_name(name, key + start, end - start) < 0)
            break;
        int parent = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (parent < 0)
            break;
        close(cur);
        cur = parent;
        if (unlinkat(cur, name, AT_REMOVEDIR) < 0 || start == 0)
            break;
        end = start - 1;
    }
    close(cur);
}

static st_err file_del(void *ctx, const char *key)
{
    file_ctx *c = ctx;
    size_t leaf = leaf_offset(key);
    int dfd = walk_dirs(c, key, leaf, 0);
    if (dfd < 0) {
        if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
            return ST_OK; /* nothing there: deleting is idempotent */
        return file_err(c, errno, "del", key, "open parent directory");
    }
    if (unlinkat(dfd, key + leaf, 0) < 0 && errno != ENOENT) {
        int saved = errno;
        close(dfd);
        if (saved == EISDIR)
            return ST_OK; /* a stray directory is not an object; leave it alone */
        return file_err(c, saved, "del", key, "unlink");
    }
    /* No fsync: a delete lost in a crash leaves garbage that GC deletes again. */
    if (leaf > 0)
        prune_empty_dirs(dfd, key, leaf);
    else
        close(dfd);
    return ST_OK;
}

/* ---- list ---- */

typedef struct list_entry {
    char *frag; /* key fragment: file name, or directory name without '@' plus '/' */
    size_t len; /* strlen(frag) */
    int is_dir;
} list_entry;

static int list_entry_cmp(const void *a, const void *b)
{
    /* Comparing "name/" for directories makes per-directory order equal the
     * byte order of the full keys: "a-b" < "a.b" < "a/..." < "a0". */
    return strcmp(((const list_entry *)a)->frag, ((const list_entry *)b)->frag);
}

static int name_is_component(const char *s, size_t n)
{
    if (n == 0 || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-'))
            return 0;
    }
    return 1;
}

typedef struct list_state {
    const file_ctx *c;
    st_list_cb cb;
    void *arg;
    int stopped;
    char key[ST_KEY_MAX + 2];
} list_state;

static void free_entries(list_entry *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i].frag);
    free(v);
}

/*
 * Reads directory fd (which it takes over and closes), keeps the entries
 * whose fragment starts with match, sorts them and emits files / recurses
 * into directories. ls->key[0..klen) is the key prefix this directory names.
 */
static st_err list_dir(list_state *ls, int fd, size_t klen, const char *match)
{
    size_t mlen = strlen(match), n = 0, cap = 0;
    list_entry *v = NULL;
    st_err e = ST_OK;
    DIR *d = fdopendir(fd);
    if (!d) {
        int saved = errno;
        close(fd);
        return file_err(ls->c, saved, "list", ls->key, "fdopendir");
    }
    for (;;) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de) {
            if (errno)
                e = file_err(ls->c, errno, "list", ls->key, "readdir");
            break;
        }
        size_t nlen = strlen(de->d_name);
        int is_dir = nlen > 1 && de->d_name[nlen - 1] == DIR_SUFFIX;
        size_t base = is_dir ? nlen - 1 : nlen;
        /* Skips ".", "..", temp files and anything not in our layout. */
        if (!name_is_component(de->d_name, base) || base < mlen ||
            memcmp(de->d_name, match, mlen) != 0)
            continue;
        if (de->d_type != DT_UNKNOWN && de->d_type != (is_dir ? DT_DIR : DT_REG))
            continue;
        if (klen + base + (size_t)is_dir > ST_KEY_MAX)
            continue;
        if ((e = st_array_grow((void **)&v, &cap, n + 1, sizeof *v)))
            break;
        char *frag = malloc(base + 2);
        if (!frag) {
            e = st_seterr(ST_ERR_NOMEM, "list: out of memory");
            break;
        }
        memcpy(frag, de->d_name, base);
        if (is_dir)
            frag[base] = '/';
        frag[base + (size_t)is_dir] = '\0';
        v[n++] = (list_entry){frag, base + (size_t)is_dir, is_dir};
    }
    if (e)
        goto out;
    if (n > 1)
        qsort(v, n, sizeof *v, list_entry_cmp);

    for (size_t i = 0; i < n && !ls->stopped; i++) {
        memcpy(ls->key + klen, v[i].frag, v[i].len + 1);
        size_t nklen = klen + v[i].len;
        if (v[i].is_dir) {
            char name[NAME_MAX + 1];
            if (dir_name(name, v[i].frag, v[i].len - 1) < 0)
                continue;
            int sub = open_dir_at(dirfd(d), name);
            if (sub < 0) {
                if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP)
                    continue; /* removed meanwhile, or not ours */
                e = file_err(ls->c, errno, "list", ls->key, "open directory");
                goto out;
            }
            e = list_dir(ls, sub, nklen, "");
            if (e)
                goto out;
        } else {
            struct stat st;
            if (fstatat(dirfd(d), v[i].frag, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT)
                    continue; /* deleted meanwhile */
                e = file_err(ls->c, errno, "list", ls->key, "fstatat");
                goto out;
            }
            if (!S_ISREG(st.st_mode))
                continue;
            if (ls->cb(ls->arg, ls->key, (uint64_t)st.st_size) != 0)
                ls->stopped = 1;
        }
    }
    ls->key[klen] = '\0';
out:
    free_entries(v, n);
    closedir(d);
    return e;
}

static st_err file_list(void *ctx, const char *prefix, st_list_cb cb, void *arg)
{
    file_ctx *c = ctx;
    list_state *ls = malloc(sizeof *ls);
    if (!ls)
        return st_seterr(ST_ERR_NOMEM, "list: out of memory");
    ls->c = c;
    ls->cb = cb;
    ls->arg = arg;
    ls->stopped = 0;

    /* Start in the deepest directory the prefix names in full; the rest of
     * the prefix filters that directory's entries (not the deeper ones). */
    size_t dir_len = leaf_offset(prefix);
    memcpy(ls->key, prefix, dir_len);
    ls->key[dir_len] = '\0';
    st_err e = ST_OK;
    int fd = walk_dirs(c, prefix, dir_len, 0);
    if (fd < 0) {
        if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP)
            e = file_err(c, errno, "list", prefix, "open directory");
        goto out; /* no such directory: an empty listing */
    }
    e = list_dir(ls, fd, dir_len, prefix + dir_len);
out:
    free(ls);
    return e;
}

/* ---- open / close ---- */

static void file_close(void *ctx)
{
    file_ctx *c = ctx;
    if (!c)
        return;
    close(c->rootfd);
    free(c->root);
    free(c);
}

static const st_backend_ops file_ops = {
    .scheme = "file",
    .put = file_put,
    .get = file_get,
    .get_stream = file_get_stream,
    .stat = file_stat,
    .stat_time = file_stat_time,
    .put_new = file_put_new,
    .list = file_list,
    .del = file_del,
    .close = file_close,
};

/* fsync of the directory containing path's last component. */
static int fsync_parent(const char *path)
{
    char parent[PATH_MAX];
    const char *slash = strrchr(path, '/');
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    memcpy(parent, path, n);
    parent[n] = '\0';
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync_fd(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return r;
}

/* mkdir -p, making every directory it creates durable in its parent. */
static st_err mkdir_p(const char *root)
{
    char p[PATH_MAX];
    size_t n = strlen(root);
    memcpy(p, root, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != '\0')
            continue;
        if (p[i - 1] == '/')
            continue; /* "//" or a trailing '/' */
        char saved_ch = p[i];
        p[i] = '\0';
        if (mkdir(p, 0755) == 0) {
            if (fsync_parent(p) < 0)
                return st_seterr(errno_class(errno) == ST_ERR_NOSPACE ? ST_ERR_NOSPACE : ST_ERR_IO,
                                 "file store %s: fsync parent of %s: %s", root, p, strerror(errno));
        } else if (errno != EEXIST) {
            int e = errno;
            st_err code = e == ENOSPC || e == EDQUOT ? ST_ERR_NOSPACE
                          : e == EIO                 ? ST_ERR_IO
                                                     : ST_ERR_PERMANENT;
            return st_seterr(code, "file store %s: cannot create directory %s: %s%s", root, p,
                             strerror(e),
                             e == ENOTDIR ? " (a component of the path is not a directory)" : "");
        }
        p[i] = saved_ch;
    }
    return ST_OK;
}

st_err st_backend_file_open(const char *root, st_backend **out)
{
    return st_backend_file_open_existing(root, 0, out);
}

st_err st_backend_file_open_scratch(const char *root, st_backend **out)
{
    st_err e = st_backend_file_open_existing(root, 0, out);
    if (!e)
        ((file_ctx *)(*out)->ctx)->scratch = 1;
    return e;
}

st_err st_backend_file_open_existing(const char *root, int existing_only, st_backend **out)
{
    st_err e = ST_OK;
    file_ctx *c = NULL;
    st_backend *b = NULL;
    if (!out)
        return st_seterr(ST_ERR_INVALID, "st_backend_file_open: out is NULL");
    *out = NULL;
    if (!root || root[0] != '/')
        return st_seterr(ST_ERR_INVALID, "file store root \"%.200s\" is not an absolute path",
                         root ? root : "(null)");
    if (strlen(root) >= PATH_MAX)
        return st_seterr(ST_ERR_INVALID, "file store root \"%.200s...\" is too long", root);

    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && existing_only)
        return st_seterr(ST_ERR_NOT_FOUND, "no store at %s: the directory does not exist", root);
    if (fd < 0 && errno == ENOENT) {
        e = mkdir_p(root);
        if (e)
            return e;
        fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    if (fd < 0) {
        int saved = errno;
        return st_seterr(saved == EIO ? ST_ERR_IO : ST_ERR_PERMANENT, "file store root %s: %s%s",
                         root, strerror(saved),
                         saved == ENOTDIR ? " (exists and is not a directory, or a parent is not)"
                                          : "");
    }

    c = calloc(1, sizeof *c);
    b = calloc(1, sizeof *b);
    if (!c || !b || !(c->root = strdup(root))) {
        e = st_seterr(ST_ERR_NOMEM, "file store %s: out of memory", root);
        goto fail;
    }
    c->rootfd = fd;
    atomic_init(&c->tmp_counter, 0);
    b->ops = &file_ops;
    b->ctx = c;
    *out = b;
    return ST_OK;
fail:
    close(fd);
    if (c)
        free(c->root);
    free(c);
    free(b);
    return e;
}
