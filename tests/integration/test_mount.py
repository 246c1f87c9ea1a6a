"""Integration tests of the ckptfs mount: real FUSE mounts, real PyTorch,
a real store. Each test gets fresh directories; every mount is unmounted
(or killed and lazily unmounted) by mountlib even when the test fails.

Environment: CKPTFS and CKPTCTL name the binaries; CKPT_TEST_STORE picks the
store kind ("file", the default, or an s3:// URL prefix for the S3 runs).
"""
import errno
import hashlib
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountTestCase, list_steps, run_torch,  # noqa: E402
                      run_torch_script, sha256_file, tree_digest, wait_counter, wait_durable,
                      wait_for)

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = "job"


def read_status(mount):
    with open(os.path.join(mount.path, ".ckptfs", "status")) as f:
        return json.load(f)


def wait_status(mount, pred, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        st = read_status(mount)
        if pred(st):
            return st
        if time.monotonic() > deadline:
            raise TimeoutError("status never matched: %s" % st)
        time.sleep(0.05)


def step_held(status, step):
    """True once step's upload came due and waits for a failed file."""
    return any(s["job"] == JOB and s["step"] == step and s["held_by_failed_file"]
               for s in status["steps"])


def step_state(status, step):
    for s in status["steps"]:
        if s["job"] == JOB and s["step"] == step:
            return s["state"]
    return None


class MountTest(MountTestCase):
    STORE_FROM_ENV = True  # the S3 runs (integration.mount_s3) set CKPT_TEST_STORE_URL

    def mount(self, name, node=None, extra=(), env=None, staging=None):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=staging or os.path.join(self.tmp, name + "-staging"),
                  node=node or name, binary=CKPTFS, extra_args=extra, env=env)
        self.mounts.append(m)
        return m.start()

    def durable(self, step, timeout=120):
        return wait_durable(CKPTCTL, self.store, JOB, step, timeout=timeout)

    # ------------------------------------------------------------------

    def test_torch_save_load_bit_exact(self):
        m = self.mount("a")
        os.mkdir(os.path.join(m.path, JOB))
        local = self.tmp_dir("local")
        code = ("import torch,sys\n"
                "torch.manual_seed(0)\n"
                "m = torch.nn.Sequential(torch.nn.Linear(512,512), torch.nn.Linear(512,64))\n"
                "o = torch.optim.AdamW(m.parameters())\n"
                "m(torch.randn(8,512)).sum().backward(); o.step()\n"
                "s = {'model': m.state_dict(), 'optimizer': o.state_dict(), 'step': 10}\n"
                "for d in sys.argv[1:]: torch.save(s, d + '/ckpt-000010.pt')\n"
                "b = torch.load(sys.argv[1] + '/ckpt-000010.pt')\n"
                "assert all(torch.equal(b['model'][k], s['model'][k]) for k in s['model'])\n")
        run_torch(code, os.path.join(m.path, JOB), local)
        mounted = os.path.join(m.path, JOB, "ckpt-000010.pt")
        self.assertEqual(sha256_file(mounted), sha256_file(os.path.join(local, "ckpt-000010.pt")))
        self.durable(10)
        # A second node reads it from the store, bit-exact.
        b = self.mount("b", extra=("--refresh", "0.5"))
        other = os.path.join(b.path, JOB, "ckpt-000010.pt")
        self.assertEqual(sha256_file(other), sha256_file(os.path.join(local, "ckpt-000010.pt")))

    def test_resume_after_node_loss(self):
        ref = os.path.join(self.tmp, "ref")
        m = self.mount("node1")
        ckpts = os.path.join(m.path, JOB)
        out = run_torch_script(os.path.join(HERE, "train_resume.py"), ckpts, ref,
                               "--until", "6", "--every", "2")
        self.assertEqual(json.loads(out.stdout)["saved"], [2, 4, 6])
        self.durable(6)
        # Preempted: the daemon dies and the node's disk is gone.
        m.kill9()
        shutil.rmtree(os.path.join(self.tmp, "node1-staging"))
        # A new node mounts the same store and the same script resumes.
        n = self.mount("node2")
        ckpts2 = os.path.join(n.path, JOB)
        self.assertEqual(sorted(os.listdir(ckpts2)),
                         ["ckpt-000002.pt", "ckpt-000004.pt", "ckpt-000006.pt"])
        for name in os.listdir(ckpts2):
            self.assertEqual(sha256_file(os.path.join(ckpts2, name)), sha256_file(os.path.join(ref, name)))
        out = run_torch_script(os.path.join(HERE, "train_resume.py"), ckpts2, ref,
                               "--until", "8", "--every", "2")
        self.assertEqual(json.loads(out.stdout)["resumed_from"], 6)
        # Identical weights to a run that was never interrupted.
        straight = os.path.join(self.tmp, "straight")
        run_torch_script(os.path.join(HERE, "train_resume.py"), straight,
                         os.path.join(self.tmp, "straight-ref"), "--until", "8", "--every", "2")
        same = ("import torch,sys\n"
                "a, b = torch.load(sys.argv[1]), torch.load(sys.argv[2])\n"
                "assert a['step'] == b['step'] == 8\n"
                "assert all(torch.equal(a['model'][k], b['model'][k]) for k in a['model'])\n"
                "sa, sb = a['optimizer']['state'], b['optimizer']['state']\n"
                "assert all(torch.equal(sa[i][k], sb[i][k]) for i in sa for k in sa[i])\n")
        run_torch(same, os.path.join(ckpts2, "ckpt-000008.pt"),
                  os.path.join(straight, "ckpt-000008.pt"))

    def test_posix_ops_match_local_reference(self):
        m = self.mount("a")
        roots = [os.path.join(m.path, JOB), os.path.join(self.tmp, "ref", JOB)]
        rng = random.Random(7)
        blob = bytes(rng.getrandbits(8) for _ in range(3 << 20))
        for root in roots:
            d = os.path.join(root, "step-000001")
            os.makedirs(os.path.join(d, "sub"))
            # random writes (pwrite at scattered offsets, with holes)
            fd = os.open(os.path.join(d, "random.bin"), os.O_CREAT | os.O_RDWR, 0o644)
            r2 = random.Random(11)
            for _ in range(200):
                off = r2.randrange(0, 4 << 20)
                n = r2.randrange(1, 70000)
                os.pwrite(fd, blob[off % len(blob):off % len(blob) + n], off)
            os.close(fd)
            # overwrite in place
            with open(os.path.join(d, "over.bin"), "wb") as f:
                f.write(blob[:500000])
            with open(os.path.join(d, "over.bin"), "r+b") as f:
                f.seek(1000)
                f.write(b"X" * 7000)
            # write-temp-then-rename over an existing file (safetensors, DCP)
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(b"old" * 1000)
            with open(os.path.join(d, "model.safetensors.tmp"), "wb") as f:
                f.write(blob[100:200000])
            os.rename(os.path.join(d, "model.safetensors.tmp"), os.path.join(d, "model.safetensors"))
            # truncate down and up
            with open(os.path.join(d, "trunc.bin"), "wb") as f:
                f.write(blob[:300000])
            os.truncate(os.path.join(d, "trunc.bin"), 12345)
            with open(os.path.join(d, "trunc.bin"), "r+b") as f:
                f.truncate(20000)
            # unlink, rmdir, chmod
            with open(os.path.join(d, "sub", "gone.bin"), "wb") as f:
                f.write(b"x")
            os.unlink(os.path.join(d, "sub", "gone.bin"))
            os.mkdir(os.path.join(d, "emptydir"))
            os.rmdir(os.path.join(d, "emptydir"))
            with open(os.path.join(d, "sub", "kept.txt"), "w") as f:
                f.write("kept\n")
            os.chmod(os.path.join(d, "sub", "kept.txt"), 0o600)
            # explicit completion marker, written last
            open(os.path.join(d, ".ckpt-complete"), "w").close()
        self.assertEqual(tree_digest(roots[0]), tree_digest(roots[1]))
        self.durable(1)
        m.unmount()
        # A new node with empty staging sees the same bytes, from the store.
        b = self.mount("b")
        self.assertEqual(tree_digest(os.path.join(b.path, JOB)), tree_digest(roots[1]))
        st = os.stat(os.path.join(b.path, JOB, "step-000001", "sub", "kept.txt"))
        self.assertEqual(st.st_mode & 0o777, 0o600)

    def test_kill9_during_sealing_and_upload(self):
        # Slow PUTs widen the window so the kills land mid-upload.
        env = {"CKPT_FAULT": "put_delay_ms=300"}
        m = self.mount("a", env=env)
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        ref = {}
        rng = random.Random(3)
        for step in (1, 2, 3):
            data = bytes(rng.getrandbits(8) for _ in range(40 << 20)) if step == 1 else os.urandom(30 << 20)
            name = "ckpt-%06d.pt" % step
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)
            ref[name] = hashlib.sha256(data).hexdigest()
        # First kill: right after the last close returned (sealing).
        m.kill9()
        m.start()
        # Second kill: while a pack upload is in flight.
        wait_status(m, lambda s: any(x["state"] == "uploading" for x in s["steps"]), timeout=60)
        m.assert_fault_fired()
        m.kill9()
        # Restart without the fault: everything closed becomes durable.
        m.env = None
        m.start()
        for step in (1, 2, 3):
            self.durable(step, timeout=180)
        m.unmount()
        b = self.mount("b")
        for name, digest in ref.items():
            self.assertEqual(sha256_file(os.path.join(b.path, JOB, name)), digest, name)

    def test_close_sync_background(self):
        """--close-sync background (docs/MOUNT.md, "When close() waits for
        the disk"): close() returns with the bytes not yet synced, fsync()
        syncs them, a kill -9 right after torch.save returned loses nothing,
        and every byte reaches the store and another node."""
        m = self.mount("a", extra=("--close-sync", "background"))
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        # A second descriptor keeps the file open, so its FUSE release (where
        # the deferred sync runs) waits: close() of the first one returned.
        data = os.urandom(4 << 20)
        fd = os.open(os.path.join(d, "ckpt-000001.pt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, data)
        keep = os.dup(fd)
        os.close(fd)
        self.assertEqual(read_status(m)["unsynced_files"], 1)
        os.fsync(keep)
        self.assertEqual(read_status(m)["unsynced_files"], 0)
        os.close(keep)
        self.durable(1)
        # A real torch.save, the daemon killed the moment it returned.
        local = self.tmp_dir("local")
        code = ("import torch,sys\n"
                "torch.manual_seed(2)\n"
                "s = {'w%d' % i: torch.randn(1 << 20) for i in range(6)}\n"
                "for d in sys.argv[1:]: torch.save(s, d + '/ckpt-000002.pt')\n")
        run_torch(code, d, local)
        m.kill9()
        m.start()
        mounted = os.path.join(m.path, JOB, "ckpt-000002.pt")
        want = sha256_file(os.path.join(local, "ckpt-000002.pt"))
        self.assertEqual(sha256_file(mounted), want)
        self.assertEqual(read_status(m)["unsynced_files"], 0)
        self.durable(2)
        b = self.mount("b")
        self.assertEqual(sha256_file(os.path.join(b.path, JOB, "ckpt-000002.pt")), want)
        self.assertEqual(sha256_file(os.path.join(b.path, JOB, "ckpt-000001.pt")),
                         hashlib.sha256(data).hexdigest())

    def test_close_sync_background_torn_after_another_boot(self):
        """--close-sync background, the machine stopped between close() and
        the release's sync (docs/MOUNT.md, "When close() waits for the
        disk"): after that boot the file may be torn. Its step is not
        published, the file is listed but its reads fail with EIO (a trainer
        resuming from the newest file must not load it), the status names
        it; written again, it is whole and published."""
        m = self.mount("a", extra=("--close-sync", "background"))
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        path = os.path.join(d, "ckpt-000001.pt")
        # A second descriptor holds the release back: close() of the first
        # one returned with the bytes not yet synced.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.write(fd, os.urandom(4 << 20))
        keep = os.dup(fd)
        os.close(fd)
        self.assertEqual(read_status(m)["unsynced_files"], 1)
        m.kill9()
        with self.assertRaises(OSError):
            os.close(keep)  # the daemon is gone: ENOTCONN
        # What the reboot leaves: the journal's rows are of another boot.
        db = sqlite3.connect(os.path.join(self.tmp, "a-staging", "journal.db"))
        with db:
            db.execute("UPDATE meta SET value='an earlier boot' WHERE key='boot_id'")
        db.close()
        m.start()
        self.assertEqual(os.listdir(d), ["ckpt-000001.pt"])
        with self.assertRaises(OSError) as cm:
            with open(path, "rb") as f:
                f.read()
        self.assertEqual(cm.exception.errno, errno.EIO)
        st = read_status(m)
        self.assertEqual(st["failed_files"], 1, st)
        self.assertEqual([(f["path"], f["step"], f["torn"]) for f in st["failed"]],
                         [("ckpt-000001.pt", 1, True)])
        self.assertIn("ckpt-000001.pt: torn", st["last_error"])
        m.unmount()  # nor does R8 publish it
        self.assertEqual(list_steps(CKPTCTL, self.store, JOB), [])
        m.start()
        data = os.urandom(2 << 20)
        with open(path, "wb") as f:
            f.write(data)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertEqual(read_status(m)["failed_files"], 0)
        self.durable(1, timeout=60)

    def test_step_invisible_until_durable(self):
        a = self.mount("a", env={"CKPT_FAULT": "put_delay_ms=1500"})
        b = self.mount("b", extra=("--refresh", "0.3"))
        os.mkdir(os.path.join(a.path, JOB))
        data = os.urandom(5 << 20)
        with open(os.path.join(a.path, JOB, "ckpt-000005.pt"), "wb") as f:
            f.write(data)
        # Each round looks at b first and asks the store second: b may show
        # the step only if the store already held it whole at that moment.
        rounds_before = 0
        deadline = time.monotonic() + 120
        while True:
            b_sees = os.path.exists(os.path.join(b.path, JOB, "ckpt-000005.pt"))
            durable = any(s["step"] == 5 and s.get("state") == "consistent"
                          for s in list_steps(CKPTCTL, self.store, JOB))
            self.assertFalse(b_sees and not durable, "b listed step 5 before it was durable")
            if durable:
                break
            rounds_before += 1
            self.assertLess(time.monotonic(), deadline, "step 5 never became durable")
            time.sleep(0.1)
        self.assertGreater(rounds_before, 0, "the upload finished before b was checked")
        a.assert_fault_fired()
        path = os.path.join(b.path, JOB, "ckpt-000005.pt")
        deadline = time.monotonic() + 30
        while not os.path.exists(path):
            self.assertLess(time.monotonic(), deadline, "durable step never appeared on b")
            time.sleep(0.1)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)

    def test_every_step_keeps_its_marker_when_saves_outrun_uploads(self):
        """DeepSpeed's layout saved four times in a row through a slow store,
        so each step waits behind the one before while the trainer has
        already moved `latest` on: steps 1 and 2 write it in place, 3 and 4
        as an atomic writer does (a temporary file renamed over it). Every
        step must be stored with the `latest` that named it: a node that
        resumes at step N (N+1 incomplete elsewhere) reads that file.
        Before docs/MOUNT_MODEL.md's "A naming marker replaced before its
        step is stored", the queued steps were stored without one."""
        m = self.mount("a", env={"CKPT_FAULT": "put_delay_ms=700"})
        job = os.path.join(m.path, JOB)
        os.mkdir(job)
        local = self.tmp_dir("local")
        code = ("import os, sys, torch\n"
                "job, local = sys.argv[1], sys.argv[2]\n"
                "for step in range(1, 5):\n"
                "    torch.manual_seed(step)\n"
                "    state = {'module': torch.nn.Linear(256, 256).state_dict(), 'step': step}\n"
                "    for root in (job, local):\n"
                "        d = os.path.join(root, 'global_step%d' % step)\n"
                "        os.makedirs(d, exist_ok=True)\n"
                "        torch.save(state, os.path.join(d, 'mp_rank_00_model_states.pt'))\n"
                "    tag = 'global_step%d' % step\n"
                "    if step <= 2:\n"
                "        with open(os.path.join(job, 'latest'), 'w') as f:\n"
                "            f.write(tag)\n"
                "    else:\n"
                "        with open(os.path.join(job, 'latest.tmp'), 'w') as f:\n"
                "            f.write(tag)\n"
                "        os.replace(os.path.join(job, 'latest.tmp'), os.path.join(job, 'latest'))\n")
        run_torch(code, job, local)
        for step in range(1, 5):
            self.durable(step)
        m.assert_fault_fired()
        for step in range(1, 5):
            out = os.path.join(self.tmp, "restore-%d" % step)
            subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, "restore", "--step",
                            str(step), "--to", out], check=True, capture_output=True, timeout=120)
            marker = os.path.join(out, "latest")
            self.assertTrue(os.path.exists(marker), "step %d was stored without `latest`: %s"
                            % (step, sorted(os.listdir(out))))
            with open(marker) as f:
                self.assertEqual(f.read(), "global_step%d" % step, "step %d's `latest`" % step)
            name = "global_step%d/mp_rank_00_model_states.pt" % step
            self.assertEqual(sha256_file(os.path.join(out, name)),
                             sha256_file(os.path.join(local, name)))

    def test_lightning_layout(self):
        """PyTorch Lightning's ModelCheckpoint as it saves with its defaults
        plus save_last="link": `epoch=E-step=S.ckpt` files in the job
        directory, then `last.ckpt` as a symlink, which the mount refuses,
        so (as Lightning does) a copy. Each file is a step of its own by its
        `step=` field (docs/STEPS.md); `last.ckpt` joins the newest step.
        Before the Lightning rule no file named a step, so nothing was ever
        stored."""
        m = self.mount("a")
        job = os.path.join(m.path, JOB)
        os.mkdir(job)
        code = ("import errno, os, shutil, sys, torch\n"
                "job = sys.argv[1]\n"
                "for epoch, step in ((0, 100), (1, 200)):\n"
                "    torch.manual_seed(step)\n"
                "    name = 'epoch=%d-step=%d.ckpt' % (epoch, step)\n"
                "    state = {'state_dict': torch.nn.Linear(256, 256).state_dict(),\n"
                "             'epoch': epoch, 'global_step': step}\n"
                "    torch.save(state, os.path.join(job, name))\n"
                "    last = os.path.join(job, 'last.ckpt')\n"
                "    if os.path.lexists(last):\n"
                "        os.remove(last)\n"
                "    try:\n"
                "        os.symlink(name, last)\n"
                "        sys.exit('the mount made a symlink')\n"
                "    except OSError as e:\n"
                "        assert e.errno == errno.ENOTSUP, e\n"
                "        shutil.copy(os.path.join(job, name), last)\n")
        run_torch(code, job)
        for step in (100, 200):
            self.durable(step, timeout=60)
        # last.ckpt came after step 200 was complete: R5 seals it again.
        wait_for(lambda: {s["step"]: s["files"] for s in
                          list_steps(CKPTCTL, self.store, JOB)}.get(200) == 2, 60,
                 "step 200 stored with last.ckpt")
        self.assertEqual([s["step"] for s in list_steps(CKPTCTL, self.store, JOB)], [100, 200])
        out = os.path.join(self.tmp, "restore-200")
        subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, "restore", "--step", "200",
                        "--to", out], check=True, capture_output=True, timeout=120)
        self.assertEqual(sorted(os.listdir(out)), ["epoch=1-step=200.ckpt", "last.ckpt"])
        self.assertEqual(sha256_file(os.path.join(out, "last.ckpt")),
                         sha256_file(os.path.join(job, "epoch=1-step=200.ckpt")))
        run_torch("import sys, torch; assert torch.load(sys.argv[1])['global_step'] == 200",
                  os.path.join(out, "last.ckpt"))

    def test_staging_cap_gives_enospc(self):
        m = self.mount("a", extra=("--staging-cap", "8M"), env={"CKPT_FAULT": "put_delay_ms=2000"})
        os.mkdir(os.path.join(m.path, JOB))
        small = os.urandom(1 << 20)
        with open(os.path.join(m.path, JOB, "ckpt-000001.pt"), "wb") as f:
            f.write(small)
        with self.assertRaises(OSError) as cm:
            with open(os.path.join(m.path, JOB, "ckpt-000002.pt"), "wb") as f:
                for _ in range(20):
                    f.write(os.urandom(1 << 20))
                    f.flush()
        self.assertEqual(cm.exception.errno, errno.ENOSPC)
        with open(os.path.join(m.path, JOB, "ckpt-000001.pt"), "rb") as f:
            self.assertEqual(f.read(), small)
        self.assertIn("staging", read_status(m)["last_error"])
        m.assert_fault_fired()

    def test_full_staging_disk_takes_back_the_recycled_files(self):
        # docs/MOUNT.md, "Recycled staging files": removed files' staging
        # files are kept for new files to write over. When the staging disk
        # itself is full, a write must get that room back, not ENOSPC. The
        # staging disk: a 96 MiB tmpfs (root only, as CI runs).
        disk = tempfile.mkdtemp(prefix="ckptfs-smalldisk-", dir="/var/tmp")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96m", "tmpfs", disk], check=True)
        self.addCleanup(os.rmdir, disk)
        self.addCleanup(subprocess.run, ["umount", disk], check=True)  # after tearDown's unmount
        m = self.mount("a", staging=os.path.join(disk, "staging"))
        d = os.path.join(m.path, JOB, "scratch")
        os.makedirs(d)
        for name in ("a.bin", "b.bin"):
            with open(os.path.join(d, name), "wb") as f:
                f.write(os.urandom(8 << 20))
        for name in ("a.bin", "b.bin"):
            os.unlink(os.path.join(d, name))
        st = read_status(m)
        self.assertEqual((st["spare_files"], st["spare_bytes"]), (2, 16 << 20), "both in the pool")
        vfs = os.statvfs(disk)
        free = vfs.f_bavail * vfs.f_frsize
        # The new file takes one spare (8 MiB); 4 MiB more than the free
        # space and that spare fit only once the other spare is removed.
        size = free + (12 << 20)
        block = random.Random(6).randbytes(1 << 20)
        path = os.path.join(d, "big.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for off in range(0, size, len(block)):
                want = min(len(block), size - off)
                self.assertEqual(os.write(fd, block[:want]), want, "a short write at %d" % off)
        finally:
            os.close(fd)
        self.assertEqual(os.stat(path).st_size, size)
        with open(path, "rb") as f:
            for off in range(0, size, len(block)):
                self.assertEqual(f.read(len(block)), block[:min(len(block), size - off)])
        self.assertEqual(read_status(m)["spare_bytes"], 0)
        self.assertIn("staging disk full", m.log_text())

    def test_failed_write_is_not_published(self):
        # Over --staging-cap the write fails with ENOSPC; the
        # truncated file must not be published with its step, whatever
        # completes the step (the marker, eager publishing, the unmount),
        # until it is rewritten. close() says ENOSPC too, never EIO.
        m = self.mount("a", extra=("--staging-cap", "4M"))
        d = os.path.join(m.path, JOB, "step-1")
        os.makedirs(d)
        fd = os.open(os.path.join(d, "model.bin"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, os.urandom(3 << 20))
            with self.assertRaises(OSError) as cm:
                for _ in range(4):  # a write across the cap is short first
                    os.write(fd, os.urandom(1 << 20))
            self.assertEqual(cm.exception.errno, errno.ENOSPC)
        finally:
            with self.assertRaises(OSError) as cm:
                os.close(fd)
            self.assertEqual(cm.exception.errno, errno.ENOSPC)
        open(os.path.join(d, ".ckpt-complete"), "w").close()
        st = wait_status(m, lambda st: step_held(st, 1))  # its upload came due, and waits
        self.assertEqual(step_state(st, 1), "writing")
        self.assertIn("step-1/model.bin", st["last_error"])
        self.assertIn("no space left", st["last_error"])
        self.assertNotIn(1, [s["step"] for s in list_steps(CKPTCTL, self.store, JOB)])
        m.unmount()  # R8 leaves it alone too
        self.assertNotIn(1, [s["step"] for s in list_steps(CKPTCTL, self.store, JOB)])
        m.start()  # the journal remembers the failed write
        wait_status(m, lambda st: step_held(st, 1))
        self.assertNotIn(1, [s["step"] for s in list_steps(CKPTCTL, self.store, JOB)])
        whole = os.urandom(1 << 20)
        with open(os.path.join(d, "model.bin"), "wb") as f:
            f.write(whole)
        self.durable(1, timeout=60)
        b = self.mount("b")
        with open(os.path.join(b.path, JOB, "step-1", "model.bin"), "rb") as f:
            self.assertEqual(f.read(), whole)

    def test_unlinked_writer_and_rename_edges(self):
        # A file unlinked while open for writing still gives
        # its step's writer count back at its close, so the step is uploaded.
        m = self.mount("a")
        d = os.path.join(m.path, JOB, "step-3")
        os.makedirs(d)
        scratch = open(os.path.join(d, "scratch.bin"), "wb")
        os.unlink(os.path.join(d, "scratch.bin"))
        with open(os.path.join(d, "model.bin"), "wb") as f:
            f.write(b"model 3")
        open(os.path.join(d, ".ckpt-complete"), "w").close()
        scratch.write(b"late")
        scratch.close()
        self.durable(3, timeout=30)

        # renameat2: RENAME_NOREPLACE works (EEXIST on an existing target);
        # RENAME_EXCHANGE is refused with EINVAL.
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        at_fdcwd, noreplace, exchange = -100, 1, 2

        def renameat2(src, dst, flags):
            rc = libc.renameat2(at_fdcwd, src.encode(), at_fdcwd, dst.encode(), flags)
            return 0 if rc == 0 else ctypes.get_errno()
        a, b, c = (os.path.join(d, n) for n in ("a", "b", "c"))
        for p in (a, b):
            with open(p, "w") as f:
                f.write(p)
        self.assertEqual(renameat2(a, b, noreplace), errno.EEXIST)
        self.assertEqual(renameat2(a, c, noreplace), 0)
        self.assertEqual(renameat2(c, b, exchange), errno.EINVAL)
        with open(c) as f:
            self.assertEqual(f.read(), a)

        # A rename that pushes a path below it past the
        # manifest's 4096 bytes is refused with ENAMETOOLONG (the file stays).
        top = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        fds = [top]
        try:
            os.mkdir("d" * 200, dir_fd=top)
            for i in range(19):
                fds.append(os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
                if i < 18:
                    os.mkdir("d" * 200, dir_fd=fds[-1])
            # step-3/ + 19 directories of 200 bytes + a file of 254: 4080 bytes
            ffd = os.open("f" * 254, os.O_WRONLY | os.O_CREAT, dir_fd=fds[-1])
            os.write(ffd, b"deep")
            os.close(ffd)
            with self.assertRaises(OSError) as cm:
                os.rename("d" * 200, "y" * 255, src_dir_fd=top, dst_dir_fd=top)
            self.assertEqual(cm.exception.errno, errno.ENAMETOOLONG)
            ffd = os.open("f" * 254, os.O_RDONLY, dir_fd=fds[-1])
            self.assertEqual(os.read(ffd, 16), b"deep")
            os.close(ffd)
        finally:
            for fd in fds:
                os.close(fd)

    def test_truncated_save_is_not_complete(self):
        m = self.mount("a")
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        local = os.path.join(self.tmp, "whole.pt")
        run_torch("import torch,sys; torch.save({'w': torch.randn(300, 300)}, sys.argv[1])", local)
        with open(local, "rb") as f:
            whole = f.read()
        with open(os.path.join(d, "ckpt-000008.pt"), "wb") as f:
            f.write(whole)
        # A trainer killed in the middle of torch.save: its file is closed too.
        with open(os.path.join(d, "ckpt-000009.pt"), "wb") as f:
            f.write(whole[: len(whole) // 2])
        self.durable(8)
        # Past the quiet time (2 s: 4 passes at 0.5 s) and with nothing
        # queued or uploading, whatever the daemon does with step 9 is done:
        # its bytes may be durable (a quiet step is published, docs/MOUNT_MODEL.md),
        # but as a part that is not complete, so never a step to resume from.
        wait_counter(m.path, "quiet_looks", 6)
        wait_status(m, lambda st: st["queue"] == 0
                    and all(s["state"] != "uploading" for s in st["steps"]))
        steps = list_steps(CKPTCTL, self.store, JOB)
        self.assertEqual([s["step"] for s in steps if s.get("state") == "consistent"], [8], steps)

    def test_store_failure_reaches_status_not_writer(self):
        if not self.store.startswith("s3://"):
            # file://: a root that cannot be a directory is refused at start.
            bad = os.path.join(self.tmp, "plainfile")
            open(bad, "w").close()
            p = subprocess.run([CKPTFS, os.path.join(self.tmp, "mnt-bad"), "--store",
                                "file://" + bad + "/store", "--staging",
                                os.path.join(self.tmp, "st-bad"), "-f"],
                               capture_output=True, text=True, timeout=30)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("not a directory", p.stderr.lower())
            return
        # s3://: a missing bucket is a permanent store error. Writers never
        # see it (close() succeeds); the status file names it.
        self.store = "s3://no-such-bucket-ckpt/x"
        m = self.mount("a", extra=("--drain", "2"))
        os.mkdir(os.path.join(m.path, JOB))
        with open(os.path.join(m.path, JOB, "ckpt-000001.pt"), "wb") as f:
            f.write(os.urandom(100000))
        st = wait_status(m, lambda s: "no-such-bucket-ckpt" in s["last_error"], timeout=60)
        self.assertNotIn(os.environ.get("AWS_SECRET_ACCESS_KEY", "\0"), json.dumps(st))
        self.assertNotEqual(step_state(st, 1), "durable")
        # The unmount drains for --drain seconds (docs/SHUTDOWN.md), then the
        # daemon exits although the store never answered: bounded, not hung
        # in the uploader's backoff (the default 60 s would outlast
        # unmount()'s 20 s wait, which SIGKILLs).
        m.unmount()

    def test_errors_are_clean(self):
        m = self.mount("a")
        # Files at the root are refused (the root holds job directories).
        with self.assertRaises(OSError):
            open(os.path.join(m.path, "stray.txt"), "w").close()
        with self.assertRaises(OSError):
            os.mkdir(os.path.join(m.path, "bad job name"))
        d = os.path.join(m.path, JOB)
        os.mkdir(d)
        with self.assertRaises(OSError) as cm:
            os.symlink("x", os.path.join(d, "link"))
        self.assertIn(cm.exception.errno, (errno.ENOTSUP, errno.EPERM, errno.EOPNOTSUPP))
        with self.assertRaises(OSError) as cm:
            open(os.path.join(m.path, ".ckptfs", "status"), "w")
        os.mkdir(os.path.join(d, "x"))
        open(os.path.join(d, "x", "f"), "w").close()
        with self.assertRaises(OSError) as cm:
            os.rmdir(os.path.join(d, "x"))
        self.assertEqual(cm.exception.errno, errno.ENOTEMPTY)
        with self.assertRaises(OSError) as cm:
            open(os.path.join(d, "n" * 300), "w")
        st = os.statvfs(m.path)
        self.assertGreater(st.f_blocks, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
