"""Restoring from peers alone (docs/PEERS.md, "Restoring from peers
alone"), with real ckptfs daemons, a real FUSE mount per node and a real
s3rver over HTTP:

* a writer (node a) replicates a step to a peer (node b, on 127.0.0.2)
  while its pack PUTs are held from the store (the fault hook `put_hold`):
  the step is replicated, not durable; the peer holds the replica record;
* the writer is killed (SIGKILL) and its staging deleted; the store
  (s3rver) is stopped by its PID;
* a new node restores the step bit-exact with `ckptctl restore --peers`
  from the peer alone, labelled so in its output and --json; `ls --json`
  lists it as `replicated (store unreachable)`;
* a wrong secret is refused by name (exit 3); with no peer answering
  either, "no peer answered" and exit 3;
* a new node's mount, the store still down, lists the step from the peer
  alone and reads it bit-exact.

Every ckptctl call with the store down first spends the backend's retry
bound on the store (about 40 s): that is the rule a reader falls back by.
Servers and mounts are the test's own and are stopped by PID (mountlib
unmounts in every exit path; s3rver.sh --owner stops the server if this
process dies). Environment: CKPTFS, CKPTCTL (a -DCKPT_TEST_HOOKS=ON build).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_peers  # noqa: E402
from mountlib import Mount, read_bytes, tempdir, wait_for  # noqa: E402
from test_store_outage import S3RVER_SH, closed_port, ctl_env, store_env  # noqa: E402

CKPTCTL = os.environ.get("CKPTCTL")
JOB = test_peers.JOB
STEP = 100
ALONE = "replicated (store unreachable)"

work = None
s3dir = None
endpoint = None


def setUpModule():
    global work, s3dir, endpoint
    work = tempdir("ckpt-peers-alone-")
    s3dir = os.path.join(work, "s3rver")
    out = subprocess.run(["bash", S3RVER_SH, "start", s3dir, "--owner", str(os.getpid()),
                          "--bucket", "ckpt-test"],
                         check=True, capture_output=True, text=True, timeout=400)
    endpoint = "http://127.0.0.1:%d" % int(out.stdout.strip())


def stop_store():
    """Stops s3rver by the PID its script recorded (idempotent)."""
    subprocess.run(["bash", S3RVER_SH, "stop", s3dir], check=True, timeout=60)


def tearDownModule():
    if s3dir:
        subprocess.run(["bash", S3RVER_SH, "stop", s3dir], timeout=60)
    if work:
        shutil.rmtree(work, ignore_errors=True)


class PeersAlone(unittest.TestCase):
    # The peer tier's own helpers (test_peers.py), on this test's nodes.
    secret_file = test_peers.Peers.secret_file
    staging = test_peers.Peers.staging
    peer_addr = test_peers.Peers.peer_addr
    save = test_peers.Peers.save

    def setUp(self):
        self.tmp = tempdir("ckpt-peers-alone-t-")
        self.store = "s3://ckpt-test/alone"
        self.secret = self.secret_file("secret", os.urandom(48))
        self.hold = os.path.join(self.tmp, "hold")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def mount(self, name, extra, fault=None):
        env = store_env(endpoint)
        if fault:
            env["CKPT_FAULT"] = fault
        return Mount(os.path.join(self.tmp, "mnt-" + name), store=self.store,
                     staging=self.staging(name), node=name,
                     extra_args=["--drain", "1", *extra], env=env, timeout=120)

    def ckptctl(self, peers, secret, *args):
        cmd = [CKPTCTL, "--store", self.store, "--job", JOB, "--node", "c",
               "--state-dir", os.path.join(self.tmp, "state-c"),
               "--peers", peers, "--peer-secret-file", secret, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env=ctl_env(endpoint))

    def peer_record(self):
        """The replica record the peer keeps (docs/PEERS.md: once the store
        took it, the writer sends it to every holder)."""
        return glob.glob(os.path.join(self.staging("b"), "peer", "parts", JOB, "%020d" % STEP,
                                      "a.r*.record"))

    def test_new_node_restores_from_the_peer_alone(self):
        open(self.hold, "w").close()  # no pack reaches the store
        b = self.mount("b", ["--peer-listen", test_peers.PEER_ADDR + ":0",
                             "--peer-secret-file", self.secret])
        a = None
        try:
            b.start()
            peer = self.peer_addr(b)
            # A lease that outlives the test: b takes nothing over meanwhile.
            a = self.mount("a", ["--peers", peer, "--peer-secret-file", self.secret,
                                 "--node-lease-ttl", "3600"], fault="put_hold=%s" % self.hold)
            a.start()
            saved = self.save(a, STEP)
            wait_for(self.peer_record, 120, "the replica record on the peer")
            a.kill9()  # the writer's node is lost before its upload finished
            shutil.rmtree(self.staging("a"))
            stop_store()

            out = os.path.join(self.tmp, "restored")
            p = self.ckptctl(peer, self.secret, "--json", "restore", "--step", str(STEP),
                             "--to", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(json.loads(p.stdout)["restorable"], ALONE)
            self.assertIn("the store cannot be reached", p.stderr)
            restored = read_bytes(os.path.join(out, "ckpt-%06d.pt" % STEP))
            self.assertEqual(test_peers.sha256(restored), test_peers.sha256(saved))

            p = self.ckptctl(peer, self.secret, "--json", "ls")
            self.assertEqual(p.returncode, 0, p.stderr)
            row, = json.loads(p.stdout)
            self.assertEqual((row["step"], row["state"], row["restorable"]), (STEP, ALONE, ALONE))

            wrong = self.secret_file("wrong", os.urandom(48))
            p = self.ckptctl(peer, wrong, "ls")
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("refused this node's cluster secret", p.stderr)

            p = self.ckptctl("127.0.0.2:%d" % closed_port(), self.secret, "latest")
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("no peer answered", p.stderr)

            # A new node's mount, the store still down, lists the step from
            # the peer alone and reads it bit-exact from there.
            c = self.mount("c", ["--peers", peer, "--peer-secret-file", self.secret])
            try:
                c.start()
                path = os.path.join(c.path, JOB, "ckpt-%06d.pt" % STEP)
                wait_for(lambda: os.path.exists(path), 180, "the step listed from the peer")
                self.assertEqual(test_peers.sha256(read_bytes(path)), test_peers.sha256(saved))
                self.assertIn("from the peers alone", c.log_text())
            finally:
                c.stop()
        finally:
            if a:
                a.stop()
            b.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
