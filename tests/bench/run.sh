#!/usr/bin/env bash
# Runs the benchmarks (not tests: they assert nothing about speed).
#
#   tests/bench/run.sh BUILD_DIR [--smoke]
#
# --smoke: CI-sized (small inputs, one repetition), to prove the benchmarks
# still run; full runs are for docs/BENCHMARKS.md. Reports chunker and
# XXH3-128 throughput, codec throughput and compression ratios on real fp32
# and bf16 torch checkpoints (with and without the byte-plane shuffle),
# AES-256-GCM seal and open throughput against memcpy (bench_crypt), the
# dedup table of the chunker on real checkpoints, the cost of a write by where
# its pages come from (bench_page_reuse.py), the cost of a create in a mount
# of many files (bench_creates) and, full runs only, time to
# durable and restore against disk, CPU and raw PUT/GET (bench_durable.sh; its
# smoke run is the ctest bench.durable_smoke, as bench_s3.sh's is s3.bench_smoke).
set -euo pipefail
build=$(cd "$1" && pwd)
mode=${2:-full}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
py=/usr/bin/python3

if [ "$mode" = --smoke ]; then size=32 reps=1 steps=1 mintime=0.05 cdc_params=64K/256K/1M
else size=512 reps=5 steps=20 mintime=1 cdc_params=""; fi

echo "== checkpoints for the benchmarks (real torch.save)"
$py "$here/codec_make_ckpts.py" "$work/codec" --steps "$steps" >/dev/null
$py "$here/chunker_make_ckpts.py" "$work/chunker" >/dev/null
ls -l "$work/codec"

echo "== chunker and hash throughput"
"$build/tests/bench/bench_chunker" --size "$size" --reps "$reps" "$work/codec/fp32.pt"

for f in fp32 bf16; do
    echo "== codec on $f.pt (1 MiB pieces)"
    "$build/tests/bench/bench_codec" "$work/codec/$f.pt" --min-time "$mintime"
done

echo "== client-side encryption: AES-256-GCM seal and open vs memcpy (docs/ENCRYPTION.md)"
"$build/tests/bench/bench_crypt" --size "$size" --reps "$reps"

echo "== dedup of real checkpoints: format-aware chunker vs plain CDC"
$py "$here/chunker_dedup_table.py" "$build/tests/bench/bench_dedup" "$work/chunker/pairs.tsv" $cdc_params

echo "== where a write's pages come from: new, just freed, or recycled (docs/MOUNT_MODEL.md)"
if [ "$mode" = --smoke ]; then $py "$here/bench_page_reuse.py" "$work" --size 16 --rounds 1
else $py "$here/bench_page_reuse.py" "$work" --rounds 3; $py "$here/bench_page_reuse.py" "$work" --rounds 3 --sync; fi

echo "== a create in a mount of many files, recycled-file pool off and on (docs/MOUNT_MODEL.md, rule 5)"
if [ "$mode" = --smoke ]; then "$build/tests/bench/bench_creates" --files 300 --steps 2 --reps 1
else "$build/tests/bench/bench_creates" --files 10000 --steps 3 --reps 3; fi

if [ "$mode" != --smoke ]; then
    echo "== time to durable and restore vs disk, CPU and raw S3 PUT/GET (own s3rver)"
    bash "$here/bench_durable.sh" "$build"
fi
