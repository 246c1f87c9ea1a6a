"""One rank of a training job that checkpoints every step through a ckptfs
mount, for tests/integration/test_gc_daemons.py.

    gcd_writer.py MOUNT JOB RANK WORLD REFDIR CONTROL [KEEP]

Step after step (1, 2, ...): torch.save of this rank's state to
MOUNT/JOB/step-NNNNNN/rank-R.pt (a frozen 4 MiB "backbone" that is the same
at every step, and a 128 KiB "head" whose content repeats every HEAD_PERIOD steps, so that
the daemon keeps meeting chunks of packs GC has just marked or deleted), then an
explicit rank commit ("JOB STEP RANK WORLD" into MOUNT/.ckptfs/commit). The
same file is saved into REFDIR/step-NNNNNN/rank-R.pt as the reference for
byte-for-byte checks.

CONTROL is a directory the test and the writer share: the writer records the
last step it committed in CONTROL/rank-R.last; the test ends the run by
writing the final step number into CONTROL/stop (every rank writes up to and
including it, so the last step is whole). Runs at most MAX_STEPS steps.
The test may also pace the writer by state: while CONTROL/allow holds a
step number and CONTROL/stop does not exist yet, the writer starts no step
beyond it (it waits, at most HELD_MAX seconds), so that a test whose
condition is "N compactions while the ranks write" is not a race between
the writers' pace and the compactions'.

KEEP (rank 0 only, as HF Trainer's save_total_limit): after step N, once
every rank has committed N (the barrier a trainer has before it rotates),
shutil.rmtree of MOUNT/JOB/step-(N-KEEP) through the mount.
"""
import os
import shutil
import sys
import time

import torch

MAX_STEPS = 400
HELD_MAX = 300  # s: the longest a writer waits for CONTROL/allow to move
BACKBONE_FLOATS = 1 << 20  # 4 MiB of fp32
HEAD_FLOATS = 32 << 10     # 128 KiB of fp32
HEAD_PERIOD = 5


def state(step, rank):
    g = torch.Generator().manual_seed(1000 + rank)
    backbone = torch.randn(BACKBONE_FLOATS, generator=g)
    g = torch.Generator().manual_seed(step % HEAD_PERIOD * 100 + rank)
    return {"backbone": backbone, "head": torch.randn(HEAD_FLOATS, generator=g), "step": step}


def final_step(control):
    try:
        with open(os.path.join(control, "stop")) as f:
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return None


def allowed_step(control):
    """The last step the test allows (CONTROL/allow), or None: no bound."""
    try:
        with open(os.path.join(control, "allow")) as f:
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return None


def wait_until_allowed(control, rank, step):
    """Waits while the test's pace holds step back; the stop file ends any
    pacing (the final step must be reachable)."""
    deadline = time.monotonic() + HELD_MAX
    while final_step(control) is None:
        allowed = allowed_step(control)
        if allowed is None or step <= allowed:
            return
        if time.monotonic() > deadline:
            sys.exit("rank %d: held before step %d for %d s (allow stayed at %d)" % (
                rank, step, HELD_MAX, allowed))
        time.sleep(0.05)


def last_committed(control, rank):
    try:
        with open(os.path.join(control, "rank-%d.last" % rank)) as f:
            return int(f.read())
    except (FileNotFoundError, ValueError):
        return 0


def rotate(mount, job, control, world, step, keep):
    """Waits (bounded) until every rank committed step, then removes step
    step-keep through the mount, as HF Trainer's _rotate_checkpoints does."""
    deadline = time.monotonic() + 120
    while min(last_committed(control, r) for r in range(world)) < step:
        if time.monotonic() > deadline:
            sys.exit("rank 0: the other ranks did not reach step %d" % step)
        time.sleep(0.05)
    old = os.path.join(mount, job, "step-%06d" % (step - keep))
    # As HF Trainer does (ignore_errors: GC may delete the same step at the
    # same moment); but the directory must be gone afterwards.
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(old):
        sys.exit("rank 0: rotation left %s: %s" % (old, os.listdir(old)))


def main():
    mount, job, rank, world, refdir, control = sys.argv[1:7]
    keep = int(sys.argv[7]) if len(sys.argv) > 7 else 0
    rank, world = int(rank), int(world)
    name = "rank-%d.pt" % rank
    for step in range(1, MAX_STEPS + 1):
        wait_until_allowed(control, rank, step)
        stop = final_step(control)
        if stop is not None and step > stop:
            break
        rel = os.path.join("step-%06d" % step, name)
        s = state(step, rank)
        for root in (os.path.join(mount, job), refdir):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            torch.save(s, os.path.join(root, rel))
        with open(os.path.join(mount, ".ckptfs", "commit"), "w") as f:
            f.write("%s %d %d %d\n" % (job, step, rank, world))
        tmp = os.path.join(control, "rank-%d.last.tmp" % rank)
        with open(tmp, "w") as f:
            f.write(str(step))
        os.replace(tmp, os.path.join(control, "rank-%d.last" % rank))
        if rank == 0 and keep and step > keep:
            rotate(mount, job, control, world, step, keep)
        time.sleep(0.05)
    else:
        sys.exit("rank %d: no stop after %d steps" % (rank, MAX_STEPS))


if __name__ == "__main__":
    main()
