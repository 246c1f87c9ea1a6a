#!/usr/bin/python3
"""A SIGTERM to the daemon while a file is being written (docs/SHUTDOWN.md,
"Files open at the stop"), through a real mount.

A writer process rewrites a closed file in place (its journal row already
said CLOSED: the case a restart used to keep at the cut length) and writes
a new file in another step; both block mid-file until the daemon has been
stopped by SIGTERM, then find their next write and their close refused.
Neither file's step may become consistent: not at that unmount, not after
a restart on the same staging, not at the restart's clean unmount. The
status file names the cut file, and once it is rewritten its step is
published.
"""
import errno
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, Mount, MountTestCase, list_steps, read_status,  # noqa: E402
                      wait_durable, wait_for)

JOB = "job"
MIB = 1 << 20

# argv: READY_FILE, then PATH FLAGS pairs. Opens every PATH (FLAGS "inplace":
# O_WRONLY, keeping its bytes; "new": O_CREAT|O_TRUNC), writes 16 MiB at its
# end, creates READY_FILE, waits for a line on stdin (the daemon stopped),
# then writes once more and closes; prints each errno, "ok" for a success.
WRITER = r"""
import os, sys
ready, pairs = sys.argv[1], sys.argv[2:]
fds = []
for path, how in zip(pairs[::2], pairs[1::2]):
    flags = os.O_WRONLY if how == "inplace" else os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = os.open(path, flags)
    os.lseek(fd, 0, os.SEEK_END)
    for _ in range(16):
        os.write(fd, os.urandom(1 << 20))
    fds.append(fd)
open(ready, "w").close()
sys.stdin.readline()
for fd in fds:
    for op in (lambda: os.write(fd, b"x" * (1 << 20)), lambda: os.close(fd)):
        try:
            op()
            print("ok", flush=True)
        except OSError as e:
            print(e.errno, flush=True)
"""


class SigtermWriterTest(MountTestCase):
    TMP_PREFIX = "ckptfs-sigterm-"

    def mount(self):
        m = Mount(os.path.join(self.tmp, "mnt"), store=self.store,
                  staging=os.path.join(self.tmp, "staging"), node="a",
                  extra_args=["--drain", "10"], timeout=30)
        self.mounts.append(m)
        return m.start()

    def consistent(self):
        return [s["step"] for s in list_steps(CKPTCTL, self.store, JOB)
                if s.get("state") == "consistent"]

    def test_file_cut_by_sigterm_is_not_published(self):
        m = self.mount()
        cut = os.path.join(m.path, JOB, "step-1", "model.bin")
        fresh = os.path.join(m.path, JOB, "step-2", "model.bin")
        os.makedirs(os.path.dirname(cut))
        os.makedirs(os.path.dirname(fresh))
        with open(cut, "wb") as f:  # closed: its row says CLOSED
            f.write(b"header")
        ready = os.path.join(self.tmp, "ready")
        writer = subprocess.Popen([sys.executable, "-c", WRITER, ready, cut, "inplace",
                                   fresh, "new"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            wait_for(lambda: os.path.exists(ready) or writer.poll() is not None, 60,
                     "the writer mid-file")
            self.assertIsNone(writer.poll(), "the writer died before the SIGTERM")
            self.assertEqual(m.terminate(), 0)
            out, _ = writer.communicate("go\n", timeout=30)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait()
        results = out.split()
        self.assertEqual(len(results), 4, out)
        # No close() succeeded: every write and close after the stop failed.
        self.assertNotIn("ok", results, out)
        self.assertTrue(set(results) <= {str(errno.ECONNABORTED), str(errno.ENOTCONN)}, out)
        self.assertEqual(self.consistent(), [], "published at the SIGTERM's unmount")

        # A restart on the same staging, then a clean unmount, whose R8
        # completes the steps that look finished: not these.
        m.start()
        m.unmount()
        self.assertEqual(self.consistent(), [], "a file cut by the SIGTERM was published")
        # Both files are kept as they were cut, and the status names them.
        m.start()
        self.assertEqual(os.path.getsize(cut), 6 + 16 * MIB)
        self.assertEqual(os.path.getsize(fresh), 16 * MIB)
        st = read_status(m.path)
        self.assertEqual(st["failed_files"], 2, st)
        self.assertEqual({(f["path"], f["step"], f["torn"]) for f in st["failed"]},
                         {("step-1/model.bin", 1, False), ("step-2/model.bin", 2, False)})
        self.assertIn(": a write to staging failed", st["last_error"])
        m.unmount()

        # Rewritten or removed, a file no longer holds its step back.
        m.start()
        with open(cut, "wb") as f:
            f.write(os.urandom(2 * MIB))
        os.unlink(fresh)
        self.assertEqual(read_status(m.path)["failed_files"], 0)
        m.unmount()
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=30)


if __name__ == "__main__":
    unittest.main()
