#!/usr/bin/env bash
# Where `ckptctl restore`'s time goes (docs/BENCHMARKS.md, "Restore vs raw
# parallel GET"): a benchmark aid, asserts no speed.
#
#   tests/bench/profile_restore.sh BUILD_DIR [--size-mib N] [--reps N] [--before CKPTCTL]
#
# One real torch.save checkpoint (as bench_durable.sh, default 512 MiB) is
# put into s3:// on an own s3rver (127.0.0.1) and into file:// on /dev/shm.
# For each store: --reps restores (alternating with --before's, if given)
# under `perf stat -e task-clock` and /usr/bin/time, each compared byte for
# byte, then one `perf record -g` and its top symbols, self and inclusive.
# The s3rver is stopped by PID and the work dirs removed in an EXIT trap.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="" size=512 reps=3 before=""
while [ $# -gt 0 ]; do
    case "$1" in
    --size-mib) size=${2:?}; shift 2 ;;
    --reps) reps=${2:?}; shift 2 ;;
    --before) before=${2:?}; shift 2 ;;
    -*) echo "profile_restore: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
    esac
done
[ -n "$build" ] || { sed -n 5p "$0" >&2; exit 2; }
bin=$build/tools/ckptctl
for tool in perf /usr/bin/time "$bin" ${before:+"$before"}; do
    command -v "$tool" >/dev/null || { echo "profile_restore: $tool not found" >&2; exit 2; }
done
. "$here/s3lib.sh"
work=$(mktemp -d /var/tmp/ckpt-profile-restore.XXXXXX)
shm=$(mktemp -d /dev/shm/ckpt-profile-restore.XXXXXX)
cleanup() { s3lib_stop "$work/s3"; rm -rf "$work" "$shm"; }
trap cleanup EXIT
s3lib_start "$work/s3"
mkdir -p "$work/staging"
LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread /usr/bin/python3 - "$here" \
    "$work/staging/ckpt.pt" "$size" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from fuse_save_bench import model_state
torch.save(model_state(int(sys.argv[3]) << 20), sys.argv[2])
PY
restore() { # CKPTCTL STORE OUT [wrapper...]: a restore of step 1 with a fresh state dir
    local b=$1 u=$2 out=$3 st
    shift 3
    st=$(mktemp -d "$work/st.XXXXXX")
    "$@" "$b" --store "$u" --job j --state-dir "$st" --node p -q --json restore --step 1 --to "$out"
    rm -rf "$st"
}
for u in s3://ckpt-test/prof "file://$shm/store"; do
    st=$(mktemp -d "$work/st.XXXXXX")
    "$bin" --store "$u" --job j --state-dir "$st" --node p -q --json put --step 1 "$work/staging" >/dev/null
    rm -rf "$st"
    echo "== $u"
    for ((r = 1; r <= reps; r++)); do
        for b in ${before:+"$before"} "$bin"; do
            ms=$(restore "$b" "$u" "$shm/out" perf stat -x, -e task-clock 2>&1 >/dev/null | cut -d, -f1)
            cmp "$work/staging/ckpt.pt" "$shm/out/ckpt.pt"
            rm -rf "$shm/out"
            wall=$(restore "$b" "$u" "$shm/out" /usr/bin/time -f %e 2>&1 >"$work/json" | tail -1)
            rm -rf "$shm/out"
            # GETs and bytes read back for the digest (a ckptctl without the
            # counter prints "-").
            gets=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["gets"], j.get("read_back_bytes", "-"))' "$work/json")
            printf 'rep %d %s: task-clock %.0f ms, wall %s s, gets %s, read back %s\n' \
                "$r" "$b" "$ms" "$wall" "${gets% *}" "${gets#* }"
        done
    done
    restore "$bin" "$u" "$shm/out" perf record -q -g -o "$work/perf.data" >/dev/null 2>&1
    rm -rf "$shm/out"
    echo "-- self"
    perf report -i "$work/perf.data" --no-children --sort sym --stdio 2>/dev/null |
        grep -E '^ +[0-9]' | head -20 || true
    echo "-- inclusive"
    perf report -i "$work/perf.data" --children --sort sym --stdio -g none 2>/dev/null |
        grep -E 'pwrite|pread|recv|memmove|LZ4|XXH3|unshuffle|fsync' | head -16 || true
done
