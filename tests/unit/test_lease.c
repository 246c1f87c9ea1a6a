/*
 * test_lease — one live daemon per node name (docs/NODES.md): the lease
 * codec, the claim rules over an in-memory store, and the mount model:
 * a second daemon with a taken name is refused, a restart on its own
 * staging takes the name back, a daemon killed on this host is replaced at
 * once, and a daemon whose name was taken while it ran publishes nothing.
 * The first lease is a create: of two claims that both read "no lease",
 * exactly one holds the name, also on an encrypted store, and a create
 * whose answer was lost is its own claim's.
 */
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/st_backend_fault.h"
#include "backend/st_backend_retry.h"
#include "engine/st_envelope.h"
#include "engine/st_nodelease.h"
#include "format/st_lease.h"
#include "ut_crypt.h"
#include "ut_lease.h"
#include "vfs_harness.h"

static void test_codec(void)
{
    char text[ST_LEASE_TEXT_MAX], key[ST_KEY_MAX];
    size_t len;
    st_lease l = ut_lease_of("a", 123456789, 42, "00112233445566ff"), back;
    snprintf(l.host, sizeof l.host, "bad host\nname");
    CHECK_OK(st_lease_encode(&l, text, &len));
    CHECK(memchr(text, '\n', len) == text + len - 1); /* one line: the host is squeezed */
    CHECK_OK(st_lease_decode(text, len, &back));
    CHECK(!strcmp(back.instance, l.instance) && back.heartbeat_ns == 123456789 &&
          back.ttl_ns == l.ttl_ns && back.pid == 42 && !strcmp(back.origin, l.origin) &&
          !strcmp(back.host, "bad-host-name"));
    CHECK_ERR(st_lease_decode(text, len - 1, &back), ST_ERR_CORRUPT); /* no newline */
    CHECK_ERR(st_lease_decode("garbage", 7, &back), ST_ERR_CORRUPT);
    CHECK_ERR(st_lease_decode("", 0, &back), ST_ERR_CORRUPT);
    text[20] = 'X'; /* an upper-case digit in the instance */
    CHECK_ERR(st_lease_decode(text, len, &back), ST_ERR_CORRUPT);
    CHECK_OK(st_key_lease(key, sizeof key, "node-a"));
    CHECK(!strcmp(key, "nodes/node-a.lease"));
    CHECK_ERR(st_key_lease(key, sizeof key, "../x"), ST_ERR_INVALID);
}

static int always_gone(const st_lease *holder)
{
    (void)holder;
    return 1;
}

static void test_claim_rules(void)
{
    st_backend *b;
    CHECK_OK(st_backend_mem_open(&b));
    const int64_t now = 1000ll * 1000000000;
    st_lease mine = ut_lease_of("a", now, 1, "0000000000000001");
    st_lease other = ut_lease_of("b", now - 10ll * 1000000000, 2, "0000000000000002"), holder;
    size_t len;
    char text[ST_LEASE_TEXT_MAX];

    /* Nobody holds it: a check writes nothing, an acquire writes ours. */
    CHECK_OK(st_nodelease_claim(b, "n", &mine, ST_CLAIM_CHECK, NULL, NULL));
    CHECK(vh_count(b, "nodes/") == 0);
    CHECK_OK(st_nodelease_claim(b, "n", &mine, ST_CLAIM_ACQUIRE, NULL, NULL));
    CHECK(vh_count(b, "nodes/") == 1);

    /* Another instance's live lease (10 s old of 60): refused, named. */
    CHECK_OK(st_lease_encode(&other, text, &len));
    CHECK_OK(st_put(b, "nodes/n.lease", text, len));
    CHECK_ERR(st_nodelease_claim(b, "n", &mine, ST_CLAIM_ACQUIRE, NULL, &holder), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "pid 2 on host host-1") != NULL);
    CHECK(holder.pid == 2);
    CHECK_ERR(st_nodelease_claim(b, "n", &mine, ST_CLAIM_RENEW, NULL, NULL), ST_ERR_BUSY);
    /* ... unless its process is known to be gone. */
    CHECK_OK(st_nodelease_claim(b, "n", &mine, ST_CLAIM_ACQUIRE, always_gone, NULL));

    /* Its stamp 66 s old (its clock behind ours), but just written by the
     * store's clock: live, and the refusal says that the clocks disagree. */
    other.heartbeat_ns = now - 66ll * 1000000000;
    CHECK_OK(st_lease_encode(&other, text, &len));
    CHECK_OK(st_put(b, "nodes/n.lease", text, len));
    CHECK_ERR(st_nodelease_claim(b, "n", &mine, ST_CLAIM_ACQUIRE, NULL, NULL), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "the clocks disagree") != NULL);

    /* Stale (written longer than ttl + margin ago, by the store's clock):
     * taken over, also when its stamp lies 3 h in the future (a holder
     * whose clock ran ahead, then died). */
    other.heartbeat_ns = now + 3 * 3600ll * 1000000000;
    CHECK_OK(st_lease_encode(&other, text, &len));
    CHECK_OK(st_put(b, "nodes/n.lease", text, len));
    CHECK_OK(st_backend_mem_set_mtime(b, "nodes/n.lease", st_now_ns() - 66ll * 1000000000));
    CHECK_OK(st_nodelease_claim(b, "n", &mine, ST_CLAIM_ACQUIRE, NULL, NULL));
    st_bytes buf = {0};
    st_lease stored;
    CHECK_OK(st_get(b, "nodes/n.lease", 0, ST_GET_TO_END, &buf));
    CHECK_OK(st_lease_decode(buf.data, buf.len, &stored));
    CHECK(!strcmp(stored.instance, mine.instance));

    /* Garbage where the lease should be: ours to write. */
    CHECK_OK(st_put(b, "nodes/n.lease", "junk", 4));
    CHECK_OK(st_nodelease_claim(b, "n", &mine, ST_CLAIM_ACQUIRE, NULL, NULL));
    CHECK_OK(st_get(b, "nodes/n.lease", 0, ST_GET_TO_END, &buf));
    CHECK_OK(st_lease_decode(buf.data, buf.len, &stored));
    st_bytes_free(&buf);
    st_backend_close(b);
}

/* b wrapped in client-side encryption with kr; left plain when kr is NULL. */
static void sealed_by(st_backend **b, const st_keyring *kr)
{
    if (kr)
        CHECK_OK(st_envelope_wrap(b, kr));
}

/* ut_lease.h's start race, on the in-memory store and on file:// (a root
 * of its own, named by tag), each encrypted with kr when it is set. */
static void start_race_over(const st_keyring *kr, const char *tag)
{
    st_backend *store, *held;
    CHECK_OK(st_backend_mem_open(&store));
    char hold[PATH_MAX];
    snprintf(hold, sizeof hold, "%s/lease-hold", vh_tmp);
    CHECK_OK(st_backend_mem_share(store, &held));
    sealed_by(&store, kr);
    sealed_by(&held, kr);
    ut_lease_race(store, held, "n", hold);
    st_backend_close(store);
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/race-store-%s", vh_tmp, tag);
    CHECK_OK(st_backend_file_open(root, &store));
    CHECK_OK(st_backend_file_open(root, &held));
    sealed_by(&store, kr);
    sealed_by(&held, kr);
    ut_lease_race(store, held, "n", hold);
    st_backend_close(store);
}

static void test_start_race(void)
{
    start_race_over(NULL, "plain");
}

/* The same race on an encrypted store, whose creates are creates too. */
static void test_start_race_encrypted(void)
{
    st_keyring *kr = ut_keyring_of(1);
    start_race_over(kr, "sealed");
    st_keyring_free(kr);
}

/* A create whose answer was lost after the store took it: the retry meets
 * the claim's own lease (412 on S3, EEXIST on file://) and the claim holds
 * the name; its own object is never read as a rival's. */
static void test_create_answer_lost(void)
{
    st_backend *store, *lossy, *retried;
    CHECK_OK(st_backend_mem_open(&store));
    CHECK_OK(st_backend_mem_share(store, &lossy));
    CHECK_OK(st_backend_fault_wrap(&lossy, "lose_answer=nodes/n.lease"));
    st_retry_policy fast = {.base_ms = 1, .max_ms = 2};
    CHECK_OK(st_backend_retry_wrap(lossy, &fast, &retried));
    st_lease mine = ut_lease_of("a", st_now_ns(), 1, "0000000000000001");
    CHECK_OK(st_nodelease_claim(retried, "n", &mine, ST_CLAIM_ACQUIRE, NULL, NULL));
    CHECK(st_backend_retry_count(retried) == 1); /* the lost answer, sent again */
    st_bytes buf = {0};
    st_lease stored;
    CHECK_OK(st_get(store, "nodes/n.lease", 0, ST_GET_TO_END, &buf));
    CHECK(st_lease_decode(buf.data, buf.len, &stored) == ST_OK &&
          !strcmp(stored.instance, mine.instance));
    st_bytes_free(&buf);
    st_backend_close(retried);
    st_backend_close(store);
}

/* A started mount whose refresher has written its lease. */
static int lease_written(st_backend *b, const char *node)
{
    char key[64];
    uint64_t size;
    snprintf(key, sizeof key, "nodes/%s.lease", node);
    return st_stat(b, key, &size) == ST_OK;
}

static void test_second_daemon_is_refused(void)
{
    st_backend *store;
    CHECK_OK(st_backend_mem_open(&store));
    vh_mount a, b;
    CHECK_OK(vh_mount_open(&a, store, "same", "lease-a", 1));
    CHECK(VH_WAIT(lease_written(store, "same"), 10));
    /* Another staging directory, the same name, while the first one lives. */
    CHECK_ERR(vh_mount_open(&b, store, "same", "lease-b", 1), ST_ERR_BUSY);
    CHECK(strstr(st_errmsg(), "node name 'same' is held by another live ckptfs") != NULL);
    /* Another name works. */
    CHECK_OK(vh_mount_open(&b, store, "other", "lease-b", 1));
    vh_mount_close(&b);
    /* The first one restarted on its own staging takes its name back. */
    vh_mount_close(&a);
    CHECK_OK(vh_mount_open(&a, store, "same", "lease-a", 1));
    CHECK_OK(vh_write_str(&a, VH_JOB "/ckpt-000001.pt", "one", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(a.v, 20));
    CHECK(vh_consistent(store, 1));
    vh_mount_close(&a);
    st_backend_close(store);
}

/* A started mount of node over the file:// store at vh_tmp/store (a store
 * that a forked child and its parent share). */
static st_err file_mount(st_vfs **v, st_backend **b, const char *node, const char *staging)
{
    char root[PATH_MAX], dir[PATH_MAX];
    snprintf(root, sizeof root, "%s/store", vh_tmp);
    snprintf(dir, sizeof dir, "%s/%s", vh_tmp, staging);
    st_err e = st_backend_file_open(root, b);
    st_vfs_options o = {.backend = *b,
                        .staging_dir = dir,
                        .node = node,
                        .refresh_seconds = 0.1,
                        .drain_seconds = 5,
                        .log = vh_log,
                        .log_arg = (void *)node};
    if (!e && !(e = st_vfs_open(&o, v)) && (e = st_vfs_start(*v))) {
        st_vfs_close(*v);
        *v = NULL;
    }
    return e;
}

static void test_killed_daemon_is_replaced_at_once(void)
{
    st_backend *store;
    st_vfs *v = NULL;
    char root[PATH_MAX];
    snprintf(root, sizeof root, "%s/store", vh_tmp);
    CHECK_OK(st_backend_file_open(root, &store));
    pid_t child = fork();
    if (child == 0) { /* a daemon that holds the name, then is killed */
        st_backend *b;
        if (file_mount(&v, &b, "node-k", "killed") || !VH_WAIT(lease_written(b, "node-k"), 10))
            _exit(1);
        _exit(0); /* no unmount: as kill -9 */
    }
    int status;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && !WEXITSTATUS(status));
    CHECK(lease_written(store, "node-k"));
    /* Its lease is live by the clock, but its process is gone from this
     * machine: a new staging directory takes the name at once. */
    st_backend *b = NULL;
    CHECK_OK(file_mount(&v, &b, "node-k", "replacement"));
    st_vfs_close(v);
    st_backend_close(b);
    st_backend_close(store);
}

static int exists(const char *path)
{
    return access(path, F_OK) == 0;
}

/* Two mounts started with one node name at once (docs/NODES.md, "The first
 * lease is a create"): the first one's first lease write (its refresher's
 * first tick) is held between its read and its create while the second one
 * starts and writes its own; released, the first one is refused: its
 * status names the holder and it publishes nothing, while the second one
 * publishes. With plain PUTs the first one's lease replaced the second's
 * and its status said nothing. */
static void test_mounts_started_together(void)
{
    st_backend *store;
    CHECK_OK(st_backend_mem_open(&store));
    char hold[PATH_MAX], reached[PATH_MAX + 16], spec[PATH_MAX + 64];
    snprintf(hold, sizeof hold, "%s/twin-hold", vh_tmp);
    snprintf(reached, sizeof reached, "%s.reached", hold);
    snprintf(spec, sizeof spec, "put_hold=%s,put_hold_key=nodes/twin.lease", hold);
    ut_write_file(hold, "", 0);
    vh_mount a, b;
    CHECK_OK(vh_mount_open_fault(&a, store, "twin", "twin-a", 1, spec));
    CHECK(VH_WAIT(exists(reached), 20)); /* a read "no lease"; its create waits */
    CHECK_OK(vh_mount_open(&b, store, "twin", "twin-b", 1)); /* b reads none too */
    CHECK(VH_WAIT(lease_written(store, "twin"), 10));
    unlink(hold);
    st_bytes st = {0};
    CHECK(
        VH_WAIT((vh_status(&a, &st), strstr((char *)st.data, "held by another live ckptfs")), 10));
    CHECK_OK(vh_write_str(&a, VH_JOB "/ckpt-000008.pt", "eight", VH_PID_A));
    CHECK_OK(vh_write_str(&b, VH_JOB "/ckpt-000009.pt", "nine", VH_PID_A));
    CHECK_OK(st_vfs_wait_idle(b.v, 20));
    CHECK(vh_consistent(store, 9));
    st_part p;
    CHECK_ERR(vh_part(store, 8, "twin", &p), ST_ERR_NOT_FOUND);
    vh_status(&b, &st);
    CHECK(strstr((char *)st.data, "held by another live ckptfs") == NULL);
    st_bytes_free(&st);
    vh_mount_close(&a);
    vh_mount_close(&b);
    CHECK_ERR(vh_part(store, 8, "twin", &p), ST_ERR_NOT_FOUND); /* not even at unmount */
    st_backend_close(store);
}

static void test_taken_name_publishes_nothing(void)
{
    st_backend *store;
    CHECK_OK(st_backend_mem_open(&store));
    vh_mount a;
    CHECK_OK(vh_mount_open(&a, store, "node-t", "taken", 1));
    CHECK(VH_WAIT(lease_written(store, "node-t"), 10));
    /* Another daemon takes the name (a live lease of another instance, on
     * another machine), as after a partition that made ours look stale. */
    st_lease other = ut_lease_of("c", st_now_ns(), 99, "00000000000000cc");
    char text[ST_LEASE_TEXT_MAX];
    size_t len;
    CHECK_OK(st_lease_encode(&other, text, &len));
    CHECK_OK(st_put(store, "nodes/node-t.lease", text, len));
    CHECK_OK(vh_write_str(&a, VH_JOB "/ckpt-000007.pt", "seven", VH_PID_A));
    st_bytes st = {0};
    CHECK(
        VH_WAIT((vh_status(&a, &st), strstr((char *)st.data, "held by another live ckptfs")), 10));
    st_bytes_free(&st);
    st_part p;
    CHECK_ERR(vh_part(store, 7, "node-t", &p), ST_ERR_NOT_FOUND);
    CHECK(vh_file_is_str(&a, VH_JOB "/ckpt-000007.pt", "seven")); /* still here, in staging */
    vh_mount_close(&a);
    CHECK_ERR(vh_part(store, 7, "node-t", &p), ST_ERR_NOT_FOUND); /* not even at unmount */
    st_backend_close(store);
}

int main(void)
{
    if (vh_setup("lease"))
        return 1;
    RUN(test_codec);
    RUN(test_claim_rules);
    RUN(test_start_race);
    RUN(test_start_race_encrypted);
    RUN(test_create_answer_lost);
    RUN(test_second_daemon_is_refused);
    RUN(test_killed_daemon_is_replaced_at_once);
    RUN(test_taken_name_publishes_nothing);
    RUN(test_mounts_started_together);
    vh_teardown();
    return ut_finish();
}
