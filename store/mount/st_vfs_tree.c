/*
 * st_vfs_tree — the mount model's core data, below every other st_vfs
 * module: the tree of vnodes (create, link, unlink, free, walk, paths), the
 * jobs and their steps, the upload queue, which step a path names, the
 * deletion requests' lookup, logging, and the helpers of the status file.
 * Nothing here calls into another st_vfs module except the step rules
 * (st_steprules), so every module above may use it.
 *
 * Threads: every function is called with v->lock held (vfs_log needs no
 * lock); none does store I/O or blocks, except vfs_timedwait, which waits
 * on v->changed.
 */
#include "mount/st_vfs_impl.h"
#include "util/st_array.h"

#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <json-c/json.h>

#include "util/st_fsutil.h"

/* Copies msg into out with control bytes written as C escapes ("\\n",
 * "\\x01"): a file name holding a newline must not split a log line, nor
 * forge one. */
static void escape_controls(const char *msg, char *out, size_t cap)
{
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 5 < cap; p++) {
        if (*p >= 0x20 && *p != 0x7f) {
            out[o++] = (char)*p;
            continue;
        }
        out[o++] = '\\';
        switch (*p) {
        case '\n': out[o++] = 'n'; break;
        case '\r': out[o++] = 'r'; break;
        case '\t': out[o++] = 't'; break;
        default: o += (size_t)snprintf(out + o, cap - o, "x%02x", *p); break;
        }
    }
    out[o] = '\0';
}

void vfs_log(st_vfs *v, int level, const char *fmt, ...)
{
    if (!v->opts.log)
        return;
    char msg[1024], line[4 * sizeof msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    escape_controls(msg, line, sizeof line);
    v->opts.log(v->opts.log_arg, level, line);
}

void vfs_error_seen(st_vfs *v)
{
    v->errors++;
    v->last_error_ns = st_now_ns();
}

void vfs_set_error(st_vfs *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->last_error, sizeof v->last_error, fmt, ap);
    va_end(ap);
    vfs_error_seen(v);
}

vnode *vfs_node_new(st_vfs *v, vnode *parent, const char *name, uint32_t mode)
{
    size_t old_cap = v->inodes_cap;
    if (st_array_grow((void **)&v->inodes, &v->inodes_cap, v->ninodes + 1, sizeof *v->inodes))
        return NULL;
    /* slots below ninodes that were never used read as freed inodes */
    memset(v->inodes + old_cap, 0, (v->inodes_cap - old_cap) * sizeof *v->inodes);
    vnode *n = calloc(1, sizeof *n);
    if (!n || !(n->name = strdup(name))) {
        free(n);
        return NULL;
    }
    n->ino = v->ninodes++;
    v->inodes[n->ino] = n;
    n->mode = mode;
    n->uid = v->user.uid;
    n->gid = v->user.gid;
    n->mtime_ns = n->ctime_ns = st_now_ns();
    n->step = VFS_NO_STEP;
    n->rank = -1;
    if (parent && vfs_link(parent, n) != ST_OK) {
        v->inodes[n->ino] = NULL;
        free(n->name);
        free(n);
        return NULL;
    }
    return n;
}

/* st_array_lower_bound's order of dir->kids: by name. */
static int cmp_kid_name(const void *name, const void *kid)
{
    return strcmp(name, (*(const vnode *const *)kid)->name);
}

/* Index of name among dir's sorted children, or where it would go. */
static size_t kid_index(const vnode *dir, const char *name, int *found)
{
    return st_array_lower_bound(dir->kids, dir->nkids, sizeof *dir->kids, name, cmp_kid_name,
                                found);
}

vnode *vfs_child(const vnode *dir, const char *name)
{
    int found;
    size_t i = kid_index(dir, name, &found);
    return found ? dir->kids[i] : NULL;
}

vnode *vfs_node_at(const st_vfs *v, uint64_t ino)
{
    return ino < v->ninodes ? v->inodes[ino] : NULL;
}

/* dir's entries changed: its mtime and ctime are now, as on a local file
 * system (a trainer or a watcher that polls a job directory's mtime sees a
 * new checkpoint, including one that arrived from the store). */
static void dir_changed(vnode *dir)
{
    dir->mtime_ns = dir->ctime_ns = st_now_ns();
}

st_err vfs_link(vnode *dir, vnode *child)
{
    int found;
    size_t i = kid_index(dir, child->name, &found);
    if (found)
        return st_seterr(ST_ERR_EXISTS, "%s exists", child->name);
    if (st_array_grow((void **)&dir->kids, &dir->kids_cap, dir->nkids + 1, sizeof *dir->kids))
        return ST_ERR_NOMEM;
    memmove(dir->kids + i + 1, dir->kids + i, (dir->nkids - i) * sizeof *dir->kids);
    dir->kids[i] = child;
    dir->nkids++;
    dir->nsubdirs += S_ISDIR(child->mode) != 0;
    child->parent = dir;
    dir_changed(dir);
    return ST_OK;
}

void vfs_node_free(st_vfs *v, vnode *n)
{
    v->inodes[n->ino] = NULL;
    if (n->remote)
        free(n->remote->path);
    free(n->remote);
    free(n->kids);
    free(n->name);
    free(n);
}

int vfs_set_remote(vnode *n, const char *path, uint64_t step, uint32_t revision, const char *node)
{
    vremote *r = n->remote ? n->remote : calloc(1, sizeof *r);
    char *p = strdup(path);
    if (!r || !p) {
        free(p);
        if (!n->remote)
            free(r);
        return 0;
    }
    free(r->path);
    r->path = p;
    r->step = step;
    r->revision = revision;
    r->from_peers = 0; /* the caller says otherwise (merge_file) */
    snprintf(r->node, sizeof r->node, "%s", node);
    n->remote = r;
    return 1;
}

void vfs_maybe_free(st_vfs *v, vnode *n)
{
    if (!n->parent && n != v->root && n->nlookup == 0 && n->opens == 0 && !n->fetching)
        vfs_node_free(v, n);
}

void vfs_unlink_node(st_vfs *v, vnode *child)
{
    (void)v;
    vnode *dir = child->parent;
    if (!dir)
        return;
    int found;
    size_t i = kid_index(dir, child->name, &found);
    if (found && dir->kids[i] == child) {
        memmove(dir->kids + i, dir->kids + i + 1, (dir->nkids - i - 1) * sizeof *dir->kids);
        dir->nkids--;
        dir->nsubdirs -= S_ISDIR(child->mode) != 0;
        dir_changed(dir);
    }
    child->parent = NULL;
}

vnode *vfs_job_dir(const vnode *n)
{
    while (n && n->parent && n->parent->parent)
        n = n->parent;
    return n && n->parent ? (vnode *)n : NULL;
}

char *vfs_job_path(const vnode *n, char *buf, size_t cap)
{
    const vnode *chain[ST_MANIFEST_MAX_PATH / 2];
    size_t depth = 0;
    for (const vnode *p = n; p && p->parent && p->parent->parent; p = p->parent) {
        if (depth == sizeof chain / sizeof chain[0])
            return NULL;
        chain[depth++] = p;
    }
    size_t len = 0;
    buf[0] = '\0';
    while (depth--) {
        size_t nl = strlen(chain[depth]->name);
        if (len + nl + 2 > cap)
            return NULL;
        if (len)
            buf[len++] = '/';
        memcpy(buf + len, chain[depth]->name, nl + 1);
        len += nl;
    }
    return buf;
}

vnode *vfs_walk(st_vfs *v, vnode *jobdir, const char *path, int create, const char **base)
{
    vnode *dir = jobdir;
    const char *p = path;
    for (;;) {
        const char *slash = strchr(p, '/');
        if (!slash) {
            *base = p;
            return dir;
        }
        char comp[NAME_MAX + 1];
        size_t len = (size_t)(slash - p);
        if (len == 0 || len > NAME_MAX)
            return NULL;
        memcpy(comp, p, len);
        comp[len] = '\0';
        vnode *next = vfs_child(dir, comp);
        if (!next) {
            if (!create || !(next = vfs_node_new(v, dir, comp, S_IFDIR | 0755)))
                return NULL;
        } else if (!S_ISDIR(next->mode)) {
            return NULL;
        }
        dir = next;
        p = slash + 1;
    }
}

void vfs_staging_path(const st_vfs *v, uint64_t sid, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/data/%" PRIu64, v->staging, sid);
}

vjob *vfs_job(st_vfs *v, const char *name, int create)
{
    for (size_t i = 0; i < v->njobs; i++)
        if (!strcmp(v->jobs[i].name, name))
            return &v->jobs[i];
    if (!create)
        return NULL;
    if (st_array_grow((void **)&v->jobs, &v->jobs_cap, v->njobs + 1, sizeof *v->jobs))
        return NULL;
    vjob *j = &v->jobs[v->njobs++];
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", name);
    return j;
}

st_vfs_step_state vfs_step_state(const vstep *s)
{
    if (s->uploading)
        return ST_VFS_STEP_UPLOADING;
    if (s->queued)
        return ST_VFS_STEP_QUEUED;
    if (s->durable_ns && !s->writers)
        return ST_VFS_STEP_DURABLE;
    if (s->complete)
        return ST_VFS_STEP_COMPLETE;
    return ST_VFS_STEP_WRITING;
}

const char *st_vfs_step_state_name(st_vfs_step_state s)
{
    static const char *const names[ST_VFS_STEP_STATES] = {"writing", "complete", "queued",
                                                          "uploading", "durable"};
    return (unsigned)s < ST_VFS_STEP_STATES ? names[s] : "?";
}

uint64_t vfs_pending_bytes(const st_vfs *v)
{
    uint64_t total = 0;
    for (uint64_t i = 0; i < v->ninodes; i++) {
        const vnode *n = v->inodes[i];
        if (n && n->parent && S_ISREG(n->mode) && n->sid && n->state != VFILE_DURABLE)
            total += n->size;
    }
    return total;
}

vstep *vfs_step(vjob *j, uint64_t step, int create)
{
    size_t lo = 0, hi = j->nsteps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (j->steps[mid].step == step)
            return &j->steps[mid];
        if (j->steps[mid].step < step)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (!create)
        return NULL;
    if (st_array_grow((void **)&j->steps, &j->steps_cap, j->nsteps + 1, sizeof *j->steps))
        return NULL;
    memmove(j->steps + lo + 1, j->steps + lo, (j->nsteps - lo) * sizeof *j->steps);
    j->nsteps++;
    memset(&j->steps[lo], 0, sizeof j->steps[lo]);
    j->steps[lo].step = step;
    return &j->steps[lo];
}

void vfs_enqueue(st_vfs *v, const char *job, uint64_t step)
{
    vjob *j = vfs_job(v, job, 0);
    vstep *s = j ? vfs_step(j, step, 0) : NULL;
    if (!s || s->queued || vfs_deletion_find(j, step))
        return; /* a step removed through the mount is never published again */
    if (st_array_grow((void **)&v->queue, &v->queue_cap, v->nqueue + 1, sizeof *v->queue)) {
        vfs_log(v, 2, "out of memory queueing step %" PRIu64 " of %s", step, job);
        return;
    }
    upload_item *it = &v->queue[v->nqueue++];
    snprintf(it->job, sizeof it->job, "%s", job);
    it->step = step;
    s->queued = 1;
    s->dirty = 0; /* the upload takes every closed change made so far */
    pthread_cond_broadcast(&v->changed);
}

uint64_t vfs_newest_step(const vjob *j)
{
    for (size_t i = j->nsteps; i-- > 0;)
        if (!vfs_deletion_find(j, j->steps[i].step))
            return j->steps[i].step;
    return VFS_NO_STEP;
}

void vfs_timedwait(st_vfs *v, int64_t due)
{
    if (due == INT64_MAX) {
        pthread_cond_wait(&v->changed, &v->lock);
        return;
    }
    int64_t ns = due - st_mono_ns();
    if (ns <= 0)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec += ns % 1000000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&v->changed, &v->lock, &ts);
}

vnode *vfs_failed_file(st_vfs *v, const char *job, uint64_t step)
{
    if (!v->nfailed)
        return NULL; /* the common case costs nothing */
    vnode *jd = vfs_child(v->root, job);
    for (uint64_t i = 0; jd && i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        if (n && n->write_failed && n->parent && n->step == step && vfs_job_dir(n) == jd)
            return n;
    }
    return NULL;
}

void vfs_set_write_failed(st_vfs *v, vnode *n, st_err why)
{
    if (why && !n->parent)
        return; /* unlinked while open: nothing will publish it */
    if (why && !n->write_failed)
        v->nfailed++;
    else if (!why && n->write_failed)
        v->nfailed--;
    n->write_failed = why;
}

/* The job directory of n if n is a file in the tree with a failed write,
 * with its path in the job; else NULL. */
static vnode *failed_file_at(vnode *n, char *path, size_t cap)
{
    vnode *jd = n && n->write_failed && n->parent ? vfs_job_dir(n) : NULL;
    return jd && vfs_job_path(n, path, cap) ? jd : NULL;
}

void vfs_note_failed_files(st_vfs *v)
{
    for (uint64_t i = 0; v->nfailed && i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        char path[ST_MANIFEST_MAX_PATH + 1];
        vnode *jd = failed_file_at(n, path, sizeof path);
        if (!jd)
            continue;
        char step[32] = "no step yet";
        if (n->step != VFS_NO_STEP)
            snprintf(step, sizeof step, "step %" PRIu64, n->step);
        char why[sizeof v->last_error];
        if (n->write_failed == ST_ERR_CORRUPT)
            snprintf(why, sizeof why,
                     "%s/%.300s" VFS_TORN_NOTE "; its reads fail and %s waits until the file is "
                     "rewritten or removed",
                     jd->name, path, step);
        else
            snprintf(why, sizeof why,
                     "%s/%.300s" VFS_FAILED_NOTE "%s); %s waits until the file is rewritten or "
                     "removed",
                     jd->name, path, st_strerror(n->write_failed), step);
        if (strcmp(why, v->last_error)) /* said again after each upload: one error */
            vfs_set_error(v, "%s", why);
        return;
    }
}

int vfs_failed_status(st_vfs *v, json_object *root)
{
    json_object *list = json_object_new_array();
    int bad = 0;
    uint64_t count = 0;
    for (uint64_t i = 0; v->nfailed && i < v->ninodes; i++) {
        vnode *n = v->inodes[i];
        char path[ST_MANIFEST_MAX_PATH + 1];
        vnode *jd = failed_file_at(n, path, sizeof path);
        if (!jd || count++ >= VFS_FAILED_LISTED)
            continue;
        json_object *o = json_object_new_object();
        bad |= vfs_json_add(o, "job", json_object_new_string(jd->name));
        bad |= vfs_json_add(o, "path", json_object_new_string(path));
        if (n->step != VFS_NO_STEP)
            bad |= vfs_json_add(o, "step", json_object_new_uint64(n->step));
        bad |= vfs_json_add(o, "torn", json_object_new_boolean(n->write_failed == ST_ERR_CORRUPT));
        bad |= vfs_json_add(o, "error", json_object_new_string(st_strerror(n->write_failed)));
        bad |= vfs_json_add(list, NULL, o);
    }
    bad |= vfs_json_add(root, "failed_files", json_object_new_uint64(count));
    return bad | vfs_json_add(root, "failed", list);
}

vdeletion *vfs_deletion_find(const vjob *j, uint64_t step)
{
    for (size_t i = 0; j && i < j->ndels; i++)
        if (j->dels[i].step == step)
            return &j->dels[i];
    return NULL;
}

/* The step n's own path names (a file by its path, a directory as if it held
 * a file), or VFS_NO_STEP; *last is set when n is exactly the step's
 * directory or single file. path: n's job path. */
uint64_t vfs_named_step(const st_vfs *v, const vnode *n, const char *path, int *last)
{
    st_step_match m;
    *last = 0;
    if (S_ISDIR(n->mode)) {
        char probe[ST_MANIFEST_MAX_PATH + 3];
        snprintf(probe, sizeof probe, "%s/x", path);
        st_steprules_match(v->rules, probe, &m);
        *last = m.matched && !m.single_file && m.prefix_len == strlen(path);
    } else {
        st_steprules_match(v->rules, path, &m);
        *last = m.matched && m.single_file;
    }
    return m.matched ? m.step : VFS_NO_STEP;
}

void vfs_publish_quiet_steps(st_vfs *v)
{
    int64_t now = st_mono_ns();
    pthread_mutex_lock(&v->lock);
    v->quiet_looks++; /* a test waits on passes, not on seconds */
    for (size_t i = 0; i < v->njobs; i++)
        for (size_t k = 0; k < v->jobs[i].nsteps; k++) {
            vstep *s = &v->jobs[i].steps[k];
            if (s->dirty && !s->writers && now - s->last_activity_ns >= EAGER_QUIET_NS) {
                s->dirty = 0;
                vfs_enqueue(v, v->jobs[i].name, s->step);
            }
        }
    pthread_mutex_unlock(&v->lock);
}

/* ---- status-file helpers (json-c) ---- */

int vfs_json_add(json_object *obj, const char *key, json_object *val)
{
    int rc = !obj || !val ? -1
             : key        ? json_object_object_add(obj, key, val)
                          : json_object_array_add(obj, val);
    if (rc)
        json_object_put(val);
    return rc ? -1 : 0;
}

json_object *vfs_json_fixed(double v, int decimals)
{
    char text[64];
    snprintf(text, sizeof text, "%.*f", decimals, v);
    return json_object_new_double_s(v, text);
}

double vfs_eta_durable_seconds(const st_vfs *v, uint64_t pending)
{
    if (!pending)
        return 0.0;
    if (!v->uploaded_bytes || v->upload_ns <= 0)
        return -1.0;
    double rate = (double)v->uploaded_bytes / ((double)v->upload_ns / 1e9);
    return (double)pending / rate;
}
