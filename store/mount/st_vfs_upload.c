/*
 * st_vfs_upload — the uploader thread: takes complete steps from the queue,
 * snapshots their files, stores them (st_ingest: chunk, dedup, pack, PUT),
 * publishes a new manifest revision and the commit record (st_stepio), and
 * marks exactly the file versions it stored as DURABLE.
 *
 * Writers never wait for it: it holds v->lock only to snapshot and to merge
 * the result. A store failure keeps the step queued and retries with
 * exponential backoff (1 s doubling to 30 s); the failure shows in the status
 * file's last_error. A publish refused by a compaction's fence is no failure
 * of the store: the uploader waits until the fence is gone, looking every
 * FENCE_LOOK_MS, and retries at once (wait_fence_end). A file changed while its step was uploading
 * stays CLOSED and its step is queued again by the change (rule R5).
 *
 * Files published unchanged since this node's previous revision of the step
 * are carried over from that manifest without re-reading them, which also
 * covers files whose local copy was evicted.
 *
 * The order (docs/SHUTDOWN.md): the oldest queued step first; once the
 * mount drains (a preemption notice, SIGTERM, unmount), a complete step
 * before an incomplete one and each job's newest complete step first
 * (next_queue_item). Any order is safe: each upload is one whole step, and
 * the dedup index only knows chunks whose packs are already stored.
 *
 * Between two uploads, or when the queue is empty, the thread carries out
 * the deletion requests that are due (st_vfs_delete.c): being this thread,
 * a deletion never runs while this node publishes a part of the same step.
 *
 * Threads: one uploader thread, with its own SQLite connection to the dedup
 * index (STAGING/index.db).
 */
#include "mount/st_vfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/st_array.h"
#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "engine/st_ingest.h"
#include "engine/st_catalog.h"

#define BACKOFF_MAX_S 30
/* How often a publish held by a compaction's fence looks whether it ended:
 * one LIST of the job's fences per look. */
#define FENCE_LOOK_MS 500

/* One file of the step, as it was when the upload started. */
typedef struct snap_file {
    uint64_t ino;
    uint64_t sid;
    uint64_t version;
    uint32_t mode;
    int64_t mtime_ns;
    char *path;
    int32_t rank; /* the writer's RANK, -1 unknown */
    int carry;    /* unchanged since our previous revision: reuse its entry */
    uint32_t prev_revision;
    char *prev_path;
} snap_file;

typedef struct snapshot {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
    snap_file *files;
    size_t n, cap;
    st_part part;          /* what this node's part record will say, minus the manifest */
    uint64_t metadata_sid; /* a DCP .metadata among the files: its staging id */
    char **keep;           /* naming markers now in another step (see carry_moved) */
    size_t nkeep, keep_cap;
    char metadata_dir[ST_MANIFEST_MAX_PATH + 1];
} snapshot;

static void snapshot_free(snapshot *s)
{
    st_part_free(&s->part);
    for (size_t i = 0; i < s->nkeep; i++)
        free(s->keep[i]);
    free(s->keep);
    for (size_t i = 0; i < s->n; i++) {
        free(s->files[i].path);
        free(s->files[i].prev_path);
    }
    free(s->files);
    memset(s, 0, sizeof *s);
}

/* No vnode: a naming marker's version kept for the step (st_vfs_keep.c). */
#define SNAP_KEPT_INO UINT64_MAX

static int snapshot_has_path(const snapshot *s, const char *path)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->files[i].path, path))
            return 1;
    return 0;
}

/* Adds the versions of naming markers kept for the step (docs/MOUNT_MODEL.md,
 * "A naming marker replaced before its step is stored"), but where a live file
 * of the step has that path: that newer version is the step's now. */
static st_err add_kept_versions(st_vfs *v, snapshot *s)
{
    size_t cursor = 0;
    for (const vkept *k; (k = vfs_kept_next(v, s->job, s->step, &cursor));) {
        if (snapshot_has_path(s, k->path)) {
            vfs_kept_superseded(v, s->job, s->step, k->path);
            continue;
        }
        if (st_array_grow((void **)&s->files, &s->cap, s->n + 1, sizeof *s->files))
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        snap_file *f = &s->files[s->n];
        memset(f, 0, sizeof *f);
        f->ino = SNAP_KEPT_INO;
        f->sid = k->sid;
        f->mode = k->mode;
        f->mtime_ns = k->mtime_ns;
        f->rank = -1;
        if (!(f->path = strdup(k->path)))
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        s->n++;
    }
    return ST_OK;
}

/* Collects the step's files (lock held). Files of no step yet are adopted by
 * this step (rule R6). */
static st_err take_snapshot(st_vfs *v, const upload_item *it, snapshot *s)
{
    memset(s, 0, sizeof *s);
    snprintf(s->job, sizeof s->job, "%s", it->job);
    s->step = it->step;
    vjob *vj = vfs_job(v, it->job, 0);
    vstep *vs = vj ? vfs_step(vj, it->step, 0) : NULL;
    if (vs) {
        s->part.complete = vs->complete;
        if (vs->ncommits) {
            s->part.commits = malloc(vs->ncommits * sizeof *s->part.commits);
            if (!s->part.commits)
                return st_seterr(ST_ERR_NOMEM, "out of memory");
            memcpy(s->part.commits, vs->commits, vs->ncommits * sizeof *vs->commits);
            s->part.ncommits = vs->ncommits;
        }
    }
    vnode *jd = vfs_child(v->root, it->job);
    for (uint64_t i = 0; jd && i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        if (!n || !n->parent || !S_ISREG(n->mode) || vfs_job_dir(n) != jd)
            continue;
        char path[ST_MANIFEST_MAX_PATH + 1];
        if (!vfs_job_path(n, path, sizeof path))
            continue; /* cannot happen: renames and creates refuse such paths */
        /* (R6) except a file of a step's temporary directory, and a file
         * whose write failed, which would hold this step back */
        if (n->step == VFS_NO_STEP && n->sid && n->state != VFILE_WRITING && !n->writers &&
            !n->write_failed && !st_steprules_in_temp_dir(v->rules, path, NULL)) {
            n->step = it->step;
            if (vfs_journal_put_file(v, n)) /* recovery finds it loose: R6 again */
                vfs_log(v, 1, "journal: the step of a loose file stays unrecorded");
        }
        if (n->step != it->step && n->step != VFS_NO_STEP) {
            /* A naming marker (`latest`) that moved on to a newer step: the
             * version this step published stays in it. */
            if (st_steprules_marker_kind(v->rules, path) != ST_MARKER_NAMES_STEP)
                continue;
            if (st_array_grow((void **)&s->keep, &s->keep_cap, s->nkeep + 1, sizeof *s->keep) ||
                !(s->keep[s->nkeep] = strdup(path)))
                return st_seterr(ST_ERR_NOMEM, "out of memory");
            s->nkeep++;
            continue;
        }
        if (n->step == VFS_NO_STEP || n->writers || n->state == VFILE_WRITING)
            continue; /* not adopted above: in no step yet */
        int ours = n->remote && !strcmp(n->remote->node, v->node) && n->remote->step == it->step;
        int carry = ours && (!n->sid || n->version == n->durable_version);
        if (!carry && (!n->sid || n->from_remote))
            continue; /* another node's file: in its own manifest */
        if (st_array_grow((void **)&s->files, &s->cap, s->n + 1, sizeof *s->files))
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        snap_file *f = &s->files[s->n];
        memset(f, 0, sizeof *f);
        f->ino = n->ino;
        f->sid = n->sid;
        f->version = n->version;
        f->mode = n->mode;
        f->mtime_ns = n->mtime_ns;
        f->path = strdup(path);
        f->rank = n->rank;
        f->carry = carry;
        /* What the part record will say about the step's layout
         * (docs/CONSISTENCY.md): the writers' world size, whether every rank
         * writes, and the shard list a DCP .metadata promises. */
        if (n->world > s->part.world_size)
            s->part.world_size = n->world;
        const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        size_t plen = strlen(path);
        if ((plen > 7 && !strcmp(path + plen - 7, ".distcp")) ||
            !strncmp(base, "zero_pp_rank_", 13))
            s->part.rank_coverage = 1;
        if (!strcmp(base, ".metadata") && n->sid) {
            s->metadata_sid = n->sid;
            snprintf(s->metadata_dir, sizeof s->metadata_dir, "%.*s", (int)(base - path), path);
        }
        if (carry) {
            f->prev_revision = n->remote->revision;
            f->prev_path = strdup(n->remote->path);
        }
        if (!f->path || (carry && !f->prev_path)) {
            free(f->path);
            free(f->prev_path);
            return st_seterr(ST_ERR_NOMEM, "out of memory");
        }
        s->n++;
    }
    return add_kept_versions(v, s);
}

/* DCP's .metadata names every shard file "__R_I.distcp": collect those names
 * as paths the step must contain (rule 3 of docs/CONSISTENCY.md). The file is
 * a pickle; the names appear in it as plain strings, so a scan finds them
 * without unpickling anything. */
static void expect_dcp_shards(st_vfs *v, snapshot *s)
{
    if (!s->metadata_sid)
        return;
    char sp[PATH_MAX];
    vfs_staging_path(v, s->metadata_sid, sp, sizeof sp);
    int fd;
    if (vfs_staging_open(v, sp, O_RDONLY, &fd))
        return;
    size_t cap = 16u << 20, got = 0, expected_cap = s->part.nexpected;
    uint8_t *buf = malloc(cap);
    if (buf)
        st_read_full(fd, buf, cap, &got, sp);
    close(fd);
    for (size_t i = 0; buf && i + 10 < got; i++) {
        if (buf[i] != '_' || buf[i + 1] != '_')
            continue;
        size_t k = i + 2, digits1 = 0, digits2 = 0;
        while (k < got && buf[k] >= '0' && buf[k] <= '9' && digits1 < 10)
            k++, digits1++;
        if (!digits1 || k >= got || buf[k] != '_')
            continue;
        k++;
        while (k < got && buf[k] >= '0' && buf[k] <= '9' && digits2 < 10)
            k++, digits2++;
        if (!digits2 || k + 7 > got || memcmp(buf + k, ".distcp", 7))
            continue;
        char path[ST_MANIFEST_MAX_PATH + 1];
        int n = snprintf(path, sizeof path, "%s%.*s", s->metadata_dir, (int)(k + 7 - i),
                         (const char *)buf + i);
        int dup = 0;
        for (size_t e = 0; e < s->part.nexpected; e++)
            dup |= !strcmp(s->part.expected[e], path);
        if (dup || n <= 0 || (size_t)n >= sizeof path || s->part.nexpected >= ST_PART_MAX_EXPECTED)
            continue;
        if (st_array_grow((void **)&s->part.expected, &expected_cap, s->part.nexpected + 1,
                          sizeof *s->part.expected))
            break;
        if ((s->part.expected[s->part.nexpected] = strdup(path)))
            s->part.nexpected++;
        i = k + 6;
    }
    free(buf);
}

/* The staging files this upload reads by name, without the lock: one of
 * them dropped meanwhile enters the pool of recycled files held, so no new
 * file writes over what the ingest may still be reading (lock held). */
static void hold_snapshot_files(st_vfs *v, const snapshot *s)
{
    uint64_t sids[64], *all = s->n <= 64 ? sids : malloc(s->n * sizeof *all);
    size_t n = 0;
    for (size_t i = 0; all && i < s->n; i++)
        if (s->files[i].sid)
            all[n++] = s->files[i].sid;
    if (all)
        vfs_spare_upload_begin(v, all, n);
    else
        vfs_spare_upload_begin(v, NULL, 0); /* cannot list them: hold everything */
    if (all != sids)
        free(all);
}

/* Stores one staged file through the ingest. */
static st_err ingest_staged(st_vfs *v, st_ingest *g, const snap_file *f)
{
    /* Where a rewrite since the snapshot left it, if it did (lock: the pool) */
    int fd;
    pthread_mutex_lock(&v->lock);
    st_err e = vfs_spare_upload_open(v, f->sid, &fd);
    pthread_mutex_unlock(&v->lock);
    if (e)
        return st_seterr(e, "open staged %s: %s", f->path, st_errmsg());
    struct stat st, staged;
    memset(&st, 0, sizeof st);
    st.st_mode = f->mode;
    st.st_mtim.tv_sec = f->mtime_ns / 1000000000;
    st.st_mtim.tv_nsec = f->mtime_ns % 1000000000;
    /* The size is the staged file's (what the ingest reads); mode and
     * mtime are the file's as the mount shows it. */
    if (fstat(fd, &staged) < 0) {
        e = st_seterr(ST_ERR_IO, "stat staged %s: %s", f->path, strerror(errno));
        close(fd);
        return e;
    }
    st.st_size = staged.st_size;
    e = st_ingest_file(g, fd, f->path, &st, f->rank);
    close(fd);
    return e;
}

static int cmp_snap_path(const void *a, const void *b)
{
    return st_path_cmp(((const snap_file *)a)->path, ((const snap_file *)b)->path);
}

/* Carries an unchanged file over from our previous manifest of the step. */
static st_err carry_over(st_ingest *g, const st_manifest *prev, const snap_file *f)
{
    for (size_t i = 0; prev && i < prev->nfiles; i++)
        if (!strcmp(prev->files[i].path, f->prev_path))
            return st_ingest_add_stored(g, prev, &prev->files[i], f->path);
    return st_seterr(ST_ERR_CORRUPT, "%s is missing from this node's previous manifest",
                     f->prev_path);
}

/* Carries over, from this node's previous revision of the step, the naming
 * markers that moved on to a newer step: each step keeps the `latest` that
 * named it. */
static st_err carry_moved(st_ingest *g, const st_manifest *prev, const snapshot *s)
{
    for (size_t i = 0; prev && i < prev->nfiles; i++) {
        const st_file_entry *f = &prev->files[i];
        int keep = 0, present = 0;
        for (size_t k = 0; k < s->nkeep; k++)
            keep |= !strcmp(s->keep[k], f->path);
        for (size_t k = 0; k < s->n; k++)
            present |= !strcmp(s->files[k].path, f->path);
        if (keep && !present) {
            st_err e = st_ingest_add_stored(g, prev, f, f->path);
            if (e)
                return e;
        }
    }
    return ST_OK;
}

static st_err lease_check(void *v)
{
    return vfs_lease_check(v);
}

/* The store side of one upload: no lock held. *got: the ingest's figures
 * (metrics), set when the step was published. */
static st_err store_step(st_vfs *v, st_state *index, snapshot *s, uint32_t *revision,
                         st_ingest_stats *got)
{
    st_bytes buf = {0};
    st_part mine = {0};
    st_manifest prev = {0}, m = {0};
    st_ingest *g = NULL;
    struct st_replication *rep = NULL;
    int have_mine = 0, have_prev = 0;
    st_err e = st_catalog_sync_index(v->backend, index, s->job, NULL, NULL);
    if (e)
        goto out;
    /* Our current part, if any: its revision is the floor for the next one
     * (staging may have been lost), and unchanged files are carried over. */
    e = st_catalog_load_part(v->backend, s->job, s->step, v->node, &buf, &mine);
    if (e == ST_OK)
        have_mine = 1;
    else if (e != ST_ERR_NOT_FOUND)
        goto out;
    uint32_t base = have_mine && mine.revision > *revision ? mine.revision : *revision;
    /* The part keeps its lineage while its record lives; a first publish,
     * or one after the step was deleted, starts a new one (docs/
     * ENCRYPTION.md, "Replay"). Chosen here, before the replica record
     * carries it to peers. */
    memset(s->part.lineage, 0, sizeof s->part.lineage);
    if (have_mine)
        memcpy(s->part.lineage, mine.lineage, sizeof s->part.lineage);
    if (st_part_lineage_is_zero(&s->part) && (e = st_part_new_lineage(&s->part)))
        goto out;
    for (size_t i = 0; i < s->n; i++) {
        if (!s->files[i].carry)
            continue;
        if (!have_mine || mine.revision != s->files[i].prev_revision) {
            /* The revision it was stored in is not the current one: store the
             * local copy again if there is one, else it cannot be carried. */
            if (!s->files[i].sid) {
                e = st_seterr(ST_ERR_CORRUPT, "%s: stored revision %u is no longer current",
                              s->files[i].path, s->files[i].prev_revision);
                goto out;
            }
            s->files[i].carry = 0;
            continue;
        }
        if (!have_prev) {
            if ((e = st_catalog_load_manifest(v->backend, &mine, &buf, &prev)))
                goto out;
            have_prev = 1;
        }
    }
    if (have_mine && s->nkeep && !have_prev) {
        if ((e = st_catalog_load_manifest(v->backend, &mine, &buf, &prev)))
            goto out;
        have_prev = 1;
    }
    expect_dcp_shards(v, s);
    if ((e = st_ingest_new(vfs_replication_begin(v, s->job, &rep), index, s->job, NULL, &g)))
        goto out;
    if (v->opts.upload_threads)
        st_ingest_set_parallel(g, v->opts.upload_threads);
    if (v->opts.seal_threads)
        st_ingest_set_seal_threads(g, v->opts.seal_threads);
    st_ingest_set_lz4_only(g, v->compression_lz4);
    st_ingest_set_keyring(g, v->keyring);
    /* In tree order, as the manifest lists them (st_ingest.h): small files
     * then fill bundles in the same order at every upload of the step, so
     * an unchanged bundle deduplicates; the snapshot's is the inode table's. */
    if (s->n > 1)
        qsort(s->files, s->n, sizeof *s->files, cmp_snap_path);
    for (size_t i = 0; !e && i < s->n; i++)
        e = s->files[i].carry ? carry_over(g, &prev, &s->files[i])
                              : ingest_staged(v, g, &s->files[i]);
    if (!e && have_prev)
        e = carry_moved(g, &prev, s);
    if (e || (e = st_ingest_finish(g, &m)))
        goto out;
    /* Every byte is read: a writer that opens a file of the snapshot from now
     * on cannot change what this revision holds; one that did before may have
     * (docs/MOUNT_MODEL.md, "A file rewritten while its step uploads"). */
    pthread_mutex_lock(&v->lock);
    int disturbed = v->upload_disturbed;
    pthread_mutex_unlock(&v->lock);
    if (disturbed) {
        e = ST_ERR_TRANSIENT; /* the uploader says why */
        goto out;
    }
    m.step = s->step;
    m.created_ns = st_now_ns();
    m.node = v->node;
    m.job = s->job;
    uint64_t puts = 0;
    s->part.revision = base + 1; /* raised past the other nodes' by the publish */
    /* With peers: replicated now, and every spooled pack in the store
     * before the publish's last look lists them (docs/PEERS.md). */
    if ((e = vfs_replication_finish(v, rep, &m, &s->part)))
        goto out;
    /* Only the holder of the node name writes its part records
     * (docs/NODES.md); the step stays queued otherwise. The lease check and
     * the last look run in the publish's first round. */
    const st_publish_check checks[] = {st_ingest_last_look(g), {lease_check, v}};
    e = st_catalog_publish(v->backend, &m, &s->part, checks, 2, &puts);
    m.node = m.job = NULL; /* borrowed */
    if (!e) {
        *revision = s->part.revision;
        *got = *st_ingest_get_stats(g);
    }
out:
    vfs_replication_end(v, rep, e == ST_OK);
    st_manifest_free(&m);
    st_manifest_free(&prev);
    st_ingest_free(g);
    if (have_mine)
        st_part_free(&mine);
    st_bytes_free(&buf);
    return e;
}

/* Marks the snapshot's file versions durable (lock held). */
static void merge_result(st_vfs *v, const snapshot *s, uint32_t revision)
{
    for (size_t i = 0; i < s->n; i++) {
        const snap_file *f = &s->files[i];
        if (f->ino == SNAP_KEPT_INO) { /* stored: later revisions carry it over */
            vfs_kept_stored(v, s->job, s->step, f->sid);
            continue;
        }
        vnode *n = f->ino < v->ninodes ? v->inodes[f->ino] : NULL;
        if (!n || !n->parent || n->version != f->version)
            continue; /* gone or changed: a later revision handles it */
        char path[ST_MANIFEST_MAX_PATH + 1];
        if (!vfs_job_path(n, path, sizeof path) || strcmp(path, f->path))
            continue;
        if (!vfs_set_remote(n, f->path, s->step, revision, v->node))
            continue;
        n->state = VFILE_DURABLE;
        n->durable_version = n->version;
        /* Left CLOSED in the journal, the file is uploaded again after a
         * restart: stored once more (dedup), never lost. */
        (void)vfs_journal_put_file(v, n);
    }
}

/* Waits (lock held) for the given seconds, or until stopping. */
static void wait_seconds(st_vfs *v, int seconds)
{
    int64_t until = st_mono_ns() + (int64_t)seconds * 1000000000;
    while (!v->stopping && st_mono_ns() < until)
        vfs_timedwait(v, until);
}

/* After a failed upload of a step of job: while the job has a live
 * compaction fence (docs/GC.md, "Compaction"), waits for it to end, looking
 * every FENCE_LOOK_MS. Returns 1 when a fence was seen: the retry then goes
 * at once and the backoff stays as it was, since the store did not fail.
 * Growing it instead (1, 2, 4 ... 30 s) held a step's publish many seconds
 * past its fence, long enough for retention to take the step as abandoned
 * when the other ranks' parts had landed (docs/GC.md, "Retention"). Logs
 * the refusal once a fence is seen. Lock held; released while listing. */
static int wait_fence_end(st_vfs *v, const char *job)
{
    int seen = 0;
    while (!v->stopping) {
        int live = 0;
        pthread_mutex_unlock(&v->lock);
        st_err e = st_catalog_fence_live(v->backend, job, NULL, &live);
        pthread_mutex_lock(&v->lock);
        v->fence_looks++;
        if (e || !live)
            break;
        if (!seen++) {
            v->fence_waits++;
            vfs_log(v, 2, "%s (retrying once the fence is gone)", v->last_error);
        }
        int64_t until = st_mono_ns() + (int64_t)FENCE_LOOK_MS * 1000000;
        while (!v->stopping && st_mono_ns() < until)
            vfs_timedwait(v, until);
    }
    return seen;
}

/* 1 when queue item it is a step marked complete (lock held). */
static int item_complete(st_vfs *v, const upload_item *it)
{
    vjob *j = vfs_job(v, it->job, 0);
    vstep *s = j ? vfs_step(j, it->step, 0) : NULL;
    return s && s->complete;
}

/* How far item i is from the front in the draining order: 0 for a complete
 * step with no newer complete step of its job queued, 1 for the second
 * newest, ...; incomplete steps after every complete one (lock held). */
static size_t drain_rank(st_vfs *v, size_t i)
{
    const upload_item *it = &v->queue[i];
    if (!item_complete(v, it))
        return v->nqueue;
    size_t newer = 0;
    for (size_t k = 0; k < v->nqueue; k++)
        newer += k != i && v->queue[k].step > it->step && !strcmp(v->queue[k].job, it->job) &&
                 item_complete(v, &v->queue[k]);
    return newer;
}

/* The index of the queue item to upload next (lock held, queue not empty):
 * the front in normal order; when draining, the lowest drain_rank, ties in
 * queue order. */
static size_t next_queue_item(st_vfs *v)
{
    size_t best = 0, best_rank = SIZE_MAX;
    for (size_t i = 0; v->draining && i < v->nqueue && best_rank; i++) {
        size_t rank = drain_rank(v, i);
        if (rank < best_rank) {
            best = i;
            best_rank = rank;
        }
    }
    return best;
}

void *vfs_uploader_main(void *arg)
{
    st_vfs *v = arg;
    st_state *index = NULL;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/index.db", v->staging);
    st_err oe = st_state_open(path, &index);
    pthread_mutex_lock(&v->lock);
    if (oe) {
        vfs_set_error(v, "dedup index: %s", st_errmsg());
        vfs_log(v, 2, "uploader cannot start: %s", v->last_error);
    }
    int backoff = 1;
    while (!v->stopping && index) {
        if (vfs_deletions_run(v))
            continue;
        if (!v->nqueue) {
            vfs_timedwait(v, vfs_deletions_next_due(v));
            continue;
        }
        size_t next = next_queue_item(v);
        upload_item it = v->queue[next];
        memmove(v->queue + next, v->queue + next + 1, (v->nqueue - next - 1) * sizeof *v->queue);
        v->nqueue--;
        vjob *j = vfs_job(v, it.job, 0);
        vstep *s = j ? vfs_step(j, it.step, 0) : NULL;
        if (!s)
            continue;
        s->queued = 0;
        if (s->writers) {
            s->upload_waits = 1; /* re-queued by the last writer's close */
            continue;
        }
        if (vfs_failed_file(v, it.job, it.step)) {
            s->blocked_upload = 1; /* queued again once the file is rewritten or removed */
            vfs_note_failed_files(v);
            continue;
        }
        snapshot snap;
        if (take_snapshot(v, &it, &snap) || (!snap.n && !snap.part.ncommits)) {
            snapshot_free(&snap);
            continue;
        }
        s->uploading = 1;
        v->uploader_busy = 1;
        v->upload_disturbed = 0;
        hold_snapshot_files(v, &snap);
        uint32_t revision = s->revision;
        pthread_mutex_unlock(&v->lock);

        int64_t t0 = st_mono_ns();
        st_ingest_stats got = {0};
        st_err e = store_step(v, index, &snap, &revision, &got);
        int64_t took = st_mono_ns() - t0;
        ST_CRASHPOINT_IF(!e, "upload-published");

        pthread_mutex_lock(&v->lock);
        v->uploader_busy = 0;
        vfs_spare_upload_end(v);
        vfs_kept_upload_ended(v);
        j = vfs_job(v, it.job, 0);
        s = j ? vfs_step(j, it.step, 0) : NULL;
        if (s)
            s->uploading = 0;
        if (e && vfs_health_stopping(v)) {
            /* The unmount's drain is over and stopped this upload: no error
             * of the store's. Everything stays staged and journaled. */
            vfs_log(v, 1,
                    "step %" PRIu64 " of %s stays in staging: the unmount stopped its upload "
                    "past --drain; it resumes at the next start",
                    it.step, it.job);
            vfs_enqueue(v, it.job, it.step);
            while (!v->stopping) /* every later try would stop the same way */
                vfs_timedwait(v, INT64_MAX);
        } else if (e && v->upload_disturbed) {
            /* Not the store's failure (a file it could not open was removed
             * meanwhile): no backoff, no error. A writer still open holds
             * the step until its close (R5). */
            vfs_log(v, 0,
                    "step %" PRIu64 " of %s not published: a file of it was opened for writing, "
                    "removed or replaced while it was read; it is published again",
                    it.step, it.job);
            vfs_enqueue(v, it.job, it.step);
        } else if (e) {
            vfs_set_error(v, "uploading step %" PRIu64 " of %s: %s", it.step, it.job, st_errmsg());
            v->upload_failures++;
            vfs_enqueue(v, it.job, it.step);
            if (e != ST_ERR_BUSY || !wait_fence_end(v, it.job)) {
                vfs_log(v, 2, "%s (retrying in %d s)", v->last_error, backoff);
                wait_seconds(v, backoff);
                backoff = backoff * 2 > BACKOFF_MAX_S ? BACKOFF_MAX_S : backoff * 2;
            }
        } else {
            backoff = 1;
            v->last_error[0] = '\0';
            vfs_note_failed_files(v); /* still true after this upload */
            v->uploaded_bytes += got.logical_bytes;
            v->stored_bytes += got.stored_bytes;
            v->new_raw_bytes += got.new_raw_bytes;
            v->chunks += got.chunks;
            v->new_chunks += got.new_chunks;
            v->bundles += got.bundles;
            v->bundled_files += got.bundled_files;
            v->uploads++;
            v->upload_ns += took;
            merge_result(v, &snap, revision);
            ST_CRASHPOINT("upload-files-durable");
            if (s) {
                s->revision = revision;
                s->durable_ns = st_now_ns();
                /* The next revision's floor is read from our part record in
                 * the store (store_step), not only from this row. */
                (void)vfs_journal_put_step(v, it.job, s);
            }
            vfs_log(v, 0, "step %" PRIu64 " of %s is durable (revision %u, %zu files)", it.step,
                    it.job, revision, snap.n);
        }
        snapshot_free(&snap);
        pthread_cond_broadcast(&v->changed);
    }
    pthread_mutex_unlock(&v->lock);
    st_state_close(index);
    return NULL;
}

/* From now on the uploader takes a complete step before an incomplete one
 * and each job's newest first (next_queue_item; docs/SHUTDOWN.md). */
void st_vfs_drain(st_vfs *v)
{
    pthread_mutex_lock(&v->lock);
    if (!v->draining)
        vfs_log(v, 0, "draining: the newest complete steps upload first (%zu queued)", v->nqueue);
    v->draining = 1;
    pthread_cond_broadcast(&v->changed);
    pthread_mutex_unlock(&v->lock);
}
