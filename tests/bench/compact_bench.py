"""Compaction figures for docs/GC.md ("Compaction: figures").

    python3 tests/bench/compact_bench.py CKPTCTL [REPS]

A finished job, built with `ckptctl put`: STEPS checkpoints, each a frozen
backbone (the same bytes every step) and a head of its own, then HF-style
retention (`gc --keep-last 2`) and sweeps past the grace period. Then
`gc --compact` and sweeps again. Per repetition: stored / kept-steps-alone
before and after, the compaction run's time (and how much of it is the
fence's wait, grace/2), its GETs and PUTs. Prints one JSON line per
repetition, then the medians and ranges.

The store is $CKPT_TEST_STORE_URL (an s3:// prefix; run under
tests/integration/with_s3rver.sh for s3rver) or a file:// store in a temp dir.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

STEPS = 8
MIB = 1 << 20
BACKBONE = 16 * MIB
HEAD = 16 * MIB
# The fence leaves a compaction 1.5 grace for its work (docs/GC.md); a run
# that needs longer stops and says so ("stopped"), so the grace is an
# environment knob: CKPT_BENCH_GRACE seconds.
GRACE = float(os.environ.get("CKPT_BENCH_GRACE", "4"))


def ctl(ckptctl, store, *args):
    p = subprocess.run([ckptctl, "--store", store, "--job", "job", *args], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        sys.exit("%s: exit %d\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p.stdout


def stored(ckptctl, store):
    return json.loads(ctl(ckptctl, store, "stats", "--json"))["stored_bytes"]


def gc(ckptctl, store, *args):
    return json.loads(ctl(ckptctl, store, "gc", "--json", "--keep-last", "2", "--grace",
                          str(GRACE), *args))


def settle(ckptctl, store):
    for _ in range(2):
        time.sleep(GRACE + 0.2)
        gc(ckptctl, store)


def one_run(ckptctl, base, tmp, rep):
    store = base.rstrip("/") + "/compact-%d-%d" % (os.getpid(), rep) if base.startswith("s3://") \
        else "file://" + os.path.join(tmp, "store-%d" % rep)
    fresh = store + "-fresh" if store.startswith("s3://") else store + "-fresh"
    backbone = os.urandom(BACKBONE)
    for step in range(1, STEPS + 1):
        d = os.path.join(tmp, "src-%d-%d" % (rep, step))
        os.makedirs(d)
        with open(os.path.join(d, "backbone.bin"), "wb") as f:
            f.write(backbone)
        with open(os.path.join(d, "head.bin"), "wb") as f:
            f.write(os.urandom(HEAD))
        ctl(ckptctl, store, "put", "--step", str(step), d)
    gc(ckptctl, store)
    settle(ckptctl, store)
    for step in (STEPS - 1, STEPS):
        ctl(ckptctl, fresh, "put", "--step", str(step), os.path.join(tmp, "src-%d-%d" % (rep, step)))
    alone = stored(ckptctl, fresh)
    before = stored(ckptctl, store)
    t = time.monotonic()
    r = gc(ckptctl, store, "--compact")
    took = time.monotonic() - t
    settle(ckptctl, store)
    after = stored(ckptctl, store)
    for step in (STEPS - 1, STEPS):
        ctl(ckptctl, store, "verify", "--step", str(step))
    c = r["compact"]
    return dict(stopped=r["stopped"], before=before / alone, after=after / alone, seconds=took,
                fence_wait=c["wait_ns"] / 1e9, work=took - c["wait_ns"] / 1e9,
                live_mib=c["live_bytes"] / MIB, candidates=c["candidates"],
                packs_written=c["packs_written"], parts=c["parts_rewritten"], gets=c["gets"],
                puts=c["puts"])


def main():
    ckptctl = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    base = os.environ.get("CKPT_TEST_STORE_URL", "")
    tmp = tempfile.mkdtemp(prefix="ckpt-compact-bench-", dir="/var/tmp")
    try:
        runs = []
        for rep in range(reps):
            runs.append(one_run(ckptctl, base, tmp, rep))
            print(json.dumps(runs[-1]), flush=True)
        print("store: %s; %d reps (busy machine); median [min, max]:"
              % (base or "file://", reps))
        for k in ("before", "after", "seconds", "fence_wait", "work", "live_mib", "gets", "puts"):
            v = [r[k] for r in runs]
            print("  %-10s %.3f [%.3f, %.3f]" % (k, statistics.median(v), min(v), max(v)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
