/*
 * st_vfs_write — a handle's writes and its end: the staging cap and a
 * recycled file's stale bytes before a write, the size and early writeback
 * after it, what flush and fsync acknowledge (docs/MOUNT_MODEL.md, "When
 * close() waits for the disk"), and the release, where a file's last close
 * settles its step (the completion rules of docs/STEPS.md that look at a
 * closed file).
 *
 * Calls down only: a file's local copy, the namespace's attribute change (a
 * set-ID bit dropped), the step rules, the journal, the pool of spares and
 * the eviction of durable copies.
 */
#define _GNU_SOURCE /* sync_file_range */
#include "mount/st_vfs_handle.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/st_fsutil.h"

#include "util/st_crashpoint.h"

/* Sequential writes hand every WRITEBACK_CHUNK to the disk right away
 * (sync_file_range, asynchronous), so the fdatasync that close() needs finds
 * little left to write: the trainer pays for the tail, not the whole file. */
#define WRITEBACK_CHUNK (8u << 20)

/* close_sync "background" defers the sync of files this large; smaller ones
 * (naming markers, metadata) are synced at close in every mode: their
 * fdatasync costs about what the journal's commit already does. */
#define CLOSE_SYNC_MIN (1u << 20)

void st_vfs_handle_drops_setid(st_vfs_handle *h)
{
    if (h->node && h->writable)
        atomic_store(&h->drop_setid, 1);
}

/* What a local file system does at a write by a process without
 * CAP_FSETID: set-user-ID goes, set-group-ID too when group execution is on
 * (without it, the bit means mandatory locking, not privilege). */
static st_err drop_setid(st_vfs *v, vnode *n)
{
    uint32_t mode = n->mode;
    if (mode & S_ISUID)
        mode &= ~(uint32_t)S_ISUID;
    if ((mode & (S_ISGID | S_IXGRP)) == (S_ISGID | S_IXGRP))
        mode &= ~(uint32_t)S_ISGID;
    if (mode == n->mode)
        return ST_OK;
    st_vfs_attr unused;
    n->mode = mode;
    return vfs_attr_changed(v, n, &unused); /* the journal keeps it across a restart */
}

st_err st_vfs_write_prepare(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t len)
{
    if (!h->node || !h->writable)
        return st_seterr(ST_ERR_READ_ONLY, "not open for writing");
    if (atomic_load_explicit(&h->drop_setid, memory_order_relaxed) &&
        atomic_exchange(&h->drop_setid, 0)) {
        pthread_mutex_lock(&v->lock);
        st_err e = drop_setid(v, h->node);
        pthread_mutex_unlock(&v->lock);
        if (e)
            return e;
    }
    if (!v->opts.staging_cap && !atomic_load_explicit(&h->node->stale_end, memory_order_relaxed))
        return ST_OK;
    st_err e = ST_OK;
    pthread_mutex_lock(&v->lock);
    vnode *n = h->node;
    uint64_t end = off + len;
    if (n->stale_end) {
        /* A hole in a recycled file must read as zeros (rule 3). */
        uint64_t front = n->write_front > n->size ? n->write_front : n->size;
        if (off > front)
            e = vfs_cut_stale(v, n, h->fd);
        else if (end > n->write_front)
            n->write_front = end;
        if (e) {
            h->write_error = e;
            vfs_set_write_failed(v, n, e);
            vfs_note_failed_files(v);
            goto out;
        }
    }
    if (v->opts.staging_cap && end > n->size) {
        uint64_t growth = end - n->size;
        /* The pool of recycled files goes before any durable file's copy. */
        if (v->staged_bytes + v->spare_bytes + growth > v->opts.staging_cap)
            vfs_spare_shrink(v, v->opts.staging_cap > v->staged_bytes + growth
                                    ? v->opts.staging_cap - v->staged_bytes - growth
                                    : 0);
        if (v->staged_bytes + growth > v->opts.staging_cap)
            vfs_evict_durable(v, growth);
        if (v->staged_bytes + growth > v->opts.staging_cap) {
            e = st_seterr(ST_ERR_NOSPACE, "staging cap of %" PRIu64 " bytes reached",
                          v->opts.staging_cap);
            h->write_error = e;
            vfs_set_write_failed(v, n, e);
            vfs_note_failed_files(v);
        }
    }
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

void st_vfs_write_failed(st_vfs *v, st_vfs_handle *h, st_err why)
{
    if (!h->node || !why)
        return;
    pthread_mutex_lock(&v->lock);
    h->write_error = why;
    vfs_set_write_failed(v, h->node, why);
    vfs_note_failed_files(v);
    pthread_mutex_unlock(&v->lock);
}

void st_vfs_write_done(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t written)
{
    if (!written)
        return;
    uint64_t end = off + written;
    if (off < h->writeback_from)
        h->writeback_from = off;
    if (end - h->writeback_from >= WRITEBACK_CHUNK) {
        sync_file_range(h->fd, (off_t)h->writeback_from, (off_t)(end - h->writeback_from),
                        SYNC_FILE_RANGE_WRITE);
        h->writeback_from = end;
    }
    pthread_mutex_lock(&v->lock);
    vnode *n = h->node;
    if (end > n->size) {
        v->staged_bytes += end - n->size;
        n->size = end;
    }
    n->version++;
    n->from_remote = 0;
    if (n->state == VFILE_DURABLE)
        n->state = VFILE_CLOSED;
    n->mtime_ns = st_now_ns();
    h->dirty = 1;
    pthread_mutex_unlock(&v->lock);
}

/* fdatasync of h's staging file. Clears the file's unsynced flag (in memory;
 * the caller writes the row) unless a flush left newer bytes unsynced while
 * it ran: those are that flush's release's to sync. Lock not held. */
static st_err sync_staging(st_vfs *v, st_vfs_handle *h, int *cleared)
{
    pthread_mutex_lock(&v->lock);
    uint64_t gen = h->node->sync_gen;
    pthread_mutex_unlock(&v->lock);
    *cleared = 0;
    if (fdatasync(h->fd) < 0)
        return st_seterr(errno == ENOSPC ? ST_ERR_NOSPACE : ST_ERR_IO, "fsync staging: %s",
                         strerror(errno));
    pthread_mutex_lock(&v->lock);
    if (h->node->unsynced && h->node->sync_gen == gen) {
        h->node->unsynced = 0;
        *cleared = 1;
    }
    pthread_mutex_unlock(&v->lock);
    return ST_OK;
}

/* What this flush does about the disk: returns 1 to fdatasync now, 0 not;
 * *defer: it returns before the bytes are on the staging disk and the release
 * syncs them (docs/MOUNT_MODEL.md, "When close() waits for the disk":
 * close_sync "background", files of CLOSE_SYNC_MIN bytes or more written
 * from empty, whose journal row says WRITING until this flush: a machine
 * crash that loses the flush's row drops the file rather than trusting an
 * older row over bytes changed in place). fsync (must_sync) also syncs bytes
 * another handle's flush left unsynced. */
static int flush_syncs_now(st_vfs *v, st_vfs_handle *h, int must_sync, int *defer)
{
    pthread_mutex_lock(&v->lock);
    const vnode *n = h->node;
    *defer = h->dirty && !must_sync && v->close_in_background && n->state == VFILE_WRITING &&
             n->size >= CLOSE_SYNC_MIN;
    int now = !*defer && (h->dirty || (must_sync && n->unsynced));
    pthread_mutex_unlock(&v->lock);
    return now;
}

/* flush and fsync: must_sync for fsync, which syncs in every mode. */
static st_err flush_handle(st_vfs *v, st_vfs_handle *h, int must_sync)
{
    if (!h->node || !h->writable)
        return ST_OK;
    /* What close() acknowledges: the bytes are in staging and the journal
     * says CLOSED; on the staging disk too unless the sync is deferred to
     * the release (DESIGN invariant 1 either way). */
    st_err e = ST_OK;
    if (atomic_load_explicit(&h->node->stale_end, memory_order_relaxed)) {
        /* The staging file's length becomes the file's before the journal
         * says CLOSED (rule 4): recovery re-reads sizes from it. */
        pthread_mutex_lock(&v->lock);
        e = vfs_cut_stale(v, h->node, h->fd);
        pthread_mutex_unlock(&v->lock);
        if (e) {
            st_vfs_write_failed(v, h, e);
            return e;
        }
        h->dirty = 1; /* the new length is synced below */
    }
    int defer, cleared = 0;
    if (flush_syncs_now(v, h, must_sync, &defer) && (e = sync_staging(v, h, &cleared))) {
        st_vfs_write_failed(v, h, e); /* written data may be lost */
        return e;
    }
    pthread_mutex_lock(&v->lock);
    vnode *n = h->node;
    if (defer) {
        n->unsynced = 1;
        n->sync_gen++;
        h->sync_pending = 1;
    }
    if (h->dirty || cleared || n->state == VFILE_WRITING) {
        if (n->state == VFILE_WRITING)
            n->state = VFILE_CLOSED;
        ST_CRASHPOINT_IF(n->parent, "close-journal-before");
        if (n->parent)
            e = defer ? vfs_journal_put_file_lazy(v, n) : vfs_journal_put_file(v, n);
        ST_CRASHPOINT_IF(n->parent && !e, "close-journal-after");
    }
    if (!e) /* acknowledged; else the release finds the writes unacknowledged */
        h->dirty = 0;
    if (!e && h->write_error) /* close(2) reports the write that failed, as NFS does */
        e = st_seterr(h->write_error, "an earlier write to this file failed: %s",
                      st_strerror(h->write_error));
    h->write_error = ST_OK;
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_flush(st_vfs *v, st_vfs_handle *h)
{
    return flush_handle(v, h, 0);
}

st_err st_vfs_fsync(st_vfs *v, st_vfs_handle *h)
{
    return flush_handle(v, h, 1);
}

/* At the release, the sync a flush of h deferred; before the completion
 * rules, so that no step is queued with bytes of its files off the disk.
 * Lock not held. */
static void sync_deferred(st_vfs *v, st_vfs_handle *h)
{
    int cleared = 0;
    st_err e = sync_staging(v, h, &cleared);
    h->sync_pending = 0;
    if (e) {
        vfs_log(v, 2, "%s", st_errmsg());
        st_vfs_write_failed(v, h, e); /* the bytes close() acknowledged may be lost */
        return;
    }
    pthread_mutex_lock(&v->lock);
    if (cleared && h->node->parent)
        (void)vfs_journal_put_file(v, h->node); /* a failure: recovery syncs again */
    pthread_mutex_unlock(&v->lock);
}

/* A release after writes that no flush acknowledged (h->dirty), or of a file
 * no flush closed since it was created or truncated: every close(2) flushes
 * first, so the writer never heard that these bytes were safe — its close
 * failed, or never came (a SIGTERM cut the connection: st_vfs_close
 * releases what the kernel did not). Whatever is in staging may be a cut
 * prefix: the file holds its step back as after a failed write, until it
 * is rewritten or removed (docs/SHUTDOWN.md). Lock held. */
static void unacknowledged_release(st_vfs *v, st_vfs_handle *h)
{
    vnode *n = h->node;
    (void)vfs_cut_stale(v, n, -1); /* failed anyway: its length is what counts */
    if (n->state == VFILE_WRITING)
        n->state = VFILE_CLOSED; /* kept, and failed, across a restart */
    if (!n->write_failed) {      /* a failure already recorded says more */
        char path[ST_MANIFEST_MAX_PATH + 1];
        vnode *jd = vfs_job_dir(n);
        vfs_set_write_failed(v, n, ST_ERR_IO);
        vfs_log(v, 1,
                "%s/%s: released with writes no close() acknowledged (the writer's close failed, "
                "or the daemon stopped while it was open): its step waits until it is rewritten "
                "or removed",
                jd ? jd->name : "?", vfs_job_path(n, path, sizeof path) ? path : "?");
    }
    /* A journal error is in last_error; a restart then finds the older row
     * (WRITING: dropped; CLOSED: the failure is lost with it). */
    (void)vfs_journal_put_file(v, n);
    vfs_note_failed_files(v);
}

void st_vfs_release(st_vfs *v, st_vfs_handle *h)
{
    if (!h->node) { /* a control file */
        pthread_mutex_lock(&v->lock);
        vfs_handle_unlink(v, h);
        pthread_mutex_unlock(&v->lock);
        st_bytes_free(&h->virt);
        free(h);
        return;
    }
    if (h->sync_pending)
        sync_deferred(v, h);
    pthread_mutex_lock(&v->lock);
    vnode *n = h->node;
    vfs_handle_unlink(v, h);
    if (h->fd >= 0)
        close(h->fd);
    if (h->fetch)
        vfs_fetch_put(h->fetch);
    n->opens--;
    if (h->writable) {
        n->writers--;
        /* By the job recorded at open: an unlinked file has no job dir. */
        vjob *j = h->job[0] ? vfs_job(v, h->job, 0) : NULL;
        vstep *s = j && h->step != VFS_NO_STEP ? vfs_step(j, h->step, 0) : NULL;
        if (s && s->writers > 0)
            s->writers--;
        if (s)
            s->last_activity_ns = st_mono_ns();
        if ((h->dirty || n->state == VFILE_WRITING) && n->parent)
            unacknowledged_release(v, h);
        if (j && n->parent && n->writers == 0)
            vfs_step_file_settled(v, j, n, n->version != h->start_version);
        /* The step the file belongs to now (a naming marker such as `latest`
         * moves to the step its new content names) has closed changes; the
         * step it was opened under keeps its published version of it. */
        vstep *now = j && n->step != VFS_NO_STEP ? vfs_step(j, n->step, 0) : NULL;
        if (now && n->version != h->start_version && !now->queued) {
            /* not queued by the rules just now: publish eagerly once quiet */
            now->dirty = 1;
            now->last_activity_ns = st_mono_ns();
        }
        if (now && now->complete && now->writers == 0 && n->version != h->start_version)
            vfs_enqueue(v, j->name, now->step);
        if (s && s->upload_waits && s->writers == 0) {
            s->upload_waits = 0;
            vfs_enqueue(v, j->name, s->step);
        }
        if (s && s->moved_on && s->writers == 0) {
            s->moved_on = 0; /* (R3, R4) the last file of it open for writing closed */
            if (!s->complete)
                vfs_step_complete(v, j, s);
        }
        if (j)
            vfs_retry_blocked_steps(v, j);
    }
    vfs_spare_last_close(v, n);
    vfs_maybe_free(v, n);
    pthread_mutex_unlock(&v->lock);
    free(h);
}
