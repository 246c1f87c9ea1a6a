"""Fault tests of the ckptfs mount on Ceph RGW (run under tests/s3/with_rgw.sh,
which starts the cluster and sets RGW_DIR, the endpoint, the keys and
CKPT_TEST_STORE_URL):

* radosgw stopped in the middle of a pack upload and started again: the
  upload in flight fails, is retried, and every step becomes durable.
* the cluster's only OSD stopped for 20 s: radosgw answers, but every
  request stalls (then HTTP 408 after RGW's 10 s rados op timeout). Writers
  never block: saving a checkpoint into the mount takes as long as with a
  healthy store; nothing is durable while the OSD is down; everything is
  once it is back, byte for byte on a second node.

Environment: CKPTFS, CKPTCTL (binaries); RGW_SH (tests/s3/rgw.sh).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from mountlib import Mount, read_status, sha256_file, tempdir, wait_durable, wait_for  # noqa: E402

CKPTFS = os.environ.get("CKPTFS")
CKPTCTL = os.environ.get("CKPTCTL")
RGW_DIR = os.environ.get("RGW_DIR")
RGW_SH = os.path.join(HERE, "rgw.sh")
JOB = "job"
OSD_OUTAGE_S = 20
# A save into the mount goes to local staging: even with the store gone it
# must finish in about the time of a local write. Generous for a loaded CI.
WRITE_BUDGET_S = 10


def rgw(cmd):
    subprocess.run(["bash", RGW_SH, cmd, RGW_DIR], check=True, timeout=120)


def write_step(dirpath, step, size):
    """Writes ckpt-<step>.pt of random bytes; returns (name, sha256, seconds)."""
    data = os.urandom(size)
    name = "ckpt-%06d.pt" % step
    t0 = time.monotonic()
    with open(os.path.join(dirpath, name), "wb") as f:
        f.write(data)
    return name, hashlib.sha256(data).hexdigest(), time.monotonic() - t0


class RgwFaultTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(CKPTFS and os.access(CKPTFS, os.X_OK), "CKPTFS must name the binary")
        self.assertTrue(CKPTCTL and os.access(CKPTCTL, os.X_OK), "CKPTCTL must name the binary")
        self.assertTrue(RGW_DIR and os.path.isdir(RGW_DIR), "run under tests/s3/with_rgw.sh")
        store = os.environ.get("CKPT_TEST_STORE_URL", "")
        self.assertTrue(store.startswith("s3://"), "CKPT_TEST_STORE_URL must be s3://")
        self.tmp = tempdir()
        self.store = store.rstrip("/") + "/" + os.path.basename(self.tmp)
        self.mounts = []
        self.down = None

    def tearDown(self):
        # Whatever failed, the cluster is whole again for the next test.
        if self.down:
            rgw("start-" + self.down)
        for m in self.mounts:
            m.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def mount(self, name, env=None):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node=name,
                  binary=CKPTFS, extra_args=("--refresh", "1"), env=env)
        self.mounts.append(m)
        return m.start()

    def stop(self, what):
        rgw("stop-" + what)
        self.down = what

    def start(self, what):
        rgw("start-" + what)
        self.down = None

    def verify_on_new_node(self, ref):
        b = self.mount("reader")
        for name, digest in ref.items():
            self.assertEqual(sha256_file(os.path.join(b.path, JOB, name)), digest, name)

    def test_radosgw_restart_mid_upload(self):
        # Slow PUTs (the daemon's test hook) widen the window, so the stop
        # lands while a pack upload is in flight.
        m = self.mount("a", env={"CKPT_FAULT": "put_delay_ms=300"})
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        ref = {}
        for step in (1, 2):
            name, digest, _ = write_step(d, step, 30 << 20)
            ref[name] = digest
        wait_for(lambda: any(s["state"] == "uploading" for s in read_status(m.path)["steps"]),
                 60, "a step uploading")
        self.stop("rgw")
        # The store is gone: a save still completes at local speed.
        name, digest, took = write_step(d, 3, 20 << 20)
        ref[name] = digest
        self.assertLess(took, WRITE_BUDGET_S, "a save blocked while radosgw was down")
        time.sleep(5)
        st = read_status(m.path)
        self.assertNotEqual([s["state"] for s in st["steps"]].count("durable"), 3, st)
        self.start("rgw")
        for step in (1, 2, 3):
            wait_durable(CKPTCTL, self.store, JOB, step, timeout=240)
        self.assertNotIn(os.environ["AWS_SECRET_ACCESS_KEY"], json.dumps(read_status(m.path)))
        m.unmount()
        self.verify_on_new_node(ref)

    def test_osd_stopped_20s(self):
        m = self.mount("a")
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        ref = {}
        name, digest, _ = write_step(d, 1, 8 << 20)
        ref[name] = digest
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=120)

        self.stop("osd")
        t_down = time.monotonic()
        for step in (2, 3):
            name, digest, took = write_step(d, step, 20 << 20)
            ref[name] = digest
            self.assertLess(took, WRITE_BUDGET_S, "a save blocked while the OSD was down")
        # Reads of a durable step come from the local copy or stall in the
        # store; listing the mount never blocks on the store.
        t0 = time.monotonic()
        self.assertIn("ckpt-000001.pt", os.listdir(d))
        self.assertLess(time.monotonic() - t0, WRITE_BUDGET_S, "readdir blocked on the store")
        time.sleep(max(0.0, OSD_OUTAGE_S - (time.monotonic() - t_down)))
        st = read_status(m.path)
        states = {s["step"]: s["state"] for s in st["steps"] if s["job"] == JOB}
        self.assertNotEqual(states.get(3), "durable", st)
        self.start("osd")
        for step in (2, 3):
            wait_durable(CKPTCTL, self.store, JOB, step, timeout=240)
        m.unmount()
        self.verify_on_new_node(ref)


if __name__ == "__main__":
    unittest.main(verbosity=2)
