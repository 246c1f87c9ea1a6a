"""One rank of a many-rank step, for tests/integration/test_held.py.

    held_writer.py MOUNT JOB STEP RANK WORLD BYTES

Writes MOUNT/JOB/step-NNNNNN/rank_RR.bin, BYTES bytes of rank_bytes(RANK)
(seeded by the rank, so the test recomputes them), then commits its rank.
It talks with the test over stdin and stdout, one line each way per stage,
so that the test can hold every rank's file open at the same moment and
hold back one rank's commit:

1. open the file, write its first half, print "open", wait for a line;
2. write the rest, close, print "closed", wait for a line;
3. commit ("JOB STEP RANK WORLD" into MOUNT/.ckptfs/commit, as ckpt_commit
   and `ckptctl commit` do), print "committed", exit 0.

The environment holds RANK and WORLD_SIZE, which the mount records as the
file's rank (docs/CONSISTENCY.md). End of input (the test gone) ends the
writer with an error.
"""
import os
import random
import sys


def rank_bytes(rank, size):
    """The bytes rank `rank` writes: `size` pseudo-random bytes seeded by the
    rank (incompressible, and no two ranks share a chunk)."""
    return random.Random(4200 + rank).randbytes(size)


def step_dir(mount, job, step):
    return os.path.join(mount, job, "step-%06d" % step)


def file_name(rank):
    return "rank_%02d.bin" % rank


def stage(word):
    """Says `word` to the test, then waits for its go-ahead line."""
    sys.stdout.write(word + "\n")
    sys.stdout.flush()
    if not sys.stdin.readline():
        sys.exit("rank %s: the test went away after %r" % (os.environ.get("RANK"), word))


def main():
    mount, job, step, rank, world, size = sys.argv[1:7]
    step, rank, world, size = int(step), int(rank), int(world), int(size)
    data = rank_bytes(rank, size)
    d = step_dir(mount, job, step)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, file_name(rank)), "wb") as f:
        half = size // 2
        f.write(data[:half])
        f.flush()
        stage("open")
        f.write(data[half:])
    stage("closed")
    with open(os.path.join(mount, ".ckptfs", "commit"), "w") as f:
        f.write("%s %d %d %d\n" % (job, step, rank, world))
    sys.stdout.write("committed\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
