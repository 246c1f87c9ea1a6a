"""Client-side encryption end to end (docs/ENCRYPTION.md), with real FUSE
mounts on file:// stores and the real ckptctl.

* Through the mount: a step whose file holds a unique marker string is
  written with --encryption-key-file; no object of the store holds the
  marker, the store has its `encryption` marker, and a new node with the key
  reads the file back bit-exact, as do `ckptctl restore` and `verify`. The
  same file through a mount without a key stores the marker in plain: the
  control that shows the grep can fail.
* Refusals: a wrong key and no key are exit 3 naming the key id or the
  option; a daemon without the key does not mount the encrypted store; a
  key against a plain store with steps is exit 3; a key file readable by
  others is exit 3.
* Tampering (ckptctl put/restore): a pack swapped for another sealed pack
  under its name, a manifest or part record copied from another step, and
  a truncated pack or manifest are exit 4 naming the object.
* Replay (docs/ENCRYPTION.md, "Replay"): a node publishes a step again
  (revision 2); a mount on another node and ckptctl see revision 2; the
  revision-1 part record put back in the store is refused: ckptctl exit 4
  naming both revisions, and the other node's mount, restarted on its
  staging, logs the refusal and never serves revision 1's bytes; a
  ckptctl with a fresh state cannot tell (the documented limit).

Environment: CKPTFS and CKPTCTL name the binaries.
"""
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, CKPTFS, Mount, MountError, MountTestCase,  # noqa: E402
                      file_store_keys, wait_for)

JOB = "job"
TIMEOUT = 60  # s: eager publication is 2 s of quiet + the upload
MARKER = b"CKPTFS-SECRET-MARKER-7f3a9c"


def key_path(root, key):
    """The file of object key in a file:// store rooted at root (the file
    backend keeps each key's directories as NAME@)."""
    parts = key.split("/")
    return os.path.join(root, *[d + "@" for d in parts[:-1]], parts[-1])


def marked_bytes(n):
    """n bytes a codec cannot shrink, holding MARKER every 4 KiB."""
    out = bytearray(os.urandom(n))
    for at in range(0, n - len(MARKER), 4096):
        out[at:at + len(MARKER)] = MARKER
    return bytes(out)


class EncryptionTest(MountTestCase):
    TMP_PREFIX = "ckptfs-enc-"

    def setUp(self):
        super().setUp()
        self.key = os.path.join(self.tmp, "key")
        self.other_key = os.path.join(self.tmp, "other-key")
        for k in (self.key, self.other_key):
            p = subprocess.run([CKPTCTL, "keygen", k], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)

    def ctl(self, *args, store=None, key=None):
        argv = [CKPTCTL, "--store", store or self.store, "--state-dir",
                os.path.join(self.tmp, "ctl-state")]
        if key:
            argv += ["--encryption-key-file", key]
        return subprocess.run(argv + list(args), capture_output=True, text=True, timeout=120)

    def mount(self, name, store=None, key=None):
        extra = ["--refresh", "0.5"] + (["--encryption-key-file", key] if key else [])
        m = Mount(os.path.join(self.tmp, name), store=store or self.store,
                  staging=os.path.join(self.tmp, name + "-staging"), node=name,
                  binary=CKPTFS, extra_args=extra)
        self.mounts.append(m)
        m.start()
        return m

    def store_dir(self, store=None):
        return (store or self.store)[len("file://"):]

    def objects_holding(self, needle, store=None):
        root = self.store_dir(store)
        hits = []
        for dirpath, _, names in os.walk(root):
            for n in names:
                with open(os.path.join(dirpath, n), "rb") as f:
                    if needle in f.read():
                        hits.append(os.path.relpath(os.path.join(dirpath, n), root))
        return hits

    def consistent(self, step, store=None, key=None):
        p = self.ctl("--job", JOB, "latest", store=store, key=key)
        return p.returncode == 0 and p.stdout.strip() == str(step)

    def write_step(self, m, data):
        step = os.path.join(m.path, JOB, "step-1")
        os.makedirs(step, exist_ok=True)
        with open(os.path.join(step, "model.bin"), "wb") as f:
            f.write(data)
        open(os.path.join(step, ".ckpt-complete"), "wb").close()

    def test_mount_seals_and_a_new_node_reads(self):
        data = marked_bytes(3 << 20)
        a = self.mount("a", key=self.key)
        self.write_step(a, data)
        wait_for(lambda: self.consistent(1, key=self.key), TIMEOUT, "step 1 durable, encrypted")
        a.unmount()

        self.assertEqual(self.objects_holding(MARKER), [])
        with open(os.path.join(self.store_dir(), "encryption"), "rb") as f:
            self.assertEqual(f.read(), b"ckptfs-encryption v1 aes-256-gcm\n")
        keys = file_store_keys(self.store)
        self.assertTrue(any(k.endswith(".pack") for k in keys), keys)

        c = self.mount("c", key=self.key)  # a new node with the key
        path = os.path.join(c.path, JOB, "step-1", "model.bin")
        wait_for(lambda: os.path.exists(path), TIMEOUT, "step 1 visible on node c")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), data)
        c.unmount()

        out = os.path.join(self.tmp, "restored")
        p = self.ctl("--job", JOB, "restore", "--step", "1", "--to", out, key=self.key)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "step-1", "model.bin"), "rb") as f:
            self.assertEqual(f.read(), data)
        p = self.ctl("--job", JOB, "verify", "--step", "1", key=self.key)
        self.assertEqual(p.returncode, 0, p.stderr)

        p = self.ctl("--job", JOB, "restore", "--step", "1", "--to", out + "2",
                     key=self.other_key)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("which the key file does not hold", p.stderr)
        p = self.ctl("--job", JOB, "ls")
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("is encrypted: give --encryption-key-file", p.stderr)

        nokey = Mount(os.path.join(self.tmp, "d"), store=self.store,
                      staging=os.path.join(self.tmp, "d-staging"), node="d", binary=CKPTFS,
                      timeout=20)
        self.mounts.append(nokey)
        with self.assertRaises(MountError):
            nokey.start()
        self.assertIn("is encrypted: give --encryption-key-file", nokey.log_text())

        # The control: the same bytes through a mount without a key are in
        # the store in plain, so the grep above could have failed.
        plain = "file://" + os.path.join(self.tmp, "plain-store")
        b = self.mount("b", store=plain)
        self.write_step(b, data)
        wait_for(lambda: self.consistent(1, store=plain), TIMEOUT, "step 1 durable, plain")
        b.unmount()
        self.assertNotEqual(self.objects_holding(MARKER, store=plain), [])
        self.assertFalse(os.path.exists(os.path.join(self.store_dir(plain), "encryption")))
        p = self.ctl("--job", JOB, "ls", store=plain, key=self.key)
        self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
        self.assertIn("is not encrypted; ckptfs does not mix", p.stderr)

    def put(self, step, src):
        p = self.ctl("--job", JOB, "put", "--step", str(step), src, key=self.key)
        self.assertEqual(p.returncode, 0, p.stderr)

    def restore(self, step, name):
        return self.ctl("--job", JOB, "restore", "--step", str(step), "--to",
                        os.path.join(self.tmp, name), key=self.key)

    def assert_corrupt(self, step, name, what):
        p = self.restore(step, name)
        self.assertEqual(p.returncode, 4, "%s: %s%s" % (what, p.stdout, p.stderr))
        return p.stderr

    def test_ckptctl_refuses_tampering(self):
        src = os.path.join(self.tmp, "src")
        os.makedirs(src)
        with open(os.path.join(src, "model.bin"), "wb") as f:
            f.write(marked_bytes(2 << 20))
        self.put(1, src)
        with open(os.path.join(src, "model.bin"), "wb") as f:
            f.write(marked_bytes(2 << 20))  # new bytes: a pack of its own
        self.put(2, src)
        self.assertEqual(self.objects_holding(MARKER), [])
        root = self.store_dir()
        keys = file_store_keys(self.store)
        packs = sorted(k for k in keys if k.endswith(".pack"))
        self.assertEqual(len(packs), 2, keys)
        steps = {s: "jobs/%s/steps/%020d/nodes/" % (JOB, s) for s in (1, 2)}
        node = [k for k in keys if k.startswith(steps[1]) and k.endswith(".commit")][0]
        node = node[len(steps[1]):-len(".commit")]
        manifest = {s: key_path(root, steps[s] + node + ".r1.manifest") for s in (1, 2)}
        part = {s: key_path(root, steps[s] + node + ".commit") for s in (1, 2)}
        self.assertEqual(self.restore(1, "ok").returncode, 0)

        def swap(path, with_path, what, step):
            saved = path + ".saved"
            shutil.copyfile(path, saved)
            try:
                shutil.copyfile(with_path, path)
                return self.assert_corrupt(step, what, what)
            finally:
                os.replace(saved, path)

        # A pack swapped for the other sealed pack under its name: the step
        # that reads it (one of the two) fails at its first record.
        p0, p1 = (key_path(root, k) for k in packs)
        shutil.copyfile(p0, p0 + ".saved")
        shutil.copyfile(p1, p0)
        got = [self.restore(s, "swapped %d" % s) for s in (1, 2)]
        os.replace(p0 + ".saved", p0)
        self.assertEqual(sorted(g.returncode for g in got), [0, 4],
                         [g.stderr for g in got])
        self.assertIn("failed authentication", "".join(g.stderr for g in got))
        # A manifest and a part record replayed under another step's name.
        self.assertIn(".manifest", swap(manifest[2], manifest[1], "replayed manifest", 2))
        self.assertIn(".commit", swap(part[2], part[1], "replayed part record", 2))

        # Truncated objects: a pack cut in its chunk area, a manifest by a
        # byte (its tag no longer matches).
        for path, cut, what in ((p0, os.path.getsize(p0) // 2, "truncated pack"),
                                (manifest[1], os.path.getsize(manifest[1]) - 1,
                                 "truncated manifest")):
            saved = path + ".saved"
            shutil.copyfile(path, saved)
            with open(path, "r+b") as f:
                f.truncate(cut)
            p1_ok = self.restore(1, what)
            p2_ok = self.restore(2, what + " 2")
            os.replace(saved, path)
            self.assertIn(4, (p1_ok.returncode, p2_ok.returncode),
                          "%s: %s %s" % (what, p1_ok.stderr, p2_ok.stderr))
            self.assertNotIn(p1_ok.returncode, (1, 2, 5, 6))
        self.assertEqual(self.restore(2, "ok2").returncode, 0)

        # A key file others may read is refused, naming the file.
        os.chmod(self.key, 0o644)
        p = self.restore(1, "mode")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn(self.key, p.stderr)

    def test_rolled_back_part_record_is_refused(self):
        first, second = b"first revision" * 1000, b"second revision" * 1000
        a = self.mount("a", key=self.key)
        self.write_step(a, first)
        wait_for(lambda: self.consistent(1, key=self.key), TIMEOUT, "step 1 durable")
        prefix = "jobs/%s/steps/%020d/nodes/" % (JOB, 1)
        part = key_path(self.store_dir(), prefix + "a.commit")
        with open(part, "rb") as f:
            rev1 = f.read()

        def republished():
            with open(part, "rb") as f:
                return (prefix + "a.r2.manifest" in file_store_keys(self.store, prefix)
                        and f.read() != rev1)

        with open(os.path.join(a.path, JOB, "step-1", "model.bin"), "wb") as f:
            f.write(second)  # rewritten: the step is published again
        wait_for(republished, TIMEOUT, "revision 2 of step 1 published")
        a.unmount()

        c = self.mount("c", key=self.key)  # another node: sees revision 2
        model = os.path.join(c.path, JOB, "step-1", "model.bin")

        def shows_second():
            try:
                with open(model, "rb") as f:
                    return f.read() == second
            except OSError:
                return False

        wait_for(shows_second, TIMEOUT, "revision 2 read on node c")
        c.unmount()
        p = self.ctl("--job", JOB, "ls", key=self.key)  # ckptctl sees it too
        self.assertEqual(p.returncode, 0, p.stderr)

        with open(part + ".rollback", "wb") as f:  # the rollback, atomically
            f.write(rev1)
        os.replace(part + ".rollback", part)

        p = self.restore(1, "rolled-back")
        self.assertEqual(p.returncode, 4, p.stdout + p.stderr)
        self.assertIn(prefix + "a.commit is rolled back: it holds revision 1", p.stderr)
        self.assertIn("seen revision 2", p.stderr)
        p = self.ctl("--job", JOB, "ls", key=self.key)
        self.assertIn("rolled back", p.stdout + p.stderr)

        # Node c restarted on its staging: it refuses the part record (a
        # log line) and never serves revision 1's bytes; what it fetched of
        # revision 2 before stays.
        c2 = Mount(c.path, store=self.store, staging=os.path.join(self.tmp, "c-staging"),
                   node="c", binary=CKPTFS,
                   extra_args=["--refresh", "0.5", "--encryption-key-file", self.key])
        self.mounts.append(c2)
        c2.start()
        wait_for(lambda: "is rolled back" in c2.log_text(), TIMEOUT, "node c refuses it")
        self.assertIn("cannot load step 1 of %s" % JOB, c2.log_text())
        try:
            with open(model, "rb") as f:
                got = f.read()
        except OSError:
            got = None
        self.assertIn(got, (None, second))
        c2.unmount()

        # A node that never saw revision 2 cannot tell (the documented limit).
        p = self.ctl("--state-dir", os.path.join(self.tmp, "fresh-state"), "--job", JOB,
                     "restore", "--step", "1", "--to", os.path.join(self.tmp, "fresh"),
                     key=self.key)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(self.tmp, "fresh", "step-1", "model.bin"), "rb") as f:
            self.assertEqual(f.read(), first)

if __name__ == "__main__":
    unittest.main(verbosity=2)
