"""The tools people copy checkpoint directories with, into a real mount.

`cp -a`, `tar x` and `rsync -a` of a Hugging Face style checkpoint
directory (weights, optimizer state, a DeepSpeed subdirectory, an empty
file, modes from 0600 to 0755, owners, past mtimes with nanoseconds), as
root and as a real second user: each exits 0 and the copy has the source's
bytes, modes, mtimes and (as root) owners; so does the mount after a
restart of the daemon, and a new node reads the durable steps with the same
bytes, modes and mtimes. Beside them, what those tools rely on
(docs/MOUNT.md, "Times, link counts and set-id bits"): utimensat keeps the
access time it sets, and a write by a process without CAP_FSETID clears
set-user-ID and set-group-ID.

Environment: CKPTFS and CKPTCTL name the binaries. Needs root (useradd,
allow_other) and cp, tar and rsync.
"""
import os
import shutil
import stat
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountTestCase, ensure_second_user,  # noqa: E402
                      sha256_file, wait_durable, wait_for)

STEP_DIR = "checkpoint-7"
STEP = 7
# (relative path, size, mode); directories end in "/". Sizes span an empty
# file, a few bytes and several chunks.
LAYOUT = [
    ("model.safetensors", 3 << 20, 0o644),
    ("optimizer.pt", 5 << 20, 0o600),
    ("scheduler.pt", 1100, 0o640),
    ("rng_state.pth", 14_000, 0o600),
    ("config.json", 700, 0o644),
    ("empty.txt", 0, 0o644),
    ("global_step7/", 0, 0o750),
    ("global_step7/mp_rank_00_model_states.pt", (1 << 20) + 17, 0o644),
    ("global_step7/zero_pp_rank_0_optim_states.pt", 2 << 20, 0o600),
]
PAST_NS = 1_700_000_000_123_456_789  # a mtime no copy could have by accident


def make_source(root, owner=None):
    """Writes LAYOUT under root/STEP_DIR (random bytes, its modes, distinct
    past mtimes); owner (uid, gid) chowns everything to it."""
    top = os.path.join(root, STEP_DIR)
    os.makedirs(top)
    for i, (rel, size, mode) in enumerate(LAYOUT):
        path = os.path.join(top, rel)
        if rel.endswith("/"):
            os.mkdir(path)
        else:
            with open(path, "wb") as f:
                f.write(os.urandom(size))
        os.chmod(path, mode)
        if owner:
            os.chown(path, *owner)
    # mtimes last (creating entries changes their directory's), deepest
    # first; i makes each one distinct.
    for i, (rel, _, _) in reversed(list(enumerate(LAYOUT))):
        t = PAST_NS + i * 1_000_000_007
        os.utime(os.path.join(top, rel), ns=(t, t))
    if owner:
        os.chown(top, *owner)
    os.utime(top, ns=(PAST_NS - 10**9, PAST_NS - 10**9))
    return top


def describe(top, owners, ns, files_only=False):
    """{relative path: (kind, mode, mtime, [owner], sha256)} of the tree at
    top: mtime in ns or whole seconds (ns=False: GNU tar keeps seconds);
    files_only leaves directories out (a new node makes them up: the store
    keeps files)."""
    out = {}
    for dirpath, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top)
            if rel == ".ckpt-complete" or (files_only and name in dirs):
                continue
            st = os.lstat(path)
            kind = "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) \
                else "other"
            row = [kind, oct(stat.S_IMODE(st.st_mode)),
                   st.st_mtime_ns if ns else st.st_mtime_ns // 10**9]
            if owners:
                row.append((st.st_uid, st.st_gid))
            row.append(sha256_file(path) if kind == "file" else "")
            out[rel] = tuple(row)
    if files_only:
        return out
    st = os.stat(top)
    out["."] = ("dir", oct(stat.S_IMODE(st.st_mode)), st.st_mtime_ns if ns else
                st.st_mtime_ns // 10**9) + (((st.st_uid, st.st_gid),) if owners else ())
    return out


# The copies: name -> (argv(src_top, archive, dest_job), keeps nanoseconds).
# tar x as a user needs -p to keep modes past the umask, as everywhere.
TOOLS = {
    "cp": (lambda src, tar, dest: ["cp", "-a", src, dest], True),
    "tar": (lambda src, tar, dest: ["tar", "-xpf", tar, "-C", dest], False),
    "rsync": (lambda src, tar, dest: ["rsync", "-a", src, dest + "/"], True),
}


class PosixToolsTest(MountTestCase):
    TMP_PREFIX = "ckptfs-tools-"
    maxDiff = None  # a differing copy shows every entry

    def setUp(self):
        if os.geteuid() != 0:
            self.fail("needs root: it creates a user and mounts with allow_other")
        for tool in ("cp", "tar", "rsync"):
            self.assertTrue(shutil.which(tool), "%s is not installed" % tool)
        super().setUp()
        self.uid, self.gid = ensure_second_user()
        os.chmod(self.tmp, 0o755)  # the user reaches its source and the mountpoint

    def mount(self, name="mnt", node="tools"):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, "staging-" + name), node=node, binary=CKPTFS,
                  extra_args=["-o", "allow_other"])
        self.mounts.append(m)
        return m.start()

    def source(self, name, owner, theirs=()):
        """A source tree and its tar archive (made by the same user); the
        entries in theirs are chowned to the second user."""
        parent = os.path.join(self.tmp, name)
        os.mkdir(parent)
        if owner:
            os.chown(parent, *owner)
        top = make_source(parent, owner)
        for rel in theirs:
            os.chown(os.path.join(top, rel), self.uid, self.gid)
        archive = os.path.join(parent, "ckpt.tar")  # beside the step: the owner may write there
        self.run_as(owner, ["tar", "-cf", archive, "-C", parent, STEP_DIR])
        return top, archive

    def run_as(self, owner, argv):
        extra = dict(user=owner[0], group=owner[1], extra_groups=[], umask=0o022) if owner \
            else {}
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, **extra)
        self.assertEqual(p.returncode, 0, "%s exited %d: %s" % (argv, p.returncode, p.stderr))

    def copy_all(self, root, owner, src, archive):
        """Each tool copies the source into a job of its own; returns
        {tool: the copy's top directory}."""
        tops = {}
        for tool, (argv, _) in TOOLS.items():
            job = os.path.join(root, "%s-%s" % ("user" if owner else "root", tool))
            os.mkdir(job)
            if owner:
                os.chown(job, *owner)
            self.run_as(owner, argv(src, archive, job))
            tops[tool] = os.path.join(job, STEP_DIR)
        return tops

    def check_copies(self, src, tops, owners, where, files_only=False):
        for tool, top in tops.items():
            ns = TOOLS[tool][1]
            self.assertEqual(describe(top, owners, ns, files_only),
                             describe(src, owners, ns, files_only),
                             "%s: the copy by %s differs from its source" % (where, tool))

    def test_cp_tar_rsync_as_root_and_as_a_user(self):
        user = (self.uid, self.gid)
        # Root's source has files of the user's: cp -a, tar and rsync as
        # root keep owners (chown through the mount).
        root_src, root_tar = self.source("src-root", None, ("optimizer.pt", "global_step7/"))
        user_src, user_tar = self.source("src-user", user)

        m = self.mount()
        root_tops = self.copy_all(m.path, None, root_src, root_tar)
        user_tops = self.copy_all(m.path, user, user_src, user_tar)
        self.check_copies(root_src, root_tops, True, "live")
        self.check_copies(user_src, user_tops, True, "live")

        # The journal brings back bytes, modes, mtimes and owners.
        self.assertEqual(m.unmount(), 0)
        m = self.mount()
        self.check_copies(root_src, root_tops, True, "after a restart")
        self.check_copies(user_src, user_tops, True, "after a restart")

        # Completed and durable, the steps read the same on a new node
        # (owners there are the mount's user's: docs/MOUNT.md).
        for tops in (root_tops, user_tops):
            for top in tops.values():
                with open(os.path.join(top, ".ckpt-complete"), "wb"):
                    pass
        for tops in (root_tops, user_tops):
            for top in tops.values():
                wait_durable(CKPTCTL, self.store, os.path.basename(os.path.dirname(top)), STEP,
                             timeout=120)
        other = self.mount("mnt2", node="tools2")
        for src, tops in ((root_src, root_tops), (user_src, user_tops)):
            moved = {tool: os.path.join(other.path, os.path.relpath(top, m.path))
                     for tool, top in tops.items()}
            for top in moved.values():
                wait_for(lambda: os.path.isdir(top), 60, "%s listed on a new node" % top)
            self.check_copies(src, moved, False, "on a new node", files_only=True)

    def test_utimensat_keeps_atime(self):
        m = self.mount()
        os.mkdir(os.path.join(m.path, "job"))
        path = os.path.join(m.path, "job", "ckpt-000001.pt")
        with open(path, "wb") as f:
            f.write(b"weights")
        os.utime(path, ns=(PAST_NS, PAST_NS + 5))
        st = os.stat(path)
        self.assertEqual((st.st_atime_ns, st.st_mtime_ns), (PAST_NS, PAST_NS + 5))
        with open(path, "rb") as f:  # reads do not touch it (noatime)
            f.read()
        os.utime(path, ns=(PAST_NS + 9, PAST_NS + 5))
        self.assertEqual(os.stat(path).st_atime_ns, PAST_NS + 9)

    def test_write_by_another_user_clears_setuid(self):
        m = self.mount()
        job = os.path.join(m.path, "job")
        os.mkdir(job)
        os.chmod(job, 0o777)
        paths = {}
        for name, mode in (("suid.bin", 0o4777), ("sgid.bin", 0o2777), ("root.bin", 0o6777)):
            paths[name] = os.path.join(job, name)
            with open(paths[name], "wb") as f:
                f.write(b"x")
            os.chmod(paths[name], mode)
            self.assertEqual(stat.S_IMODE(os.stat(paths[name]).st_mode), mode)
        for name in ("suid.bin", "sgid.bin"):
            self.run_as((self.uid, self.gid),
                        [sys.executable, "-c", "import sys; open(sys.argv[1], 'ab').write(b'y')",
                         paths[name]])
        self.assertEqual(stat.S_IMODE(os.stat(paths["suid.bin"]).st_mode), 0o777)
        self.assertEqual(stat.S_IMODE(os.stat(paths["sgid.bin"]).st_mode), 0o777)
        with open(paths["root.bin"], "ab") as f:  # root has CAP_FSETID: kept
            f.write(b"y")
        self.assertEqual(stat.S_IMODE(os.stat(paths["root.bin"]).st_mode), 0o6777)


if __name__ == "__main__":
    unittest.main()
