"""Harness for tests that really mount: start a FUSE daemon, wait until its
mount is live, stop it cleanly or kill it hard, and always clean up.

Used by the ckptfs mount tests (and self-tested against libfuse's own
passthrough_ll example by test_mountlib.py). Rules it keeps for every test:

* every wait is bounded (a timeout, then a clear MountError with the daemon's
  log printed);
* processes are stopped by PID only, never by name;
* a mount is never left behind: __exit__ unmounts even when the test body
  raised, and falls back to SIGKILL + `fusermount3 -u -z`; SIGTERM (ctest's
  timeout, Ctrl-C) is turned into an exception so that path runs too.

Typical use:

    from mountlib import Mount, wait_durable, run_torch
    with Mount(mnt, store="file://" + store_dir, staging=staging) as m:
        os.mkdir(os.path.join(m.path, "job"))
        run_torch("import torch,sys; torch.save({'x': torch.ones(3)}, sys.argv[1])",
                  os.path.join(m.path, "job", "ckpt-000001.pt"))
        wait_durable(ckptctl, "file://" + store_dir, "job", 1, timeout=60)
        m.kill9()                 # preempted node; the mount is gone
        m.start()                 # same mountpoint, store, staging: a restart

The daemon command line is built by an argv factory, `argv(mountpoint) ->
list`; the default one runs ckptfs (binary from the `binary` argument or
$CKPTFS) in the foreground. Pass `argv=` to run any other FUSE daemon.
"""
import hashlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

TORCH_PYTHON = "/usr/bin/python3"  # where Debian installs python3-torch
OPENBLAS_DIR = "/usr/lib/x86_64-linux-gnu/openblas-pthread"
PASSTHROUGH_LL_SRC = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"
SKIP = 77  # ctest SKIP_RETURN_CODE used by the mount tests
CKPTFS = os.environ.get("CKPTFS")    # the binaries under test, as ctest names them
CKPTCTL = os.environ.get("CKPTCTL")

_live_mounts = set()  # Mount objects with a daemon running (for SIGTERM/atexit)

# What ASan, LSan and UBSan print when they find an error (the sanitizer
# build, tools/test.sh). A daemon that logged one fails its test even if it
# exited 0 (a UBSan report the build let recover, a leak found at exit).
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:")


class MountError(RuntimeError):
    """The daemon did not mount, did not unmount, or died; the message holds
    the tail of its log."""


# --------------------------------------------------------------------- mounts

def _unescape_mountinfo(field):
    # /proc/self/mountinfo escapes space, tab, newline and backslash as \ooo.
    out, i = [], 0
    while i < len(field):
        octal = field[i + 1:i + 4]
        if field[i] == "\\" and len(octal) == 3 and octal.isdigit():
            out.append(chr(int(octal, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mountpoints():
    """{mountpoint: fstype} of this process's mount namespace (the last
    mount on a path wins, as it is the visible one)."""
    out = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            out[_unescape_mountinfo(fields[4])] = right.split()[0] if right else ""
    return out


def is_mounted(path, fstype_prefix="fuse"):
    """True when `path` is a mountpoint whose type starts with fstype_prefix
    ("fuse" matches fuse and fuse.NAME; "" matches any type)."""
    t = mountpoints().get(os.path.realpath(path))
    return t is not None and t.startswith(fstype_prefix)


def fusermount_unmount(path, lazy=False, timeout=30):
    """`fusermount3 -u [-z] path`, bounded. Returns (ok, stderr text)."""
    argv = ["fusermount3", "-u"] + (["-z"] if lazy else []) + [path]
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, "fusermount3 timed out after %ss" % timeout
    return p.returncode == 0, p.stderr.strip()


def fuse_usable():
    """None if this machine can mount FUSE as this user, else why not."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (apt-get install fuse3)"
    return None


def pid_alive(pid):
    """True while `pid` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def ckptfs_argv(binary=None, store=None, staging=None, node=None, extra=()):
    """An argv factory for ckptfs: returns f(mountpoint) -> argv, running
    `ckptfs MOUNTPOINT --store URL --staging DIR --node NAME -f EXTRA...`
    (options left out when None). binary defaults to $CKPTFS."""
    binary = binary or os.environ.get("CKPTFS")
    if not binary:
        raise MountError("ckptfs binary unknown: pass binary= or set CKPTFS")

    def argv(mountpoint):
        a = [binary, mountpoint]
        if store is not None:
            a += ["--store", store]
        if staging is not None:
            a += ["--staging", staging]
        if node is not None:
            a += ["--node", node]
        return a + ["-f"] + list(extra)
    return argv


def passthrough_ll_argv(binary, source, extra=()):
    """An argv factory for libfuse's passthrough_ll example mirroring
    `source` (built with build_passthrough_ll)."""
    return lambda mountpoint: [binary, "-f", "-o", "source=" + os.path.abspath(source),
                               *extra, mountpoint]


def build_passthrough_ll(dest_dir, src=PASSTHROUGH_LL_SRC, timeout=120):
    """Compile libfuse's passthrough_ll example into dest_dir (from the
    libfuse3-dev docs; never committed here) and return the binary's path."""
    out = os.path.join(dest_dir, "passthrough_ll")
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
        return out
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], check=True,
                           capture_output=True, text=True, timeout=30).stdout.split()
    os.makedirs(dest_dir, exist_ok=True)
    tmp = out + ".tmp%d" % os.getpid()
    subprocess.run(["gcc", "-O2", "-Wall", "-o", tmp, src, *flags], check=True, timeout=timeout)
    os.replace(tmp, out)
    return out


class Mount:
    """One FUSE daemon process and its mount, as a context manager.

    Mount(mountpoint, store=URL, staging=DIR, node="test", binary=None,
          extra_args=(), argv=None, log=None, timeout=20, env=None)

    * mountpoint: directory to mount on (created if missing).
    * store/staging/node/binary/extra_args: build the default ckptfs argv
      (see ckptfs_argv); ignored when argv= is given.
    * argv: factory f(mountpoint) -> list, to run another daemon.
    * log: file the daemon's stdout+stderr are appended to (default
      MOUNTPOINT.log next to the mountpoint); printed on every failure.
    * timeout: seconds to wait for the mount to appear / to go away.
    * env: extra environment variables for the daemon.

    Attributes: path (absolute mountpoint), proc (subprocess.Popen or None),
    pid, log_path, returncode (of the last daemon that exited).
    start() may be called again after unmount() or kill9(): a restart on the
    same mountpoint (and, for ckptfs, the same store and staging).
    """

    def __init__(self, mountpoint, store=None, staging=None, node="test", binary=None,
                 extra_args=(), argv=None, log=None, timeout=20, env=None):
        self.path = os.path.realpath(mountpoint)
        self._argv = argv or ckptfs_argv(binary, store, staging, node, extra_args)
        self.log_path = log or self.path.rstrip("/") + ".log"
        self.timeout = timeout
        self.env = env
        self.proc = None
        self.returncode = None
        self.sanitizer_report = None  # first sanitizer line a daemon logged
        self._sanitizer_printed = False
        self._log = None
        self._log_start = 0

    # -- lifecycle

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self):
        """Start the daemon and return once the mount is live (listed in
        /proc/self/mountinfo and answering stat). Raises MountError (log
        printed, daemon killed) if the process exits first or `timeout`
        passes."""
        if self.proc is not None:
            raise MountError("%s: already running (pid %d)" % (self.path, self.proc.pid))
        if is_mounted(self.path, ""):
            raise MountError("%s: something is already mounted there" % self.path)
        os.makedirs(self.path, exist_ok=True)
        argv = self._argv(self.path)
        self._log = open(self.log_path, "ab")
        self._log_start = self._log.tell()
        self._log.write(("\n=== %s start: %s\n" % (time.strftime("%H:%M:%S"),
                                                    " ".join(argv))).encode())
        self._log.flush()
        env = dict(os.environ, **(self.env or {}))
        _install_signal_cleanup()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True)
        _live_mounts.add(self)
        deadline = time.monotonic() + self.timeout
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self._reaped(rc)
                self._fail("daemon exited with status %d before mounting" % rc)
            if is_mounted(self.path):
                break
            if time.monotonic() > deadline:
                self._cleanup_hard()
                self._fail("not mounted after %ss" % self.timeout)
            time.sleep(0.02)
        if not _stat_within(self.path, max(1.0, deadline - time.monotonic())):
            self._cleanup_hard()
            self._fail("mounted but stat() of the root does not answer")
        return self

    def unmount(self, timeout=None):
        """Clean unmount: `fusermount3 -u` (retried while busy), then wait for
        the daemon to exit. Returns its exit status. If the unmount or the
        exit does not happen within `timeout`, SIGKILLs the daemon, lazily
        unmounts, and raises MountError."""
        timeout = self.timeout if timeout is None else timeout
        if self.proc is None:
            return self.returncode
        deadline = time.monotonic() + timeout
        err = ""
        while is_mounted(self.path):
            ok, err = fusermount_unmount(self.path, timeout=max(1, deadline - time.monotonic()))
            if ok or not is_mounted(self.path):
                break
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._cleanup_hard()
                self._fail("fusermount3 -u failed: %s" % err)
            time.sleep(0.1)
        try:
            rc = self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self._cleanup_hard()
            self._fail("daemon did not exit within %ss of the unmount" % timeout)
        self._reaped(rc)
        self.check_sanitizer()
        return rc

    def kill9(self):
        """Simulate a crash / a preempted node: SIGKILL the daemon by PID, reap
        it, then detach the dead mount (`fusermount3 -u -z`). Files still
        open on the mount are broken, as after a real crash: I/O and even
        close() on them fail with ENOTCONN."""
        if self.proc is None:
            raise MountError("%s: not running" % self.path)
        self._cleanup_hard()
        if is_mounted(self.path):
            self._fail("mount still present after SIGKILL and lazy unmount")
        self.check_sanitizer()

    def terminate(self, sig=signal.SIGTERM, timeout=None):
        """What systemd and Kubernetes do: send sig (SIGTERM) to the daemon by
        PID and wait for it to exit on its own (it unmounts itself). Returns
        its exit status. If it has not exited within `timeout`, SIGKILLs it,
        lazily unmounts, and raises MountError."""
        timeout = self.timeout if timeout is None else timeout
        if self.proc is None:
            raise MountError("%s: not running" % self.path)
        os.kill(self.proc.pid, sig)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._cleanup_hard()
            self._fail("daemon did not exit within %ss of signal %d" % (timeout, sig))
        self._reaped(rc)
        if is_mounted(self.path, ""):
            fusermount_unmount(self.path, lazy=True, timeout=10)
            self._fail("the daemon exited but left its mount behind")
        self.check_sanitizer()
        return rc

    def stop(self, timeout=None):
        """Best-effort cleanup that never raises: clean unmount (within
        `timeout`), else SIGKILL + lazy unmount."""
        if self.proc is None:
            if is_mounted(self.path):  # a mount left by a daemon that died on its own
                fusermount_unmount(self.path, lazy=True, timeout=10)
            return
        try:
            self.unmount(timeout)
        except Exception as e:  # noqa: BLE001 - report and fall back
            sys.stderr.write("mountlib: %s\n" % e)
            self._cleanup_hard()

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.proc is not None:
            self.print_log("test failed while mounted (%s)" % exc_type.__name__)
            # The failed body may have left files open (mount busy): do not
            # wait long for a clean unmount.
            self.stop(min(5, self.timeout))
        else:
            self.stop()
            self.check_sanitizer()
        return False

    # -- logs

    def log_text(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def assert_fault_fired(self, timeout=10):
        """Waits until the daemon's fault wrapper said that every item of its
        $CKPT_FAULT fired ("st_backend_fault: fired: put_delay_ms=300"), else
        raises AssertionError: a fault that never fired (a daemon built
        without -DCKPT_TEST_HOOKS=ON ignores CKPT_FAULT, docs/BACKENDS.md)
        tested nothing, so the test must not pass. Call it while self.env
        still holds the fault."""
        spec = (self.env or {}).get("CKPT_FAULT", "")
        items = [i for i in spec.split(",") if i]
        if not items:
            raise AssertionError("%s: no CKPT_FAULT in this mount's env" % self.path)
        deadline = time.monotonic() + timeout
        while True:
            text = self.log_text()
            missing = [i for i in items if "st_backend_fault: fired: %s " % i not in text]
            if not missing:
                return
            if time.monotonic() > deadline:
                self.print_log("fault never fired")
                hint = (" (the daemon says it IGNORES CKPT_FAULT: rebuild with "
                        "-DCKPT_TEST_HOOKS=ON)" if "CKPT_FAULT is set but IGNORED" in text else "")
                raise AssertionError("%s: CKPT_FAULT %s never fired%s" % (
                    self.path, ",".join(missing), hint))
            time.sleep(0.1)

    def check_sanitizer(self):
        """Raises AssertionError (log printed) if a daemon of this mount
        logged a sanitizer error; every later call raises again, so stop()
        (which never raises) cannot hide it from __exit__ or tearDown."""
        if self.sanitizer_report is not None:
            if not self._sanitizer_printed:
                self._sanitizer_printed = True
                self.print_log("sanitizer error")
            raise AssertionError("%s: the daemon logged a sanitizer error: %s (log: %s)" % (
                self.path, self.sanitizer_report, self.log_path))

    def print_log(self, why="", tail=200):
        lines = self.log_text().splitlines()[-tail:]
        sys.stderr.write("---- %s log (%s)%s ----\n%s\n---- end of log ----\n" % (
            self.path, self.log_path, ": " + why if why else "", "\n".join(lines)))
        sys.stderr.flush()

    # -- internals

    def _fail(self, what):
        self.print_log(what)
        raise MountError("%s: %s (log: %s)" % (self.path, what, self.log_path))

    def _reaped(self, rc):
        self.returncode = rc
        self.proc = None
        _live_mounts.discard(self)
        if self._log:
            self._log.write(("=== %s exit status %s\n" % (time.strftime("%H:%M:%S"), rc)).encode())
            self._log.close()
            self._log = None
        if self.sanitizer_report is None:
            self.sanitizer_report = self._sanitizer_line()

    def _sanitizer_line(self):
        """The first sanitizer line the last daemon logged, or None."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self._log_start)
                text = f.read().decode(errors="replace")
        except OSError:
            return None
        for line in text.splitlines():
            if any(mark in line for mark in SANITIZER_MARKS):
                return line.strip()
        return None

    def _cleanup_hard(self):
        """SIGKILL by PID, reap, lazy-unmount. Never raises."""
        if self.proc is not None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                rc = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # D state in the kernel; give up on it
                rc = None
            self._reaped(rc)
        if is_mounted(self.path, ""):
            fusermount_unmount(self.path, lazy=True, timeout=10)


def _stat_within(path, seconds):
    """stat(path) in a helper thread; False if it does not return in time
    (a hung daemon would block the caller forever)."""
    done = threading.Event()

    def probe():
        try:
            os.stat(path)
            done.set()
        except OSError:
            pass
    threading.Thread(target=probe, daemon=True).start()
    return done.wait(seconds)


_handlers_installed = False


def _install_signal_cleanup():
    """Turn SIGTERM/SIGHUP into SystemExit so the with-blocks unmount, and
    clean up whatever is still mounted at interpreter exit."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    import atexit
    atexit.register(lambda: [m.stop() for m in list(_live_mounts)])
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)
    for s in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(s) in (signal.SIG_DFL, None):
            signal.signal(s, on_signal)


# ------------------------------------------------------------------ ckptctl

def list_steps(ckptctl, store_url, job, timeout=60, env=None):
    """`ckptctl --store URL --job JOB --json ls` parsed: a list of dicts with
    at least "step". Raises CalledProcessError on failure."""
    p = subprocess.run([ckptctl, "--store", store_url, "--job", job, "--json", "ls"],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, **(env or {})))
    if p.returncode != 0:
        raise subprocess.CalledProcessError(p.returncode, p.args, p.stdout, p.stderr)
    return json.loads(p.stdout or "[]")


def run_ckptctl(ckptctl, store_url, job, *args, check=True, timeout=300):
    """`ckptctl --store URL --job JOB ARGS...` run with its output captured;
    with check, an exit other than 0 raises AssertionError with its stderr."""
    cmd = [ckptctl, "--store", store_url, "--job", job, *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError("%s: exit %d\n%s" % (" ".join(cmd), p.returncode, p.stderr))
    return p


def wait_durable(ckptctl, store_url, job, step, timeout=120, interval=0.2, env=None):
    """Poll `ckptctl --json ls` until `step` is listed (durable); return its
    entry. Failures of ckptctl while polling (job not there yet) are retried.
    Raises TimeoutError with the last answer after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = "(no answer)"
    while True:
        try:
            steps = list_steps(ckptctl, store_url, job,
                               timeout=max(5, deadline - time.monotonic()), env=env)
            for s in steps:
                # Only a consistent step is durable as a whole; a partial one
                # (some nodes' parts) is listed too, with state "partial".
                if s.get("step") == step and s.get("state", "consistent") == "consistent":
                    return s
            last = "steps listed: %s" % [s.get("step") for s in steps]
        except subprocess.CalledProcessError as e:
            last = "ckptctl exit %d: %s" % (e.returncode, (e.stderr or "").strip())
        except (subprocess.TimeoutExpired, ValueError) as e:
            last = "%s: %s" % (type(e).__name__, e)
        if time.monotonic() > deadline:
            raise TimeoutError("step %s of job %s not durable in %s after %ss; %s"
                               % (step, job, store_url, timeout, last))
        time.sleep(interval)


# -------------------------------------------------------------------- torch

def torch_env(extra=None):
    """Environment for Debian's torch: the OpenBLAS (pthread) library first,
    the reference BLAS is an order of magnitude slower."""
    env = dict(os.environ)
    ld = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = OPENBLAS_DIR + (":" + ld if ld else "")
    env.update(extra or {})
    return env


def run_torch(code, *args, timeout=600, check=True, env=None, cwd=None):
    """Run a Python snippet (`-c code`, sys.argv[1:] = args) with Debian's
    torch. Returns CompletedProcess (text stdout/stderr). With check=True a
    non-zero exit raises CalledProcessError after printing stderr."""
    p = subprocess.run([TORCH_PYTHON, "-c", code, *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=torch_env(env), cwd=cwd)
    if check and p.returncode != 0:
        sys.stderr.write("---- torch snippet failed (exit %d) ----\n%s\n" % (p.returncode, p.stderr))
        raise subprocess.CalledProcessError(p.returncode, p.args, p.stdout, p.stderr)
    return p


def run_torch_script(path, *args, timeout=600, check=True, env=None, cwd=None):
    """run_torch for a script file (run as a file, so __file__ is set)."""
    p = subprocess.run([TORCH_PYTHON, path, *map(str, args)], capture_output=True, text=True,
                       timeout=timeout, env=torch_env(env), cwd=cwd)
    if check and p.returncode != 0:
        sys.stderr.write("---- %s failed (exit %d) ----\n%s\n" % (path, p.returncode, p.stderr))
        raise subprocess.CalledProcessError(p.returncode, p.args, p.stdout, p.stderr)
    return p


def tempdir(prefix="ckptfs-mt-"):
    """A fresh temp dir on disk (/var/tmp, not a tmpfs /tmp), for stores,
    staging and mountpoints. The caller removes it (after unmounting)."""
    base = "/var/tmp" if os.path.isdir("/var/tmp") else None
    return tempfile.mkdtemp(prefix=prefix, dir=base)


# ------------------------------------------------------------ status, store

def read_status(mountpoint):
    """MOUNTPOINT/.ckptfs/status parsed (a dict; docs/MOUNT.md lists the fields)."""
    with open(os.path.join(mountpoint, ".ckptfs", "status")) as f:
        return json.load(f)


def wait_for(pred, timeout, what, interval=0.1):
    """Poll pred() until it returns a true value, which is returned. Raises
    TimeoutError naming `what` (and pred's last value) after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError("%s: not within %ss (last: %r)" % (what, timeout, got))
        time.sleep(interval)


def wait_counter(mountpoint, key, passes, timeout=60):
    """Waits until the status counter `key` (docs/MOUNT.md, "Status file":
    quiet_looks, refreshes, upload_failures ...) has grown by `passes` from
    its value now; returns the status then. A test that must see something
    NOT happen waits for the daemon to have looked, not for seconds."""
    start = read_status(mountpoint)[key]

    def grown():
        st = read_status(mountpoint)
        return st if st[key] >= start + passes else None
    return wait_for(grown, timeout, "%s grown by %d from %d" % (key, passes, start))


def file_store_keys(store_url, prefix=""):
    """{key: size} of the objects of a file:// store whose key starts with
    prefix. The file backend keeps each key's directories as NAME@ (a key may
    be both an object and a prefix, as in S3); this undoes that."""
    if not store_url.startswith("file://"):
        raise ValueError("not a file:// store: %s" % store_url)
    root = store_url[len("file://"):]
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        rel = os.path.relpath(dirpath, root)
        parts = [] if rel == "." else [p[:-1] if p.endswith("@") else p for p in rel.split(os.sep)]
        for name in files:
            if name.startswith("."):
                continue  # the backend's temp files
            key = "/".join(parts + [name])
            if not key.startswith(prefix):
                continue
            try:
                out[key] = os.path.getsize(os.path.join(dirpath, name))
            except FileNotFoundError:
                # Deleted between the listing and the stat: the daemon may be
                # deleting this very prefix while a test polls for it to go.
                continue
    return out


def file_store_put(store_url, key, data=b""):
    """Writes the object key of a file:// store as its backend lays it out
    (each directory of the key as NAME@, see file_store_keys): for a test
    that plants an object the daemons must meet. Returns its path."""
    if not store_url.startswith("file://"):
        raise ValueError("not a file:// store: %s" % store_url)
    *dirs, name = key.split("/")
    parent = os.path.join(store_url[len("file://"):], *[d + "@" for d in dirs])
    os.makedirs(parent, exist_ok=True)
    path, tmp = os.path.join(parent, name), os.path.join(parent, "." + name)
    with open(tmp, "wb") as f:  # a dot name: the backend lists no such file
        f.write(data)
    os.replace(tmp, path)
    return path


# -------------------------------------------------------------------- trees

def sha256_file(path):
    """The sha256 hex digest of the file at path, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def tree_map(root, fn, only=None, skip_dirs=()):
    """{relative path: fn(path)} of every file under root, not descending
    into directories named in skip_dirs; `only(relpath)` filters."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip_dirs]
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if only is None or only(rel):
                out[rel] = fn(p)
    return out


def tree_digest(root, only=None):
    """{relative path: sha256} of every file under root, minus a mount's
    .ckptfs control directory; `only(relpath)` filters."""
    return tree_map(root, sha256_file, only, skip_dirs=(".ckptfs",))


# ---------------------------------------------------------------- test case

SECOND_USER = "ckpttest_u"  # the real second local user of the multi-user tests


def ensure_second_user():
    """(uid, gid) of SECOND_USER, created (no home, /bin/sh) if missing:
    CI starts from a clean machine, as root."""
    try:
        pw = pwd.getpwnam(SECOND_USER)
    except KeyError:
        subprocess.run(["useradd", "-M", "-s", "/bin/sh", SECOND_USER], check=True, timeout=30)
        pw = pwd.getpwnam(SECOND_USER)
    return pw.pw_uid, pw.pw_gid


def require_binaries(test, *names):
    """Fails `test` (a TestCase) unless each of the environment variables
    in names (e.g. "CKPTFS") names an executable: a missing binary fails
    loudly, never skips."""
    for name in names:
        path = os.environ.get(name)
        test.assertTrue(path and os.access(path, os.X_OK), "%s must name the binary" % name)


class MountTestCase(unittest.TestCase):
    """A fresh temp dir and store per test; every mount in self.mounts is
    stopped, then the temp dir removed, in tearDown, even when the test
    failed. Subclasses set TMP_PREFIX, and STORE_FROM_ENV to run against
    $CKPT_TEST_STORE_URL (an s3:// prefix, a fresh key prefix per test) when
    it is set; the store is file://TMP/store otherwise."""

    TMP_PREFIX = "ckptfs-mt-"
    STORE_FROM_ENV = False

    def setUp(self):
        require_binaries(self, "CKPTFS", "CKPTCTL")
        self.tmp = tempdir(self.TMP_PREFIX)
        url = os.environ.get("CKPT_TEST_STORE_URL") if self.STORE_FROM_ENV else None
        self.store = url or "file://" + os.path.join(self.tmp, "store")
        if self.store.startswith("s3://"):
            self.store = self.store.rstrip("/") + "/" + os.path.basename(self.tmp)
        self.mounts = []

    def tearDown(self):
        for m in self.mounts:
            m.stop()
        try:
            for m in self.mounts:
                m.check_sanitizer()  # before the logs go with the temp dir
        finally:
            # CKPT_KEEP_TMP=1 keeps the test's directory (daemon logs,
            # staging, store) for a post-mortem; its path is printed.
            if os.environ.get("CKPT_KEEP_TMP"):
                print("kept %s" % self.tmp, file=sys.stderr)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)

    def start_mount(self, m, job):
        """Starts Mount m, stopped in tearDown, with the directory of job made
        in it; returns m."""
        self.mounts.append(m)
        m.start()
        os.makedirs(os.path.join(m.path, job), exist_ok=True)
        return m

    def tmp_dir(self, name):
        """Creates the directory TMP/name; returns its path."""
        path = os.path.join(self.tmp, name)
        os.mkdir(path)
        return path
