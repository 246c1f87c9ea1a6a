/*
 * fs_metrics_http — the optional metrics port (--metrics-listen): an HTTP
 * server (libmicrohttpd, one internal thread) that answers GET /metrics
 * with fs_metrics's text and 404 to any other path (405 to any other
 * method). docs/METRICS.md.
 *
 * Metrics carry no secret but have no authentication either, so the port
 * listens on loopback unless the operator names another address of this
 * host; every interface at once (0.0.0.0, ::, in any spelling: an
 * IPv4-mapped address is judged as its IPv4 address) is refused.
 *
 * In two steps because the daemon forks after the mount (fuse_daemonize):
 * fs_metrics_http_bind before it (a busy port stops the start with a clear
 * error, before anything is mounted; the socket survives the fork), and
 * fs_metrics_http_start after it (threads do not survive a fork).
 */
#ifndef FS_METRICS_HTTP_H
#define FS_METRICS_HTTP_H

#include <stddef.h>

#include "st_vfs.h"

typedef struct fs_metrics_http fs_metrics_http;

/*! Parses LISTEN, "PORT", "HOST:PORT" or "[IPV6]:PORT" (HOST an IPv4
 *  address or "localhost"; PORT 1..65535), and binds and listens on it.
 *  Returns 0 and *out, or -1 with the reason in why[cap] (a malformed
 *  value, a wildcard address, "Address already in use"). *warn is set when
 *  the address is not loopback (the caller logs it). */
int fs_metrics_http_bind(const char *listen, fs_metrics_http **out, int *warn, char *why,
                         size_t cap);

/*! Starts serving v's metrics (version: for ckptfs_build_info; borrowed,
 *  like v, until fs_metrics_http_free). 0, or -1 with why[cap]. */
int fs_metrics_http_start(fs_metrics_http *h, st_vfs *v, const char *version, char *why,
                          size_t cap);

/*! Stops the server (waits for its thread) and closes the socket; before
 *  st_vfs_close. NULL: no-op. */
void fs_metrics_http_free(fs_metrics_http *h);

#endif
