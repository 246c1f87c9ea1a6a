/*
 * st_vfs_journal — the mount's namespace on disk, so that a restarted daemon
 * finds every file whose close() returned (DESIGN invariant 1).
 *
 * STAGING/journal.db (SQLite, WAL, synchronous=FULL):
 *   entries(job, path, kind, sid, size, mode, mtime_ns, state, step,
 *           remote_step, remote_node, remote_rev, remote_path, rank, world)
 *       kind 0 directory, 1 file, 2 tombstone (a store file deleted here);
 *       state as vfile_state; step -1 for none; then failed (vnode.write_failed)
 *       and unsynced (a close returned before the bytes were on disk:
 *       docs/MOUNT_MODEL.md, "When close() waits for the disk"); then uid
 *       and gid, the owner (-1: the mount's user, as rows of older journals
 *       read).
 *   steps(job, step, complete, revision, commits "rank:world,...")
 *   kept(job, step, path, sid, size, mode, mtime_ns)
 *       a naming marker's version its step still has to publish
 *       (st_vfs_keep.c); STAGING/data/<sid>, named by no entries row.
 *   meta(key, value)
 *       "boot_id": the boot of the machine the rows were last recovered in
 *       (unsynced rows of another boot may hold torn bytes).
 *   deletions(job, step, path, requested_ns)
 *       steps removed through the mount, not yet deleted from the store
 *       (st_vfs_delete.c); written in the same transaction as the removal.
 *
 * Rows are written when the state changes (create, flush/close, rename,
 * unlink, upload finished), never per write(): the size is re-read from the
 * staging file at recovery. Recovery drops files still WRITING — no close()
 * of theirs returned, so no writer was told they were safe — and queues
 * every complete step that still has files to upload.
 *
 * Threads: every function runs under v->lock (one connection, serialised).
 */
#include "mount/st_vfs_impl.h"

#include "util/st_array.h"
#include "util/st_fsutil.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char journal_schema[] =
    "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
    "CREATE TABLE IF NOT EXISTS entries ("
    "  job TEXT NOT NULL, path TEXT NOT NULL, kind INTEGER NOT NULL,"
    "  sid INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL DEFAULT 0,"
    "  mode INTEGER NOT NULL DEFAULT 0, mtime_ns INTEGER NOT NULL DEFAULT 0,"
    "  state INTEGER NOT NULL DEFAULT 0, step INTEGER NOT NULL DEFAULT -1,"
    "  remote_step INTEGER NOT NULL DEFAULT -1, remote_node TEXT, remote_rev INTEGER,"
    "  remote_path TEXT, rank INTEGER NOT NULL DEFAULT -1, world INTEGER NOT NULL DEFAULT 0,"
    "  failed INTEGER NOT NULL DEFAULT 0, unsynced INTEGER NOT NULL DEFAULT 0,"
    "  uid INTEGER NOT NULL DEFAULT -1, gid INTEGER NOT NULL DEFAULT -1,"
    "  PRIMARY KEY (job, path)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS meta ("
    "  key TEXT NOT NULL PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS steps ("
    "  job TEXT NOT NULL, step INTEGER NOT NULL, complete INTEGER NOT NULL,"
    "  revision INTEGER NOT NULL, commits TEXT NOT NULL DEFAULT '',"
    "  PRIMARY KEY (job, step)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS deletions ("
    "  job TEXT NOT NULL, step INTEGER NOT NULL, path TEXT NOT NULL,"
    "  requested_ns INTEGER NOT NULL, PRIMARY KEY (job, step)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS kept ("
    "  job TEXT NOT NULL, step INTEGER NOT NULL, path TEXT NOT NULL,"
    "  sid INTEGER NOT NULL, size INTEGER NOT NULL, mode INTEGER NOT NULL,"
    "  mtime_ns INTEGER NOT NULL, PRIMARY KEY (job, step, path)) WITHOUT ROWID;";

#define DB(v) ((sqlite3 *)(v)->journal)

/* The columns a journal of an older version lacks (vnode.write_failed,
 * vnode.unsynced, the owner), in the order of journal_schema. */
static const char *const journal_add_columns[] = {
    "ALTER TABLE entries ADD COLUMN failed INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE entries ADD COLUMN unsynced INTEGER NOT NULL DEFAULT 0",
    "ALTER TABLE entries ADD COLUMN uid INTEGER NOT NULL DEFAULT -1",
    "ALTER TABLE entries ADD COLUMN gid INTEGER NOT NULL DEFAULT -1",
};

/* This boot of the machine; "" if unknown (then every boot is another). */
static void current_boot_id(char *out, size_t cap)
{
    out[0] = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    if (!fgets(out, (int)cap, f))
        out[0] = 0;
    fclose(f);
    out[strcspn(out, "\n")] = 0;
}

static st_err jerr(st_vfs *v, const char *what)
{
    /* A full staging disk is ENOSPC to the writer, not EIO. */
    int full = sqlite3_errcode(DB(v)) == SQLITE_FULL;
    st_err e = st_seterr(full ? ST_ERR_NOSPACE : ST_ERR_IO, "journal: %s: %s", what,
                         sqlite3_errmsg(DB(v)));
    vfs_set_error(v, "%s", st_errmsg());
    vfs_log(v, 2, "%s", st_errmsg());
    return e;
}

/* Prepares, binds with a printf-like type string, steps once. Types:
 * 't' text, 'i' int64, 'n' null-or-text. */
static st_err exec(st_vfs *v, const char *sql, const char *types, ...)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(DB(v), sql, -1, &q, NULL) != SQLITE_OK)
        return jerr(v, "prepare");
    va_list ap;
    va_start(ap, types);
    for (int i = 0; types[i]; i++) {
        if (types[i] == 't')
            sqlite3_bind_text(q, i + 1, va_arg(ap, const char *), -1, SQLITE_TRANSIENT);
        else if (types[i] == 'n') {
            const char *s = va_arg(ap, const char *);
            if (s)
                sqlite3_bind_text(q, i + 1, s, -1, SQLITE_TRANSIENT);
            else
                sqlite3_bind_null(q, i + 1);
        } else
            sqlite3_bind_int64(q, i + 1, va_arg(ap, int64_t));
    }
    va_end(ap);
    int rc = sqlite3_step(q);
    sqlite3_finalize(q);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? ST_OK : jerr(v, "write");
}

st_err vfs_journal_open(st_vfs *v)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/journal.db", v->staging);
    sqlite3 *db = NULL;
    /* NOFOLLOW: the journal is the daemon's own file, never one a symlink names */
    if (sqlite3_open_v2(path, &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOFOLLOW,
                        NULL) != SQLITE_OK) {
        st_err e = st_seterr(ST_ERR_IO, "open journal %s: %s", path,
                             db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return e;
    }
    v->journal = db;
    sqlite3_busy_timeout(db, 10000);
    char *msg = NULL;
    if (sqlite3_exec(db, journal_schema, NULL, NULL, &msg) != SQLITE_OK) {
        st_err e = st_seterr(ST_ERR_IO, "journal schema: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return e;
    }
    /* Each fails with "duplicate column" on a journal that has it: fine. */
    for (size_t i = 0; i < sizeof journal_add_columns / sizeof *journal_add_columns; i++)
        (void)sqlite3_exec(db, journal_add_columns[i], NULL, NULL, NULL);
    char boot[64];
    current_boot_id(boot, sizeof boot);
    if (!boot[0] && v->close_in_background)
        vfs_log(v, 1,
                "cannot read /proc/sys/kernel/random/boot_id: a restart of the daemon will be "
                "taken for one of the machine, and files whose sync a crash cut off will hold "
                "their steps back (--close-sync background)");
    sqlite3_stmt *q;
    v->journal_other_boot = 1;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='boot_id'", -1, &q, NULL) !=
        SQLITE_OK)
        return jerr(v, "read the boot");
    if (sqlite3_step(q) == SQLITE_ROW) {
        const char *was = (const char *)sqlite3_column_text(q, 0);
        v->journal_other_boot = !boot[0] || !was || strcmp(was, boot) != 0;
    }
    sqlite3_finalize(q);
    return ST_OK;
}

st_err vfs_journal_mark_boot(st_vfs *v)
{
    char boot[64];
    current_boot_id(boot, sizeof boot);
    return exec(v, "INSERT OR REPLACE INTO meta VALUES ('boot_id', ?1)", "t", boot);
}

void vfs_journal_close(st_vfs *v)
{
    sqlite3_close(DB(v));
    v->journal = NULL;
}

st_err vfs_journal_put_file(st_vfs *v, vnode *n)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    vnode *jd = vfs_job_dir(n);
    if (!jd || !vfs_job_path(n, path, sizeof path))
        return ST_OK;
    const vremote *r = n->remote;
    return exec(v,
                "INSERT OR REPLACE INTO entries VALUES"
                " (?1,?2,1,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18)",
                "ttiiiiiiininiiiiii", jd->name, path, (int64_t)n->sid, (int64_t)n->size,
                (int64_t)n->mode, n->mtime_ns, (int64_t)n->state,
                n->step == VFS_NO_STEP ? (int64_t)-1 : (int64_t)n->step,
                r ? (int64_t)r->step : (int64_t)-1, r ? r->node : NULL,
                r ? (int64_t)r->revision : (int64_t)0, r ? r->path : NULL, (int64_t)n->rank,
                (int64_t)n->world, (int64_t)n->write_failed, (int64_t)n->unsynced, (int64_t)n->uid,
                (int64_t)n->gid);
}

st_err vfs_journal_put_file_lazy(st_vfs *v, vnode *n)
{
    /* In WAL mode, NORMAL writes the commit to the WAL without its fsync:
     * the kernel holds it, and the next FULL commit takes it to the disk. */
    st_err e = exec(v, "PRAGMA synchronous=NORMAL", "");
    if (!e)
        e = vfs_journal_put_file(v, n);
    st_err back = exec(v, "PRAGMA synchronous=FULL", "");
    return e ? e : back;
}

st_err vfs_journal_put_dir(st_vfs *v, vnode *n)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    vnode *jd = vfs_job_dir(n);
    if (!jd)
        return ST_OK;
    if (jd == n)
        path[0] = '\0';
    else if (!vfs_job_path(n, path, sizeof path))
        return ST_OK;
    return exec(v,
                "INSERT OR REPLACE INTO entries (job, path, kind, mode, mtime_ns, uid, gid)"
                " VALUES (?1, ?2, 0, ?3, ?4, ?5, ?6)",
                "ttiiii", jd->name, path, (int64_t)n->mode, n->mtime_ns, (int64_t)n->uid,
                (int64_t)n->gid);
}

st_err vfs_journal_delete(st_vfs *v, const char *job, const char *path)
{
    if (!path[0]) /* a job directory: everything of the job */
        return exec(v, "DELETE FROM entries WHERE job=?1", "t", job);
    return exec(v, "DELETE FROM entries WHERE job=?1 AND path=?2", "tt", job, path);
}

st_err vfs_journal_tombstone(st_vfs *v, const char *job, const char *path)
{
    return exec(v, "INSERT OR REPLACE INTO entries (job, path, kind) VALUES (?1, ?2, 2)", "tt", job,
                path);
}

int vfs_journal_is_tombstone(st_vfs *v, const char *job, const char *path)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(DB(v), "SELECT 1 FROM entries WHERE job=?1 AND path=?2 AND kind=2", -1,
                           &q, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, path, -1, SQLITE_STATIC);
    int found = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_finalize(q);
    return found;
}

st_err vfs_journal_rename(st_vfs *v, const char *job, const char *from, const char *to)
{
    /* The entry itself, and for a directory everything below it. A target
     * row (replaced file, tombstone) was removed by the caller or is
     * replaced here; so are tombstones below the target (an empty directory
     * whose stored files were unlinked) where the moved tree brings a file. */
    st_err e = exec(v, "DELETE FROM entries WHERE job=?1 AND path=?2", "tt", job, to);
    if (!e)
        e = exec(
            v,
            "DELETE FROM entries WHERE job=?1 AND kind=2"
            " AND substr(path, 1, length(?3) + 1) = ?3 || '/'"
            " AND ?2 || substr(path, length(?3) + 1) IN (SELECT path FROM entries WHERE job=?1)",
            "ttt", job, from, to);
    if (!e)
        e = exec(v, "UPDATE entries SET path=?3 WHERE job=?1 AND path=?2", "ttt", job, from, to);
    if (!e)
        e = exec(v,
                 "UPDATE entries SET path = ?3 || substr(path, length(?2) + 1)"
                 " WHERE job=?1 AND substr(path, 1, length(?2) + 1) = ?2 || '/'",
                 "ttt", job, from, to);
    return e;
}

st_err vfs_journal_put_step(st_vfs *v, const char *job, const vstep *s)
{
    char commits[4096] = "";
    size_t len = 0;
    for (size_t i = 0; i < s->ncommits && len < sizeof commits - 24; i++)
        len += (size_t)snprintf(commits + len, sizeof commits - len, "%s%u:%u", i ? "," : "",
                                s->commits[i].rank, s->commits[i].world_size);
    /* complete: 1 complete, 2 a rule fired while a file of the step had a
     * failed write (vstep.blocked_complete), 0 neither. */
    int64_t complete = s->complete ? 1 : s->blocked_complete ? 2 : 0;
    return exec(v, "INSERT OR REPLACE INTO steps VALUES (?1, ?2, ?3, ?4, ?5)", "tiiit", job,
                (int64_t)s->step, complete, (int64_t)s->revision, commits);
}

st_err vfs_journal_drop_step(st_vfs *v, const char *job, uint64_t step)
{
    return exec(v, "DELETE FROM steps WHERE job=?1 AND step=?2", "ti", job, (int64_t)step);
}

st_err vfs_journal_begin(st_vfs *v)
{
    return exec(v, "BEGIN IMMEDIATE", "");
}

st_err vfs_journal_commit(st_vfs *v)
{
    st_err e = exec(v, "COMMIT", "");
    if (e)
        vfs_journal_rollback(v);
    return e;
}

void vfs_journal_rollback(st_vfs *v)
{
    if (!sqlite3_get_autocommit(DB(v)))
        sqlite3_exec(DB(v), "ROLLBACK", NULL, NULL, NULL);
}

st_err vfs_journal_put_deletion(st_vfs *v, const char *job, const vdeletion *d)
{
    return exec(v, "INSERT OR REPLACE INTO deletions VALUES (?1, ?2, ?3, ?4)", "titi", job,
                (int64_t)d->step, d->path, d->requested_ns);
}

st_err vfs_journal_drop_deletion(st_vfs *v, const char *job, uint64_t step)
{
    return exec(v, "DELETE FROM deletions WHERE job=?1 AND step=?2", "ti", job, (int64_t)step);
}

st_err vfs_journal_drop_tombstones(st_vfs *v, const char *job, const char *path)
{
    return exec(v,
                "DELETE FROM entries WHERE job=?1 AND kind=2"
                " AND (path=?2 OR substr(path, 1, length(?2) + 1) = ?2 || '/')",
                "tt", job, path);
}

st_err vfs_journal_put_kept(st_vfs *v, const vkept *k)
{
    return exec(v, "INSERT OR REPLACE INTO kept VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", "titiiii",
                k->job, (int64_t)k->step, k->path, (int64_t)k->sid, (int64_t)k->size,
                (int64_t)k->mode, k->mtime_ns);
}

st_err vfs_journal_drop_kept(st_vfs *v, const char *job, uint64_t step, const char *path)
{
    return exec(v, "DELETE FROM kept WHERE job=?1 AND step=?2 AND path=?3", "tit", job,
                (int64_t)step, path);
}

st_err vfs_journal_each_kept(st_vfs *v,
                             void (*each)(void *arg, const char *job, uint64_t step,
                                          const char *path, uint64_t sid, uint32_t mode,
                                          int64_t mtime_ns),
                             void *arg)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(DB(v), "SELECT job, step, path, sid, mode, mtime_ns FROM kept", -1, &q,
                           NULL) != SQLITE_OK)
        return jerr(v, "recover kept versions");
    /* Read whole first: the callback may delete rows. */
    typedef struct row {
        char *job, *path;
        int64_t step, sid, mode, mtime_ns;
    } row;
    row *rows = NULL;
    size_t n = 0, cap = 0;
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *job = (const char *)sqlite3_column_text(q, 0);
        const char *path = (const char *)sqlite3_column_text(q, 2);
        if (!job || !path || !st_name_is_valid(job, ST_JOB_MAX) ||
            !st_path_is_clean(path, strlen(path)) ||
            st_array_grow((void **)&rows, &cap, n + 1, sizeof *rows))
            continue;
        rows[n] = (row){strdup(job),
                        strdup(path),
                        sqlite3_column_int64(q, 1),
                        sqlite3_column_int64(q, 3),
                        sqlite3_column_int64(q, 4),
                        sqlite3_column_int64(q, 5)};
        if (rows[n].job && rows[n].path && rows[n].step >= 0 && rows[n].sid > 0)
            n++;
        else {
            free(rows[n].job);
            free(rows[n].path);
        }
    }
    sqlite3_finalize(q);
    for (size_t i = 0; i < n; i++) {
        if (rc == SQLITE_DONE)
            each(arg, rows[i].job, (uint64_t)rows[i].step, rows[i].path, (uint64_t)rows[i].sid,
                 (uint32_t)rows[i].mode, rows[i].mtime_ns);
        free(rows[i].job);
        free(rows[i].path);
    }
    free(rows);
    return rc == SQLITE_DONE ? ST_OK : jerr(v, "recover kept versions");
}

/* Parses "rank:world,..." back into s->commits. */
static void parse_commits(vstep *s, const char *text)
{
    while (text && *text) {
        unsigned rank, world;
        int used;
        if (sscanf(text, "%u:%u%n", &rank, &world, &used) != 2 || rank >= world)
            return;
        if (st_array_grow((void **)&s->commits, &s->commits_cap, s->ncommits + 1,
                          sizeof *s->commits))
            return;
        s->commits[s->ncommits++] = (st_rank_commit){rank, world};
        text += used;
        if (*text == ',')
            text++;
    }
}

/* A file whose close() returned before its bytes were on the staging disk
 * (docs/MOUNT_MODEL.md, "When close() waits for the disk"). In this boot the
 * page cache still holds them: sync them now. After another boot they may
 * be torn: the file stays, but its step is never published from it. */
static void recover_unsynced(st_vfs *v, vnode *n, const char *job, const char *path,
                             const char *staging)
{
    n->unsynced = 1;
    int fd;
    if (!v->journal_other_boot && vfs_staging_open(v, staging, O_RDONLY, &fd) == ST_OK) {
        if (fdatasync(fd) == 0)
            n->unsynced = 0;
        close(fd);
    }
    if (n->unsynced) {
        /* Judged once: the failure stands for it from now on, and nothing
         * is left to sync (unsynced_files counts what still will be). After
         * another boot the file is torn (ST_ERR_CORRUPT): its reads fail
         * too, or a trainer resuming from the newest file would load zeros
         * or an earlier file's bytes. In this boot the sync failed: the
         * bytes may be whole in the page cache, as after a failed write. */
        n->unsynced = 0;
        int torn = v->journal_other_boot;
        vfs_set_write_failed(v, n, torn ? ST_ERR_CORRUPT : ST_ERR_IO);
        vfs_log(v, 2,
                "%s/%s: its close() returned before its bytes were on the staging disk, and %s: "
                "%sits step is not published until the file is rewritten or removed",
                job, path, torn ? "the machine stopped" : "they cannot be synced",
                torn ? "reads of it fail and " : "");
    }
    (void)vfs_journal_put_file(v, n);
}

/* The owner of row q, where it has one (-1: a row of an older journal,
 * the mount's user's as vfs_node_new made it). */
static void recover_owner(vnode *n, sqlite3_stmt *q)
{
    int64_t uid = sqlite3_column_int64(q, 17), gid = sqlite3_column_int64(q, 18);
    if (uid >= 0 && uid <= UINT32_MAX)
        n->uid = (uint32_t)uid;
    if (gid >= 0 && gid <= UINT32_MAX)
        n->gid = (uint32_t)gid;
}

/* Recreates one journal row in the tree. */
static void recover_entry(st_vfs *v, sqlite3_stmt *q)
{
    const char *job = (const char *)sqlite3_column_text(q, 0);
    const char *path = (const char *)sqlite3_column_text(q, 1);
    int kind = sqlite3_column_int(q, 2);
    if (!job || !path || kind == 2 || !st_name_is_valid(job, ST_JOB_MAX))
        return;
    vjob *j = vfs_job(v, job, 1);
    vnode *jd = vfs_child(v->root, job);
    if (!jd && !(jd = vfs_node_new(v, v->root, job, S_IFDIR | 0755)))
        return;
    (void)j;
    if (!path[0]) {
        jd->mode = S_IFDIR | ((uint32_t)sqlite3_column_int64(q, 5) & 07777);
        recover_owner(jd, q);
        return;
    }
    if (!st_path_is_clean(path, strlen(path)))
        return;
    const char *base;
    vnode *dir = vfs_walk(v, jd, path, 1, &base);
    if (!dir || vfs_child(dir, base))
        return;
    uint32_t mode = (uint32_t)sqlite3_column_int64(q, 5);
    if (kind == 0) {
        vnode *d = vfs_node_new(v, dir, base, S_IFDIR | (mode & 07777));
        if (d) {
            d->mtime_ns = sqlite3_column_int64(q, 6);
            recover_owner(d, q);
        }
        return;
    }
    uint64_t sid = (uint64_t)sqlite3_column_int64(q, 3);
    vfile_state state = (vfile_state)sqlite3_column_int(q, 7);
    char sp[PATH_MAX];
    struct stat st;
    if (sid) {
        vfs_staging_path(v, sid, sp, sizeof sp);
        if (state == VFILE_WRITING) {
            /* never acknowledged: not kept (see the file comment) */
            unlink(sp);
            /* A row left behind is dropped the same way at the next start. */
            (void)exec(v, "DELETE FROM entries WHERE job=?1 AND path=?2", "tt", job, path);
            return;
        }
    }
    int64_t rstep = sqlite3_column_int64(q, 9);
    const char *rnode = (const char *)sqlite3_column_text(q, 10);
    const char *rpath = (const char *)sqlite3_column_text(q, 12);
    int stored = state == VFILE_DURABLE && rstep >= 0 && rnode && rpath;
    int unsynced = sqlite3_column_int(q, 16);
    if (sid && unsynced && v->journal_other_boot && stored) {
        /* Its bytes may be torn; the store has them whole. */
        unlink(sp);
        unsynced = 0;
    }
    int lost_local = 0;
    int have = sid && lstat(sp, &st) == 0;
    if (have && !S_ISREG(st.st_mode)) {
        /* Not one the daemon made (a symlink, a FIFO put there): never
         * followed nor opened, and left where it is. */
        vfs_log(v, 2, "journal names %s/%s but staging file %s is not a regular file: ignored", job,
                path, sp);
        have = 0;
    } else if (sid && !have && !stored) {
        vfs_log(v, 2, "journal names %s/%s but its staging file is gone", job, path);
    }
    if (sid && !have) {
        /* A durable file's content is served from the store: its local copy
         * is only a cache, and the row is corrected below (lost_local). */
        sid = 0;
        lost_local = 1;
    }
    if (!sid && (rstep < 0 || !rnode || !rpath))
        return; /* nothing left to serve it from */
    vnode *n = vfs_node_new(v, dir, base, S_IFREG | (mode & 07777));
    if (!n)
        return;
    n->sid = sid;
    if (sid) {
        n->size = (uint64_t)st.st_size;
        v->staged_bytes += n->size;
        if (sid >= v->next_sid)
            v->next_sid = sid + 1;
    } else {
        n->size = (uint64_t)sqlite3_column_int64(q, 4);
    }
    n->mtime_ns = sqlite3_column_int64(q, 6);
    recover_owner(n, q);
    n->state = state;
    n->version = 1;
    n->durable_version = state == VFILE_DURABLE ? 1 : 0;
    int64_t step = sqlite3_column_int64(q, 8);
    n->step = step < 0 ? VFS_NO_STEP : (uint64_t)step;
    n->rank = (int32_t)sqlite3_column_int64(q, 13);
    n->world = (uint32_t)sqlite3_column_int64(q, 14);
    if (rstep >= 0 && rnode && rpath && (n->remote = calloc(1, sizeof *n->remote))) {
        n->remote->step = (uint64_t)rstep;
        snprintf(n->remote->node, sizeof n->remote->node, "%s", rnode);
        n->remote->revision = (uint32_t)sqlite3_column_int64(q, 11);
        n->remote->path = strdup(rpath);
        n->from_remote = state == VFILE_DURABLE;
    }
    if (n->step != VFS_NO_STEP)
        vfs_step(j, n->step, 1);
    vfs_set_write_failed(v, n, (st_err)sqlite3_column_int(q, 15));
    if (sid && unsynced)
        recover_unsynced(v, n, job, path, sp);
    /* The row says "no local copy" from now on, so a restart says nothing
     * more about it. A failed write leaves the old row: the next start
     * corrects it then. */
    else if (lost_local)
        (void)vfs_journal_put_file(v, n);
}

/* Loading a directory's entries made its mtime now (vfs_link); it gets
 * back the time its row holds: its mkdir's, or what utimensat set last
 * (cp -a, tar x and rsync -a set it after the entries). The row is not
 * rewritten for every entry the directory gains or loses, so those changes
 * do not survive a restart (docs/MOUNT.md, "Times, link counts and set-id
 * bits"). */
static st_err recover_dir_times(st_vfs *v)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(DB(v), "SELECT job, path, mtime_ns FROM entries WHERE kind = 0", -1, &q,
                           NULL) != SQLITE_OK)
        return jerr(v, "recover directory times");
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *job = (const char *)sqlite3_column_text(q, 0);
        const char *path = (const char *)sqlite3_column_text(q, 1);
        vnode *jd = job ? vfs_child(v->root, job) : NULL;
        const char *base;
        vnode *dir = !jd || !path ? NULL : !path[0] ? jd : vfs_walk(v, jd, path, 0, &base);
        if (dir && path[0])
            dir = vfs_child(dir, base);
        if (!dir || !S_ISDIR(dir->mode))
            continue;
        dir->mtime_ns = sqlite3_column_int64(q, 2);
    }
    sqlite3_finalize(q);
    return rc == SQLITE_DONE ? ST_OK : jerr(v, "recover directory times");
}

st_err vfs_journal_recover(st_vfs *v, vfs_recovered_deletion **dels, size_t *ndels)
{
    sqlite3_stmt *q;
    /* Shorter paths first, so parents come before children. */
    if (sqlite3_prepare_v2(DB(v), "SELECT * FROM entries ORDER BY job, length(path), path", -1, &q,
                           NULL) != SQLITE_OK)
        return jerr(v, "recover");
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW)
        recover_entry(v, q);
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return jerr(v, "recover");
    st_err te = recover_dir_times(v);
    if (te)
        return te;
    if (sqlite3_prepare_v2(DB(v), "SELECT job, step, complete, revision, commits FROM steps", -1,
                           &q, NULL) != SQLITE_OK)
        return jerr(v, "recover steps");
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *job = (const char *)sqlite3_column_text(q, 0);
        vjob *j = job ? vfs_job(v, job, 1) : NULL;
        vstep *s = j ? vfs_step(j, (uint64_t)sqlite3_column_int64(q, 1), 1) : NULL;
        if (!s)
            continue;
        int complete = sqlite3_column_int(q, 2);
        s->complete = complete == 1;
        s->blocked_complete = complete == 2;
        s->revision = (uint32_t)sqlite3_column_int64(q, 3);
        if (!s->ncommits)
            parse_commits(s, (const char *)sqlite3_column_text(q, 4));
    }
    sqlite3_finalize(q);
    if (rc != SQLITE_DONE)
        return jerr(v, "recover steps");
    if (sqlite3_prepare_v2(DB(v), "SELECT job, step, path, requested_ns FROM deletions", -1, &q,
                           NULL) != SQLITE_OK)
        return jerr(v, "recover deletions");
    size_t cap = 0;
    st_err e = ST_OK;
    while (!e && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        const char *job = (const char *)sqlite3_column_text(q, 0);
        const char *path = (const char *)sqlite3_column_text(q, 2);
        if (!job || !path || !st_name_is_valid(job, ST_JOB_MAX))
            continue; /* not ours to judge: the row stays, unused */
        if (st_array_grow((void **)dels, &cap, *ndels + 1, sizeof **dels))
            e = ST_ERR_NOMEM;
        else if (!((*dels)[*ndels].path = strdup(path)))
            e = st_seterr(ST_ERR_NOMEM, "out of memory");
        else {
            vfs_recovered_deletion *d = &(*dels)[(*ndels)++];
            snprintf(d->job, sizeof d->job, "%s", job);
            d->step = (uint64_t)sqlite3_column_int64(q, 1);
            d->requested_ns = sqlite3_column_int64(q, 3);
        }
    }
    sqlite3_finalize(q);
    if (e)
        return e;
    if (rc != SQLITE_DONE)
        return jerr(v, "recover deletions");
    return ST_OK;
}

void vfs_recovered_deletions_free(vfs_recovered_deletion *dels, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(dels[i].path);
    free(dels);
}
