/*
 * st_lease — key and text of the node lease (st_lease.h, docs/NODES.md).
 */
#include "format/st_lease.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define LEASE_MAGIC "ckptfs-lease v1"

st_err st_key_lease(char *out, size_t cap, const char *node)
{
    if (!st_name_is_valid(node, ST_NODE_MAX))
        return st_seterr(ST_ERR_INVALID, "invalid node name '%.64s'", node);
    int n = snprintf(out, cap, "nodes/%s.lease", node);
    return n < 0 || (size_t)n >= cap ? st_seterr(ST_ERR_INVALID, "lease key too long") : ST_OK;
}

static int is_hex_lower(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* The host name as the lease carries it: safe to print, one word. */
static void squeeze_host(const char *in, char *out)
{
    size_t n = 0;
    for (; in[n] && n < ST_LEASE_HOST_MAX; n++) {
        char c = in[n];
        int ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
        out[n] = ok ? c : '-';
    }
    if (!n)
        out[n++] = '-';
    out[n] = '\0';
}

st_err st_lease_encode(const st_lease *l, char *out, size_t *len)
{
    char host[ST_LEASE_HOST_MAX + 1];
    if (strlen(l->instance) != ST_LEASE_INSTANCE_LEN ||
        !is_hex_lower(l->instance, ST_LEASE_INSTANCE_LEN) ||
        strlen(l->origin) != ST_LEASE_ORIGIN_LEN || !is_hex_lower(l->origin, ST_LEASE_ORIGIN_LEN) ||
        l->heartbeat_ns < 0 || l->ttl_ns <= 0 || l->pid < 0)
        return st_seterr(ST_ERR_INVALID, "lease fields out of range");
    squeeze_host(l->host, host);
    int n = snprintf(out, ST_LEASE_TEXT_MAX,
                     LEASE_MAGIC " %s %" PRId64 " %" PRId64 " %" PRId64 " %s %s\n", l->instance,
                     l->heartbeat_ns, l->ttl_ns, l->pid, l->origin, host);
    if (n < 0 || n >= ST_LEASE_TEXT_MAX)
        return st_seterr(ST_ERR_INVALID, "lease does not fit");
    *len = (size_t)n;
    return ST_OK;
}

st_err st_lease_decode(const void *buf, size_t len, st_lease *l)
{
    char text[ST_LEASE_TEXT_MAX];
    memset(l, 0, sizeof *l);
    if (len >= sizeof text || memchr(buf, '\0', len))
        return st_seterr(ST_ERR_CORRUPT, "not a node lease");
    memcpy(text, buf, len);
    text[len] = '\0';
    char instance[ST_LEASE_INSTANCE_LEN + 2], origin[ST_LEASE_ORIGIN_LEN + 2];
    char host[ST_LEASE_HOST_MAX + 2], tail = 0;
    long long hb, ttl, pid;
    int consumed = 0;
    if (strncmp(text, LEASE_MAGIC " ", sizeof LEASE_MAGIC) ||
        sscanf(text + sizeof LEASE_MAGIC, "%33s %lld %lld %lld %17s %65s%c%n", instance, &hb, &ttl,
               &pid, origin, host, &tail, &consumed) != 7 ||
        tail != '\n' || (size_t)consumed + sizeof LEASE_MAGIC != len ||
        strlen(instance) != ST_LEASE_INSTANCE_LEN ||
        !is_hex_lower(instance, ST_LEASE_INSTANCE_LEN) || strlen(origin) != ST_LEASE_ORIGIN_LEN ||
        !is_hex_lower(origin, ST_LEASE_ORIGIN_LEN) || strlen(host) > ST_LEASE_HOST_MAX || hb < 0 ||
        ttl <= 0 || pid < 0)
        return st_seterr(ST_ERR_CORRUPT, "not a node lease");
    memcpy(l->instance, instance, ST_LEASE_INSTANCE_LEN + 1);
    l->heartbeat_ns = hb;
    l->ttl_ns = ttl;
    l->pid = pid;
    memcpy(l->origin, origin, ST_LEASE_ORIGIN_LEN + 1);
    squeeze_host(host, l->host);
    return ST_OK;
}
