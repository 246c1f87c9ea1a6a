"""One version per path across nodes' parts
(docs/CONSISTENCY.md, "One version per path"), with real FUSE mounts on one
file:// store and the real ckptctl.

A job writes step-1 through mount B (--node b) and ends; it is resumed on
mount A (--node a), which rewrites step-1/model.bin of the durable step and
adds a loose config.json. Node a's name sorts before b's, so a rule by node
name alone would pick the old version: the revision read from the store
must decide. Every `ckptctl restore` (several runs), `ckptctl verify` and a
third mount (--node c) must give the resumed node's model.bin, and the old
node's files that were not rewritten must still be there.

Then, while mount A is still writing, an external `ckptctl gc --keep-last 1`
deletes step 1: mount A's view (directory and status) must drop it.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import json
import os
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import CKPTCTL, CKPTFS, Mount, MountTestCase, read_status, wait_for  # noqa: E402

JOB = "job"
TIMEOUT = 60  # s: eager publication is 2 s of quiet + the upload; refresh 0.5 s


class VersionsTest(MountTestCase):
    TMP_PREFIX = "ckptfs-ver-"

    def mount(self, name):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node=name,
                  binary=CKPTFS, extra_args=("--refresh", "0.5"))
        self.mounts.append(m)
        m.start()
        return m

    def ctl(self, *args):
        return subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, *args],
                              capture_output=True, text=True, timeout=120)

    def ls(self):
        p = self.ctl("--json", "ls")
        self.assertEqual(p.returncode, 0, p.stderr)
        return {e["step"]: e for e in json.loads(p.stdout or "[]")}

    def write(self, path, data):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_resumed_job_and_external_gc(self):
        old_model, new_model = b"old model " * 5000, b"new model " * 5000
        opt, config = b"optimizer " * 3000, b'{"lr": 0.1}\n'

        b = self.mount("b")
        step1 = os.path.join(b.path, JOB, "step-1")
        self.write(os.path.join(step1, "model.bin"), old_model)
        self.write(os.path.join(step1, "opt.bin"), opt)
        self.write(os.path.join(step1, ".ckpt-complete"), b"")
        wait_for(lambda: self.ls().get(1, {}).get("consistent"), TIMEOUT, "step 1 consistent")
        b.unmount()

        a = self.mount("a")
        resumed = os.path.join(a.path, JOB, "step-1")
        wait_for(lambda: os.path.exists(os.path.join(resumed, "model.bin")), TIMEOUT,
                 "step 1 visible on node a")
        self.assertEqual(self.read(os.path.join(resumed, "model.bin")), old_model)
        self.write(os.path.join(resumed, "model.bin"), new_model)
        self.write(os.path.join(a.path, JOB, "config.json"), config)  # loose: joins step 1
        wait_for(lambda: self.ls().get(1, {}).get("nodes") == 2, TIMEOUT, "node a's part of step 1")
        wait_for(lambda: read_status(a.path)["queue"] == 0 and
                 all(s["state"] == "durable" for s in read_status(a.path)["steps"]),
                 TIMEOUT, "node a idle")
        self.assertEqual(self.ls()[1]["files"], 4, self.ls()[1])

        for run in range(5):
            out = os.path.join(self.tmp, "restore-%d" % run)
            p = self.ctl("restore", "--step", "1", "--to", out)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(self.read(os.path.join(out, "step-1", "model.bin")), new_model,
                             "restore run %d took the shadowed version" % run)
            self.assertEqual(self.read(os.path.join(out, "step-1", "opt.bin")), opt)
            self.assertEqual(self.read(os.path.join(out, "config.json")), config)
        p = self.ctl("verify", "--step", "1")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

        c = self.mount("c")
        third = os.path.join(c.path, JOB, "step-1", "model.bin")
        wait_for(lambda: os.path.exists(third), TIMEOUT, "step 1 visible on node c")
        self.assertEqual(self.read(third), new_model)
        self.assertEqual(self.read(os.path.join(c.path, JOB, "step-1", "opt.bin")), opt)
        c.unmount()

        # A writes step 2 and keeps a file of step 3 open while gc runs.
        step2 = os.path.join(a.path, JOB, "step-2")
        self.write(os.path.join(step2, "model.bin"), b"model 2")
        self.write(os.path.join(step2, ".ckpt-complete"), b"")
        wait_for(lambda: self.ls().get(2, {}).get("consistent"), TIMEOUT, "step 2 consistent")
        os.makedirs(os.path.join(a.path, JOB, "step-3"))
        with open(os.path.join(a.path, JOB, "step-3", "model.bin"), "wb") as writing:
            writing.write(b"partial")
            p = self.ctl("gc", "--keep-last", "1")
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertNotIn(1, self.ls())
            jobdir = os.path.join(a.path, JOB)
            wait_for(lambda: "step-1" not in os.listdir(jobdir), TIMEOUT,
                     "step-1 gone from node a's mount")
            wait_for(lambda: all(s["step"] != 1 for s in read_status(a.path)["steps"]),
                     TIMEOUT, "step 1 gone from node a's status")
            self.assertEqual(self.read(os.path.join(jobdir, "step-2", "model.bin")), b"model 2")
        a.unmount()


if __name__ == "__main__":
    unittest.main(verbosity=2)
