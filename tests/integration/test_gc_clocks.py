"""GC beside a writer whose clock disagrees with the GC host's (docs/GC.md,
"Clocks"): every age is the store's, so hours of skew change nothing.

One ckptfs daemon writes into a file:// store; `ckptctl gc` runs as another
host would. Debian's `faketime` sets one of them three hours off the other:

* test_gc_host_ahead: `ckptctl gc` runs 3 h ahead of the writer;
* test_writer_behind: the daemon runs 3 h behind `ckptctl gc`.

The timeline is the one that lost data when the writer compared the stamp
in a pending marker (the GC host's clock) with its own clock:

1. steps 1 and 2 are durable; `gc --keep-last 1` deletes step 1 and marks
   its pack pending;
2. the test waits until the store dates the marker older than the grace
   (the state GC deletes on; it reads the file's mtime, the file store's
   clock);
3. the writer saves step 3 with step 1's bytes: the same chunks, stored
   again into a pack of the same name, then the writer's last look at the
   marker. The daemon holds its manifest PUT (`put_hold_key=.manifest`) so
   that the next GC run surely scans before the publish lands;
4. the test waits for either state: the writer inside the hold (it judged
   the marker young: the old behaviour), or its status naming the refusal
   ("marked for GC ... by the store's clock");
5. `gc` sweeps: the marker is older than grace and nothing references the
   pack yet, so the pack and its marker go;
6. the hold is released; step 3 must end durable *and restorable*:
   `ckptctl verify` exits 0 and its bytes are step 1's. Before the fix the
   writer published step 3 over the deleted pack: listed consistent,
   `verify` exit 4 ("pack ... is missing").

test_gc_hosts_apart: two GC runs, the marking one 3 h behind, the next one
on time: the pack must outlive the grace (before, the second run deleted it
at once: the marker looked 3 h old).

Environment: CKPTFS and CKPTCTL name the binaries; faketime must be
installed (tools/bootstrap.sh installs it).
"""
import os
import shutil
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mountlib import (CKPTCTL, Mount, MountTestCase, file_store_keys,  # noqa: E402
                      read_status, run_ckptctl, wait_durable, wait_for)

JOB = "job"
GRACE = 2  # seconds: far above a publish on a local file store (milliseconds)
SKEW = "3h"
# A host's wall clock off by hours does not move its monotonic clock. In
# the sanitizer build, libfaketime is preloaded ahead of ASan's runtime,
# which ASan refuses unless told that the order is wanted.
FAKETIME_ENV = {
    "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    "ASAN_OPTIONS": ":".join(filter(None, [os.environ.get("ASAN_OPTIONS"),
                                            "verify_asan_link_order=0"])),
}


def faketime(offset):
    """The argv prefix that runs a command with its wall clock `offset` off."""
    exe = shutil.which("faketime")
    if not exe:
        raise unittest.SkipTest("faketime is not installed (tools/bootstrap.sh installs it)")
    return [exe, "-f", offset]


def ckptfs_argv(store, staging, node, prefix, extra):
    def argv(mountpoint):
        return prefix + [os.environ["CKPTFS"], mountpoint, "--store", store, "--staging",
                         staging, "--node", node, "-f", *extra]
    return argv


class GcClocks(MountTestCase):
    TMP_PREFIX = "ckptfs-gcclock-"

    def gc(self, prefix, *args):
        env = dict(os.environ, **FAKETIME_ENV)
        cmd = prefix + [CKPTCTL, "--store", self.store, "--job", JOB, "gc", "--grace",
                        str(GRACE), *args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
        self.assertIn(p.returncode, (0, 7), "%s: exit %d\n%s" % (cmd, p.returncode, p.stderr))
        return p

    def store_path(self, key):
        """The file that holds key in the file store (its layout: every
        directory component carries an '@')."""
        parts = key.split("/")
        return os.path.join(self.store[len("file://"):], *[c + "@" for c in parts[:-1]],
                            parts[-1])

    def pending_markers(self):
        return [k for k in file_store_keys(self.store, "jobs/%s/gc/pending/" % JOB)]

    def packs(self):
        return [k for k in file_store_keys(self.store, "jobs/%s/packs/" % JOB)]

    def wait_store_age(self, key, seconds):
        """Waits until the store dates key at least `seconds` old: its
        mtime, against a file the test creates now in the same store."""
        probe = os.path.join(self.store[len("file://"):], ".age-probe")

        def old_enough():
            with open(probe, "w"):
                pass
            now = os.stat(probe).st_mtime
            os.unlink(probe)
            return now - os.stat(self.store_path(key)).st_mtime >= seconds
        wait_for(old_enough, GRACE * 10 + 30, "%s older than %ss by the store's clock"
                 % (key, seconds))

    def write_step(self, m, step, data):
        path = os.path.join(m.path, JOB, "ckpt-%06d.pt" % step)
        with open(path, "wb") as f:
            f.write(data)

    def run_timeline(self, writer_prefix, gc_prefix):
        hold = os.path.join(self.tmp, "hold")
        staging = self.tmp_dir("staging")
        env = dict(FAKETIME_ENV, CKPT_FAULT="put_hold=%s,put_hold_key=.manifest" % hold)
        m = Mount(os.path.join(self.tmp, "mnt"), env=env,
                  argv=ckptfs_argv(self.store, staging, "w", writer_prefix, []))
        self.start_mount(m, JOB)
        first = os.urandom(3 << 20)
        self.write_step(m, 1, first)
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=60)
        self.write_step(m, 2, os.urandom(1 << 20))
        wait_durable(CKPTCTL, self.store, JOB, 2, timeout=60)

        # 1. step 1 goes; its pack is marked.
        self.gc(gc_prefix, "--keep-last", "1")
        markers = self.pending_markers()
        self.assertTrue(markers, "gc --keep-last 1 marked no pack")
        # 2. the marker is older than the grace by the store's clock.
        for k in markers:
            self.wait_store_age(k, GRACE)

        # 3. step 3 = step 1's bytes: the same pack again, then the last look.
        with open(hold, "w"):
            pass
        self.write_step(m, 3, first)

        # 4. inside the hold (judged young), or refused (judged old).
        def held_or_refused():
            if os.path.exists(hold + ".reached"):
                return "held"
            status = read_status(m.path)
            if "by the store's clock" in str(status):
                return "refused"
            return None
        how = wait_for(held_or_refused, 60, "the writer's last look at the marked pack")

        # 5. the sweep: marker older than grace, pack unreferenced.
        self.gc(gc_prefix)
        # 6. step 3 must end durable and whole.
        os.unlink(hold)
        wait_durable(CKPTCTL, self.store, JOB, 3, timeout=120)
        v = run_ckptctl(CKPTCTL, self.store, JOB, "verify", "--step", "3", check=False)
        self.assertEqual(v.returncode, 0, "step 3 published over a pack GC deleted "
                         "(writer's look: %s)\n%s%s" % (how, v.stdout, v.stderr))
        out = os.path.join(self.tmp, "restored")
        run_ckptctl(CKPTCTL, self.store, JOB, "restore", "--step", "3", "--to", out)
        with open(os.path.join(out, "ckpt-000003.pt"), "rb") as f:
            self.assertEqual(f.read(), first)
        self.assertEqual(how, "refused", "the writer took a marker older than its grace as young")
        # The hold is a test hook: a build without them would not hold, and
        # this timeline would test nothing.
        self.assertNotIn("IGNORED", m.log_text())

    def test_gc_host_ahead(self):
        self.run_timeline([], faketime("+" + SKEW))

    def test_writer_behind(self):
        self.run_timeline(faketime("-" + SKEW), [])

    def test_gc_hosts_apart(self):
        staging = self.tmp_dir("staging")
        m = Mount(os.path.join(self.tmp, "mnt"), store=self.store, staging=staging, node="w")
        self.start_mount(m, JOB)
        self.write_step(m, 1, os.urandom(1 << 20))
        wait_durable(CKPTCTL, self.store, JOB, 1, timeout=60)
        self.write_step(m, 2, os.urandom(1 << 20))
        wait_durable(CKPTCTL, self.store, JOB, 2, timeout=60)
        before = set(self.packs())
        # The marking run's clock is 3 h behind; the next run's is right.
        self.gc(faketime("-" + SKEW), "--keep-last", "1")
        self.assertTrue(self.pending_markers(), "gc --keep-last 1 marked no pack")
        p = self.gc([])
        self.assertEqual(set(self.packs()), before,
                         "a pack went before its grace was over:\n" + p.stderr)
        # Once the store dates the marker older than grace, it goes.
        for k in self.pending_markers():
            self.wait_store_age(k, GRACE)
        self.gc(faketime("+" + SKEW))
        self.assertLess(len(self.packs()), len(before))


if __name__ == "__main__":
    unittest.main(verbosity=2)
