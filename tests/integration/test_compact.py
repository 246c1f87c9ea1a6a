"""A finished job compacts (docs/GC.md, "Compaction").

A training job checkpoints through a real ckptfs mount with real torch.save:
each checkpoint holds a frozen 4 MiB backbone (the same bytes every step, so
deduplicated into the first step's pack) and a 4 MiB head that changes every
step. HF Trainer's save_total_limit=2 rotation removes checkpoint-(N-2)
through the mount after checkpoint-N is durable. Then the job ends (the
mount goes) and `ckptctl gc --keep-last 2` settles: the first step's pack is
half dead and nothing will ever re-home its live half (no writer), so the
store stays well above the two kept steps.

* `ckptctl gc --compact` then brings the store to <= 1.10x what the two kept
  steps alone need in a fresh store, and both restore byte for byte;
* a writer comes back while a compaction waits behind its fence (the same
  node, the job resumed; its step deduplicates against the pack being
  compacted): its step is refused while the fence stands (the
  mount's status says "being compacted"), becomes durable once the run is
  over, and every kept step (old and new) restores byte for byte; a later
  compaction brings the store back to <= 1.10x.

test_publish_waits_for_the_fence: a fence planted by hand (a compactor that
stands still) refuses a step's publish; the uploader waits for the fence to
end, looking at it, instead of backing off 1, 2, 4 ... 30 s (which held a
part past its fence for so long that retention took its step as abandoned),
and publishes once the fence is gone.

The figures (store/kept before and after, time, requests) are printed on
stderr for docs/GC.md. Environment: CKPTFS and CKPTCTL name the binaries.
"""
import filecmp
import json
import os
import select
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, TORCH_PYTHON, Mount, MountTestCase,  # noqa: E402
                      file_store_put, read_status, run_ckptctl, run_torch,
                      torch_env, wait_for, wait_durable)

JOB = "job"
NODE = "trainer"
STEPS = 6
# Bounds on events, never timings: starting python with torch takes 10+ s
# on a loaded 2-core machine (and more in the ASan run).
TORCH_READY_S = 300
FENCE_SEEN_S = 120

# With a 5th argument "wait", the snippet says "ready" once torch is imported,
# the state built and the reference copy saved, and saves into the mount only
# after a line on stdin: the writer that comes back mid-compaction must save
# while the fence stands (grace/2 s), so torch's start-up must not eat that
# window.
SAVE = r"""
import sys, torch
step, out, ref, phase = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
g = torch.Generator().manual_seed(phase)
backbone = torch.randn(1 << 20, generator=g)          # 4 MiB, frozen
g = torch.Generator().manual_seed(1000 + step)
state = {"backbone": backbone, "head": torch.randn(1 << 20, generator=g), "step": step}
torch.save(state, ref)
if sys.argv[5:] == ["wait"]:
    print("ready", flush=True)
    sys.stdin.readline()
torch.save(state, out)
"""


class CompactTest(MountTestCase):
    TMP_PREFIX = "ckptfs-compact-"

    def setUp(self):
        super().setUp()
        self.savers = []  # ready_saver processes, killed at the end if still there
        self.addCleanup(self.kill_savers)
        self.ref = self.tmp_dir("ref")
        self.staging = os.path.join(self.tmp, "staging")

    # ------------------------------------------------------------ helpers

    def kill_savers(self):
        for p in self.savers:
            if p.poll() is None:
                p.kill()
                p.communicate()

    def mount(self, name):
        m = Mount(os.path.join(self.tmp, name), store=self.store, staging=self.staging,
                  node=NODE, binary=CKPTFS, extra_args=["--refresh", "0.5"])
        return self.start_mount(m, JOB)

    def ctl(self, *args, store=None, check=True, timeout=300):
        return run_ckptctl(CKPTCTL, store or self.store, JOB, *args, check=check,
                           timeout=timeout)

    def gc(self, *args, grace="1"):
        return json.loads(self.ctl("gc", "--json", "--keep-last", "2", "--grace", grace,
                                   *args).stdout)

    def settle(self, grace=1.0):
        """Retention and sweeps until what is unreferenced is gone."""
        for _ in range(2):
            time.sleep(grace + 0.2)
            self.gc()

    def save_args(self, m, step):
        """SAVE's arguments for checkpoint-<step>: mount path, reference path."""
        name = "checkpoint-%d" % step
        # Phase 2 (after the first compaction) freezes another backbone.
        return (step, os.path.join(m.path, JOB, name, "model.pt"),
                os.path.join(self.ref, name, "model.pt"), 1 if step <= STEPS else 2)

    def make_dirs(self, m, step):
        """checkpoint-<step>'s directories, in the mount and the reference tree."""
        name = "checkpoint-%d" % step
        os.makedirs(os.path.join(m.path, JOB, name))
        os.makedirs(os.path.join(self.ref, name), exist_ok=True)  # ready_saver made it

    def commit(self, m, step):
        """The step's commit, as one rank of a job."""
        with open(os.path.join(m.path, ".ckptfs", "commit"), "w") as f:
            f.write("%s %d 0 1\n" % (JOB, step))

    def save(self, m, step):
        """torch.save of checkpoint-<step> through the mount (and into the
        reference tree), then the step's commit."""
        self.make_dirs(m, step)
        run_torch(SAVE, *self.save_args(m, step), timeout=300)
        self.commit(m, step)

    def ready_saver(self, m, step):
        """A SAVE process for checkpoint-<step> that has torch imported and
        its state built, waiting for a line on stdin (finish_save). Nothing
        of the step exists in the mount until then."""
        os.makedirs(os.path.join(self.ref, "checkpoint-%d" % step))
        p = subprocess.Popen([TORCH_PYTHON, "-c", SAVE, *map(str, self.save_args(m, step)),
                              "wait"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=torch_env())
        self.savers.append(p)
        readable, _, _ = select.select([p.stdout], [], [], TORCH_READY_S)
        line = p.stdout.readline() if readable else ""
        if line != "ready\n":
            p.kill()
            self.fail("the saver was not ready after %d s: %r %s"
                      % (TORCH_READY_S, line, p.communicate()[1]))
        return p

    def finish_save(self, m, step, saver):
        """Lets a ready_saver save, then commits the step."""
        self.make_dirs(m, step)
        _, err = saver.communicate("go\n", timeout=300)
        self.assertEqual(saver.returncode, 0, err)
        self.commit(m, step)

    def rotate(self, m, step):
        """HF Trainer's save_total_limit=2: once checkpoint-<step> is durable,
        checkpoint-<step-2> goes, through the mount."""
        old = os.path.join(m.path, JOB, "checkpoint-%d" % (step - 2))
        if os.path.isdir(old):
            shutil.rmtree(old)

    def steps(self):
        return [e["step"] for e in json.loads(self.ctl("ls", "--json").stdout)
                if e["consistent"]]

    def stored_bytes(self, store=None):
        return json.loads(self.ctl("stats", "--json", store=store).stdout)["stored_bytes"]

    def kept_alone(self, kept):
        """What the kept steps alone need in a fresh store."""
        fresh = "file://" + os.path.join(self.tmp, "fresh-%s" % "-".join(map(str, kept)))
        for step in kept:
            self.ctl("put", "--step", str(step), os.path.join(self.ref, "checkpoint-%d" % step),
                     store=fresh)
        return self.stored_bytes(store=fresh)

    def check_kept(self, kept):
        self.assertEqual(self.steps(), kept)
        for step in kept:
            name = "checkpoint-%d" % step
            out = os.path.join(self.tmp, "restore-%d" % step)
            shutil.rmtree(out, ignore_errors=True)
            self.ctl("restore", "--step", str(step), "--to", out)
            self.assertTrue(filecmp.cmp(os.path.join(self.ref, name, "model.pt"),
                                        os.path.join(out, name, "model.pt"), shallow=False),
                            "%s differs after restore" % name)

    def fence_up(self):
        root = self.store[len("file://"):]
        for dirpath, _, files in os.walk(root):
            if "compacting" in dirpath and files:
                return True
        return False

    def train(self, m, first, last):
        for step in range(first, last + 1):
            self.save(m, step)
            wait_durable(CKPTCTL, self.store, JOB, step, timeout=120)
            self.rotate(m, step)

    # ------------------------------------------------------------ the test

    def test_finished_job_compacts_and_writer_comes_back(self):
        m = self.mount("a")
        self.train(m, 1, STEPS)
        m.stop()  # the job has ended: no writer
        self.gc()
        self.settle()
        kept = [STEPS - 1, STEPS]
        self.check_kept(kept)
        alone = self.kept_alone(kept)
        before = self.stored_bytes()
        print("after rotation and gc: stored %d, kept steps alone %d (%.3fx)"
              % (before, alone, before / alone), file=sys.stderr)
        self.assertGreater(before / alone, 1.10, "nothing to compact: the test tests nothing")

        t = time.monotonic()
        r = self.gc("--compact")
        took = time.monotonic() - t
        c = r["compact"]
        self.assertFalse(c["skipped"], c["why"])
        self.assertGreaterEqual(c["candidates"], 1)
        self.assertGreaterEqual(c["parts_rewritten"], 1)
        self.settle()
        after = self.stored_bytes()
        print("gc --compact: %.2f s (%.2f s behind the fence), %d candidate pack(s) of %d bytes, "
              "%d live bytes copied into %d pack(s), %d part(s) rewritten, %d GET, %d PUT; "
              "stored %d -> %d, kept alone %d (%.3fx -> %.3fx)"
              % (took, c["wait_ns"] / 1e9, c["candidates"], c["candidate_bytes"], c["live_bytes"],
                 c["packs_written"], c["parts_rewritten"], c["gets"], c["puts"], before, after,
                 alone, before / alone, after / alone), file=sys.stderr)
        self.assertLessEqual(after / alone, 1.10)
        self.check_kept(kept)

        # A writer comes back mid-compaction. Make the job compactable again
        # (three more steps with a new frozen backbone, and their rotation),
        # end it, then compact with a longer grace so the fence stands for a
        # few seconds; the writer's step dedups against the very pack that
        # is being compacted (the new backbone's).
        m = self.mount("b")
        self.train(m, STEPS + 1, STEPS + 3)
        m.stop()
        self.gc()
        self.settle()
        # The fence stands grace/2 = 16 s before any rewrite: the writer must
        # save 8 MiB into the mount and commit in that window (up to 6.8 s
        # under load 17, with torch started beforehand).
        grace = 32
        m = self.mount("c")  # the same node, the job resumed (idle until the fence is up)
        step = STEPS + 4
        saver = self.ready_saver(m, step)
        gc = subprocess.Popen([CKPTCTL, "--store", self.store, "--job", JOB, "gc", "--json",
                               "--keep-last", "2", "--grace", str(grace), "--compact"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + FENCE_SEEN_S
            while not self.fence_up():
                self.assertIsNone(gc.poll(), "gc ended before its fence was seen")
                self.assertLess(time.monotonic(), deadline, "no fence after %d s" % FENCE_SEEN_S)
                time.sleep(0.05)
            fenced_at = time.monotonic()
            self.finish_save(m, step, saver)
            saved_in = time.monotonic() - fenced_at
            refused = False
            deadline = time.monotonic() + grace
            while gc.poll() is None and time.monotonic() < deadline:
                refused |= "being compacted" in (read_status(m.path).get("last_error") or "")
                time.sleep(0.1)
            out, err = gc.communicate(timeout=120)
        finally:
            if gc.poll() is None:
                gc.kill()
                gc.wait()
        self.assertEqual(gc.returncode, 0, err)
        r = json.loads(out)["compact"]
        self.assertGreaterEqual(r["parts_rewritten"], 1, r)
        if not (refused or "being compacted" in m.log_text()):
            m.print_log("the writer never met the fence", tail=40)
            print("saved %.1f s after the fence went up" % saved_in, err, read_status(m.path),
                  file=sys.stderr)
            self.fail("the writer never met the fence")
        wait_durable(CKPTCTL, self.store, JOB, step, timeout=120)
        self.rotate(m, step)
        m.stop()
        self.gc()
        time.sleep(grace + 0.2)  # the old packs were marked with that grace
        self.gc()
        kept = [step - 1, step]
        self.check_kept(kept)
        self.gc("--compact")
        self.settle()
        alone = self.kept_alone(kept)
        final = self.stored_bytes()
        print("writer back mid-compaction: saved %.1f s after the fence went up, refused, durable "
              "after it; stored %d, kept alone %d (%.3fx)"
              % (saved_in, final, alone, final / alone), file=sys.stderr)
        self.assertLessEqual(final / alone, 1.10)
        self.check_kept(kept)

    def test_publish_waits_for_the_fence(self):
        m = self.mount("a")
        t0 = time.time_ns()
        # The key docs/GC.md gives a fence: t0, until = t0 + 2*grace (an
        # hour here: it stands until the test deletes it), a nonce.
        fence = file_store_put(self.store, "jobs/%s/gc/compacting/%020d-%020d-%016x"
                               % (JOB, t0, t0 + 3600 * 10**9, 0x5eed))
        step_dir = os.path.join(m.path, JOB, "checkpoint-1")
        os.makedirs(step_dir)
        with open(os.path.join(step_dir, "model.pt"), "wb") as f:
            f.write(os.urandom(1 << 20))
        self.commit(m, 1)
        # Waiting, not retrying: it looks at the fence again and again while
        # the refused upload stays the only one.
        def looked_4_times():
            st = read_status(m.path)
            return st if st.get("fence_looks", 0) >= 4 else None

        st = wait_for(looked_4_times, 120, "the uploader looking at the fence 4 times")
        self.assertEqual((st["fence_waits"], st["upload_failures"], st["uploads"]), (1, 1, 0), st)
        self.assertIn("being compacted", st["last_error"])
        os.unlink(fence)
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=120)
        st = read_status(m.path)
        self.assertEqual((st["fence_waits"], st["upload_failures"], st["uploads"]), (1, 1, 1), st)
        self.assertEqual(m.log_text().count("retrying in"), 0, m.log_text())
        self.assertEqual(self.steps(), [1])


if __name__ == "__main__":
    unittest.main(verbosity=2)
