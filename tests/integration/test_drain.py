#!/usr/bin/python3
"""Preemption-aware shutdown (docs/SHUTDOWN.md), through real mounts.

A slow store (CKPT_FAULT put_delay_ms, docs/BACKENDS.md) makes steps queue:
real PyTorch saves step 1, waits until the uploader has taken it, then saves
steps 2, 3 and 4, which queue behind it. Step 1's upload is held (CKPT_FAULT
put_hold) until they are queued and the notice, if any, has been taken: on a
loaded machine a delay alone let step 1 end before step 4 was saved. The order in which the steps
became durable is read from the store itself: the modification time of each
step's part record (written last, docs/PROTOCOL.md), never the daemon's
word.

* FIFO without a notice: 1, 2, 3, 4 (the order before this work, and the
  baseline of the benchmark).
* SIGUSR1, and `ckptctl drain MOUNT`, while mounted: 1 (already under way),
  then 4, 3, 2 (newest first); the status file says draining with an ETA; writes go on.
* SIGTERM with a long --drain: 1, 4, 3, 2, exit 0.
* SIGTERM with a short --drain: the newest is durable, older steps are
  left in staging; a restart on the same staging uploads them, and they
  restore byte for byte.
* NOTIFY_SOCKET: READY=1 once the mount serves, STOPPING=1 at the end, on a
  path socket and an abstract one.

Timing lines ("BENCH ...") feed docs/BENCHMARKS.md, "Preemption drain".
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, Mount, MountTestCase, read_status, run_torch,  # noqa: E402
                      sha256_file, wait_for)

JOB = "job"
NODE = "test"
# Steps saved: 1 is uploading when 2..LAST queue behind it. The benchmark
# (docs/BENCHMARKS.md) runs with more: CKPT_DRAIN_STEPS=8
# CKPT_DRAIN_PUT_DELAY_MS=1000.
LAST = int(os.environ.get("CKPT_DRAIN_STEPS", "4"))
QUEUED = tuple(range(2, LAST + 1))
ALL = (1,) + QUEUED
NEWEST_FIRST = [1] + list(reversed(QUEUED))
# Each upload is several PUTs (packs, manifest, part record): the delay keeps
# step 1 uploading while the writer saves the rest. More steps need more.
PUT_DELAY_MS = int(os.environ.get("CKPT_DRAIN_PUT_DELAY_MS", "500"))
HOLD_FILE = "hold-uploads"  # in the test's temp dir: pack PUTs wait while it exists
DRAIN_LOGGED = "draining: the newest complete steps upload first"

# Saves step 1, waits until the mount's uploader has taken it, then saves
# steps 2..4: those queue behind step 1 on the slow store. Each is ~8 MiB of
# random fp32 (nothing for dedup to find between steps).
WRITER = r"""
import json, os, sys, time, torch
mnt, job, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
def save(step):
    torch.manual_seed(step)
    torch.save({"w": torch.randn(2 * 1024 * 1024), "step": step},
               os.path.join(mnt, job, "ckpt-%06d.pt" % step))
def state(step):
    with open(os.path.join(mnt, ".ckptfs", "status")) as f:
        doc = json.load(f)
    return [s["state"] for s in doc["steps"] if s["job"] == job and s["step"] == step]
save(1)
deadline = time.monotonic() + 60
while state(1) != ["uploading"]:
    if time.monotonic() > deadline:
        sys.exit("step 1 never started uploading: %s" % state(1))
    time.sleep(0.02)
for step in range(2, last + 1):
    save(step)
"""


def part_times(store_url, job=JOB, node=NODE):
    """{step: mtime_ns} of this node's part records in a file:// store."""
    root = store_url[len("file://"):]
    pat = re.compile(r"jobs@?/%s@?/steps@?/(\d{20})@?/nodes@?/%s\.commit$" % (job, node))
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            rel = os.path.relpath(os.path.join(dirpath, name), root)
            m = pat.search(rel)
            if m:
                try:
                    out[int(m.group(1))] = os.stat(os.path.join(dirpath, name)).st_mtime_ns
                except FileNotFoundError:
                    continue  # deleted between the listing and the stat (GC)
    return out


def durable_order(store_url):
    times = part_times(store_url)
    return sorted(times, key=times.get)


class DrainTest(MountTestCase):
    TMP_PREFIX = "ckptfs-drain-"

    def fault(self):
        """The slow store, whose pack PUTs also wait while the hold file exists."""
        self.hold = os.path.join(self.tmp, HOLD_FILE)
        return {"CKPT_FAULT": "put_delay_ms=%d,put_hold=%s" % (PUT_DELAY_MS, self.hold)}

    def hold_uploads(self):
        open(self.hold, "w").close()

    def release_uploads(self):
        if os.path.exists(self.hold):
            os.unlink(self.hold)

    def tearDown(self):
        # A test that failed while holding must not leave the unmount waiting.
        if getattr(self, "hold", None):
            self.release_uploads()
        super().tearDown()

    def mount(self, name="mnt", env=None, drain=60, staging="staging"):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, staging), node=NODE,
                  extra_args=["--drain", str(drain)], env=env, timeout=30)
        self.mounts.append(m)
        m.start()
        os.makedirs(os.path.join(m.path, JOB), exist_ok=True)
        return m

    def queue_four_steps(self, m):
        """Runs WRITER; returns once steps 2..LAST are queued behind step 1,
        whose upload is held until the caller releases it (release_uploads)."""
        self.hold_uploads()
        run_torch(WRITER, m.path, JOB, LAST, timeout=300)

        def queued():
            st = {s["step"]: s["state"] for s in read_status(m.path)["steps"]
                  if s["job"] == JOB}
            return all(st.get(k) == "queued" for k in QUEUED) and st
        wait_for(queued, 120, "steps 2..%d queued" % LAST)
        m.assert_fault_fired()  # the delay, and the hold on step 1's pack PUT
        self.assertNotIn(LAST, part_times(self.store), "the newest durable before the notice")

    def terminate_then_release(self, m, timeout):
        """SIGTERM; once the daemon has logged its drain, step 1's upload goes on.
        Returns the exit status."""
        watcher = threading.Thread(target=self.release_once_draining, args=(m,), daemon=True)
        watcher.start()
        try:
            return m.terminate(timeout=timeout)
        finally:
            self.release_uploads()
            watcher.join()

    def release_once_draining(self, m):
        try:
            wait_for(lambda: DRAIN_LOGGED in m.log_text(), 60, "the drain logged")
        finally:
            self.release_uploads()

    def wait_all_durable(self, steps=ALL, timeout=120):
        return wait_for(lambda: set(steps) <= set(part_times(self.store)), timeout,
                        "steps %s durable in the store" % (steps,))

    def bench(self, what, notice_ns):
        times = part_times(self.store)
        newest = (times[LAST] - notice_ns) / 1e9
        last = (max(times.values()) - notice_ns) / 1e9
        print("BENCH drain %s, %d steps queued behind one uploading, PUT delay %d ms: notice ->"
              " newest (step %d) durable %.2f s, -> all durable %.2f s; order %s"
              % (what, len(QUEUED), PUT_DELAY_MS, LAST, newest, last, durable_order(self.store)),
              flush=True)

    # ---------------------------------------------------------------- orders

    def test_fifo_without_notice(self):
        m = self.mount(env=self.fault())
        self.queue_four_steps(m)
        t0 = time.time_ns()
        self.assertFalse(read_status(m.path)["draining"])
        self.release_uploads()
        self.wait_all_durable()
        self.bench("fifo (no notice)", t0)
        self.assertEqual(durable_order(self.store), list(ALL))
        m.unmount()

    def check_draining_while_mounted(self, m, notice, t0):
        """After a notice: status says draining with an ETA, the mount keeps
        taking writes, and the steps become durable newest first."""
        st = wait_for(lambda: (lambda d: d["draining"] and d)(read_status(m.path)), 10,
                      "status draining")
        self.assertIn("eta_durable_seconds", st)
        self.assertGreater(st["pending_bytes"], 0)
        self.release_uploads()  # the notice is taken: step 1 may end now
        # Writes go on while draining.
        other = os.path.join(m.path, JOB, "notes.txt")
        with open(other, "w") as f:
            f.write("still serving\n")
        with open(other) as f:
            self.assertEqual(f.read(), "still serving\n")
        # Once step 1 has finished, the daemon has measured a rate: a number.
        wait_for(lambda: 1 in part_times(self.store), 60, "step 1 durable")
        eta = wait_for(lambda: (lambda d: d["eta_durable_seconds"] is not None and d)(
            read_status(m.path)), 10, "eta_durable_seconds measured")["eta_durable_seconds"]
        if read_status(m.path)["pending_bytes"] > 0:
            self.assertGreater(eta, 0)
        self.wait_all_durable()
        self.bench(notice, t0)
        self.assertEqual(durable_order(self.store), NEWEST_FIRST)
        m.unmount()

    def test_sigusr1_switches_order_while_mounted(self):
        m = self.mount(env=self.fault())
        self.queue_four_steps(m)
        t0 = time.time_ns()
        os.kill(m.pid, signal.SIGUSR1)
        self.check_draining_while_mounted(m, "SIGUSR1", t0)
        self.assertIn("SIGUSR1: preemption notice", m.log_text())

    def test_ckptctl_drain_switches_order_while_mounted(self):
        m = self.mount(env=self.fault())
        # A bad notice is refused, and changes nothing.
        with self.assertRaises(OSError) as cm:
            with open(os.path.join(m.path, ".ckptfs", "drain"), "w") as f:
                f.write("please\n")
        self.assertEqual(cm.exception.errno, 22)  # EINVAL
        self.assertFalse(read_status(m.path)["draining"])
        self.queue_four_steps(m)
        t0 = time.time_ns()
        p = subprocess.run([CKPTCTL, "drain", m.path], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("is draining", p.stdout)
        self.assertIn("draining (newest complete step first)", p.stdout)
        s = subprocess.run([CKPTCTL, "status", "--mount", m.path, "--json"],
                           capture_output=True, text=True, timeout=30)
        self.assertTrue(json.loads(s.stdout)["draining"])
        self.check_draining_while_mounted(m, "ckptctl drain", t0)

    def test_ckptctl_drain_refuses_a_non_mount(self):
        p = subprocess.run([CKPTCTL, "drain", self.tmp], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("no ckptfs mounted", p.stderr)

    # -------------------------------------------------------------- SIGTERM

    def test_sigterm_uploads_newest_first(self):
        m = self.mount(env=self.fault(), drain=60)
        self.queue_four_steps(m)
        t0 = time.time_ns()
        self.assertEqual(self.terminate_then_release(m, timeout=90), 0)
        self.bench("SIGTERM", t0)
        self.assertEqual(durable_order(self.store), NEWEST_FIRST)

    def test_sigterm_deadline_leaves_the_rest_for_the_next_start(self):
        m = self.mount(env=self.fault(), drain=1)
        self.queue_four_steps(m)
        digests = {k: sha256_file(os.path.join(m.path, JOB, "ckpt-%06d.pt" % k))
                   for k in QUEUED[:-1]}
        self.assertEqual(self.terminate_then_release(m, timeout=60), 0)
        left = part_times(self.store)
        # Every upload takes several PUTs of PUT_DELAY_MS: with a 1 s drain,
        # at most the upload under way and the one after it (the newest) end.
        for k in QUEUED[:-1]:
            self.assertNotIn(k, left)
        self.assertIn("unmounting with uploads pending", m.log_text())
        # The next start on the same staging, with a healthy store.
        m.env = None
        m.start()
        self.wait_all_durable()
        for k, digest in digests.items():
            out = os.path.join(self.tmp, "restore-%d" % k)
            p = subprocess.run([CKPTCTL, "--store", self.store, "--job", JOB, "restore",
                                "--step", str(k), "--to", out], capture_output=True,
                               text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(sha256_file(os.path.join(out, "ckpt-%06d.pt" % k)), digest)
        m.unmount()

    # ------------------------------------------------------- NOTIFY_SOCKET

    def check_notify(self, address, bind_to):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(bind_to)
            sock.settimeout(20)
            m = self.mount(env={"NOTIFY_SOCKET": address})
            ready = sock.recv(4096).decode()
            self.assertEqual(ready, "READY=1")
            # READY comes once the mount serves: a write works at once.
            with open(os.path.join(m.path, JOB, "x.txt"), "w") as f:
                f.write("x")
            m.unmount()
            stopping = sock.recv(4096).decode()
            self.assertTrue(stopping.startswith("STOPPING=1\n"), stopping)
            self.assertIn("STATUS=draining uploads", stopping)
        finally:
            sock.close()

    def test_notify_socket_path(self):
        path = os.path.join(self.tmp, "notify.sock")
        self.check_notify(path, path)

    def test_notify_socket_abstract(self):
        name = "ckptfs-test-notify-%d" % os.getpid()
        self.check_notify("@" + name, "\0" + name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
