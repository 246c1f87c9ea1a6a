#!/usr/bin/env python3
"""bench_replicas.py - the peer tier against a slow store: how much sooner a
checkpoint is replicated than durable, and what replication costs
(docs/BENCHMARKS.md, "Peers: replicated before durable").

    bench_replicas.py --build DIR [--size-mib 1024] [--reps 3] [--rate-mbps 100]
                      [--out DIR] [--workdir /var/tmp] [--store-dir DIR] [--smoke]

One run starts s3rver (tests/s3/s3rver.sh) behind the counting proxy
(tests/s3/faultproxy.py) capped at --rate-mbps MB/s per direction: the
store's link. Peers talk over loopback with no cap: node b keeps replicas on
127.0.0.2, a plain TCP sink on 127.0.0.2 takes the reference copy. The
checkpoint is a torch.save of a transformer's state_dict and its AdamW state
after a few real optimizer steps on dense gradients, sized to --size-mib
(built once, untimed). Every repetition, each phase with its own job (no
dedup between phases) and a fresh writer mount:

  copy      the file sent over TCP to the sink, which writes and fsyncs it
  on        a writer replicating to b: close -> replicated (status
            peers.parts_replicated), close -> durable (`ckptctl ls`:
            restorable "durable"); its daemon's CPU seconds and VmHWM; and
            where replicated's time goes: the last growth of what b holds
            (b's status) and the replica record's PUT (the proxy's
            --request-log)
  off       the same without peers: close -> durable, CPU, VmHWM
  resume    a writer replicating to b with its pack PUTs held (test hook
            CKPT_FAULT=put_hold): once replicated, a new node c (empty
            staging, --peer-secret-file) mounts and reads the step (sha256)
            from the peer; then the hold is lifted, the step becomes
            durable, and a new node d without the secret reads it through
            the capped link

Each finished phase's objects are removed from s3rver's directory, so the
store stays one phase big (--store-dir /dev/shm: in RAM, off the node's
disk, as a remote store's writes are). Ratios (medians over the
repetitions): replicated vs the plain copy, vs durable; the resume from the
peer vs from the store; durable with replication on vs off; CPU and peak
RSS on vs off. Writes OUT/replicas.json
and OUT/replicas.md. --smoke: 8 MiB, 1 repetition; fails only when a phase
does not complete or read bytes differ from those written, never on a
timing. Every wait is bounded; every process is stopped by PID; mounts are
unmounted in a finally; only 127.0.0.0/8 addresses.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "integration"))
from mountlib import Mount, read_status, sha256_file, wait_for  # noqa: E402

MIB = 1 << 20
PEER_ADDR = "127.0.0.2"
CLK_TCK = os.sysconf("SC_CLK_TCK")
WAIT_S = 900  # bound of every wait for a state (1 GiB at 10 MB/s is ~110 s)

SINK = r"""
import os, socket, sys
srv = socket.socket()
srv.bind((sys.argv[1], 0))
srv.listen(1)
print(srv.getsockname()[1], flush=True)
while True:
    c, _ = srv.accept()
    n = int.from_bytes(c.recv(8, socket.MSG_WAITALL), "big")
    with open(sys.argv[2], "wb") as f:
        left = n
        while left:
            b = c.recv(min(left, 1 << 20))
            if not b:
                break
            f.write(b)
            left -= len(b)
        f.flush()
        os.fsync(f.fileno())
    c.sendall(b"k" if left == 0 else b"e")
    c.close()
"""


def log(msg):
    sys.stderr.write("replicas: %s\n" % msg)
    sys.stderr.flush()


def make_checkpoint(path, size):
    """torch.save of a transformer (encoder layers, a final projection
    sizing it) and AdamW after 3 real steps on dense gradients: weights
    and both moments, 12 bytes per parameter, ~size bytes."""
    import torch
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    n = size // 12
    d = next((w for w in (1024, 512, 256) if n >= 4 * (12 * w * w + 13 * w)), 128)
    layers = max(1, int(0.8 * n) // (12 * d * d + 13 * d))
    rest = max(d, n - layers * (12 * d * d + 13 * d) - 2 * d)
    model = torch.nn.Sequential(
        *[torch.nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, batch_first=True)
          for _ in range(layers)],
        torch.nn.LayerNorm(d), torch.nn.Linear(d, max(1, rest // (d + 1))))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(3):
        x = torch.randn(2, 16, d)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    sq = [s["exp_avg_sq"] for s in opt.state.values()]
    assert all(bool((t != 0).any()) for t in sq), "an all-zero AdamW moment"
    torch.save({"step": 3, "model": model.state_dict(), "optim": opt.state_dict()}, path)


def proc_stats(pid):
    """(CPU seconds utime+stime, VmHWM KiB) of a live process."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                rss = int(line.split()[1])
    return cpu, rss


class Bench:
    def __init__(self, args):
        self.a = args
        self.ckptfs = os.path.join(args.build, "fs", "ckptfs")
        self.ckptctl = os.path.join(args.build, "tools", "ckptctl")
        self.work = tempfile.mkdtemp(prefix="ckpt-replicas.", dir=args.workdir)
        self.procs = []    # Popen objects started here, stopped by PID
        self.mounts = []   # live Mount objects
        self.s3dir = tempfile.mkdtemp(prefix="ckpt-replicas-s3.", dir=args.store_dir or self.work)
        self.s3_started = False
        self.secret = os.path.join(self.work, "secret")
        fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, os.urandom(48))
        os.close(fd)
        self.hold = os.path.join(self.work, "hold")
        self.store = "s3://ckpt-test/bench"
        self.n_mount = 0

    # ---------------------------------------------------------- processes
    def start_servers(self):
        port = subprocess.run(["bash", os.path.join(SRC, "tests/s3/s3rver.sh"), "start",
                               self.s3dir, "--owner", str(os.getpid())], check=True,
                              capture_output=True, text=True, timeout=120).stdout.split()[-1]
        self.s3_started = True
        self.direct = "http://127.0.0.1:%s" % port
        os.environ.update(AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        os.environ.pop("CKPT_STORE", None)
        os.environ.pop("CKPT_JOB", None)
        pf = os.path.join(self.work, "proxy.port")
        self.proxy_stats = os.path.join(self.work, "proxy.stats")
        self.request_log = os.path.join(self.work, "requests.log")
        self.procs.append(subprocess.Popen(
            [sys.executable, os.path.join(SRC, "tests/s3/faultproxy.py"), "--target-port", port,
             "--port-file", pf, "--stats-file", self.proxy_stats, "--stats-interval", "0.2",
             "--rate-mbps", str(self.a.rate_mbps), "--owner-pid", str(os.getpid()),
             "--request-log", self.request_log],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.work, "proxy.log"), "w")))
        wait_for(lambda: os.path.exists(pf) and open(pf).read().strip(), 30, "the proxy's port")
        self.proxied = "http://127.0.0.1:%s" % open(pf).read().strip()
        sink = subprocess.Popen([sys.executable, "-c", SINK, PEER_ADDR,
                                 os.path.join(self.work, "sink.out")],
                                stdout=subprocess.PIPE, text=True)
        self.procs.append(sink)
        self.sink_port = int(sink.stdout.readline())
        # Node b keeps replicas for the writers (its store link is its own).
        b = self.mount("b", self.direct, ["--peer-listen", PEER_ADDR + ":0",
                                          "--peer-secret-file", self.secret,
                                          "--peer-cache-cap", "%d" % (16 << 30)])
        m = wait_for(lambda: re.search(r"keeping replicas for peers on \S+ \(port (\d+)\)",
                                       b.log_text()), 30, "the peer's port")
        self.peer = "%s:%s" % (PEER_ADDR, m.group(1))
        self.b = b

    def mount(self, node, endpoint, extra, env=None, job=None):
        """A node's mount; it warms up only `job` (none for b): a new node
        resuming its job, never the other phases' steps over the link."""
        self.n_mount += 1
        extra = ["--prefetch", job or "none"] + extra
        base = os.path.join(self.work, "%s.%d" % (node, self.n_mount))
        m = Mount(base + ".mnt", store=self.store, staging=base + ".staging", node=node,
                  binary=self.ckptfs, extra_args=["--s3-endpoint", endpoint] + extra,
                  env=env, timeout=60)
        self.mounts.append(m)
        m.start()
        return m

    def unmount(self, m):
        m.unmount(timeout=WAIT_S)
        self.mounts.remove(m)

    def cleanup(self):
        for m in reversed(self.mounts):
            m.stop(30)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if self.s3_started:
            subprocess.run(["bash", os.path.join(SRC, "tests/s3/s3rver.sh"), "stop", self.s3dir],
                           capture_output=True, timeout=60)

    # ------------------------------------------------------------- states
    def durable(self, job, step):
        env = dict(os.environ, CKPT_S3_ENDPOINT=self.direct)
        p = subprocess.run([self.ckptctl, "--store", self.store, "--job", job, "--json", "ls"],
                           capture_output=True, text=True, timeout=60, env=env)
        if p.returncode != 0:
            return False
        return any(r.get("step") == step and r.get("restorable") == "durable"
                   for r in json.loads(p.stdout or "[]"))

    def wait_durable(self, job, step):
        wait_for(lambda: self.durable(job, step), WAIT_S, "step %d of %s durable" % (step, job),
                 interval=0.05)
        return time.monotonic()

    def cache_bytes(self):
        return read_status(self.b.path)["peers"]["peer_cache_bytes"]

    def replicated(self, m):
        return read_status(m.path)["peers"]["parts_replicated"] >= 1

    def save(self, m, job, step):
        """The checkpoint's bytes into the mount; returns the time of the close."""
        os.makedirs(os.path.join(m.path, job), exist_ok=True)
        shutil.copyfile(self.data, os.path.join(m.path, job, "ckpt-%06d.pt" % step))
        return time.monotonic()

    def resume(self, node, extra, job, step):
        """A new node (empty staging) mounts, waits for the step and reads it
        whole (sha256, checked); returns the seconds from its mount's start."""
        t0 = time.monotonic()
        m = self.mount(node, self.proxied, extra, job=job)
        try:
            path = os.path.join(m.path, job, "ckpt-%06d.pt" % step)
            wait_for(lambda: os.path.exists(path), 120, "%s in node %s's mount" % (path, node))
            digest = sha256_file(path)
            t = time.monotonic() - t0
        finally:
            self.unmount(m)
        assert digest == self.digest, "node %s read other bytes" % node
        return t

    def proxy_down(self):
        try:
            with open(self.proxy_stats) as f:
                return json.load(f).get("bytes_down", 0)
        except (OSError, ValueError):
            return 0

    def drop_job(self, job):
        """Removes a finished phase's objects from s3rver's directory (its
        files are the objects): a run's store stays one phase big, which
        lets it live in RAM (--store-dir /dev/shm)."""
        for dirpath, dirs, _ in os.walk(self.s3dir):
            if os.path.basename(dirpath) == "jobs" and job in dirs:
                shutil.rmtree(os.path.join(dirpath, job), ignore_errors=True)
                dirs.remove(job)

    def record_put(self, job, t_close):
        """(start, end) of the replica record's PUT at the store's door
        (the proxy's request log, CLOCK_MONOTONIC), from the close: where
        close -> replicated goes when it is late."""
        with open(self.request_log) as f:
            for line in f:
                t0, t1, method, target = line.split()[:4]
                if method == "PUT" and "/jobs/%s/" % job in target and "/replicas/" in target:
                    return float(t0) - t_close, float(t1) - t_close
        return None, None

    # ------------------------------------------------------------- phases
    def phase_copy(self):
        size = os.path.getsize(self.data)
        t0 = time.monotonic()
        with socket.create_connection((PEER_ADDR, self.sink_port), timeout=WAIT_S) as s, \
                open(self.data, "rb") as f:
            s.sendall(size.to_bytes(8, "big"))
            s.sendfile(f)
            ack = s.recv(1)
        t = time.monotonic() - t0
        assert ack == b"k", "the sink did not take every byte"
        assert sha256_file(os.path.join(self.work, "sink.out")) == self.digest, "sink differs"
        return {"copy_s": t}

    def phase_writer(self, job, step, peers):
        extra = ["--peers", self.peer, "--peer-secret-file", self.secret] if peers else []
        m = self.mount("a", self.proxied, extra, job=job)
        try:
            t_close = self.save(m, job, step)
            r = {}
            if peers:
                held = []  # (time, bytes node b holds for peers), until replicated

                def replicated():
                    held.append((time.monotonic(), self.cache_bytes()))
                    return self.replicated(m)
                wait_for(replicated, WAIT_S, "step %d replicated" % step, interval=0.02)
                r["replicated_s"] = time.monotonic() - t_close
                # The last growth of what the peer holds (it may evict
                # durable replicas of earlier phases meanwhile: not monotonic).
                grew = [t for (_, n0), (t, n) in zip(held, held[1:]) if n > n0]
                r["peer_has_packs_s"] = (grew[-1] if grew else held[0][0]) - t_close
                r["record_put_start_s"], r["record_put_end_s"] = self.record_put(job, t_close)
            r["durable_s"] = self.wait_durable(job, step) - t_close
            r["cpu_s"], r["rss_kib"] = proc_stats(m.pid)
        finally:
            self.unmount(m)
        return r

    def phase_resume(self, job, step):
        open(self.hold, "w").close()
        w = self.mount("a", self.proxied, ["--peers", self.peer, "--peer-secret-file",
                                           self.secret],
                       env={"CKPT_FAULT": "put_hold=" + self.hold}, job=job)
        r = {}
        try:
            t_close = self.save(w, job, step)
            wait_for(lambda: self.replicated(w), WAIT_S, "step %d replicated" % step,
                     interval=0.02)
            r["held_replicated_s"] = time.monotonic() - t_close
            assert not self.durable(job, step), ("durable while its packs were held"
                                               " (a build without -DCKPT_TEST_HOOKS=ON?)")
            down0 = self.proxy_down()
            r["peer_resume_s"] = self.resume("c", ["--peer-secret-file", self.secret], job, step)
            r["peer_resume_store_bytes"] = self.proxy_down() - down0
            os.unlink(self.hold)
            self.wait_durable(job, step)
        finally:
            if os.path.exists(self.hold):
                os.unlink(self.hold)
            self.unmount(w)
        r["store_resume_s"] = self.resume("d", [], job, step)
        return r

    def run(self):
        a = self.a
        self.data = os.path.join(self.work, "ckpt.pt")
        log("building the checkpoint (%d MiB)" % a.size_mib)
        make_checkpoint(self.data, a.size_mib * MIB)
        self.digest = sha256_file(self.data)
        self.start_servers()
        runs = []
        for rep in range(a.reps):
            r = {"rep": rep}
            log("repetition %d/%d: copy" % (rep + 1, a.reps))
            r.update(self.phase_copy())
            # Alternate on/off so neither always runs first.
            order = ["on", "off"] if rep % 2 == 0 else ["off", "on"]
            for ph in order:
                log("repetition %d/%d: %s" % (rep + 1, a.reps, ph))
                got = self.phase_writer("r%d%s" % (rep, ph), 100 + rep, ph == "on")
                self.drop_job("r%d%s" % (rep, ph))
                r.update({"%s_%s" % (k, ph): v for k, v in got.items()})
            log("repetition %d/%d: resume" % (rep + 1, a.reps))
            r.update(self.phase_resume("r%dresume" % rep, 200 + rep))
            self.drop_job("r%dresume" % rep)
            runs.append(r)
            log("repetition %d: %s" % (rep + 1, json.dumps(r, sort_keys=True)))
        return runs


def summarize(runs):
    def med(key):
        return statistics.median(r[key] for r in runs)
    s = {k: med(k) for k in runs[0] if k != "rep" and all(r.get(k) is not None for r in runs)}
    s["ratio_copy_over_replicated"] = s["copy_s"] / s["replicated_s_on"]
    s["ratio_durable_over_replicated"] = s["durable_s_on"] / s["replicated_s_on"]
    s["ratio_store_over_peer_resume"] = s["store_resume_s"] / s["peer_resume_s"]
    s["ratio_durable_on_over_off"] = s["durable_s_on"] / s["durable_s_off"]
    s["cpu_extra_s"] = s["cpu_s_on"] - s["cpu_s_off"]
    s["rss_ratio_on_over_off"] = s["rss_kib_on"] / s["rss_kib_off"]
    return s


def table(args, runs, s):
    def rng(key, fmt="%.2f"):
        vals = [r.get(key) for r in runs]
        if None in vals:
            return "n/a"
        return (fmt % statistics.median(vals)) + (
            " (%s-%s)" % (fmt % min(vals), fmt % max(vals)) if len(vals) > 1 else "")
    rows = [
        ("close -> replicated (s)", rng("replicated_s_on"), ""),
        ("  of which: the replica record's PUT at the store, from the close (s)",
         "%s - %s" % (rng("record_put_start_s_on"), rng("record_put_end_s_on")), ""),
        ("  of which: the peer holds every pack, from the close (s)",
         rng("peer_has_packs_s_on"), ""),
        ("plain TCP copy to the peer, write + fsync (s)", rng("copy_s"), ""),
        ("close -> replicated, pack PUTs held (s)", rng("held_replicated_s"), ""),
        ("replicated vs the copy (copy / replicated)",
         "%.2f" % s["ratio_copy_over_replicated"], ">= 0.8"),
        ("close -> durable, replication on (s)", rng("durable_s_on"), ""),
        ("durable / replicated", "%.1f" % s["ratio_durable_over_replicated"],
         ">= 5 (1 GiB)"),
        ("resume on a new node from the peer, mount -> sha256 (s)", rng("peer_resume_s"), ""),
        ("resume on a new node from the store (s)", rng("store_resume_s"), ""),
        ("store / peer resume", "%.1f" % s["ratio_store_over_peer_resume"], ">= 3"),
        ("close -> durable, replication off (s)", rng("durable_s_off"), ""),
        ("durable on / off", "%.3f" % s["ratio_durable_on_over_off"], "<= 1.05"),
        ("writer CPU, on (s)", rng("cpu_s_on"), ""),
        ("writer CPU, off (s)", rng("cpu_s_off"), ""),
        ("writer CPU extra with replication (s)", "%.2f" % s["cpu_extra_s"], ""),
        ("writer peak RSS on / off (MiB)", "%.0f / %.0f" % (s["rss_kib_on"] / 1024,
                                                            s["rss_kib_off"] / 1024), ""),
    ]
    out = ["| %s MiB, store link %g MB/s, %d rep(s): median (range) | value | goal |"
           % (args.size_mib, args.rate_mbps, len(runs)), "|---|---|---|"]
    out += ["| %s | %s | %s |" % r for r in rows]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rate-mbps", type=float, default=100.0)
    ap.add_argument("--out")
    ap.add_argument("--workdir", default="/var/tmp")
    ap.add_argument("--store-dir", help="where s3rver keeps its objects (default: in --workdir)")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.size_mib, args.reps = 8, 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    b = Bench(args)
    ok = False
    try:
        runs = b.run()
        s = summarize(runs)
        out = args.out or os.path.join(b.work, "out")
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "replicas.json"), "w") as f:
            json.dump({"size_mib": args.size_mib, "reps": args.reps,
                       "rate_mbps": args.rate_mbps, "load_average": os.getloadavg(),
                       "runs": runs, "summary": s}, f, indent=1, sort_keys=True)
        md = table(args, runs, s)
        with open(os.path.join(out, "replicas.md"), "w") as f:
            f.write(md)
        print(md)
        log("every phase completed, every byte verified; results in %s" % out)
        ok = True
    finally:
        b.cleanup()
        if ok:  # without --out the results were printed, and go with it
            shutil.rmtree(b.work, ignore_errors=True)
            shutil.rmtree(b.s3dir, ignore_errors=True)
        else:
            log("failed; logs kept in %s" % b.work)


if __name__ == "__main__":
    main()
