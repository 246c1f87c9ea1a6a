"""Sparse files keep their holes (docs/FORMATS.md, version 2: hole
extents): a real FUSE mount, a file:// store whose objects the test weighs.

A trainer preallocates a 4 GiB file through the mount (ftruncate) and writes
a few MB into it (and 2 MiB of real zeros). Once its step is durable:

* the store holds about the data, not 4 GiB (no chunk for a hole, no PUT);
* `ckptctl restore` is byte-identical (hashed by reading both files), the
  result is sparse (st_blocks small) and the restore made a handful of GETs
  (`restore --json`'s count), not one per 1 MiB chunk;
* a second node's mount (empty staging) reads the data and zeros for the
  holes, and its cached copy in staging is sparse too (the holes were not
  fetched or written).

Prints the figures docs/RELIABILITY.md quotes (GETs, bytes, seconds).
Environment: CKPTFS and CKPTCTL name the binaries.
"""
import hashlib
import json
import os
import random
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import CKPTCTL, Mount, MountTestCase, wait_durable  # noqa: E402

JOB = "job"
GIB = 1 << 30
MIB = 1 << 20
SIZE = 4 * GIB
# (offset, length, zeros?): data at the start, in the middle and at the end,
# written zeros at 1 GiB; everything else is a hole.
WRITES = [(0, 3 * MIB, False), (GIB, 2 * MIB, True), (2 * GIB + 12345, MIB, False),
          (SIZE - MIB, MIB, False)]
DATA = 5 * MIB  # bytes that are not zeros


def write_sparse(path):
    rnd = random.Random(12)
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    try:
        os.ftruncate(fd, SIZE)
        for off, n, zeros in WRITES:
            os.pwrite(fd, bytes(n) if zeros else rnd.randbytes(n), off)
    finally:
        os.close(fd)


def digest(path):
    """SHA-256 of the file's bytes, read (holes included) in 16 MiB reads."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(16 * MIB)
            if not b:
                return h.hexdigest()
            h.update(b)


def allocated(path):
    return os.stat(path).st_blocks * 512


def tree_allocated(root):
    return sum(allocated(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files)


class SparseTest(MountTestCase):
    TMP_PREFIX = "ckptfs-sparse-"

    def mount(self, name):
        staging = os.path.join(self.tmp, name + "-staging")
        m = Mount(os.path.join(self.tmp, name), store=self.store, staging=staging, node=name,
                  binary=os.environ["CKPTFS"])
        self.mounts.append(m)
        m.start()
        return m, staging

    def test_4gib_sparse_file_keeps_its_holes(self):
        ref = os.path.join(self.tmp, "reference.bin")
        write_sparse(ref)
        self.assertLess(allocated(ref), 64 * MIB, "the temp file system must keep holes")
        want = digest(ref)

        a, _ = self.mount("a")
        step = os.path.join(a.path, JOB, "step-000001")
        os.makedirs(step)
        t0 = time.monotonic()
        write_sparse(os.path.join(step, "model.bin"))
        open(os.path.join(step, ".ckpt-complete"), "w").close()
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=300)
        t_durable = time.monotonic() - t0

        store_dir = self.store[len("file://"):]
        stored = tree_allocated(store_dir)
        self.assertLess(stored, DATA + 16 * MIB, "the store holds the data, not the holes")

        out = os.path.join(self.tmp, "restored")
        t0 = time.monotonic()
        p = subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, "--json", "restore",
                            "--step", "1", "--to", out],
                           capture_output=True, text=True, timeout=600)
        t_restore = time.monotonic() - t0
        self.assertEqual(p.returncode, 0, p.stderr)
        res = json.loads(p.stdout)
        got = os.path.join(out, "step-000001", "model.bin")
        self.assertEqual(res["bytes"], SIZE)
        self.assertLessEqual(res["gets"], 16, "GETs only for the chunks, none for the holes")
        self.assertLess(allocated(got), 64 * MIB, "the restored file is sparse")
        self.assertEqual(os.path.getsize(got), SIZE)
        self.assertEqual(digest(got), want)

        # A fresh node reads it through its mount: data and zeros, and its
        # cached copy holds no more blocks than the data.
        a.unmount()
        b, b_staging = self.mount("b")
        path = os.path.join(b.path, JOB, "step-000001", "model.bin")
        t0 = time.monotonic()
        with open(path, "rb") as f:
            for off, n, zeros in WRITES:
                f.seek(off)
                with open(ref, "rb") as r:
                    r.seek(off)
                    self.assertEqual(f.read(n), r.read(n), "bytes at %d" % off)
            f.seek(3 * GIB)
            self.assertEqual(f.read(MIB), bytes(MIB), "a hole reads as zeros")
        t_mount_read = time.monotonic() - t0
        self.assertLess(tree_allocated(b_staging), 64 * MIB,
                        "the mount's cached copy is sparse: holes were not fetched")
        print("sparse 4 GiB (%d MiB data): durable in %.1f s, store %.1f MB, restore %d GETs "
              "%.1f s, restored file %.1f MB on disk, mount read %.1f s"
              % (DATA // MIB, t_durable, stored / 1e6, res["gets"], t_restore,
                 allocated(got) / 1e6, t_mount_read))


if __name__ == "__main__":
    unittest.main()
