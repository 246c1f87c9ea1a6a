#!/usr/bin/env python3
"""bench_page_reuse — what a write costs depending on where its pages come from.

The probe behind docs/MOUNT_MODEL.md, "Recycled staging files": SIZE bytes
written in 1 MiB write()s into a file in DIR, three ways, alternating, ROUNDS
times:

  new_kept      a new file while another SIZE-byte file stays cached
                (a save that overlaps the seal of the step before it);
  new_unlinked  a new file just after a cached SIZE-byte file was unlinked;
  overwrite     over a cached SIZE-byte file in place (a recycled staging file).

With --sync each write is followed by sync_file_range(WRITE) and the file by
fdatasync, as the daemon writes its staging files. Prints one line per case
and round, then the medians and their ratios to overwrite. Asserts nothing
about speed; fails only when a write fails.

  bench_page_reuse.py DIR [--size MIB] [--rounds N] [--sync]
"""
import argparse
import ctypes
import os
import statistics
import sys
import time

MIB = 1 << 20
SYNC_FILE_RANGE_WRITE = 2
_libc = ctypes.CDLL(None, use_errno=True)


def write_file(path, size, sync, truncate):
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else 0)
    buf = os.urandom(MIB)
    t0 = time.perf_counter()
    fd = os.open(path, flags, 0o600)
    try:
        for off in range(0, size, MIB):
            os.pwrite(fd, buf, off)
            if sync and _libc.sync_file_range(fd, ctypes.c_longlong(off), ctypes.c_longlong(MIB),
                                              SYNC_FILE_RANGE_WRITE) != 0:
                raise OSError(ctypes.get_errno(), "sync_file_range")
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def one_round(d, size, sync):
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    out = {}
    write_file(a, size, sync, True)  # cached, and stays
    out["new_kept"] = write_file(b, size, sync, True)
    os.unlink(b)  # its cached pages are freed just now
    out["new_unlinked"] = write_file(b, size, sync, True)
    out["overwrite"] = write_file(a, size, sync, False)  # a is cached
    for p in (a, b):
        os.unlink(p)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--size", type=int, default=1024, help="MiB per file (default 1024)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sync", action="store_true", help="write as the daemon does")
    args = ap.parse_args()
    d = os.path.join(args.dir, "page-reuse.%d" % os.getpid())
    os.mkdir(d)
    times = {"new_kept": [], "new_unlinked": [], "overwrite": []}
    try:
        for r in range(args.rounds):
            res = one_round(d, args.size * MIB, args.sync)
            for k, t in res.items():
                times[k].append(t)
                print("round %d %-13s %7.3f s" % (r + 1, k, t))
    finally:
        for name in os.listdir(d):
            os.unlink(os.path.join(d, name))
        os.rmdir(d)
    base = statistics.median(times["overwrite"])
    for k, ts in times.items():
        m = statistics.median(ts)
        print("median %-13s %7.3f s  %5.2fx overwrite" % (k, m, m / base if base else 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
