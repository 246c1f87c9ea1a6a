#!/usr/bin/env bash
# Scale and memory of one ckptfs mount: time to staged and to durable, and
# the daemon's RSS, as a checkpoint grows in size, files and ranks
# (docs/BENCHMARKS.md, "Scale and memory"; the memory model: docs/MEMORY.md).
#
#   tests/bench/bench_scale.sh BUILD_DIR [--smoke] [--s3] [bench_scale.py options]
#
# bench_scale.py does the work (its docstring says what a point is and what
# is checked); this wrapper runs it with Debian's python3 and, with --s3,
# starts an s3rver on 127.0.0.1 (tests/s3/s3rver.sh) for the points' stores,
# stopped by its PID in an EXIT trap. Every point removes its own files.
#
# --smoke (CI, label bench): small points (64 MiB; 200 files; 32 ranks of
# 32 MiB) on file://, checks completion and bytes identical (read back
# through a new node's mount, one reader per rank, sha256) and the memory
# bounds of docs/MEMORY.md: the writing daemon's VmHWM under 512 MiB (the
# default target), the reading daemon's peak VmRSS under 160 MiB (this
# point's bound: 8 restorers, each fetching an 8 MiB quarter of a file, ~10
# MiB, on top of the daemon's ~30 MiB, with room to spare; 232 MiB before
# the fixed mmap threshold, ~460 MiB before the restorer bound); never a
# timing.
# Full run (the figures in docs/BENCHMARKS.md; ~40 GiB of disk at the
# 16 GiB point, under /var/tmp):
#   nice tests/bench/bench_scale.sh build --rss-cap-mib 512
#   nice tests/bench/bench_scale.sh build --s3 --points size:1024,files:1000,ranks:8
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd)
shift
args=() s3=0
for a in "$@"; do
    case "$a" in
    --s3) s3=1 ;;
    --smoke) args+=(--smoke --rss-cap-mib 512 --read-rss-cap-mib 160) ;;
    *) args+=("$a") ;;
    esac
done
py=/usr/bin/python3
[ -x "$py" ] || { echo "bench_scale: $py not found" >&2; exit 2; }
unset CKPT_STORE CKPT_JOB
if [ $s3 = 1 ]; then
    . "$here/s3lib.sh"
    s3dir=$(mktemp -d /var/tmp/ckpt-bench-scale-s3.XXXXXX)
    trap 's3lib_stop "$s3dir"; rm -rf "$s3dir"' EXIT
    s3lib_start "$s3dir"
    args+=(--store s3)
fi
"$py" "$here/bench_scale.py" --build "$build" "${args[@]}"
