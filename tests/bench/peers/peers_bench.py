"""peers_bench.py - the peer benchmark's runs against one S3 server (run.sh
starts the servers and the counting proxy, then calls this once per server).

  peers_bench.py --server NAME --bucket B --direct URL --proxy URL
      --proxy-stats FILE --server-pids PID,... --ckptfs PATH --ckptctl PATH
      --aws PATH --work DIR --out RESULTS.jsonl
      --plan SCENARIO:SIZE_MIB:REPS[:SAVES] [--plan ...] [--tools a,b,...]
      [--saves N] [--every K] [--durable-timeout S] [--vfs-write-back DUR]

Per plan entry: the scenario's state is built once (untimed, workloads.py)
and warmed up with one untimed save; then every repetition runs every tool
once, the order rotated by one per repetition. One run of one tool:

  save phase    mount (fresh cache/staging, a fresh prefix in the bucket);
                SAVES times (the plan entry's, else --saves): perturb
                (untimed), os.sync() (untimed), then
                timed: save [+ upload where the trainer waits: aws-cp] =
                the stall; then polled every 0.2 s until the store itself
                has the checkpoint (tools.py durable) = time to durable,
                from the save's start; the next save starts after that.
                Unmount (drains), then the proxy's counts (PUT/GET/HEAD/...
                per checkpoint) and the bytes listed under the prefix.
  resume phase  a new node: fresh mount and cache, list the job directory,
                load the newest step (torch.load of every file; dcp: DCP's
                load_state_dict) = time to resume
                (from before the mount command); then, untimed, the bytes
                read through the mount are checked (SHA-256) against the
                same save replayed into /dev/shm. A mismatch is an error.

The credentials come from the environment (AWS_ACCESS_KEY_ID, ...). Every
run appends one JSON line to --out; a run that fails is recorded with its
error and the exit status is 1 at the end. Requests by the checks go to the
server directly (--direct), not through the proxy, so they are not counted.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import s3check  # noqa: E402
import tools  # noqa: E402
import workloads  # noqa: E402

METHODS = ("PUT", "POST", "GET", "HEAD", "DELETE")


class Ctx:
    """What every tool of one server run needs."""

    def __init__(self, a):
        self.bucket, self.direct_endpoint, self.proxy_endpoint = a.bucket, a.direct, a.proxy
        self.ckptfs, self.ckptctl, self.aws = a.ckptfs, a.ckptctl, a.aws
        self.vfs_write_back = a.vfs_write_back
        self.store = s3check.Store(a.direct, a.bucket)
        # Only this server's key pair: a CA bundle (rclone 1.60 refuses any
        # with plain HTTP), a profile or a session token from the caller's
        # shell would change what the tools do.
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_DEFAULT_PROFILE",
                                 "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "RCLONE_CONFIG")}


def counts_after(path, t):
    """The proxy's counters from a dump written after time t (run.sh has it
    dump every 0.05 s), so every request finished by t is in them."""
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            if os.stat(path).st_mtime > t:
                with open(path) as f:
                    return json.load(f)
        except (OSError, ValueError):
            pass
        time.sleep(0.01)
    raise RuntimeError("the counting proxy wrote no stats after %.1f (is it running?)" % t)


def count_diff(a, b):
    d = {m: b.get("method_" + m, 0) - a.get("method_" + m, 0) for m in METHODS}
    d["requests"] = b["requests"] - a["requests"]
    d["bytes_up"] = b["bytes_up"] - a["bytes_up"]
    d["bytes_down"] = b["bytes_down"] - a["bytes_down"]
    return d


def server_cpu(pids):
    total = 0.0
    for pid in pids:
        try:
            total += tools.proc_stats(pid)["cpu_s"]
        except OSError:
            pass
    return total


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def newest_files(job):
    """The files of the newest step in a job directory (ckpt-N.pt, or the
    files of step-N/ but its empty marker .ckpt-complete), relative to it."""
    best, best_n = None, -1
    for name in os.listdir(job):
        m = re.fullmatch(r"(?:ckpt|step)-(\d+)(\.pt)?", name)
        if m and int(m.group(1)) > best_n:
            best, best_n = name, int(m.group(1))
    if best is None:
        raise RuntimeError("no checkpoint in %s: %s" % (job, os.listdir(job)))
    if os.path.isdir(os.path.join(job, best)):
        return best_n, sorted(best + "/" + f for f in os.listdir(os.path.join(job, best))
                              if f != ".ckpt-complete")
    return best_n, [best]


def reference_hashes(scenario, step, shm):
    """The newest save replayed into /dev/shm under the same names (torch.save
    of the same state under the same name writes the same bytes)."""
    ref = os.path.join(shm, "ref")
    os.makedirs(ref)
    try:
        scenario.save(ref, step)
        return {f: sha256(os.path.join(ref, f)) for f in scenario.data_files(step)}
    finally:
        shutil.rmtree(ref)


def wait_durable(tool, step, sizes, t0, timeout):
    while True:
        if tool.durable(step, sizes):
            return time.time() - t0
        if time.time() - t0 > timeout:
            raise RuntimeError("%s: step %d not in the store after %d s" % (tool.name, step, timeout))
        time.sleep(0.2)


QUIET_SINCE = [0.0]  # when the previous run's last request had ended


class Phases:
    """Wall seconds of a run's untimed parts, by name (rec["phase_s"]): what
    the harness itself costs, for sizing the plan (run.sh estimate_s)."""

    def __init__(self):
        self.s, self.t = {}, time.time()

    def mark(self, name):
        now = time.time()
        self.s[name] = self.s.get(name, 0.0) + now - self.t
        self.t = now


def one_run(a, ctx, scenario, size_mib, saves, rep, tool_name, shm):
    prefix = "peers-%s-%d-r%d-%s-%d" % (scenario.name, size_mib, rep, tool_name, os.getpid())
    work = os.path.join(a.work, prefix)
    tool = tools.TOOLS[tool_name](ctx, prefix, work)
    rec = {"server": a.server, "scenario": scenario.name, "size_mib": size_mib, "rep": rep,
           "saves": saves,
           "tool": tool_name, "stall_s": [], "durable_s": [], "ckpt_bytes": 0}
    t_run = time.time()
    ph = Phases()
    pids = [int(p) for p in a.server_pids.split(",") if p]
    try:
        # The local disk sends nothing to the proxy: no waits for its dumps.
        # Else a dump after the previous run's end (usually there already:
        # the cleanup outlasts the proxy's 0.05 s period).
        c0 = counts_after(a.proxy_stats, QUIET_SINCE[0] or time.time())
        s0 = server_cpu(pids)
        ph.mark("counts")
        job = tool.save_begin()
        ph.mark("mount")
        for i in range(1, saves + 1):
            step = i * a.every
            scenario.perturb()
            os.sync()
            ph.mark("perturb")
            t0 = time.time()
            scenario.save(job, step)
            tool.after_save(scenario.files(step))
            rec["stall_s"].append(time.time() - t0)
            sizes = {f: os.stat(os.path.join(job, f)).st_size for f in scenario.files(step)}
            rec["ckpt_bytes"] = sum(sizes.values())
            if tool_name != "local":
                rec["durable_s"].append(wait_durable(tool, step, sizes, t0, a.durable_timeout))
            ph.mark("timed")
        rec["daemon_save"] = tool.save_end()
        ph.mark("unmount")
        c1 = c0 if tool_name == "local" else counts_after(a.proxy_stats, time.time())
        ph.mark("counts")
        rec["server_cpu_save_s"] = server_cpu(pids) - s0
        rec["save_requests"] = count_diff(c0, c1)
        if tool_name == "local":
            rec["stored_bytes"] = sum(os.path.getsize(os.path.join(r, f))
                                      for r, _, fs in os.walk(job) for f in fs)
        else:
            rec["stored_bytes"] = sum(ctx.store.list(prefix + "/").values())
        ph.mark("list")
        want = reference_hashes(scenario, saves * a.every, shm)
        ph.mark("reference")
        # A new node's disk is not writing back what the saving node and
        # the server wrote: here they share one disk, and the resume of a
        # tool that finished saving sooner met gigabytes still being
        # written back (docs/WARMUP.md, "Where a cold resume spends its
        # time"). As before each save, every tool starts clean.
        os.sync()
        ph.mark("sync")

        s0 = server_cpu(pids)
        t0 = time.time()
        job = tool.resume_begin()
        step, files = newest_files(job)
        scenario.load(job, files)
        t1 = time.time()
        rec["resume_s"] = t1 - t0
        ph.mark("timed")
        c2 = c1 if tool_name == "local" else counts_after(a.proxy_stats, t1)
        rec["resume_requests"] = count_diff(c1, c2)
        rec["server_cpu_resume_s"] = server_cpu(pids) - s0
        ph.mark("counts")
        got = {f: sha256(os.path.join(job, f)) for f in files}
        ph.mark("verify")
        rec["daemon_resume"] = tool.resume_end()
        ph.mark("unmount")
        if step != saves * a.every or got != want:
            raise RuntimeError("resume of step %d: files not byte-identical to the save "
                               "(%s vs %s)" % (step, sorted(got), sorted(want)))
        rec["verified"] = True
    except Exception as e:  # recorded, the run goes on; exit 1 at the end
        rec["error"] = "%s: %s" % (type(e).__name__, e)
        print("peers_bench: %s %s %s rep %d FAILED: %s" % (a.server, scenario.name, tool_name,
                                                        rep, rec["error"]), file=sys.stderr)
        tools.stop_all()
    finally:
        try:
            ctx.store.delete_prefix(prefix + "/")
        except Exception as e:
            print("peers_bench: cleaning %s: %s" % (prefix, e), file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
    ph.mark("cleanup")
    QUIET_SINCE[0] = time.time()  # every mount of this run is gone: its requests ended
    rec["phase_s"] = {k: round(v, 3) for k, v in ph.s.items()}
    rec["run_wall_s"] = time.time() - t_run  # the whole run, for sizing the plan
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for opt in ("server", "bucket", "direct", "proxy", "proxy-stats", "server-pids", "ckptfs",
                "ckptctl", "aws", "work", "out"):
        ap.add_argument("--" + opt, required=True)
    ap.add_argument("--plan", action="append", required=True)
    ap.add_argument("--tools", default=",".join(tools.TOOLS))
    ap.add_argument("--saves", type=int, default=3)
    ap.add_argument("--every", type=int, default=10)
    ap.add_argument("--durable-timeout", type=float, default=600)
    ap.add_argument("--vfs-write-back", default="",
                    help="rclone's --vfs-write-back (its default, 5s, if empty)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ctx = Ctx(a)
    names = a.tools.split(",")
    for n in names:
        if n not in tools.TOOLS:
            sys.exit("peers_bench: unknown tool %s (known: %s)" % (n, ", ".join(tools.TOOLS)))
    shm = os.path.join("/dev/shm", "ckpt-peers.%d" % os.getpid())
    os.makedirs(shm)
    try:
        with open(a.out, "a") as out:
            for entry in a.plan:
                sname, size_mib, reps, saves = (entry + ":%d" % a.saves).split(":")[:4]
                size_mib, reps, saves = int(size_mib), int(reps), int(saves)
                t = time.time()
                scenario = workloads.SCENARIOS[sname](size_mib << 20)
                try:
                    run_plan(a, ctx, scenario, size_mib, reps, saves, names, shm, out, t)
                finally:
                    scenario.close()
                del scenario
    finally:
        tools.stop_all()
        shutil.rmtree(shm, ignore_errors=True)
    sys.exit(1 if RESULTS["failed"] else 0)


RESULTS = {"failed": 0}  # runs that failed, over every plan entry


def run_plan(a, ctx, scenario, size_mib, reps, saves, names, shm, out, t):
    """The repetitions of one plan entry, every tool once per repetition."""
    warm = os.path.join(shm, "warm")
    os.makedirs(warm)
    scenario.save(warm, 0)  # warm-up: first saves are slower (page faults)
    saved = sum(os.path.getsize(os.path.join(warm, f)) for f in scenario.files(0))
    shutil.rmtree(warm)
    print("== %s: %s %d MiB (%.1f MiB saved, %+.1f%%; built in %.0f s), %d reps of %d saves: %s"
          % (a.server, scenario.name, size_mib, saved / 2**20,
             100 * (saved / (size_mib << 20) - 1), time.time() - t, reps, saves, " ".join(names)),
          file=sys.stderr, flush=True)
    for rep in range(1, reps + 1):
        k = (rep - 1) % len(names)
        for pos, name in enumerate(names[k:] + names[:k]):
            rec = one_run(a, ctx, scenario, size_mib, saves, rep, name, shm)
            rec["order"] = pos
            RESULTS["failed"] += "error" in rec
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print("   rep %d %-13s stall %s durable %s resume %s (run %.0f s)" % (
                rep, name, fmt(rec["stall_s"]), fmt(rec["durable_s"]),
                fmt([rec.get("resume_s", float("nan"))]), rec["run_wall_s"]),
                file=sys.stderr, flush=True)


def fmt(xs):
    return "/".join("%.2f" % x for x in xs) or "-"


if __name__ == "__main__":
    main()
