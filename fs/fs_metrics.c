/*
 * fs_metrics — Prometheus text of the mount's figures. See the header;
 * docs/METRICS.md is the list of metrics and what each one means.
 *
 * The text exposition format 0.0.4 (prometheus.io/docs/instrumenting/
 * exposition_formats): per metric a "# HELP name text" line, a "# TYPE name
 * counter|gauge" line, then its samples "name{label="value",...} number".
 * In a label value a backslash, a double quote and a newline are written
 * \\, \" and \n; nothing else needs escaping, so a job name with a quote or
 * a newline stays one sample on one line.
 */
#define _GNU_SOURCE /* open_memstream */
#include "fs_metrics.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Writes value as a label value, escaped, between its quotes. */
static void put_label_value(FILE *out, const char *value)
{
    putc('"', out);
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else
            putc(*p, out);
    }
    putc('"', out);
}

/* The HELP and TYPE lines of a metric (help is ours: no escaping needed). */
static void put_family(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One metric with a single unlabelled sample. */
static void put_u64(FILE *out, const char *name, const char *type, const char *help, uint64_t value)
{
    put_family(out, name, type, help);
    fprintf(out, "%s %" PRIu64 "\n", name, value);
}

/* A run of unlabelled samples: one table instead of a run of calls. */
typedef struct {
    const char *name, *type, *help;
    uint64_t value;
} u64_metric;

static void put_u64s(FILE *out, const u64_metric *m, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_u64(out, m[i].name, m[i].type, m[i].help, m[i].value);
}

static void put_double(FILE *out, const char *name, const char *type, const char *help,
                       double value)
{
    put_family(out, name, type, help);
    fprintf(out, "%s %.6f\n", name, value); /* %g would round a unix time to 10 s */
}

/* The peer tier (docs/PEERS.md), with a peer option only. */
static void put_peers(FILE *out, const st_vfs_peer_stats *p)
{
    const u64_metric m[] = {
        {"ckptfs_replicated_replicas", "gauge", "Peers each part must reach (--replicas).",
         p->replicas},
        {"ckptfs_replicated_parts_total", "counter",
         "This node's parts replicated on peers before the store had them.", p->parts_replicated},
        {"ckptfs_replicated_failed_parts_total", "counter",
         "This node's parts fewer peers than --replicas took (durable later, not replicated).",
         p->parts_unreplicated},
        {"ckptfs_replicated_sent_bytes_total", "counter", "Pack bytes sent to peers.",
         p->bytes_sent},
        {"ckptfs_replicated_spool_bytes", "gauge",
         "Bytes of spooled packs on peers or on their way, not yet in the store.", p->spool_bytes},
        {"ckptfs_replicated_takeovers_total", "counter",
         "Other nodes' replicated parts this node made durable after their writer was lost.",
         p->takeovers},
        {"ckptfs_replicated_cache_bytes", "gauge", "Bytes of other nodes' replicas kept here.",
         p->cache_bytes},
        {"ckptfs_replicated_cache_cap_bytes", "gauge", "The cap on them (--peer-cache-cap).",
         p->cache_cap},
        {"ckptfs_replicated_cache_replicas", "gauge", "Other nodes' replicas kept here.",
         p->replicas_held},
        {"ckptfs_replicated_cache_evictions_total", "counter",
         "Replicas evicted from the cache (durable ones first).", p->evictions},
        {"ckptfs_replicated_cache_refusals_total", "counter",
         "Packs or replicas refused because the cache was full.", p->refusals_full},
        {"ckptfs_replicated_auth_refusals_total", "counter",
         "Requests refused for a wrong cluster secret, a replay or a stale session.",
         p->auth_refusals},
        {"ckptfs_replicated_corrupt_refused_total", "counter",
         "Packs received or held whose bytes failed their id (dropped, never served).",
         p->corrupt_refused},
        {"ckptfs_replicated_read_bytes_total", "counter",
         "Pack bytes of replicated steps read from peers.", p->bytes_read},
        {"ckptfs_replicated_store_fallbacks_total", "counter",
         "Packs a peer could not give, read from the store instead.", p->store_fallbacks},
        {"ckptfs_replicated_peer_corrupt_total", "counter",
         "Packs a peer gave whose bytes failed their id (that peer not asked again).",
         p->peer_corrupt},
    };
    put_u64s(out, m, sizeof m / sizeof m[0]);
}

static void put_requests(FILE *out, const st_vfs_stats *s)
{
    static const char name[] = "ckptfs_store_requests_total";
    put_family(out, name, "counter",
               "Requests to the object store by kind and result, each counted once "
               "however often it was retried.");
    for (int k = 0; k < ST_VFS_REQ_KINDS; k++)
        for (int r = 0; r < ST_VFS_REQ_RESULTS; r++)
            fprintf(out, "%s{kind=\"%s\",result=\"%s\"} %" PRIu64 "\n", name,
                    st_vfs_request_kind_name(k), st_vfs_request_result_name(r), s->requests[k][r]);
}

static void put_steps(FILE *out, const st_vfs_stats *s)
{
    static const char name[] = "ckptfs_steps";
    put_family(out, name, "gauge", "Steps this mount tracks, by job and state.");
    for (size_t i = 0; i < s->njobs; i++)
        for (int st = 0; st < ST_VFS_STEP_STATES; st++) {
            fprintf(out, "%s{job=", name);
            put_label_value(out, s->jobs[i].name);
            fprintf(out, ",state=\"%s\"} %" PRIu64 "\n",
                    st_vfs_step_state_name((st_vfs_step_state)st), s->jobs[i].steps[st]);
        }
}

static void put_all(FILE *out, const st_vfs_stats *s, const char *version)
{
    put_family(out, "ckptfs_build_info", "gauge", "Always 1; the version is in its label.");
    fputs("ckptfs_build_info{version=", out);
    put_label_value(out, version);
    fputs("} 1\n", out);
    const u64_metric staging[] = {
        {"ckptfs_pending_bytes", "gauge", "Bytes of local files not yet durable.",
         s->pending_bytes},
        {"ckptfs_staged_bytes", "gauge",
         "Bytes of staging files: pending ones and cached durable ones.", s->staged_bytes},
        {"ckptfs_staging_cap_bytes", "gauge", "The staging cap; 0: no cap.", s->staging_cap},
        {"ckptfs_staging_spare_bytes", "gauge",
         "Bytes of recycled staging files kept for new files to write over.", s->spare_bytes},
        {"ckptfs_staging_spare_reused_bytes_total", "counter",
         "Bytes of recycled staging files that new files took.", s->spare_reused_bytes},
        {"ckptfs_staging_spare_durable_files_total", "counter",
         "Durable files of older steps whose staging files new namesakes took.",
         s->spare_durable_files},
        {"ckptfs_unsynced_files", "gauge",
         "Closed files whose bytes are not on the staging disk yet (--close-sync background).",
         s->unsynced_files},
        {"ckptfs_upload_queue_steps", "gauge", "Steps waiting for the uploader.", s->queue},
        {"ckptfs_draining", "gauge",
         "1 once a preemption notice or shutdown put the newest complete step first.",
         (uint64_t)s->draining},
        {"ckptfs_fetches_active", "gauge", "Remote files being fetched into staging.",
         s->fetches_active},
        {"ckptfs_fetched_bytes_total", "counter", "Bytes of remote files fetched and verified.",
         s->fetched_bytes},
        {"ckptfs_fetch_read_back_bytes_total", "counter",
         "Of those, bytes read back from staging for the whole-file digest.", s->read_back},
        {"ckptfs_warmup_bytes", "gauge", "Bytes of the files of the warm-up requests.",
         s->warmup_bytes},
        {"ckptfs_warmup_warm_bytes", "gauge", "Of those, bytes fetched and verified into staging.",
         s->warmup_warm_bytes},
    };
    put_u64s(out, staging, sizeof staging / sizeof staging[0]);
    put_family(out, "ckptfs_eta_durable_seconds", "gauge",
               "Estimated seconds until the pending bytes are durable; NaN before the first "
               "upload measured the rate.");
    if (s->eta_durable_seconds < 0)
        fputs("ckptfs_eta_durable_seconds NaN\n", out);
    else
        fprintf(out, "ckptfs_eta_durable_seconds %.6f\n", s->eta_durable_seconds);
    put_u64(out, "ckptfs_uploaded_bytes_total", "counter",
            "Bytes of files made durable by uploads (before dedup and compression).",
            s->uploaded_bytes);
    put_u64(out, "ckptfs_upload_new_bytes_total", "counter",
            "Of the uploaded bytes, those of chunks the store did not hold yet (after dedup).",
            s->new_raw_bytes);
    put_u64(out, "ckptfs_stored_bytes_total", "counter",
            "Bytes of packs written to the store (after dedup and compression).", s->stored_bytes);
    put_u64(out, "ckptfs_upload_chunks_total", "counter", "Chunk references uploaded.", s->chunks);
    put_u64(out, "ckptfs_upload_new_chunks_total", "counter",
            "Of the chunk references uploaded, chunks that had to be stored.", s->new_chunks);
    put_u64(out, "ckptfs_upload_bundles_total", "counter",
            "Bundles of small files made by uploads (each one chunk).", s->bundles);
    put_u64(out, "ckptfs_upload_bundled_files_total", "counter",
            "Files of under 4 KiB uploaded in bundles.", s->bundled_files);
    put_double(out, "ckptfs_upload_seconds_total", "counter",
               "Seconds the published step uploads took.", s->upload_seconds);
    put_family(out, "ckptfs_uploads_total", "counter",
               "Step uploads by result (an error is retried).");
    fprintf(out, "ckptfs_uploads_total{result=\"ok\"} %" PRIu64 "\n", s->uploads);
    fprintf(out, "ckptfs_uploads_total{result=\"error\"} %" PRIu64 "\n", s->upload_failures);
    put_steps(out, s);
    put_requests(out, s);
    put_u64(out, "ckptfs_store_retries_total", "counter",
            "Store requests tried again after a transient failure.", s->retries);
    if (s->peers.enabled)
        put_peers(out, &s->peers);
    put_u64(out, "ckptfs_gc_runs_total", "counter", "Background GC runs finished.", s->gc_runs);
    put_u64(out, "ckptfs_gc_running", "gauge", "1 while a background GC run is under way.",
            (uint64_t)(s->gc_running != 0));
    put_u64(out, "ckptfs_gc_deleted_steps_total", "counter", "Steps background GC deleted.",
            s->gc_steps_deleted);
    put_u64(out, "ckptfs_gc_deleted_objects_total", "counter", "Objects background GC deleted.",
            s->gc_objects_deleted);
    put_u64(out, "ckptfs_gc_freed_bytes_total", "counter",
            "Bytes of objects background GC deleted.", s->gc_bytes_freed);
    put_u64(out, "ckptfs_mount_deleted_steps_total", "counter",
            "Steps deleted from the store by removals through the mount.", s->deleted_steps);
    put_u64(out, "ckptfs_mount_deleted_freed_bytes_total", "counter",
            "Bytes of objects those deletions freed.", s->deleted_bytes_freed);
    put_u64(out, "ckptfs_errors_total", "counter",
            "Errors recorded (the status file's last_error, GC errors).", s->errors);
    put_double(out, "ckptfs_last_error_timestamp_seconds", "gauge",
               "Unix time of the newest recorded error; 0: none since start.",
               (double)s->last_error_unix_ns / 1e9);
}

st_err fs_metrics_render(const st_vfs_stats *s, const char *version, char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    char *buf = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&buf, &n);
    if (!out)
        return st_seterr(ST_ERR_NOMEM, "metrics: out of memory");
    put_all(out, s, version);
    int bad = ferror(out);
    if (fclose(out) != 0 || bad) {
        free(buf);
        return st_seterr(ST_ERR_NOMEM, "metrics: out of memory");
    }
    *text = buf;
    *len = n;
    return ST_OK;
}

st_err fs_metrics_of_vfs(void *arg, st_vfs *v, char **text, size_t *len)
{
    st_vfs_stats s;
    st_err e = st_vfs_get_stats(v, &s);
    if (!e)
        e = fs_metrics_render(&s, arg, text, len);
    st_vfs_stats_free(&s);
    return e;
}
