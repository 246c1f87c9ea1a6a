/*
 * fs_metrics_http — GET /metrics on a port. See the header.
 *
 * The socket is ours (bound in fs_metrics_http_bind, handed to the server
 * with MHD_OPTION_LISTEN_SOCKET) so that a busy port is a clear errno, not
 * a NULL from MHD_start_daemon. Threads: libmicrohttpd's one polling thread
 * runs answer(); it reads the mount through st_vfs_get_stats (thread-safe).
 */
#include "fs_metrics_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs_metrics.h"

/* A scraper needs one connection; a few more for people with curl. A
 * client that stalls is dropped after CONNECTION_TIMEOUT_S. */
#define CONNECTION_LIMIT     16
#define CONNECTION_TIMEOUT_S 10

struct fs_metrics_http {
    int fd;
    int ipv6;
    struct MHD_Daemon *daemon;
    st_vfs *vfs;
    const char *version;
};

typedef struct listen_addr {
    struct sockaddr_storage ss;
    socklen_t len;
    int loopback, wildcard;
} listen_addr;

/* Loopback (127/8) or every interface (0.0.0.0): ip in host order. */
static void judge_ipv4(uint32_t ip, listen_addr *a)
{
    a->loopback = (ip >> 24) == 127;
    a->wildcard = ip == 0;
}

/* "PORT", "HOST:PORT", "[IPV6]:PORT" into *a; 0 or -1 with why. */
static int parse_listen(const char *spec, listen_addr *a, char *why, size_t cap)
{
    char host[64] = "127.0.0.1";
    const char *port = spec;
    const char *colon = strrchr(spec, ':');
    if (colon) {
        const char *h = spec;
        size_t hl = (size_t)(colon - spec);
        if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
            h++;
            hl -= 2;
        }
        if (hl == 0 || hl >= sizeof host) {
            snprintf(why, cap, "wants PORT or HOST:PORT, got '%s'", spec);
            return -1;
        }
        memcpy(host, h, hl);
        host[hl] = '\0';
        port = colon + 1;
    }
    char *end;
    errno = 0;
    long p = strtol(port, &end, 10);
    if (!*port || *end || errno || p < 1 || p > 65535) {
        snprintf(why, cap, "wants a port 1..65535, got '%s'", spec);
        return -1;
    }
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof host, "127.0.0.1");
    memset(a, 0, sizeof *a);
    struct sockaddr_in *v4 = (struct sockaddr_in *)&a->ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&a->ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)p);
        a->len = sizeof *v4;
        judge_ipv4(ntohl(v4->sin_addr.s_addr), a);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)p);
        a->len = sizeof *v6;
        /* An IPv4-mapped address (::ffff:a.b.c.d) is that IPv4 address to a
         * dual-stack socket: ::ffff:0.0.0.0 binds every IPv4 interface, and
         * ::ffff:127.0.0.1 is loopback. The binary form decides, so every
         * spelling of an address ([0:0::0], [::FFFF:7f00:1]) is judged alike. */
        if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
            const uint8_t *b = v6->sin6_addr.s6_addr;
            judge_ipv4((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 | (uint32_t)b[14] << 8 | b[15],
                       a);
        } else {
            a->loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
            a->wildcard = IN6_IS_ADDR_UNSPECIFIED(&v6->sin6_addr);
        }
    } else {
        snprintf(why, cap, "wants an IP address or localhost as HOST, got '%s'", host);
        return -1;
    }
    if (a->wildcard) {
        snprintf(why, cap,
                 "refuses %s, every interface: the metrics have no authentication; name "
                 "127.0.0.1 or the one address of this host to serve them on",
                 host);
        return -1;
    }
    return 0;
}

int fs_metrics_http_bind(const char *listen_spec, fs_metrics_http **out, int *warn, char *why,
                         size_t cap)
{
    *out = NULL;
    listen_addr a;
    if (parse_listen(listen_spec, &a, why, cap))
        return -1;
    fs_metrics_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(why, cap, "out of memory");
        return -1;
    }
    h->ipv6 = a.ss.ss_family == AF_INET6;
    h->fd = socket(a.ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    /* SO_REUSEADDR: a restarted daemon gets its port back from TIME_WAIT
     * at once; a port another process listens on stays EADDRINUSE. */
    if (h->fd < 0 || setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(h->fd, (struct sockaddr *)&a.ss, a.len) || listen(h->fd, CONNECTION_LIMIT)) {
        snprintf(why, cap, "cannot listen on %s: %s", listen_spec, strerror(errno));
        fs_metrics_http_free(h);
        return -1;
    }
    *warn = !a.loopback;
    *out = h;
    return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                             enum MHD_ResponseMemoryMode mode)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r) {
        if (mode == MHD_RESPMEM_MUST_FREE)
            free(body);
        return MHD_NO;
    }
    enum MHD_Result ok = MHD_YES;
    if (status == MHD_HTTP_OK)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, FS_METRICS_CONTENT_TYPE);
    else if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        ok = MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (ok == MHD_YES)
        ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)req_cls;
    fs_metrics_http *h = cls;
    static char not_found[] = "not found: the metrics are at /metrics\n";
    static char not_allowed[] = "method not allowed: GET /metrics\n";
    static char failed[] = "cannot render the metrics\n";
    if (strcmp(url, "/metrics"))
        return reply(c, MHD_HTTP_NOT_FOUND, not_found, sizeof not_found - 1,
                     MHD_RESPMEM_PERSISTENT);
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, not_allowed, sizeof not_allowed - 1,
                     MHD_RESPMEM_PERSISTENT);
    char *text;
    size_t len;
    if (fs_metrics_of_vfs((void *)h->version, h->vfs, &text, &len))
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, failed, sizeof failed - 1,
                     MHD_RESPMEM_PERSISTENT);
    return reply(c, MHD_HTTP_OK, text, len, MHD_RESPMEM_MUST_FREE);
}

int fs_metrics_http_start(fs_metrics_http *h, st_vfs *v, const char *version, char *why, size_t cap)
{
    h->vfs = v;
    h->version = version;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | (h->ipv6 ? MHD_USE_IPv6 : 0);
    h->daemon = MHD_start_daemon(flags, 0, NULL, NULL, answer, h, MHD_OPTION_LISTEN_SOCKET, h->fd,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTION_LIMIT,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
                                 MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(why, cap, "cannot start the metrics server (libmicrohttpd)");
        return -1;
    }
    h->fd = -1; /* the server's now: MHD_stop_daemon closes it */
    return 0;
}

void fs_metrics_http_free(fs_metrics_http *h)
{
    if (!h)
        return;
    if (h->daemon)
        MHD_stop_daemon(h->daemon);
    if (h->fd >= 0)
        close(h->fd);
    free(h);
}
