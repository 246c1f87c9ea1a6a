"""check_sizes.py - every scenario of workloads.py saves the size it is named
for, within 2% (the issue asks ~10%; the model is exact to an embedding
row), at 64 and 256 MiB, into a temporary directory in /dev/shm. Exit 1
names each one that does not. A regression test: the first workloads.py
saved 519 MiB for "full 256 MiB" (a fixed 32000 x 1024 embedding).

  check_sizes.py [MIB ...]   (default 64 256)
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import workloads  # noqa: E402

TOLERANCE = 0.02


def saved_bytes(scenario):
    d = tempfile.mkdtemp(prefix="ckpt-peers-sizes.", dir="/dev/shm")
    try:
        scenario.save(d, 0)
        return sum(os.path.getsize(os.path.join(d, f)) for f in scenario.files(0))
    finally:
        shutil.rmtree(d)


def main():
    sizes = [int(x) for x in sys.argv[1:]] or [64, 256]
    bad = 0
    for name, cls in workloads.SCENARIOS.items():
        for mib in sizes:
            scenario = cls(mib << 20)
            try:
                got = saved_bytes(scenario) / (1 << 20)
            finally:
                scenario.close()
            off = got / mib - 1
            ok = abs(off) <= TOLERANCE
            bad += not ok
            print("%-8s %5d MiB: saved %.1f MiB (%+.1f%%) %s" %
                  (name, mib, got, 100 * off, "ok" if ok else "OFF BY MORE THAN 2%"), flush=True)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
