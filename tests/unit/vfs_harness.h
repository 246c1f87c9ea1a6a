/*
 * vfs_harness.h — drives the mount model (store/include/st_vfs.h) the way the FUSE
 * glue in fs/ckptfs.c does, for the test_vfs_*.c unit tests: no FUSE, no
 * daemon, a store in memory (tests/support/st_backend_mem.h).
 *
 * Call sequences copied from fs/ckptfs.c: a path is walked with
 * st_vfs_lookup from the root; a write is create (or open) → for each
 * write(2): st_vfs_write_prepare, pwrite on st_vfs_handle_fd, then
 * st_vfs_write_done → close(2): st_vfs_flush, then st_vfs_release. rm -r is
 * readdir, unlink of each file, rmdir of the emptied directory, as Python's
 * shutil.rmtree does.
 *
 * Mounts: vh_mount_open() gives each mount its own handle on a shared store
 * (one connection per node) and its own staging directory below the test's
 * temp directory vh_tmp. Mounts opened with start = 0 run no thread: nothing
 * is uploaded and no rule fires behind the test's back (eager publishing,
 * refresh), so a test can look at step states deterministically; with
 * start = 1 the uploader and the refresher run (refresh every 0.1 s).
 *
 * Writers are fake pids (VH_PID_*), larger than any pid_max, so the mount
 * finds no /proc/PID/environ and records rank -1: no test depends on the
 * environment it runs in.
 *
 * The checking helpers use ut.h's CHECK and return plain values so that a
 * test reads as its assertions. Everything here runs on the test's thread.
 */
#ifndef VFS_HARNESS_H
#define VFS_HARNESS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/st_backend.h"
#include "backend/st_backend_fault.h"
#include "st_backend_mem.h"
#include "util/st_fsutil.h"
#include "format/st_part.h"
#include "engine/st_catalog.h"
#include "engine/st_restore.h"
#include "st_vfs.h"
#include "ut.h"

#define VH_JOB   "job"
#define VH_PID_A ((pid_t)2000000001)
#define VH_PID_B ((pid_t)2000000002)

static char vh_tmp[64]; /* the test's mkdtemp() directory */

/* Polls cond (an expression) every 5 ms for up to secs seconds; evaluates
 * to whether it came true. */
#define VH_WAIT(cond, secs)                                                                        \
    ({                                                                                             \
        int64_t vh_due_ = st_mono_ns() + (int64_t)((secs)*1e9);                                    \
        int vh_ok_;                                                                                \
        while (!(vh_ok_ = !!(cond)) && st_mono_ns() < vh_due_)                                     \
            usleep(5000);                                                                          \
        vh_ok_;                                                                                    \
    })

/* Makes vh_tmp; returns 0, or -1 (and says why). */
static inline int vh_setup(const char *name)
{
    snprintf(vh_tmp, sizeof vh_tmp, "/tmp/ckpt-%s-XXXXXX", name);
    if (!mkdtemp(vh_tmp)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

static inline void vh_teardown(void)
{
    ut_rmtree(vh_tmp);
}

/* The --staging-cap of the mounts opened next (0: none). */
static uint64_t vh_staging_cap;
/* The --staging-spare of the mounts opened next (0: no recycling, so that
 * the other tests see a staging file go when its file goes). */
static uint64_t vh_staging_spare;
/* close_sync of the mounts opened next (NULL: the default, "disk"). */
static const char *vh_close_sync;
/* How long the mounts opened next wait for another mount of their staging
 * directory to let go (0: they fail at once, ST_ERR_BUSY). */
static double vh_staging_wait;

/* Every log line of every mount since the last vh_log_clear(), each ended
 * by '\n' (a test checks what was logged, and that one message is one line). */
static char vh_logbuf[1 << 16];
/* A mount logs from several threads at once (open's first look, the
 * uploader, the refresher). */
static pthread_mutex_t vh_log_lock = PTHREAD_MUTEX_INITIALIZER;

static inline void vh_log_clear(void)
{
    pthread_mutex_lock(&vh_log_lock);
    vh_logbuf[0] = '\0';
    pthread_mutex_unlock(&vh_log_lock);
}

/* Logs of the mounts go to stderr only with CKPT_TEST_VERBOSE set. */
static inline void vh_log(void *arg, int level, const char *msg)
{
    pthread_mutex_lock(&vh_log_lock);
    size_t used = strlen(vh_logbuf);
    snprintf(vh_logbuf + used, sizeof vh_logbuf - used, "%s\n", msg);
    pthread_mutex_unlock(&vh_log_lock);
    if (getenv("CKPT_TEST_VERBOSE"))
        fprintf(stderr, "  [%s] %s%s\n", (const char *)arg, level >= 2 ? "error: " : "", msg);
}

/* ---- mounts ---- */

typedef struct vh_mount {
    st_vfs *v;
    st_backend *b; /* this mount's handle on the store; v borrows it */
    char node[32];
    char staging[PATH_MAX];
} vh_mount;

/*
 * Opens a mount of node `node` on staging directory vh_tmp/<staging_name>
 * over store (its own handle, st_backend_mem_share), started or not.
 * fault: NULL, or a st_backend_fault spec wrapped around this mount's handle
 * only (such a mount drains for 1 s at unmount, not 20). Returns the st_vfs_open/start error; on
 * error *m is closed.
 */
static inline st_err vh_mount_open_fault(vh_mount *m, st_backend *store, const char *node,
                                         const char *staging_name, int start, const char *fault)
{
    memset(m, 0, sizeof *m);
    snprintf(m->node, sizeof m->node, "%s", node);
    snprintf(m->staging, sizeof m->staging, "%s/%s", vh_tmp, staging_name);
    st_err e = st_backend_mem_share(store, &m->b);
    if (!e && fault)
        e = st_backend_fault_wrap(&m->b, fault);
    st_vfs_options o = {
        .backend = m->b,
        .staging_dir = m->staging,
        .node = m->node,
        .refresh_seconds = 0.1,
        .staging_cap = vh_staging_cap,
        .staging_spare = vh_staging_spare,
        .close_sync = vh_close_sync,
        .staging_wait_seconds = vh_staging_wait,
        .drain_seconds = fault ? 1 : 20, /* a failing store: do not wait at unmount */
        .log = vh_log,
        .log_arg = m->node,
    };
    if (!e)
        e = st_vfs_open(&o, &m->v);
    if (!e && start)
        e = st_vfs_start(m->v);
    if (e) {
        st_vfs_close(m->v);
        st_backend_close(m->b);
        memset(m, 0, sizeof *m);
    }
    return e;
}

static inline st_err vh_mount_open(vh_mount *m, st_backend *store, const char *node,
                                   const char *staging_name, int start)
{
    return vh_mount_open_fault(m, store, node, staging_name, start, NULL);
}

/* Unmount (st_vfs_close: with threads, R8 and the drain), then the handle. */
static inline void vh_mount_close(vh_mount *m)
{
    st_vfs_close(m->v);
    st_backend_close(m->b);
    memset(m, 0, sizeof *m);
}

/* ---- paths ---- */

/* Walks path ("job/dir/file", relative to the mount's root) with lookups. */
static inline st_err vh_lookup(vh_mount *m, const char *path, st_vfs_attr *a)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    uint64_t ino = ST_VFS_ROOT_INO;
    st_err e = ST_OK;
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if ((e = st_vfs_lookup(m->v, ino, c, a)))
            return e;
        ino = a->ino;
    }
    return e;
}

static inline int vh_exists(vh_mount *m, const char *path)
{
    st_vfs_attr a;
    return vh_lookup(m, path, &a) == ST_OK;
}

/* The directory that holds path's last component; *base points at that
 * component inside path. */
static inline st_err vh_parent(vh_mount *m, const char *path, uint64_t *dir, const char **base)
{
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    *dir = ST_VFS_ROOT_INO;
    if (!slash)
        return ST_OK;
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
    st_vfs_attr a;
    st_err e = vh_lookup(m, parent, &a);
    *dir = a.ino;
    return e;
}

/* mkdir -p of path. */
/* Count of files in m's STAGING/data (the staging files of local files). */
static inline int vh_staging_files(const vh_mount *m)
{
    char dir[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/data", m->staging);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *de; d && (de = readdir(d));)
        n += de->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static inline st_err vh_mkdirs(vh_mount *m, const char *path)
{
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    uint64_t ino = ST_VFS_ROOT_INO;
    for (char *save = NULL, *c = strtok_r(buf, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        st_vfs_attr a;
        st_err e = st_vfs_mkdir(m->v, ino, c, 0755, NULL, &a);
        if (e == ST_ERR_EXISTS)
            e = st_vfs_lookup(m->v, ino, c, &a);
        if (e)
            return e;
        ino = a.ino;
    }
    return ST_OK;
}

/* ---- files ---- */

/* open(path, O_CREAT | flags) by pid, making missing parent directories. */
static inline st_err vh_create(vh_mount *m, const char *path, int flags, pid_t pid,
                               st_vfs_handle **h)
{
    *h = NULL;
    const char *slash = strrchr(path, '/');
    if (slash) {
        char parent[PATH_MAX];
        snprintf(parent, sizeof parent, "%.*s", (int)(slash - path), path);
        st_err e = vh_mkdirs(m, parent);
        if (e)
            return e;
    }
    uint64_t dir;
    const char *base;
    st_err e = vh_parent(m, path, &dir, &base);
    st_vfs_attr a;
    return e ? e : st_vfs_create(m->v, dir, base, 0644, O_CREAT | flags, pid, NULL, &a, h);
}

/* One write(2) of len bytes at off, as op_write_buf does it. */
static inline st_err vh_pwrite(vh_mount *m, st_vfs_handle *h, const void *data, size_t len,
                               uint64_t off)
{
    st_err e = st_vfs_write_prepare(m->v, h, off, len);
    if (e)
        return e;
    ssize_t n = pwrite(st_vfs_handle_fd(h), data, len, (off_t)off);
    if (n < 0)
        return st_seterr(ST_ERR_IO, "pwrite: %s", strerror(errno));
    st_vfs_write_done(m->v, h, off, (size_t)n);
    return (size_t)n == len ? ST_OK : st_seterr(ST_ERR_IO, "short pwrite");
}

/* close(2): flush (the acknowledgement), then release. */
static inline st_err vh_close(vh_mount *m, st_vfs_handle *h)
{
    st_err e = st_vfs_flush(m->v, h);
    st_vfs_release(m->v, h);
    return e;
}

/* Writes a whole file (O_TRUNC) in 1 MiB writes and closes it. */
static inline st_err vh_write(vh_mount *m, const char *path, const void *data, size_t len,
                              pid_t pid)
{
    st_vfs_handle *h;
    st_err e = vh_create(m, path, O_WRONLY | O_TRUNC, pid, &h);
    if (e)
        return e;
    for (size_t off = 0; !e && off < len; off += 1u << 20) {
        size_t n = len - off < (1u << 20) ? len - off : (1u << 20);
        e = vh_pwrite(m, h, (const uint8_t *)data + off, n, off);
    }
    st_err ce = vh_close(m, h);
    return e ? e : ce;
}

static inline st_err vh_write_str(vh_mount *m, const char *path, const char *s, pid_t pid)
{
    return vh_write(m, path, s, strlen(s), pid);
}

/* Reads all of path into out (open O_RDONLY, pread to EOF, release). */
static inline st_err vh_read(vh_mount *m, const char *path, st_bytes *out)
{
    st_bytes_clear(out);
    st_vfs_attr a;
    st_vfs_handle *h;
    st_err e = vh_lookup(m, path, &a);
    if (e || (e = st_vfs_open_file(m->v, a.ino, O_RDONLY, VH_PID_A, &h)))
        return e;
    for (;;) {
        size_t want = 0;
        if ((e = st_bytes_reserve(out, 1u << 16)) ||
            (want = out->cap - out->len, e = st_vfs_read_wait(m->v, h, out->len, &want)))
            break;
        ssize_t n = pread(st_vfs_handle_fd(h), out->data + out->len, want, (off_t)out->len);
        if (n < 0)
            e = st_seterr(ST_ERR_IO, "pread: %s", strerror(errno));
        if (n <= 0)
            break;
        out->len += (size_t)n;
    }
    st_vfs_release(m->v, h);
    return e;
}

/* Reads len bytes at off through an open handle h as the FUSE read does
 * (st_vfs_read_wait, then pread on its fd); returns the bytes read, -1 on
 * error (e set). */
static inline ssize_t vh_pread(vh_mount *m, st_vfs_handle *h, void *buf, size_t len, uint64_t off,
                               st_err *e)
{
    if ((*e = st_vfs_read_wait(m->v, h, off, &len)))
        return -1;
    ssize_t n = pread(st_vfs_handle_fd(h), buf, len, (off_t)off);
    if (n < 0)
        *e = st_seterr(ST_ERR_IO, "pread: %s", strerror(errno));
    return n;
}

/* 1 if path reads back as exactly data[0..len). */
static inline int vh_file_is(vh_mount *m, const char *path, const void *data, size_t len)
{
    st_bytes got = {0};
    st_err e = vh_read(m, path, &got);
    int same = !e && got.len == len && (len == 0 || memcmp(got.data, data, len) == 0);
    if (!same)
        fprintf(stderr, "  %s on %s: %s, %zu bytes, want %zu\n", path, m->node,
                e ? st_strerror(e) : "differs", got.len, len);
    st_bytes_free(&got);
    return same;
}

static inline int vh_file_is_str(vh_mount *m, const char *path, const char *s)
{
    return vh_file_is(m, path, s, strlen(s));
}

static inline st_err vh_unlink(vh_mount *m, const char *path)
{
    uint64_t dir;
    const char *base;
    st_err e = vh_parent(m, path, &dir, &base);
    return e ? e : st_vfs_unlink(m->v, dir, base);
}

static inline st_err vh_rmdir(vh_mount *m, const char *path)
{
    uint64_t dir;
    const char *base;
    st_err e = vh_parent(m, path, &dir, &base);
    return e ? e : st_vfs_rmdir(m->v, dir, base);
}

/* rename(2); renameat2(2) with flags (ST_VFS_RENAME_NOREPLACE). */
static inline st_err vh_rename_flags(vh_mount *m, const char *from, const char *to, unsigned flags)
{
    uint64_t dir, ndir;
    const char *base, *nbase;
    st_err e = vh_parent(m, from, &dir, &base);
    if (!e)
        e = vh_parent(m, to, &ndir, &nbase);
    return e ? e : st_vfs_rename(m->v, dir, base, ndir, nbase, flags);
}

static inline st_err vh_rename(vh_mount *m, const char *from, const char *to)
{
    return vh_rename_flags(m, from, to, 0);
}

/* The entries of directory path other than "." and "..", sorted (readdir
 * sorts them by name), joined with ','; "" if empty, "?" on error. */
static inline const char *vh_ls(vh_mount *m, const char *path)
{
    static char out[4096];
    st_vfs_attr a;
    st_vfs_dirent *ents;
    size_t n;
    out[0] = '\0';
    uint64_t ino = ST_VFS_ROOT_INO;
    if (path[0] && vh_lookup(m, path, &a) != ST_OK)
        return "?";
    if (path[0])
        ino = a.ino;
    if (st_vfs_readdir(m->v, ino, &ents, &n) != ST_OK)
        return "?";
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(ents[i].name, ".") || !strcmp(ents[i].name, ".."))
            continue;
        size_t used = strlen(out);
        snprintf(out + used, sizeof out - used, "%s%s", used ? "," : "", ents[i].name);
    }
    st_vfs_dirents_free(ents, n);
    return out;
}

/* rm -r path as shutil.rmtree does it: list, unlink files, recurse into
 * directories, rmdir. */
static inline st_err vh_rmtree(vh_mount *m, const char *path)
{
    st_vfs_attr a;
    st_vfs_dirent *ents;
    size_t n;
    st_err e = vh_lookup(m, path, &a);
    if (e || (e = st_vfs_readdir(m->v, a.ino, &ents, &n)))
        return e;
    for (size_t i = 0; !e && i < n; i++) {
        if (!strcmp(ents[i].name, ".") || !strcmp(ents[i].name, ".."))
            continue;
        char child[PATH_MAX];
        int len = snprintf(child, sizeof child, "%s/%s", path, ents[i].name);
        if (len < 0 || (size_t)len >= sizeof child)
            e = ST_ERR_INVALID; /* a path too long for the harness */
        else
            e = S_ISDIR(ents[i].mode) ? vh_rmtree(m, child) : vh_unlink(m, child);
    }
    st_vfs_dirents_free(ents, n);
    return e ? e : vh_rmdir(m, path);
}

/* Writes text to the write-only control file ino (one write, as ckpt_commit
 * and ckptctl do). */
static inline st_err vh_ctl_write(vh_mount *m, uint64_t ino, const char *text)
{
    st_vfs_handle *h;
    st_err e = st_vfs_open_file(m->v, ino, O_WRONLY, VH_PID_A, &h);
    if (e)
        return e;
    e = st_vfs_handle_write(m->v, h, text, strlen(text));
    st_vfs_release(m->v, h);
    return e;
}

/* Writes lines to .ckptfs/commit. */
static inline st_err vh_commit(vh_mount *m, const char *lines)
{
    return vh_ctl_write(m, ST_VFS_COMMIT_INO, lines);
}

/* ---- the status file ---- */

/* The status file's JSON (NUL-terminated in out). */
static inline void vh_status(vh_mount *m, st_bytes *out)
{
    st_vfs_handle *h;
    st_bytes_clear(out);
    if (st_vfs_open_file(m->v, ST_VFS_STATUS_INO, O_RDONLY, VH_PID_A, &h) == ST_OK) {
        char buf[4096];
        size_t n;
        while ((n = st_vfs_handle_read(h, out->len, buf, sizeof buf)) > 0)
            st_bytes_append(out, buf, n);
        st_vfs_release(m->v, h);
    }
    st_bytes_put_u8(out, '\0');
}

/*
 * The "state" the status file gives step of VH_JOB ("writing", "complete",
 * "queued", "uploading", "durable"), or "" when the step is not listed
 * (unknown, or removed through the mount). Static buffer: one use at a time.
 */
static inline const char *vh_state(vh_mount *m, uint64_t step)
{
    static char state[32];
    st_bytes s = {0};
    char pat[96];
    vh_status(m, &s);
    snprintf(pat, sizeof pat, "{\"job\":\"%s\",\"step\":%" PRIu64 ",\"state\":\"", VH_JOB, step);
    const char *p = strstr((const char *)s.data, pat);
    state[0] = '\0';
    if (p)
        sscanf(p + strlen(pat), "%31[a-z_]", state);
    st_bytes_free(&s);
    return state;
}

/* The state of VH_JOB's deletion request for step ("pending",
 * "kept_newest_durable", "kept_pinned", "moving_files"), or "" if none. */
static inline const char *vh_deletion(vh_mount *m, uint64_t step)
{
    static char state[32];
    st_bytes s = {0};
    char pat[96];
    vh_status(m, &s);
    state[0] = '\0';
    snprintf(pat, sizeof pat, "{\"job\":\"%s\",\"deletions\":[", VH_JOB);
    char *p = strstr((char *)s.data, pat);
    char *end = p ? strchr(p, ']') : NULL;
    if (end) {
        *end = '\0';
        snprintf(pat, sizeof pat, "{\"step\":%" PRIu64 ",\"state\":\"", step);
        const char *d = strstr(p, pat);
        if (d)
            sscanf(d + strlen(pat), "%31[a-z_]", state);
    }
    st_bytes_free(&s);
    return state;
}

/* A number field of the status file: the first "name":N after the first
 * occurrence of `after` (NULL: from the start); UINT64_MAX if missing. */
/* 1 if the status file holds text. */
static inline int vh_status_has(vh_mount *m, const char *text)
{
    st_bytes s = {0};
    vh_status(m, &s);
    int has = s.data && strstr((const char *)s.data, text) != NULL;
    st_bytes_free(&s);
    return has;
}

static inline uint64_t vh_status_u64(vh_mount *m, const char *after, const char *name)
{
    st_bytes s = {0};
    char pat[96];
    uint64_t val = UINT64_MAX;
    vh_status(m, &s);
    const char *p = (const char *)s.data;
    if (after)
        p = strstr(p, after);
    snprintf(pat, sizeof pat, "\"%s\":", name);
    if (p && (p = strstr(p, pat)))
        sscanf(p + strlen(pat), "%" SCNu64, &val);
    st_bytes_free(&s);
    return val;
}

/* ---- crashes ---- */

/*
 * Runs child_main in a child process and waits for it: a test's crashing
 * child, which mounts a staging directory, writes and dies with _exit()
 * without closing anything. Returns 1 if the child got to its _exit(0).
 */
static inline int vh_run_crashing_child(void (*child_main)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return 0;
    if (pid == 0) {
        child_main(); /* ends in _exit() */
        _exit(99);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid)
        return 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fprintf(stderr, "  crashing child ended with status %d\n", status);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* ---- the store ---- */

/* Number of objects under prefix. */
static inline int vh_count_cb(void *arg, const char *key, uint64_t size)
{
    (void)key, (void)size;
    ++*(size_t *)arg;
    return 0;
}

static inline size_t vh_count(st_backend *b, const char *prefix)
{
    size_t n = 0;
    CHECK_OK(st_list(b, prefix, vh_count_cb, &n));
    return n;
}

/* Number of objects of step of VH_JOB (part records, manifests). */
static inline size_t vh_step_objects(st_backend *b, uint64_t step)
{
    char prefix[ST_KEY_MAX];
    CHECK_OK(st_key_step_prefix(prefix, sizeof prefix, VH_JOB, step));
    return vh_count(b, prefix);
}

/* node's part record of step of VH_JOB into *p (st_part_free), or the
 * error (ST_ERR_NOT_FOUND: none). */
static inline st_err vh_part(st_backend *b, uint64_t step, const char *node, st_part *p)
{
    st_bytes buf = {0};
    memset(p, 0, sizeof *p);
    st_err e = st_catalog_load_part(b, VH_JOB, step, node, &buf, p);
    st_bytes_free(&buf);
    return e;
}

/* node's part record of step, reduced to what the tests ask of it: its
 * complete flag and its revision (both 0 when there is none). */
static inline void vh_part_summary(st_backend *b, uint64_t step, const char *node, int *complete,
                                   uint32_t *revision)
{
    st_part p;
    *complete = 0;
    *revision = 0;
    if (vh_part(b, step, node, &p))
        return;
    *complete = p.complete;
    *revision = p.revision;
    st_part_free(&p);
}

/* 1 if node's part record of step exists and says complete. */
static inline int vh_part_complete(st_backend *b, uint64_t step, const char *node)
{
    int complete;
    uint32_t revision;
    vh_part_summary(b, step, node, &complete, &revision);
    return complete;
}

/* The revision of node's part record of step, 0 if none. */
static inline uint32_t vh_part_revision(st_backend *b, uint64_t step, const char *node)
{
    int complete;
    uint32_t revision;
    vh_part_summary(b, step, node, &complete, &revision);
    return revision;
}

static inline int vh_strcmp_p(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * What the store holds of step of VH_JOB: the paths of every part's current
 * manifest, sorted and joined with ','. *consistent (may be NULL) gets the
 * consistency rule's verdict. "-" when the store has no part of the step,
 * "?" on a store error. Static buffer: one use at a time.
 */
static inline const char *vh_stored(st_backend *b, uint64_t step, int *consistent)
{
    static char out[8192];
    st_step_keys *keys = NULL;
    size_t n = 0;
    snprintf(out, sizeof out, "-");
    if (consistent)
        *consistent = 0;
    if (st_catalog_list_steps(b, VH_JOB, &keys, &n) != ST_OK)
        return "?";
    for (size_t k = 0; k < n; k++) {
        if (keys[k].step != step)
            continue;
        st_bytes buf = {0};
        st_stepview sv;
        if (st_catalog_load_view(b, VH_JOB, &keys[k], &buf, &sv) != ST_OK) {
            snprintf(out, sizeof out, "?");
            st_bytes_free(&buf);
            break;
        }
        size_t nf = 0;
        for (size_t i = 0; i < sv.nparts; i++)
            nf += sv.manifests[i].nfiles;
        char **paths = calloc(nf + 1, sizeof *paths);
        nf = 0;
        for (size_t i = 0; paths && i < sv.nparts; i++)
            for (size_t f = 0; f < sv.manifests[i].nfiles; f++)
                paths[nf++] = sv.manifests[i].files[f].path;
        if (paths)
            qsort(paths, nf, sizeof *paths, vh_strcmp_p);
        out[0] = '\0';
        for (size_t i = 0; paths && i < nf; i++) {
            size_t used = strlen(out);
            snprintf(out + used, sizeof out - used, "%s%s", i ? "," : "", paths[i]);
        }
        if (consistent)
            *consistent = sv.consistent;
        free(paths);
        st_stepview_free(&sv);
        st_bytes_free(&buf);
    }
    st_step_keys_free(keys, n);
    return out;
}

/*
 * 1 if what the store holds of step of VH_JOB (vh_stored) is exactly want;
 * else 0, and both lists go to stderr, so that the failing CHECK shows which
 * file is missing or extra without a debugger.
 */
static inline int vh_stored_is(st_backend *b, uint64_t step, const char *want)
{
    const char *got = vh_stored(b, step, NULL);
    if (strcmp(got, want) == 0)
        return 1;
    fprintf(stderr, "  step %llu stored: %s\n  want:            %s\n", (unsigned long long)step,
            got, want);
    return 0;
}

/*
 * The content the store holds of path in step of VH_JOB (the version every
 * reader takes) into *out; "?" on any error (not stored, cannot restore).
 */
static inline void vh_stored_content(st_backend *b, uint64_t step, const char *path, st_bytes *out)
{
    st_step_keys *keys = NULL;
    size_t n = 0;
    st_err e = st_catalog_list_steps(b, VH_JOB, &keys, &n);
    st_bytes_free(out);
    for (size_t k = 0; !e && k < n; k++) {
        st_bytes buf = {0};
        st_stepview sv;
        if (keys[k].step != step || st_catalog_load_view(b, VH_JOB, &keys[k], &buf, &sv)) {
            st_bytes_free(&buf);
            continue;
        }
        for (size_t i = 0; i < sv.nentries; i++) {
            if (strcmp(sv.entries[i].f->path, path))
                continue;
            char tmp[PATH_MAX];
            snprintf(tmp, sizeof tmp, "%s/stored-content-XXXXXX", vh_tmp);
            int fd = mkstemp(tmp);
            st_restorer *r = NULL;
            if (fd >= 0 && st_restorer_new(b, VH_JOB, &r) == ST_OK &&
                st_restore_file(r, sv.entries[i].m, sv.entries[i].f, fd) == ST_OK) {
                struct stat st;
                if (fstat(fd, &st) == 0 && st_bytes_reserve(out, (size_t)st.st_size + 1) == ST_OK &&
                    pread(fd, out->data, (size_t)st.st_size, 0) == st.st_size)
                    out->len = (size_t)st.st_size;
            }
            st_restorer_free(r);
            if (fd >= 0) {
                close(fd);
                unlink(tmp);
            }
        }
        st_stepview_free(&sv);
        st_bytes_free(&buf);
    }
    st_step_keys_free(keys, n);
}

/* 1 if path in step of VH_JOB is stored with exactly the content want; else
 * 0, and what it holds goes to stderr. */
static inline int vh_stored_content_is(st_backend *b, uint64_t step, const char *path,
                                       const char *want)
{
    st_bytes got = {0};
    vh_stored_content(b, step, path, &got);
    int same = got.data && got.len == strlen(want) && memcmp(got.data, want, got.len) == 0;
    if (!same)
        fprintf(stderr, "  step %llu stores %s as \"%.*s\" (%zu bytes), want \"%s\"\n",
                (unsigned long long)step, path, (int)(got.data ? got.len : 0),
                got.data ? (const char *)got.data : "", got.data ? got.len : 0, want);
    st_bytes_free(&got);
    return same;
}

/* 1 if path in step of VH_JOB is stored with exactly the len bytes want. */
static inline int vh_stored_bytes_are(st_backend *b, uint64_t step, const char *path,
                                      const void *want, size_t len)
{
    st_bytes got = {0};
    vh_stored_content(b, step, path, &got);
    int same = got.data && got.len == len && memcmp(got.data, want, len) == 0;
    if (!same)
        fprintf(stderr, "  step %llu stores %s as %zu other bytes, want %zu\n",
                (unsigned long long)step, path, got.data ? got.len : 0, len);
    st_bytes_free(&got);
    return same;
}

/* 1 if the store holds step of VH_JOB and it is consistent. */
static inline int vh_consistent(st_backend *b, uint64_t step)
{
    int c;
    vh_stored(b, step, &c);
    return c;
}

/* The newest consistent step of VH_JOB, UINT64_MAX if none. */
static inline uint64_t vh_latest(st_backend *b)
{
    st_stepview sv;
    st_err e = st_catalog_newest_consistent(b, VH_JOB, 0, UINT64_MAX, NULL, NULL, &sv);
    if (e)
        return UINT64_MAX;
    uint64_t step = sv.step;
    st_stepview_free(&sv);
    return step;
}

/* ---- data ---- */

/* len deterministic pseudo-random bytes from seed, malloc'd. */
static inline uint8_t *vh_data(size_t len, uint64_t seed)
{
    uint8_t *p = malloc(len ? len : 1);
    if (!p)
        abort();
    ut_rand_fill(p, len, seed);
    return p;
}

/*
 * The files of an HF Trainer save of step into <word>-<step>/:
 * pytorch_model.bin (random, from seed; malloc'd, freed by the caller) and,
 * written last, trainer_state.json. One place for what vh_hf_save() writes
 * and vh_hf_is() expects.
 */
typedef struct vh_hf_files {
    char model_path[PATH_MAX], state_path[PATH_MAX], state[128];
    uint8_t *model;
    size_t model_len;
} vh_hf_files;

static inline void vh_hf_make(vh_hf_files *f, const char *word, uint64_t step, uint64_t seed)
{
    f->model_len = 150000 + (size_t)(seed % 7) * 1000;
    f->model = vh_data(f->model_len, seed * 1000 + step);
    snprintf(f->model_path, sizeof f->model_path, "%s/%s-%" PRIu64 "/pytorch_model.bin", VH_JOB,
             word, step);
    snprintf(f->state_path, sizeof f->state_path, "%s/%s-%" PRIu64 "/trainer_state.json", VH_JOB,
             word, step);
    snprintf(f->state, sizeof f->state, "{\"global_step\": %" PRIu64 ", \"seed\": %" PRIu64 "}",
             step, seed);
}

/* Writes the HF save (word, step, seed) through m. Returns 0 if every write
 * worked. */
static inline st_err vh_hf_save(vh_mount *m, const char *word, uint64_t step, uint64_t seed)
{
    vh_hf_files f;
    vh_hf_make(&f, word, step, seed);
    st_err e = vh_write(m, f.model_path, f.model, f.model_len, VH_PID_A);
    if (!e)
        e = vh_write_str(m, f.state_path, f.state, VH_PID_A);
    free(f.model);
    return e;
}

/* 1 if mount m shows the HF save (word, step, seed) byte for byte. */
static inline int vh_hf_is(vh_mount *m, const char *word, uint64_t step, uint64_t seed)
{
    vh_hf_files f;
    vh_hf_make(&f, word, step, seed);
    int ok = vh_file_is(m, f.model_path, f.model, f.model_len) &&
             vh_file_is_str(m, f.state_path, f.state);
    free(f.model);
    return ok;
}

#endif
