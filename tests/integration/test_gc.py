"""GC while two nodes write (docs/GC.md), through ckptctl on a
file:// store.

Two writer processes (`ckptctl put` with their own --node and --state-dir, as
two nodes) store checkpoints concurrently: a frozen 4 MiB backbone shared by
every step, and a 128 KiB head whose content is one of 4 variants, chosen by
the clock: each variant is written for 1.5 s, by both writers, then goes
unused for 4.5 s. By the clock and not by the step count, because a pack is
deleted only after it went unreferenced for longer than the grace period: a
variant that comes back every few steps is always back within the grace
period on a machine where a put is fast (CI saw 151 GC runs and not one
deletion that way). A writer coming back to a variant meets the chunks of a
pack that GC has just marked or deleted (the hazard docs/GC.md closes).
Meanwhile `ckptctl gc --keep-last 2 --grace 1` runs in a loop. Then: every
kept step verifies and restores byte for byte; `gc --dry-run` lists exactly
what the real run deletes; stored bytes are within 10% of what the last two
steps alone need in a fresh store.

A long run with repack (docs/GC.md, Repack by retirement): a model (real
torch.save) whose frozen half keeps its bytes while the other half changes
at every step, stored with `ckptctl put` and `gc --keep-last 2` after each
step. At the end the job's objects take within 10% of what the last two
steps alone need in a fresh store, and the same run with repack off
(`--repack-dead 100`) takes more than that: the first step's pack, mostly
dead, is kept alive by the frozen half.

Run by ctest with CKPTCTL pointing at the built binary.
"""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import file_store_keys, run_torch  # noqa: E402

CKPTCTL = os.environ.get("CKPTCTL")
STEPS_PER_WRITER = 40
MAX_STEPS_PER_WRITER = 200
BACKBONE = 4 << 20
HEAD = 128 << 10
HEAD_PERIOD = 5  # a step's own head variant (long runs and fresh stores)
HEAD_VARIANTS = 4  # the head variants the two writers take turns at
HEAD_EPOCH = 1.5  # seconds each of them is written for
WRITE_SECONDS = 2 * HEAD_VARIANTS * HEAD_EPOCH  # two rounds of them
LONG_RUN_STEPS = 10

# Four frozen tensors (3 MiB) and four trained ones (4 MiB) per step: the
# first step's pack is 4/7 dead once that step is deleted.
MAKE_MODELS = r"""
import os, sys, torch
out, steps = sys.argv[1], int(sys.argv[2])
frozen = [torch.randn(192 << 10, generator=torch.Generator().manual_seed(i)) for i in range(4)]
for step in range(1, steps + 1):
    g = torch.Generator().manual_seed(1000 + step)
    state = {}
    for i in range(4):
        state["backbone.%d" % i] = frozen[i]
    for i in range(4):
        state["head.%d" % i] = torch.randn(256 << 10, generator=g)
    d = os.path.join(out, "step-%d" % step)
    os.makedirs(d)
    torch.save({"model": state, "step": step}, os.path.join(d, "model.pt"))
"""


def step_files(variant):
    """The files of a step whose head is `variant`: backbone.bin, head.bin."""
    return {
        "backbone.bin": random.Random(1).randbytes(BACKBONE),
        "head.bin": random.Random(1000 + variant).randbytes(HEAD),
    }


class GcTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(CKPTCTL and os.access(CKPTCTL, os.X_OK), "CKPTCTL must name the binary")
        self.tmp = tempfile.mkdtemp(prefix="ckpt-gc-")
        self.store = "file://" + os.path.join(self.tmp, "store")
        self.variant_of = {}  # step -> the head variant put last under that number

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ctl(self, *args, store=None, node=None, check=True):
        cmd = [CKPTCTL, "--store", store or self.store, "--job", "gcjob"]
        if node:
            cmd += ["--node", node, "--state-dir", os.path.join(self.tmp, "state-" + node)]
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=300)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd + list(args))}: exit {p.returncode}\n{p.stderr}")
        return p

    def put(self, step, node, store=None, variant=None):
        src = os.path.join(self.tmp, f"src-{node}-{step}")
        os.makedirs(src, exist_ok=True)
        if variant is None:
            variant = step % HEAD_PERIOD
        self.variant_of[step] = variant
        for name, data in step_files(variant).items():
            with open(os.path.join(src, name), "wb") as f:
                f.write(data)
        # A put refuses to publish a reference to a pack GC marked too long
        # ago (exit 3, "not publishing"); its retry stores the chunks again.
        for attempt in range(20):
            p = self.ctl("put", "--step", str(step), src, "--json", store=store, node=node,
                         check=False)
            if p.returncode == 0:
                break
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertIn("not publishing", p.stderr)
            self.retries += 1
            time.sleep(0.3)
        else:
            self.fail(f"put of step {step} kept failing: {p.stderr}")
        shutil.rmtree(src)

    def gc(self, *args):
        return json.loads(self.ctl("gc", "--json", *args).stdout)

    def steps(self, store=None):
        return [s["step"] for s in json.loads(self.ctl("ls", "--json", store=store).stdout)]

    def stored_bytes(self, store=None):
        return json.loads(self.ctl("stats", "--json", store=store).stdout)["stored_bytes"]

    def job_bytes(self, store):
        """Bytes of every object under jobs/gcjob/ of a file:// store
        (mountlib.file_store_keys: it skips the backend's temp files and a
        key deleted while it walks)."""
        return sum(file_store_keys(store, "jobs/gcjob/").values())

    def long_run(self, models, repack_dead):
        """Steps 1..LONG_RUN_STEPS of `models` into a store of their own, gc
        --keep-last 2 after each (a dry run first: the same steps go, the
        same packs are retired), then GC settled (a dry run first: the same
        keys, now that no marker is near the end of its grace period).
        Returns (store, job bytes, packs retired over the run)."""
        store = "file://" + os.path.join(self.tmp, "store-repack-" + repack_dead)
        gc = ["--grace", "1", "--repack-dead", repack_dead]

        def dry_then_real(*args):
            # The same --batch: batched deletes report in batch order.
            dry = json.loads(self.ctl("gc", "--json", "--dry-run", "--batch", "1", *args,
                                      store=store).stdout)
            p = self.ctl("gc", "--json", "--batch", "1", "--progress", *args, store=store)
            real = json.loads(p.stdout)
            self.assertEqual(dry["deleted_steps"], real["deleted_steps"])
            self.assertEqual(dry["packs_retired"], real["packs_retired"])
            if real["objects_deleted"]:
                self.assertIn("ckptctl gc: deleted", p.stderr)
            return dry, real

        retired = 0
        for step in range(1, LONG_RUN_STEPS + 1):
            src = os.path.join(models, "step-%d" % step)
            self.ctl("put", "--step", str(step), src, store=store, node="node-" + repack_dead)
            retired += dry_then_real("--keep-last", "2", *gc)[1]["packs_retired"]
        for _ in range(3):  # mark, then past the grace period, delete
            time.sleep(1.1)
            dry, real = dry_then_real(*gc)
            self.assertEqual(dry["deleted"], real["deleted"])
        self.assertEqual(self.steps(store=store), [LONG_RUN_STEPS - 1, LONG_RUN_STEPS])
        return store, self.job_bytes(store), retired

    def test_long_run_repack(self):
        models = os.path.join(self.tmp, "models")
        run_torch(MAKE_MODELS, models, LONG_RUN_STEPS)

        store, stored, retired = self.long_run(models, "50")
        # The kept steps restore byte for byte.
        for step in (LONG_RUN_STEPS - 1, LONG_RUN_STEPS):
            out = os.path.join(self.tmp, "restore-%d" % step)
            self.ctl("restore", "--step", str(step), "--to", out, store=store)
            with open(os.path.join(out, "model.pt"), "rb") as a, \
                    open(os.path.join(models, "step-%d" % step, "model.pt"), "rb") as b:
                self.assertEqual(a.read(), b.read(), "step %d" % step)
        _, stored_off, retired_off = self.long_run(models, "100")

        fresh = "file://" + os.path.join(self.tmp, "fresh")
        for step in (LONG_RUN_STEPS - 1, LONG_RUN_STEPS):
            self.ctl("put", "--step", str(step), os.path.join(models, "step-%d" % step),
                     store=fresh, node="node-fresh")
        baseline = self.job_bytes(fresh)
        print("keep-last 2 over %d steps: stored %d bytes with repack (%d packs retired), "
              "%d without; the last two steps alone %d (%.3fx with, %.3fx without)" %
              (LONG_RUN_STEPS, stored, retired, stored_off, baseline, stored / baseline,
               stored_off / baseline), file=sys.stderr)
        self.assertGreater(retired, 0)
        self.assertEqual(retired_off, 0)
        self.assertLessEqual(stored, baseline * 1.10)
        self.assertGreater(stored_off, baseline * 1.10)

    def test_gc_with_two_writers(self):
        self.retries = 0
        self.put(1, "node-a")  # the backbone, so that both nodes dedup against it
        errors = []
        done = threading.Event()

        gc_runs = [0, 0]  # runs, packs deleted
        written = [1]
        start = time.monotonic()

        def head_now():
            return int((time.monotonic() - start) / HEAD_EPOCH) % HEAD_VARIANTS

        def writer(node, first):
            # At least STEPS_PER_WRITER steps and two rounds of the head
            # variants (each variant comes back once after going unused),
            # and on until GC has deleted a pack while writers were running
            # (bounded).
            try:
                i = 0
                while (i < STEPS_PER_WRITER or time.monotonic() - start < WRITE_SECONDS
                       or (gc_runs[1] == 0 and i < MAX_STEPS_PER_WRITER)):
                    self.put(first + 2 * i, node, variant=head_now())
                    written.append(first + 2 * i)
                    i += 1
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        def collector():
            try:
                while not done.is_set():
                    r = self.gc("--keep-last", "2", "--grace", "1")
                    gc_runs[0] += 1
                    gc_runs[1] += r["packs_deleted"]
                    time.sleep(0.1)
            except BaseException as e:
                errors.append(e)

        writers = [threading.Thread(target=writer, args=("node-a", 2)),
                   threading.Thread(target=writer, args=("node-b", 3))]
        g = threading.Thread(target=collector)
        for t in writers + [g]:
            t.start()
        for t in writers:
            t.join()
        done.set()
        g.join()
        self.assertEqual(errors, [])
        print(f"gc runs {gc_runs[0]}, packs deleted {gc_runs[1]}, put retries {self.retries}",
              file=sys.stderr)
        self.assertGreater(gc_runs[0], 10)
        self.assertGreater(gc_runs[1], 0)

        # Settle: retention, then two sweeps past the grace period.
        self.gc("--keep-last", "2", "--grace", "1")
        for _ in range(2):
            time.sleep(1.2)
            self.gc("--keep-last", "2", "--grace", "1")
        kept = self.steps()
        self.assertEqual(kept, sorted(written)[-2:])

        # Every kept step verifies and restores byte for byte.
        for step in kept:
            self.ctl("verify", "--step", str(step))
            out = os.path.join(self.tmp, f"restore-{step}")
            self.ctl("restore", "--step", str(step), "--to", out)
            for name, data in step_files(self.variant_of[step]).items():
                with open(os.path.join(out, name), "rb") as f:
                    self.assertEqual(f.read(), data, f"step {step} {name}")

        # Stored bytes against the last two steps alone in a fresh store.
        stored = self.stored_bytes()
        fresh = "file://" + os.path.join(self.tmp, "fresh")
        for step in kept:
            self.put(step, "node-fresh", store=fresh, variant=self.variant_of[step])
        baseline = self.stored_bytes(store=fresh)
        print(f"stored {stored} bytes, the last two steps alone {baseline} "
              f"({stored / baseline:.3f}x)", file=sys.stderr)
        self.assertLessEqual(stored, baseline * 1.10)

    def test_dry_run_equals_real_run(self):
        self.retries = 0
        for step in range(1, 9):
            self.put(step, "node-a" if step % 2 else "node-b")
        self.ctl("pin", "--step", "3")
        for args in (["--keep-last", "2", "--keep-every", "4", "--grace", "1"],
                     ["--grace", "1"]):
            time.sleep(1.1)
            dry = self.gc("--dry-run", *args)
            real = self.gc(*args)
            self.assertTrue(dry["dry_run"])
            self.assertFalse(real["dry_run"])
            self.assertEqual(dry["deleted"], real["deleted"])
            self.assertEqual(dry["deleted_steps"], real["deleted_steps"])
            self.assertEqual(dry["bytes_freed"], real["bytes_freed"])
            self.assertGreater(len(real["deleted"]), 0)
        self.assertEqual(self.steps(), [3, 4, 7, 8])
        for step in self.steps():
            self.ctl("verify", "--step", str(step))


if __name__ == "__main__":
    unittest.main(verbosity=2)
