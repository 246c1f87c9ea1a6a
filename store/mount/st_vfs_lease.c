/*
 * st_vfs_lease — the mount's side of the node lease (docs/NODES.md): the
 * instance id kept in the staging directory, the claim at open, the
 * heartbeat on the refresher thread and the check before every part record.
 *
 * Threads: vfs_lease_open on the opening thread before any other starts;
 * vfs_lease_heartbeat on the refresher; vfs_lease_check on the uploader.
 * Store I/O never runs under v->lock; v->lock guards lease.state/error.
 */
#include "mount/st_vfs_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "engine/st_nodelease.h"
#include "util/st_fsutil.h"
#include "util/st_hash.h"

#define DEFAULT_TTL_S 60.0

/* Reads STAGING/instance, or makes it: 16 random bytes as hex, written to a
 * temporary file, fsynced and renamed, so a crash leaves either no file or
 * a whole one. */
static st_err load_instance(st_vfs *v, char out[ST_LEASE_INSTANCE_LEN + 1])
{
    char path[PATH_MAX - 8], tmp[PATH_MAX], text[ST_ID_HEX_LEN + 1];
    st_id id;
    snprintf(path, sizeof path, "%s/instance", v->staging);
    int fd;
    if (st_open_regular(path, O_RDONLY, 0, &fd) == ST_OK) {
        ssize_t n = read(fd, text, ST_ID_HEX_LEN);
        close(fd);
        text[n > 0 ? n : 0] = '\0';
        if (n == ST_ID_HEX_LEN && st_id_parse(text, &id) == 0) {
            st_id_hex(&id, out);
            return ST_OK;
        }
        vfs_log(v, 1, "%s is not an instance id; making a new one", path);
    }
    if (getrandom(id.b, sizeof id.b, 0) != (ssize_t)sizeof id.b)
        return st_seterr(ST_ERR_IO, "getrandom: %s", strerror(errno));
    st_id_hex(&id, out);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    st_err e = st_create_new(tmp, O_WRONLY, 0600, &fd);
    if (e)
        return e;
    e = st_write_all(fd, out, ST_ID_HEX_LEN, tmp);
    if (!e && fsync(fd) != 0)
        e = st_seterr(ST_ERR_IO, "fsync %s: %s", tmp, strerror(errno));
    close(fd);
    if (!e && rename(tmp, path) != 0)
        e = st_seterr(ST_ERR_IO, "rename %s: %s", tmp, strerror(errno));
    return e;
}

/* Hash of the boot id and the PID namespace: two daemons with the same
 * origin see the same processes. */
static void make_origin(char out[ST_LEASE_ORIGIN_LEN + 1])
{
    char id[256] = "", ns[128] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, id, sizeof id - 1);
        id[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    ssize_t n = readlink("/proc/self/ns/pid", ns, sizeof ns - 1);
    ns[n > 0 ? n : 0] = '\0';
    char both[400];
    int len = snprintf(both, sizeof both, "%s|%s", id, ns);
    snprintf(out, ST_LEASE_ORIGIN_LEN + 1, "%016" PRIx64, st_hash64(both, (size_t)len));
}

/* Set by vfs_lease_open for holder_gone (the claim's callback has no arg). */
static char my_origin[ST_LEASE_ORIGIN_LEN + 1];

/* The holder ran in our machine and PID namespace and its process is gone:
 * a daemon killed on this host (a restart with a new staging directory). */
static int holder_gone(const st_lease *holder)
{
    if (strcmp(holder->origin, my_origin) || holder->pid <= 0 || holder->pid > INT_MAX)
        return 0;
    return kill((pid_t)holder->pid, 0) != 0 && errno == ESRCH;
}

static void set_state(st_vfs *v, vlease_state state, const char *why)
{
    pthread_mutex_lock(&v->lock);
    v->lease.state = state;
    snprintf(v->lease.error, sizeof v->lease.error, "%s", why ? why : "");
    if (state == VLEASE_TAKEN)
        vfs_set_error(v, "%s", why);
    pthread_mutex_unlock(&v->lock);
}

static st_err claim(st_vfs *v, st_claim_mode mode)
{
    v->lease.mine.heartbeat_ns = st_now_ns();
    st_err e = st_nodelease_claim(v->backend, v->node, &v->lease.mine, mode, holder_gone, NULL);
    if (e == ST_OK && mode != ST_CLAIM_CHECK)
        set_state(v, VLEASE_HELD, NULL);
    else if (e == ST_ERR_BUSY)
        set_state(v, VLEASE_TAKEN, st_errmsg());
    return e;
}

st_err vfs_lease_open(st_vfs *v)
{
    double ttl =
        v->opts.node_lease_ttl_seconds > 0 ? v->opts.node_lease_ttl_seconds : DEFAULT_TTL_S;
    st_err e = load_instance(v, v->lease.mine.instance);
    if (e)
        return e;
    make_origin(v->lease.mine.origin);
    memcpy(my_origin, v->lease.mine.origin, sizeof my_origin);
    v->lease.mine.ttl_ns = (int64_t)(ttl * 1e9);
    v->lease.mine.pid = getpid();
    if (gethostname(v->lease.mine.host, sizeof v->lease.mine.host) != 0)
        snprintf(v->lease.mine.host, sizeof v->lease.mine.host, "-");
    v->lease.next_beat_ns = st_mono_ns(); /* the refresher's first tick writes it */
    return ST_OK;
}

st_err vfs_lease_read(st_vfs *v)
{
    /* A read only: a mount never waits on a PUT (docs/NODES.md). */
    return claim(v, ST_CLAIM_CHECK);
}

void vfs_lease_heartbeat(st_vfs *v)
{
    if (st_mono_ns() < v->lease.next_beat_ns)
        return;
    v->lease.next_beat_ns = st_mono_ns() + v->lease.mine.ttl_ns / 3;
    pthread_mutex_lock(&v->lock);
    int taken = v->lease.state == VLEASE_TAKEN;
    pthread_mutex_unlock(&v->lock);
    if (taken)
        return; /* never take the name back from a live holder */
    st_err e = claim(v, ST_CLAIM_RENEW);
    if (e == ST_ERR_BUSY)
        vfs_log(v, 2, "%s; this daemon publishes nothing more", st_errmsg());
    else if (e)
        vfs_log(v, 1, "renewing the lease of node '%s': %s", v->node, st_errmsg());
}

st_err vfs_lease_check(st_vfs *v)
{
    char why[sizeof v->lease.error];
    pthread_mutex_lock(&v->lock);
    int taken = v->lease.state == VLEASE_TAKEN;
    memcpy(why, v->lease.error, sizeof why);
    pthread_mutex_unlock(&v->lock);
    if (taken)
        return st_seterr(ST_ERR_BUSY, "%s", why);
    return claim(v, ST_CLAIM_ACQUIRE);
}
