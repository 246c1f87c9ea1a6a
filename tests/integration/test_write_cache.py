"""How the mount caches what a trainer writes (docs/MOUNT_MODEL.md, "One copy in
the page cache"): a real FUSE mount, a file:// store.

A file opened write-only is direct I/O (FOPEN_DIRECT_IO): its bytes are
cached once, in the staging file's pages, not a second time in the mount's.
What that must not break, each a test:

* one copy: after 64 MiB written write-only through the mount, the mount's
  own pages of the file are not in the page cache (mincore(2) through a
  descriptor opened before the write; the regression test: before the
  change every page was);
* a reader that has cached part of the file sees the writer's later
  overwrite of that part (the kernel drops its pages over a direct write);
* a reader reads back, during the save, what has been written so far, and
  stat shows the size written so far;
* O_APPEND through two write-only descriptors appends in order;
* a file opened O_RDWR (which may be mmapped shared) keeps the page cache:
  a MAP_SHARED write through it is read back, then also after a remount;
* a torch.save of a state is read back identical by torch.load;
* a new file written over a recycled staging file (docs/MOUNT_MODEL.md,
  "Recycled staging files") reads back as its own bytes only, while
  written, after close and after a remount;
* a trainer that keeps every torch.save checkpoint: the third save is
  written over the staging file of the first (rule 5: a durable namesake
  of a step older than a durable one), the second keeps its copy, and
  every checkpoint loads back identical, also after a remount;
* the background threads (uploader, refresher; gc with --gc) run 5 nice steps below
  the daemon's FUSE threads, so sealing earlier steps yields to a save
  (docs/MOUNT_MODEL.md, "Background work yields to the writer").

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import ctypes
import mmap
import os
import random
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, Mount, MountTestCase, read_status, run_torch,  # noqa: E402
                      sha256_file, wait_durable, wait_for)

JOB = "job"
MIB = 1 << 20


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_pages(fd, size):
    """How many pages of the file behind fd are in the page cache: mincore(2)
    over a read-only shared mapping of it (which faults nothing in)."""
    addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap")
    try:
        vec = ctypes.create_string_buffer((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE)
        if _libc.mincore(addr, size, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(b & 1 for b in vec.raw)
    finally:
        _libc.munmap(addr, size)


def write_only_keep(path, data, block=8 * MIB):
    """Writes data into the existing file path through a write-only
    descriptor (no O_TRUNC: that would drop the mount's pages too)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        for off in range(0, len(data), block):
            os.write(fd, data[off:off + block])
    finally:
        os.close(fd)


def write_only_keep_new(path, data):
    """Creates path and writes data into it through a write-only descriptor."""
    open(path, "wb").close()
    write_only_keep(path, data)


class WriteCacheTest(MountTestCase):
    TMP_PREFIX = "ckptfs-wcache-"

    def setUp(self):
        super().setUp()
        self.m = Mount(os.path.join(self.tmp, "mnt"), store=self.store,
                       staging=os.path.join(self.tmp, "staging"), node="wc",
                       binary=os.environ["CKPTFS"])
        self.mounts.append(self.m)
        self.m.start()
        self.step = os.path.join(self.m.path, JOB, "step-000001")
        os.makedirs(self.step)

    def test_one_copy_in_the_page_cache(self):
        # The mount's own pages of the file, seen through a descriptor opened
        # before the write (an open without keep_cache drops them).
        size = 64 * MIB
        path = os.path.join(self.step, "big.bin")
        open(path, "wb").close()
        r = os.open(path, os.O_RDONLY)
        try:
            write_only_keep(path, os.urandom(size))
            # No stat before mincore: a fresh mtime makes the kernel drop
            # the pages (libfuse's default auto_inval_data).
            pages = resident_pages(r, size)
        finally:
            os.close(r)
        print("mount pages cached after a write-only 64 MiB write: %d of %d" %
              (pages, size // mmap.PAGESIZE))
        self.assertLess(pages, size // mmap.PAGESIZE // 10,
                        "a write-only file is cached once (staging), not in the mount too")

    def test_cached_reader_sees_a_later_overwrite(self):
        path = os.path.join(self.step, "model.bin")
        a, b = b"A" * (4 * MIB), b"B" * (4 * MIB)
        w = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(w, a)
            r = os.open(path, os.O_RDONLY)
            try:
                self.assertEqual(os.pread(r, len(a), 0), a)  # now in r's page cache
                os.pwrite(w, b, 0)
                self.assertEqual(os.pread(r, len(b), 0), b, "stale pages after a write")
            finally:
                os.close(r)
        finally:
            os.close(w)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b)

    def test_read_back_and_size_during_a_save(self):
        path = os.path.join(self.step, "model.bin")
        rnd = random.Random(2)
        blocks = [rnd.randbytes(3 * MIB + 17) for _ in range(4)]
        w = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            done = b""
            for blk in blocks:
                os.write(w, blk)
                done += blk
                self.assertEqual(os.stat(path).st_size, len(done))
                with open(path, "rb") as f:
                    self.assertEqual(f.read(), done, "read back during the save")
        finally:
            os.close(w)

    def test_append_through_two_write_only_descriptors(self):
        path = os.path.join(self.step, "log.txt")
        open(path, "wb").close()
        x = os.open(path, os.O_WRONLY | os.O_APPEND)
        y = os.open(path, os.O_WRONLY | os.O_APPEND)
        want = b""
        try:
            for i in range(20):
                line = b"%s line %d\n" % (b"x" if i % 2 else b"y", i)
                os.write(x if i % 2 else y, line)
                want += line
        finally:
            os.close(x)
            os.close(y)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), want)

    def test_shared_mmap_of_a_read_write_file(self):
        path = os.path.join(self.step, "mapped.bin")
        size = 6 * MIB
        data = random.Random(3).randbytes(size)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.ftruncate(fd, size)
            with mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE) as mm:
                mm[:] = data
                mm.flush()
        finally:
            os.close(fd)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)
        open(os.path.join(self.step, ".ckpt-complete"), "w").close()
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=120)
        self.m.unmount()
        self.m.start()
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data, "after a remount")

    def test_torch_save_load_round_trip(self):
        path = os.path.join(self.step, "ckpt.pt")
        ref = os.path.join(self.tmp_dir("ref"), "ckpt.pt")  # the name is in the bytes
        code = ("import sys, torch\n"
                "torch.manual_seed(5)\n"
                "s = {'w%d' % i: torch.randn(1 << 20) for i in range(12)}\n"
                "torch.save(s, sys.argv[1]); torch.save(s, sys.argv[2])\n"
                "t = torch.load(sys.argv[1])\n"
                "assert all(torch.equal(s[k], t[k]) for k in s), 'torch.load differs'\n")
        run_torch(code, path, ref, timeout=300)
        self.assertEqual(sha256_file(path), sha256_file(ref))

    def test_new_file_over_a_recycled_staging_file(self):
        # docs/MOUNT_MODEL.md, "Recycled staging files": a removed file's
        # staging file is kept and the next new file is written over it. What
        # the new file shows is its own bytes only: never the old file's past
        # its size or in a hole, while written, after close, after a remount.
        old = os.path.join(self.step, "old.bin")
        write_only_keep_new(old, b"\xaa" * (8 * MIB))
        os.unlink(old)
        st = read_status(self.m.path)
        self.assertGreaterEqual(st["spare_bytes"], 8 * MIB, "the removed file entered the pool")
        reused = st["spare_reused_bytes"]

        path = os.path.join(self.step, "new.bin")
        head = random.Random(4).randbytes(MIB)
        want = head + bytes(4 * MIB) + head[:1000]
        w = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(w, head)
            self.assertGreaterEqual(read_status(self.m.path)["spare_reused_bytes"],
                                    reused + 8 * MIB, "the new file took the spare")
            self.assertEqual(os.stat(path).st_size, MIB)
            with open(path, "rb") as f:
                self.assertEqual(f.read(), head, "while written: the old bytes past the size")
            os.pwrite(w, head[:1000], 5 * MIB)  # past a hole
            with open(path, "rb") as f:
                self.assertEqual(f.read(), want, "while written: the hole")
        finally:
            os.close(w)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), want, "after close")
        open(os.path.join(self.step, ".ckpt-complete"), "w").close()
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=120)
        self.m.unmount()
        self.m.start()
        with open(path, "rb") as f:
            self.assertEqual(f.read(), want, "after a remount")

    def test_kept_checkpoints_feed_the_next_save(self):
        # docs/MOUNT_MODEL.md, "Recycled staging files", rule 5: nothing is
        # deleted, so the pool stays empty; the third save takes the staging
        # file of the first (its namesake, of a step older than a durable
        # step), which is served from the store afterwards.
        ref = self.tmp_dir("ref")
        code = ("import sys, torch\n"
                "torch.manual_seed(int(sys.argv[3]))\n"
                "s = {'w%d' % i: torch.randn(1 << 20) for i in range(3)}\n"
                "torch.save(s, sys.argv[1]); torch.save(s, sys.argv[2])\n")
        names = ["ckpt-%06d.pt" % step for step in (10, 20, 30)]
        for seed, (step, name) in enumerate(zip((10, 20, 30), names)):
            run_torch(code, os.path.join(self.m.path, JOB, name), os.path.join(ref, name), seed,
                      timeout=300)
            wait_durable(CKPTCTL, self.store, JOB, step, timeout=120)
            wait_for(lambda: any(e["job"] == JOB and e["step"] == step and e["state"] == "durable"
                                 for e in read_status(self.m.path)["steps"]), 60,
                     "step %d durable in the mount's status" % step)
            took = read_status(self.m.path)["spare_durable_files"]
            self.assertEqual(took, 1 if step == 30 else 0,
                             "step %d: durable namesakes taken" % step)
        for mounted in ("after the saves", "after a remount"):
            for name in names:
                self.assertEqual(sha256_file(os.path.join(self.m.path, JOB, name)),
                                 sha256_file(os.path.join(ref, name)), "%s %s" % (name, mounted))
            self.m.unmount()
            self.m.start()

    def test_background_threads_run_nicer(self):
        def nice_of(tid):
            with open("/proc/%d/task/%s/stat" % (self.m.pid, tid)) as f:
                return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19: nice

        main = nice_of(self.m.pid)
        names = {}
        for tid in os.listdir("/proc/%d/task" % self.m.pid):
            with open("/proc/%d/task/%s/comm" % (self.m.pid, tid)) as f:
                names[f.read().strip()] = nice_of(tid)
        for name in ("ckpt-uploader", "ckpt-refresher"):  # gc: only with --gc
            self.assertIn(name, names, "threads: %s" % sorted(names))
            self.assertEqual(names[name], min(19, main + 5), name)


if __name__ == "__main__":
    unittest.main(verbosity=2)
