#!/usr/bin/env bash
# What client-side encryption (docs/ENCRYPTION.md) costs a whole put and a
# whole restore of a real checkpoint, against the same without a key, in one
# run: `ckptctl put` of CKPT_DIR as step 1 of a fresh job into a fresh
# file:// store on /dev/shm (fresh local state: every chunk is new), then
# `ckptctl restore` of it into /dev/shm, with and without
# --encryption-key-file, alternating which goes first, REPS times each.
# Prints a markdown table: median put and restore MB/s (10^6 bytes of the
# checkpoint's files per second of wall time) and the bytes in the store
# (every object: packs, manifest, part record, marker). A benchmark: it
# asserts no figure; a failed put or restore, or restored bytes that differ,
# fail it.
#
#   tests/bench/encrypt_put_restore.sh BUILD_DIR CKPT_DIR [REPS]
#
# CKPT_DIR: e.g. the trained checkpoints tests/bench/codec_make_ckpts.py
# writes (/tmp/codec-ckpt). REPS: default 5.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
ckptctl=$1/tools/ckptctl
src=$2
reps=${3:-5}
[ -x "$ckptctl" ] || { echo "encrypt_put_restore: $ckptctl not built" >&2; exit 2; }
[ -d "$src" ] || { echo "encrypt_put_restore: $src is not a directory" >&2; exit 2; }
shm=$(mktemp -d /dev/shm/ckpt-enc-bench.XXXXXX)
trap 'rm -rf "$shm"' EXIT
"$ckptctl" keygen "$shm/key" > /dev/null
raw=$(find "$src" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')

now() { date +%s.%N; }

# One put and restore; appends "mode put_s restore_s stored_bytes" to $shm/runs.
run() {
    local mode=$1 key=()
    [ "$mode" = on ] && key=(--encryption-key-file "$shm/key")
    rm -rf "$shm/store" "$shm/state" "$shm/out"
    local ctl=("$ckptctl" --store "file://$shm/store" --state-dir "$shm/state" --job bench
               "${key[@]}")
    local t0 t1 t2
    t0=$(now)
    "${ctl[@]}" put --step 1 "$src" > /dev/null
    t1=$(now)
    "${ctl[@]}" restore --step 1 --to "$shm/out" > /dev/null
    t2=$(now)
    diff -r "$src" "$shm/out" > /dev/null ||
        { echo "encrypt_put_restore: restored bytes differ ($mode)" >&2; exit 1; }
    local stored
    stored=$(find "$shm/store" -type f -printf '%s\n' | awk '{ s += $1 } END { print s }')
    echo "$mode $(echo "$t1 - $t0" | bc -l) $(echo "$t2 - $t1" | bc -l) $stored" >> "$shm/runs"
}

run off # warm-up: page cache, libraries
: > "$shm/runs"
for ((i = 0; i < reps; i++)); do
    if ((i % 2)); then run on; run off; else run off; run on; fi
done

/usr/bin/python3 - "$shm/runs" "$raw" "$reps" <<'EOF'
import statistics, sys
runs, raw, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
by = {"off": [], "on": []}
for line in open(runs):
    mode, put, restore, stored = line.split()
    by[mode].append((float(put), float(restore), int(stored)))
print("| %d MB checkpoint, %s runs each | put MB/s (median) | restore MB/s (median) "
      "| stored bytes |" % (raw // 10**6, reps))
print("|---|---|---|---|")
med = {}
for mode in ("off", "on"):
    put = statistics.median(r[0] for r in by[mode])
    restore = statistics.median(r[1] for r in by[mode])
    stored = by[mode][0][2]
    med[mode] = (put, restore, stored)
    print("| encryption %s | %.0f | %.0f | %d |" % (mode, raw / put / 1e6, raw / restore / 1e6,
                                                    stored))
off, on = med["off"], med["on"]
print("| on / off | %.2f | %.2f | %+.4f%% |" % (off[0] / on[0], off[1] / on[1],
                                                 100.0 * (on[2] - off[2]) / off[2]))
EOF
