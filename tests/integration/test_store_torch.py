"""End-to-end tests of the store engine through `ckptctl put/get` with real
PyTorch checkpoints (Debian's python3-torch) on a file:// store.

Each test gets a fresh store and state directory under a temp dir.
Run by ctest with CKPTCTL pointing at the built binary.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from mountlib import CKPTCTL, require_binaries, sha256_file, tree_map  # noqa: E402

PYTHON = "/usr/bin/python3"


def count_packs(store_dir):
    n = 0
    for dirpath, _, files in os.walk(store_dir):
        n += sum(1 for f in files if f.endswith(".pack"))
    return n


class StoreTorchTest(unittest.TestCase):
    def setUp(self):
        require_binaries(self, "CKPTCTL")
        self.tmp = tempfile.mkdtemp(prefix="ckpt-it-")
        self.store_dir = os.path.join(self.tmp, "store")
        self.env = dict(os.environ, CKPT_STORE="file://" + self.store_dir, CKPT_JOB="it",
                        XDG_CACHE_HOME=os.path.join(self.tmp, "cache"))

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def torch_ckpt(self, *args):
        out = subprocess.run([PYTHON, os.path.join(HERE, "torch_ckpt.py"), *args],
                             check=True, capture_output=True, text=True, timeout=600).stdout
        return json.loads(out)

    def ckptctl(self, *args, expect=0):
        p = subprocess.run([CKPTCTL, *args], env=self.env, capture_output=True, text=True,
                           timeout=600)
        self.assertEqual(p.returncode, expect, f"ckptctl {' '.join(args)}: {p.stderr}")
        return p

    def put(self, step, src):
        return json.loads(self.ckptctl("--json", "put", "--step", str(step), src).stdout)

    def test_train_put_get_bit_exact(self):
        src = os.path.join(self.tmp, "train")
        info = self.torch_ckpt("train", src, "--steps", "6", "--every", "2")
        self.assertEqual(len(info["files"]), 3)
        put = self.put(6, src)
        self.assertEqual(put["files"], 3)
        dst = os.path.join(self.tmp, "restored")
        got = json.loads(self.ckptctl("--json", "get", "--step", "6", "--to", dst).stdout)
        self.assertEqual(got["files"], 3)
        self.assertEqual(tree_map(src, sha256_file), tree_map(dst, sha256_file))
        # And torch can load what came back, equal to the original.
        check = ("import torch,sys; a=torch.load(sys.argv[1]); b=torch.load(sys.argv[2]);"
                 "assert all(torch.equal(a['model'][k], b['model'][k]) for k in a['model'])")
        name = os.path.basename(info["files"][-1])
        subprocess.run([PYTHON, "-c", check, info["files"][-1], os.path.join(dst, name)],
                       check=True, timeout=300)

    def test_same_directory_twice_adds_no_pack(self):
        src = os.path.join(self.tmp, "train")
        self.torch_ckpt("train", src, "--steps", "4", "--every", "2")
        first = self.put(1, src)
        packs = count_packs(self.store_dir)
        self.assertGreater(packs, 0)
        second = self.put(2, src)
        self.assertEqual(second["packs"], 0)
        self.assertEqual(second["new_bytes"], 0)
        self.assertEqual(count_packs(self.store_dir), packs)
        self.assertEqual(first["bytes"], second["bytes"])

    def test_second_put_of_same_step_is_refused(self):
        src = os.path.join(self.tmp, "train")
        self.torch_ckpt("train", src, "--steps", "2", "--every", "2")
        self.put(1, src)
        p = self.ckptctl("put", "--step", "1", src, expect=5)
        self.assertIn("already exists", p.stderr)

    def test_frozen_backbone_dedups_repeated_bytes(self):
        info = self.torch_ckpt("finetune", os.path.join(self.tmp, "ft"))
        self.put(20, os.path.dirname(info["a"]))
        second = self.put(30, os.path.dirname(info["b"]))
        found = second["bytes"] - second["new_bytes"]
        ratio = found / info["repeated_bytes"]
        print(f"frozen backbone: {found} of {info['repeated_bytes']} repeated bytes found "
              f"({100 * ratio:.1f}%), new {second['new_bytes']} of {second['bytes']}",
              file=sys.stderr)
        self.assertGreaterEqual(ratio, 0.95)

    def test_two_ranks_same_state_stored_once(self):
        info = self.torch_ckpt("ranks", os.path.join(self.tmp, "ranks"))
        put = self.put(3, os.path.join(self.tmp, "ranks"))
        size = info["size"]
        print(f"two ranks: {put['bytes']} logical, {put['new_bytes']} new, "
              f"{put['stored_bytes']} stored", file=sys.stderr)
        # Stored about once: the second rank's file adds at most 1% of its size.
        self.assertLessEqual(put["new_bytes"], size * 1.01)
        self.assertGreaterEqual(put["bytes"], 2 * size)

    def test_ls_lists_committed_steps(self):
        src = os.path.join(self.tmp, "train")
        self.torch_ckpt("train", src, "--steps", "2", "--every", "2")
        self.put(5, src)
        self.put(7, src)
        steps = json.loads(self.ckptctl("--json", "ls").stdout)
        self.assertEqual([s["step"] for s in steps], [5, 7])
        jobs = json.loads(self.ckptctl("--json", "ls", "--job", "it").stdout)
        self.assertEqual([s["step"] for s in jobs], [5, 7])
        env_nojob = dict(self.env)
        del env_nojob["CKPT_JOB"]
        p = subprocess.run([CKPTCTL, "--json", "ls"], env=env_nojob, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), ["it"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
