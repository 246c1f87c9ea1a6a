"""One live daemon per node name (docs/NODES.md), with real ckptfs daemons
and real FUSE mounts on one host (two mounts without distinct --node used to replace
each other's part records):

* a second daemon with a name a live daemon holds refuses to mount, and
  says who holds it;
* the same name with another --node works side by side;
* the holder killed with SIGKILL (a preempted node) and a new daemon with a
  new staging directory on this host takes the name at once, and its steps
  become durable.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import os
import shutil
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (Mount, MountError, file_store_keys, run_torch, tempdir,  # noqa: E402
                      wait_durable, wait_for)

CKPTCTL = os.environ.get("CKPTCTL")
JOB = "job"
SAVE = "import torch,sys; torch.save({'step': int(sys.argv[2]), 'w': torch.ones(64)}, sys.argv[1])"


class NodeLease(unittest.TestCase):
    def setUp(self):
        self.tmp = tempdir("ckptfs-lease-")
        self.store = "file://" + os.path.join(self.tmp, "store")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def mount(self, name, node):
        return Mount(os.path.join(self.tmp, "mnt-" + name), store=self.store,
                     staging=os.path.join(self.tmp, "staging-" + name), node=node)

    def lease_written(self, node):
        return "nodes/%s.lease" % node in file_store_keys(self.store, "nodes/")

    def test_second_live_daemon_is_refused(self):
        with self.mount("a", "dup") as a:
            wait_for(lambda: self.lease_written("dup"), 30, "the first daemon's lease")
            b = self.mount("b", "dup")
            with self.assertRaises(MountError):
                b.start()
            self.assertIn("node name 'dup' is held by another live ckptfs", b.log_text())
            self.assertNotEqual(b.returncode, 0)
            with self.mount("c", "dup2") as c:  # another name: fine
                os.makedirs(os.path.join(c.path, JOB), exist_ok=True)
            os.makedirs(os.path.join(a.path, JOB), exist_ok=True)
            run_torch(SAVE, os.path.join(a.path, JOB, "ckpt-000001.pt"), "1")
            wait_durable(CKPTCTL, self.store, JOB, 1, timeout=120)

    def test_killed_holder_is_replaced_at_once(self):
        a = self.mount("a", "pre")
        try:
            a.start()
            wait_for(lambda: self.lease_written("pre"), 30, "the first daemon's lease")
            a.kill9()  # preempted; its lease is still live by the clock
        finally:
            a.stop()
        with self.mount("new", "pre") as n:  # a new staging disk, the same name
            os.makedirs(os.path.join(n.path, JOB), exist_ok=True)
            run_torch(SAVE, os.path.join(n.path, JOB, "ckpt-000002.pt"), "2")
            wait_durable(CKPTCTL, self.store, JOB, 2, timeout=120)


if __name__ == "__main__":
    unittest.main(verbosity=2)
