"""Small files share bundles (docs/FORMATS.md, manifest version 3;
docs/CHUNKING.md, "Small files in bundles"): a file:// store whose objects
the test weighs.

* `ckptctl put` of 77,000 files of 64 random bytes stores at most 1.1 times
  their bytes plus a per-step constant (64 KiB), where one chunk and one
  manifest entry per file cost 2.3 times;
* the same step put again with one file changed stores about that file's
  bundle and a new manifest, not the step again;
* `ckptctl restore` of each step is byte-identical with a GET per bundle,
  not per file, and `ckptctl verify` passes;
* through a mount: 5,000 files of 64 bytes written by a trainer are stored
  within the same bound once durable, and a new node's mount reads every
  one of them byte-identical.

Prints the figures docs/BENCHMARKS.md quotes ("Small files").
Environment: CKPTFS and CKPTCTL name the binaries.
"""
import json
import os
import random
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, Mount, MountTestCase, file_store_keys,  # noqa: E402
                      wait_durable)

JOB = "job"
FILE_LEN = 64
PUT_FILES = 77000
MOUNT_FILES = 5000
STEP_CONSTANT = 64 << 10  # manifest header, part record, commit marker, last pack's tail
BUNDLE_MAX = 64 << 10     # docs/FORMATS.md: a bundle never passes 64 KiB


def tiny_name(i):
    """rank-like directories of 1,000 shards each, as a sharded save lays them out."""
    return "rank%03d/shard_%05d.bin" % (i // 1000, i)


def write_tiny_files(root, n, rnd):
    """n files of FILE_LEN random bytes under root; returns {relpath: bytes}."""
    want = {}
    for i in range(n):
        rel = tiny_name(i)
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = rnd.randbytes(FILE_LEN)
        with open(path, "wb") as f:
            f.write(data)
        want[rel] = data
    return want


def stored_bytes(store_url):
    return sum(file_store_keys(store_url).values())


def pack_bytes(store_url):
    return sum(n for k, n in file_store_keys(store_url).items() if k.endswith(".pack"))


class SmallFilesTest(MountTestCase):
    TMP_PREFIX = "ckptfs-small-"

    def ckptctl(self, *args, timeout=600):
        p = subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, "--state-dir",
                            os.path.join(self.tmp, "state"), "--json"] + list(args),
                           capture_output=True, text=True, timeout=timeout)
        self.assertEqual(p.returncode, 0, "ckptctl %s: %s" % (" ".join(args), p.stderr))
        return json.loads(p.stdout)

    def assert_restored(self, step, want, max_gets):
        out = os.path.join(self.tmp, "restored-%d" % step)
        res = self.ckptctl("restore", "--step", str(step), "--to", out)
        self.assertEqual(res["files"], len(want))
        for rel, data in want.items():
            with open(os.path.join(out, rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)
        self.assertLessEqual(res["gets"], max_gets, "a GET per bundle, not per file")
        return res["gets"]

    def test_put_77000_tiny_files(self):
        rnd = random.Random(32)
        src = self.tmp_dir("src")
        want = write_tiny_files(src, PUT_FILES, rnd)
        logical = PUT_FILES * FILE_LEN

        put1 = self.ckptctl("put", "--step", "1", src)
        self.assertEqual(put1["files"], PUT_FILES)
        stored1 = stored_bytes(self.store)
        ratio = stored1 / logical
        self.assertLessEqual(stored1, 1.1 * logical + STEP_CONSTANT,
                             "stored %d bytes for %d (%.3fx)" % (stored1, logical, ratio))
        # A bundle holds 16 to 64 KiB: at least 75, at most ~310 of them here.
        self.assertLessEqual(put1["new_chunks"], logical // (16 << 10) + 1)

        # One file changed: its bundle again (its neighbours' bundles
        # deduplicate), and a new manifest.
        changed = tiny_name(PUT_FILES // 2)
        want[changed] = rnd.randbytes(FILE_LEN)
        with open(os.path.join(src, changed), "wb") as f:
            f.write(want[changed])
        packs1 = pack_bytes(self.store)
        self.ckptctl("put", "--step", "2", src)
        stored2 = stored_bytes(self.store)
        new_packs = pack_bytes(self.store) - packs1
        self.assertLessEqual(new_packs, 2 * BUNDLE_MAX + STEP_CONSTANT,
                             "one changed file stored %d new pack bytes" % new_packs)

        gets = self.assert_restored(2, want, max_gets=put1["new_chunks"] + 8)
        verify = self.ckptctl("verify", "--step", "2")
        self.assertIs(verify["ok"], True, verify)
        print("small files: %d x %d B put: stored %d B (%.3fx logical), %d bundles; "
              "one file changed: +%d B (+%d B of packs); restore %d GETs"
              % (PUT_FILES, FILE_LEN, stored1, ratio, put1["new_chunks"], stored2 - stored1,
                 new_packs, gets))

    def test_mount_5000_tiny_files(self):
        rnd = random.Random(5)
        a = Mount(os.path.join(self.tmp, "a"), store=self.store,
                  staging=os.path.join(self.tmp, "a-staging"), node="a",
                  binary=os.environ["CKPTFS"])
        self.start_mount(a, JOB)
        step = os.path.join(a.path, JOB, "step-000001")
        os.makedirs(step)
        want = write_tiny_files(step, MOUNT_FILES, rnd)
        open(os.path.join(step, ".ckpt-complete"), "w").close()
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=300)
        logical = MOUNT_FILES * FILE_LEN
        stored = stored_bytes(self.store)
        self.assertLessEqual(stored, 1.1 * logical + STEP_CONSTANT,
                             "stored %d bytes for %d through the mount" % (stored, logical))
        a.unmount()

        b = Mount(os.path.join(self.tmp, "b"), store=self.store,
                  staging=os.path.join(self.tmp, "b-staging"), node="b",
                  binary=os.environ["CKPTFS"])
        self.start_mount(b, JOB)
        for rel, data in want.items():
            with open(os.path.join(b.path, JOB, "step-000001", rel), "rb") as f:
                self.assertEqual(f.read(), data, rel)
        print("small files through the mount: %d x %d B: stored %d B (%.3fx logical)"
              % (MOUNT_FILES, FILE_LEN, stored, stored / logical))


if __name__ == "__main__":
    unittest.main()
