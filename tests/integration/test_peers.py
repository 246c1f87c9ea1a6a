"""The peer tier (docs/PEERS.md), with real ckptfs daemons, real FUSE
mounts and real PyTorch on one host, each node on its own loopback address
(127.0.0.2 keeps replicas for 127.0.0.1's writer):

* a step the writer replicated while its packs were still held from the
  store (the fault hook `put_hold`) survives its writer: the writer is
  killed with SIGKILL and its staging deleted, and a new node restores the
  step bit-exact with `ckptctl restore`, and reads it through its own
  mount, from the peer; without the secret the step is not seen; with a
  wrong secret the peer refuses it by name;
* a peer copy corrupted on the peer's disk is reported and never served:
  the reader falls back to the store;
* a step that becomes durable leaves no replica record behind;
* over TLS (a throwaway CA made with openssl): a step replicated to a peer
  serving HTTPS is restored from it bit-exact; a writer whose CA did not
  sign the peer's certificate, or that speaks plain HTTP to it, refuses or
  fails it by name and the step is not replicated there; a key file others
  can read keeps the daemon from starting.

Environment: CKPTFS and CKPTCTL name the binaries (a -DCKPT_TEST_HOOKS=ON
build: the hold is a test hook).
"""
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (Mount, MountError, file_store_keys, read_bytes, read_status,  # noqa: E402
                      run_torch, tempdir, wait_durable, wait_for)

CKPTCTL = os.environ.get("CKPTCTL")
JOB = "job"
PEER_ADDR = "127.0.0.2"
SAVE = ("import torch,sys; g=torch.Generator().manual_seed(int(sys.argv[2])); "
        "torch.save({'step': int(sys.argv[2]), 'w': torch.randn(1500000, generator=g), "
        "'m': torch.randn(300000, generator=g)}, sys.argv[1])")


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class Peers(unittest.TestCase):
    def setUp(self):
        self.tmp = tempdir("ckptfs-peers-")
        self.store = "file://" + os.path.join(self.tmp, "store")
        self.secret = self.secret_file("secret", os.urandom(48))
        self.hold = os.path.join(self.tmp, "hold")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def secret_file(self, name, data):
        path = os.path.join(self.tmp, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, data)
        os.close(fd)
        return path

    def staging(self, name):
        return os.path.join(self.tmp, "staging-" + name)

    def mount(self, name, extra, env=None):
        return Mount(os.path.join(self.tmp, "mnt-" + name), store=self.store,
                     staging=self.staging(name), node=name, extra_args=extra, env=env)

    def peer_mount(self, *extra):
        """Node b, keeping replicas on 127.0.0.2 (a free port)."""
        return self.mount("b", ["--peer-listen", PEER_ADDR + ":0",
                                "--peer-secret-file", self.secret, *extra])

    def tls_files(self, ca_name, ip):
        """A throwaway CA (made once per name) and a certificate it signs
        for ip (an IP SAN): (ca.pem, cert.pem, key.pem), the key mode 0600."""
        d = os.path.join(self.tmp, "tls-" + ca_name)
        ca, ca_key = os.path.join(d, "ca.pem"), os.path.join(d, "ca.key")
        cert, key = os.path.join(d, ip + ".pem"), os.path.join(d, ip + ".key")
        csr, ext = os.path.join(d, ip + ".csr"), os.path.join(d, ip + ".ext")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(ca):
            subprocess.run(["openssl", "req", "-x509", *ec, "-keyout", ca_key, "-out", ca,
                            "-days", "2", "-subj", "/CN=ckptfs test CA " + ca_name],
                           check=True, capture_output=True, timeout=30)
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:%s\n" % ip)
        subprocess.run(["openssl", "req", *ec, "-keyout", key, "-out", csr, "-subj", "/CN=" + ip],
                       check=True, capture_output=True, timeout=30)
        subprocess.run(["openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key,
                        "-CAcreateserial", "-out", cert, "-days", "2", "-extfile", ext],
                       check=True, capture_output=True, timeout=30)
        os.chmod(key, 0o600)
        return ca, cert, key

    def peer_addr(self, b):
        """The "addr:port" a started peer mount said it listens on."""
        m = re.search(r"keeping replicas for peers on \S+ \(port (\d+)[,)]", b.log_text())
        self.assertTrue(m, "the peer did not say its port")
        return "%s:%s" % (PEER_ADDR, m.group(1))

    def writer(self, peer, fault, *extra):
        """Node a, replicating to peer; --drain 1: a writer whose store
        refuses its part record does not hold the unmount for a minute."""
        return self.mount("a", ["--peers", peer, "--peer-secret-file", self.secret,
                                "--drain", "1", *extra],
                          env={"CKPT_FAULT": fault})

    def save(self, mount, step):
        """torch.save of step into the mount; returns the bytes saved."""
        os.makedirs(os.path.join(mount.path, JOB), exist_ok=True)
        path = os.path.join(mount.path, JOB, "ckpt-%06d.pt" % step)
        run_torch(SAVE, path, str(step))
        return read_bytes(path)

    def keys(self, prefix):
        return file_store_keys(self.store, "jobs/%s/%s" % (JOB, prefix))

    def replica_records(self, step):
        return [k for k in self.keys("steps/%020d/" % step) if "/replicas/" in k]

    def ckptctl(self, *args, secret=None, ca=None, check=True):
        cmd = [CKPTCTL, "--store", self.store, "--job", JOB,
               "--state-dir", os.path.join(self.tmp, "state")]
        if secret:
            cmd += ["--peer-secret-file", secret]
        if ca:
            cmd += ["--peer-ca-file", ca]
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300)
        if check and p.returncode != 0:
            raise AssertionError("%s: exit %d\n%s" % (" ".join(cmd + list(args)), p.returncode,
                                                      p.stderr))
        return p

    def restore(self, step, secret, check=True, ca=None):
        out = os.path.join(self.tmp, "restored-%d" % step)
        shutil.rmtree(out, ignore_errors=True)
        p = self.ckptctl("restore", "--step", str(step), "--to", out, secret=secret, ca=ca,
                         check=check)
        path = os.path.join(out, "ckpt-%06d.pt" % step)
        return p, (read_bytes(path) if p.returncode == 0 else None)

    def test_replicated_step_survives_its_writer(self):
        open(self.hold, "w").close()  # no pack reaches the store
        with self.peer_mount() as b:
            peer = self.peer_addr(b)
            # A lease that outlives the test: b takes nothing over meanwhile.
            a = self.writer(peer, "put_hold=%s" % self.hold, "--node-lease-ttl", "3600")
            try:
                a.start()
                saved = self.save(a, 100)
                wait_for(lambda: self.replica_records(100), 120, "the replica record")
                self.assertEqual(self.keys("packs/"), {}, "a pack reached the store")
                a.kill9()  # the writer's node is lost before its upload finished
            finally:
                a.stop()
            shutil.rmtree(self.staging("a"))

            # Without the secret only durable steps count: there is none.
            p = self.ckptctl("latest", check=False)
            self.assertNotEqual(p.returncode, 0, p.stdout)

            p, restored = self.restore(100, self.secret)
            self.assertEqual(sha256(restored), sha256(saved))
            p = self.ckptctl("--json", "latest", secret=self.secret)
            self.assertEqual(json.loads(p.stdout)["step"], 100)
            self.assertEqual(json.loads(p.stdout)["restorable"], "replicated")
            p = self.ckptctl("--json", "ls", secret=self.secret)
            row, = json.loads(p.stdout)
            self.assertEqual((row["step"], row["state"], row["restorable"]),
                             (100, "replicated", "replicated"))

            # A wrong secret: the peer refuses it by name, nothing is served.
            wrong = self.secret_file("wrong", os.urandom(48))
            p, restored = self.restore(100, wrong, check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("cluster secret", p.stderr)

            # A new node's mount reads the step from the peer.
            with self.mount("c", ["--peer-secret-file", self.secret]) as c:
                path = os.path.join(c.path, JOB, "ckpt-000100.pt")
                wait_for(lambda: os.path.exists(path), 60, "the replicated step in the mount")
                self.assertEqual(sha256(read_bytes(path)), sha256(saved))
            self.assertEqual(self.keys("packs/"), {}, "the store got a pack from the reader")

    def test_peer_takes_over_a_lost_writer(self):
        open(self.hold, "w").close()  # the writer's packs never reach the store
        with self.peer_mount() as b:
            peer = self.peer_addr(b)
            a = self.writer(peer, "put_hold=%s" % self.hold, "--node-lease-ttl", "2")
            try:
                a.start()
                saved = self.save(a, 400)
                wait_for(lambda: self.replica_records(400), 120, "the replica record")
                a.kill9()
            finally:
                a.stop()
            shutil.rmtree(self.staging("a"))
            # Once a's lease is stale (2 s + 5 s), b publishes the step from
            # its copy: durable for readers that know nothing of peers.
            wait_durable(CKPTCTL, self.store, JOB, 400, timeout=120)
            said = "took over step 400 of job %s from node a" % JOB
            wait_for(lambda: said in b.log_text(), 30, "the peer's word on the takeover")
            self.assertEqual(read_status(b.path)["peers"]["takeovers"], 1)
            self.assertEqual(self.replica_records(400), [])
        p, restored = self.restore(400, None)
        self.assertEqual(sha256(restored), sha256(saved))

    def test_full_peer_cache_refuses_and_the_step_stays_safe(self):
        # A peer that keeps 1 MiB cannot take an 8 MB step: it refuses, the
        # writer says the step is not replicated, and the store path goes on.
        b = self.mount("b", ["--peer-listen", PEER_ADDR + ":0", "--peer-secret-file",
                             self.secret, "--peer-cache-cap", "1M"])
        with b:
            peer = self.peer_addr(b)
            with self.writer(peer, "put_delay_ms=0") as a:
                saved = self.save(a, 500)
                wait_durable(CKPTCTL, self.store, JOB, 500, timeout=120)
                mine = read_status(a.path)["peers"]
                self.assertEqual((mine["parts_replicated"], mine["parts_unreplicated"]), (0, 1))
                self.assertIn("not replicated: 0 of 1 peers took it", a.log_text())
                self.assertGreaterEqual(read_status(b.path)["peers"]["refusals_full"], 1)
            self.assertEqual(self.replica_records(500), [])
        p, restored = self.restore(500, None)
        self.assertEqual(sha256(restored), sha256(saved))

    def test_dead_peer_is_passed_over(self):
        # Two peers named, one copy wanted, one of them dead: the live one
        # holds the replica whichever the ranking put first.
        c = self.mount("c", ["--peer-listen", "127.0.0.3:0", "--peer-secret-file", self.secret])
        with self.peer_mount() as b, c:
            peers = [self.peer_addr(b), re.sub(r"^[^:]*", "127.0.0.3", self.peer_addr(c))]
            b.kill9()
            open(self.hold, "w").close()
            with self.writer(",".join(peers), "put_hold=%s" % self.hold) as a:
                self.save(a, 600)
                wait_for(lambda: self.replica_records(600), 120, "the replica record")
                self.assertEqual(read_status(c.path)["peers"]["replicas_held"], 1)
                os.unlink(self.hold)
                wait_durable(CKPTCTL, self.store, JOB, 600, timeout=120)
            b.stop()

    def test_failure_domains(self):
        # The writer's rack holds b; c is in another: only c may take it.
        b = self.mount("b", ["--peer-listen", PEER_ADDR + ":0", "--peer-secret-file",
                             self.secret, "--failure-domain", "rack1"])
        c = self.mount("c", ["--peer-listen", "127.0.0.3:0", "--peer-secret-file", self.secret,
                             "--failure-domain", "rack2"])
        with b, c:
            peers = [self.peer_addr(b), re.sub(r"^[^:]*", "127.0.0.3", self.peer_addr(c))]
            with self.writer(",".join(peers), "put_delay_ms=0", "--failure-domain", "rack1",
                             "--replicas", "2") as a:
                self.save(a, 700)
                wait_durable(CKPTCTL, self.store, JOB, 700, timeout=120)
                # Two wanted, one domain besides the writer's: one holder.
                self.assertIn("not replicated: 1 of 2 peers took it", a.log_text())
            self.assertEqual(read_status(b.path)["peers"]["replicas_held"], 0)
            self.assertEqual(read_status(c.path)["peers"]["replicas_held"], 1)

    def test_corrupt_peer_copy_is_not_served(self):
        with self.peer_mount() as b:
            peer = self.peer_addr(b)
            # Packs reach the store, the part record never does: replicated,
            # not durable, every pack in both places.
            a = self.writer(peer, "fail_key=.commit")
            with a:
                saved = self.save(a, 200)
                wait_for(lambda: self.replica_records(200), 120, "the replica record")
                held = [os.path.join(d, f)
                        for d, _, fs in os.walk(os.path.join(self.staging("b"), "peer", "packs"))
                        for f in fs]
                self.assertTrue(held, "the peer holds no pack")
                wait_for(lambda: len(self.keys("packs/")) >= len(held), 120,
                         "the packs in the store")
                for path in held:  # the peer's disk goes bad
                    with open(path, "r+b") as f:
                        f.seek(os.path.getsize(path) // 2)
                        byte = f.read(1)
                        f.seek(-1, os.SEEK_CUR)
                        f.write(bytes([byte[0] ^ 0xFF]))
                p, restored = self.restore(200, self.secret)
                self.assertEqual(sha256(restored), sha256(saved))
                for path in held:  # found at the read and dropped, never served
                    self.assertFalse(os.path.exists(path), path)

    def test_durable_step_leaves_no_replica_record(self):
        with self.peer_mount() as b:
            peer = self.peer_addr(b)
            with self.writer(peer, "put_delay_ms=0") as a:
                saved = self.save(a, 300)
                wait_durable(CKPTCTL, self.store, JOB, 300, timeout=120)
                wait_for(lambda: not self.replica_records(300), 60,
                         "the replica record to go")
                self.assertIn("replicated on 1 peer", a.log_text())
                mine = read_status(a.path)["peers"]
                self.assertEqual((mine["replicas"], mine["parts_replicated"]), (1, 1))
                self.assertGreater(mine["bytes_sent"], 1 << 20)
                with open(os.path.join(a.path, ".ckptfs", "metrics")) as f:
                    self.assertIn("\nckptfs_replicated_parts_total 1\n", f.read())
                held = read_status(b.path)["peers"]
                self.assertEqual(held["replicas_held"], 1)
                self.assertGreater(held["peer_cache_bytes"], 1 << 20)
            p, restored = self.restore(300, None)
            self.assertEqual(sha256(restored), sha256(saved))
            p = self.ckptctl("--json", "ls", secret=self.secret)
            row, = json.loads(p.stdout)
            self.assertEqual((row["step"], row["state"], row["restorable"]),
                             (300, "consistent", "durable"))


    def test_tls_replicated_step_restores_from_peer(self):
        ca, cert, key = self.tls_files("ca", PEER_ADDR)
        open(self.hold, "w").close()  # no pack reaches the store
        with self.peer_mount("--peer-tls-cert", cert, "--peer-tls-key", key) as b:
            peer = "https://" + self.peer_addr(b)
            a = self.writer(peer, "put_hold=%s" % self.hold, "--node-lease-ttl", "3600",
                            "--peer-ca-file", ca)
            try:
                a.start()
                saved = self.save(a, 900)
                wait_for(lambda: self.replica_records(900), 120, "the replica record")
                self.assertEqual(self.keys("packs/"), {}, "a pack reached the store")
                a.kill9()  # the step now lives on the peer alone
            finally:
                a.stop()
            shutil.rmtree(self.staging("a"))
            self.assertEqual(read_status(b.path)["peers"]["replicas_held"], 1)

            p, restored = self.restore(900, self.secret, ca=ca)
            self.assertEqual(sha256(restored), sha256(saved))
            # The record names the peer https://: a reader that cannot
            # verify its certificate (the system store) reads nothing from it.
            p, restored = self.restore(900, self.secret, check=False)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("TLS certificate refused", p.stderr)

    def test_tls_peer_refused_by_another_ca_and_by_plain_http(self):
        _, cert, key = self.tls_files("ca", PEER_ADDR)
        other_ca, _, _ = self.tls_files("other", PEER_ADDR)
        with self.peer_mount("--peer-tls-cert", cert, "--peer-tls-key", key) as b:
            addr = self.peer_addr(b)
            # The one TLS peer named twice: over https with a CA that did not
            # sign its certificate, and as plain HTTP.
            with self.writer("https://%s,%s" % (addr, addr), "put_delay_ms=0",
                             "--peer-ca-file", other_ca) as a:
                self.save(a, 950)
                said = "not replicated: 0 of 1 peers took it"
                wait_for(lambda: said in a.log_text(), 120, "the writer's word")
                log = a.log_text()
                self.assertIn("peer at https://%s: hello: TLS certificate refused" % addr, log)
                self.assertIn("peer at %s: hello:" % addr, log)
                self.assertIn("drops plain HTTP: name it https://%s" % addr, log)
                self.assertEqual(read_status(a.path)["peers"]["parts_unreplicated"], 1)
                wait_durable(CKPTCTL, self.store, JOB, 950, timeout=120)
            self.assertEqual(read_status(b.path)["peers"]["replicas_held"], 0)
        self.assertEqual(self.replica_records(950), [])

    def test_tls_key_readable_by_others_is_refused(self):
        _, cert, key = self.tls_files("ca", PEER_ADDR)
        os.chmod(key, 0o644)
        b = self.peer_mount("--peer-tls-cert", cert, "--peer-tls-key", key)
        with self.assertRaises(MountError):
            b.start()
        self.assertEqual(b.returncode, 2)
        self.assertIn("peer TLS key file %s: mode 0644 lets group or others read it" % key,
                      b.log_text())
        self.assertNotIn("PRIVATE KEY", b.log_text())


if __name__ == "__main__":
    unittest.main(verbosity=2)
