"""The staging directory and the mountpoint are one daemon's own
(docs/MOUNT.md and docs/MOUNT_MODEL.md, "The staging directory"), with the
real daemon:

* a second daemon on a staging directory in use (under another --node or
  the same) exits non-zero with a message naming the first one's PID, after
  the bounded wait it announces (--staging-wait), mounts nothing, and the
  first one keeps serving;
* a second daemon on a mountpoint where a ckptfs is mounted exits non-zero
  instead of stacking over it; a mountpoint that is not empty is warned of;
* a FIFO and a symlink planted in STAGING/data at the names of the next
  staging files (ids count from 1 in a fresh staging directory) make those
  creates fail at once with EIO: no hang of the mount (ls, the status file,
  SIGTERM still work), no write outside staging;
* a staging directory that others may write is refused at start.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import errno
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (Mount, MountError, MountTestCase, fusermount_unmount,  # noqa: E402
                      mountpoints, read_status)

JOB = "job"
OUTSIDE = b"precious bytes outside staging\n"


class StagingGuard(MountTestCase):
    TMP_PREFIX = "ckptfs-staging-"

    def mount(self, name, staging, node="test", extra=()):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, staging), node=node, extra_args=extra)
        self.mounts.append(m)
        return m

    def refused_start(self, m, why):
        """m's daemon must exit non-zero before mounting; returns its log."""
        with self.assertRaises(MountError, msg=why):
            m.start()
        self.assertNotEqual(m.returncode, 0)
        return m.log_text()

    def test_second_daemon_on_staging_is_refused(self):
        a = self.mount("mnt-a", "staging")
        self.start_mount(a, JOB)
        for i, node in enumerate(("other", "test")):
            b = self.mount("mnt-b%d" % i, "staging", node=node, extra=["--staging-wait", "1"])
            log = self.refused_start(b, "second daemon on one staging directory, --node " + node)
            self.assertIn("waiting up to 1 s", log)
            self.assertIn("is in use by another ckptfs daemon (PID %d)" % a.pid, log)
            self.assertNotIn(b.path, mountpoints())
        # The first daemon is untouched: it writes, reads and reports.
        path = os.path.join(a.path, JOB, "after.txt")
        with open(path, "wb") as f:
            f.write(b"still mine")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"still mine")
        self.assertIn("steps", read_status(a.path))
        self.assertEqual(a.unmount(), 0)

    def test_second_daemon_on_mountpoint_is_refused(self):
        a = self.mount("mnt", "staging-a")
        self.start_mount(a, JOB)
        # Mount.start() itself refuses a mounted path: run the daemon bare.
        argv = [os.environ["CKPTFS"], a.path, "--store", self.store, "--staging",
                os.path.join(self.tmp, "staging-b"), "--node", "b", "-f"]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()  # it mounted over the first one: take its mount away
            p.wait(timeout=10)
            fusermount_unmount(a.path, lazy=True)
            self.fail("a second daemon on a mounted ckptfs did not exit within 20 s")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(b"already has a ckptfs mounted on it", out)
        with open("/proc/self/mountinfo") as f:
            self.assertEqual(sum(" %s " % a.path in line for line in f), 1)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "staging-b")))

    def test_fifo_and_symlink_in_staging_data(self):
        staging = os.path.join(self.tmp, "staging")
        m = self.mount("mnt", "staging")
        self.start_mount(m, JOB)
        fifo = os.path.join(staging, "data", "1")
        link = os.path.join(staging, "data", "2")
        outside = os.path.join(self.tmp, "outside")
        with open(outside, "wb") as f:
            f.write(OUTSIDE)
        os.mkfifo(fifo, 0o600)
        os.symlink(outside, link)

        def create(name):
            """Writes a file through the mount in a child, bounded; errno or 0."""
            code = ("import sys\ntry:\n    open(sys.argv[1], 'wb').write(b'checkpoint bytes')\n"
                    "except OSError as e:\n    sys.exit(e.errno)\n")
            p = subprocess.Popen([sys.executable, "-c", code, os.path.join(m.path, JOB, name)])
            try:
                return p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # Blocked on the FIFO: the child cannot even be killed while
                # the daemon holds its request, so a reader lets the daemon
                # go first; then the test fails.
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
                p.kill()
                p.wait(timeout=10)
                self.fail("a create blocked on a FIFO in staging")

        self.assertEqual(create("ckpt-000001.pt"), errno.EIO)  # data/1: the FIFO
        self.assertEqual(create("ckpt-000002.pt"), errno.EIO)  # data/2: the symlink
        with open(outside, "rb") as f:
            self.assertEqual(f.read(), OUTSIDE)
        self.assertTrue(os.path.islink(link))
        log = m.log_text()
        self.assertIn("%s already exists and is a FIFO: refused" % fifo, log)
        self.assertIn("%s already exists and is a symlink: refused" % link, log)
        # The mount goes on serving, and SIGTERM stops it.
        self.assertEqual(create("ckpt-000003.pt"), 0)
        self.assertIn("ckpt-000003.pt", os.listdir(os.path.join(m.path, JOB)))
        self.assertIn("steps", read_status(m.path))
        self.assertEqual(m.terminate(timeout=30), 0)

    def test_open_staging_refused_and_full_mountpoint_warned(self):
        staging = os.path.join(self.tmp, "staging")
        os.mkdir(staging)
        os.chmod(staging, 0o777)
        log = self.refused_start(self.mount("mnt", "staging"), "staging writable by others")
        self.assertIn("staging directory %s is writable by others" % staging, log)

        os.chmod(staging, 0o700)
        full = os.path.join(self.tmp, "full")
        os.mkdir(full)
        with open(os.path.join(full, "left-here"), "w"):
            pass
        m = self.mount("full", "staging")
        m.start()
        self.assertIn("mountpoint %s is not empty (1 entry)" % full, m.log_text())
        self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
