"""Deleting steps through the mount, and the daemon's background GC
(docs/MOUNT.md "Deleting steps" and "Background GC"): real FUSE mounts, real
torch.save, a file:// store whose objects the tests look at directly.

* HF Trainer-style rotation (shutil.rmtree of checkpoint-N) deletes the step
  from the store, every object under its prefix;
* the newest durable step is kept until a newer one is durable (status
  kept_newest_durable, `ckptctl latest` still gives it), then deleted;
* kill -9 after the rmdir returned and before the store deletion: the
  restarted daemon deletes it;
* a step only in the store (written by another mount) is deleted, and the
  other mount stops listing it;
* writing the step again (HF's tmp-checkpoint-N rename) cancels the request;
* rm -r racing the remote view: files another node's part brought into the
  step directory after the remover listed it do not make the rmdir fail;
  files it had listed do (ENOTEMPTY);
* a loose file stored with the deleted step stays and moves to another step;
* --gc-keep-last 2 --gc-interval 1 --gc-grace 1: two steps are left, the
  packs shrink to what they need, and the kept steps restore byte for byte.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import errno
import filecmp
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountTestCase, file_store_keys,  # noqa: E402
                      list_steps, read_status, run_torch, wait_durable, wait_for)

JOB = "job"

# One HF Trainer save: the model with torch.save, then trainer_state.json
# (which completes the step, rule R1), into checkpoint-N/ under the mount
# and, for reference, under a local directory.
HF_SAVE = """
import json, os, sys, torch
mount_job, local, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
steps = [int(s) for s in sys.argv[4:]]
for step in steps:
    torch.manual_seed(seed + step)
    model = torch.nn.Linear(256, 512)
    for root in (mount_job, local):
        d = os.path.join(root, "%s-%d" % (os.environ["CKPT_DIR_WORD"], step))
        os.makedirs(d, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(d, "pytorch_model.bin"))
        with open(os.path.join(d, "trainer_state.json"), "w") as f:
            json.dump({"global_step": step, "seed": seed}, f)
"""


def files_under(root):
    """Paths of the files below root, relative to it, sorted."""
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, files in os.walk(root) for f in files)


def step_prefix(step, job=JOB):
    return "jobs/%s/steps/%020d/" % (job, step)


def job_status(status, job=JOB):
    for j in status.get("jobs", []):
        if j["job"] == job:
            return j
    return {"job": job, "deletions": [], "steps_deleted": 0, "objects_deleted": 0,
            "bytes_freed": 0}


def deletion_state(status, step):
    for d in job_status(status)["deletions"]:
        if d["step"] == step:
            return d["state"]
    return None


class MountCase(MountTestCase):
    """Fresh directories and a file:// store per test; helpers."""

    TMP_PREFIX = "ckptfs-del-"

    def mount(self, name, extra=(), env=None):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node=name, binary=CKPTFS,
                  extra_args=("--refresh", "0.5") + tuple(extra), env=env)
        self.mounts.append(m)
        return m.start()

    def ctl(self, *args, check=True):
        p = subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, *args],
                           capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            self.fail("ckptctl %s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
        return p

    def hf_save(self, m, steps, seed=0, word="checkpoint"):
        """HF-style saves of `steps` through mount m (into WORD-N/); returns
        the local reference directory holding the same files."""
        local = os.path.join(self.tmp, "ref-%d" % seed)
        run_torch(HF_SAVE, os.path.join(m.path, JOB), local, seed, *steps,
                  env={"CKPT_DIR_WORD": word})
        return local

    def mount_with_two_steps(self, extra=(), env=None):
        """Mount "a", save checkpoint-100 and -200 through it, wait until
        200 is durable. Returns (mount, reference directory)."""
        m = self.mount("a", extra=extra, env=env)
        os.mkdir(os.path.join(m.path, JOB))
        ref = self.hf_save(m, [100, 200])
        self.durable(200)
        return m, ref

    def assert_same_tree(self, a, b):
        """The same files below a and b, byte for byte."""
        names = files_under(a)
        self.assertEqual(names, files_under(b))
        match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
        self.assertEqual((mismatch, errors), ([], []))

    def durable(self, step, timeout=120):
        return wait_durable(CKPTCTL, self.store, JOB, step, timeout=timeout)

    def consistent_steps(self):
        return [s["step"] for s in list_steps(CKPTCTL, self.store, JOB)
                if s.get("state") == "consistent"]

    def wait_deleted(self, step, timeout=60):
        """Until the store holds no object of `step` and ls does not list it."""
        def gone():
            keys = file_store_keys(self.store, step_prefix(step))
            listed = [s["step"] for s in list_steps(CKPTCTL, self.store, JOB)]
            return not keys and step not in listed
        wait_for(gone, timeout, "step %d deleted from the store" % step)

    def restore(self, step, name):
        out = os.path.join(self.tmp, name)
        self.ctl("restore", "--step", str(step), "--to", out)
        return out


class MountDeleteTest(MountCase):
    def test_hf_rotation_deletes_old_steps(self):
        m, ref = self.mount_with_two_steps()
        self.durable(100)
        staged = read_status(m.path)["staged_bytes"]
        # save_total_limit=2 after the save of 300 (and =1 after it): rmtree.
        shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-100"))
        self.assertFalse(os.path.exists(os.path.join(m.path, JOB, "checkpoint-100")))
        self.assertLess(read_status(m.path)["staged_bytes"], staged, "staging not freed")
        self.wait_deleted(100)
        self.hf_save(m, [300])
        self.durable(300)
        shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-200"))
        self.wait_deleted(200)
        self.assertEqual(self.consistent_steps(), [300])
        self.assertEqual(sorted(os.listdir(os.path.join(m.path, JOB))), ["checkpoint-300"])
        st = wait_for(lambda: (lambda s: s if job_status(s)["steps_deleted"] == 2 else None)(
            read_status(m.path)), 30, "status counts two deleted steps")
        js = job_status(st)
        self.assertEqual(js["deletions"], [])
        self.assertGreaterEqual(js["objects_deleted"], 4)  # a manifest and a part record each
        self.assertGreater(js["bytes_freed"], 0)
        self.assertNotIn("checkpoint-100", json.dumps(st["steps"]))
        self.assertIn("2 steps", self.ctl("status", "--mount", m.path).stdout)
        restored = self.restore(300, "restored-300")
        self.assertEqual(os.listdir(restored), ["checkpoint-300"])
        self.assert_same_tree(os.path.join(restored, "checkpoint-300"),
                              os.path.join(ref, "checkpoint-300"))

    def test_newest_durable_step_is_kept_until_a_newer_one_is_durable(self):
        # Step 300's manifest and part record cannot be stored: it stays not
        # durable, as on a slow or failing store, until the daemon restarts
        # without the fault.
        fault = {"CKPT_FAULT": "fail_key=steps/%020d/" % 300}
        m, _ = self.mount_with_two_steps(extra=("--drain", "1"), env=fault)
        shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-100"))
        self.wait_deleted(100)
        self.hf_save(m, [300])
        # HF with save_total_limit=1 deletes 200 right after saving 300.
        shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-200"))
        self.assertFalse(os.path.exists(os.path.join(m.path, JOB, "checkpoint-200")))
        wait_for(lambda: deletion_state(read_status(m.path), 200) == "kept_newest_durable", 90,
                 "step 200 reported as kept_newest_durable")
        self.assertEqual(self.ctl("latest").stdout.strip(), "200")
        self.assertTrue(file_store_keys(self.store, step_prefix(200)))
        text = self.ctl("status", "--mount", m.path).stdout
        self.assertIn("newest durable", text)
        m.assert_fault_fired()
        # The request survives a restart; without the fault 300 becomes
        # durable and then 200 goes.
        m.unmount()
        m.env = None
        m.start()
        self.assertFalse(os.path.exists(os.path.join(m.path, JOB, "checkpoint-200")))
        self.durable(300)
        self.wait_deleted(200)
        self.assertEqual(self.ctl("latest").stdout.strip(), "300")
        wait_for(lambda: not job_status(read_status(m.path))["deletions"], 30,
                 "no deletion left pending")

    def test_kill9_after_rmdir_before_store_deletion(self):
        m, _ = self.mount_with_two_steps()
        m.unmount()
        # Slow PUTs: the uploader is busy with step 300 while 100 is removed;
        # the deletion waits for it (same thread), and the daemon dies first.
        m.env = {"CKPT_FAULT": "put_delay_ms=3000"}
        m.start()
        self.hf_save(m, [300])
        wait_for(lambda: any(s["step"] == 300 and s["state"] == "uploading"
                             for s in read_status(m.path)["steps"]), 60, "step 300 uploading")
        shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-100"))
        self.assertEqual(deletion_state(read_status(m.path), 100), "pending")
        self.assertTrue(file_store_keys(self.store, step_prefix(100)), "deleted too early")
        m.assert_fault_fired()
        m.kill9()
        self.assertIn(100, self.consistent_steps())
        m.env = None
        m.start()
        self.assertFalse(os.path.exists(os.path.join(m.path, JOB, "checkpoint-100")))
        self.wait_deleted(100)
        self.durable(300)
        self.assertEqual(self.consistent_steps(), [200, 300])

    def test_step_only_in_the_store_is_deleted(self):
        b = self.mount("b")
        os.mkdir(os.path.join(b.path, JOB))
        ref = self.hf_save(b, [50, 60])
        self.durable(60)
        self.durable(50)
        a = self.mount("a")
        d = os.path.join(a.path, JOB, "checkpoint-50")
        wait_for(lambda: os.path.exists(os.path.join(d, "trainer_state.json")), 30,
                 "step 50 listed on a")
        self.assert_same_tree(d, os.path.join(ref, "checkpoint-50"))
        shutil.rmtree(d)
        self.wait_deleted(50)
        self.assertEqual(self.consistent_steps(), [60])
        # The writer's mount stops listing it too (its refresher).
        wait_for(lambda: not os.path.exists(os.path.join(b.path, JOB, "checkpoint-50")), 30,
                 "step 50 gone from mount b")
        self.assertTrue(os.path.exists(os.path.join(b.path, JOB, "checkpoint-60",
                                                    "pytorch_model.bin")))

    def test_rmdir_ignores_remote_files_added_after_the_listing(self):
        a, b = self.mount("a"), self.mount("b")
        os.mkdir(os.path.join(a.path, JOB))
        os.makedirs(os.path.join(b.path, JOB), exist_ok=True)

        def write_rank(m, step, rank):
            d = os.path.join(m.path, JOB, "step-%06d" % step)
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, "rank-%d.bin" % rank), "wb") as f:
                f.write(os.urandom(4096))
            with open(os.path.join(m.path, ".ckptfs", "commit"), "w") as f:
                f.write("%s %d %d 2\n" % (JOB, step, rank))
            return d

        def merged_on_a(step):
            # A lookup by name, not a listing: the directory stays unlisted.
            path = os.path.join(a.path, JOB, "step-%06d" % step, "rank-1.bin")
            wait_for(lambda: os.path.exists(path), 30, "rank 1 of step %d shown on a" % step)

        # Step 5: a lists its directory, then node B's part makes the step
        # consistent and a's refresher adds rank-1.bin: rm -r's rmdir works.
        d5 = write_rank(a, 5, 0)
        self.assertEqual(os.listdir(d5), ["rank-0.bin"])
        write_rank(b, 5, 1)
        self.durable(5)
        merged_on_a(5)
        os.unlink(os.path.join(d5, "rank-0.bin"))
        os.rmdir(d5)
        self.assertFalse(os.path.exists(d5))
        wait_for(lambda: deletion_state(read_status(a.path), 5), 10, "request for step 5")

        # Step 6: the same, but a lists the directory after rank-1.bin came:
        # the remover saw it and left it, so rmdir must fail.
        d6 = write_rank(a, 6, 0)
        write_rank(b, 6, 1)
        self.durable(6)
        merged_on_a(6)
        self.assertEqual(sorted(os.listdir(d6)), ["rank-0.bin", "rank-1.bin"])
        os.unlink(os.path.join(d6, "rank-0.bin"))
        with self.assertRaises(OSError) as cm:
            os.rmdir(d6)
        self.assertEqual(cm.exception.errno, errno.ENOTEMPTY)
        self.assertEqual(os.listdir(d6), ["rank-1.bin"])
        # Step 5 is no longer the newest durable step: it leaves the store.
        self.wait_deleted(5)

    def test_writing_the_step_again_cancels_the_deletion(self):
        m, _ = self.mount_with_two_steps()
        shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-200"))  # the newest: kept
        wait_for(lambda: deletion_state(read_status(m.path), 200) == "kept_newest_durable", 60,
                 "step 200 kept")
        # A job resumed from step 100 saves 200 again, the newer-HF way:
        # tmp-checkpoint-200/ renamed to checkpoint-200/.
        ref = self.hf_save(m, [200], seed=7, word="tmp-checkpoint")
        os.rename(os.path.join(m.path, JOB, "tmp-checkpoint-200"),
                  os.path.join(m.path, JOB, "checkpoint-200"))
        self.assertIsNone(deletion_state(read_status(m.path), 200))
        wait_for(lambda: any(s["step"] == 200 and s["state"] == "durable" and s["revision"] >= 2
                             for s in read_status(m.path)["steps"]), 60, "step 200 stored again")
        restored = self.restore(200, "restored-200")
        self.assert_same_tree(os.path.join(restored, "checkpoint-200"),
                              os.path.join(ref, "tmp-checkpoint-200"))
        self.assertEqual(self.consistent_steps(), [100, 200])

    def test_loose_file_of_a_deleted_step_moves_to_another_step(self):
        m = self.mount("a")
        job = os.path.join(m.path, JOB)
        os.mkdir(job)
        code = ("import torch, sys, os\n"
                "job = sys.argv[1]\n"
                "torch.save({'w': torch.randn(64, 64)}, os.path.join(job, 'ckpt-000001.pt'))\n"
                "open(os.path.join(job, 'config.json'), 'w').write('{\"lr\": 0.1}')\n")
        run_torch(code, job)
        self.durable(1)
        wait_for(lambda: any(s["step"] == 1 and s["state"] == "durable" and s["revision"] >= 2
                             for s in read_status(m.path)["steps"]), 30,
                 "config.json stored with step 1 (R6)")
        for step in (2, 3):
            run_torch("import torch, sys; torch.save({'w': torch.randn(64, 64)}, sys.argv[1])",
                      os.path.join(job, "ckpt-%06d.pt" % step))
            self.durable(step)
        os.remove(os.path.join(job, "ckpt-000001.pt"))
        self.wait_deleted(1)
        with open(os.path.join(job, "config.json")) as f:
            self.assertEqual(f.read(), '{"lr": 0.1}')
        restored = self.restore(3, "restored-3")
        self.assertEqual(sorted(os.listdir(restored)), ["ckpt-000003.pt", "config.json"])
        with open(os.path.join(restored, "config.json")) as f:
            self.assertEqual(f.read(), '{"lr": 0.1}')


class BackgroundGcTest(MountCase):
    def test_background_gc_keeps_last_two(self):
        m = self.mount("a", extra=("--gc-keep-last", "2", "--gc-interval", "1", "--gc-grace",
                                   "1"))
        job = os.path.join(m.path, JOB)
        os.mkdir(job)
        ref = self.tmp_dir("ref")
        # A training run saving a flat step of 2 MiB of fresh random weights
        # every 1.5 s while GC runs every second. Only torch.save's small
        # framing chunks are shared between steps: they live in the first
        # step's pack, which GC retires once mostly dead, and the next saves
        # store them again (docs/GC.md, repack), so that pack goes too.
        code = ("import torch, sys, os, time\n"
                "for step in range(1, 9):\n"
                "    torch.manual_seed(step)\n"
                "    s = {'w': torch.randn(512, 1024)}\n"
                "    for d in sys.argv[1:]:\n"
                "        torch.save(s, os.path.join(d, 'ckpt-%06d.pt' % step))\n"
                "    time.sleep(1.5)\n")
        run_torch(code, job, ref)
        step_bytes = os.path.getsize(os.path.join(ref, "ckpt-000008.pt"))
        self.durable(8, timeout=120)

        def packs():
            return sum(file_store_keys(self.store, "jobs/%s/packs/" % JOB).values())
        wait_for(lambda: self.consistent_steps() == [7, 8], 120, "only steps 7 and 8 left")
        # The packs of steps 1-6 are marked, then deleted a grace period later.
        wait_for(lambda: packs() <= 2.2 * step_bytes, 120,
                 "packs shrink to what two steps need (%d bytes each)" % step_bytes)
        self.assertGreater(packs(), step_bytes, "the kept steps' packs are gone")
        gc = wait_for(lambda: (lambda g: g if g["bytes_freed"] > 0 and g["steps_deleted"] >= 6
                               else None)(read_status(m.path)["gc"]), 30, "status reports GC")
        self.assertTrue(gc["enabled"])
        self.assertEqual(gc["keep_last"], 2)
        self.assertGreaterEqual(gc["objects_deleted"], 6 * 3)  # part, manifest, pack per step
        self.assertGreater(gc["bytes_freed"], 5 * step_bytes)
        self.assertEqual(gc["last_error"], "")
        wait_for(lambda: sorted(os.listdir(job)) == ["ckpt-000007.pt", "ckpt-000008.pt"], 30,
                 "the mount lists only the kept steps")
        for step in (7, 8):
            restored = self.restore(step, "restored-%d" % step)
            name = "ckpt-%06d.pt" % step
            self.assertEqual(os.listdir(restored), [name])
            self.assertTrue(filecmp.cmp(os.path.join(restored, name), os.path.join(ref, name),
                                        shallow=False), name)
        text = self.ctl("status", "--mount", m.path).stdout
        self.assertIn("keep last 2", text)
        m.unmount()


if __name__ == "__main__":
    unittest.main(verbosity=2)
