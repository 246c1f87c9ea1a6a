/*
 * st_vfs_impl — the internals shared by the st_vfs modules:
 *   st_vfs.c          namespace, handles, step tracking, status
 *   st_vfs_journal.c  the SQLite journal of the namespace
 *   st_vfs_upload.c   the uploader thread (seal → ingest → publish)
 *   st_vfs_remote.c   the remote view (durable steps from the store) and fetch
 *
 * Locking: v->lock guards every vnode, vjob and vstep field and the journal
 * connection; it is never held across store I/O or bulk file I/O. The
 * uploader and the refresher take it only to snapshot and to merge results.
 *
 * A file's life (vnode.state), drawn once:
 *
 *   state        meaning                                   next
 *   WRITING      created or truncated, not closed since    CLOSED on last close
 *   CLOSED       content acknowledged (close returned),     DURABLE when its step's
 *                in staging and journal, not yet durable    upload took this version
 *   DURABLE      this version is in the store              CLOSED on the next change
 *
 * A step's life (vstep): open → complete (a rule of docs/STEPS.md fired) →
 * queued → uploading → durable (all its local files DURABLE); any change to
 * a file of a complete step queues it again (a new manifest revision).
 */
#ifndef ST_VFS_IMPL_H
#define ST_VFS_IMPL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "st_backend.h"
#include "st_manifest.h"
#include "st_state.h"
#include "st_step.h"
#include "st_steps.h"
#include "st_vfs.h"

#define VFS_JOB_MAX_STEPS_WRITERS 8
#define VFS_NO_STEP               UINT64_MAX

typedef enum vfile_state { VFILE_WRITING = 0, VFILE_CLOSED = 1, VFILE_DURABLE = 2 } vfile_state;

/* Where a file's content lives in the store (a committed manifest entry). */
typedef struct vremote {
    uint64_t step;
    char node[ST_NODE_MAX + 1];
    uint32_t revision;
    char *path; /* the path inside the job in that manifest */
} vremote;

typedef struct vnode vnode;
struct vnode {
    uint64_t ino;
    vnode *parent; /* NULL when unlinked (or the root) */
    char *name;
    uint32_t mode;
    uint64_t size;
    int64_t mtime_ns, ctime_ns;
    uint64_t nlookup; /* kernel references */

    /* directories: children sorted by name */
    vnode **kids;
    size_t nkids, kids_cap;

    /* files */
    uint64_t sid;             /* staging file STAGING/data/<sid>; 0: none */
    int writers;              /* open handles with write access */
    int opens;                /* all open handles */
    uint64_t version;         /* bumped by every change of content or path */
    uint64_t durable_version; /* the version that is in the store, 0: none */
    vfile_state state;
    int from_remote; /* content fetched from the store, unchanged since */
    uint64_t step;   /* the step the file belongs to, VFS_NO_STEP: none yet */
    int32_t rank;    /* RANK of the process that created it, -1: unknown */
    uint32_t world;  /* its WORLD_SIZE, 0: unknown */
    vremote *remote; /* where its durable content lives, NULL: nowhere */
    int fetching;    /* a fetch of the remote content is under way */
};

typedef struct vstep {
    uint64_t step;
    int complete; /* a completion rule fired */
    int queued;   /* waiting in the upload queue */
    int uploading;
    int writers;       /* open writable handles on files of this step */
    uint32_t revision; /* last manifest revision this node published */
    int remote_loaded; /* the store's durable version was merged into the view */
    int64_t durable_ns;
    pid_t writer_pids[VFS_JOB_MAX_STEPS_WRITERS];
    int nwriter_pids;
    int64_t last_activity_ns; /* last writer open or close (eager publishing) */
    int dirty;                /* closed changes not yet queued (eager publishing) */
    int upload_waits;         /* completed while writers were open: queue at the last close */
    st_rank_commit *commits;  /* explicit per-rank commits made on this node */
    size_t ncommits;
} vstep;

typedef struct vjob {
    char name[ST_JOB_MAX + 1];
    vstep *steps; /* sorted by step */
    size_t nsteps, steps_cap;
} vjob;

typedef struct upload_item {
    char job[ST_JOB_MAX + 1];
    uint64_t step;
} upload_item;

struct st_vfs {
    st_vfs_options opts;
    char *store_url;
    char *staging;
    char node[ST_NODE_MAX + 1];
    st_backend *backend;
    st_step_rules *rules;

    pthread_mutex_t lock;
    pthread_cond_t changed; /* fetch finished, upload queue changed, idle */

    /* namespace (lock) */
    vnode **inodes; /* indexed by ino; NULL once freed */
    uint64_t ninodes, inodes_cap;
    vnode *root;
    void *journal; /* sqlite3*, used under lock */
    uint64_t next_sid;
    uint64_t staged_bytes; /* bytes of staging files */
    vjob *jobs;
    size_t njobs, jobs_cap;

    /* upload queue (lock) */
    upload_item *queue;
    size_t nqueue, queue_cap;
    int stopping;
    int uploader_busy;
    char last_error[512];
    uint64_t uploaded_bytes; /* logical bytes made durable */
    uint64_t stored_bytes;   /* pack bytes PUT */
    int64_t upload_ns;       /* time spent uploading */
    pthread_t uploader;
    int uploader_started;
    pthread_t refresher;
    int refresher_started;
};

/* st_vfs.c */
void vfs_log(st_vfs *v, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
vnode *vfs_node_new(st_vfs *v, vnode *parent, const char *name, uint32_t mode);
vnode *vfs_child(const vnode *dir, const char *name);
st_err vfs_link(vnode *dir, vnode *child);
void vfs_unlink_node(st_vfs *v, vnode *child);
/* The job a node belongs to (the root's child above it), or NULL. */
vnode *vfs_job_dir(const vnode *n);
/* Path of n relative to its job directory into buf; returns buf or NULL. */
char *vfs_job_path(const vnode *n, char *buf, size_t cap);
/* Walks/creates directories for a job-relative path; returns the parent dir
 * of the final component and sets *base to it. create: mkdir missing dirs. */
vnode *vfs_walk(st_vfs *v, vnode *jobdir, const char *path, int create, const char **base);
vjob *vfs_job(st_vfs *v, const char *name, int create);
vstep *vfs_step(vjob *j, uint64_t step, int create);
void vfs_staging_path(const st_vfs *v, uint64_t sid, char *buf, size_t cap);
void vfs_enqueue(st_vfs *v, const char *job, uint64_t step);
/* Drops local copies of durable, unopened files until `need` more bytes fit
 * under the staging cap (they become remote again). */
void vfs_evict_durable(st_vfs *v, uint64_t need);

/* Queues the steps that are quiet (no writer for EAGER_QUIET_NS) and have
 * closed changes, complete or not: a rank's part must become durable even
 * when the marker completing the step lives on another node. */
#define EAGER_QUIET_NS (2ll * 1000000000)
void vfs_publish_quiet_steps(st_vfs *v);

/* st_vfs_journal.c — every call under v->lock */
st_err vfs_journal_open(st_vfs *v);
void vfs_journal_close(st_vfs *v);
st_err vfs_journal_recover(st_vfs *v);
st_err vfs_journal_put_file(st_vfs *v, vnode *n);
st_err vfs_journal_put_dir(st_vfs *v, vnode *n);
st_err vfs_journal_delete(st_vfs *v, const char *job, const char *path);
st_err vfs_journal_tombstone(st_vfs *v, const char *job, const char *path);
int vfs_journal_is_tombstone(st_vfs *v, const char *job, const char *path);
st_err vfs_journal_rename(st_vfs *v, const char *job, const char *from, const char *to);
st_err vfs_journal_put_step(st_vfs *v, const char *job, const vstep *s);

/* st_vfs_upload.c: the uploader thread's body (started by st_vfs_start) */
void *vfs_uploader_main(void *arg);

/* st_vfs_remote.c */
st_err vfs_remote_refresh(st_vfs *v);
/* The refresher thread's body (started by st_vfs_start). */
void *vfs_refresher_main(void *arg);
/* Makes n's content local (fetch and verify); called and returns with lock held. */
st_err vfs_fetch(st_vfs *v, vnode *n);

#endif
