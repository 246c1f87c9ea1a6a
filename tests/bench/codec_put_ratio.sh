#!/usr/bin/env bash
# Stored bytes of real checkpoints through the whole ingest (content-
# defined chunks, the per-file codec plan, packs and manifest), with
# `--compression auto` against `--compression lz4` (the codec before zstd
# per plane): what a step costs in the store, where bench_codec measures
# the codecs alone on fixed 1 MiB pieces (docs/BENCHMARKS.md, "Float
# codec"). A benchmark: it asserts no ratio; a failed put fails it.
#
#   tests/bench/codec_put_ratio.sh BUILD_DIR PATH...
#
# Each PATH (a file, or a directory such as a DCP step) is put alone as
# step 1 of a fresh job into a file:// store on /dev/shm, once per
# setting. Prints a markdown table: raw bytes (the files' sizes), stored
# bytes (`ckptctl put --json` stored_bytes: pack objects, chunk headers
# included) over raw for each setting, and how much smaller auto stores it.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
ckptctl=$1/tools/ckptctl
shift
[ -x "$ckptctl" ] || { echo "codec_put_ratio: $ckptctl not built" >&2; exit 2; }
shm=$(mktemp -d /dev/shm/ckpt-codec-put.XXXXXX)
trap 'rm -rf "$shm"' EXIT

# stored_bytes of one put of directory $1 with --compression $2
stored() {
    rm -rf "$shm/store" "$shm/state"
    "$ckptctl" --store "file://$shm/store" --state-dir "$shm/state" --job bench \
        put --step 1 --compression "$2" "$1" --json |
        /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["stored_bytes"])'
}

echo "| checkpoint | raw bytes | auto: stored/raw | lz4: stored/raw | auto smaller by |"
echo "|---|---|---|---|---|"
for path in "$@"; do
    [ -e "$path" ] || { echo "codec_put_ratio: $path: no such file" >&2; exit 2; }
    rm -rf "$shm/in"
    mkdir -p "$shm/in"
    cp -r "$path" "$shm/in/"
    raw=$(find "$shm/in" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
    auto=$(stored "$shm/in" auto)
    lz4=$(stored "$shm/in" lz4)
    awk -v p="$(basename "$path")" -v r="$raw" -v a="$auto" -v l="$lz4" \
        'BEGIN { printf "| %s | %d | %.3f | %.3f | %.1f%% |\n", p, r, a / r, l / r, 100 * (1 - a / l) }'
done
