"""GC in a loop while two ckptfs daemons write (issue 6, docs/GC.md).

Two real mounts on one file:// store act as two nodes (own staging, own node
name). On each, one rank of a training job (gcd_writer.py, real torch.save)
checkpoints every step and commits its rank: a step is consistent once both
nodes' parts are durable. Every rank has a frozen backbone (deduplicated
against packs written long ago) and a head whose content comes back every 5
steps, so the daemons keep meeting chunks of packs that GC has just marked or
deleted (the hazard docs/GC.md closes; the daemon's last look refuses to
publish such a reference and its retry stores the chunks again).

Two ways GC runs in a loop for the whole time:

* test_ckptctl_gc_loop: `ckptctl gc --keep-last 2 --grace 1` from outside;
* test_daemon_gc_and_rotation: daemon A's own background GC
  (`--gc-keep-last 2 --gc-interval 0.5 --gc-grace 1`) while rank 0 also
  rotates like HF Trainer's save_total_limit=2 (`shutil.rmtree` of the step
  two back, through mount A: a deletion through the mount).

The run lasts at least MIN_STEPS steps and until GC has deleted packs (or
freed bytes) while both daemons were writing (bounded by the writer's
MAX_STEPS). Then:

* the store keeps exactly the two newest steps, and every kept step restores
  byte for byte equal to what the ranks saved (and reads back through a
  fresh mount, a new node);
* (ckptctl loop) `gc --dry-run` lists exactly what the real run then
  deletes, both for a retention run and for a sweep run;
* the stored bytes are within 10% of what the last two steps alone need in
  a fresh store.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import filecmp
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
                      run_ckptctl, torch_env)

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = "job"
WORLD = 2
MIN_STEPS = 60
RUN_TIMEOUT = 600    # s: the whole write phase
SETTLE_TIMEOUT = 120  # s: the last step consistent, then GC settled
GRACE = "1"


class GcDaemonsTest(MountTestCase):
    TMP_PREFIX = "ckptfs-gcd-"

    def setUp(self):
        super().setUp()
        self.ref = os.path.join(self.tmp, "ref")
        self.control = os.path.join(self.tmp, "control")
        os.makedirs(self.control)
        self.writers = []

    def tearDown(self):
        for p in self.writers:  # the writers first: they write into the mounts
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
            p.stderr.close()
        super().tearDown()

    # ------------------------------------------------------------ helpers

    def mount(self, name, extra=()):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node="node-" + name,
                  binary=CKPTFS, extra_args=["--refresh", "0.5", *extra])
        return self.start_mount(m, JOB)

    def ctl(self, *args, store=None, check=True, timeout=300):
        return run_ckptctl(CKPTCTL, store or self.store, JOB, *args, check=check,
                           timeout=timeout)

    def gc(self, *args):
        return json.loads(self.ctl("gc", "--json", "--grace", GRACE, *args).stdout)

    def steps(self, store=None):
        return [e["step"] for e in json.loads(self.ctl("ls", "--json", store=store).stdout)
                if e["consistent"]]

    def latest(self):
        p = self.ctl("latest", check=False)
        return int(p.stdout) if p.returncode == 0 else None

    def stored_bytes(self, store=None):
        return json.loads(self.ctl("stats", "--json", store=store).stdout)["stored_bytes"]

    def last_written(self, rank):
        try:
            with open(os.path.join(self.control, "rank-%d.last" % rank)) as f:
                return int(f.read())
        except (FileNotFoundError, ValueError):
            return 0

    def writers_alive(self):
        for rank, p in enumerate(self.writers):
            if p.poll() is not None:
                self.fail("writer rank %d exited %s:\n%s" % (rank, p.returncode, p.stderr.read()))
        return True

    def wait_for(self, what, probe, timeout, interval=0.2):
        deadline = time.monotonic() + timeout
        while True:
            ok, seen = probe()
            if ok:
                return seen
            if time.monotonic() > deadline:
                for m in self.mounts:
                    m.print_log(what, tail=60)
                self.fail("after %ss: %s; last seen: %s" % (timeout, what, seen))
            time.sleep(interval)

    def start_writers(self, mounts, keep=0):
        for rank, m in enumerate(mounts):
            p = subprocess.Popen(
                [TORCH_PYTHON, os.path.join(HERE, "gcd_writer.py"), m.path, JOB, str(rank),
                 str(WORLD), self.ref, self.control, str(keep)],
                env=torch_env({"RANK": str(rank), "WORLD_SIZE": str(WORLD)}),
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            self.writers.append(p)

    def gc_loop(self, stop, totals, errors):
        """ckptctl gc in a loop until stop is set; totals[...] accumulate."""
        try:
            while not stop.is_set():
                r = self.gc("--keep-last", "2")
                writing = all(p.poll() is None for p in self.writers)
                totals["runs"] += 1
                totals["steps_deleted"] += r["steps_deleted"]
                totals["packs_deleted"] += r["packs_deleted"]
                totals["bytes_freed"] += r["bytes_freed"]
                if writing and r["packs_deleted"]:
                    totals["packs_deleted_while_writing"] += r["packs_deleted"]
                time.sleep(0.1)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    # ------------------------------------------------------------ the tests

    def test_ckptctl_gc_loop(self):
        a, b = self.mount("a"), self.mount("b")
        self.start_writers([a, b])
        totals = dict(runs=0, steps_deleted=0, packs_deleted=0, bytes_freed=0,
                      packs_deleted_while_writing=0)
        errors, stop = [], threading.Event()
        loop = threading.Thread(target=self.gc_loop, args=(stop, totals, errors))
        loop.start()
        try:
            final = self.write_until(lambda: not errors and totals["packs_deleted_while_writing"] > 0,
                                     lambda: dict(totals, errors=errors))
        finally:
            stop.set()
            loop.join()
        self.assertEqual(errors, [])
        print("steps %d, gc runs %d, steps deleted %d, packs deleted %d (%d while writing), "
              "%d bytes freed" % (final, totals["runs"], totals["steps_deleted"],
                                  totals["packs_deleted"], totals["packs_deleted_while_writing"],
                                  totals["bytes_freed"]), file=sys.stderr)
        self.assertGreater(totals["runs"], 20)

        # Settle: retention, then sweeps past the grace period.
        self.gc("--keep-last", "2")
        for _ in range(2):
            time.sleep(float(GRACE) + 0.2)
            self.gc("--keep-last", "2")
        self.check_kept(final)
        self.assertLessEqual(self.stored_ratio(final), 1.10)

        # A dry run lists exactly what the real run then deletes: retention
        # (keep only the newest step), then the sweep of what it left.
        for args in (["--keep-last", "1"], []):
            time.sleep(float(GRACE) + 0.2)
            dry, real = self.gc("--dry-run", *args), self.gc(*args)
            self.assertTrue(dry["dry_run"])
            self.assertFalse(real["dry_run"])
            self.assertGreater(len(real["deleted"]), 0, "nothing to compare: %s" % real)
            for field in ("deleted", "deleted_steps", "bytes_freed", "objects_deleted"):
                self.assertEqual(dry[field], real[field], field)
        self.assertEqual(self.steps(), [final])

    def test_daemon_gc_and_rotation(self):
        a = self.mount("a", ["--gc-keep-last", "2", "--gc-interval", "0.5", "--gc-grace", GRACE])
        b = self.mount("b")
        self.start_writers([a, b], keep=2)
        freed_while_writing = [0]

        def gc_freed():
            st = self.status(a)
            if all(p.poll() is None for p in self.writers):
                freed_while_writing[0] = st["gc"]["bytes_freed"]
            return freed_while_writing[0] > 0 and st["gc"]["runs"] > 20, st["gc"]

        final = self.write_until(lambda: gc_freed()[0], lambda: gc_freed()[1])
        st = self.status(a)
        rotated = sum(j["steps_deleted"] for j in st["jobs"])
        print("steps %d, daemon gc runs %d, %d bytes freed (%d while writing), steps deleted "
              "by GC %d, through the mount %d" % (
                  final, st["gc"]["runs"], st["gc"]["bytes_freed"], freed_while_writing[0],
                  st["gc"]["steps_deleted"], rotated), file=sys.stderr)
        self.assertEqual(st["gc"]["last_error"], "")
        self.assertGreater(rotated, MIN_STEPS // 2, "rmtree through the mount deleted few steps")

        # Settle: the daemon's GC keeps running; wait (bounded) until the
        # store holds the last two steps and what they need.
        self.wait_for("the daemon's GC settled on the last two steps",
                      lambda: (self.steps() == [final - 1, final] and
                               self.stored_ratio(final, quiet=True) <= 1.10,
                               (self.steps(), self.stored_ratio(final, quiet=True))),
                      SETTLE_TIMEOUT, interval=1)
        self.check_kept(final)
        print("stored/needed %.3f" % self.stored_ratio(final), file=sys.stderr)
        # Rotation on node A removed the old steps from node B's view too.
        names = sorted(n for n in os.listdir(os.path.join(b.path, JOB)) if n.startswith("step-"))
        self.assertEqual(names[-2:], ["step-%06d" % s for s in (final - 1, final)])
        self.assertLessEqual(len(names), 4, "node B still shows deleted steps: %s" % names)

    # ------------------------------------------------------------ shared

    def write_until(self, enough, seen):
        """Lets the writers run until MIN_STEPS and enough(), then stops them
        at one final step for all ranks, waits until it is consistent and
        returns it."""
        self.wait_for(
            "%d steps written and GC freeing space during the writes" % MIN_STEPS,
            lambda: (self.writers_alive() and
                     min(map(self.last_written, range(WORLD))) >= MIN_STEPS and enough(),
                     dict(seen(), last=[self.last_written(r) for r in range(WORLD)])),
            RUN_TIMEOUT, interval=0.5)
        final = max(map(self.last_written, range(WORLD))) + 1
        with open(os.path.join(self.control, "stop"), "w") as f:
            f.write(str(final))
        for rank, p in enumerate(self.writers):
            p.wait(timeout=120)
            self.assertEqual(p.returncode, 0, "writer rank %d: %s" % (rank, p.stderr.read()))
        self.wait_for("step %d consistent" % final,
                      lambda: (self.latest() == final, self.steps()), SETTLE_TIMEOUT)
        refused = sum(m.log_text().count("not publishing") for m in self.mounts)
        print("uploads refused by the last look and retried: %d" % refused, file=sys.stderr)
        return final

    def check_kept(self, final):
        """The store keeps exactly the last two steps; each restores byte for
        byte and reads back through a new node's mount."""
        kept = self.steps()
        self.assertEqual(kept, [final - 1, final])
        for step in kept:
            name = "step-%06d" % step
            out = os.path.join(self.tmp, "restore", name)
            shutil.rmtree(out, ignore_errors=True)
            self.ctl("verify", "--step", str(step))
            self.ctl("restore", "--step", str(step), "--to", out)
            self.assert_same_tree(os.path.join(self.ref, name), os.path.join(out, name))
        c = self.mount("c")
        for step in kept:
            name = "step-%06d" % step
            self.wait_for("%s visible on a new node" % name,
                          lambda: (os.path.isdir(os.path.join(c.path, JOB, name)), None), 30)
            self.assert_same_tree(os.path.join(self.ref, name), os.path.join(c.path, JOB, name))

    def stored_ratio(self, final, quiet=False):
        """Stored bytes of the job / what the last two steps alone need in a
        fresh store (computed once)."""
        if not hasattr(self, "baseline"):
            fresh = "file://" + os.path.join(self.tmp, "fresh")
            for step in (final - 1, final):
                self.ctl("put", "--step", str(step),
                         os.path.join(self.ref, "step-%06d" % step), store=fresh)
            self.baseline = self.stored_bytes(store=fresh)
        stored = self.stored_bytes()
        if not quiet:
            print("stored %d bytes, the last two steps alone %d (%.3fx)" %
                  (stored, self.baseline, stored / self.baseline), file=sys.stderr)
        return stored / self.baseline

    def status(self, m):
        with open(os.path.join(m.path, ".ckptfs", "status")) as f:
            return json.load(f)

    def assert_same_tree(self, expected, got):
        names = sorted(os.listdir(expected))
        self.assertEqual(sorted(os.listdir(got)), names, got)
        for n in names:
            self.assertTrue(filecmp.cmp(os.path.join(expected, n), os.path.join(got, n),
                                        shallow=False), "%s/%s differs" % (got, n))


if __name__ == "__main__":
    unittest.main(verbosity=2)
