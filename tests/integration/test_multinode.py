"""Latest consistent step across ranks and nodes (docs/CONSISTENCY.md),
with real FUSE mounts, real torchrun (gloo, CPU) and a real store.

Two ckptfs mounts on one store act as two nodes (own staging, own node
name), two ranks each: torchrun starts 4 ranks of mn_ranks.py; ranks 0,1
write through mount A, ranks 2,3 through mount B, the same job and the same
relative names, so only the union of the two nodes' parts in the store is
the whole checkpoint. A third mount with a fresh staging plays a node that
resumes from the store.

The DCP layout is written by torch 1.13's own
torch.distributed._shard.checkpoint.save_state_dict + FileSystemWriter
(single_file_per_rank=True: each rank `__R_0.distcp`, fsynced; rank 0
`.metadata.tmp`, fsync, rename to `.metadata`, last). Debian's torch 1.13
cannot import DCP under Python 3.11 (a dataclass "mutable default");
mn_torchcompat.py patches that one field at import time, in memory only.
The DeepSpeed layout is written the way DeepSpeed does it (torch.save of
global_stepN/zero_pp_rank_R_mp_rank_00_optim_states.pt on every rank,
mp_rank_00_model_states.pt on rank 0, then `latest` by rank 0).

Node B is held back with CKPT_FAULT=fail_key=/steps/<N, 20 digits>/: PUTs of
its step-N part (manifest, part record) fail as transient and are retried
forever, so B can never publish step N while A's part of it is durable.
Killing B (-9) and restarting it on its staging without the fault must then
publish it.

Every rank script also writes the same files into a local reference
directory; restores are compared with it by sha256.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import contextlib
import functools
import json
import os
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, TORCH_PYTHON, Mount, MountTestCase,  # noqa: E402
                      torch_env, tree_digest, wait_counter)

HERE = os.path.dirname(os.path.abspath(__file__))
TORCHRUN = "/usr/bin/torchrun"
JOB = "job"
N = 3                # the step node B is held back on
PUBLISH_TIMEOUT = 120  # s: eager publication is 2 s of quiet + the upload
VISIBLE_TIMEOUT = 30   # s: a fresh mount with --refresh 0.5 shows a new step
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")

# Prints the shard files a DCP .metadata names (storage_data relative paths).
METADATA_SHARDS = """
import json, pickle, sys
sys.path.insert(0, %r)
import mn_torchcompat
mn_torchcompat.install()
import torch.distributed._shard.checkpoint
with open(sys.argv[1], "rb") as f:
    md = pickle.load(f)
print(json.dumps(sorted({v.relative_path for v in md.storage_data.values()})))
""" % HERE


def fail_key(step):
    return "fail_key=/steps/%020d/" % step


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def print_logs_on_failure(test):
    """On any failure, print the tail of every daemon's log (mountlib only
    does it for with-blocks) before tearDown unmounts."""
    @functools.wraps(test)
    def wrapper(self):
        try:
            test(self)
        except BaseException as e:
            for m in self.mounts:
                m.print_log("%s failed: %s" % (test.__name__, type(e).__name__), tail=80)
            raise
    return wrapper


class MultiNodeTest(MountTestCase):
    TMP_PREFIX = "ckptfs-mn-"
    STORE_FROM_ENV = True

    def setUp(self):
        super().setUp()
        self.ref = self.tmp_dir("ref")

    # ------------------------------------------------------------ helpers

    def mount(self, name, extra=(), env=None, job=True):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"),
                  node="node-" + name, binary=CKPTFS, extra_args=extra, env=env)
        self.mounts.append(m)
        m.start()
        if job and not os.path.isdir(os.path.join(m.path, JOB)):
            os.mkdir(os.path.join(m.path, JOB))
        return m

    def ctl(self, *args, timeout=120):
        return subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, *args],
                              capture_output=True, text=True, timeout=timeout)

    def ls(self):
        """`ckptctl --json ls`: {step: entry}; every entry must say whether
        the step is consistent."""
        p = self.ctl("--json", "ls")
        self.assertEqual(p.returncode, 0, "ckptctl ls failed: %s" % p.stderr)
        entries = json.loads(p.stdout or "[]")
        out = {}
        for e in entries:
            self.assertIn("consistent", e, "ckptctl --json ls entry without 'consistent': %s" % e)
            out[e["step"]] = e
        return out

    def latest(self):
        """`ckptctl latest`: the step (stdout is the number alone), or None
        when it exits 1 (no consistent step)."""
        p = self.ctl("latest")
        if p.returncode == 1:
            return None
        self.assertEqual(p.returncode, 0, "ckptctl latest: exit %d: %s" % (p.returncode, p.stderr))
        self.assertRegex(p.stdout, r"^\d+\n?$", "ckptctl latest must print the step alone")
        return int(p.stdout)

    def wait_for(self, what, probe, timeout, interval=0.25):
        """Poll probe() -> (ok, value) until ok; fail after `timeout` s with
        the last value."""
        deadline = time.monotonic() + timeout
        while True:
            ok, value = probe()
            if ok:
                return value
            if time.monotonic() > deadline:
                self.fail("after %ss: %s; last seen: %s" % (timeout, what, value))
            time.sleep(interval)

    def wait_latest(self, step, timeout=PUBLISH_TIMEOUT):
        def probe():
            got = self.latest()
            return got == step, {"latest": got, "ls": self.ls()}
        self.wait_for("ckptctl latest says %d" % step, probe, timeout)

    def wait_listed(self, step, timeout=PUBLISH_TIMEOUT):
        def probe():
            steps = self.ls()
            return step in steps, steps
        return self.wait_for("step %d listed by ckptctl ls" % step, probe, timeout)

    def wait_visible(self, mount, name, timeout=VISIBLE_TIMEOUT):
        jobdir = os.path.join(mount.path, JOB)

        def probe():
            names = sorted(os.listdir(jobdir)) if os.path.isdir(jobdir) else None
            return names is not None and name in names, names
        self.wait_for("%s listed in %s" % (name, jobdir), probe, timeout)

    def torchrun(self, layout, dirs, last, first=1, timeout=600):
        """4 ranks of mn_ranks.py on one host (gloo, CPU); rank r writes into
        dirs[r * len(dirs) // 4]."""
        env = torch_env()
        for k in RANK_VARS:
            env.pop(k, None)
        argv = [TORCHRUN, "--nnodes", "1", "--nproc_per_node", "4", "--redirects", "1",
                "--tee", "1", "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
                "--log_dir", os.path.join(self.tmp, "torchrun-logs-%s-%d" % (layout, time.monotonic_ns())),
                os.path.join(HERE, "mn_ranks.py"), "--layout", layout,
                "--dirs", ",".join(dirs), "--ref", self.ref,
                "--first", str(first), "--last", str(last)]
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=self.tmp)
        if p.returncode != 0:
            sys.stderr.write("---- torchrun failed (exit %d) ----\n%s\n%s\n"
                             % (p.returncode, p.stdout[-6000:], p.stderr[-6000:]))
        self.assertEqual(p.returncode, 0, "torchrun failed")
        ranks = sorted(json.loads(line.partition(":")[2])["rank"] for line in p.stdout.splitlines()
                       if '"rank"' in line)
        self.assertEqual(ranks, [0, 1, 2, 3], p.stdout)

    def restore(self, step, to, rank=None):
        """`ckptctl --json restore --step S [--rank R] --to DIR`: the parsed
        report (must carry "gets")."""
        args = ["--json", "restore", "--step", str(step), "--to", to]
        if rank is not None:
            args += ["--rank", str(rank)]
        p = self.ctl(*args, timeout=300)
        self.assertEqual(p.returncode, 0, "ckptctl %s: exit %d: %s"
                         % (" ".join(args), p.returncode, p.stderr))
        report = json.loads(p.stdout)
        self.assertIn("gets", report, "restore --json must report 'gets': %s" % report)
        return report

    def ref_digest(self, prefix, extra=()):
        """The reference files of one step: everything under `prefix/`, plus
        the loose files named in `extra`."""
        return tree_digest(self.ref, lambda rel: rel.startswith(prefix + "/") or rel in extra)

    @contextlib.contextmanager
    def soft_check(self, what):
        """A subTest: a failure inside is reported (with the daemon logs) and
        the test goes on."""
        with self.subTest(what):
            try:
                yield
            except AssertionError:
                for m in self.mounts:
                    m.print_log("check failed: %s" % what, tail=80)
                raise

    def two_nodes(self, hold_step):
        """Mount A, and mount B whose daemon cannot publish `hold_step`."""
        a = self.mount("a")
        b = self.mount("b", env={"CKPT_FAULT": fail_key(hold_step)})
        return a, b

    def restart_without_fault(self, node, step, fresh, name):
        """The held-back node crashes (-9) and comes back on its staging
        without the fault: `step` becomes the latest, consistent, and the
        fresh mount shows it as `name`."""
        node.assert_fault_fired()
        node.kill9()
        node.env = None
        node.start()
        self.wait_latest(step)
        self.assertIs(self.ls()[step]["consistent"], True)
        self.wait_visible(fresh, name)

    # ------------------------------------------------------------ tests

    @print_logs_on_failure
    def test_dcp_two_nodes_node_held_back(self):
        """1. DCP, 2 nodes x 2 ranks; B cannot publish step N: latest is N-1
        (A's part of N, with the .metadata that completes it, is durable).
        After B's restart N is the latest and restores bit-exact."""
        stepdir = lambda s: "step-%06d" % s  # noqa: E731
        loose = ()
        a, b = self.two_nodes(N)
        self.torchrun("dcp", [os.path.join(a.path, JOB), os.path.join(b.path, JOB)], last=N)

        # The .metadata rank 0 wrote names every rank's shard (rule 3's
        # expected set), though ranks 2,3 wrote theirs on the other node.
        p = subprocess.run([TORCH_PYTHON, "-c", METADATA_SHARDS,
                            os.path.join(self.ref, stepdir(N), ".metadata")],
                           capture_output=True, text=True, env=torch_env(), timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), ["__%d_0.distcp" % r for r in range(4)])

        # A's part of N is durable (N listed, not consistent), B's never is.
        self.wait_latest(N - 1)
        entry = self.wait_listed(N)[N]
        self.assertIs(entry["consistent"], False, entry)
        self.assertTrue(entry.get("why"), "a partial step must say why: %s" % entry)
        # It stays so: B keeps retrying, nothing else may make N consistent.
        wait_counter(b.path, "upload_failures", 2)
        steps = self.ls()
        self.assertEqual(self.latest(), N - 1, steps)
        for s in range(1, N):
            self.assertIs(steps[s]["consistent"], True, steps[s])
        self.assertIs(steps[N]["consistent"], False, steps[N])

        # A fresh node sees N-1, whole, and not N.
        c = self.mount("c", extra=("--refresh", "0.5"), job=False)
        self.wait_visible(c, stepdir(N - 1))
        wait_counter(c.path, "refreshes", 3)
        names = sorted(os.listdir(os.path.join(c.path, JOB)))
        self.assertIn(stepdir(N - 1), names)
        self.assertNotIn(stepdir(N), names)
        prev = self.ref_digest(stepdir(N - 1))
        self.assertEqual(tree_digest(os.path.join(c.path, JOB),
                                     lambda rel: rel.startswith(stepdir(N - 1) + "/")), prev)

        self.restart_without_fault(b, N, c, stepdir(N))

        # Restore of N == the union of what the ranks wrote.
        want = self.ref_digest(stepdir(N), loose)
        self.assertEqual(sorted(want), ["%s/%s" % (stepdir(N), f) for f in (
            ".metadata", "__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp")])
        full = os.path.join(self.tmp, "restore-full")
        self.restore(N, full)
        self.assertEqual(tree_digest(full), want)
        # ... and the fresh node reads the same bytes through its mount.
        self.assertEqual(tree_digest(os.path.join(c.path, JOB),
                                     lambda rel: rel.startswith(stepdir(N) + "/") or rel in loose),
                         want)

    @print_logs_on_failure
    def test_deepspeed_latest_written_before_other_ranks_durable(self):
        """2. DeepSpeed: rank 0 writes `latest` naming global_stepN while
        ranks 2,3's shards of N are not durable (B held): the latest
        consistent step stays N-1, and a fresh node's `latest` file still
        names global_step(N-1), until B publishes."""
        stepdir = lambda s: "global_step%d" % s  # noqa: E731
        a, b = self.two_nodes(N)
        self.torchrun("deepspeed", [os.path.join(a.path, JOB), os.path.join(b.path, JOB)], last=N)
        with open(os.path.join(a.path, JOB, "latest")) as f:
            self.assertEqual(f.read(), stepdir(N))  # the marker is written on A
        self.wait_latest(N - 1)
        entry = self.wait_listed(N)[N]
        self.assertIs(entry["consistent"], False, entry)
        self.assertTrue(entry.get("why"), entry)
        wait_counter(b.path, "upload_failures", 2)  # B keeps retrying
        self.assertEqual(self.latest(), N - 1, self.ls())

        c = self.mount("c", extra=("--refresh", "0.5"), job=False)
        self.wait_visible(c, stepdir(N - 1))
        wait_counter(c.path, "refreshes", 3)
        cjob = os.path.join(c.path, JOB)
        self.assertNotIn(stepdir(N), os.listdir(cjob))
        # What DeepSpeed's load_checkpoint reads on the fresh node: `latest`
        # must name the latest consistent step (checked apart, so the rest of
        # the test still runs if only this fails).
        with self.soft_check("fresh node's `latest` while N is partial"):
            path = os.path.join(cjob, "latest")
            self.assertTrue(os.path.exists(path), "no `latest` on the fresh node: %s"
                            % sorted(os.listdir(cjob)))
            with open(path) as f:
                self.assertEqual(f.read(), stepdir(N - 1),
                                 "a fresh node's `latest` must name the latest consistent step")

        self.restart_without_fault(b, N, c, stepdir(N))

        def latest_file():
            with open(os.path.join(cjob, "latest")) as f:
                got = f.read()
            return got == stepdir(N), got
        self.wait_for("the fresh node's `latest` names %s" % stepdir(N), latest_file, VISIBLE_TIMEOUT)

        want = self.ref_digest(stepdir(N), ("latest",))
        self.assertEqual(sorted(want), ["global_step%d/%s" % (N, f) for f in (
            "mp_rank_00_model_states.pt",
            "zero_pp_rank_0_mp_rank_00_optim_states.pt", "zero_pp_rank_1_mp_rank_00_optim_states.pt",
            "zero_pp_rank_2_mp_rank_00_optim_states.pt", "zero_pp_rank_3_mp_rank_00_optim_states.pt")]
            + ["latest"])
        full = os.path.join(self.tmp, "restore-full")
        self.restore(N, full)
        self.assertEqual(tree_digest(full), want)
        self.assertEqual(tree_digest(cjob, lambda rel: rel.startswith(stepdir(N) + "/")
                                     or rel == "latest"), want)

    @print_logs_on_failure
    def test_restore_rank_fetches_only_that_rank(self):
        """3. restore --rank R of a consistent two-node DCP step restores
        only rank R's files, with fewer GETs than a full restore."""
        a = self.mount("a")
        b = self.mount("b")
        self.torchrun("dcp", [os.path.join(a.path, JOB), os.path.join(b.path, JOB)], last=2)
        self.wait_latest(2)
        name = "step-000002"
        want = self.ref_digest(name)

        full = self.restore(2, os.path.join(self.tmp, "full"))
        self.assertEqual(tree_digest(os.path.join(self.tmp, "full")), want)

        r2 = self.restore(2, os.path.join(self.tmp, "rank2"), rank=2)
        self.assertEqual(tree_digest(os.path.join(self.tmp, "rank2")),
                         {name + "/__2_0.distcp": want[name + "/__2_0.distcp"]})
        self.assertLess(r2["gets"], full["gets"], "rank 2: %s, full: %s" % (r2, full))

        # Rank 0 wrote its shard and the .metadata (on the other node).
        r0 = self.restore(2, os.path.join(self.tmp, "rank0"), rank=0)
        self.assertEqual(tree_digest(os.path.join(self.tmp, "rank0")),
                         {k: v for k, v in want.items()
                          if k in (name + "/__0_0.distcp", name + "/.metadata")})
        self.assertLess(r0["gets"], full["gets"], "rank 0: %s, full: %s" % (r0, full))

    @print_logs_on_failure
    def test_flat_single_writer_consistent_when_durable(self):
        """4. A flat ckpt-N.pt from one process is consistent as soon as it
        is durable (rule 2 alone): without rank variables, and as the rank 0
        of a 4-rank DDP job that saves on rank 0 only."""
        a = self.mount("a")
        code = ("import torch,sys\n"
                "torch.manual_seed(int(sys.argv[2]))\n"
                "torch.save({'w': torch.randn(256, 256), 'step': int(sys.argv[2])}, sys.argv[1])\n")
        cases = [(1, {}), (2, {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "4"})]
        for step, rank_env in cases:
            path = os.path.join(a.path, JOB, "ckpt-%06d.pt" % step)
            env = {k: v for k, v in torch_env().items() if k not in RANK_VARS}
            env.update(rank_env)
            subprocess.run([TORCH_PYTHON, "-c", code, path, str(step)], env=env,
                           check=True, timeout=300)

            def probe():
                steps = self.ls()
                return step in steps, steps
            entry = self.wait_for("step %d listed" % step, probe, PUBLISH_TIMEOUT, interval=0.1)[step]
            self.assertIs(entry["consistent"], True,
                          "a durable single-writer step must be consistent at once: %s" % entry)
            self.assertEqual(self.latest(), step)


if __name__ == "__main__":
    unittest.main(verbosity=2)
