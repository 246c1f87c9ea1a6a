#!/usr/bin/python3
"""chunker_dedup_table.py — the dedup table of docs/CHUNKING.md.

    python3 tests/bench/chunker_dedup_table.py BENCH_DEDUP PAIRS_TSV [PARAMS ...]

BENCH_DEDUP is the built tests/bench/bench_dedup binary, PAIRS_TSV the
pairs.tsv written by chunker_make_ckpts.py. PARAMS are min/avg/max triples
such as 64K/256K/1M (default: a sweep). For every pair and every setting it
runs bench_dedup in the modes fixed / cdc / aware and prints markdown tables:
% of B's bytes found in A, then "% of repeated bytes found" (found / the
pair's ground-truth repeated %), then mean chunk size of B.
"""
import subprocess
import sys

DEFAULT_PARAMS = ["16K/64K/256K", "32K/128K/512K", "64K/256K/1M", "128K/512K/2M",
                  "256K/1M/4M", "512K/2M/8M"]


def size(s):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1], 1)
    return int(s[:-1] if s[-1] in "KM" else s) * mult


def run(binary, a, b, params, mode):
    mn, av, mx = (str(size(x)) for x in params.split("/"))
    out = subprocess.run([binary, a, b, mn, av, mx, "--mode", mode], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    cols = dict(zip(out[0].split("\t"), out[1].split("\t")))
    return float(cols["found_pct"]), float(cols["B_mean"]), int(cols["B_chunks"])


def main():
    binary, pairs_tsv = sys.argv[1], sys.argv[2]
    params = sys.argv[3:] or DEFAULT_PARAMS
    pairs = [line.rstrip("\n").split("\t") for line in open(pairs_tsv) if line.strip()]
    res = {}
    for name, a, b, rep in pairs:
        for p in params:
            for mode in ("fixed", "cdc", "aware"):
                res[name, p, mode] = run(binary, a, b, p, mode)
    cols = [(p, m) for p in params for m in ("fixed", "cdc", "aware")]
    head = "| pair | repeated % | " + " | ".join("%s %s" % (m, p) for p, m in cols) + " |"
    sep = "|---|---|" + "---|" * len(cols)
    for title, fn in (("% of B's bytes found in A", lambda r, rep: "%.1f" % r[0]),
                      ("% of repeated bytes found",
                       lambda r, rep: "%.1f" % (100 * r[0] / rep) if rep > 0.5 else "-"),
                      ("B: chunks / mean KiB",
                       lambda r, rep: "%d / %.0f" % (r[2], r[1] / 1024))):
        print("\n### " + title + "\n")
        print(head)
        print(sep)
        for name, a, b, rep in pairs:
            cells = [fn(res[name, p, m], float(rep)) for p, m in cols]
            print("| %s | %s | %s |" % (name, rep, " | ".join(cells)))


if __name__ == "__main__":
    main()
