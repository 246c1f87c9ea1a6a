#!/usr/bin/env python3
"""last_ckpt_copy.py - what the mount's refusal of symlinks costs a PyTorch
Lightning trainer with save_last="link" (docs/MOUNT.md, "What the mount does
not do"): a benchmark aid, it asserts no speed.

    /usr/bin/python3 tests/bench/last_ckpt_copy.py BUILD WORKDIR [--mib N] [--reps N]

Mounts ckptfs (defaults, a file:// store under WORKDIR) and, --reps times
(default 3), saves the peers benchmark's `full` scenario (a transformer and
its AdamW state after a step, --mib MiB, default 1024; every value changes
between saves) as Lightning names it, `epoch=E-step=S.ckpt`, then does what
Lightning's ModelCheckpoint does for save_last="link": remove `last.ckpt`,
try os.symlink (refused: ENOTSUP) and copy the checkpoint instead
(shutil.copy). Prints, per repetition, the save's and the copy's seconds
(each to close(), what the trainer waits for) and the bytes the store grew
by for the step with and without the copy (both waited durable).

The mount is unmounted and its daemon stopped when the script ends.
"""
import errno
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "peers"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import torch  # noqa: E402
import workloads  # noqa: E402
from mountlib import Mount, list_steps, wait_durable, wait_for  # noqa: E402


def store_bytes(root):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root)
               for f in files)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__.split("\n\n")[1])
    build, work = os.path.abspath(argv[0]), os.path.abspath(argv[1])
    opts = argv[2:]
    mib = int(opts[opts.index("--mib") + 1]) if "--mib" in opts else 1024
    reps = int(opts[opts.index("--reps") + 1]) if "--reps" in opts else 3
    ckptctl = os.path.join(build, "tools", "ckptctl")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    store_dir = os.path.join(work, "store")
    store = "file://" + store_dir
    scenario = workloads.Full(mib << 20)
    with Mount(os.path.join(work, "mnt"), store=store, staging=os.path.join(work, "staging"),
               node="lightning", binary=os.path.join(build, "fs", "ckptfs")) as m:
        job = os.path.join(m.path, "job")
        os.mkdir(job)
        print("rep  save_s  copy_s  copy/save  stored_MiB  +copy_MiB")
        for rep in range(reps):
            scenario.perturb()
            step = 100 * (rep + 1)
            name = "epoch=%d-step=%d.ckpt" % (rep, step)
            before = store_bytes(store_dir)
            t0 = time.monotonic()
            scenario.state["step"] = step
            torch.save(scenario.state, os.path.join(job, name))
            save_s = time.monotonic() - t0
            wait_durable(ckptctl, store, "job", step, timeout=600)
            saved = store_bytes(store_dir)
            last = os.path.join(job, "last.ckpt")
            t0 = time.monotonic()
            if os.path.lexists(last):
                os.remove(last)
            try:
                os.symlink(name, last)
                sys.exit("the mount made a symlink: nothing to measure")
            except OSError as e:
                if e.errno != errno.ENOTSUP:
                    raise
                shutil.copy(os.path.join(job, name), last)
            copy_s = time.monotonic() - t0
            wait_for(lambda: {s["step"]: s["files"] for s in list_steps(ckptctl, store, "job")}
                     .get(step) == 2, 600, "step %d stored with last.ckpt" % step)
            copied = store_bytes(store_dir)
            print("%3d  %6.2f  %6.2f  %9.2f  %10.1f  %9.2f" % (
                rep + 1, save_s, copy_s, copy_s / save_s, (saved - before) / 2**20,
                (copied - saved) / 2**20))


if __name__ == "__main__":
    main(sys.argv[1:])
