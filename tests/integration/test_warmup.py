"""Warm-up and chunk-level serving through real mounts (docs/WARMUP.md),
with real PyTorch and the real ckptctl on a file:// store.

Node a torch.saves a real checkpoint (a 48 M-parameter state dict with an
optimizer-like second tensor set, ~190 MiB) as step 10 and is unmounted.
Then, each on an empty staging directory as on a new node:

* node b mounts with the defaults, which warm each job's newest step: its
  status must show the step's warm-up request "warm" (every file local and
  verified) without anybody opening the file; torch.load through b gives
  tensors equal to the saved ones and the file's sha256 is the one node a
  wrote;
* node c mounts with `--prefetch none` (no request at all) and runs
  `ckptctl warmup MOUNT/job/STEP --json`: exit 0 and state warm; bad
  targets give the documented exit codes;
* node d mounts cold (`--prefetch none`): torch.load opens the file while
  its fetch has only begun (reads are answered run by run as they are
  verified); sha256 and tensors equal again;
* node e mounts with `--prefetch-max 1M`: its request ends "partial", the
  file skipped and not fetched until torch.load opens it.

The test checks content and states, never timings.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountTestCase, read_status,  # noqa: E402
                      run_torch, sha256_file, wait_for)

JOB = "job"
STEP = 10
NAME = "ckpt-%06d.pt" % STEP
TIMEOUT = 120

SAVE = r"""
import sys, torch
torch.manual_seed(7)
state = {"model": {"w%d" % i: torch.randn(1536, 2048) for i in range(12)},
         "optim": {"m%d" % i: torch.randn(1024, 1024) for i in range(4)}, "step": 10}
torch.save(state, sys.argv[1])
print(sum(float(t.double().sum()) for d in ("model", "optim") for t in state[d].values()))
"""

LOAD = r"""
import sys, torch
state = torch.load(sys.argv[1], weights_only=True)
assert state["step"] == 10, state["step"]
print(sum(float(t.double().sum()) for d in ("model", "optim") for t in state[d].values()))
"""


class WarmupTest(MountTestCase):
    TMP_PREFIX = "ckptfs-warm-"

    def mount(self, name, *extra):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node=name,
                  binary=CKPTFS, extra_args=("--refresh", "0.5", *extra))
        self.mounts.append(m)
        m.start()
        return m

    def requests(self, m):
        return read_status(m.path)["warmup"]["requests"]

    def warm_request(self, m):
        for r in self.requests(m):
            if r["job"] == JOB and r.get("step") == STEP and r["state"] == "warm":
                return r
        return None

    def check_load(self, m, want_sum, want_sha):
        path = os.path.join(m.path, JOB, NAME)
        got = float(run_torch(LOAD, path).stdout.strip())
        self.assertEqual(got, want_sum)
        self.assertEqual(sha256_file(path), want_sha)

    def test_prefetch_warmup_and_cold_reads(self):
        a = self.mount("a")
        os.mkdir(os.path.join(a.path, JOB))
        path_a = os.path.join(a.path, JOB, NAME)
        want_sum = float(run_torch(SAVE, path_a).stdout.strip())
        want_sha = sha256_file(path_a)
        wait_for(lambda: read_status(a.path)["queue"] == 0 and
                 all(s["state"] == "durable" for s in read_status(a.path)["steps"]),
                 TIMEOUT, "step %d durable" % STEP)
        a.unmount()

        # b: the defaults warm the step before anybody opens it.
        b = self.mount("b")
        r = wait_for(lambda: self.warm_request(b), TIMEOUT, "step warm on b")
        self.assertEqual(r["files"], r["files_warm"])
        self.assertGreater(r["bytes"], 100 << 20)
        self.assertEqual(r["bytes"], r["bytes_warm"])
        self.assertEqual(read_status(b.path)["warmup"]["fetches_active"], 0)
        fetched = read_status(b.path)["warmup"]["fetched_bytes"]
        self.assertGreaterEqual(fetched, r["bytes"])
        self.check_load(b, want_sum, want_sha)
        # Warm: the load read local copies, nothing more was fetched.
        self.assertEqual(read_status(b.path)["warmup"]["fetched_bytes"], fetched)
        with open(os.path.join(b.path, ".ckptfs", "metrics")) as f:
            metrics = f.read()
        self.assertIn("ckptfs_warmup_warm_bytes %d\n" % r["bytes"], metrics)
        b.unmount()

        # c: ckptctl warmup on demand, and its refusals.
        c = self.mount("c", "--prefetch", "none")
        wait_for(lambda: os.path.exists(os.path.join(c.path, JOB, NAME)), TIMEOUT, "listed on c")
        self.assertEqual(self.requests(c), [])
        p = subprocess.run([CKPTCTL, "warmup", os.path.join(c.path, JOB, str(STEP)), "--json"],
                           capture_output=True, text=True, timeout=TIMEOUT)
        self.assertEqual(p.returncode, 0, p.stderr)
        doc = json.loads(p.stdout)
        self.assertEqual((doc["job"], doc["step"], doc["state"]), (JOB, STEP, "warm"))
        self.assertEqual(doc["files"], doc["files_warm"])
        p = subprocess.run([CKPTCTL, "warmup", os.path.join(c.path, JOB)], capture_output=True,
                           text=True, timeout=TIMEOUT)  # the newest step: warm already
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("step %d of %s is warm" % (STEP, JOB), p.stdout)
        for args, rc in (([os.path.join(c.path, "no-such-job")], 1), ([c.path], 2), ([], 2),
                         ([self.tmp], 3)):
            p = subprocess.run([CKPTCTL, "warmup", *args], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, rc, (args, p.stdout, p.stderr))
            self.assertTrue(p.stderr.strip(), args)
        self.check_load(c, want_sum, want_sha)
        c.unmount()

        # d: cold; torch.load's reads are served as their runs arrive.
        d = self.mount("d", "--prefetch", "none")
        wait_for(lambda: os.path.exists(os.path.join(d.path, JOB, NAME)), TIMEOUT, "listed on d")
        self.check_load(d, want_sum, want_sha)
        wait_for(lambda: read_status(d.path)["warmup"]["fetches_active"] == 0, TIMEOUT,
                 "d's fetch ended")
        self.assertEqual(read_status(d.path)["last_error"], "")
        self.check_load(d, want_sum, want_sha)  # now from the verified local copy
        d.unmount()

        # e: warm-up's bound; what it skips is still served when opened.
        e = self.mount("e", "--prefetch-max", "1M")
        r = wait_for(lambda: next((r for r in self.requests(e) if r["state"] == "partial"), None),
                     TIMEOUT, "warm-up partial on e")
        self.assertEqual((r["job"], r["step"], r["files_warm"], r["skipped"]), (JOB, STEP, 0, 1))
        self.assertEqual(read_status(e.path)["warmup"]["fetched_bytes"], 0)
        self.check_load(e, want_sum, want_sha)


if __name__ == "__main__":
    unittest.main()
