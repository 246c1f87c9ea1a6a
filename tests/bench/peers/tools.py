"""tools.py - the tools the peer benchmark compares, behind one interface
(peers_bench.py drives them; each run gets a fresh prefix in the bucket and
fresh cache/staging directories, so nothing carries over):

  save_begin()            mount (or prepare); returns the job directory the
                          trainer writes into
  after_save(files)       what the trainer also waits for (aws: the upload)
  durable(step, sizes)    the store's word, asked directly (s3check, or
                          ckptctl latest for ckptfs), not the tool's
  save_end() / resume_end()  unmount; returns the daemon's {rss_kib, cpu_s}
  resume_begin()          a new node: fresh mount/cache; returns the job
                          directory to torch.load from

Every daemon is started by PID in its own session and stopped by that PID
after fusermount -u (a bounded wait, then SIGKILL); stop_all() is the
caller's trap. Credentials reach the tools through the environment or a
mode-600 file in the run's directory, never argv.
"""
import os
import re
import signal
import subprocess
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
MOUNT_TIMEOUT = 30
UNMOUNT_TIMEOUT = 120  # ckptfs drains its upload queue on unmount

_daemons = []  # every daemon started and not yet reaped: (pid, mountpoint)

# ckptfs's mount options beyond the run's own (store, endpoint, staging,
# node): the one place to change how ckptfs runs in every measure.
CKPTFS_OPTIONS = ["-f"]


def is_mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def proc_stats(pid):
    """Peak RSS (KiB, VmHWM) and CPU seconds (user + system, children
    included) of a live process."""
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1])
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = sum(int(x) for x in fields[11:15]) / CLK_TCK
    return {"rss_kib": rss, "cpu_s": cpu}


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


class Daemon:
    """One FUSE daemon in the foreground of its own session."""

    def __init__(self, name, argv, mnt, log, env, unmount=("fusermount3", "-u")):
        os.makedirs(mnt, exist_ok=True)
        self.name, self.mnt, self.log, self.unmount_cmd = name, mnt, log, unmount
        with open(log, "ab") as lf:
            self.proc = subprocess.Popen(argv, stdout=lf, stderr=lf, stdin=subprocess.DEVNULL,
                                         env=env, start_new_session=True)
        _daemons.append(self)
        deadline = time.monotonic() + MOUNT_TIMEOUT
        while not is_mounted(mnt):
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited (%s) before mounting: %s" %
                                   (name, self.proc.returncode, tail(log)))
            if time.monotonic() > deadline:
                raise RuntimeError("%s not mounted after %d s: %s" % (name, MOUNT_TIMEOUT, tail(log)))
            time.sleep(0.05)

    def stop(self):
        """Unmounts, waits for the daemon to exit; returns its stats as they
        were just before the unmount (VmHWM and CPU are gone after exit)."""
        stats = proc_stats(self.proc.pid) if self.proc.poll() is None else {}
        if is_mounted(self.mnt):
            r = subprocess.run(list(self.unmount_cmd) + [self.mnt], timeout=UNMOUNT_TIMEOUT,
                               capture_output=True)
            if r.returncode != 0:
                subprocess.run(["fusermount3", "-u", "-z", self.mnt], timeout=30,
                               capture_output=True)
        try:
            self.proc.wait(timeout=UNMOUNT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
        if self in _daemons:
            _daemons.remove(self)
        return stats


def stop_all():
    """The caller's trap: every daemon still running, by its PID."""
    for d in list(_daemons):
        try:
            if is_mounted(d.mnt):
                subprocess.run(["fusermount3", "-u", "-z", d.mnt], timeout=30, capture_output=True)
            if d.proc.poll() is None:
                d.proc.send_signal(signal.SIGTERM)
                try:
                    d.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    d.proc.kill()
                    d.proc.wait(timeout=10)
        except Exception:
            pass
        _daemons.remove(d)


def tail(path, n=1500):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode("utf-8", "replace")
    except OSError:
        return "(no log)"


def run_timed_child(argv, env, log, out=None):
    """Runs a client (aws) to completion, its stdout to out (else the log);
    returns its {rss_kib, cpu_s}."""
    with open(log, "ab") as lf, open(out or os.devnull, "wb") as of:
        proc = subprocess.Popen(argv, stdout=of if out else lf, stderr=lf,
                                stdin=subprocess.DEVNULL, env=env)
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (argv[0], proc.returncode, tail(log)))
    return {"rss_kib": ru.ru_maxrss, "cpu_s": ru.ru_utime + ru.ru_stime}


def add_stats(a, b):
    return {"rss_kib": max(a.get("rss_kib", 0), b.get("rss_kib", 0)),
            "cpu_s": a.get("cpu_s", 0) + b.get("cpu_s", 0)}


class Tool:
    """Base: a run is (server, prefix, work dir); see the module comment."""
    mounts = True

    def __init__(self, ctx, prefix, work):
        self.ctx, self.prefix, self.work = ctx, prefix, work
        self.env = dict(ctx.env)
        self.daemon = None
        os.makedirs(work, exist_ok=True)

    def log(self, what):
        return os.path.join(self.work, "%s.%s.log" % (self.name, what))

    def after_save(self, files):
        return {}

    def durable(self, step, sizes):
        """Every file of the step in the store with its size (HEAD)."""
        return all(self.ctx.store.size(self.key(f)) == n for f, n in sizes.items())

    def key(self, rel):
        return "%s/%s" % (self.prefix, rel)

    def save_end(self):
        return self.daemon.stop() if self.daemon else {}

    resume_end = save_end


class FileMount(Tool):
    """A tool that mounts the bucket; the job directory is MNT/PREFIX."""

    def save_begin(self):
        return self._mount("save", fresh_dir=True)

    def resume_begin(self):
        return self._mount("resume", fresh_dir=False)

    mounts_prefix = False  # True: the tool mounts bucket/PREFIX itself, the job is MNT

    def _mount(self, phase, fresh_dir):
        mnt = os.path.join(self.work, "mnt." + phase)
        cache = os.path.join(self.work, "cache." + phase)
        os.makedirs(cache)
        self.daemon = Daemon(self.name, self.argv(mnt, cache), mnt, self.log(phase), self.env,
                             self.unmount_cmd)
        if self.mounts_prefix:
            return mnt
        job = os.path.join(mnt, self.prefix)
        if fresh_dir:
            os.makedirs(job)
        return job


class S3fs(FileMount):
    """s3fs-fuse 1.90 with the options its documentation gives for large
    files: bigger multipart parts and more of them in flight, a local cache
    directory (docs/BENCHMARKS.md, "Peers", cites them)."""
    name, unmount_cmd = "s3fs", ("fusermount", "-u")
    extra_opts = []

    def argv(self, mnt, cache):
        pw = os.path.join(self.work, "s3fs.passwd")
        write_private(pw, "%s:%s\n" % (self.env["AWS_ACCESS_KEY_ID"],
                                       self.env["AWS_SECRET_ACCESS_KEY"]))
        opts = ["url=" + self.ctx.proxy_endpoint, "use_path_request_style", "passwd_file=" + pw,
                "use_cache=" + cache, "multipart_size=64", "parallel_count=8",
                "max_dirty_data=-1", "endpoint=us-east-1", "enable_noobj_cache",
                "max_stat_cache_size=100000"] + self.extra_opts
        return ["s3fs", self.ctx.bucket, mnt, "-f", "-o", ",".join(opts)]


class S3fsOnePut(S3fs):
    """s3fs as above with `nomultipart` (`man s3fs`): one PUT per file, as a
    user would set it on a store where completing a multipart upload costs
    (s3rver 3.7.1 rewrites the whole object when one completes)."""
    name = "s3fs-1put"
    extra_opts = ["nomultipart"]


class Rclone(FileMount):
    """rclone 1.60 mount with its VFS cache in mode `writes` or `full`
    (defaults otherwise: a file uploads 5 s after its last close, unless
    the run sets --vfs-write-back: the smoke does, to be short). It mounts
    bucket/PREFIX: s3rver 3.7.1 leaves a prefix out of a delimited listing
    when its keys lie two levels deeper (a/b/c gives no a/), and rclone,
    unlike s3fs, writes no directory objects that would show it."""
    unmount_cmd = ("fusermount", "-u")
    mounts_prefix = True

    def __init__(self, ctx, prefix, work, mode):
        self.mode, self.name = mode, "rclone-" + mode
        super().__init__(ctx, prefix, work)
        conf = os.path.join(work, "rclone.conf")
        write_private(conf, "[store]\ntype = s3\nprovider = Other\nenv_auth = true\n"
                            "region = us-east-1\nendpoint = %s\nforce_path_style = true\n"
                      % ctx.proxy_endpoint)
        self.env["RCLONE_CONFIG"] = conf

    def argv(self, mnt, cache):
        wb = ["--vfs-write-back", self.ctx.vfs_write_back] if self.ctx.vfs_write_back else []
        return ["rclone", "mount", "store:%s/%s" % (self.ctx.bucket, self.prefix), mnt,
                "--vfs-cache-mode", self.mode, "--cache-dir", cache, "--s3-no-check-bucket",
                "--log-level", "NOTICE"] + wb


class Ckptfs(Tool):
    """ckptfs with its defaults and the run's prefix as its store; the job
    directory is MNT/job."""
    name = "ckptfs"
    JOB = "job"
    tuning = {}  # phase -> options beyond the defaults (none: what a new user runs)

    def store_url(self):
        return "s3://%s/%s" % (self.ctx.bucket, self.prefix)

    def save_begin(self):
        return self._mount("save", "node-a", True)

    def resume_begin(self):
        return self._mount("resume", "node-b", False)

    def _mount(self, phase, node, mkjob):
        mnt = os.path.join(self.work, "mnt." + phase)
        staging = os.path.join(self.work, "staging." + phase)
        os.makedirs(staging)
        argv = [self.ctx.ckptfs, mnt, "--store", self.store_url(), "--s3-endpoint",
                self.ctx.proxy_endpoint, "--staging", staging, "--node", node] + CKPTFS_OPTIONS
        argv += self.tuning.get(phase, [])
        self.daemon = Daemon(self.name, argv, mnt, self.log(phase), self.env)
        job = os.path.join(mnt, self.JOB)
        if mkjob:
            os.mkdir(job)
        return job

    def durable(self, step, sizes):
        """ckptctl latest (it reads the store, not the daemon) names the step,
        and the store lists the job's objects."""
        env = dict(self.env, CKPT_S3_ENDPOINT=self.ctx.direct_endpoint)
        r = subprocess.run([self.ctx.ckptctl, "--store", self.store_url(), "--job", self.JOB,
                            "latest", "--json"], env=env, capture_output=True, text=True,
                           timeout=60)
        m = re.search(r'"step":\s*(\d+)', r.stdout)
        if r.returncode != 0 or not m or int(m.group(1)) != step:
            return False
        return bool(self.ctx.store.list(self.prefix + "/"))


class CkptfsNoWarmup(Ckptfs):
    """ckptfs whose resuming node does not warm the newest step up
    (`--prefetch none`): every read is served by the cold path
    (docs/WARMUP.md), as for a step chosen by hand or read out of order."""
    name = "ckptfs-cold"
    tuning = {"resume": ["--prefetch", "none"]}


class AwsCp(Tool):
    """torch.save to a local directory, then `aws s3 cp` (awscli 2, its
    defaults: 8 MiB parts, 10 in flight); the trainer waits for both."""
    name, mounts = "aws-cp", False
    s3_config = ""

    def __init__(self, ctx, prefix, work):
        super().__init__(ctx, prefix, work)
        conf = os.path.join(work, "aws.config")
        write_private(conf, "[default]\nregion = us-east-1\ns3 =\n  addressing_style = path\n"
                      + self.s3_config)
        self.env.update(AWS_CONFIG_FILE=conf, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                        AWS_PAGER="")
        self.stats = {}

    def aws(self, *args, out=None):
        argv = [self.ctx.aws, "--endpoint-url", self.ctx.proxy_endpoint, "s3"] + list(args)
        self.stats = add_stats(self.stats, run_timed_child(argv, self.env, self.log("aws"), out))

    def url(self, rel=""):
        return "s3://%s/%s/%s" % (self.ctx.bucket, self.prefix, rel)

    def save_begin(self):
        self.local = os.path.join(self.work, "local")
        os.makedirs(self.local)
        return self.local

    def after_save(self, files):
        top = sorted({f.split("/")[0] for f in files})
        for t in top:
            p = os.path.join(self.local, t)
            if os.path.isdir(p):
                self.aws("cp", "--recursive", "--only-show-errors", p, self.url(t + "/"))
            else:
                self.aws("cp", "--only-show-errors", p, self.url(t))

    def resume_begin(self):
        """A new node: list the prefix, fetch the newest step."""
        out = os.path.join(self.work, "restore")
        os.makedirs(out)
        listing = os.path.join(self.work, "ls.txt")
        self.aws("ls", self.url(), out=listing)
        with open(listing, errors="replace") as f:
            names = re.findall(r"(?:PRE |\d )((?:ckpt|step)-\d+(?:\.pt|/))\s*$", f.read(), re.M)
        if not names:
            raise RuntimeError("aws s3 ls found no checkpoint under " + self.url())
        newest = max(names, key=lambda n: int(re.search(r"\d+", n).group()))
        if newest.endswith("/"):
            self.aws("cp", "--recursive", "--only-show-errors", self.url(newest),
                     os.path.join(out, newest))
        else:
            self.aws("cp", "--only-show-errors", self.url(newest), os.path.join(out, newest))
        return out

    def save_end(self):
        s, self.stats = self.stats, {}
        return s

    resume_end = save_end


class AwsCpOnePut(AwsCp):
    """aws-cp with `multipart_threshold = 5GB` (awscli's S3 configuration;
    5 GB is S3's limit for one PUT): one PUT per file."""
    name = "aws-cp-1put"
    s3_config = "  multipart_threshold = 5GB\n"


class LocalDisk(Tool):
    """torch.save to the local disk only: the floor (nothing leaves the node)."""
    name, mounts = "local", False

    def save_begin(self):
        self.local = os.path.join(self.work, "local")
        os.makedirs(self.local)
        return self.local

    def durable(self, step, sizes):
        return True  # never in a store: reported as "–"

    def resume_begin(self):
        """The same directory with its pages dropped (a disk read, cold)."""
        for root, _, names in os.walk(self.local):
            for n in names:
                fd = os.open(os.path.join(root, n), os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                os.close(fd)
        return self.local


TOOLS = {
    "ckptfs": Ckptfs,
    "ckptfs-cold": CkptfsNoWarmup,
    "s3fs": S3fs,
    "rclone-writes": lambda c, p, w: Rclone(c, p, w, "writes"),
    "rclone-full": lambda c, p, w: Rclone(c, p, w, "full"),
    "aws-cp": AwsCp,
    "s3fs-1put": S3fsOnePut,
    "aws-cp-1put": AwsCpOnePut,
    "local": LocalDisk,
}
