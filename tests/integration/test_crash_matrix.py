"""The crash matrix (docs/RELIABILITY.md "Crash matrix"): a real
ckptfs daemon killed with SIGKILL at each named crash point of the seal ->
pack PUT -> manifest PUT -> part record -> index commit pipeline, the close
path's journal write and the deletion executor (util/st_crashpoint.h; a
-DCKPT_TEST_HOOKS=ON build), several times each, on a file:// store.

One run of a point (CKPT_CRASH_AT=NAME:N, the N-th pass crashes):
1. mount with the point armed; a torch writer saves step 1 (torch.save flat
   file), step 2 (HF layout: pytorch_model.bin + trainer_state.json, the
   completion marker) and step 3 (flat), recording every file whose close()
   returned (acknowledged) and, before writing, the bytes it meant to write
   (a local reference copy); for the deletion points the writer's steps are
   made durable, then checkpoint-2 is removed through the mount;
2. the daemon must die at the point: its log says "crashpoint NAME hit" (a
   point that never fires fails the run);
3. while it is dead, a reader (`ckptctl --json ls`, `ckptctl latest`, another
   process) sees only complete steps: every listed step is consistent and
   restores byte-identical to what was written, with all its files, and
   `latest` names the newest of them;
4. restarted on the same staging without the crash variable, every
   acknowledged file reads back byte-identical through the mount, every step
   whose files were all acknowledged becomes durable and restores
   byte-identical (ckptctl restore + sha256), a removed step is deleted from
   the store and stays gone, and a fresh mount on a new staging reads the
   durable steps' files byte-identical from the store alone.

Environment: CKPTFS and CKPTCTL name the binaries (built with
-DCKPT_TEST_HOOKS=ON). CKPT_CRASH_ONLY=NAME[,NAME...] runs only those points;
CKPT_CRASH_REPEAT=K changes the repetitions (default 3).
"""
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountTestCase, file_store_keys,  # noqa: E402
                      list_steps, run_torch, sha256_file, tree_digest, wait_durable, wait_for)

JOB = "job"

# (name, passes N tried, what it is between). The upload points are passed
# once per step uploaded (one pack per step here), the close points once per
# close of a written file, the deletion points once per deleted step.
POINTS = [
    ("close-journal-before", (1, 2, 3), "close: data fsynced, file's row not in the journal"),
    ("close-journal-after", (1, 2, 3), "close: row committed, close() not yet answered"),
    ("pack-sealed", (1, 2, 3), "a pack finished (named by its hash), not yet queued for PUT"),
    ("pack-put-before", (1, 2, 3), "upload thread about to PUT a pack"),
    ("pack-put-after", (1, 2, 3), "pack PUT returned, its chunks not in the dedup index"),
    ("chunks-indexed", (1, 2, 3), "the pack's chunks committed to the dedup index"),
    ("manifest-put-before", (1, 2, 3), "packs stored, manifest not PUT"),
    ("manifest-put-after", (1, 2, 3), "manifest PUT, part record (what makes it visible) not"),
    ("part-put-before", (1, 2, 3), "manifest PUT, part record encoded, not PUT"),
    ("part-put-after", (1, 2, 3), "part record PUT: step visible, the mount does not know yet"),
    ("upload-published", (1, 2, 3), "publish returned, files not marked durable"),
    ("upload-files-durable", (1, 2, 3), "files marked durable in the journal, step row not"),
    ("delete-parts-gone", (1, 1, 1), "deletion: part records deleted, manifests not"),
    ("delete-store-done", (1, 1, 1), "deletion done in the store, request still in the journal"),
]
DELETE_POINTS = {"delete-parts-gone", "delete-store-done"}

# The writer's plan: (path under the job, step, kind).
PLAN = [
    ("ckpt-000001.pt", 1, "model"),
    ("checkpoint-2/pytorch_model.bin", 2, "model"),
    ("checkpoint-2/trainer_state.json", 2, "json"),
    ("ckpt-000003.pt", 3, "model"),
]
STEP_FILES = {step: [rel for rel, s, _ in PLAN if s == step] for step in (1, 2, 3)}
STEP_OF = {rel: step for rel, step, _ in PLAN}

# Saves PLAN into the mount's job directory. Each file is first saved to
# REF/<same path>, then into the mount; after the mount's close() returned,
# its path is appended to ACK (fsynced). torch.save writes into a file object
# the writer closes itself: given a path, torch 1.13's C++ writer ignores a
# failing close(), which would count an unacknowledged file as acknowledged.
# The first error (the daemon died: ENOTCONN) ends the writer, which exits 0
# saying so.
WRITER = """
import json, os, sys, torch
job_dir, ref_dir, ack_path, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
plan = json.loads(sys.argv[5])
def save(kind, obj, path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        if kind == "model":
            torch.save(obj, f)
        else:
            f.write(json.dumps(obj).encode())
with open(ack_path, "a") as ack:
    for rel, step, kind in plan:
        torch.manual_seed(seed * 1000 + step)
        obj = (torch.nn.Linear(96, 192).state_dict() if kind == "model"
               else {"global_step": step, "seed": seed})
        save(kind, obj, os.path.join(ref_dir, rel))
        try:
            save(kind, obj, os.path.join(job_dir, rel))
        except (OSError, RuntimeError) as e:  # torch raises RuntimeError for I/O
            print("writer stopped at %s: %s" % (rel, e))
            sys.exit(0)
        ack.write(rel + "\\n")
        ack.flush()
        os.fsync(ack.fileno())
"""


def step_prefix(step):
    return "jobs/%s/steps/%020d/" % (JOB, step)


class CrashRun:
    """The directories, mount and writer results of one run of a point."""

    def __init__(self, case, root, point, nth, seed):
        self.case, self.point, self.nth, self.seed = case, point, nth, seed
        os.makedirs(root)
        self.root = root
        self.store = "file://" + os.path.join(root, "store")
        self.ref = os.path.join(root, "ref")
        self.ack_path = os.path.join(root, "acked")
        self.mount = Mount(os.path.join(root, "mnt"), store=self.store,
                           staging=os.path.join(root, "staging"), node="n1", binary=CKPTFS,
                           extra_args=("--refresh", "0.5", "--drain", "5"),
                           env={"CKPT_CRASH_AT": "%s:%d" % (point, nth)}, timeout=20)
        case.mounts.append(self.mount)
        self.removed = set()  # steps removed through the mount (rmdir returned)

    def ctl(self, *args, check=True):
        p = subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, *args],
                           capture_output=True, text=True, timeout=120)
        if check and p.returncode != 0:
            self.case.fail("%s: ckptctl %s: exit %d\n%s" % (self.label(), " ".join(args),
                                                            p.returncode, p.stderr))
        return p

    def label(self):
        return "%s:%d (seed %d)" % (self.point, self.nth, self.seed)

    def acked(self):
        try:
            with open(self.ack_path) as f:
                return [line.strip() for line in f if line.strip()]
        except FileNotFoundError:
            return []

    def ref_sha(self, rel):
        return sha256_file(os.path.join(self.ref, rel))

    # -- phase 1: write (and remove) with the point armed

    def write(self):
        m = self.mount.start()
        os.mkdir(os.path.join(m.path, JOB))
        out = run_torch(WRITER, os.path.join(m.path, JOB), self.ref, self.ack_path, self.seed,
                        json.dumps(PLAN), timeout=120).stdout
        if self.point in DELETE_POINTS:
            self.case.assertNotIn("writer stopped", out, self.label())
            wait_durable(CKPTCTL, self.store, JOB, 3, timeout=60)
            shutil.rmtree(os.path.join(m.path, JOB, "checkpoint-2"))
            self.removed.add(2)

    def wait_crash(self, timeout=60):
        """The daemon died at the point, by SIGKILL; then the dead mount is
        detached (kill9 reaps it)."""
        m = self.mount
        hit = "crashpoint %s hit (pass %d)" % (self.point, self.nth)
        deadline = time.monotonic() + timeout
        while m.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        rc = m.proc.poll()
        log = m.log_text()
        if rc is None or hit not in log:
            m.print_log("crash point did not fire")
            self.case.fail("%s: crash point never fired (daemon %s)" % (
                self.label(), "still running" if rc is None else "exit %s" % rc))
        self.case.assertEqual(rc, -9, "%s: not killed by SIGKILL" % self.label())
        m.kill9()

    # -- phase 2: what a reader sees, daemon dead or alive

    def restore_matches(self, step, expect_files=None):
        """Restores step and compares it, byte for byte, to what was
        written: exactly its files (the plan's, or expect_files)."""
        out = os.path.join(self.root, "restored-%d-%d" % (step, time.monotonic_ns()))
        self.ctl("restore", "--step", str(step), "--to", out)
        got = tree_digest(out)
        want = {rel: self.ref_sha(rel) for rel in (expect_files or STEP_FILES[step])}
        self.case.assertEqual(got, want, "%s: step %d restored differs" % (self.label(), step))
        shutil.rmtree(out)

    def daemon_live(self):
        return self.mount.proc is not None and self.mount.proc.poll() is None

    def check_reader_view(self):
        """Every listed step is consistent and whole; latest names one of them.

        The restarted daemon may publish while we look, so `latest` is asked
        first and `ls` second: steps only appear in between (none is deleted
        then), so the step latest named must be listed, and no newer one may
        be missing from a later listing."""
        latest = self.ctl("latest", check=False)
        listed = list_steps(CKPTCTL, self.store, JOB) if os.path.isdir(
            self.store[len("file://"):]) else []
        consistent = []
        for s in listed:
            self.case.assertEqual(s.get("state", "consistent"), "consistent",
                                  "%s: incomplete step listed: %s" % (self.label(), s))
            self.case.assertIn(s["step"], STEP_FILES, self.label())
            self.restore_matches(s["step"])
            consistent.append(s["step"])
        if latest.returncode == 0:
            self.case.assertIn(int(latest.stdout.strip()), consistent,
                               "%s: latest names %r, not a listed consistent step %s" % (
                                   self.label(), latest.stdout, consistent))
        elif consistent and not self.daemon_live():
            self.case.fail("%s: steps %s listed, latest failed: %s" % (
                self.label(), consistent, latest.stderr))
        return consistent

    # -- phase 3: restart and recover

    def check_after_restart(self):
        m = self.mount
        m.env = None
        m.start()
        acked = self.acked()
        durable = [s for s in (1, 2, 3)
                   if s not in self.removed and all(r in acked for r in STEP_FILES[s])]
        for s in durable:
            wait_durable(CKPTCTL, self.store, JOB, s, timeout=60)
        job = os.path.join(m.path, JOB)
        for rel in acked:
            if STEP_OF[rel] in self.removed:
                self.case.assertFalse(os.path.exists(os.path.join(job, rel)),
                                      "%s: removed %s is back" % (self.label(), rel))
                continue
            self.case.assertEqual(sha256_file(os.path.join(job, rel)), self.ref_sha(rel),
                                  "%s: acknowledged %s differs after restart" % (self.label(), rel))
        # Nothing torn is visible: every file the mount shows is what was written.
        for rel, digest in tree_digest(job).items():
            self.case.assertEqual(digest, self.ref_sha(rel), "%s: %s" % (self.label(), rel))
        for s in self.removed:
            wait_for(lambda: not file_store_keys(self.store, step_prefix(s)), 60,
                     "%s: removed step %d deleted from the store" % (self.label(), s))
        consistent = self.check_reader_view()
        self.case.assertTrue(set(durable) <= set(consistent), self.label())
        self.case.assertFalse(set(consistent) & self.removed, self.label())
        m.unmount()
        return durable

    def check_fresh_mount(self, durable):
        """A new node (empty staging) reads the durable steps from the store."""
        fresh = Mount(os.path.join(self.root, "fresh"), store=self.store,
                      staging=os.path.join(self.root, "fresh-staging"), node="n2",
                      binary=CKPTFS, extra_args=("--refresh", "0.5"))
        self.case.mounts.append(fresh)
        with fresh:
            job = os.path.join(fresh.path, JOB)
            for s in durable:
                for rel in STEP_FILES[s]:
                    path = os.path.join(job, rel)
                    wait_for(lambda: os.path.exists(path), 30, "%s in the fresh mount" % rel)
                    self.case.assertEqual(sha256_file(path), self.ref_sha(rel),
                                          "%s: %s via a fresh mount" % (self.label(), rel))


class CrashMatrixTest(MountTestCase):
    TMP_PREFIX = "ckptfs-crash-"

    def tearDown(self):
        if os.environ.get("CKPT_CRASH_KEEP"):  # debugging: keep the run's files
            for m in self.mounts:
                m.stop()
            sys.stderr.write("crash matrix: kept %s\n" % self.tmp)
            return
        super().tearDown()

    def test_crash_matrix(self):
        only = [p for p in os.environ.get("CKPT_CRASH_ONLY", "").split(",") if p]
        repeat = int(os.environ.get("CKPT_CRASH_REPEAT", "3"))
        names = [p[0] for p in POINTS]
        for p in only:
            self.assertIn(p, names, "CKPT_CRASH_ONLY: unknown point")
        t0, runs, seed = time.monotonic(), 0, 0
        for point, passes, _ in POINTS:
            if only and point not in only:
                continue
            for rep in range(repeat):
                seed += 1
                nth = passes[rep % len(passes)]
                t = time.monotonic()
                run = CrashRun(self, os.path.join(self.tmp, "run%d" % seed), point, nth, seed)
                run.write()
                run.wait_crash()
                run.check_reader_view()
                durable = run.check_after_restart()
                run.check_fresh_mount(durable)
                runs += 1
                sys.stderr.write("crash matrix: %s survived: acked %d files, durable steps %s,"
                                 " %.1f s\n" % (run.label(), len(run.acked()), durable,
                                                time.monotonic() - t))
                shutil.rmtree(run.root, ignore_errors=True)
        sys.stderr.write("crash matrix: %d runs, %d crashes survived, 0 bytes lost, %.0f s\n"
                         % (runs, runs, time.monotonic() - t0))


if __name__ == "__main__":
    unittest.main()
