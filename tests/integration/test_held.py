"""What must keep holding at the edges of the mount (docs/RELIABILITY.md,
"Held under pressure").

* test_64_ranks_into_one_step: 64 writer processes (held_writer.py), one
  per rank, each with its own file step-000010/rank_NN.bin open at the
  same moment in one mount; they finish, close and commit their ranks
  (`.ckptfs/commit`) while rank 63 holds its commit back. The step is
  partial, missing rank 63 only, until that commit; then it is consistent
  with 64 ranks, verifies, and restores all 64 files byte for byte (and one
  rank alone with `restore --rank`).
* test_unmount_refused_while_open: with a file open for writing in the
  mount, `fusermount3 -u` fails with EBUSY, more than once; the daemon
  keeps serving (the open file takes more writes, other files are written
  and read back, the status file answers). After the close the unmount
  succeeds, the daemon exits 0, the step is durable, restores byte for byte
  and reads back through a new mount.

Every wait polls a state with a deadline. Figures go to stderr.
CKPT_HELD_RANK_BYTES sets the bytes per rank (default 4 MiB).

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import hashlib
import json
import os
import select
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from held_writer import file_name, rank_bytes, step_dir  # noqa: E402
from mountlib import (CKPTCTL, CKPTFS, Mount, MountTestCase, fusermount_unmount,  # noqa: E402
                      is_mounted, list_steps, pid_alive, read_status, run_ckptctl,
                      sha256_file, tree_digest, wait_durable, wait_for)

JOB = "job"
WORLD = 64
STEP = 10
RANK_BYTES = int(os.environ.get("CKPT_HELD_RANK_BYTES", 4 << 20))
STAGE_TIMEOUT = 120  # s: all 64 writers through one stage
DURABLE_TIMEOUT = 120


def figures(what, **kv):
    print("held figures: %s: %s" % (what, ", ".join("%s %s" % i for i in kv.items())),
          file=sys.stderr)


class HeldTest(MountTestCase):
    TMP_PREFIX = "ckptfs-held-"

    def setUp(self):
        super().setUp()
        self.writers = []

    def tearDown(self):
        for p in self.writers:  # the writers first: they hold files in the mount
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
            p.stdin.close()
            p.stdout.close()
        super().tearDown()

    def mount(self, name="a"):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node="node-" + name,
                  binary=CKPTFS, extra_args=["--refresh", "0.5"])
        return self.start_mount(m, JOB)

    def ctl(self, *args, check=True):
        return run_ckptctl(CKPTCTL, self.store, JOB, *args, check=check)

    def step_entry(self, step):
        for e in list_steps(CKPTCTL, self.store, JOB):
            if e["step"] == step:
                return e
        return None

    # ------------------------------------------------- 64 ranks, one step

    def expect(self, procs, word, timeout=STAGE_TIMEOUT):
        """Reads one line from each writer in procs and checks it is `word`;
        fails naming the ranks that did not say it within timeout."""
        deadline = time.monotonic() + timeout
        waiting = {p.stdout.fileno(): (rank, p) for rank, p in procs}
        while waiting:
            ready, _, _ = select.select(list(waiting), [], [], max(0, deadline - time.monotonic()))
            if not ready:
                self.fail("ranks %s did not say %r within %ss" % (
                    sorted(r for r, _ in waiting.values()), word, timeout))
            for fd in ready:
                rank, p = waiting.pop(fd)
                line = p.stdout.readline().decode().strip()
                if line != word:
                    p.wait(timeout=30)
                    self.fail("rank %d said %r, not %r (exit %s)" % (rank, line, word,
                                                                       p.returncode))

    def release(self, procs):
        for _, p in procs:
            p.stdin.write(b"go\n")
            p.stdin.flush()

    def test_64_ranks_into_one_step(self):
        m = self.mount()
        t0 = time.monotonic()
        for rank in range(WORLD):
            self.writers.append(subprocess.Popen(
                [sys.executable, os.path.join(HERE, "held_writer.py"), m.path, JOB, str(STEP),
                 str(rank), str(WORLD), str(RANK_BYTES)],
                env=dict(os.environ, RANK=str(rank), WORLD_SIZE=str(WORLD)),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0))
        ranks = list(enumerate(self.writers))
        others, last = ranks[:-1], ranks[-1:]
        self.expect(ranks, "open")
        t_open = time.monotonic() - t0
        # All 64 files of the step are open for writing at this moment.
        names = sorted(os.listdir(step_dir(m.path, JOB, STEP)))
        self.assertEqual(names, [file_name(r) for r in range(WORLD)])
        self.assertIsNone(self.step_entry(STEP), "a step with every file open was published")

        self.release(ranks)
        self.expect(ranks, "closed")
        t_closed = time.monotonic() - t0
        self.release(others)  # every rank but the last commits
        self.expect(others, "committed")
        for rank, p in others:
            self.assertEqual(p.wait(timeout=30), 0, "rank %d" % rank)

        # 63 of 64 commits: published, partial for want of rank 63's commit
        # only. (A publish before the commits are recorded, once the closed
        # step is quiet, is partial too: "not complete", or "no commit from
        # ranks 0,1,..." when it came between the commits; the wait goes past
        # both.)
        def partial_for_commits():
            e = self.step_entry(STEP)
            return e if (e and e["state"] == "partial" and "commit" in e["why"] and
                         e["why"].rsplit(" ", 1)[-1] == str(WORLD - 1)) else None
        partial = wait_for(partial_for_commits, DURABLE_TIMEOUT,
                           "step %d partial for want of commits" % STEP, interval=0.2)
        t_partial = time.monotonic() - t0
        self.assertFalse(partial["consistent"])
        self.assertEqual(partial["why"].rsplit(" ", 1)[-1], str(WORLD - 1), partial)
        self.assertNotEqual(self.ctl("latest", check=False).returncode, 0)

        self.release(last)
        self.expect(last, "committed")
        self.assertEqual(last[0][1].wait(timeout=30), 0)
        entry = wait_durable(CKPTCTL, self.store, JOB, STEP, timeout=DURABLE_TIMEOUT)
        t_durable = time.monotonic() - t0
        self.assertEqual((entry["files"], entry["ranks"], entry["world_size"]),
                         (WORLD, WORLD, WORLD), entry)
        self.assertEqual(int(self.ctl("latest").stdout), STEP)

        self.ctl("verify", "--step", str(STEP))
        out = os.path.join(self.tmp, "restore")
        t1 = time.monotonic()
        self.ctl("restore", "--step", str(STEP), "--to", out)
        t_restore = time.monotonic() - t1
        want = {os.path.join("step-%06d" % STEP, file_name(r)):
                hashlib.sha256(rank_bytes(r, RANK_BYTES)).hexdigest() for r in range(WORLD)}
        self.assertEqual(tree_digest(out), want)
        one = os.path.join(self.tmp, "rank-37")
        self.ctl("restore", "--step", str(STEP), "--rank", "37", "--to", one)
        self.assertEqual(tree_digest(one), {k: v for k, v in want.items() if "rank_37" in k})
        figures("64 ranks", ranks=WORLD, bytes=WORLD * RANK_BYTES,
                all_open_s="%.1f" % t_open, all_closed_s="%.1f" % t_closed,
                partial_63_of_64_s="%.1f" % t_partial, consistent_s="%.1f" % t_durable,
                restore_s="%.1f" % t_restore, partial_why=repr(partial["why"]))

    # ------------------------------------------- unmount while a file is open

    def test_unmount_refused_while_open(self):
        m = self.mount()
        pid = m.pid
        d = step_dir(m.path, JOB, 1)
        os.makedirs(d)
        data = rank_bytes(0, 8 << 20)
        quarter = len(data) // 4
        refusals, refused_s = 0, []
        f = open(os.path.join(d, "model.bin"), "wb")
        try:
            for i in range(3):
                f.write(data[i * quarter:(i + 1) * quarter])
                f.flush()
                t = time.monotonic()
                ok, err = fusermount_unmount(m.path)
                refused_s.append(time.monotonic() - t)
                self.assertFalse(ok, "unmounted with a file open for writing")
                self.assertIn("busy", err.lower())
                refusals += 1
                # Still mounted, the same daemon, and serving.
                self.assertTrue(is_mounted(m.path))
                self.assertTrue(pid_alive(pid))
                self.assertIsNone(m.proc.poll())
                side = os.path.join(d, "side-%d.json" % i)
                with open(side, "w") as g:
                    json.dump({"refusal": i}, g)
                with open(side) as g:
                    self.assertEqual(json.load(g), {"refusal": i})
                states = {(s["job"], s["step"]): s["state"] for s in read_status(m.path)["steps"]}
                self.assertEqual(states.get((JOB, 1)), "writing", states)
            f.write(data[3 * quarter:])
            # Nothing of the step is published while its file is open.
            self.assertIsNone(self.step_entry(1))
        finally:
            f.close()

        t = time.monotonic()
        self.assertEqual(m.unmount(), 0)
        t_unmount = time.monotonic() - t
        self.assertFalse(pid_alive(pid))
        self.assertFalse(is_mounted(m.path))
        # The clean unmount completed the step (docs/STEPS.md, R8) and drained it.
        entry = wait_durable(CKPTCTL, self.store, JOB, 1, timeout=10)
        self.assertEqual(entry["files"], 4)
        out = os.path.join(self.tmp, "restore")
        self.ctl("restore", "--step", "1", "--to", out)
        want = hashlib.sha256(data).hexdigest()
        self.assertEqual(sha256_file(os.path.join(out, "step-000001", "model.bin")), want)
        b = self.mount("b")  # a new node reads it back
        path = os.path.join(b.path, JOB, "step-000001", "model.bin")
        wait_for(lambda: os.path.exists(path), 30, "step 1 visible on a new node")
        self.assertEqual(sha256_file(path), want)
        figures("unmount while open", refused=refusals, errno="EBUSY",
                refused_unmount_s="/".join("%.2f" % s for s in refused_s),
                file_bytes=len(data), unmount_after_close_s="%.1f" % t_unmount,
                daemon_exit=0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
