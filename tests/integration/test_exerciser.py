"""A randomized operation exerciser of the mount (docs/RELIABILITY.md,
"The exerciser"): random writes at random offsets, truncates that shrink
and grow, writes through mmap, closes and reopens, renames within the step,
unlinks, mkdir and rmdir, and symlinks and hard links (refused with
ENOTSUP, changing nothing: docs/MOUNT.md, "What the mount does not do"),
on the files of one step directory of a real
mount, each checked against an in-memory model of what the files must
hold. Then the step is completed, becomes durable, and a new node (empty
staging) must read every file of it byte for byte as the model has it.

The seed is printed first, and again with any failure: rerun one with
CKPT_EXERCISER_SEED=N. CKPT_EXERCISER_OPS sets the number of operations
(CI: 1500; docs/RELIABILITY.md gives a longer run). Checks states, never
timings.

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import errno
import mmap
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import CKPTCTL, CKPTFS, Mount, MountTestCase, wait_durable, wait_for  # noqa: E402

JOB = "job"
STEP = 1
STEP_DIR = "step-%06d" % STEP
MAX_SIZE = 3 << 20   # no file grows past it: a run stays small and quick
MAX_FILES = 12
OPS = int(os.environ.get("CKPT_EXERCISER_OPS", "1500"))


class Exerciser:
    """The files of one step directory and the model of their bytes."""

    def __init__(self, root, rng):
        self.root, self.rng = root, rng
        self.model = {}   # path relative to the step directory -> bytearray
        self.dirs = {""}  # directories under the step directory ("": itself)
        self.log = []     # the operations done, for a failure's report

    def path(self, rel):
        return os.path.join(self.root, rel)

    def pick_file(self):
        return self.rng.choice(sorted(self.model)) if self.model else None

    def new_name(self):
        d = self.rng.choice(sorted(self.dirs))
        return os.path.join(d, "f%d.bin" % self.rng.randrange(10 ** 6))

    def data(self, n):
        return self.rng.randbytes(n)

    # ---- the operations; each changes the mount and the model alike ----

    def op_create(self):
        if len(self.model) >= MAX_FILES:
            return self.op_unlink()
        rel = self.new_name()
        body = self.data(self.rng.randrange(0, 1 << 20))
        with open(self.path(rel), "wb") as f:
            f.write(body)
        self.model[rel] = bytearray(body)
        return "create %s %d" % (rel, len(body))

    def op_pwrite(self):
        rel = self.pick_file()
        if rel is None:
            return self.op_create()
        m = self.model[rel]
        off = self.rng.randrange(0, min(len(m) + (256 << 10), MAX_SIZE - 1))
        body = self.data(self.rng.randrange(1, min(1 << 20, MAX_SIZE - off) + 1))
        fd = os.open(self.path(rel), os.O_WRONLY)
        try:
            os.pwrite(fd, body, off)
        finally:
            os.close(fd)
        if off > len(m):
            m.extend(bytes(off - len(m)))
        m[off:off + len(body)] = body
        return "pwrite %s @%d +%d" % (rel, off, len(body))

    def op_truncate(self):
        rel = self.pick_file()
        if rel is None:
            return self.op_create()
        m = self.model[rel]
        size = self.rng.randrange(0, MAX_SIZE)
        os.truncate(self.path(rel), size)
        if size < len(m):
            del m[size:]
        else:
            m.extend(bytes(size - len(m)))
        return "truncate %s %d" % (rel, size)

    def op_mmap_write(self):
        rel = self.pick_file()
        if rel is None or not self.model[rel]:
            return self.op_pwrite()
        m = self.model[rel]
        off = self.rng.randrange(0, len(m))
        body = self.data(self.rng.randrange(1, min(64 << 10, len(m) - off) + 1))
        fd = os.open(self.path(rel), os.O_RDWR)
        try:
            with mmap.mmap(fd, len(m)) as mm:
                mm[off:off + len(body)] = body
                mm.flush()
        finally:
            os.close(fd)
        m[off:off + len(body)] = body
        return "mmap %s @%d +%d" % (rel, off, len(body))

    def op_reopen_read(self):
        rel = self.pick_file()
        if rel is None:
            return self.op_create()
        self.check_file(rel)
        return "read %s" % rel

    def op_rename(self):
        rel = self.pick_file()
        if rel is None:
            return self.op_create()
        to = self.new_name() if self.rng.random() < 0.7 else self.pick_file()
        if to == rel:
            return "rename %s onto itself: skipped" % rel
        os.rename(self.path(rel), self.path(to))
        self.model[to] = self.model.pop(rel)
        return "rename %s %s" % (rel, to)

    def op_unlink(self):
        rel = self.pick_file()
        if rel is None:
            return self.op_create()
        os.unlink(self.path(rel))
        del self.model[rel]
        return "unlink %s" % rel

    def op_mkdir(self):
        if len(self.dirs) >= 4:
            return self.op_rmdir()
        d = os.path.join(self.rng.choice(sorted(self.dirs)), "d%d" % self.rng.randrange(1000))
        if d in self.dirs:
            return "mkdir %s: exists, skipped" % d
        os.mkdir(self.path(d))
        self.dirs.add(d)
        return "mkdir %s" % d

    def op_rmdir(self):
        empty = [d for d in sorted(self.dirs) if d and not any(
            p.startswith(d + "/") for p in self.model) and not any(
            o.startswith(d + "/") for o in self.dirs)]
        if not empty:
            return self.op_create()
        d = self.rng.choice(empty)
        os.rmdir(self.path(d))
        self.dirs.discard(d)
        return "rmdir %s" % d

    def op_link(self):
        """A relative symlink to a file of the step, or a hard link to it:
        refused, and neither the tree nor the file changes."""
        rel = self.pick_file()
        if rel is None:
            return self.op_create()
        name = self.new_name()
        if name in self.model or name in self.dirs:
            return "link %s: exists, skipped" % name
        if self.rng.random() < 0.5:
            kind, make = "symlink", lambda: os.symlink(
                os.path.relpath(rel, os.path.dirname(name)), self.path(name))
        else:
            kind, make = "link", lambda: os.link(self.path(rel), self.path(name))
        try:
            make()
        except OSError as e:
            if e.errno != errno.ENOTSUP:
                raise AssertionError("%s %s -> %s: %s, want ENOTSUP" % (kind, name, rel, e))
        else:
            raise AssertionError("%s %s -> %s succeeded: links are refused" % (kind, name, rel))
        return "%s %s -> %s: ENOTSUP" % (kind, name, rel)

    OPS = [(op_create, 3), (op_pwrite, 6), (op_truncate, 2), (op_mmap_write, 2),
           (op_reopen_read, 3), (op_rename, 2), (op_unlink, 1), (op_mkdir, 1), (op_rmdir, 1),
           (op_link, 1)]

    def step(self):
        fns, weights = zip(*self.OPS)
        what = self.rng.choices(fns, weights)[0](self)
        self.log.append(what)

    # ---- checks ----

    def check_file(self, rel, root=None):
        with open(os.path.join(root or self.root, rel), "rb") as f:
            got = f.read()
        want = bytes(self.model[rel])
        if got != want:
            at = next((i for i in range(min(len(got), len(want))) if got[i] != want[i]),
                      min(len(got), len(want)))
            raise AssertionError("%s differs from the model: %d bytes, want %d; first "
                                 "difference at byte %d" % (rel, len(got), len(want), at))

    def check_tree(self, root=None):
        root = root or self.root
        seen_files, seen_dirs = set(), {""}
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            rel_dir = "" if rel_dir == "." else rel_dir
            seen_dirs.update(os.path.join(rel_dir, d) for d in dirnames)
            seen_files.update(os.path.join(rel_dir, n) for n in filenames
                              if n != ".ckpt-complete")
        if seen_files != set(self.model):
            raise AssertionError("files differ from the model: extra %s, missing %s" % (
                sorted(seen_files - set(self.model)), sorted(set(self.model) - seen_files)))
        for rel in sorted(self.model):
            self.check_file(rel, root)
        return seen_dirs


class ExerciserTest(MountTestCase):
    TMP_PREFIX = "ckptfs-ex-"

    def mount(self, name):
        m = Mount(os.path.join(self.tmp, name), store=self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node=name, binary=CKPTFS,
                  extra_args=("--refresh", "0.5"))
        self.mounts.append(m)
        m.start()
        return m

    def test_random_operations(self):
        seed = int(os.environ.get("CKPT_EXERCISER_SEED", "0")) or \
            int.from_bytes(os.urandom(4), "little")
        print("exerciser: seed %d, %d operations (CKPT_EXERCISER_SEED=%d to rerun)" % (
            seed, OPS, seed), file=sys.stderr)
        a = self.mount("a")
        step_dir = os.path.join(a.path, JOB, STEP_DIR)
        os.makedirs(step_dir)
        ex = Exerciser(step_dir, random.Random(seed))
        try:
            for i in range(OPS):
                ex.step()
                if i % 100 == 99:
                    ex.check_tree()
            ex.check_tree()
            with open(os.path.join(step_dir, ".ckpt-complete"), "wb"):
                pass
            wait_durable(CKPTCTL, self.store, JOB, STEP, timeout=120)
            a.unmount()
            b = self.mount("b")
            new_dir = os.path.join(b.path, JOB, STEP_DIR)
            wait_for(lambda: os.path.isdir(new_dir), 60, "step %d listed on a new node" % STEP)
            ex.check_tree(new_dir)
        except Exception:
            print("exerciser: FAILED with seed %d after %d operations; the last ones:\n  %s" % (
                seed, len(ex.log), "\n  ".join(ex.log[-15:])), file=sys.stderr)
            raise


if __name__ == "__main__":
    unittest.main()
