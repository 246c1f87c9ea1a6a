"""Load: many writers on two nodes, GC running, one daemon killed midway
(docs/RELIABILITY.md, "Load").

Two real ckptfs mounts on one store act as two nodes (--node a, --node b,
own staging). On each, WRITERS writer processes (load_writer.py) write one
job each: STEPS steps whose layout is picked at random per step (torch.save
single files, plain step directories, DCP-like directories with the renamed
.metadata, HF-like checkpoint-N/ with trainer_state.json) and whose files
have random sizes; a quarter of the writers use real torch.save (Debian's
python3-torch). Each writer records a step, with the sha256 of every file,
only once all its close()s returned: that is what was acknowledged.

While they write, `ckptctl gc --keep-last KEEP --grace 1` runs over every job
in a loop. Once node a's writers are half way, daemon a is killed with
SIGKILL (kill -9) and restarted on its own staging; its writers see errors
for the step they were in, wait for the mount and go on with the next step.

Then, with both daemons still running:

* every job's newest acknowledged step becomes durable (consistent);
* after one more gc, each job lists exactly its KEEP newest acknowledged
  steps: nothing acknowledged is lost. (A step cut short by the kill counts
  too if it is listed consistent: the daemon may have committed its last
  close or rename and died before the reply. It must then hold every file
  its writer meant to write, whole.);
* every kept step passes `ckptctl verify` and restores (`ckptctl restore`)
  to exactly the files its writer recorded, byte-identical;
* every kept step reads back byte-identical through the mount of its node.

Both daemons then unmount cleanly (exit 0) and the listing is checked again.

Environment: CKPTFS, CKPTCTL (the binaries); the size of the run:
CKPT_LOAD_STEPS (default 8), CKPT_LOAD_SIZE (small: files up to 64 KiB,
the CI run; full: up to 4 MiB), CKPT_LOAD_WRITERS (per node, default 8),
CKPT_LOAD_KEEP (default 3). CKPT_TEST_STORE_URL (with_s3rver.sh) runs it
against an s3:// store. The figures go to stdout as one "load figures:" line.
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, TORCH_PYTHON, Mount, MountTestCase,  # noqa: E402
                      torch_env, tree_digest, wait_durable)

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = int(os.environ.get("CKPT_LOAD_STEPS", "8"))
SIZE = os.environ.get("CKPT_LOAD_SIZE", "small")
WRITERS = int(os.environ.get("CKPT_LOAD_WRITERS", "8"))
KEEP = int(os.environ.get("CKPT_LOAD_KEEP", "3"))
NODES = ("a", "b")
WRITE_TIMEOUT = 300 if SIZE == "small" else 3600  # s: the whole write phase
DURABLE_TIMEOUT = 180  # s: the newest step of a job durable after the writers end


def job_name(node, i):
    return "load-%s%d" % (node, i)


class LoadTest(MountTestCase):
    TMP_PREFIX = "ckptfs-load-"
    STORE_FROM_ENV = True

    def setUp(self):
        super().setUp()
        self.writers = {}  # job -> Popen
        self.records = os.path.join(self.tmp, "records")
        os.makedirs(self.records)

    def tearDown(self):
        for p in self.writers.values():  # the writers first: they write into the mounts
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
            p.stderr.close()
        super().tearDown()

    # ------------------------------------------------------------ helpers

    def ctl(self, job, *args, check=True, timeout=300):
        cmd = [CKPTCTL, "--store", self.store, "--job", job, *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr))
        return p

    def consistent(self, job):
        return sorted(e["step"] for e in json.loads(self.ctl(job, "ls", "--json").stdout)
                      if e["consistent"])

    def record(self, job):
        """The writer's lines: ({step: line} acknowledged, {step: line} cut
        short)."""
        acked, failed = {}, {}
        try:
            with open(os.path.join(self.records, job)) as f:
                for line in f:
                    r = json.loads(line)
                    if "error" in r:
                        failed[r["step"]] = r
                    else:
                        acked[r["step"]] = r
        except FileNotFoundError:
            pass
        return acked, failed

    def start_writers(self, node, mount):
        for i in range(WRITERS):
            job = job_name(node, i)
            os.mkdir(os.path.join(mount.path, job))
            self.writers[job] = subprocess.Popen(
                [TORCH_PYTHON, os.path.join(HERE, "load_writer.py"),
                 os.path.join(mount.path, job), os.path.join(self.records, job),
                 str(ord(node) * 100 + i), str(STEPS),
                 SIZE, "1" if i % 4 == 0 else "0"],
                env=torch_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def check_writers(self):
        for job, p in self.writers.items():
            if p.poll() not in (None, 0):
                self.fail("writer of %s exited %s:\n%s" % (job, p.returncode, p.stderr.read()))

    def gc_loop(self, stop, totals, errors):
        """ckptctl gc over every job until stop is set."""
        try:
            while not stop.is_set():
                for job in self.writers:
                    p = self.ctl(job, "gc", "--json", "--keep-last", str(KEEP), "--grace", "1",
                                 check=False)
                    if p.returncode == 1 and not p.stdout:  # the job has no step yet
                        continue
                    if p.returncode != 0:
                        raise AssertionError("gc of %s: exit %d\n%s" % (job, p.returncode,
                                                                       p.stderr))
                    r = json.loads(p.stdout)
                    totals["runs"] += 1
                    totals["steps_deleted"] += r["steps_deleted"]
                    totals["packs_deleted"] += r["packs_deleted"]
                    totals["bytes_freed"] += r["bytes_freed"]
                time.sleep(0.2)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    def wait(self, what, probe, timeout, interval=0.2):
        deadline = time.monotonic() + timeout
        while not probe():
            self.check_writers()
            if time.monotonic() > deadline:
                for m in self.mounts:
                    m.print_log(what, tail=60)
                self.fail("after %ss: %s" % (timeout, what))
            time.sleep(interval)

    def check_kept(self, job, mount, kept):
        """Every kept step verifies, restores and reads through the mount
        byte-identical to the writer's record."""
        acked, failed = self.record(job)
        for step in kept:
            want = acked[step]["files"] if step in acked else failed[step]["intended"]
            self.ctl(job, "verify", "--step", str(step))
            out = os.path.join(self.tmp, "restore-%s-%d" % (job, step))
            self.ctl(job, "restore", "--step", str(step), "--to", out)
            self.assertEqual(tree_digest(out), want, "%s step %d: restore differs" % (job, step))
            shutil.rmtree(out)
            through = tree_digest(os.path.join(mount.path, job),
                                  only=lambda rel: rel in want)
            self.assertEqual(through, want, "%s step %d: read through mount %s differs"
                             % (job, step, mount.path))

    # ------------------------------------------------------------ the test

    def test_load(self):
        started = time.monotonic()
        mounts = {}
        for node in NODES:
            m = Mount(os.path.join(self.tmp, "mnt-" + node), store=self.store,
                      staging=os.path.join(self.tmp, "staging-" + node), node="node-" + node,
                      binary=CKPTFS, extra_args=["--refresh", "0.5"])
            self.mounts.append(m)
            mounts[node] = m.start()
        for node in NODES:
            self.start_writers(node, mounts[node])

        stop, errors = threading.Event(), []
        totals = dict(runs=0, steps_deleted=0, packs_deleted=0, bytes_freed=0)
        gc = threading.Thread(target=self.gc_loop, args=(stop, totals, errors), daemon=True)
        gc.start()
        try:
            # Kill node a once its writers have written half their steps
            # in all (most of them are still writing then).
            a_jobs = [job_name("a", i) for i in range(WRITERS)]
            self.wait("node a's writers half way",
                      lambda: sum(len(r) for j in a_jobs for r in self.record(j))
                      >= WRITERS * STEPS // 2, WRITE_TIMEOUT)
            running = sum(self.writers[j].poll() is None for j in a_jobs)
            mounts["a"].kill9()
            # A kill after node a's writers ended would test only the uploads.
            self.assertGreater(running, 0, "node a's writers all done before the kill")
            time.sleep(1)
            mounts["a"].start()

            self.wait("the writers done", lambda: all(p.poll() is not None
                                                      for p in self.writers.values()),
                      WRITE_TIMEOUT)
            self.check_writers()
            written = time.monotonic() - started
            for job in self.writers:
                acked, _ = self.record(job)
                wait_durable(CKPTCTL, self.store, job, max(acked), timeout=DURABLE_TIMEOUT)
        finally:
            stop.set()
            gc.join(timeout=300)
        if errors:
            raise errors[0]

        fig = dict(steps=0, failed=0, files=0, bytes=0, kept=0, made_whole=0)
        kept_before = {}
        for job in self.writers:
            node = job[len("load-")]
            acked, failed = self.record(job)
            self.ctl(job, "gc", "--keep-last", str(KEEP), "--grace", "1")
            kept = self.consistent(job)
            # A step cut short may still be whole: the daemon committed its
            # last close (or rename) and was killed before the reply. Then
            # it counts, and must hold every file it was meant to.
            whole = set(acked) | (set(kept) & set(failed))
            self.assertEqual(kept, sorted(whole)[-KEEP:],
                             "%s: consistent steps vs the %d newest acknowledged (cut short: %s)"
                             % (job, KEEP, sorted(failed)))
            kept_before[job] = kept
            fig["made_whole"] += len(set(kept) & set(failed))
            self.check_kept(job, mounts[node], kept)
            fig["steps"] += len(acked)
            fig["failed"] += len(failed)
            fig["files"] += sum(len(r["files"]) for r in acked.values())
            fig["bytes"] += sum(r["bytes"] for r in acked.values())
            fig["kept"] += len(kept)

        for node in NODES:
            self.assertEqual(mounts[node].unmount(timeout=120), 0, "daemon %s exit" % node)
        # No gc ran since: the listing must be what it was with the daemons
        # up. (Compared with the kept steps, not with the newest acknowledged
        # ones: a cut-short step that was listed consistent counts, and gc
        # deleted the acknowledged step it pushed out of the newest KEEP.)
        for job in self.writers:
            # The unmount may still make a cut-short step durable (its drain),
            # so what was kept must still be there; more may be.
            after = self.consistent(job)
            self.assertTrue(set(kept_before[job]) <= set(after),
                            "%s: after unmount %s, kept before %s" % (job, after, kept_before[job]))
        print("load figures: store %s, nodes 2, writers %d, steps acknowledged %d, "
              "node a's writers running at the kill %d, steps cut short by it %d (kept and whole all the same %d), files %d, bytes %d, kills 1, gc runs %d, "
              "steps deleted by gc %d, packs deleted %d, bytes freed %d, kept steps "
              "verified+restored %d, write phase %.0f s, total %.0f s, lost 0"
              % (self.store.split(":")[0], len(self.writers), fig["steps"], running,
                 fig["failed"], fig["made_whole"],
                 fig["files"], fig["bytes"], totals["runs"], totals["steps_deleted"],
                 totals["packs_deleted"], totals["bytes_freed"], fig["kept"], written,
                 time.monotonic() - started))


if __name__ == "__main__":
    unittest.main()
