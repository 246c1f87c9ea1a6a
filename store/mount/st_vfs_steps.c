/*
 * st_vfs_steps — when a step of the mount is complete: the numbered rules of
 * docs/STEPS.md, cited below as (R1)...(R8), applied as files open for
 * writing, settle after a close or a rename, as a rank commits through
 * .ckptfs/commit, and at unmount. A complete step is queued for upload once
 * no file of it is open for writing; a step with a file whose write failed
 * waits until that file is rewritten or removed.
 *
 * Calls down only: the tree (jobs, steps, the queue), the step rules, the
 * journal and staging (a closed marker's content, a file's end). Every call
 * under v->lock, except st_vfs_complete_all, which takes it.
 */
#include "mount/st_vfs_impl.h"
#include "util/st_array.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/st_fmtcheck.h"
#include "util/st_fsutil.h"

/* A completion rule fired for step s: remember it, and upload once no file
 * of the step is open for writing. */
void vfs_step_complete(st_vfs *v, vjob *j, vstep *s)
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
uint64_t vfs_step_of_path(const st_vfs *v, const char *path, int *single_file)
{
    st_step_match m;
    st_steprules_match(v->rules, path, &m);
    if (single_file)
        *single_file = m.matched && m.single_file;
    return m.matched ? m.step : VFS_NO_STEP;
}

/* A writable handle opens on n (in job j), by pid. */
void vfs_step_writer_open(st_vfs *v, vjob *j, vnode *n, pid_t pid)
{
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
            vfs_step_complete(v, j, old);
        else
            old->moved_on = 1; /* completes at the last close of a file of it */
    }
}

/* After a file of job j stopped being a reason to wait (closed, rewritten,
 * removed): the steps whose completion or upload waited for a file with a
 * failed write go on once no such file is left and nothing is open. */
void vfs_retry_blocked_steps(st_vfs *v, vjob *j)
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
            vfs_step_complete(v, j, s);
        }
    }
    if (!v->nfailed &&
        (strstr(v->last_error, VFS_FAILED_NOTE) || strstr(v->last_error, VFS_TORN_NOTE)))
        v->last_error[0] = '\0';
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
void vfs_step_file_settled(st_vfs *v, vjob *j, vnode *n, int modified)
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
                vfs_step_complete(v, j, s);
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
    vfs_step_of_path(v, path, &single_file);
    if (single_file && !file_whole(v, n)) {
        /* A writer killed in the middle of torch.save closes its file too. */
        vfs_log(v, 1, "%s/%s looks cut short; step %" PRIu64 " stays incomplete", j->name, path,
                s->step);
        return;
    }
    if (single_file && s->writers)
        s->moved_on = 1; /* (R3) complete once the other file of the step closes */
    if (mk == ST_MARKER_IN_STEP || (single_file && s->writers == 0))
        vfs_step_complete(v, j, s); /* (R1 markers, R3 single-file steps) */
    else if (s->complete && modified && s->writers == 0)
        vfs_enqueue(v, j->name, s->step); /* (R5) a change after completion */
}

/* Records an explicit commit of (job, step) by rank (lock held). */
st_err vfs_record_commit(st_vfs *v, const char *job, uint64_t step, uint32_t rank, uint32_t world)
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
            vfs_step_complete(v, j, s);
        }
    }
    pthread_mutex_unlock(&v->lock);
}
