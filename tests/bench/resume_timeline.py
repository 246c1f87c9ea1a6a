#!/usr/bin/env python3
"""resume_timeline.py - where a new node's cold resume spends its time
(docs/WARMUP.md, "Where a cold resume spends its time"): a benchmark aid,
it asserts no speed.

    /usr/bin/python3 tests/bench/resume_timeline.py BUILD WORKDIR
        [--scenario NAME] [--mib N] [--saves N] [--reps N] [--s3fs] [--perf]
        [--other-build DIR] [-- CKPTFS_OPTION...]

Starts its own s3rver (tests/s3/s3rver.sh) and the counting proxy
(tests/s3/faultproxy.py --request-log) on 127.0.0.1, saves --saves (default
4) checkpoints of a single-file scenario of the peers benchmark (--scenario:
full, the default, bf16 or finetune) at --mib (default 944) MiB through a
ckptfs mount (node-a; what training changes changes between saves,
tests/bench/peers/workloads.py), and then, --reps times (default 3), mounts
a new node (empty staging; after `sync` and dropping the page cache) and
torch.loads the newest checkpoint, printing: spawn -> mounted -> listed ->
loaded, the CPU seconds of the loader, the daemon, the server and the proxy
over the load, and the new node's requests. --s3fs resumes with s3fs too in
each repetition (the peers benchmark's options, the order alternating),
from a plain copy of the newest checkpoint put next to the store.
--other-build resumes with a second build's ckptfs too in each repetition
(printed as "other"; the order alternating): two builds side by side in
one run, on the same saved store (saved by BUILD). --perf
records ckptfs's
profile (perf record --call-graph dwarf) of the last repetition into
WORKDIR/perf.data. Options after -- go to the resuming ckptfs (e.g.
--prefetch none).

Every process it starts is stopped by PID when it ends, and every mount is
unmounted; each wait is bounded.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "peers"))

BUCKET = "ckpt-test"
PREFIX = "timeline"
PLAIN = "plain/job/newest.pt"  # the --s3fs copy
ENV = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
MOUNT_TIMEOUT, UNMOUNT_TIMEOUT = 60, 300


def usage():
    sys.exit(__doc__.split("\n\n")[1])


def option(opts, name, default):
    return int(opts[opts.index(name) + 1]) if name in opts else default


def mounted(mnt):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == mnt for line in f)


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Run:
    def __init__(self, build, work):
        self.build, self.work = build, work
        self.daemons = []  # (process, mountpoint, unmount argv)
        self.procs = []
        self.s3dir = os.path.join(work, "s3rver")

    def start_servers(self):
        port = subprocess.run(["bash", os.path.join(SRC, "tests/s3/s3rver.sh"), "start", self.s3dir,
                               "--owner", str(os.getpid())], capture_output=True, text=True,
                              check=True, timeout=120).stdout.strip()
        self.server_pid = int(open(os.path.join(self.s3dir, "s3rver.pid")).read())
        self.log = os.path.join(self.work, "requests.log")
        pf = os.path.join(self.work, "proxy.port")
        self.proxy = subprocess.Popen([sys.executable, os.path.join(SRC, "tests/s3/faultproxy.py"),
                                       "--target-port", port, "--port-file", pf,
                                       "--request-log", self.log, "--owner-pid", str(os.getpid())])
        self.procs.append(self.proxy)
        deadline = time.monotonic() + 30
        while not (os.path.exists(pf) and open(pf).read().strip()):
            if time.monotonic() > deadline or self.proxy.poll() is not None:
                raise RuntimeError("the counting proxy did not start")
            time.sleep(0.05)
        self.endpoint = "http://127.0.0.1:" + open(pf).read().strip()

    def mount(self, argv, mnt, log, unmount=("fusermount3", "-u")):
        os.makedirs(mnt, exist_ok=True)
        t0 = time.monotonic()
        d = subprocess.Popen(argv, env=ENV, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.daemons.append((d, mnt, unmount))
        while not mounted(mnt):
            if d.poll() is not None or time.monotonic() - t0 > MOUNT_TIMEOUT:
                raise RuntimeError("%s did not mount; see %s" % (argv[0], log))
            time.sleep(0.005)
        return d, t0

    def ckptfs(self, phase, node, extra, build=None):
        staging = os.path.join(self.work, "staging." + phase)
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        mnt = os.path.join(self.work, "mnt." + phase)
        argv = [os.path.join(build or self.build, "fs/ckptfs"), mnt, "--store",
                "s3://%s/%s" % (BUCKET, PREFIX), "--s3-endpoint", self.endpoint, "--staging",
                staging, "--node", node, "-f"] + extra
        d, t0 = self.mount(argv, mnt, os.path.join(self.work, phase + ".log"))
        return d, t0, os.path.join(mnt, "job")

    def s3fs(self):
        mnt, cache = os.path.join(self.work, "mnt.s3fs"), os.path.join(self.work, "cache.s3fs")
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache)
        pw = os.path.join(self.work, "s3fs.passwd")
        with open(os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write("S3RVER:S3RVER\n")
        opts = ["url=" + self.endpoint, "use_path_request_style", "passwd_file=" + pw,
                "use_cache=" + cache, "multipart_size=64", "parallel_count=8",
                "max_dirty_data=-1", "endpoint=us-east-1", "enable_noobj_cache"]
        argv = ["s3fs", "%s:/%s" % (BUCKET, os.path.dirname(os.path.dirname(PLAIN))), mnt, "-f",
                "-o", ",".join(opts)]
        d, t0 = self.mount(argv, mnt, os.path.join(self.work, "s3fs.log"),
                           ("fusermount", "-u"))
        return d, t0, os.path.join(mnt, "job")

    def unmount(self, d):
        for entry in list(self.daemons):
            if entry[0] is d:
                subprocess.run(list(entry[2]) + [entry[1]], timeout=UNMOUNT_TIMEOUT)
                d.wait(timeout=UNMOUNT_TIMEOUT)
                self.daemons.remove(entry)

    def stop_all(self):
        for d, mnt, _ in self.daemons:
            subprocess.run(["fusermount3", "-u", "-z", mnt], timeout=30)
            d.kill()
            d.wait(timeout=30)
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=30)
        subprocess.run(["bash", os.path.join(SRC, "tests/s3/s3rver.sh"), "stop", self.s3dir],
                       timeout=60)

    def populate(self, name, mib, saves):
        import workloads
        if name not in ("full", "bf16", "finetune"):
            sys.exit("--scenario: full, bf16 or finetune (a single file per step)")
        scenario = workloads.SCENARIOS[name](mib << 20)
        d, _, job = self.ckptfs("save", "node-a", [])
        os.makedirs(job)
        for step in range(1, saves + 1):
            scenario.perturb()
            scenario.save(job, step)
        subprocess.run([os.path.join(self.build, "tools/ckptctl"), "drain",
                        os.path.dirname(job)], check=True, timeout=900, stdout=subprocess.DEVNULL)
        newest = os.path.join(job, "ckpt-%06d.pt" % saves)
        subprocess.run(["aws", "--endpoint-url", self.endpoint, "--only-show-errors", "s3", "cp",
                        newest, "s3://%s/%s" % (BUCKET, PLAIN)], env=ENV, check=True, timeout=900)
        self.unmount(d)

    @staticmethod
    def watch_warmup(mnt, t0, out, stop):
        """Sets out["warm"] to the seconds from spawn until the mount's status
        file shows its warm-up requests ended (warm, partial or failed)."""
        while not stop.is_set():
            try:
                with open(os.path.join(mnt, ".ckptfs", "status")) as f:
                    reqs = json.load(f).get("warmup", {}).get("requests", [])
                if reqs and all(r["state"] in ("warm", "partial", "failed") for r in reqs):
                    out["warm"] = time.monotonic() - t0
                    return
            except (OSError, ValueError):
                pass
            stop.wait(0.01)

    def requests_between(self, t0, t1):
        """Requests the proxy logged as begun between t0 and t1 (its log's
        times are time.monotonic's), and the MB their answers carried."""
        count, size = 0, 0
        with open(self.log) as f:
            for line in f:
                fields = line.split()
                if t0 <= float(fields[0]) <= t1:
                    count, size = count + 1, size + int(fields[5])
        return count, size / 1e6

    def resume(self, tool, extra, perf):
        """tool: "ckptfs", "s3fs", or a build directory (--other-build)."""
        use_s3fs = tool == "s3fs"
        other = None if tool in ("ckptfs", "s3fs") else tool
        import torch
        subprocess.run(["sync"], check=True)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        d, t0, job = self.s3fs() if use_s3fs else self.ckptfs("resume", "node-b", extra, other)
        t_up = time.monotonic()
        rec = None
        if perf:
            rec = subprocess.Popen(["perf", "record", "--call-graph", "dwarf,16384", "-o",
                                    os.path.join(self.work, "perf.data"), "-p", str(d.pid)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        warm, stop = {}, threading.Event()
        watcher = None
        if not use_s3fs:
            watcher = threading.Thread(target=self.watch_warmup,
                                       args=(os.path.dirname(job), t0, warm, stop))
            watcher.start()
        newest = sorted(n for n in os.listdir(job) if n.endswith(".pt"))[-1]
        t_ls = time.monotonic()
        before = (cpu_seconds(d.pid), cpu_seconds(self.server_pid), cpu_seconds(self.proxy.pid),
                  time.process_time())
        torch.load(os.path.join(job, newest), map_location="cpu")
        t_done = time.monotonic()
        after = (cpu_seconds(d.pid), cpu_seconds(self.server_pid), cpu_seconds(self.proxy.pid),
                 time.process_time())
        if watcher:
            watcher.join(timeout=120)
            stop.set()
        if rec:
            rec.send_signal(signal.SIGINT)
            rec.wait(timeout=120)
        cpu = [b - a for a, b in zip(before, after)]
        print("%-6s spawn->mounted %.3f  ->listed %.3f  ->loaded %.3f  total %.3f s | CPU s "
              "during the load: loader %.2f daemon %.2f server %.2f proxy %.2f | requests %d, %.0f MB%s" % (
                  "other" if other else tool, t_up - t0, t_ls - t_up, t_done - t_ls,
                  t_done - t0, cpu[3], cpu[0], cpu[1], cpu[2], *self.requests_between(t0, t_done),
                  " | warm at %.3f s" % warm["warm"] if "warm" in warm else ""),
              flush=True)
        self.unmount(d)


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    opts = args[:args.index("--")] if "--" in args else args
    valued = ("--mib", "--saves", "--reps", "--scenario", "--other-build")
    pos = [a for i, a in enumerate(opts) if not a.startswith("--") and
           (i == 0 or opts[i - 1] not in valued)]
    if len(pos) != 2:
        usage()
    build, work = (os.path.abspath(p) for p in pos)
    os.makedirs(work, exist_ok=True)
    run = Run(build, work)
    try:
        run.start_servers()
        scenario = opts[opts.index("--scenario") + 1] if "--scenario" in opts else "full"
        run.populate(scenario, option(opts, "--mib", 944), option(opts, "--saves", 4))
        reps = option(opts, "--reps", 3)
        tools = ["ckptfs"] + (["s3fs"] if "--s3fs" in opts else [])
        if "--other-build" in opts:
            tools.append(os.path.abspath(opts[opts.index("--other-build") + 1]))
        for r in range(reps):
            for tool in tools if r % 2 == 0 else tools[::-1]:
                run.resume(tool, extra, "--perf" in opts and r == reps - 1 and tool == "ckptfs")
    finally:
        run.stop_all()


if __name__ == "__main__":
    main()
