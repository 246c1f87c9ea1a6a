"""GC in a loop while two ckptfs daemons write (docs/GC.md).

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
  two back, through mount A: a deletion through the mount);
* test_compact_and_retention_beside_daemon_gc: both daemons run that
  background GC (grace 3 s: COMPACT_GRACE says why) while, from outside,
  `ckptctl gc --keep-last 2` loops and
  `ckptctl gc --compact` runs each time the latest step moved (a publish
  fence, docs/GC.md "Compaction", that the daemons' uploads meet and
  retry). Every gc run exits 0, or 7 for a skip it names; at least
  MIN_COMPACTIONS compactions get past the fence's wait (docs/RELIABILITY.md,
  "Held under pressure"). The writers are paced by the compactions (each
  run lets them go COMPACT_PACE steps past the latest step it saw; see
  gcd_writer.py), so that condition is reached on any machine rather than
  raced against the writers' MAX_STEPS.

The run lasts at least MIN_STEPS steps (COMPACT_MIN_STEPS in the third) and
until GC has deleted packs (or freed bytes, or compacted) while both daemons
were writing (bounded by the writer's MAX_STEPS). Then:

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
COMPACT_MIN_STEPS = 30  # test_compact_and_retention_beside_daemon_gc
# Compactions past the fence's wait, in that test: fewer in the sanitizer
# build (tools/test.sh sets ASAN_OPTIONS), where each takes several times
# longer, to bound the test's time.
MIN_COMPACTIONS = 2 if os.environ.get("ASAN_OPTIONS") else 8
RUN_TIMEOUT = 600    # s: the whole write phase
SETTLE_TIMEOUT = 120  # s: the last step consistent, then GC settled
GRACE = "1"
# test_compact_and_retention_beside_daemon_gc's grace. GC deletes a partial
# step once a newer step has been consistent for grace (docs/GC.md,
# "Retention"): it relies on no publish being held back that long after. A
# fence holds a publish for grace/2 plus the compaction's work, and the
# daemon publishes as soon as the fence is gone; a publish that meets a
# marked pack retries after 1 s. With 1 s, under the sanitizer, a step whose
# other part landed first was taken as abandoned (the part was held by a
# fence and then, before fences were waited for, by a backoff of 2 s). So
# 3 s on every build, and the compactions stop before the final step: its
# parts and those of the step before meet no fence. Production's grace is an
# hour.
COMPACT_GRACE = "3"
# Steps the writers may go past the latest step each compaction run saw:
# enough that the next run finds publishes in flight to wait for.
COMPACT_PACE = 8
DRAIN = "10"  # s: --drain of the daemons in test_compact_and_retention_beside_daemon_gc


class GcDaemonsTest(MountTestCase):
    TMP_PREFIX = "ckptfs-gcd-"
    grace = GRACE  # of every GC run: the daemons' and ckptctl gc's

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

    def gc(self, *args, skips=None):
        """`ckptctl gc --json --grace self.grace ARGS`: its report. Any exit but 0
        fails, except exit 7 (docs/GC.md: the run skipped its sweep or its
        compaction, and says why) when skips is a list: the why is appended."""
        p = self.ctl("gc", "--json", "--grace", self.grace, *args, check=False)
        if p.returncode == 7 and skips is not None:
            r = json.loads(p.stdout)
            why = r["why"] if r["sweep_skipped"] else r["compact"]["why"]
            self.assertTrue(r["sweep_skipped"] or r["compact"]["skipped"],
                            "exit 7 with nothing skipped: %s" % p.stdout)
            skips.append(why)
            return r
        self.assertEqual(p.returncode, 0, "gc %s: %s" % (" ".join(args), p.stderr))
        return json.loads(p.stdout)

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

    def allow(self, step):
        """Lets the writers start steps up to step (gcd_writer.py's pace)."""
        tmp = os.path.join(self.control, "allow.tmp")
        with open(tmp, "w") as f:
            f.write(str(step))
        os.replace(tmp, os.path.join(self.control, "allow"))

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

    def gc_loop(self, stop, totals, errors, skips=None):
        """ckptctl gc --keep-last 2 in a loop until stop is set; totals[...]
        accumulate (skips: as for gc())."""
        try:
            while not stop.is_set():
                r = self.gc("--keep-last", "2", skips=skips)
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

    def test_compact_and_retention_beside_daemon_gc(self):
        """Both daemons run their own GC (retention and sweep) while, from
        outside, `gc --keep-last 2` runs in a loop and `gc --compact` runs
        each time the job's latest step moved (so the writers publish
        between two fences). A compaction skipped or a sweep skipped is
        the only failure accepted (exit 7, docs/GC.md)."""
        self.grace = COMPACT_GRACE
        daemon_gc = ["--gc-keep-last", "2", "--gc-interval", "0.5", "--gc-grace", self.grace,
                     "--drain", DRAIN]
        a, b = self.mount("a", daemon_gc), self.mount("b", daemon_gc)
        self.allow(COMPACT_PACE)
        self.start_writers([a, b])
        t0 = time.monotonic()
        totals = dict(runs=0, steps_deleted=0, packs_deleted=0, bytes_freed=0,
                      packs_deleted_while_writing=0, compact_runs=0, compactions=0,
                      compactions_rewriting=0, parts_rewritten=0, packs_written=0,
                      live_bytes_copied=0, longest_compact_s=0.0)
        errors, skips, stop, stop_compacting = [], [], threading.Event(), threading.Event()
        loops = [threading.Thread(target=self.gc_loop, args=(stop, totals, errors, skips)),
                 threading.Thread(target=self.compact_loop,
                                  args=(stop_compacting, totals, errors, skips))]
        for t in loops:
            t.start()

        def no_more_compactions():
            stop_compacting.set()
            loops[1].join()

        try:
            final = self.write_until(
                lambda: not errors and totals["compactions"] >= MIN_COMPACTIONS,
                lambda: dict(totals, errors=errors), min_steps=COMPACT_MIN_STEPS,
                before_final=no_more_compactions)
        finally:
            stop.set()
            stop_compacting.set()
            for t in loops:
                t.join()
        self.assertEqual(errors, [])
        written = time.monotonic() - t0
        daemon_runs = [self.status(m)["gc"] for m in (a, b)]
        fenced = sum(m.log_text().count("is being compacted") for m in self.mounts)
        print("steps %d in %.0f s; ckptctl gc --keep-last 2: %d runs, %d steps deleted, %d packs "
              "deleted (%d while writing); gc --compact: %d runs, %d compactions behind the "
              "fence (%d rewriting: %d part records, %d packs, %d bytes copied), longest "
              "%.1f s; daemon gc runs %s, steps deleted by them %s; runs that exited 7 "
              "(skipped): %d %s; publishes refused by the fence and retried: %d" % (
                  final, written, totals["runs"], totals["steps_deleted"],
                  totals["packs_deleted"], totals["packs_deleted_while_writing"],
                  totals["compact_runs"], totals["compactions"], totals["compactions_rewriting"],
                  totals["parts_rewritten"], totals["packs_written"],
                  totals["live_bytes_copied"], totals["longest_compact_s"],
                  [g["runs"] for g in daemon_runs], [g["steps_deleted"] for g in daemon_runs],
                  len(skips), sorted(set(skips)), fenced), file=sys.stderr)
        self.assertGreaterEqual(totals["compactions"], MIN_COMPACTIONS)
        self.assertGreater(totals["runs"], 10)
        for g in daemon_runs:
            self.assertGreater(g["runs"], 10)

        # Settle: one more compaction and retention from outside; the
        # daemons' GC sweeps on until the store holds the last two steps
        # and what they need.
        self.gc("--compact", "--keep-last", "2", skips=skips)
        _, ratio = self.wait_for("GC settled on the last two steps",
                                 lambda: (self.steps() == [final - 1, final] and
                                          self.stored_ratio(final, quiet=True) <= 1.10,
                                          (self.steps(), self.stored_ratio(final, quiet=True))),
                                 SETTLE_TIMEOUT, interval=1)
        for m in (a, b):
            self.assertEqual(self.status(m)["gc"]["last_error"], "")
        # The daemons still run: a part of an old step that the fence held
        # back may be published after retention deleted that step, which
        # then comes back until the next retention (docs/MOUNT.md, "Limits").
        self.check_kept(final, comebacks_ok=True)
        # Both writing daemons unmount cleanly, within their --drain. Their
        # drain may publish parts of old steps that GC deleted while the
        # fence held them back: such a step comes back and the next
        # retention deletes it again (docs/MOUNT.md, "Limits"); the kept
        # steps stay, whole. (An upload of such a step whose local copy is
        # gone fails until the drain ends: counted.)
        unmount_s, stuck = [], 0
        for m in (a, b):
            stuck += m.log_text().count("is no longer current")
            t = time.monotonic()
            self.assertEqual(m.unmount(timeout=float(DRAIN) + 20), 0)
            unmount_s.append(time.monotonic() - t)
        after = self.steps()
        self.assertEqual(after[-2:], [final - 1, final])
        self.gc("--keep-last", "2", skips=skips)
        self.check_restores(final)
        print("stored/needed %.3f when settled; unmount a/b %.1f/%.1f s; old steps back after "
              "the drains: %s; upload retries of a deleted step with no local copy: %d; "
              "total %.0f s" % (ratio, unmount_s[0], unmount_s[1], after[:-2], stuck,
                                time.monotonic() - t0), file=sys.stderr)

    def compact_loop(self, stop, totals, errors, skips):
        """`ckptctl gc --compact` until stop is set, each run once the job's
        latest consistent step is newer than at the end of the one before;
        totals[...] accumulate."""
        try:
            done_at = None
            while not stop.is_set():
                latest = self.latest()
                if latest is None or latest == done_at:
                    stop.wait(0.1)
                    continue
                t = time.monotonic()
                k = self.gc("--compact", skips=skips)["compact"]
                totals["longest_compact_s"] = max(totals["longest_compact_s"],
                                                  time.monotonic() - t)
                totals["compact_runs"] += 1
                if not k["skipped"] and k["wait_ns"] > 0:  # past the fence's wait
                    totals["compactions"] += 1
                totals["compactions_rewriting"] += k["parts_rewritten"] > 0
                totals["parts_rewritten"] += k["parts_rewritten"]
                totals["packs_written"] += k["packs_written"]
                totals["live_bytes_copied"] += k["live_bytes"] if k["packs_written"] else 0
                done_at = self.latest()
                self.allow((done_at or 0) + COMPACT_PACE)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    # ------------------------------------------------------------ shared

    def write_until(self, enough, seen, min_steps=MIN_STEPS, before_final=None):
        """Lets the writers run until min_steps and enough(), calls
        before_final() if given, then stops them at one final step for all
        ranks, waits until it is consistent and returns it."""
        self.wait_for(
            "%d steps written and GC at work during the writes" % min_steps,
            lambda: (self.writers_alive() and
                     min(map(self.last_written, range(WORLD))) >= min_steps and enough(),
                     dict(seen(), last=[self.last_written(r) for r in range(WORLD)])),
            RUN_TIMEOUT, interval=0.5)
        if before_final:
            before_final()
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

    def check_kept(self, final, comebacks_ok=False):
        """The store keeps exactly the last two steps; each restores byte for
        byte and reads back through a new node's mount. comebacks_ok: older
        steps besides them may be listed (come back, see the caller)."""
        kept = self.check_restores(final, comebacks_ok)
        c = self.mount("c")
        for step in kept:
            name = "step-%06d" % step
            self.wait_for("%s visible on a new node" % name,
                          lambda: (os.path.isdir(os.path.join(c.path, JOB, name)), None), 30)
            self.assert_same_tree(os.path.join(self.ref, name), os.path.join(c.path, JOB, name))

    def check_restores(self, final, comebacks_ok=False):
        """The store keeps exactly the last two steps (and, with
        comebacks_ok, possibly older ones come back), each of the two
        verifies and restores byte for byte; returns them."""
        kept = self.steps()
        if comebacks_ok:
            self.assertEqual(kept[-2:], [final - 1, final])
            if kept[:-2]:
                print("old steps come back while the daemons run: %s" % kept[:-2],
                      file=sys.stderr)
            kept = kept[-2:]
        self.assertEqual(kept, [final - 1, final])
        for step in kept:
            name = "step-%06d" % step
            out = os.path.join(self.tmp, "restore", name)
            shutil.rmtree(out, ignore_errors=True)
            self.ctl("verify", "--step", str(step))
            self.ctl("restore", "--step", str(step), "--to", out)
            self.assert_same_tree(os.path.join(self.ref, name), os.path.join(out, name))
        return kept

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
