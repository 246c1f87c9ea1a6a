/*
 * fs_metrics — the mount's figures (st_vfs_get_stats) as Prometheus text,
 * exposition format 0.0.4 (docs/METRICS.md lists every metric). The one
 * renderer: MOUNT/.ckptfs/metrics (through st_vfs_options.metrics) and the
 * --metrics-listen port (fs_metrics_http.c) both serve its text.
 *
 * Pure but for the allocation of the text; any thread.
 */
#ifndef FS_METRICS_H
#define FS_METRICS_H

#include <stddef.h>

#include "st_vfs.h"

/* The Content-Type of the text, for HTTP. */
#define FS_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/*! Renders s; version goes into ckptfs_build_info. On ST_OK *text is
 *  malloc'd (free it), NUL-terminated, *len bytes long; ST_ERR_NOMEM
 *  otherwise. */
st_err fs_metrics_render(const st_vfs_stats *s, const char *version, char **text, size_t *len);

/*! An st_vfs_metrics_fn: st_vfs_get_stats(v), then fs_metrics_render with
 *  arg as the version string (const char *, outlives the mount). */
st_err fs_metrics_of_vfs(void *arg, st_vfs *v, char **text, size_t *len);

#endif
