/*
 * st_state — SQLite-backed writer state. See st_state.h and docs/STATE.md.
 *
 * The database is opened in WAL mode (readers do not block the writer;
 * several connections may share the file) with synchronous=FULL. Every table
 * is a cache of the store that the next put re-learns, so a transaction lost
 * to power loss costs re-uploads, never correctness. Statements are prepared
 * once per connection and reused.
 */
#include "engine/st_state.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#define ST_STATE_SCHEMA_VERSION 1

static const char schema_sql[] =
    "CREATE TABLE IF NOT EXISTS chunks ("
    "  job TEXT NOT NULL, id BLOB NOT NULL, pack BLOB NOT NULL,"
    "  offset INTEGER NOT NULL, stored_len INTEGER NOT NULL, raw_len INTEGER NOT NULL,"
    "  PRIMARY KEY (job, id)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS packs ("
    "  job TEXT NOT NULL, id BLOB NOT NULL, size INTEGER NOT NULL,"
    "  nchunks INTEGER NOT NULL, stored_ns INTEGER NOT NULL,"
    "  PRIMARY KEY (job, id)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS manifests_seen (key TEXT PRIMARY KEY) WITHOUT ROWID;"
    /* Added without a new schema version: an older build never reads it,
     * so it cannot misread it (docs/STATE.md). */
    "CREATE TABLE IF NOT EXISTS parts_seen ("
    "  job TEXT NOT NULL, step INTEGER NOT NULL, node TEXT NOT NULL,"
    "  lineage BLOB NOT NULL, revision INTEGER NOT NULL, replaced BLOB NOT NULL,"
    "  PRIMARY KEY (job, step, node)) WITHOUT ROWID;";

enum {
    Q_CHUNK_LOOKUP,
    Q_CHUNK_ADD,
    Q_CHUNK_MOVE,
    Q_PACK_ADD,
    Q_COUNT_CHUNKS,
    Q_COUNT_PACKS,
    Q_MANIFEST_SEEN,
    Q_MANIFEST_MARK,
    Q_PACK_FORGET_CHUNKS,
    Q_PACK_FORGET,
    Q_PART_SEEN,
    Q_PART_REMEMBER,
    Q_COUNT
};

static const char *const query_sql[Q_COUNT] = {
    [Q_CHUNK_LOOKUP] =
        "SELECT pack, offset, stored_len, raw_len FROM chunks WHERE job=?1 AND id=?2",
    [Q_CHUNK_ADD] = "INSERT OR IGNORE INTO chunks VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [Q_CHUNK_MOVE] = "INSERT OR REPLACE INTO chunks VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    [Q_PACK_ADD] =
        "INSERT OR IGNORE INTO packs VALUES (?1, ?2, ?3, ?4, strftime('%s','now')*1000000000)",
    [Q_COUNT_CHUNKS] = "SELECT count(*) FROM chunks WHERE job=?1",
    [Q_COUNT_PACKS] = "SELECT count(*) FROM packs WHERE job=?1",
    [Q_MANIFEST_SEEN] = "SELECT 1 FROM manifests_seen WHERE key=?1",
    [Q_MANIFEST_MARK] = "INSERT OR IGNORE INTO manifests_seen VALUES (?1)",
    [Q_PACK_FORGET_CHUNKS] = "DELETE FROM chunks WHERE job=?1 AND pack=?2",
    [Q_PACK_FORGET] = "DELETE FROM packs WHERE job=?1 AND id=?2",
    [Q_PART_SEEN] =
        "SELECT lineage, revision, replaced FROM parts_seen WHERE job=?1 AND step=?2 AND node=?3",
    [Q_PART_REMEMBER] = "INSERT OR REPLACE INTO parts_seen VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
};

struct st_state {
    sqlite3 *db;
    sqlite3_stmt *q[Q_COUNT];
};

static st_err db_error(st_state *s, const char *what)
{
    return st_seterr(ST_ERR_IO, "local state database: %s: %s", what, sqlite3_errmsg(s->db));
}

static st_err exec_sql(st_state *s, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        st_err e = st_seterr(ST_ERR_IO, "local state database: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return e;
    }
    return ST_OK;
}

static st_err migrate(st_state *s)
{
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, "PRAGMA user_version", -1, &q, NULL) != SQLITE_OK)
        return db_error(s, "read schema version");
    int version = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
    sqlite3_finalize(q);
    if (version > ST_STATE_SCHEMA_VERSION)
        return st_seterr(ST_ERR_UNSUPPORTED,
                         "local state database has schema version %d; this build knows %d", version,
                         ST_STATE_SCHEMA_VERSION);
    st_err e = exec_sql(s, schema_sql);
    if (!e && version < ST_STATE_SCHEMA_VERSION)
        e = exec_sql(s, "PRAGMA user_version=1");
    return e;
}

st_err st_state_open(const char *path, st_state **out)
{
    *out = NULL;
    st_state *s = calloc(1, sizeof *s);
    if (!s)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    st_err e = ST_OK;
    if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
        SQLITE_OK) {
        e = st_seterr(ST_ERR_IO, "open local state database %s: %s", path,
                      s->db ? sqlite3_errmsg(s->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(s->db, 10000);
    e = exec_sql(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;");
    if (!e)
        e = migrate(s);
    for (int i = 0; !e && i < Q_COUNT; i++)
        if (sqlite3_prepare_v2(s->db, query_sql[i], -1, &s->q[i], NULL) != SQLITE_OK)
            e = db_error(s, "prepare");
    if (e)
        goto fail;
    *out = s;
    return ST_OK;
fail:
    st_state_close(s);
    return e;
}

void st_state_close(st_state *s)
{
    if (!s)
        return;
    for (int i = 0; i < Q_COUNT; i++)
        sqlite3_finalize(s->q[i]);
    sqlite3_close(s->db);
    free(s);
}

st_err st_state_begin(st_state *s)
{
    return exec_sql(s, "BEGIN IMMEDIATE");
}

st_err st_state_commit(st_state *s)
{
    return exec_sql(s, "COMMIT");
}

st_err st_state_rollback(st_state *s)
{
    return exec_sql(s, "ROLLBACK");
}

/* Resets a prepared statement for a fresh use. */
static sqlite3_stmt *query(st_state *s, int which)
{
    sqlite3_stmt *q = s->q[which];
    sqlite3_reset(q);
    sqlite3_clear_bindings(q);
    return q;
}

/* Runs a statement that returns no rows. */
static st_err run_done(st_state *s, sqlite3_stmt *q, const char *what)
{
    int rc = sqlite3_step(q);
    sqlite3_reset(q);
    return rc == SQLITE_DONE ? ST_OK : db_error(s, what);
}

/* Runs a statement that returns one integer. */
static st_err run_count(st_state *s, sqlite3_stmt *q, uint64_t *out, const char *what)
{
    int rc = sqlite3_step(q);
    if (rc != SQLITE_ROW) {
        sqlite3_reset(q);
        return db_error(s, what);
    }
    *out = (uint64_t)sqlite3_column_int64(q, 0);
    sqlite3_reset(q);
    return ST_OK;
}

st_err st_state_chunk_lookup(st_state *s, const char *job, const st_id *id, st_chunk_loc *loc)
{
    sqlite3_stmt *q = query(s, Q_CHUNK_LOOKUP);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, id->b, ST_ID_LEN, SQLITE_STATIC);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(q);
        return ST_ERR_NOT_FOUND;
    }
    if (rc != SQLITE_ROW || sqlite3_column_bytes(q, 0) != ST_ID_LEN) {
        sqlite3_reset(q);
        return db_error(s, "chunk lookup");
    }
    memcpy(loc->pack.b, sqlite3_column_blob(q, 0), ST_ID_LEN);
    loc->offset = (uint64_t)sqlite3_column_int64(q, 1);
    loc->stored_len = (uint32_t)sqlite3_column_int64(q, 2);
    loc->raw_len = (uint32_t)sqlite3_column_int64(q, 3);
    sqlite3_reset(q);
    return ST_OK;
}

static st_err chunk_put(st_state *s, int which, const char *job, const st_id *id,
                        const st_chunk_loc *loc)
{
    sqlite3_stmt *q = query(s, which);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, id->b, ST_ID_LEN, SQLITE_STATIC);
    sqlite3_bind_blob(q, 3, loc->pack.b, ST_ID_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(q, 4, (sqlite3_int64)loc->offset);
    sqlite3_bind_int64(q, 5, loc->stored_len);
    sqlite3_bind_int64(q, 6, loc->raw_len);
    return run_done(s, q, which == Q_CHUNK_ADD ? "add chunk" : "move chunk");
}

st_err st_state_chunk_add(st_state *s, const char *job, const st_id *id, const st_chunk_loc *loc)
{
    return chunk_put(s, Q_CHUNK_ADD, job, id, loc);
}

st_err st_state_chunk_move(st_state *s, const char *job, const st_id *id, const st_chunk_loc *loc)
{
    return chunk_put(s, Q_CHUNK_MOVE, job, id, loc);
}

st_err st_state_pack_add(st_state *s, const char *job, const st_id *pack, uint64_t size,
                         uint32_t nchunks)
{
    sqlite3_stmt *q = query(s, Q_PACK_ADD);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, pack->b, ST_ID_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(q, 3, (sqlite3_int64)size);
    sqlite3_bind_int64(q, 4, nchunks);
    return run_done(s, q, "add pack");
}

st_err st_state_pack_forget(st_state *s, const char *job, const st_id *pack)
{
    sqlite3_stmt *q = query(s, Q_PACK_FORGET_CHUNKS);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, pack->b, ST_ID_LEN, SQLITE_STATIC);
    st_err e = run_done(s, q, "forget a pack's chunks");
    if (e)
        return e;
    q = query(s, Q_PACK_FORGET);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_blob(q, 2, pack->b, ST_ID_LEN, SQLITE_STATIC);
    return run_done(s, q, "forget a pack");
}

st_err st_state_counts(st_state *s, const char *job, uint64_t *chunks, uint64_t *packs)
{
    sqlite3_stmt *q = query(s, Q_COUNT_CHUNKS);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    st_err e = run_count(s, q, chunks, "count chunks");
    if (e)
        return e;
    q = query(s, Q_COUNT_PACKS);
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    return run_count(s, q, packs, "count packs");
}

int st_state_manifest_seen(st_state *s, const char *key)
{
    sqlite3_stmt *q = query(s, Q_MANIFEST_SEEN);
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    int seen = sqlite3_step(q) == SQLITE_ROW;
    sqlite3_reset(q);
    return seen;
}

st_err st_state_manifest_mark(st_state *s, const char *key)
{
    sqlite3_stmt *q = query(s, Q_MANIFEST_MARK);
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    return run_done(s, q, "mark manifest");
}

/* Binds the part's key (job, step, node) to ?1..?3. Steps are stored as
 * SQLite's signed 64-bit integers, bit for bit. */
static void bind_part(sqlite3_stmt *q, const char *job, uint64_t step, const char *node)
{
    sqlite3_bind_text(q, 1, job, -1, SQLITE_STATIC);
    sqlite3_bind_int64(q, 2, (sqlite3_int64)step);
    sqlite3_bind_text(q, 3, node, -1, SQLITE_STATIC);
}

st_err st_state_part_seen(st_state *s, const char *job, uint64_t step, const char *node,
                          st_part_seen *seen)
{
    sqlite3_stmt *q = query(s, Q_PART_SEEN);
    bind_part(q, job, step, node);
    int rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
        sqlite3_reset(q);
        return ST_ERR_NOT_FOUND;
    }
    int replaced_len = rc == SQLITE_ROW ? sqlite3_column_bytes(q, 2) : -1;
    if (rc != SQLITE_ROW || sqlite3_column_bytes(q, 0) != ST_PART_LINEAGE_LEN ||
        replaced_len % ST_PART_LINEAGE_LEN ||
        replaced_len > ST_STATE_REPLACED_MAX * ST_PART_LINEAGE_LEN) {
        sqlite3_reset(q);
        return db_error(s, "part seen lookup");
    }
    memset(seen, 0, sizeof *seen);
    memcpy(seen->lineage, sqlite3_column_blob(q, 0), ST_PART_LINEAGE_LEN);
    seen->revision = (uint32_t)sqlite3_column_int64(q, 1);
    seen->nreplaced = (size_t)replaced_len / ST_PART_LINEAGE_LEN;
    if (replaced_len)
        memcpy(seen->replaced, sqlite3_column_blob(q, 2), (size_t)replaced_len);
    sqlite3_reset(q);
    return ST_OK;
}

st_err st_state_part_remember(st_state *s, const char *job, uint64_t step, const char *node,
                              const st_part_seen *seen)
{
    size_t n = seen->nreplaced < ST_STATE_REPLACED_MAX ? seen->nreplaced : ST_STATE_REPLACED_MAX;
    sqlite3_stmt *q = query(s, Q_PART_REMEMBER);
    bind_part(q, job, step, node);
    sqlite3_bind_blob(q, 4, seen->lineage, ST_PART_LINEAGE_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(q, 5, seen->revision);
    /* A zero-length blob, never NULL (NOT NULL column). */
    sqlite3_bind_blob(q, 6, seen->replaced, (int)(n * ST_PART_LINEAGE_LEN), SQLITE_STATIC);
    return run_done(s, q, "remember a part");
}
