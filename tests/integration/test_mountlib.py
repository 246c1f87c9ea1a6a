"""Self-test of the mount harness (mountlib.py), with libfuse's own
passthrough_ll example as the daemon: it is built here into a temp dir.

Checks: a mount goes live, data written through it reads back and lands in
the backing directory; unmount() and kill9() both leave no mount in
/proc/self/mountinfo and no process; a restart of the same Mount works; an
exception inside the with-block still cleans up; a daemon that exits early or
never mounts fails fast with its log; wait_durable polls and times out;
run_torch runs Debian's torch; tree_digest and tree_map see every file
(a mount's .ckptfs aside); file_store_keys lists a store while it is being
deleted from. Exit 77 (skipped) without FUSE.
"""
import hashlib
import io
import os
import shutil
import stat
import subprocess
import sys
import time
import unittest
from contextlib import redirect_stderr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mountlib  # noqa: E402
from mountlib import Mount, MountError  # noqa: E402


def children_of(pid):
    """PIDs whose parent is `pid` (zombies included)."""
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def close_dead(f):
    """Close a file whose mount died under it: the flush fails with ENOTCONN."""
    try:
        f.close()
    except OSError:
        pass


class MountlibTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = mountlib.tempdir("mountlib-test-")
        cls.ptll = mountlib.build_passthrough_ll(os.path.join(cls.tmp, "bin"))

    @classmethod
    def tearDownClass(cls):
        for path in list(mountlib.mountpoints()):
            if path.startswith(cls.tmp):  # never expected; never leave one behind
                mountlib.fusermount_unmount(path, lazy=True)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.dir = os.path.join(self.tmp, self.id().rpartition(".")[2])
        self.src = os.path.join(self.dir, "src")
        self.mnt = os.path.join(self.dir, "mnt")
        os.makedirs(self.src)

    def tearDown(self):
        self.assertNotIn(os.path.realpath(self.mnt), mountlib.mountpoints(), "mount left behind")
        self.assertEqual(children_of(os.getpid()), [], "process left behind")

    def mount(self, **kw):
        return Mount(self.mnt, argv=mountlib.passthrough_ll_argv(self.ptll, self.src), **kw)

    def assert_gone(self, m, pid):
        self.assertFalse(mountlib.is_mounted(self.mnt, ""))
        self.assertFalse(mountlib.pid_alive(pid))
        self.assertIsNone(m.proc)

    def test_write_read_unmount(self):
        data = os.urandom(3 << 20)
        with self.mount() as m:
            self.assertTrue(mountlib.is_mounted(m.path))
            pid = m.pid
            self.assertTrue(mountlib.pid_alive(pid))
            with open(os.path.join(m.path, "f.bin"), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            with open(os.path.join(m.path, "f.bin"), "rb") as f:
                self.assertEqual(f.read(), data)
            os.mkdir(os.path.join(m.path, "job"))
            self.assertEqual(sorted(os.listdir(m.path)), ["f.bin", "job"])
            self.assertEqual(m.unmount(), 0)
            self.assert_gone(m, pid)
        with open(os.path.join(self.src, "f.bin"), "rb") as f:
            self.assertEqual(f.read(), data)
        self.assertTrue(os.path.exists(m.log_path))

    def test_kill9_then_restart(self):
        m = self.mount()
        with m:
            with open(os.path.join(m.path, "a"), "wb") as f:
                f.write(b"before crash")
            held = open(os.path.join(m.path, "a"), "rb")  # an fd open across the crash
            pid = m.pid
            m.kill9()
            self.assert_gone(m, pid)
            with self.assertRaises(OSError):  # ENOTCONN (or EIO): the daemon is gone
                os.pread(held.fileno(), 10, 0)
            close_dead(held)
            m.start()  # restart on the same mountpoint
            self.assertNotEqual(m.pid, pid)
            with open(os.path.join(m.path, "a"), "rb") as f:
                self.assertEqual(f.read(), b"before crash")
            pid = m.pid
        self.assert_gone(m, pid)  # __exit__ unmounted cleanly
        self.assertEqual(m.returncode, 0)

    def test_exception_inside_with_cleans_up(self):
        m = self.mount()
        err = io.StringIO()
        with redirect_stderr(err), self.assertRaises(ZeroDivisionError):
            with m:
                pid = m.pid
                busy = open(os.path.join(m.path, "busy"), "wb")  # makes `fusermount3 -u` fail
                1 / 0  # `busy` is still open while __exit__ runs
        close_dead(busy)
        self.assert_gone(m, pid)
        self.assertIn("test failed while mounted", err.getvalue())

    def test_unmount_while_busy_falls_back_to_kill(self):
        m = self.mount(timeout=2)
        m.start()
        pid = m.pid
        busy = open(os.path.join(m.path, "busy"), "wb")
        try:
            with redirect_stderr(io.StringIO()), self.assertRaises(MountError):
                m.unmount()
        finally:
            close_dead(busy)
        self.assert_gone(m, pid)

    def test_sigterm_to_test_cleans_up(self):
        # A test process killed with SIGTERM (Ctrl-C, a harness timeout) still unmounts.
        code = ("import sys, time; sys.path.insert(0, %r); import mountlib\n"
                "m = mountlib.Mount(%r, argv=mountlib.passthrough_ll_argv(%r, %r))\n"
                "with m:\n    print(m.pid, flush=True); time.sleep(60)\n"
                % (os.path.dirname(mountlib.__file__), self.mnt, self.ptll, self.src))
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        try:
            daemon = int(child.stdout.readline())
            self.assertTrue(mountlib.is_mounted(self.mnt))
            child.terminate()
            self.assertEqual(child.wait(timeout=30), 128 + 15)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            child.stdout.close()
        self.assertFalse(mountlib.is_mounted(self.mnt, ""))
        self.assertFalse(mountlib.pid_alive(daemon))

    def test_daemon_exits_before_mounting(self):
        m = self.mount()
        m._argv = lambda mp: [self.ptll, "-f", "-o", "source=/nonexistent/dir", mp]
        err = io.StringIO()
        t0 = time.monotonic()
        with redirect_stderr(err), self.assertRaises(MountError) as cm:
            m.start()
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn("exited with status", str(cm.exception))
        self.assertIn("/nonexistent/dir", err.getvalue())  # the daemon's own message, printed
        self.assertIsNone(m.proc)

    def test_never_mounts_times_out(self):
        m = Mount(self.mnt, argv=lambda mp: ["sleep", "60"], timeout=1)
        t0 = time.monotonic()
        with redirect_stderr(io.StringIO()), self.assertRaises(MountError) as cm:
            m.start()
        self.assertLess(time.monotonic() - t0, 5)
        self.assertIn("not mounted after", str(cm.exception))
        self.assertIsNone(m.proc)

    def test_mountinfo_escapes(self):
        self.assertEqual(mountlib._unescape_mountinfo(r"/a\040b\011c"), "/a b\tc")
        self.assertEqual(mountlib._unescape_mountinfo(r"/x\134y"), "/x\\y")
        self.assertIn("/", mountlib.mountpoints())

    def test_ckptfs_argv(self):
        argv = mountlib.ckptfs_argv("/b/ckptfs", "file:///s", "/st", "n1", ["-o", "x"])("/m")
        self.assertEqual(argv, ["/b/ckptfs", "/m", "--store", "file:///s", "--staging", "/st",
                                "--node", "n1", "-f", "-o", "x"])
        old = os.environ.pop("CKPTFS", None)
        try:
            with self.assertRaises(MountError):
                Mount(self.mnt, store="file:///s", staging="/st")
            os.environ["CKPTFS"] = "/env/ckptfs"
            m = Mount(self.mnt, store="file:///s", staging="/st")
            self.assertEqual(m._argv(m.path)[:2], ["/env/ckptfs", os.path.realpath(self.mnt)])
        finally:
            os.environ.pop("CKPTFS", None)
            if old is not None:
                os.environ["CKPTFS"] = old

    def test_wait_durable(self):
        # A fake ckptctl: fails (exit 1) twice, then lists step 5 from the 4th call on.
        fake = os.path.join(self.dir, "ckptctl")
        count = os.path.join(self.dir, "count")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\n'
                    'n=$(cat %s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %s\n'
                    'echo "$@" >> %s.args\n'
                    '[ $n -le 2 ] && { echo "no such job" >&2; exit 1; }\n'
                    '[ $n -le 3 ] && { echo \'[{"step":4}]\'; exit 0; }\n'
                    'echo \'[{"step":4},{"step":5,"bytes":7}]\'\n' % (count, count, count))
        os.chmod(fake, os.stat(fake).st_mode | stat.S_IXUSR)
        entry = mountlib.wait_durable(fake, "file:///s", "j", 5, timeout=10, interval=0.01)
        self.assertEqual(entry, {"step": 5, "bytes": 7})
        with open(count + ".args") as f:
            self.assertEqual(f.readline().split(), ["--store", "file:///s", "--job", "j",
                                                    "--json", "ls"])
        t0 = time.monotonic()
        with self.assertRaises(TimeoutError) as cm:
            mountlib.wait_durable(fake, "file:///s", "j", 6, timeout=0.3, interval=0.01)
        self.assertLess(time.monotonic() - t0, 3)
        self.assertIn("[4, 5]", str(cm.exception))

    def test_run_torch(self):
        p = mountlib.run_torch("import sys, torch; print(torch.ones(2).sum().item(), sys.argv[1])",
                               "arg")
        self.assertEqual(p.stdout.split(), ["2.0", "arg"])
        with redirect_stderr(io.StringIO()), self.assertRaises(subprocess.CalledProcessError):
            mountlib.run_torch("raise SystemExit(3)")

    def test_tree_digest(self):
        # The digest helpers back every "restored == saved" check of the
        # mount tests: an empty or partial map would make them pass vacuously.
        files = {"a": b"x" * (3 << 20), "d/b": b"", "d/e/c": b"hello"}
        for rel, data in files.items():
            os.makedirs(os.path.dirname(os.path.join(self.src, rel)), exist_ok=True)
            with open(os.path.join(self.src, rel), "wb") as f:
                f.write(data)
        os.makedirs(os.path.join(self.src, ".ckptfs"))
        with open(os.path.join(self.src, ".ckptfs", "status"), "w") as f:
            f.write("{}")
        want = {rel: hashlib.sha256(data).hexdigest() for rel, data in files.items()}
        self.assertEqual(mountlib.tree_digest(self.src), want)
        self.assertEqual(mountlib.tree_digest(self.src, lambda rel: rel.startswith("d/")),
                         {k: v for k, v in want.items() if k.startswith("d/")})
        self.assertEqual(mountlib.tree_map(self.src, mountlib.read_bytes),
                         dict(files, **{".ckptfs/status": b"{}"}))
        self.assertEqual(mountlib.sha256_file(os.path.join(self.src, "a")), want["a"])

    def test_file_store_keys_while_deleting(self):
        # A test that polls for a step to leave the store lists it while the
        # daemon deletes it: a key that vanishes between os.walk's listing
        # and the stat is gone, not an error (integration.mount_delete failed
        # in CI on exactly that race).
        root = os.path.join(self.src, "store")
        os.makedirs(os.path.join(root, "jobs@", "j@"))
        for name, size in (("a.commit", 3), ("b.commit", 5)):
            with open(os.path.join(root, "jobs@", "j@", name), "wb") as f:
                f.write(b"x" * size)
        real_getsize = os.path.getsize

        def getsize_after_delete(path):
            if path.endswith("a.commit"):
                os.unlink(path)  # the daemon wins the race
            return real_getsize(path)
        mountlib.os.path.getsize = getsize_after_delete
        try:
            got = mountlib.file_store_keys("file://" + root, "jobs/")
        finally:
            mountlib.os.path.getsize = real_getsize
        self.assertEqual(got, {"jobs/j/b.commit": 5})


if __name__ == "__main__":
    why = mountlib.fuse_usable()
    if why:
        print("SKIP: FUSE not usable here: %s" % why)
        sys.exit(mountlib.SKIP)
    unittest.main(verbosity=2)
