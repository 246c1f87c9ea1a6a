"""The peer tier on an encrypted store (docs/PEERS.md, "Encrypted stores";
docs/ENCRYPTION.md), with real ckptfs daemons, real FUSE mounts and the
real ckptctl on one host, each node on its own loopback address (127.0.0.2
keeps replicas for 127.0.0.1's writer), every node with the same key file:

* a step whose file name and bytes hold a marker string is replicated while
  its packs are held from the store (the fault hook `put_hold`); neither the
  peer's directory (packs, manifest, replica record: each sealed) nor the
  store holds the marker; the writer is killed with SIGKILL and its staging
  deleted, and a new node with the key restores the step bit-exact from
  the peer while the store still holds no pack (ckptctl restore, and
  through its own mount), and from the peer alone
  when the store cannot be reached (docs/PEERS.md, "Restoring from peers
  alone": the peer's record, sealed, opened by the reader);
* the peer takes the lost writer's step over: the store then holds a
  durable step, sealed (no marker), that a node with the key restores
  bit-exact without the peers;
* a peer without the key is refused by name at its hello ("does not hold
  this node's encryption key") and is sent nothing: the step is not
  replicated and goes to the store as without peers.

Environment: CKPTFS and CKPTCTL name the binaries (a -DCKPT_TEST_HOOKS=ON
build: the hold is a test hook).
"""
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, Mount, MountTestCase, file_store_keys, read_bytes,  # noqa: E402
                      read_status, wait_durable, wait_for)

JOB = "job"
PEER_ADDR = "127.0.0.2"
TIMEOUT = 60  # s: each wait below is a few seconds
MARKER = b"CKPTFS-SECRET-MARKER-51c0de"
FILE = "model-%s.bin" % MARKER.decode()  # a file name is secret too


def marked_bytes(n):
    """n bytes a codec cannot shrink, holding MARKER every 4 KiB."""
    out = bytearray(os.urandom(n))
    for at in range(0, n - len(MARKER), 4096):
        out[at:at + len(MARKER)] = MARKER
    return bytes(out)


def files_holding(root, needle):
    """Files under root whose bytes or name hold needle."""
    hits = []
    for dirpath, _, names in os.walk(root):
        for n in names:
            path = os.path.join(dirpath, n)
            with open(path, "rb") as f:
                if needle in f.read() or needle in path.encode():
                    hits.append(os.path.relpath(path, root))
    return hits


class PeersEncryption(MountTestCase):
    TMP_PREFIX = "ckptfs-peerenc-"

    def setUp(self):
        super().setUp()
        self.key = os.path.join(self.tmp, "key")
        p = subprocess.run([CKPTCTL, "keygen", self.key], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.secret = os.path.join(self.tmp, "secret")
        fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(48))
        os.close(fd)
        self.hold = os.path.join(self.tmp, "hold")
        open(self.hold, "w").close()  # no pack of the writer reaches the store
        self.data = marked_bytes(3 << 20)

    def tearDown(self):
        # A writer whose packs are still held cannot finish its unmount.
        if os.path.exists(self.hold):
            os.unlink(self.hold)
        super().tearDown()

    def staging(self, name):
        return os.path.join(self.tmp, "staging-" + name)

    def mount(self, name, extra, key=True, env=None):
        """A mount (stopped in tearDown) of node name; with the key file unless key=False."""
        extra = ["--refresh", "0.5", "--peer-secret-file", self.secret] + extra
        if key:
            extra += ["--encryption-key-file", self.key]
        m = Mount(os.path.join(self.tmp, "mnt-" + name), store=self.store,
                  staging=self.staging(name), node=name, extra_args=extra, env=env)
        self.mounts.append(m)
        return m.start()

    def peer(self, key=True, env=None):
        """Node b, keeping replicas on 127.0.0.2 (a free port); returns it
        and its "addr:port"."""
        b = self.mount("b", ["--peer-listen", PEER_ADDR + ":0"], key=key, env=env)
        m = re.search(r"keeping replicas for peers on \S+ \(port (\d+)\)", b.log_text())
        self.assertTrue(m, "the peer did not say its port")
        return b, "%s:%s" % (PEER_ADDR, m.group(1))

    def writer(self, peer, ttl):
        """Node a, replicating to peer, its packs held from the store."""
        return self.mount("a", ["--peers", peer, "--drain", "1", "--node-lease-ttl", str(ttl)],
                          env={"CKPT_FAULT": "put_hold=%s" % self.hold})

    def write_step(self, m, step):
        d = os.path.join(m.path, JOB, "step-%d" % step)
        os.makedirs(d)
        with open(os.path.join(d, FILE), "wb") as f:
            f.write(self.data)
        open(os.path.join(d, ".ckpt-complete"), "wb").close()

    def replica_records(self, step):
        return [k for k in file_store_keys(self.store, "jobs/%s/steps/%020d/" % (JOB, step))
                if "/replicas/" in k]

    def packs_in_store(self):
        return file_store_keys(self.store, "jobs/%s/packs/" % JOB)

    def restore(self, step, peers, alone=None):
        """ckptctl restore with the key (and the secret when peers): the
        restored file's bytes. alone: the peer's "addr:port", read alone
        through a store that cannot be reached (an S3 endpoint on a port
        nothing listens on)."""
        out = os.path.join(self.tmp, "restored-%d-%d-%d" % (step, peers, bool(alone)))
        store, env = self.store, None
        if alone:
            store = "s3://ckpt-test/unreachable"
            env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x",
                       CKPT_S3_ENDPOINT="http://127.0.0.1:1")
        argv = [CKPTCTL, "--store", store, "--job", JOB, "--encryption-key-file", self.key,
                "--state-dir", os.path.join(self.tmp, "state-%d-%d" % (peers, bool(alone)))]
        if peers:
            argv += ["--peer-secret-file", self.secret]
        if alone:
            argv += ["--peers", alone]
        p = subprocess.run(argv + ["restore", "--step", str(step), "--to", out],
                           capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        return read_bytes(os.path.join(out, "step-%d" % step, FILE))

    def lose_writer(self, a):
        """The writer's node is lost before its upload finished."""
        a.kill9()
        a.stop()
        shutil.rmtree(self.staging("a"))

    def assert_sealed_replica(self, b, step):
        """The peer holds the replica, every file of it sealed, no marker."""
        self.assertEqual(read_status(b.path)["peers"]["replicas_held"], 1)
        root = os.path.join(self.staging("b"), "peer")
        parts = os.path.join(root, "parts", JOB, "%020d" % step)
        for ext in ("manifest", "record"):
            with open(os.path.join(parts, "a.r1." + ext), "rb") as f:
                self.assertEqual(f.read(4), b"CKe1", ext)
        self.assertEqual(files_holding(root, MARKER), [])
        self.assertEqual(files_holding(self.store[len("file://"):], MARKER), [])

    def test_replicated_encrypted_step_survives_its_writer(self):
        # The peer's own packs are held too: a takeover (the writer's PID is
        # seen gone on this host) cannot give the store a pack meanwhile.
        b, peer = self.peer(env={"CKPT_FAULT": "put_hold=%s" % self.hold})
        a = self.writer(peer, 3600)
        self.write_step(a, 1)
        wait_for(lambda: self.replica_records(1), TIMEOUT, "the replica record")
        # The writer counts the part once the record's PUT returned, a moment
        # after the record shows in the store.
        wait_for(lambda: read_status(a.path)["peers"]["parts_replicated"] == 1, TIMEOUT,
                 "the writer's count of replicated parts")
        self.assertEqual(self.packs_in_store(), {}, "a pack reached the store")
        self.assert_sealed_replica(b, 1)
        self.lose_writer(a)

        self.assertEqual(self.restore(1, peers=True), self.data)
        self.assertEqual(self.restore(1, peers=True, alone=peer), self.data)
        c = self.mount("c", [])  # a new node's mount reads it from the peer too
        path = os.path.join(c.path, JOB, "step-1", FILE)
        wait_for(lambda: os.path.exists(path), TIMEOUT, "the replicated step in the mount")
        self.assertEqual(read_bytes(path), self.data)
        self.assertEqual(self.packs_in_store(), {}, "the restore read the store's packs")

    def test_peer_takes_over_an_encrypted_step(self):
        b, peer = self.peer()
        a = self.writer(peer, 2)
        self.write_step(a, 2)
        wait_for(lambda: self.replica_records(2), TIMEOUT, "the replica record")
        self.assert_sealed_replica(b, 2)
        self.lose_writer(a)
        # Once a's lease is stale (2 s + 5 s), b publishes the step from its copy.
        wait_durable(CKPTCTL, self.store, JOB, 2, timeout=TIMEOUT,
                     env=dict(os.environ, CKPT_ENCRYPTION_KEY_FILE=self.key))
        said = "took over step 2 of job %s from node a" % JOB
        wait_for(lambda: said in b.log_text(), TIMEOUT, "the peer's word on the takeover")
        self.assertEqual(self.replica_records(2), [])
        self.assertEqual(files_holding(self.store[len("file://"):], MARKER), [])
        self.assertEqual(self.restore(2, peers=False), self.data)

    def test_peer_without_the_key_is_refused_by_name(self):
        # b starts first, on a store that is not encrypted yet.
        b, peer = self.peer(key=False)
        a = self.writer(peer, 3600)
        self.write_step(a, 3)
        said = "peer b at %s does not hold this node's encryption key" % peer
        wait_for(lambda: said in a.log_text(), TIMEOUT, "the refusal")
        wait_for(lambda: read_status(a.path)["peers"]["parts_unreplicated"] == 1, TIMEOUT,
                 "the step not replicated")
        self.assertIn("not replicated: 0 of 1 peers took it", a.log_text())
        self.assertEqual(self.replica_records(3), [])
        held = read_status(b.path)["peers"]
        self.assertEqual((held["replicas_held"], held["peer_cache_bytes"]), (0, 0))
        os.unlink(self.hold)  # the store path goes on as without peers
        wait_durable(CKPTCTL, self.store, JOB, 3, timeout=TIMEOUT,
                     env=dict(os.environ, CKPT_ENCRYPTION_KEY_FILE=self.key))
        self.assertEqual(self.restore(3, peers=False), self.data)


if __name__ == "__main__":
    unittest.main(verbosity=2)
