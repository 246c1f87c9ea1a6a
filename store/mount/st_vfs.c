/*
 * st_vfs — the mount's namespace, open handles, step tracking and status
 * file. See st_vfs.h for the contract and st_vfs_impl.h for the shared state,
 * the file and step life cycles and the locking rule.
 *
 * Step completion follows the numbered rules of docs/STEPS.md; the functions
 * below cite them as (R1)...(R6).
 */
#define _GNU_SOURCE /* sync_file_range */
#include "mount/st_vfs_impl.h"
#include "util/st_array.h"
#include "backend/st_backend_open.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <json-c/json.h>

#include "backend/st_backend_fault.h"
#include "format/st_fmtcheck.h"
#include "util/st_crashpoint.h"
#include "util/st_fsutil.h"
#include "util/st_parallel.h"
#include "engine/st_gc.h"
#include "format/st_manifest.h"

#define CTL_DIR_NAME ".ckptfs"
#define STATUS_NAME  "status"
#define COMMIT_NAME  "commit"
#define DRAIN_NAME   "drain"
#define METRICS_NAME "metrics"
#define WARMUP_NAME  "warmup"

struct st_vfs_handle {
    vnode *node;  /* NULL for a control file */
    uint64_t ctl; /* a control file's ino (ST_VFS_STATUS_INO...), 0 for a file */
    int fd;
    int writable;
    int dirty;        /* written since the last flush that succeeded */
    int torn;         /* opened on a torn file: reads fail (vnode.write_failed) */
    int sync_pending; /* a flush left its bytes off the disk: the release syncs */
    /* The opener may not keep set-user-ID and set-group-ID bits: its first
     * write clears them (st_vfs_handle_drops_setid). */
    _Atomic int drop_setid;
    uint64_t step; /* the step whose writer count this handle holds */
    /* The job of that step: the file may leave the tree (unlinked, or
     * renamed over) while open, and its step's count must still drop. */
    char job[ST_JOB_MAX + 1];
    st_err write_error; /* a write through this handle failed: flush reports it */
    uint64_t start_version;
    uint64_t writeback_from; /* start of the range not yet handed to writeback */
    st_bytes virt;           /* a virtual file's content */
    /* The fetch that fills the staging file fd reads (a read-only open of a
     * remote file during its fetch): reads wait for their range in it
     * (st_vfs_read_wait). Set at open, one reference, dropped at release. */
    vfetch *fetch;
    st_vfs_handle *prev, *next; /* st_vfs.open_handles, file handles only (lock) */
};

/* Sequential writes hand every WRITEBACK_CHUNK to the disk right away
 * (sync_file_range, asynchronous), so the fdatasync that close() needs finds
 * little left to write: the trainer pays for the tail, not the whole file. */
#define WRITEBACK_CHUNK (8u << 20)

/* close_sync "background" defers the sync of files this large; smaller ones
 * (naming markers, metadata) are synced at close in every mode: their
 * fdatasync costs about what the journal's commit already does. */
#define CLOSE_SYNC_MIN (1u << 20)

/* ---- steps and completion (under v->lock) ---- */

/* A completion rule fired for step s: remember it, and upload once no file
 * of the step is open for writing. */
static void step_complete(st_vfs *v, vjob *j, vstep *s)
{
    if (vfs_deletion_find(j, s->step))
        return; /* removed through the mount */
    vnode *bad = vfs_failed_file(v, j->name, s->step);
    if (bad) {
        /* Its content is not what the writer meant: publishing the step
         * would make a truncated file part of a consistent checkpoint. */
        if (!s->blocked_complete) {
            char path[ST_MANIFEST_MAX_PATH + 1];
            vfs_log(v, 1,
                    "step %" PRIu64 " of job %s stays incomplete: a write to %s failed (%s); "
                    "rewrite or remove the file",
                    s->step, j->name, vfs_job_path(bad, path, sizeof path) ? path : "?",
                    st_strerror(bad->write_failed));
        }
        if (!s->blocked_complete) {
            s->blocked_complete = 1;
            if (vfs_journal_put_step(v, j->name, s)) /* a restart would forget the rule */
                vfs_log(v, 1, "journal: step %" PRIu64 " of %s: %s", s->step, j->name, st_errmsg());
        }
        vfs_note_failed_files(v);
        return;
    }
    if (!s->complete) {
        s->complete = 1;
        /* Without the row a restart finds the step incomplete: its files are
         * published eagerly, and R8 or the rule's next firing completes it;
         * the part already in the store says complete. Error in last_error. */
        (void)vfs_journal_put_step(v, j->name, s);
        vfs_log(v, 0, "step %" PRIu64 " of job %s is complete", s->step, j->name);
    }
    if (s->writers == 0)
        vfs_enqueue(v, j->name, s->step);
    else
        s->upload_waits = 1;
}

static void remember_writer(vstep *s, pid_t pid)
{
    for (int i = 0; i < s->nwriter_pids; i++)
        if (s->writer_pids[i] == pid)
            return;
    if (s->nwriter_pids < VFS_JOB_MAX_STEPS_WRITERS)
        s->writer_pids[s->nwriter_pids++] = pid;
}

static int wrote_step(const vstep *s, pid_t pid)
{
    for (int i = 0; i < s->nwriter_pids; i++)
        if (s->writer_pids[i] == pid)
            return 1;
    return 0;
}

/* The step a path belongs to by name (R1), or VFS_NO_STEP. */
static uint64_t step_of_path(const st_vfs *v, const char *path, int *single_file)
{
    st_step_match m;
    st_steprules_match(v->rules, path, &m);
    if (single_file)
        *single_file = m.matched && m.single_file;
    return m.matched ? m.step : VFS_NO_STEP;
}

/* A writable handle opens on n (in job j), by pid. */
static void step_writer_open(st_vfs *v, vjob *j, vnode *n, pid_t pid, st_vfs_handle *h)
{
    h->step = n->step;
    if (n->step == VFS_NO_STEP)
        return;
    vstep *s = vfs_step(j, n->step, 1);
    if (!s)
        return;
    s->writers++;
    s->last_activity_ns = st_mono_ns();
    remember_writer(s, pid);
    /* (R4) The same writer moving on to a newer step completes the older
     * steps it wrote that have nothing open. */
    for (size_t i = 0; i < j->nsteps; i++) {
        vstep *old = &j->steps[i];
        if (old->step >= n->step)
            break;
        if (old->complete || !wrote_step(old, pid))
            continue;
        if (old->writers == 0)
            step_complete(v, j, old);
        else
            old->moved_on = 1; /* completes at the last close of a file of it */
    }
}

/* After a file of job j stopped being a reason to wait (closed, rewritten,
 * removed): the steps whose completion or upload waited for a file with a
 * failed write go on once no such file is left and nothing is open. */
static void retry_blocked_steps(st_vfs *v, vjob *j)
{
    for (size_t i = 0; i < j->nsteps; i++) {
        vstep *s = &j->steps[i];
        if ((!s->blocked_complete && !s->blocked_upload) || s->writers ||
            vfs_failed_file(v, j->name, s->step))
            continue;
        if (s->blocked_upload) {
            s->blocked_upload = 0;
            s->dirty = 1; /* published eagerly once quiet, or queued below */
            s->last_activity_ns = st_mono_ns();
            if (s->complete)
                vfs_enqueue(v, j->name, s->step);
        }
        if (s->blocked_complete) {
            s->blocked_complete = 0;
            step_complete(v, j, s);
        }
    }
    if (!v->nfailed &&
        (strstr(v->last_error, VFS_FAILED_NOTE) || strstr(v->last_error, VFS_TORN_NOTE)))
        v->last_error[0] = '\0';
}

/* RANK and WORLD_SIZE of a writer process, from its environment (torchrun
 * and every launcher set them). Unknown stays -1 / 0. */
static void writer_rank(pid_t pid, int32_t *rank, uint32_t *world)
{
    char path[64], buf[65536];
    *rank = -1;
    *world = 0;
    if (pid <= 0)
        return;
    snprintf(path, sizeof path, "/proc/%ld/environ", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    size_t got = 0;
    st_read_full(fd, buf, sizeof buf - 1, &got, path);
    close(fd);
    buf[got] = '\0';
    for (size_t i = 0; i < got; i += strlen(buf + i) + 1) {
        const char *kv = buf + i;
        char *end;
        if (!strncmp(kv, "RANK=", 5)) {
            long r = strtol(kv + 5, &end, 10);
            if (*end == '\0' && kv[5] && r >= 0 && r < INT32_MAX)
                *rank = (int32_t)r;
        } else if (!strncmp(kv, "WORLD_SIZE=", 11)) {
            unsigned long w = strtoul(kv + 11, &end, 10);
            if (*end == '\0' && kv[11] && w > 0 && w < (1ul << 24))
                *world = (uint32_t)w;
        }
    }
    if (*rank >= 0 && *world && (uint32_t)*rank >= *world)
        *rank = -1; /* inconsistent: trust neither */
}

/* Reads up to cap bytes of a closed file's content (markers are tiny). */
static size_t read_small(st_vfs *v, vnode *n, uint8_t *buf, size_t cap)
{
    char path[PATH_MAX];
    vfs_staging_path(v, n->sid, path, sizeof path);
    int fd;
    if (vfs_staging_open(v, path, O_RDONLY, &fd))
        return 0;
    size_t got = 0;
    st_read_full(fd, buf, cap, &got, path);
    close(fd);
    return got;
}

/* 1 unless n is a checkpoint format whose end is missing (st_fmtcheck). */
static int file_whole(st_vfs *v, vnode *n)
{
    if (!n->sid)
        return 1;
    char path[PATH_MAX];
    vfs_staging_path(v, n->sid, path, sizeof path);
    int fd;
    if (vfs_staging_open(v, path, O_RDONLY, &fd))
        return 0;
    int whole = st_file_looks_complete(fd, n->size);
    close(fd);
    return whole;
}

/* After n's content or name changed and nothing has it open for writing:
 * apply the completion rules that look at a closed file. */
static void step_file_settled(st_vfs *v, vjob *j, vnode *n, int modified)
{
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!vfs_job_path(n, path, sizeof path))
        return;
    if (n->step == VFS_NO_STEP && st_steprules_in_temp_dir(v->rules, path, NULL))
        return; /* tmp-checkpoint-N/: no rule applies before the rename (STEPS.md §3) */
    st_marker_kind mk = st_steprules_marker_kind(v->rules, path);
    if (mk == ST_MARKER_NAMES_STEP && n->sid) {
        /* (R2) latest / latest_checkpointed_iteration.txt name their step. */
        uint8_t content[4096];
        size_t len = read_small(v, n, content, sizeof content);
        uint64_t named;
        if (st_steprules_marker_step(v->rules, path, content, len, &named) == ST_OK) {
            n->step = named;
            /* Without the row a restart finds the marker loose: R6 gives it
             * to the newest step, and its next close names the step again. */
            (void)vfs_journal_put_file(v, n);
            vstep *s = vfs_step(j, named, 1);
            if (s)
                step_complete(v, j, s);
            return;
        }
    }
    if (n->step == VFS_NO_STEP && n->write_failed)
        return; /* not given to a step (R6) until rewritten: it would hold it back */
    if (n->step == VFS_NO_STEP) {
        /* (R6) A file outside any step belongs to the newest step. */
        n->step = vfs_newest_step(j);
        if (n->step == VFS_NO_STEP)
            return;
        (void)vfs_journal_put_file(v, n); /* without the row, R6 applies again after a restart */
    }
    vstep *s = vfs_step(j, n->step, 1);
    if (!s)
        return;
    int single_file = 0;
    step_of_path(v, path, &single_file);
    if (single_file && !file_whole(v, n)) {
        /* A writer killed in the middle of torch.save closes its file too. */
        vfs_log(v, 1, "%s/%s looks cut short; step %" PRIu64 " stays incomplete", j->name, path,
                s->step);
        return;
    }
    if (single_file && s->writers)
        s->moved_on = 1; /* (R3) complete once the other file of the step closes */
    if (mk == ST_MARKER_IN_STEP || (single_file && s->writers == 0))
        step_complete(v, j, s); /* (R1 markers, R3 single-file steps) */
    else if (s->complete && modified && s->writers == 0)
        vfs_enqueue(v, j->name, s->step); /* (R5) a change after completion */
}

/* ---- virtual entries ---- */

/* The control entries are the mount's user's. Read-only ones are 0400 and
 * write-only ones 0200 unless control_access is "all" (0444, 0222): the
 * status and the metrics name every job and step of the mount, and a
 * commit completes any job's step (docs/MOUNT.md, "Other users on the
 * node"). */
static void virt_attr(const st_vfs *v, uint64_t ino, st_vfs_attr *a)
{
    memset(a, 0, sizeof *a);
    a->ino = ino;
    uint32_t readable = v->control_public ? 0444 : 0400;
    uint32_t writable = v->control_public ? 0222 : 0200;
    a->mode = ino == ST_VFS_CTL_DIR_INO ? (S_IFDIR | 0555)
              : ino == ST_VFS_COMMIT_INO || ino == ST_VFS_DRAIN_INO || ino == ST_VFS_WARMUP_INO
                  ? (S_IFREG | writable)
                  : (S_IFREG | readable);
    a->nlink = ino == ST_VFS_CTL_DIR_INO ? 2 : 1;
    a->uid = v->user.uid;
    a->gid = v->user.gid;
    a->atime_ns = a->mtime_ns = a->ctime_ns = st_now_ns();
}

static void node_attr(const vnode *n, st_vfs_attr *a)
{
    a->ino = n->ino;
    a->mode = n->mode;
    /* As a local file system: a directory's "." and its entry, and each
     * subdirectory's ".."; a file open after its unlink has no link. */
    a->nlink = S_ISDIR(n->mode) ? 2 + (uint32_t)n->nsubdirs : n->parent ? 1 : 0;
    a->uid = n->uid;
    a->gid = n->gid;
    a->size = S_ISDIR(n->mode) ? 4096 : n->size;
    a->mtime_ns = n->mtime_ns;
    a->ctime_ns = n->ctime_ns;
    a->atime_ns = n->atime_set ? n->atime_ns : n->mtime_ns;
}

static vnode *get_node(st_vfs *v, uint64_t ino)
{
    return ino < v->ninodes ? v->inodes[ino] : NULL;
}

/* ---- status ---- */

/* Adds "eta_durable_seconds" to root (vfs_eta_durable_seconds), null while
 * the rate is unknown. As vfs_json_add. Lock held. */
static int add_eta_durable(json_object *root, const st_vfs *v, uint64_t pending)
{
    static const char key[] = "eta_durable_seconds";
    double eta = vfs_eta_durable_seconds(v, pending);
    if (eta < 0)
        return json_object_object_add(root, key, NULL) ? -1 : 0; /* json-c's null */
    return vfs_json_add(root, key, vfs_json_fixed(eta, 1));
}

/* The status file: one JSON object (docs/MOUNT.md describes the fields) on
 * one line, built with json-c: compact, '/' unescaped, keys in the order
 * added, step numbers as uint64. ST_ERR_NOMEM when json-c ran out of memory
 * (the open fails rather than showing half a document). Lock held. */
static st_err build_status(st_vfs *v, st_bytes *b)
{
    double secs = (double)v->upload_ns / 1e9;
    uint64_t pending = vfs_pending_bytes(v);
    json_object *root = json_object_new_object();
    int bad = vfs_json_add(root, "node", json_object_new_string(v->node));
    bad |= vfs_json_add(root, "pending_bytes", json_object_new_uint64(pending));
    bad |= vfs_json_add(root, "staged_bytes", json_object_new_uint64(v->staged_bytes));
    bad |= vfs_json_add(root, "staging_cap", json_object_new_uint64(v->opts.staging_cap));
    bad |= vfs_json_add(root, "spare_bytes", json_object_new_uint64(v->spare_bytes));
    bad |= vfs_json_add(root, "spare_files", json_object_new_uint64(v->nspares));
    bad |= vfs_json_add(root, "spare_reused_bytes", json_object_new_uint64(v->spare_reused_bytes));
    bad |=
        vfs_json_add(root, "spare_durable_files", json_object_new_uint64(v->spare_durable_files));
    bad |= vfs_json_add(root, "uploaded_bytes", json_object_new_uint64(v->uploaded_bytes));
    bad |= vfs_json_add(root, "stored_bytes", json_object_new_uint64(v->stored_bytes));
    bad |= vfs_json_add(root, "upload_rate_mbps",
                        vfs_json_fixed(secs > 0 ? (double)v->uploaded_bytes / secs / 1e6 : 0.0, 1));
    bad |= vfs_json_add(root, "unsynced_files", json_object_new_uint64(vfs_count_unsynced(v)));
    bad |= vfs_failed_status(v, root);
    bad |= vfs_json_add(root, "queue", json_object_new_uint64(v->nqueue));
    bad |= vfs_json_add(root, "draining", json_object_new_boolean(v->draining));
    bad |= add_eta_durable(root, v, pending);
    /* While the store is unreachable that is the error to show; an upload's
     * own error comes back if it outlives the outage. */
    char store_error[sizeof v->last_error] = "";
    bad |= vfs_health_status(v, root, store_error, sizeof store_error);
    bad |= vfs_json_add(root, "last_error",
                        json_object_new_string(store_error[0] ? store_error : v->last_error));
    static const char *const lease_states[] = {"unknown", "held", "taken"};
    json_object *lease = json_object_new_object();
    bad |= vfs_json_add(lease, "state", json_object_new_string(lease_states[v->lease.state]));
    bad |= vfs_json_add(lease, "error", json_object_new_string(v->lease.error));
    bad |= vfs_json_add(root, "node_lease", lease);
    json_object *steps = json_object_new_array();
    for (size_t i = 0; i < v->njobs; i++) {
        vjob *j = &v->jobs[i];
        for (size_t k = 0; k < j->nsteps; k++) {
            vstep *s = &j->steps[k];
            if (vfs_deletion_find(j, s->step))
                continue; /* listed with the deletions */
            json_object *o = json_object_new_object();
            bad |= vfs_json_add(o, "job", json_object_new_string(j->name));
            bad |= vfs_json_add(o, "step", json_object_new_uint64(s->step));
            bad |= vfs_json_add(o, "state",
                                json_object_new_string(st_vfs_step_state_name(vfs_step_state(s))));
            bad |= vfs_json_add(o, "revision", json_object_new_uint64(s->revision));
            bad |= vfs_json_add(o, "writers", json_object_new_int(s->writers));
            bad |= vfs_json_add(steps, NULL, o);
        }
    }
    bad |= vfs_json_add(root, "steps", steps);
    bad |= vfs_deletions_status(v, root);
    bad |= vfs_gc_status(v, root);
    bad |= vfs_warmup_status(v, root);
    size_t len = 0;
    const char *text =
        bad ? NULL
            : json_object_to_json_string_length(
                  root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &len);
    st_err e = text ? st_bytes_append(b, text, len) : ST_ERR_NOMEM;
    if (!e)
        e = st_bytes_put_u8(b, '\n');
    json_object_put(root);
    return e ? st_seterr(e, "status: out of memory") : ST_OK;
}

/* The metrics file: the caller's renderer (st_vfs_options.metrics), called
 * without the lock since it takes it itself (st_vfs_get_stats). */
static st_err build_metrics(st_vfs *v, st_bytes *b)
{
    char *text = NULL;
    size_t len = 0;
    st_err e = v->opts.metrics(v->opts.metrics_arg, v, &text, &len);
    if (!e)
        e = st_bytes_append(b, text, len);
    free(text);
    return e;
}

/* ---- namespace operations ---- */

static st_err check_name(const char *name)
{
    size_t len = strlen(name);
    if (len == 0)
        return st_seterr(ST_ERR_NAME, "empty name");
    if (len > NAME_MAX)
        return st_seterr(ST_ERR_TOO_LONG, "name longer than %d bytes", NAME_MAX);
    if (!strcmp(name, ".") || !strcmp(name, ".."))
        return st_seterr(ST_ERR_NAME, "reserved name");
    return ST_OK;
}

/* Checks that a new entry `name` may be made in dir: job directories only at
 * the root, no files at the root, and the path fits a manifest, also for the
 * `below` bytes of the longest path under the entry (a directory moved by a
 * rename: "/sub/file"); a file whose path does not fit could never be
 * stored, so the operation is refused instead of losing it at the upload. */
static st_err check_new_entry(st_vfs *v, vnode *dir, const char *name, int is_dir, size_t below)
{
    st_err e = check_name(name);
    if (e)
        return e;
    if (dir == v->root) {
        if (!is_dir)
            return st_seterr(ST_ERR_NAME, "only job directories live at the mount's root");
        if (!st_name_is_valid(name, ST_JOB_MAX))
            return st_seterr(ST_ERR_NAME, "invalid job name");
        return ST_OK;
    }
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!vfs_job_path(dir, path, sizeof path) ||
        strlen(path) + 1 + strlen(name) + below > ST_MANIFEST_MAX_PATH)
        return st_seterr(ST_ERR_TOO_LONG, "a path would be longer than %d bytes",
                         ST_MANIFEST_MAX_PATH);
    return ST_OK;
}

/* Bytes of the longest path below n, relative to n ("/a/b": 4); 0 for a
 * file or an empty directory. */
static size_t longest_below(const vnode *n)
{
    size_t longest = 0;
    for (size_t i = 0; i < n->nkids; i++) {
        size_t len = 1 + strlen(n->kids[i]->name) + longest_below(n->kids[i]);
        if (len > longest)
            longest = len;
    }
    return longest;
}

st_err st_vfs_lookup(st_vfs *v, uint64_t parent, const char *name, st_vfs_attr *out)
{
    if (parent == ST_VFS_ROOT_INO && !strcmp(name, CTL_DIR_NAME)) {
        virt_attr(v, ST_VFS_CTL_DIR_INO, out);
        return ST_OK;
    }
    if (parent == ST_VFS_CTL_DIR_INO) {
        if (!strcmp(name, STATUS_NAME))
            virt_attr(v, ST_VFS_STATUS_INO, out);
        else if (!strcmp(name, COMMIT_NAME))
            virt_attr(v, ST_VFS_COMMIT_INO, out);
        else if (!strcmp(name, DRAIN_NAME))
            virt_attr(v, ST_VFS_DRAIN_INO, out);
        else if (!strcmp(name, WARMUP_NAME))
            virt_attr(v, ST_VFS_WARMUP_INO, out);
        else if (!strcmp(name, METRICS_NAME) && v->opts.metrics)
            virt_attr(v, ST_VFS_METRICS_INO, out);
        else
            return ST_ERR_NOT_FOUND;
        return ST_OK;
    }
    if (strlen(name) > NAME_MAX) /* as any Linux file system: no such name can exist */
        return st_seterr(ST_ERR_TOO_LONG, "name longer than %d bytes", NAME_MAX);
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *dir = get_node(v, parent);
    vnode *n = dir && S_ISDIR(dir->mode) ? vfs_child(dir, name) : NULL;
    if (!dir)
        e = ST_ERR_NOT_FOUND;
    else if (!S_ISDIR(dir->mode))
        e = ST_ERR_NOT_DIR;
    else if (!n)
        e = ST_ERR_NOT_FOUND;
    else {
        n->nlookup++;
        node_attr(n, out);
    }
    pthread_mutex_unlock(&v->lock);
    return e;
}

void st_vfs_forget(st_vfs *v, uint64_t ino, uint64_t nlookup)
{
    if (ino <= ST_VFS_LAST_CTL_INO)
        return;
    pthread_mutex_lock(&v->lock);
    vnode *n = get_node(v, ino);
    if (n) {
        n->nlookup = n->nlookup > nlookup ? n->nlookup - nlookup : 0;
        vfs_maybe_free(v, n);
    }
    pthread_mutex_unlock(&v->lock);
}

st_err st_vfs_getattr(st_vfs *v, uint64_t ino, st_vfs_attr *out)
{
    if (ino >= ST_VFS_CTL_DIR_INO && ino <= ST_VFS_LAST_CTL_INO &&
        (ino != ST_VFS_METRICS_INO || v->opts.metrics)) {
        virt_attr(v, ino, out);
        return ST_OK;
    }
    pthread_mutex_lock(&v->lock);
    vnode *n = get_node(v, ino);
    if (n)
        node_attr(n, out);
    pthread_mutex_unlock(&v->lock);
    return n ? ST_OK : ST_ERR_NOT_FOUND;
}

/* Cuts the stale bytes of a recycled staging file (lock held): truncates it
 * to the end of what was written or is being written, whichever is further,
 * so the writes in flight keep their bytes and a hole beyond reads as zeros
 * (docs/MOUNT.md, "Recycled staging files", rules 3 and 4). fd: an open
 * descriptor of it, or -1. */
static st_err cut_stale(st_vfs *v, vnode *n, int fd)
{
    if (!n->stale_end)
        return ST_OK;
    uint64_t keep = n->write_front > n->size ? n->write_front : n->size;
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)keep) < 0)
            return st_seterr(ST_ERR_IO, "truncate recycled staging file: %s", strerror(errno));
    } else {
        char path[PATH_MAX];
        vfs_staging_path(v, n->sid, path, sizeof path);
        st_err e = vfs_staging_truncate(v, path, keep);
        if (e)
            return e;
    }
    n->stale_end = 0;
    return ST_OK;
}

/* Gives n a staging file of its own (empty, or with its fetched content). */
static st_err make_local(st_vfs *v, vnode *n, int empty)
{
    while (n->fetching) /* a change never races a fetch's writes */
        pthread_cond_wait(&v->changed, &v->lock);
    if (n->sid && !empty)
        return ST_OK;
    if (!n->sid && !empty) {
        st_err e = vfs_fetch(v, n);
        if (e)
            return e;
        return ST_OK;
    }
    char path[PATH_MAX];
    uint64_t kept = 0; /* the staging file left to the running upload */
    /* A naming marker's version its step has not stored yet stays that
     * step's (docs/MOUNT.md, "A naming marker replaced before its step is
     * stored"): its file is kept where it is. */
    int marker_kept = n->sid && vfs_keep_marker(v, n);
    if (n->sid && vfs_spare_in_upload(v, n->sid)) {
        /* Truncated in place, the upload would read the new version, or
         * part of it, as its snapshot's: a `latest` rewritten for step 3
         * was stored in step 2 (docs/MOUNT.md, "A file rewritten while its
         * step uploads"). The new version gets a staging file of its own. */
        st_err e = vfs_spare_keep_for_upload(v, n, &kept);
        if (e)
            return e;
    }
    vfs_set_write_failed(v, n, ST_OK); /* rewritten from the start */
    if (n->sid && n->size == 0 && n->stale_end) {
        /* Empty already (a create's O_TRUNC): a truncate would free the
         * recycled pages it was given for. */
    } else if (n->sid) {
        vfs_staging_path(v, n->sid, path, sizeof path);
        st_err e = vfs_staging_truncate(v, path, 0);
        if (e)
            return e;
        v->staged_bytes -= n->size;
        n->stale_end = 0;
    } else {
        uint64_t sid = v->next_sid++;
        /* Written over a recycled file when the pool has one: its stale
         * bytes are cut as rules 3 and 4 of docs/MOUNT.md say. */
        uint64_t stale = vfs_spare_take(v, n, sid);
        if (!stale) {
            vfs_staging_path(v, sid, path, sizeof path);
            int fd;
            st_err e = vfs_staging_create(v, path, O_WRONLY, &fd);
            if (e) {
                if (marker_kept) /* the file stays as it was */
                    vfs_keep_undo(v, n);
                return e;
            }
            close(fd);
        }
        n->sid = sid;
        n->stale_end = stale;
    }
    n->write_front = 0;
    n->size = 0;
    n->version++;
    n->state = VFILE_WRITING;
    n->from_remote = 0;
    n->mtime_ns = st_now_ns();
    st_err e = vfs_journal_put_file(v, n);
    if (kept) { /* its row names the new file now; the pool's link stays */
        vfs_staging_path(v, kept, path, sizeof path);
        unlink(path);
    }
    return e;
}

/* A new entry's owner: the caller's, or (NULL) the mount's user's, which
 * vfs_node_new gave it. */
static void set_owner(vnode *n, const st_vfs_owner *owner)
{
    if (owner) {
        n->uid = owner->uid;
        n->gid = owner->gid;
    }
}

/* After a change of n's attributes (lock held): its ctime, its journal row
 * (the root has none: its attributes last for the mount), *out. */
static st_err attr_changed(st_vfs *v, vnode *n, st_vfs_attr *out)
{
    st_err e = ST_OK;
    n->ctime_ns = st_now_ns();
    if (n != v->root && n->parent)
        e = S_ISDIR(n->mode) ? vfs_journal_put_dir(v, n) : vfs_journal_put_file(v, n);
    node_attr(n, out);
    return e;
}

st_err st_vfs_setattr(st_vfs *v, uint64_t ino, int which, uint32_t mode, uint64_t size,
                      int64_t atime_ns, int64_t mtime_ns, st_vfs_handle *h, st_vfs_attr *out)
{
    if (ino <= ST_VFS_LAST_CTL_INO && ino != ST_VFS_ROOT_INO) {
        if ((ino == ST_VFS_COMMIT_INO || ino == ST_VFS_DRAIN_INO || ino == ST_VFS_WARMUP_INO) &&
            which == ST_VFS_SET_SIZE && size == 0) {
            virt_attr(v, ino, out); /* O_TRUNC of a write-only control file: nothing to do */
            return ST_OK;
        }
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    }
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *n = get_node(v, ino);
    if (!n) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if ((which & ST_VFS_SET_SIZE) && S_ISDIR(n->mode)) {
        e = ST_ERR_IS_DIR;
        goto out;
    }
    if ((which & ST_VFS_SET_SIZE) && size > (uint64_t)INT64_MAX) {
        e = st_seterr(ST_ERR_TOO_BIG, "size %" PRIu64 " is past any file's", size);
        goto out;
    }
    if ((which & ST_VFS_SET_SIZE) && size != n->size) {
        if (size && n->sid && vfs_spare_in_upload(v, n->sid))
            v->upload_disturbed = 1; /* cut or grown under the upload's reads */
        if (size == 0)
            e = make_local(v, n, 1);
        else if (!n->sid)
            e = make_local(v, n, 0);
        if (e)
            goto out;
        if (n->sid && (e = cut_stale(v, n, h ? h->fd : -1)))
            goto out;
        if (n->size != 0 || size != 0) {
            if (h && h->fd >= 0) {
                if (ftruncate(h->fd, (off_t)size) < 0)
                    e = st_seterr(st_err_of_write_errno(errno), "truncate: %s", strerror(errno));
            } else {
                char path[PATH_MAX];
                vfs_staging_path(v, n->sid, path, sizeof path);
                e = vfs_staging_truncate(v, path, size);
            }
            if (e)
                goto out;
            v->staged_bytes = v->staged_bytes - n->size + size;
            n->size = size;
            n->version++;
            n->from_remote = 0;
            if (n->state == VFILE_DURABLE)
                n->state = VFILE_CLOSED;
        }
    }
    if (which & ST_VFS_SET_MODE)
        n->mode = (n->mode & S_IFMT) | (mode & 07777);
    if (which & ST_VFS_SET_MTIME)
        n->mtime_ns = mtime_ns;
    if (which & ST_VFS_SET_ATIME) {
        n->atime_ns = atime_ns;
        n->atime_set = 1;
    }
    e = attr_changed(v, n, out);
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_chown(st_vfs *v, uint64_t ino, uint32_t uid, uint32_t gid, st_vfs_attr *out)
{
    if (ino <= ST_VFS_LAST_CTL_INO && ino != ST_VFS_ROOT_INO) {
        st_err e = st_vfs_getattr(v, ino, out);
        if (!e && ((uid != ST_VFS_OWNER_KEEP && uid != out->uid) ||
                   (gid != ST_VFS_OWNER_KEEP && gid != out->gid)))
            e = st_seterr(ST_ERR_READ_ONLY, "status entries are the mount's user's");
        return e;
    }
    pthread_mutex_lock(&v->lock);
    st_err e = ST_ERR_NOT_FOUND;
    vnode *n = get_node(v, ino);
    if (n) {
        if (uid != ST_VFS_OWNER_KEEP)
            n->uid = uid;
        if (gid != ST_VFS_OWNER_KEEP)
            n->gid = gid;
        e = attr_changed(v, n, out);
    }
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_mkdir(st_vfs *v, uint64_t parent, const char *name, uint32_t mode,
                    const st_vfs_owner *owner, st_vfs_attr *out)
{
    if ((parent >= ST_VFS_CTL_DIR_INO && parent <= ST_VFS_LAST_CTL_INO) ||
        (parent == ST_VFS_ROOT_INO && !strcmp(name, CTL_DIR_NAME)))
        return st_seterr(ST_ERR_READ_ONLY, "reserved");
    pthread_mutex_lock(&v->lock);
    st_err e;
    vnode *dir = get_node(v, parent), *n;
    if (!dir)
        e = ST_ERR_NOT_FOUND;
    else if (!S_ISDIR(dir->mode))
        e = ST_ERR_NOT_DIR;
    else if ((e = check_new_entry(v, dir, name, 1, 0)))
        ;
    else if (vfs_child(dir, name))
        e = ST_ERR_EXISTS;
    else if (!(n = vfs_node_new(v, dir, name, S_IFDIR | (mode & 07777))))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    else {
        set_owner(n, owner);
        if (dir == v->root)
            vfs_job(v, name, 1);
        vfs_deletion_cancel(v, n);
        e = vfs_journal_put_dir(v, n);
        n->nlookup++;
        node_attr(n, out);
    }
    pthread_mutex_unlock(&v->lock);
    return e;
}

/* The unlink of regular file n, its removal begun (rm): dropped from staging,
 * the deletion committed. */
static st_err remove_file(st_vfs *v, vnode *n, vfs_removal *rm)
{
    st_err e = vfs_drop_file(v, n, 1, 1);
    if (e)
        vfs_journal_rollback(v); /* the file stays: the unlink failed */
    else
        e = vfs_removal_commit(v, rm);
    vjob *j = rm->jd ? vfs_job(v, rm->jd->name, 0) : NULL;
    if (j) /* it may have been the file with a failed write */
        retry_blocked_steps(v, j);
    return e;
}

/* The rmdir of empty directory n, its removal begun (rm). */
static st_err remove_dir(st_vfs *v, vnode *n, vfs_removal *rm)
{
    st_err e = ST_OK;
    if (rm->jd && (e = vfs_journal_delete(v, rm->jd->name, rm->path))) /* "" for a job: all */
        vfs_journal_rollback(v);
    else if (!(e = vfs_removal_commit(v, rm))) {
        vfs_unlink_node(v, n);
        vfs_maybe_free(v, n);
    }
    return e;
}

/* unlink (want_dir 0) or rmdir (1) of name in parent: the checks both share,
 * then the removal of a file or of a directory. */
static st_err remove_entry(st_vfs *v, uint64_t parent, const char *name, int want_dir)
{
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *dir = get_node(v, parent);
    vnode *n = dir && S_ISDIR(dir->mode) ? vfs_child(dir, name) : NULL;
    vfs_removal rm;
    if (!n)
        e = ST_ERR_NOT_FOUND;
    else if (!S_ISDIR(n->mode) != !want_dir)
        e = want_dir ? ST_ERR_NOT_DIR : ST_ERR_IS_DIR;
    else if (want_dir && n->nkids && !vfs_rmdir_drop_unseen(v, n))
        e = ST_ERR_NOT_EMPTY;
    else if (!(e = vfs_removal_begin(v, n, &rm)))
        e = want_dir ? remove_dir(v, n, &rm) : remove_file(v, n, &rm);
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_unlink(st_vfs *v, uint64_t parent, const char *name)
{
    if (parent == ST_VFS_CTL_DIR_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    return remove_entry(v, parent, name, 0);
}

st_err st_vfs_rmdir(st_vfs *v, uint64_t parent, const char *name)
{
    if (parent == ST_VFS_ROOT_INO && !strcmp(name, CTL_DIR_NAME))
        return st_seterr(ST_ERR_READ_ONLY, "reserved");
    return remove_entry(v, parent, name, 1);
}

/* 1 if n or anything under it lives only in the store. */
static int has_remote_only(const vnode *n)
{
    if (S_ISREG(n->mode))
        return !n->sid;
    for (size_t i = 0; i < n->nkids; i++)
        if (has_remote_only(n->kids[i]))
            return 1;
    return 0;
}

/* After a rename: files under n get their step from their new path, count
 * as changed (their path is part of the step), and settle. */
static void renamed_subtree(st_vfs *v, vjob *j, vnode *n)
{
    if (S_ISDIR(n->mode)) {
        for (size_t i = 0; i < n->nkids; i++)
            renamed_subtree(v, j, n->kids[i]);
        return;
    }
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!vfs_job_path(n, path, sizeof path))
        return;
    vfs_deletion_cancel(v, n);
    uint64_t step = step_of_path(v, path, NULL);
    if (step != VFS_NO_STEP)
        n->step = step;
    n->version++;
    n->from_remote = 0;
    if (n->state == VFILE_DURABLE)
        n->state = VFILE_CLOSED;
    /* The path itself was journaled by the rename (its error fails the
     * rename); this row adds the new step and state, which a restart would
     * otherwise take from the old row: the file is then uploaded again with
     * its step found again from its path by the next change. */
    (void)vfs_journal_put_file(v, n);
    if (n->writers == 0 && n->state != VFILE_WRITING)
        step_file_settled(v, j, n, 1);
}

st_err st_vfs_rename(st_vfs *v, uint64_t parent, const char *name, uint64_t newparent,
                     const char *newname, unsigned flags)
{
    if (flags & ~(unsigned)ST_VFS_RENAME_NOREPLACE)
        return st_seterr(ST_ERR_UNSUPPORTED, "rename flags 0x%x", flags);
    if (parent <= ST_VFS_LAST_CTL_INO && parent != ST_VFS_ROOT_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    if (newparent <= ST_VFS_LAST_CTL_INO && newparent != ST_VFS_ROOT_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    pthread_mutex_lock(&v->lock);
    /* A file whose fetch is under way (a reader may have had every byte
     * already) is local once the fetch has checked it whole. */
    for (vnode *d, *f;
         (d = get_node(v, parent)) && S_ISDIR(d->mode) && (f = vfs_child(d, name)) && f->fetching;)
        pthread_cond_wait(&v->changed, &v->lock);
    st_err e = ST_OK;
    vnode *dir = get_node(v, parent), *ndir = get_node(v, newparent);
    vnode *n = dir && S_ISDIR(dir->mode) ? vfs_child(dir, name) : NULL;
    vnode *target = ndir && S_ISDIR(ndir->mode) ? vfs_child(ndir, newname) : NULL;
    char from[ST_MANIFEST_MAX_PATH + 1], to[ST_MANIFEST_MAX_PATH + 1];
    if (!n || !ndir) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if (!S_ISDIR(ndir->mode)) {
        e = ST_ERR_NOT_DIR;
        goto out;
    }
    if (target == n)
        goto out;
    if (dir == v->root || ndir == v->root || vfs_job_dir(dir) != vfs_job_dir(ndir)) {
        e = st_seterr(ST_ERR_CROSS, "rename across jobs or of a job directory");
        goto out;
    }
    if (target && (flags & ST_VFS_RENAME_NOREPLACE)) {
        e = st_seterr(ST_ERR_EXISTS, "%s exists", newname);
        goto out;
    }
    if ((e = check_new_entry(v, ndir, newname, S_ISDIR(n->mode), longest_below(n))))
        goto out;
    for (vnode *p = ndir; p; p = p->parent)
        if (p == n) {
            e = st_seterr(ST_ERR_INVALID, "cannot move a directory into itself");
            goto out;
        }
    if (has_remote_only(n)) {
        e = st_seterr(ST_ERR_CROSS, "%s lives only in the store", name);
        goto out;
    }
    if (target) {
        if (S_ISDIR(target->mode) && !S_ISDIR(n->mode)) {
            e = ST_ERR_IS_DIR;
            goto out;
        }
        if (!S_ISDIR(target->mode) && S_ISDIR(n->mode)) {
            e = ST_ERR_NOT_DIR;
            goto out;
        }
        if (S_ISDIR(target->mode) && target->nkids) {
            e = ST_ERR_NOT_EMPTY;
            goto out;
        }
    }
    vnode *jd = vfs_job_dir(n);
    vjob *j = vfs_job(v, jd->name, 1);
    if (!vfs_job_path(n, from, sizeof from)) {
        e = st_seterr(ST_ERR_NAME, "path too long");
        goto out;
    }
    if (target) {
        if (S_ISDIR(target->mode)) {
            char tp[ST_MANIFEST_MAX_PATH + 1];
            if (vfs_job_path(target, tp, sizeof tp) && (e = vfs_journal_delete(v, jd->name, tp)))
                goto out; /* nothing changed yet */
            vfs_unlink_node(v, target);
            vfs_maybe_free(v, target);
        } else if ((e = vfs_drop_file(v, target, 1, 1))) {
            goto out; /* nothing changed yet */
        }
    }
    char *nm = strdup(newname);
    if (!nm) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto out;
    }
    vfs_unlink_node(v, n);
    free(n->name);
    n->name = nm;
    if ((e = vfs_link(ndir, n)))
        goto out;
    n->ctime_ns = st_now_ns();
    if (vfs_job_path(n, to, sizeof to))
        e = vfs_journal_rename(v, jd->name, from, to);
    vfs_deletion_cancel(v, n); /* the step its new name names is written again */
    if (j) {
        renamed_subtree(v, j, n);
        retry_blocked_steps(v, j); /* the target may have been a file with a failed write */
    }
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_readdir(st_vfs *v, uint64_t ino, st_vfs_dirent **ents, size_t *n)
{
    *ents = NULL;
    *n = 0;
    st_vfs_dirent *out = NULL;
    size_t count = 0;
    if (ino == ST_VFS_CTL_DIR_INO) {
        out = calloc(7, sizeof *out);
        if (!out)
            return ST_ERR_NOMEM;
        out[0] = (st_vfs_dirent){ST_VFS_CTL_DIR_INO, S_IFDIR, strdup(".")};
        out[1] = (st_vfs_dirent){ST_VFS_ROOT_INO, S_IFDIR, strdup("..")};
        out[2] = (st_vfs_dirent){ST_VFS_STATUS_INO, S_IFREG, strdup(STATUS_NAME)};
        out[3] = (st_vfs_dirent){ST_VFS_COMMIT_INO, S_IFREG, strdup(COMMIT_NAME)};
        out[4] = (st_vfs_dirent){ST_VFS_DRAIN_INO, S_IFREG, strdup(DRAIN_NAME)};
        out[5] = (st_vfs_dirent){ST_VFS_WARMUP_INO, S_IFREG, strdup(WARMUP_NAME)};
        count = 6;
        if (v->opts.metrics)
            out[count++] = (st_vfs_dirent){ST_VFS_METRICS_INO, S_IFREG, strdup(METRICS_NAME)};
        *ents = out;
        *n = count;
        return ST_OK;
    }
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *d = get_node(v, ino);
    if (!d) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if (!S_ISDIR(d->mode)) {
        e = ST_ERR_NOT_DIR;
        goto out;
    }
    size_t extra = d == v->root ? 3 : 2;
    out = calloc(d->nkids + extra, sizeof *out);
    if (!out) {
        e = ST_ERR_NOMEM;
        goto out;
    }
    d->listed_ns = st_mono_ns();
    out[count++] = (st_vfs_dirent){d->ino, S_IFDIR, strdup(".")};
    out[count++] = (st_vfs_dirent){d->parent ? d->parent->ino : d->ino, S_IFDIR, strdup("..")};
    if (d == v->root)
        out[count++] = (st_vfs_dirent){ST_VFS_CTL_DIR_INO, S_IFDIR, strdup(CTL_DIR_NAME)};
    for (size_t i = 0; i < d->nkids; i++)
        out[count++] = (st_vfs_dirent){d->kids[i]->ino, d->kids[i]->mode, strdup(d->kids[i]->name)};
    for (size_t i = 0; i < count; i++)
        if (!out[i].name)
            e = ST_ERR_NOMEM;
out:
    pthread_mutex_unlock(&v->lock);
    if (e) {
        st_vfs_dirents_free(out, count);
        return e;
    }
    *ents = out;
    *n = count;
    return ST_OK;
}

void st_vfs_dirents_free(st_vfs_dirent *ents, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(ents[i].name);
    free(ents);
}

/* ---- files ---- */

static st_err open_staging_fd(st_vfs *v, uint64_t sid, int writable, int *fd)
{
    char path[PATH_MAX];
    vfs_staging_path(v, sid, path, sizeof path);
    return vfs_staging_open(v, path, writable ? O_RDWR : O_RDONLY, fd);
}

/* Opens n (lock held; may drop it to fetch). */
static st_err open_node(st_vfs *v, vnode *n, int flags, pid_t pid, st_vfs_handle **out)
{
    int writable = (flags & O_ACCMODE) != O_RDONLY;
    st_err e = ST_OK;
    if (S_ISDIR(n->mode))
        return ST_ERR_IS_DIR;
    n->opens++; /* pins n while a fetch drops the lock */
    vfetch *fx = NULL;
    if (writable && (flags & O_TRUNC)) {
        e = make_local(v, n, 1);
        if (!e) /* POSIX: open(O_TRUNC) of an existing file marks both */
            n->mtime_ns = n->ctime_ns = st_now_ns();
    } else if (writable && !n->sid)
        e = make_local(v, n, 0);
    else if (!n->sid) /* read-only: served run by run as the fetch verifies them */
        e = vfs_fetch_begin(v, n, &fx);
    st_vfs_handle *h = NULL;
    if (!e && !(h = calloc(1, sizeof *h)))
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
    if (!e && fx && fx->err) /* it ended at once (nothing could be started) */
        e = st_seterr(fx->err, "%s", fx->msg);
    if (!e)
        e = open_staging_fd(v, fx ? fx->sid : n->sid, writable, &h->fd);
    if (e) {
        if (fx)
            vfs_fetch_put(fx);
        free(h);
        n->opens--;
        vfs_spare_last_close(v, n);
        vfs_maybe_free(v, n);
        return e;
    }
    /* A writer that may change bytes the running upload reads (an append
     * changes none of them: docs/MOUNT.md, "A file rewritten while its step
     * uploads"). */
    if (writable && !(flags & (O_TRUNC | O_APPEND)) && vfs_spare_in_upload(v, n->sid))
        v->upload_disturbed = 1;
    h->node = n;
    h->fetch = fx;
    h->writable = writable;
    h->step = VFS_NO_STEP;
    h->start_version = n->version;
    /* A rewrite (O_TRUNC, above) is whole again; a reader of the torn
     * version must not take zeros or an older file's bytes for it. */
    h->torn = n->write_failed == ST_ERR_CORRUPT;
    h->next = v->open_handles;
    if (h->next)
        h->next->prev = h;
    v->open_handles = h;
    if (writable) {
        int32_t rank;
        uint32_t world;
        writer_rank(pid, &rank, &world);
        if (rank >= 0 || world) {
            n->rank = rank;
            n->world = world;
        }
        n->writers++;
        vnode *jd = vfs_job_dir(n);
        vjob *j = jd ? vfs_job(v, jd->name, 1) : NULL;
        if (j) {
            snprintf(h->job, sizeof h->job, "%s", j->name);
            step_writer_open(v, j, n, pid, h);
        }
    }
    *out = h;
    return ST_OK;
}

st_err st_vfs_create(st_vfs *v, uint64_t parent, const char *name, uint32_t mode, int flags,
                     pid_t pid, const st_vfs_owner *owner, st_vfs_attr *out, st_vfs_handle **h)
{
    *h = NULL;
    if (parent == ST_VFS_CTL_DIR_INO)
        return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
    pthread_mutex_lock(&v->lock);
    st_err e = ST_OK;
    vnode *dir = get_node(v, parent);
    vnode *n = NULL;
    char path[ST_MANIFEST_MAX_PATH + 1];
    if (!dir) {
        e = ST_ERR_NOT_FOUND;
        goto out;
    }
    if (!S_ISDIR(dir->mode)) {
        e = ST_ERR_NOT_DIR;
        goto out;
    }
    n = vfs_child(dir, name);
    if (n) {
        if (flags & O_EXCL)
            e = ST_ERR_EXISTS;
        else
            e = open_node(v, n, flags, pid, h);
        if (!e) {
            n->nlookup++;
            node_attr(n, out);
        }
        goto out;
    }
    if ((e = check_new_entry(v, dir, name, 0, 0)))
        goto out;
    if (!(n = vfs_node_new(v, dir, name, S_IFREG | (mode & 07777)))) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto out;
    }
    set_owner(n, owner);
    if (vfs_job_path(n, path, sizeof path))
        n->step = step_of_path(v, path, NULL);
    vfs_deletion_cancel(v, n);
    if ((e = make_local(v, n, 1)) || (e = open_node(v, n, flags | O_RDWR, pid, h))) {
        /* Undone whatever the journal says: a row left behind names an
         * empty WRITING file, which recovery drops. */
        (void)vfs_drop_file(v, n, 1, 0);
        goto out;
    }
    n->nlookup++;
    node_attr(n, out);
out:
    pthread_mutex_unlock(&v->lock);
    return e;
}

st_err st_vfs_open_file(st_vfs *v, uint64_t ino, int flags, pid_t pid, st_vfs_handle **h)
{
    *h = NULL;
    if (ino == ST_VFS_STATUS_INO || (ino == ST_VFS_METRICS_INO && v->opts.metrics)) {
        if ((flags & O_ACCMODE) != O_RDONLY)
            return st_seterr(ST_ERR_READ_ONLY, "status entries are read-only");
        st_vfs_handle *sh = calloc(1, sizeof *sh);
        if (!sh)
            return ST_ERR_NOMEM;
        sh->fd = -1;
        sh->ctl = ino;
        st_err e;
        if (ino == ST_VFS_METRICS_INO) {
            e = build_metrics(v, &sh->virt);
        } else {
            pthread_mutex_lock(&v->lock);
            e = build_status(v, &sh->virt);
            pthread_mutex_unlock(&v->lock);
        }
        if (e) {
            st_bytes_free(&sh->virt);
            free(sh);
            return e;
        }
        *h = sh;
        return ST_OK;
    }
    if (ino == ST_VFS_COMMIT_INO || ino == ST_VFS_DRAIN_INO || ino == ST_VFS_WARMUP_INO) {
        if ((flags & O_ACCMODE) == O_RDONLY)
            return st_seterr(ST_ERR_READ_ONLY, "%s is write-only",
                             ino == ST_VFS_COMMIT_INO  ? COMMIT_NAME
                             : ino == ST_VFS_DRAIN_INO ? DRAIN_NAME
                                                       : WARMUP_NAME);
        st_vfs_handle *ch = calloc(1, sizeof *ch);
        if (!ch)
            return ST_ERR_NOMEM;
        ch->fd = -1;
        ch->ctl = ino;
        ch->writable = 1;
        *h = ch;
        return ST_OK;
    }
    if (ino == ST_VFS_CTL_DIR_INO)
        return ST_ERR_IS_DIR;
    pthread_mutex_lock(&v->lock);
    vnode *n = get_node(v, ino);
    st_err e = n ? open_node(v, n, flags, pid, h) : ST_ERR_NOT_FOUND;
    pthread_mutex_unlock(&v->lock);
    return e;
}

int st_vfs_handle_fd(const st_vfs_handle *h)
{
    return h->fd;
}

st_err st_vfs_read_wait(st_vfs *v, st_vfs_handle *h, uint64_t off, size_t *len)
{
    if (h->torn)
        return st_seterr(ST_ERR_CORRUPT,
                         "torn file: its bytes never reached the staging disk before the machine "
                         "stopped; rewrite or remove it");
    if (h->node && atomic_load_explicit(&h->node->stale_end, memory_order_relaxed)) {
        /* A recycled file not yet closed: its staging file holds stale
         * bytes past the file's size (rule 3). */
        pthread_mutex_lock(&v->lock);
        uint64_t size = h->node->size;
        pthread_mutex_unlock(&v->lock);
        *len = off >= size ? 0 : size - off < *len ? (size_t)(size - off) : *len;
    }
    if (!h->fetch) /* set at open only: no lock needed to see it */
        return ST_OK;
    pthread_mutex_lock(&v->lock);
    st_err e = vfs_fetch_wait_range(v, h->fetch, off, *len);
    pthread_mutex_unlock(&v->lock);
    return e;
}

/* Records an explicit commit of (job, step) by rank (lock held). */
static st_err record_commit(st_vfs *v, const char *job, uint64_t step, uint32_t rank,
                            uint32_t world)
{
    vnode *jd = vfs_child(v->root, job);
    vjob *j = jd ? vfs_job(v, job, 1) : NULL;
    vstep *s = j ? vfs_step(j, step, 1) : NULL;
    if (!s)
        return st_seterr(ST_ERR_NOT_FOUND, "no job directory %s in the mount", job);
    for (size_t i = 0; i < s->ncommits; i++)
        if (s->commits[i].rank == rank) {
            s->commits[i].world_size = world;
            goto queue;
        }
    if (st_array_grow((void **)&s->commits, &s->commits_cap, s->ncommits + 1, sizeof *s->commits))
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    s->commits[s->ncommits++] = (st_rank_commit){rank, world};
queue:;
    st_err e = vfs_journal_put_step(v, job, s);
    if (e) /* the commit write fails: the writer retries, which is idempotent */
        return e;
    vfs_log(v, 0, "rank %u of %u committed step %" PRIu64 " of %s", rank, world, step, job);
    /* Published with this node's files of the step, once none is open. */
    s->dirty = 1;
    if (!s->writers)
        vfs_enqueue(v, job, step);
    return ST_OK;
}

/* A write to .ckptfs/drain: "drain", a newline optional (docs/SHUTDOWN.md). */
static st_err drain_write(st_vfs *v, const void *buf, size_t len)
{
    static const char word[] = "drain";
    size_t n = sizeof word - 1;
    if (len < n || len > n + 1 || memcmp(buf, word, n) ||
        (len == n + 1 && ((const char *)buf)[n] != '\n'))
        return st_seterr(ST_ERR_INVALID, "expected \"drain\"");
    st_vfs_drain(v);
    return ST_OK;
}

st_err st_vfs_warmup(st_vfs *v, const char *job, uint64_t step)
{
    pthread_mutex_lock(&v->lock);
    st_err e = vfs_warmup_request(v, job ? job : "", step == UINT64_MAX ? VFS_NO_STEP : step);
    pthread_mutex_unlock(&v->lock);
    return e;
}

int st_vfs_job_name_ok(const char *name)
{
    return st_name_is_valid(name, ST_JOB_MAX);
}

/* A write to .ckptfs/warmup: one line "JOB" or "JOB STEP" (docs/WARMUP.md). */
static st_err warmup_write(st_vfs *v, const void *buf, size_t len)
{
    char text[ST_JOB_MAX + 32], job[sizeof text], extra; /* a token fits: %159s */
    unsigned long long step = UINT64_MAX;
    if (len >= sizeof text)
        return st_seterr(ST_ERR_INVALID, "expected one line \"JOB [STEP]\"");
    memcpy(text, buf, len);
    text[len] = '\0';
    if (len && text[len - 1] == '\n')
        text[len - 1] = '\0';
    const char *sp = strchr(text, ' ');
    int got = sscanf(text, "%159s %llu %c", job, &step, &extra);
    /* The step is digits only (strtoull would take "-1"). */
    int digits = sp && sp[1] && strspn(sp + 1, "0123456789") == strlen(sp + 1);
    if ((got != 1 && got != 2) || strchr(text, '\n') || !st_name_is_valid(job, ST_JOB_MAX) ||
        (got == 2 && (!digits || step == UINT64_MAX)) || (got == 1 && sp))
        return st_seterr(ST_ERR_INVALID, "expected one line \"JOB [STEP]\"");
    return st_vfs_warmup(v, job, got == 2 ? step : UINT64_MAX);
}

st_err st_vfs_handle_write(st_vfs *v, st_vfs_handle *h, const void *buf, size_t len)
{
    if (h->node || !h->writable)
        return st_seterr(ST_ERR_READ_ONLY, "not a control file open for writing");
    if (h->ctl == ST_VFS_DRAIN_INO)
        return drain_write(v, buf, len);
    if (h->ctl == ST_VFS_WARMUP_INO)
        return warmup_write(v, buf, len);
    char text[4096];
    if (len >= sizeof text)
        return st_seterr(ST_ERR_INVALID, "commit lines are short: at most %zu bytes",
                         sizeof text - 1);
    memcpy(text, buf, len);
    text[len] = '\0';
    /* Parse every line first: a malformed write records nothing. */
    typedef struct {
        char job[ST_JOB_MAX + 1];
        unsigned long long step;
        unsigned rank, world;
    } line;
    line lines[64];
    size_t nlines = 0;
    for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        char job[256], extra;
        line *x = &lines[nlines];
        if (nlines == 64 ||
            sscanf(l, "%255s %llu %u %u %c", job, &x->step, &x->rank, &x->world, &extra) != 4 ||
            !st_name_is_valid(job, ST_JOB_MAX) || x->world == 0 || x->rank >= x->world)
            return st_seterr(ST_ERR_INVALID, "expected lines \"JOB STEP RANK WORLD_SIZE\"");
        memcpy(x->job, job, strlen(job) + 1); /* valid: at most ST_JOB_MAX bytes */
        nlines++;
    }
    st_err e = nlines ? ST_OK : st_seterr(ST_ERR_INVALID, "empty commit");
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; !e && i < nlines; i++)
        e = record_commit(v, lines[i].job, lines[i].step, lines[i].rank, lines[i].world);
    pthread_mutex_unlock(&v->lock);
    return e;
}

size_t st_vfs_handle_read(const st_vfs_handle *h, uint64_t off, void *buf, size_t len)
{
    if (off >= h->virt.len)
        return 0;
    size_t n = h->virt.len - off < len ? h->virt.len - off : len;
    memcpy(buf, h->virt.data + off, n);
    return n;
}

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
    return attr_changed(v, n, &unused); /* the journal keeps it across a restart */
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
            e = cut_stale(v, n, h->fd);
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
 * syncs them (docs/MOUNT.md, "When close() waits for the disk": close_sync
 * "background", files of CLOSE_SYNC_MIN bytes or more written from empty,
 * whose journal row says WRITING until this flush: a machine crash that
 * loses the flush's row drops the file rather than trusting an older row
 * over bytes changed in place). fsync (must_sync) also syncs bytes another
 * handle's flush left unsynced. */
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
        e = cut_stale(v, h->node, h->fd);
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
    (void)cut_stale(v, n, -1); /* failed anyway: its length is what counts */
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
    if (!h->node) {
        st_bytes_free(&h->virt);
        free(h);
        return;
    }
    if (h->sync_pending)
        sync_deferred(v, h);
    pthread_mutex_lock(&v->lock);
    vnode *n = h->node;
    if (h->prev)
        h->prev->next = h->next;
    else
        v->open_handles = h->next;
    if (h->next)
        h->next->prev = h->prev;
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
            step_file_settled(v, j, n, n->version != h->start_version);
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
                step_complete(v, j, s);
        }
        if (j)
            retry_blocked_steps(v, j);
    }
    vfs_spare_last_close(v, n);
    vfs_maybe_free(v, n);
    pthread_mutex_unlock(&v->lock);
    free(h);
}

st_err st_vfs_statfs(st_vfs *v, struct statvfs *out)
{
    if (statvfs(v->staging, out) < 0)
        return st_seterr(ST_ERR_IO, "statfs staging: %s", strerror(errno));
    out->f_bsize = out->f_frsize; /* blocks below are counted in f_frsize */
    if (v->opts.staging_cap) {
        pthread_mutex_lock(&v->lock);
        uint64_t cap_blocks = v->opts.staging_cap / out->f_frsize;
        uint64_t used = v->staged_bytes / out->f_frsize;
        pthread_mutex_unlock(&v->lock);
        uint64_t left = cap_blocks > used ? cap_blocks - used : 0;
        out->f_blocks = cap_blocks < out->f_blocks ? cap_blocks : out->f_blocks;
        out->f_bavail = left < out->f_bavail ? left : out->f_bavail;
        out->f_bfree = left < out->f_bfree ? left : out->f_bfree;
    }
    return ST_OK;
}

/* (R8) At unmount a step is completed only if nothing says it is unfinished:
 * no single-file checkpoint cut short, and not a layout whose framework
 * writes its own marker last (DCP shards, HF checkpoint-N, DeepSpeed
 * global_stepN, Megatron iter_N): those wait for the marker. */
static int unmount_may_complete(st_vfs *v, vnode *jd, uint64_t step)
{
    static const char *const marker_layouts[] = {"checkpoint", "global_step", "iter"};
    for (uint64_t i = 0; i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        char path[ST_MANIFEST_MAX_PATH + 1];
        if (!n || !n->parent || !S_ISREG(n->mode) || n->step != step || vfs_job_dir(n) != jd ||
            !n->sid || n->from_remote || !vfs_job_path(n, path, sizeof path))
            continue;
        st_step_match m;
        st_steprules_match(v->rules, path, &m);
        if (m.matched && m.single_file && !file_whole(v, n))
            return 0;
        size_t len = strlen(path);
        if (len > 7 && !strcmp(path + len - 7, ".distcp"))
            return 0;
        if (m.matched && !m.single_file) {
            const char *comp = path + m.prefix_len;
            while (comp > path && comp[-1] != '/')
                comp--;
            for (size_t k = 0; k < sizeof marker_layouts / sizeof *marker_layouts; k++)
                if (!strncasecmp(comp, marker_layouts[k], strlen(marker_layouts[k])))
                    return 0;
        }
    }
    return 1;
}

void st_vfs_complete_all(st_vfs *v, const char *job, int at_unmount)
{
    pthread_mutex_lock(&v->lock);
    for (size_t i = 0; i < v->njobs; i++) {
        vjob *j = &v->jobs[i];
        vnode *jd = vfs_child(v->root, j->name);
        if (!jd || (job && strcmp(job, j->name)))
            continue;
        for (size_t k = 0; k < j->nsteps; k++) {
            vstep *s = &j->steps[k];
            if (s->writers || s->complete)
                continue;
            if (at_unmount && !unmount_may_complete(v, jd, s->step))
                continue;
            step_complete(v, j, s);
        }
    }
    pthread_mutex_unlock(&v->lock);
}

st_err st_vfs_wait_idle(st_vfs *v, double timeout_s)
{
    int64_t deadline = st_mono_ns() + (int64_t)(timeout_s * 1e9);
    pthread_mutex_lock(&v->lock);
    while ((v->nqueue || v->uploader_busy) && st_mono_ns() < deadline)
        vfs_timedwait(v, st_mono_ns() + 100 * 1000000);
    int idle = !v->nqueue && !v->uploader_busy;
    pthread_mutex_unlock(&v->lock);
    return idle ? ST_OK : ST_ERR_BUSY;
}

/* ---- open / close ---- */

/* Recovery of a naming marker's version kept for its step: the step is
 * queued as a step with files to upload is. */
static void recover_kept(void *arg, const char *job, uint64_t step, const char *path, uint64_t sid,
                         uint32_t mode, int64_t mtime_ns)
{
    st_vfs *v = arg;
    if (!vfs_kept_restore(v, job, step, path, sid, mode, mtime_ns))
        return;
    vjob *j = vfs_job(v, job, 0);
    vstep *s = j ? vfs_step(j, step, 0) : NULL;
    if (s && s->complete)
        vfs_enqueue(v, j->name, s->step);
    else if (s) { /* published eagerly once quiet */
        s->dirty = 1;
        s->last_activity_ns = st_mono_ns();
    }
}

/* A restart: the namespace and steps from the journal, then the deletion
 * requests it holds (before anything is queued: a step whose deletion was
 * requested is never published again), then the upload queue. Lock held. */
static st_err recover(st_vfs *v)
{
    vfs_recovered_deletion *dels = NULL;
    size_t ndels = 0;
    st_err e = vfs_journal_recover(v, &dels, &ndels);
    for (size_t i = 0; !e && i < ndels; i++)
        e = vfs_deletion_restore(v, dels[i].job, dels[i].step, dels[i].path, dels[i].requested_ns);
    vfs_recovered_deletions_free(dels, ndels);
    if (!e)
        e = vfs_journal_each_kept(v, recover_kept, v);
    if (e)
        return e;
    /* Queue the complete steps that still have files to upload. */
    for (uint64_t i = 0; i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        if (!n || !S_ISREG(n->mode) || !n->sid || n->state == VFILE_DURABLE ||
            n->step == VFS_NO_STEP)
            continue;
        vnode *jd = vfs_job_dir(n);
        vjob *j = jd ? vfs_job(v, jd->name, 0) : NULL;
        vstep *s = j ? vfs_step(j, n->step, 0) : NULL;
        /* The completion rules (R1 markers, R3 single-file steps) run at the
         * release, after close() has returned: a crash in between left an
         * acknowledged file whose step never completed. Nothing is open for
         * writing now, so they run again (docs/MOUNT.md, crash and restart). */
        if (s && !s->complete)
            step_file_settled(v, j, n, 0);
        if (s && s->complete)
            vfs_enqueue(v, j->name, s->step);
        else if (s) { /* published eagerly once quiet */
            s->dirty = 1;
            s->last_activity_ns = st_mono_ns();
        }
    }
    vfs_note_failed_files(v); /* last_error names a file that holds its step back */
    return ST_OK;
}

/* One read of the first look at the store, at open, under the look's
 * bound (which is per thread: vfs_bound_set). */
typedef struct open_look {
    st_vfs *v;
    vfs_bound bound;
    st_err (*read)(st_vfs *v);
} open_look;

static st_err look(void *arg)
{
    open_look *l = arg;
    vfs_bound outer = vfs_bound_set(l->bound);
    st_err e = l->read(l->v);
    vfs_bound_set(outer);
    return e;
}

/* The store's steps and this node's lease, read at once (neither needs the
 * other's answer: on Ceph RGW each is a round trip of ~45 ms, and a mount
 * waited for both in a row). They share one bound, so a dead endpoint
 * delays the mount once, not twice (docs/NODES.md); a store that does not
 * answer within it is left to the refresher thread (docs/MOUNT.md, "The
 * store is down"). Only a live holder of the node name fails the open. */
static st_err first_look(st_vfs *v)
{
    const vfs_bound bound = {.stop_at_ns = st_mono_ns() + VFS_OPEN_STORE_WAIT_NS,
                             .outage_budget_ns = VFS_OPEN_OUTAGE_NS};
    open_look steps = {v, bound, vfs_remote_refresh}, lease = {v, bound, vfs_lease_read};
    st_parallel_call calls[] = {{.fn = look, .arg = &steps}, {.fn = look, .arg = &lease}};
    (void)st_parallel_run(calls, 2); /* each result is looked at below */
    if (calls[0].err)
        vfs_log(v, 1, "cannot load the store's steps yet (the refresher keeps trying): %s",
                calls[0].msg);
    if (calls[1].err == ST_ERR_BUSY)
        return st_seterr(ST_ERR_BUSY, "%s", calls[1].msg);
    if (calls[1].err)
        vfs_log(v, 1,
                "cannot read the lease of node '%s' yet (%s); checked again before publishing",
                v->node, calls[1].msg);
    return ST_OK;
}

/* An option with two values: value (NULL: the first) sets *is_second to 1 if
 * it is the second, 0 if the first; anything else is ST_ERR_INVALID. */
static st_err option_choice(const char *what, const char *value, const char *first,
                            const char *second, int *is_second)
{
    if (!value)
        value = first;
    *is_second = strcmp(value, second) == 0;
    if (*is_second || strcmp(value, first) == 0)
        return ST_OK;
    return st_seterr(ST_ERR_INVALID, "%s '%.32s': use %s or %s", what, value, first, second);
}

st_err st_vfs_open(const st_vfs_options *opts, st_vfs **out)
{
    *out = NULL;
    st_vfs *v = calloc(1, sizeof *v);
    if (!v)
        return st_seterr(ST_ERR_NOMEM, "out of memory");
    v->opts = *opts;
    if (v->opts.refresh_seconds <= 0)
        v->opts.refresh_seconds = 5;
    if (v->opts.drain_seconds <= 0)
        v->opts.drain_seconds = 60;
    if (v->opts.gc_grace_seconds <= 0)
        v->opts.gc_grace_seconds = (double)ST_GC_DEFAULT_GRACE_NS / 1e9;
    if (v->opts.gc_interval_seconds <= 0)
        v->opts.gc_interval_seconds = 600;
    st_err bad = option_choice("close sync", opts->close_sync, "disk", "background",
                               &v->close_in_background);
    if (!bad)
        bad = option_choice("control access", opts->control_access, "owner", "all",
                            &v->control_public);
    if (bad) {
        free(v);
        return bad;
    }
    v->user = (st_vfs_owner){(uint32_t)getuid(), (uint32_t)getgid()};
    pthread_mutex_init(&v->lock, NULL);
    pthread_cond_init(&v->changed, NULL);
    vfs_health_init(v);
    v->next_sid = 1;
    v->staging_lock_fd = -1;
    st_err e = ST_OK;
    v->store_url = strdup(opts->store_url ? opts->store_url : "");
    v->staging = strdup(opts->staging_dir);
    if (!v->store_url || !v->staging) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (opts->node) {
        if (!st_name_is_valid(opts->node, ST_NODE_MAX)) {
            e = st_seterr(ST_ERR_INVALID, "invalid node name '%.64s'", opts->node);
            goto fail;
        }
        snprintf(v->node, sizeof v->node, "%s", opts->node);
    } else {
        st_default_node_name(v->node);
    }
    if ((e = st_steprules_new(opts->step_pattern, &v->rules)))
        goto fail;
    /* First: nothing in staging is touched before the lock is held. */
    if ((e = vfs_staging_take(v)) || (e = vfs_spare_open(v)))
        goto fail;
    if (!v->opts.warmup_max_bytes)
        v->opts.warmup_max_bytes = vfs_staging_free_bytes(v) / 2;
    st_backend_opts bo = {.s3_endpoint = opts->s3_endpoint,
                          .s3_signature = opts->s3_signature,
                          .s3_region = opts->s3_region,
                          .s3_addressing = opts->s3_addressing,
                          .s3_ca_file = opts->s3_ca_file,
                          .observer = &v->health.observer};
#ifdef CKPT_TEST_HOOKS
    const char *fault = getenv("CKPT_FAULT"); /* test builds only: st_backend_fault.h */
    if (fault && *fault && !opts->backend)
        vfs_log(v, 1, "test hook: CKPT_FAULT=%.200s wraps the store", fault);
#else
    const char *fault = NULL; /* a test run against this build must not pass by accident */
    if (getenv("CKPT_FAULT"))
        vfs_log(v, 2, "CKPT_FAULT is set but IGNORED: built without -DCKPT_TEST_HOOKS=ON");
#endif
    if (opts->backend)
        v->store_backend = opts->backend; /* borrowed: see st_vfs_options */
    else if ((e = st_backend_open_opts(opts->store_url, &bo, &v->store_backend)))
        goto fail;
    v->retry_backend = opts->backend ? NULL : v->store_backend;
    if (!opts->backend && fault && *fault && (e = st_backend_fault_wrap(&v->store_backend, fault)))
        goto fail;
    /* inodes 0 (unused), 1 root; 2 to ST_VFS_LAST_CTL_INO are the virtual
     * control entries */
    /* Counted outermost: one request per call the mount makes, whatever
     * the retries and the injected faults did below it. */
    if ((e = st_backend_count_borrow(v->store_backend, &v->requests, &v->backend)))
        goto fail;
    /* inodes 0 (unused), 1 root; 2 to 5 are the virtual control entries */
    v->ninodes = 1;
    if (!(v->root = vfs_node_new(v, NULL, "", S_IFDIR | 0755))) {
        e = st_seterr(ST_ERR_NOMEM, "out of memory");
        goto fail;
    }
    v->root->nsubdirs = 1; /* .ckptfs, not among its kids */
    v->ninodes = ST_VFS_LAST_CTL_INO + 1;
    pthread_mutex_lock(&v->lock);
    e = vfs_journal_open(v);
    if (!e)
        e = recover(v);
    if (!e)
        e = vfs_journal_mark_boot(v);
    pthread_mutex_unlock(&v->lock);
    if (e)
        goto fail;
    if ((e = vfs_lease_open(v)) || (e = first_look(v)))
        goto fail;
    *out = v;
    return ST_OK;
fail:
    st_vfs_close(v);
    return e;
}

/* The background threads (the uploader: seal and PUTs; the refresher; gc)
 * run VFS_BACKGROUND_NICE steps nicer than the daemon, and the threads they
 * start (the ingest's upload workers) inherit it: a trainer's save, served by
 * libfuse's threads at the daemon's own priority, must not wait behind the
 * chunking, hashing and compression of earlier steps (docs/MOUNT.md,
 * "Background work yields to the writer"). On Linux the nice value is a
 * thread's own (setpriority of its tid). It only lowers the share of the
 * CPU the background gets while the writer runs: alone, it has all of it. */
#define VFS_BACKGROUND_NICE 5

typedef struct background_start {
    void *(*body)(void *);
    st_vfs *v;
    char name[16]; /* the thread's name (top -H, /proc/PID/task/TID/comm) */
} background_start;

static void *background_main(void *arg)
{
    background_start start = *(background_start *)arg;
    free(arg);
    (void)pthread_setname_np(pthread_self(), start.name);
    id_t tid = (id_t)gettid();
    errno = 0;
    int now = getpriority(PRIO_PROCESS, tid);
    /* Best effort: a thread that cannot be reniced still does its work. */
    if (errno == 0)
        (void)setpriority(PRIO_PROCESS, tid,
                          now + VFS_BACKGROUND_NICE > 19 ? 19 : now + VFS_BACKGROUND_NICE);
    return start.body(start.v);
}

static st_err start_thread(pthread_t *t, int *started, void *(*body)(void *), st_vfs *v,
                           const char *what)
{
    background_start *start = malloc(sizeof *start);
    if (!start)
        return st_seterr(ST_ERR_NOMEM, "cannot start the %s thread", what);
    start->body = body;
    start->v = v;
    snprintf(start->name, sizeof start->name, "ckpt-%s", what);
    if (pthread_create(t, NULL, background_main, start) != 0) {
        free(start);
        return st_seterr(ST_ERR_NOMEM, "cannot start the %s thread", what);
    }
    *started = 1;
    return ST_OK;
}

/* Tells every background thread to stop (they all watch v->stopping) and
 * joins this one. */
static void stop_thread(st_vfs *v, pthread_t t, int *started)
{
    if (!*started)
        return;
    pthread_mutex_lock(&v->lock);
    v->stopping = 1;
    pthread_cond_broadcast(&v->changed);
    pthread_mutex_unlock(&v->lock);
    pthread_join(t, NULL);
    *started = 0;
}

st_err st_vfs_start(st_vfs *v)
{
    vfs_staging_mark_pid(v);
    st_err e = start_thread(&v->uploader, &v->uploader_started, vfs_uploader_main, v, "uploader");
    if (!e)
        e = start_thread(&v->refresher, &v->refresher_started, vfs_refresher_main, v, "refresher");
    if (!e && v->opts.gc_enabled)
        e = start_thread(&v->gc, &v->gc_started, vfs_gc_main, v, "gc");
    return e;
}

void st_vfs_drain(st_vfs *v)
{
    pthread_mutex_lock(&v->lock);
    if (!v->draining)
        vfs_log(v, 0, "draining: the newest complete steps upload first (%zu queued)", v->nqueue);
    v->draining = 1;
    pthread_cond_broadcast(&v->changed);
    pthread_mutex_unlock(&v->lock);
}

void st_vfs_close(st_vfs *v)
{
    if (!v)
        return;
    v->gc_stop = 1; /* a GC run under way ends after its current batch */
    /* Handles the kernel never released: a SIGTERM ends the connection with
     * files open, and no close() of theirs can succeed any more. Released
     * here before R8 looks at the steps, so a file cut off mid-write holds
     * its step back now and after a restart (unacknowledged_release), and a
     * deferred sync of an acknowledged close still runs. No FUSE request
     * runs any more, and no other thread touches the list. */
    while (v->open_handles)
        st_vfs_release(v, v->open_handles);
    if (v->uploader_started) {
        /* Draining before R8 queues the steps it completes: the newest of
         * them goes first (docs/SHUTDOWN.md, "SIGTERM and unmount"). */
        st_vfs_drain(v);
        st_vfs_complete_all(v, NULL, 1);
        if (st_vfs_wait_idle(v, v->opts.drain_seconds) != ST_OK)
            vfs_log(v, 1, "unmounting with uploads pending; they resume at the next start");
    }
    /* Past the drain nothing waits for the store: requests in flight and
     * retry waits of every thread end within 100 ms (docs/MOUNT.md). */
    vfs_health_stop_all(v);
    vfs_fetch_stop_all(v); /* fetches and warm-up end after their runs in flight */
    stop_thread(v, v->gc, &v->gc_started);
    stop_thread(v, v->refresher, &v->refresher_started);
    stop_thread(v, v->uploader, &v->uploader_started);
    pthread_mutex_lock(&v->lock);
    vfs_journal_close(v);
    vfs_spare_close(v);
    vfs_kept_close(v);
    pthread_mutex_unlock(&v->lock);
    vfs_staging_let_go(v); /* last of staging: the journal is closed */
    for (uint64_t i = 0; i < v->ninodes && v->inodes; i++)
        if (v->inodes[i])
            vfs_node_free(v, v->inodes[i]);
    free(v->inodes);
    for (size_t i = 0; i < v->njobs; i++) {
        for (size_t k = 0; k < v->jobs[i].nsteps; k++)
            free(v->jobs[i].steps[k].commits);
        free(v->jobs[i].steps);
        for (size_t k = 0; k < v->jobs[i].ndels; k++)
            free(v->jobs[i].dels[k].path);
        free(v->jobs[i].dels);
    }
    free(v->jobs);
    free(v->queue);
    st_steprules_free(v->rules);
    st_backend_close(v->backend); /* the count wrapper only */
    if (!v->opts.backend)
        st_backend_close(v->store_backend);
    free(v->store_url);
    free(v->staging);
    pthread_cond_destroy(&v->changed);
    pthread_mutex_destroy(&v->lock);
    vfs_health_destroy(v);
    free(v);
}
