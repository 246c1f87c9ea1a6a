"""Times torch.save of a large state dict into several directories, round-robin
in one run, and reports per-target medians and ratios. Driven by
bench_fuse_save.sh (which mounts the targets); runnable by hand too:

  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread /usr/bin/python3 \\
    fuse_save_bench.py --target disk=/var/tmp/a --target other=/mnt/x/job \\
    [--size-mib 1024] [--reps 5] [--state random|model|both] [--keep 1] \\
    [--settle-ckptctl PATH --settle-job JOB --settle NAME=STORE_URL ...] \\
    [--series N [--series-reps R]] [--json OUT]

What is timed is what the trainer waits for:
  save        torch.save(state, path)                 (open, write, close)
  save+fsync  with open(path, "wb") as f: torch.save(state, f); f.flush();
              os.fsync(f.fileno())                    (fsync before close)
Each state is built once per process before any timing; before every save
(untimed) each of its floating-point values is changed (perturb), so a
deduplicating target stores new data each time as in full training
(--same-state to turn that off). Every target is
warmed up with one untimed save of each variant; then each repetition saves
once per (variant, target), rotating the target order every repetition.
Untimed, around each timed save: before it, os.sync() flushes dirty pages
and the target's files beyond the newest --keep - 1 are deleted (see
make_room for why just before); after it, for the --settle-target, the
script waits until ckptctl lists the step as durable (so one target's
background upload does not slow the next target's save; the time to durable
is reported too). File names are ckpt-NNNNNN.pt, NNNNNN counting up per
target, so ckptfs sees one new single-file step per save. Each timed save
also reports how much the page cache grew (/proc/meminfo Cached, after the
save minus before it, the dirty pages of the save included).

--series N: after the repetitions, N more saves (variant save) per target,
one target at a time: its N saves in a row with no settling, so ckptfs's
earlier steps are still being sealed and uploaded while the next save runs
(as in training that saves often); then, untimed, the script waits until
that target's last save is durable before the next target's N saves begin.
So each target's saves overlap its own background work and nobody else's
(round-robin saves would also run rclone's copy of its last file beside
ckptfs's save, and ckptfs's seal beside passthrough_ll's). --series-reps R:
R such rounds, the target order rotated each round. Reported per save
index: each target's median, and the median of the R paired ratios (one
round's save of that index against the same round's passthrough_ll or
rclone save of it).
"""
import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

import torch

MIB = 1 << 20


def random_state(nbytes):
    """Dict of fp32 tensors of random normal values, 64 MiB each (the last
    one smaller), nbytes in total."""
    g = torch.Generator().manual_seed(1234)
    per = 16 * MIB  # elements: 64 MiB of fp32
    n_elems = nbytes // 4
    state, i = {}, 0
    while n_elems > 0:
        k = min(per, n_elems)
        state["layer%03d.weight" % i] = torch.randn(k, generator=g)
        n_elems -= k
        i += 1
    return state


def model_state(nbytes):
    """A transformer (embedding + encoder layers) and its AdamW state after
    one step: {"model", "optimizer", "step"} like a training script saves.
    Sized so that weights + exp_avg + exp_avg_sq (12 bytes per parameter)
    reach at least nbytes."""
    torch.manual_seed(1234)
    d = 1024 if nbytes >= 256 * MIB else 256
    vocab = 32000 if nbytes >= 256 * MIB else 4000
    per_layer = 12 * d * d + 13 * d  # attention in/out, FFN 4d, 2 LayerNorms, biases
    params_needed = nbytes / 12
    layers = max(1, math.ceil((params_needed - vocab * d) / per_layer))
    model = torch.nn.Sequential(
        torch.nn.Embedding(vocab, d),
        *[torch.nn.TransformerEncoderLayer(d, max(1, d // 64), 4 * d, batch_first=True)
          for _ in range(layers)],
        torch.nn.LayerNorm(d))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    opt.step()
    for p in model.parameters():
        p.grad = None
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 1}


def state_bytes(obj):
    if torch.is_tensor(obj):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(state_bytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(state_bytes(v) for v in obj)
    return 0


def perturb(state):
    """Untimed: change every floating-point value, so each save writes new
    bytes as in full training (consecutive checkpoints share ~0%), instead of
    letting a deduplicating target store the same state once."""
    for t in iter_tensors(state):
        if t.is_floating_point():
            t.add_(1e-3)


def save_plain(state, path):
    torch.save(state, path)


def save_fsync(state, path):
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


VARIANTS = [("save", save_plain), ("save+fsync", save_fsync)]


class Target:
    def __init__(self, name, directory):
        self.name, self.dir = name, directory
        self.counter = 0
        self.files = []

    def next_path(self):
        self.counter += 1
        return self.counter, os.path.join(self.dir, "ckpt-%06d.pt" % self.counter)


class Settler:
    """Waits (untimed) until ckptctl lists a step of one target as durable."""

    def __init__(self, args, store):
        self.ckptctl, self.store, self.job = args.settle_ckptctl, store, args.settle_job
        self.timeout = args.settle_timeout
        self.enabled = bool(self.ckptctl)
        self.durable_s = []

    def listed(self):
        p = subprocess.run([self.ckptctl, "--store", self.store, "--job", self.job, "--json",
                            "ls"], capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            return set()
        try:
            return {s.get("step") for s in json.loads(p.stdout or "[]")}
        except ValueError:
            return set()

    def sweep(self):
        """Untimed, once the target has settled: deletes the packs of the
        steps the saves' unlinks deleted (ckptctl gc, twice: a sweep marks,
        the next, 1.5 s later, deletes what it marked more than its 1 s
        grace before; safe with nothing in flight). Without it the store
        keeps ~1 GiB per save until a GC, and two series runs filled the
        disk (ENOSPC in ckptfs's 58th save)."""
        if not self.enabled:
            return
        for i in range(2):
            time.sleep(1.5 * i)
            p = subprocess.run([self.ckptctl, "--store", self.store, "--job", self.job, "-q",
                                "gc", "--grace", "1"], capture_output=True, text=True,
                               timeout=600)
            if p.returncode != 0:
                print("!! WARNING: ckptctl gc exited %d: %s" % (p.returncode, p.stderr.strip()),
                      flush=True)

    def wait(self, step, path, t_start):
        if not self.enabled:
            return
        deadline = time.monotonic() + self.timeout
        while step not in self.listed():
            if time.monotonic() > deadline:
                print("!! WARNING: step %d not listed by `ckptctl ls` within %ss; no more "
                      "settling (background work of ckptfs now overlaps the other targets' "
                      "saves)" % (step, self.timeout), flush=True)
                self.enabled = False
                return
            time.sleep(0.05)
        self.durable_s.append(time.monotonic() - t_start)


class FileSettler:
    """Waits (untimed) until a saved file is in a directory with its full
    size: for rclone mount, whose upload to its (local) remote starts after
    the close."""

    def __init__(self, args, remote_dir):
        self.dir, self.timeout, self.enabled = remote_dir, args.settle_timeout, True
        self.durable_s = []

    def sweep(self):
        """Nothing to collect: rclone deletes the remote copy with the file."""

    def wait(self, step, path, t_start):
        if not self.enabled:
            return
        want = os.stat(path).st_size
        dest = os.path.join(self.dir, os.path.basename(path))
        deadline = time.monotonic() + self.timeout
        while not (os.path.exists(dest) and os.stat(dest).st_size == want):
            if time.monotonic() > deadline:
                print("!! WARNING: %s not in %s within %ss; no more settling" % (
                    os.path.basename(path), self.dir, self.timeout), flush=True)
                self.enabled = False
                return
            time.sleep(0.05)
        self.durable_s.append(time.monotonic() - t_start)


def make_room(target, keep):
    """Untimed, right before a save: flush dirty pages, then delete the
    target's files beyond the newest keep-1. Deleting *just before* saving
    matters on this VM (Firecracker, free page reporting): page-cache pages
    freed and left free for ~2 s go back to the host and fault in again at
    ~12 us per 4 KiB page, adding up to 3 s of noise to a 1 GiB save; freed
    just before, the save reuses them."""
    os.sync()
    while len(target.files) > max(0, keep - 1):
        os.unlink(target.files.pop(0))


def page_cache_bytes():
    """The page cache's size now (/proc/meminfo Cached), in bytes."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Cached:"):
                return int(line.split()[1]) * 1024
    return 0


def run_state(label, state, targets, args, settlers):
    nbytes = state_bytes(state)
    print("\n== state %s: %.3f GiB in %d tensors" % (
        label, nbytes / (1 << 30), sum(1 for _ in iter_tensors(state))), flush=True)
    times = {(v, t.name): [] for v, _ in VARIANTS for t in targets}
    cache = {(v, t.name): [] for v, _ in VARIANTS for t in targets}
    rounds = []  # per repetition: {(variant, target): seconds}

    def one(variant, fn, t, timed, settle=True):
        step, path = t.next_path()
        if not args.same_state:
            perturb(state)
        make_room(t, args.keep)
        c0 = page_cache_bytes()
        t0 = time.monotonic()
        fn(state, path)
        dt = time.monotonic() - t0
        grown = page_cache_bytes() - c0
        t.files.append(path)
        if settle and t.name in settlers:
            settlers[t.name].wait(step, path, t0)
        if timed:
            print("  %-10s %-15s %7.3f s  %6.0f MB/s  page cache %+6.0f MiB" % (
                variant, t.name, dt, nbytes / dt / 1e6, grown / MIB), flush=True)
            cache[(variant, t.name)].append(grown)
        return dt

    print("-- warm-up (untimed)", flush=True)
    for variant, fn in VARIANTS:
        for t in targets:
            one(variant, fn, t, False)
    for st in settlers.values():
        st.durable_s.clear()
    for rep in range(args.reps):
        print("-- repetition %d/%d" % (rep + 1, args.reps), flush=True)
        order = targets[rep % len(targets):] + targets[:rep % len(targets)]
        r = {}
        for variant, fn in VARIANTS:
            for t in order:
                r[(variant, t.name)] = dt = one(variant, fn, t, True)
                times[(variant, t.name)].append(dt)
        rounds.append(r)
    out = report(label, nbytes, times, cache, rounds, targets, settlers)
    if args.series:
        out["series"] = run_series(targets, args, settlers, one)
    return out


def run_series(targets, args, settlers, one):
    """--series: args.series saves in a row per target, one target at a time,
    each target settled (untimed) before the next one's saves begin; that
    --series-reps times, the target order rotated every round. Per save
    index: each target's median, and the median of the paired ratios (the
    same round's save of the same index) to passthrough_ll and to rclone."""
    n, rounds = args.series, args.series_reps
    print("\n-- series: %d saves per target in a row, earlier ones still uploading "
          "(no settling within a target's series), %d rounds" % (n, rounds), flush=True)
    fn = dict(VARIANTS)["save"]
    per = {t.name: [[] for _ in range(n)] for t in targets}  # [save index][round]
    for r in range(rounds):
        print("-- series round %d/%d" % (r + 1, rounds), flush=True)
        for t in targets[r % len(targets):] + targets[:r % len(targets)]:
            for i in range(n):
                per[t.name][i].append(one("save", fn, t, True, settle=False))
            if t.name in settlers:
                settlers[t.name].wait(t.counter, t.files[-1], time.monotonic())
                settlers[t.name].sweep()
    names = [t.name for t in targets]
    print("\n   median s of %d rounds per save index" % rounds)
    print("   %-5s %s" % ("save", " ".join("%15s" % name for name in names)))
    for i in range(n):
        print("   %-5d %s" % (i + 1, " ".join(
            "%15.3f" % statistics.median(per[name][i]) for name in names)))
    out = {"saves_s": per, "rounds": rounds, "ratios": {}}
    pairs = [(c, base) for c in names if c.startswith("ckptfs") or c == "rclone"
             for base in ("passthrough_ll", "rclone") if base in per and base != c]
    pairs += [("ckptfs", "ckptfs-base")] if "ckptfs" in per and "ckptfs-base" in per else []
    for a, b in pairs:
        paired = [[x / y for x, y in zip(per[a][i], per[b][i])] for i in range(n)]
        meds = [statistics.median(rs) for rs in paired]
        over = [i + 1 for i, m in enumerate(meds) if m > 1.10]
        print("   %s / %s, per save index the median of %d paired ratios: %s" % (
            a, b, rounds, " ".join("%.3f" % m for m in meds)))
        print("      median over the indices %.3f, 10th-or-last %.3f, indices above 1.10: %s" % (
            statistics.median(meds), meds[-1], over or "none"))
        out["ratios"]["%s/%s" % (a, b)] = {"paired_per_round": paired, "median_per_save": meds,
                                          "saves_above_1_10": over}
    return out


def iter_tensors(obj):
    if torch.is_tensor(obj):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from iter_tensors(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from iter_tensors(v)


def ratio_pairs(names):
    """(a, b) pairs whose ratio is reported: passthrough_ll / disk, and every
    ckptfs target (ckptfs, ckptfs-base, ...) against passthrough_ll, disk and
    one another."""
    ck = [n for n in names if n.startswith("ckptfs")]
    pairs = [("passthrough_ll", "disk")]
    pairs += [(c, "passthrough_ll") for c in ck] + [(c, "disk") for c in ck]
    pairs += [(a, b) for a in ck for b in ck if a == "ckptfs" and b != a]
    pairs += [(a, "ckptfs-base") for a in ck if a not in ("ckptfs", "ckptfs-base")]
    pairs += [(c, "rclone") for c in ck] + [("rclone", "passthrough_ll")]
    return pairs


def report(label, nbytes, times, cache, rounds, targets, settlers):
    names = [t.name for t in targets]
    out = {"state": label, "bytes": nbytes, "targets": {}, "ratios": {}}
    print("\n   %-10s %-15s %9s %9s %9s %9s %12s" % ("variant", "target", "median s", "min s",
                                                      "max s", "MB/s", "cache MiB"))
    for variant, _ in VARIANTS:
        for n in names:
            xs = times[(variant, n)]
            med = statistics.median(xs)
            grown = statistics.median(cache[(variant, n)]) / MIB
            print("   %-10s %-15s %9.3f %9.3f %9.3f %9.0f %+12.0f" % (
                variant, n, med, min(xs), max(xs), nbytes / med / 1e6, grown))
            out["targets"].setdefault(n, {})[variant] = {"median_s": med, "all_s": xs,
                                                         "cache_growth_mib": grown}
    print("\n   ratios of medians (paired: median of the per-repetition ratios)")
    for variant, _ in VARIANTS:
        for a, b in ratio_pairs(names):
            if a in names and b in names:
                rm = statistics.median(times[(variant, a)]) / statistics.median(times[(variant, b)])
                rs = [r[(variant, a)] / r[(variant, b)] for r in rounds]
                print("   %-10s %-30s %6.3f  (paired %.3f [%.3f-%.3f])" % (
                    variant, a + " / " + b, rm, statistics.median(rs), min(rs), max(rs)))
                out["ratios"].setdefault(variant, {})["%s/%s" % (a, b)] = {
                    "medians": rm, "paired": statistics.median(rs), "per_rep": rs}
    for name, st in settlers.items():
        if st.durable_s:
            med = statistics.median(st.durable_s)
            how = "in its remote" if isinstance(st, FileSettler) else "ckptctl ls"
            print("\n   %s time from save start to durable (%s): median %.3f s "
                  "(%.0f MB/s end to end), n=%d" % (name, how, med, nbytes / med / 1e6,
                                                    len(st.durable_s)))
            out["%s_to_durable_s" % name] = st.durable_s
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", action="append", required=True, metavar="NAME=DIR")
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--state", choices=["random", "model", "both"], default="both")
    ap.add_argument("--keep", type=int, default=1,
                    help="files kept per target after a save (default 1)")
    ap.add_argument("--same-state", action="store_true",
                    help="save the same bytes every time (default: change every value "
                         "before each save, untimed)")
    ap.add_argument("--settle", action="append", default=[], metavar="NAME=STORE_URL",
                    help="after each save to target NAME wait until ckptctl lists the step "
                         "in STORE_URL (repeatable)")
    ap.add_argument("--settle-file", action="append", default=[], metavar="NAME=DIR",
                    help="after each save to target NAME wait until the file is in DIR "
                         "with its size (rclone's remote; repeatable)")
    ap.add_argument("--settle-ckptctl")
    ap.add_argument("--settle-job")
    ap.add_argument("--series", type=int, default=0, metavar="N",
                    help="then N saves per target without settling (see above)")
    ap.add_argument("--series-reps", type=int, default=1, metavar="R",
                    help="rounds of --series (default 1); per save index the median of R")
    ap.add_argument("--settle-timeout", type=float, default=120)
    ap.add_argument("--json")
    args = ap.parse_args()

    targets = []
    for spec in args.target:
        name, _, d = spec.partition("=")
        os.makedirs(d, exist_ok=True)
        targets.append(Target(name, d))
    settlers = {}
    for spec in args.settle:
        name, _, store = spec.partition("=")
        settlers[name] = Settler(args, store)
    for spec in args.settle_file:
        name, _, d = spec.partition("=")
        settlers[name] = FileSettler(args, d)
    print("torch %s, %d threads; %d MiB per save, %d repetitions; targets: %s" % (
        torch.__version__, torch.get_num_threads(), args.size_mib, args.reps,
        ", ".join("%s=%s" % (t.name, t.dir) for t in targets)), flush=True)

    results = []
    kinds = ["random", "model"] if args.state == "both" else [args.state]
    for kind in kinds:
        t0 = time.monotonic()
        state = (random_state if kind == "random" else model_state)(args.size_mib * MIB)
        label = "random fp32 tensors" if kind == "random" else "transformer + AdamW"
        print("(built %s in %.1f s)" % (label, time.monotonic() - t0), flush=True)
        results.append(run_state(label, state, targets, args, settlers))
        del state
        gc.collect()
        for t in targets:
            make_room(t, 0)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
