"""Other users on the node (docs/MOUNT.md, "Other users on the node").

One ckptfs daemon, run by root, mounted with `-o allow_other`, and a real
second local user (created here if missing: CI starts from a clean machine
as root). The kernel enforces modes and owners (the daemon always mounts
with default_permissions), so that user:

* gets EACCES reading a 0600 file, and anything in a 0700 job;
* cannot create a job (the root is root's, 0755), write into root's step
  directory, or delete root's step (`rm -rf` fails, the step stays);
* cannot read .ckptfs/status or .ckptfs/metrics, nor write .ckptfs/commit
  (the daemon's user's by default; `--control-access all` opens them);
* owns what it creates (in a job that lets it), with the modes it asked
  for under its umask, and may chmod it; cannot chown it to root;

while root does all of that (and, with the root chmod 1777, the user may
create a job of its own), chown works when it changes nothing (and
when root changes it), `cp -a` of a tree into the mount exits 0 with owners
kept, and owners survive a restart of the daemon.

Environment: CKPTFS and CKPTCTL name the binaries. Needs root (useradd,
mounting with allow_other).
"""
import os
import shutil
import stat
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import CKPTFS, Mount, MountTestCase, ensure_second_user  # noqa: E402

# Runs one file operation as the user; prints "ok" or the errno's name.
USER_OP = r"""
import errno, os, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "read":
        open(path, "rb").read()
    elif op == "write":
        with open(path, "wb") as f:
            f.write(b"x")
    elif op == "append":
        with open(path, "ab") as f:
            f.write(b"x")
    elif op == "mkdir":
        os.mkdir(path, 0o777)
    elif op == "listdir":
        os.listdir(path)
    elif op == "chmod":
        os.chmod(path, 0o640)
    elif op == "chown_root":
        os.chown(path, 0, -1)
    print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""


class OtherUsersTest(MountTestCase):
    TMP_PREFIX = "ckptfs-users-"

    def setUp(self):
        if os.geteuid() != 0:
            self.fail("needs root: it creates a user and mounts with allow_other")
        super().setUp()
        self.uid, self.gid = ensure_second_user()
        # mkdtemp made the test's directory 0700: the user must reach the
        # mountpoint inside it (and nothing else here is the user's).
        os.chmod(self.tmp, 0o755)

    def mount(self, *extra):
        m = Mount(os.path.join(self.tmp, "mnt"), store=self.store,
                  staging=os.path.join(self.tmp, "staging"), node="users", binary=CKPTFS,
                  extra_args=["-o", "allow_other", *extra])
        self.mounts.append(m)
        return m

    def as_user(self, op, path):
        """What op on path gives the user: "ok" or an errno name."""
        p = subprocess.run([sys.executable, "-c", USER_OP, op, path], user=self.uid,
                           group=self.gid, extra_groups=[], umask=0o022, capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout.strip()

    def user_cmd(self, *argv):
        return subprocess.run(list(argv), user=self.uid, group=self.gid, extra_groups=[],
                              capture_output=True, text=True, timeout=30)

    def write(self, path, data=b"data", mode=0o644):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def test_permissions_enforced(self):
        m = self.mount().start()
        root = m.path
        st = os.stat(root)
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (0, 0o755))

        # Root's jobs: a private one (0700) and an open one (0755) whose step
        # holds a 0600 file.
        secret = os.path.join(root, "secret")
        os.mkdir(secret, 0o700)
        self.write(os.path.join(secret, "ckpt-000001.pt"), mode=0o644)
        step = os.path.join(root, "rjob", "checkpoint-1")
        os.makedirs(step)
        self.write(os.path.join(step, "model.bin"), mode=0o600)
        self.write(os.path.join(step, "config.json"), mode=0o644)
        os.chmod(os.path.join(step, "model.bin"), 0o600)  # the mode, whatever the umask
        self.assertEqual(stat.S_IMODE(os.stat(secret).st_mode), 0o700)

        checks = [
            ("read", os.path.join(secret, "ckpt-000001.pt"), "EACCES"),  # the 0700 job
            ("listdir", secret, "EACCES"),
            ("read", os.path.join(step, "model.bin"), "EACCES"),  # the 0600 file
            ("read", os.path.join(step, "config.json"), "ok"),  # 0644: readable
            ("mkdir", os.path.join(root, "userjob"), "EACCES"),  # a job: root's root
            ("write", os.path.join(step, "extra.bin"), "EACCES"),  # into root's step
            ("append", os.path.join(step, "config.json"), "EACCES"),
            ("chmod", os.path.join(step, "config.json"), "EPERM"),
            ("read", os.path.join(root, ".ckptfs", "status"), "EACCES"),
            ("read", os.path.join(root, ".ckptfs", "metrics"), "EACCES"),
            ("append", os.path.join(root, ".ckptfs", "commit"), "EACCES"),
        ]
        for op, path, want in checks:
            with self.subTest(op=op, path=os.path.relpath(path, root)):
                self.assertEqual(self.as_user(op, path), want)

        # rm -rf of root's step fails and deletes nothing.
        p = self.user_cmd("rm", "-rf", step)
        self.assertNotEqual(p.returncode, 0, "rm -rf of root's step as another user")
        self.assertEqual(sorted(os.listdir(step)), ["config.json", "model.bin"])
        self.assertFalse(os.path.exists(os.path.join(root, "userjob")))

        # A job that lets others in (1777, as /tmp): the user's entries are
        # the user's, with the modes asked for under umask 022.
        shared = os.path.join(root, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        mine = os.path.join(shared, "checkpoint-2")
        self.assertEqual(self.as_user("mkdir", mine), "ok")
        self.assertEqual(self.as_user("write", os.path.join(mine, "w.bin")), "ok")
        for path, mode in ((mine, 0o755), (os.path.join(mine, "w.bin"), 0o644)):
            st = os.stat(path)
            self.assertEqual((st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)),
                             (self.uid, self.gid, mode), path)
        self.assertEqual(self.as_user("chmod", os.path.join(mine, "w.bin")), "ok")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(mine, "w.bin")).st_mode), 0o640)
        self.assertEqual(self.as_user("chown_root", os.path.join(mine, "w.bin")), "EPERM")

        # Root: chown that changes nothing, and a real one; cp -a keeps owners.
        os.chown(os.path.join(step, "config.json"), 0, 0)
        os.chown(os.path.join(step, "config.json"), -1, -1)
        os.chown(os.path.join(step, "config.json"), self.uid, self.gid)
        self.assertEqual(os.stat(os.path.join(step, "config.json")).st_uid, self.uid)
        src = os.path.join(self.tmp, "src")
        os.makedirs(os.path.join(src, "checkpoint-3", "sub"))
        self.write(os.path.join(src, "checkpoint-3", "a.bin"), mode=0o600)
        self.write(os.path.join(src, "checkpoint-3", "sub", "b.bin"))
        os.chown(os.path.join(src, "checkpoint-3", "sub", "b.bin"), self.uid, self.gid)
        os.mkdir(os.path.join(root, "copied"))
        p = subprocess.run(["cp", "-a", os.path.join(src, "checkpoint-3"),
                            os.path.join(root, "copied")], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        copied = os.path.join(root, "copied", "checkpoint-3")
        self.assertEqual(os.stat(os.path.join(copied, "sub", "b.bin")).st_uid, self.uid)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(copied, "a.bin")).st_mode), 0o600)

        # Root does what the user could not; a root of mode 1777 lets the
        # user create a job of its own.
        os.mkdir(os.path.join(root, "rootjob"))
        os.chmod(root, 0o1777)
        self.assertEqual(self.as_user("mkdir", os.path.join(root, "userjob")), "ok")
        self.assertEqual(os.stat(os.path.join(root, "userjob")).st_uid, self.uid)
        self.write(os.path.join(step, "extra.bin"))
        with open(os.path.join(step, "model.bin"), "rb") as f:
            f.read()
        with open(os.path.join(root, ".ckptfs", "metrics")) as f:
            self.assertIn("ckptfs_build_info", f.read())
        shutil.rmtree(os.path.join(root, "rjob", "checkpoint-1"))
        self.assertFalse(os.path.exists(step))

        # Owners come back from the journal; --control-access all lets the
        # user read the status and the metrics.
        self.assertEqual(m.unmount(), 0)
        m = self.mount("--control-access", "all").start()
        st = os.stat(os.path.join(mine, "w.bin"))
        self.assertEqual((st.st_uid, stat.S_IMODE(st.st_mode)), (self.uid, 0o640))
        self.assertEqual(stat.S_IMODE(os.stat(secret).st_mode), 0o700)
        self.assertEqual(self.as_user("read", os.path.join(secret, "ckpt-000001.pt")), "EACCES")
        self.assertEqual(self.as_user("read", os.path.join(m.path, ".ckptfs", "status")), "ok")
        self.assertEqual(self.as_user("read", os.path.join(m.path, ".ckptfs", "metrics")), "ok")
        self.assertEqual(m.unmount(), 0)


if __name__ == "__main__":
    unittest.main()
