"""Scale and memory of one ckptfs mount (tests/bench/bench_scale.sh runs it).

    bench_scale.py --build DIR [--smoke] [--points LIST] [--store file|s3]
                   [--workdir DIR] [--reps N] [--rss-cap-mib N] [--json FILE]

A point is KIND:VALUE, where KIND is
  size   one single-file step (ckpt-000100.pt) of VALUE MiB, one writer;
  files  one step directory of VALUE files, --files-total-mib in all (default
         1024), written by 8 ranks (file i by rank i % 8), then .metadata
         as below;
  ranks  a DCP-like step of VALUE ranks, one process per rank writing its
         own __R_0.distcp (--ranks-total-mib in all, default 2048, split
         evenly), each fsynced; then rank 0's .metadata.tmp renamed to
         .metadata, last.
Every point gets a fresh store, staging and mount. Writers write
incompressible data fast: one os.urandom MiB per process, with a unique
(point, file, offset) counter stamped into every 4 KiB of it before each
write, so no chunk repeats (nothing deduplicates) and nothing compresses.
While the point runs, the daemon's VmRSS and VmHWM are read from
/proc/PID/status every 0.5 s. Measured: seconds from the first open to the
last close (staged: every close returned) and to durable (the step listed
consistent by `ckptctl ls`), peak VmRSS while writing and while uploading,
VmHWM at the end.

Check (never a timing): after durable the mount is unmounted and its
staging removed; a new node's mount of the store (empty staging) is read
back, one reader process per rank at once, as ranks resuming would (every
file fetched from the store on first open), and every file's sha256 is
compared with what its writer computed while writing; the new node's peak
VmRSS is measured meanwhile. The disk is shared: where the fetched copy
would leave less than 2 x --disk-margin-mib free, the files are compared
through the writing mount before its unmount (the staged bytes the ingest
read) and `ckptctl verify` reads every chunk and file digest back from the
store instead. Before a point starts, the
disk must have room for its staging and store (2x its size plus the
margin), or the run fails saying so. --rss-cap-mib N also fails a point whose
VmHWM exceeded N MiB, --read-rss-cap-mib N a point whose reading daemon's
peak VmRSS did (the memory bounds, docs/MEMORY.md: facts about the
configuration, not timings).
"""
import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import mountlib  # noqa: E402

MIB = 1 << 20
JOB = "scale"
STEP = 100

# One writer process: writes its files, prints {name: sha256} as JSON.
WRITER = r"""
import hashlib, json, os, struct, sys
root, point_id, spec = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
base = bytearray(os.urandom(1 << 20))
view = memoryview(base)
out = {}
for name, fileno, size in spec:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        off = 0
        while off < size:
            n = min(1 << 20, size - off)
            for j in range(0, n, 4096):
                struct.pack_into("<QQQ", base, j, point_id, fileno, off + j)
            os.write(fd, view[:n])
            h.update(view[:n])
            off += n
        os.fsync(fd)
    finally:
        os.close(fd)
    out[name] = h.hexdigest()
print(json.dumps(out))
"""

# DCP's last act: rank 0 writes .metadata.tmp, fsyncs it, renames it.
MARKER = r"""
import os, sys
meta = os.path.join(sys.argv[1], ".metadata")
with open(meta + ".tmp", "wb") as f:
    f.write(b"bench_scale metadata\n")
    os.fsync(f.fileno())
os.rename(meta + ".tmp", meta)
"""

# One reader process (a rank resuming): reads its files in 1 MiB reads,
# prints {name: sha256} as JSON.
READER = r"""
import hashlib, json, os, sys
root, names = sys.argv[1], json.loads(sys.argv[2])
out = {}
for name in names:
    h = hashlib.sha256()
    with open(os.path.join(root, name), "rb", buffering=0) as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    out[name] = h.hexdigest()
print(json.dumps(out))
"""


def rss_kib(pid):
    """(VmRSS, VmHWM) of pid in KiB, or None once it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            vals = dict(l.split(":", 1) for l in f if l.startswith(("VmRSS", "VmHWM")))
        return int(vals["VmRSS"].split()[0]), int(vals["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


class RssSampler(threading.Thread):
    """Samples the daemon every 0.5 s; peak() of a phase's samples."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.samples, self.phase = pid, [], "write"
        self.stop_ev = threading.Event()
        self.hwm = 0

    def run(self):
        while not self.stop_ev.is_set():
            got = rss_kib(self.pid)
            if got:
                self.samples.append((self.phase, got[0]))
                self.hwm = max(self.hwm, got[1])
            self.stop_ev.wait(0.5)

    def peak_mib(self, phase):
        vals = [r for p, r in self.samples if p == phase]
        return max(vals) / 1024.0 if vals else 0.0

    def finish(self):
        got = rss_kib(self.pid)
        if got:
            self.hwm = max(self.hwm, got[1])
        self.stop_ev.set()
        self.join()
        return self.hwm / 1024.0


def plan(kind, value, args):
    """[(rank, [(name, fileno, size), ...]), ...] and the step's marker, if any."""
    if kind == "size":
        return [(0, [("ckpt-%06d.pt" % STEP, 0, value * MIB)])], None
    d = "step-%06d" % STEP
    if kind == "files":
        ranks, size = 8, args.files_total_mib * MIB // value
        per = [[] for _ in range(ranks)]
        for i in range(value):
            per[i % ranks].append(("%s/shard_%05d.bin" % (d, i), i, size))
        return list(enumerate(per)), d
    if kind == "ranks":
        size = args.ranks_total_mib * MIB // value
        return [(r, [("%s/__%d_0.distcp" % (d, r), r, size)]) for r in range(value)], d
    raise SystemExit("bench_scale: unknown point kind %r" % kind)


def free_mib(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize / MIB


def compare(digests, root):
    """Names of the files under root whose sha256 is not their writer's."""
    return [n for n, h in digests.items() if mountlib.sha256_file(os.path.join(root, n)) != h]


def gather(procs, timeout, what):
    """The JSON objects the processes print, merged; what names them in the
    error when one fails."""
    merged = {}
    for p in procs:
        out, _ = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("a %s failed with status %d" % (what, p.returncode))
        merged.update(json.loads(out))
    return merged


def read_back(args, ckptfs, work, store, writers, digests, env):
    """A new node's resume: a fresh mount of the store (empty staging, node
    "reader"), one process per rank reading its own files at once through
    it (each fetched from the store on first open, chunk and file digests
    verified) and hashing them. Returns the daemon's peak VmRSS meanwhile;
    raises if a file differs from what its writer wrote."""
    m = mountlib.Mount(os.path.join(work, "mnt2"), store=store,
                       staging=os.path.join(work, "staging2"), node="reader",
                       binary=ckptfs, extra_args=args.ckptfs_arg, timeout=60)
    with m:
        root = os.path.join(m.path, JOB)
        mountlib.wait_for(lambda: os.path.isdir(root), 60, "the job listed on a new node")
        sampler = RssSampler(m.pid)
        sampler.start()
        marker = [n for n in digests if n.endswith("/.metadata")]  # rank 0 reads it
        lists = [[n for n, _, _ in spec] + (marker if r == 0 else []) for r, spec in writers]
        procs = [subprocess.Popen([sys.executable, "-c", READER, root, json.dumps(names)],
                                  stdout=subprocess.PIPE, env=env, text=True)
                 for names in lists]
        got = gather(procs, args.timeout, "reader")
        sampler.finish()
    bad = [n for n, h in got.items() if digests[n] != h]
    if bad or len(got) != len(digests):
        raise RuntimeError("%d files read back differ from what was written, first %s"
                           % (len(bad), bad[:1]))
    return sampler.peak_mib("write")


def verify(args, work, store, env):
    """Where the disk has no room for a read-back copy (the caller compared
    the mount's staged copies already: the bytes the ingest read): every
    chunk and every file's digest read back from the store by
    `ckptctl verify`."""
    subprocess.run([args.ckptctl, "--store", store, "--job", JOB, "--state-dir",
                    os.path.join(work, "vstate"), "-q", "verify", "--step", str(STEP)],
                   check=True, stdout=subprocess.DEVNULL, timeout=args.timeout, env=env)


def run_point(args, kind, value, rep, variant):
    point_id = zlib.crc32(("%s:%d:%d" % (kind, value, rep)).encode())
    work = mountlib.tempdir("ckpt-bench-scale-")
    try:
        need = 2 * sum(s for _, sp in plan(kind, value, args)[0] for _, _, s in sp) / MIB
        if free_mib(work) < need + args.disk_margin_mib:
            raise RuntimeError("%s:%d needs %.0f MiB of disk plus a margin of %d MiB; %s has "
                               "%.0f MiB free" % (kind, value, need, args.disk_margin_mib, work,
                                                  free_mib(work)))
        if args.store == "s3":  # bench_scale.sh started the s3rver (CKPT_S3_ENDPOINT)
            store = "s3://ckpt-test/scale-%s-%d-%d" % (kind, value, rep)
        else:
            store = "file://" + os.path.join(work, "store")
        staging, mnt = os.path.join(work, "staging"), os.path.join(work, "mnt")
        env = dict(os.environ)
        writers, marker = plan(kind, value, args)
        world = len(writers)
        m = mountlib.Mount(mnt, store=store, staging=staging, node="bench",
                           binary=variant[1], extra_args=args.ckptfs_arg, timeout=60)
        with m:
            root = os.path.join(m.path, JOB)
            os.mkdir(root)
            sampler = RssSampler(m.pid)
            sampler.start()
            t0 = time.monotonic()
            procs = []
            for rank, spec in writers:
                wenv = dict(env, RANK=str(rank), WORLD_SIZE=str(world))
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", WRITER, root, str(point_id), json.dumps(spec)],
                    stdout=subprocess.PIPE, env=wenv, text=True))
            digests = gather(procs, args.timeout, "writer")
            if marker:  # rank 0's marker, last (R1), from a process that has a rank
                subprocess.run([sys.executable, "-c", MARKER, os.path.join(root, marker)],
                               check=True, timeout=60,
                               env=dict(env, RANK="0", WORLD_SIZE=str(world)))
                digests[marker + "/.metadata"] = mountlib.sha256_file(
                    os.path.join(root, marker, ".metadata"))
            t_staged = time.monotonic() - t0
            sampler.phase = "upload"
            mountlib.wait_durable(args.ckptctl, store, JOB, STEP, timeout=args.timeout,
                                  interval=0.5, env=env)
            t_durable = time.monotonic() - t0
            hwm = sampler.finish()
            # The disk is shared: read back only where the fetched copy fits.
            mib = sum(s for _, sp in writers for _, _, s in sp) / MIB
            # (removing staging frees what the fetched copy takes)
            check = "read back" if free_mib(work) > 2 * args.disk_margin_mib else "verify"
            if check == "verify":
                bad = compare(digests, root)
                if bad:
                    raise RuntimeError("%d staged files differ from what was written, first %s"
                                       % (len(bad), bad[0]))
        shutil.rmtree(staging)
        if check == "read back":
            rss_read = read_back(args, variant[1], work, store, writers, digests, env)
        else:
            rss_read = 0.0
            verify(args, work, store, env)
        row = dict(kind=kind, value=value, rep=rep, variant=variant[0], files=len(digests),
                   mib=mib, check=check,
                   staged_s=t_staged, durable_s=t_durable,
                   rss_write_mib=sampler.peak_mib("write"),
                   rss_upload_mib=sampler.peak_mib("upload"), hwm_mib=hwm,
                   rss_read_mib=rss_read)
        for what, mib_used, cap in (("VmHWM", hwm, args.rss_cap_mib),
                                    ("peak VmRSS reading back", rss_read, args.read_rss_cap_mib)):
            if cap and mib_used > cap:
                raise RuntimeError("%s:%s: daemon %s %.0f MiB over the cap of %d MiB"
                                   % (kind, value, what, mib_used, cap))
        return row
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table_row(pt, variant, rs):
    """One markdown row: medians, with the range when there are several."""
    def med(k):
        # A point checked by verify (no room to read back) has no read figure.
        vals = [r[k] for r in rs if k != "rss_read_mib" or r["check"] == "read back"]
        if not vals:
            return "-"
        m = statistics.median(vals)
        return "%.1f" % m if len(vals) == 1 else "%.1f (%.1f-%.1f)" % (m, min(vals), max(vals))
    print("| %s | %s | %d | %.0f | %s | %s | %.0f | %s | %s | %s | %s |"
          % (pt, variant, rs[0]["files"], rs[0]["mib"], med("staged_s"), med("durable_s"),
             rs[0]["mib"] / statistics.median(r["durable_s"] for r in rs),
             med("rss_write_mib"), med("rss_upload_mib"), med("hwm_mib"), med("rss_read_mib")))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--points", default="size:1024,size:4096,size:10240,size:16384,"
                    "files:100,files:1000,files:10000,ranks:1,ranks:8,ranks:64")
    ap.add_argument("--store", choices=("file", "s3"), default="file")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--files-total-mib", type=int, default=1024)
    ap.add_argument("--ranks-total-mib", type=int, default=2048)
    ap.add_argument("--disk-margin-mib", type=int, default=4096,
                    help="read back only if this much disk stays free besides the copy")
    ap.add_argument("--rss-cap-mib", type=int, default=0,
                    help="fail a point whose writing daemon's VmHWM passes this")
    ap.add_argument("--read-rss-cap-mib", type=int, default=0,
                    help="fail a point whose reading daemon's peak VmRSS passes this")
    ap.add_argument("--timeout", type=int, default=3600)
    ap.add_argument("--ckptfs-arg", action="append", default=[])
    ap.add_argument("--compare", metavar="BUILD",
                    help="also run every point with BUILD's ckptfs (\"before\"), side by side, "
                    "the order swapped every other repetition")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.smoke:
        # ranks:32 of 32 MiB each: every file takes the parallel fetch path
        # (>= 32 MiB), 32 readers at once: the reading bound is exercised.
        args.points = "size:64,files:200,ranks:32"
        args.files_total_mib, args.ranks_total_mib = 32, 1024
    args.ckptfs = os.path.join(args.build, "fs", "ckptfs")
    args.ckptctl = os.path.join(args.build, "tools", "ckptctl")
    for b in (args.ckptfs, args.ckptctl):
        if not os.access(b, os.X_OK):
            raise SystemExit("bench_scale: %s not built" % b)
    why = mountlib.fuse_usable()
    if why:
        raise SystemExit("bench_scale: FUSE unusable: %s" % why)
    variants = [("this", args.ckptfs)]
    if args.compare:
        variants.append(("before", os.path.join(args.compare, "fs", "ckptfs")))
    rows = []
    for rep in range(args.reps):
        for pt in args.points.split(","):
            kind, _, value = pt.partition(":")
            for variant in variants[::-1] if rep % 2 else variants:
                row = run_point(args, kind, int(value), rep, variant)
                rows.append(row)
                print("%(kind)s:%(value)d %(variant)s rep %(rep)d: %(files)d files, %(mib).0f "
                      "MiB, staged %(staged_s).1f s, durable %(durable_s).1f s, RSS write "
                      "%(rss_write_mib).0f / upload %(rss_upload_mib).0f MiB, VmHWM %(hwm_mib).0f "
                      "MiB, new node reading %(rss_read_mib).0f MiB, bytes checked by %(check)s"
                      % row, flush=True)
    print("\n| point | ckptfs | files | MiB | staged s | durable s | MiB/s to durable | peak "
          "RSS writing MiB | peak RSS uploading MiB | VmHWM MiB | peak RSS of a new node "
          "reading it MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for pt in args.points.split(","):
        for vname, _ in variants:
            table_row(pt, vname, [r for r in rows if "%s:%d" % (r["kind"], r["value"]) == pt
                                  and r["variant"] == vname])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
