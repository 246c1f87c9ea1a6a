#!/usr/bin/python3
"""chunker_check_cuts.py — do the chunker's cuts land on a real ZIP's records?

    python3 tests/bench/chunker_check_cuts.py BENCH_DEDUP FILE.pt [--make-big PATH]

Reads the archive's records with Python's zipfile (central directory), works
out where each local header, each record's data and each record (with its
data descriptor) starts and ends, runs `BENCH_DEDUP /dev/null FILE --cuts`,
and reports any expected cut the chunker did not make. It also prints what
the local headers look like (flag bit 3, zip64 extra, descriptor size), which
is how the zip64 handling was checked against real torch 1.13 output.

--make-big PATH first writes a torch.save file larger than 4 GiB there (one
4.1 GiB uint8 tensor between small ones), so records start past 4 GiB and one
record is larger than 4 GiB (needs ~5 GB of RAM and disk; removed after).
"""
import os
import struct
import subprocess
import sys
import zipfile


def make_big(path):
    import torch
    sd = {"a": torch.randn(1000), "big": torch.zeros((1 << 32) + (100 << 20), dtype=torch.uint8),
          "b": torch.randn(100000), "c": torch.arange(10)}
    torch.save(sd, path)


def expected_cuts(path):
    cuts, info = set(), []
    size = os.path.getsize(path)
    with open(path, "rb") as f, zipfile.ZipFile(path) as z:
        for zi in z.infolist():
            f.seek(zi.header_offset)
            h = f.read(30)
            sig, _, flags, method, _, _, _, csz, usz, nlen, xlen = struct.unpack("<IHHHHHIIIHH", h)
            assert sig == 0x04034B50
            f.seek(zi.header_offset + 30 + nlen)
            extra = f.read(xlen)
            zip64 = False
            i = 0
            while i + 4 <= len(extra):
                xid, xsz = struct.unpack("<HH", extra[i:i + 4])
                zip64 |= xid == 1
                i += 4 + xsz
            data = zi.header_offset + 30 + nlen + xlen
            end = data + zi.compress_size
            desc = 0
            if flags & 8:
                f.seek(end)
                if f.read(4) == b"PK\x07\x08":
                    desc = 24 if zip64 else 16
            cuts.update((zi.header_offset, data, end + desc))
            info.append((zi.filename, zi.header_offset, flags, zip64, zi.compress_size, desc))
        # end of the archive (EOCD and its comment) = end of file for torch.save
        cuts.add(size)
    cuts.discard(0)
    return sorted(cuts), info


def main():
    binary, path = sys.argv[1], sys.argv[2]
    big = "--make-big" in sys.argv
    if big:
        path = sys.argv[sys.argv.index("--make-big") + 1]
        make_big(path)
    try:
        want, info = expected_cuts(path)
        for name, off, flags, z64, csz, desc in info:
            print("record %-28s at %12d flags 0x%04x zip64-extra %-5s size %12d descriptor %d" %
                  (name, off, flags, z64, csz, desc))
        out = subprocess.run([binary, "/dev/null", path, "--cuts"], check=True,
                             capture_output=True, text=True).stdout
        got = {int(line.split()[1]) for line in out.splitlines() if line.startswith("cut ")}
        missing = [c for c in want if c not in got]
        print("%d expected record cuts, %d chunks, %d missing%s" %
              (len(want), len(got), len(missing), (": %s" % missing[:10]) if missing else ""))
        return 1 if missing else 0
    finally:
        if big:
            os.unlink(path)


if __name__ == "__main__":
    sys.exit(main())
