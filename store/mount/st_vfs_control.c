/*
 * st_vfs_control — the mount's control entries in .ckptfs/: the status file
 * (one JSON line, docs/MOUNT.md), the metrics file, and the write-only
 * commit, drain and warmup files (docs/STEPS.md, docs/SHUTDOWN.md,
 * docs/WARMUP.md): their attributes, their listing, their opens, reads and
 * writes.
 *
 * Used by the namespace operations and the opens for the control inodes;
 * calls down only: the tree and the status of the modules below it (the
 * store's health, deletions, GC, warm-up), a rank's commit (the step rules),
 * warm-up requests and the drain.
 */
#include "mount/st_vfs_handle.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "util/st_fsutil.h"

#define STATUS_NAME  "status"
#define COMMIT_NAME  "commit"
#define DRAIN_NAME   "drain"
#define METRICS_NAME "metrics"
#define WARMUP_NAME  "warmup"

/* The control entries are the mount's user's. Read-only ones are 0400 and
 * write-only ones 0200 unless control_access is "all" (0444, 0222): the
 * status and the metrics name every job and step of the mount, and a
 * commit completes any job's step (docs/MOUNT.md, "Other users on the
 * node"). */
void vfs_ctl_attr(const st_vfs *v, uint64_t ino, st_vfs_attr *a)
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

st_err vfs_ctl_lookup(const st_vfs *v, const char *name, st_vfs_attr *out)
{
    if (!strcmp(name, STATUS_NAME))
        vfs_ctl_attr(v, ST_VFS_STATUS_INO, out);
    else if (!strcmp(name, COMMIT_NAME))
        vfs_ctl_attr(v, ST_VFS_COMMIT_INO, out);
    else if (!strcmp(name, DRAIN_NAME))
        vfs_ctl_attr(v, ST_VFS_DRAIN_INO, out);
    else if (!strcmp(name, WARMUP_NAME))
        vfs_ctl_attr(v, ST_VFS_WARMUP_INO, out);
    else if (!strcmp(name, METRICS_NAME) && v->opts.metrics)
        vfs_ctl_attr(v, ST_VFS_METRICS_INO, out);
    else
        return ST_ERR_NOT_FOUND;
    return ST_OK;
}

st_err vfs_ctl_readdir(const st_vfs *v, st_vfs_dirent **ents, size_t *n)
{
    st_vfs_dirent *out = calloc(7, sizeof *out);
    if (!out)
        return ST_ERR_NOMEM;
    out[0] = (st_vfs_dirent){ST_VFS_CTL_DIR_INO, S_IFDIR, strdup(".")};
    out[1] = (st_vfs_dirent){ST_VFS_ROOT_INO, S_IFDIR, strdup("..")};
    out[2] = (st_vfs_dirent){ST_VFS_STATUS_INO, S_IFREG, strdup(STATUS_NAME)};
    out[3] = (st_vfs_dirent){ST_VFS_COMMIT_INO, S_IFREG, strdup(COMMIT_NAME)};
    out[4] = (st_vfs_dirent){ST_VFS_DRAIN_INO, S_IFREG, strdup(DRAIN_NAME)};
    out[5] = (st_vfs_dirent){ST_VFS_WARMUP_INO, S_IFREG, strdup(WARMUP_NAME)};
    size_t count = 6;
    if (v->opts.metrics)
        out[count++] = (st_vfs_dirent){ST_VFS_METRICS_INO, S_IFREG, strdup(METRICS_NAME)};
    *ents = out;
    *n = count;
    return ST_OK;
}

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

/* "peers" (docs/PEERS.md): present with a peer option. As vfs_json_add. */
static int peers_status(st_vfs *v, json_object *root)
{
    st_vfs_peer_stats p;
    vfs_peers_stats(v, &p);
    if (!p.enabled)
        return 0;
    json_object *o = json_object_new_object();
    const struct {
        const char *key;
        uint64_t value;
    } fields[] = {{"replicas", p.replicas},
                  {"parts_replicated", p.parts_replicated},
                  {"parts_unreplicated", p.parts_unreplicated},
                  {"bytes_sent", p.bytes_sent},
                  {"spool_bytes", p.spool_bytes},
                  {"takeovers", p.takeovers},
                  {"peer_cache_bytes", p.cache_bytes},
                  {"peer_cache_cap", p.cache_cap},
                  {"replicas_held", p.replicas_held},
                  {"evictions", p.evictions},
                  {"refusals_full", p.refusals_full},
                  {"auth_refusals", p.auth_refusals},
                  {"corrupt_refused", p.corrupt_refused},
                  {"packs_read", p.packs_read},
                  {"bytes_read", p.bytes_read},
                  {"store_fallbacks", p.store_fallbacks},
                  {"peer_corrupt", p.peer_corrupt}};
    int bad = !o;
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        bad |= vfs_json_add(o, fields[i].key, json_object_new_uint64(fields[i].value));
    return bad | vfs_json_add(root, "peers", o);
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
    bad |= vfs_json_add(root, "uploads", json_object_new_uint64(v->uploads));
    bad |= vfs_json_add(root, "upload_failures", json_object_new_uint64(v->upload_failures));
    bad |= vfs_json_add(root, "fence_waits", json_object_new_uint64(v->fence_waits));
    bad |= vfs_json_add(root, "fence_looks", json_object_new_uint64(v->fence_looks));
    bad |= vfs_json_add(root, "quiet_looks", json_object_new_uint64(v->quiet_looks));
    bad |= vfs_json_add(root, "refreshes", json_object_new_uint64(v->refreshes));
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
            bad |=
                vfs_json_add(o, "held_by_failed_file", json_object_new_boolean(s->blocked_upload));
            bad |= vfs_json_add(steps, NULL, o);
        }
    }
    bad |= vfs_json_add(root, "steps", steps);
    bad |= vfs_deletions_status(v, root);
    bad |= vfs_gc_status(v, root);
    bad |= vfs_warmup_status(v, root);
    bad |= peers_status(v, root);
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

st_err vfs_ctl_open(st_vfs *v, uint64_t ino, int flags, st_vfs_handle **h)
{
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
        pthread_mutex_lock(&v->lock);
        vfs_handle_link(v, sh);
        pthread_mutex_unlock(&v->lock);
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
        pthread_mutex_lock(&v->lock);
        vfs_handle_link(v, ch);
        pthread_mutex_unlock(&v->lock);
        *h = ch;
        return ST_OK;
    }
    if (ino == ST_VFS_CTL_DIR_INO)
        return ST_ERR_IS_DIR;
    return ST_ERR_NOT_FOUND; /* the metrics file, when the mount has none */
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
        e = vfs_record_commit(v, lines[i].job, lines[i].step, lines[i].rank, lines[i].world);
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
