#!/usr/bin/env bash
# bench_s3.sh BUILD_DIR [--smoke] — PUT and GET throughput of pack-sized
# objects (24 MiB) through the s3:// backend (bench_s3, libs3) against a
# plain upload/download of the same bytes to the same server with curl
# (SigV4, --parallel), same run, 1/4/8 parallel streams. Prints a markdown
# table: MB/s (10^6 bytes/s) and the backend/curl ratio.
#
# Starts its own s3rver (tests/s3/s3rver.sh) and stops it by PID in an EXIT
# trap. --smoke: 4 MiB objects, fewer of them, 1 and 4 streams (a CI-sized
# proof that it runs). Object data lives in /dev/shm when there is room, so
# curl reads no disk.
#
# s3rver is one Node.js thread: it, not the client, is the limit here (see
# docs/S3.md); the ratio is what this measures.
set -euo pipefail
build=${1:?usage: bench_s3.sh BUILD_DIR [--smoke]}
smoke=0
[ "${2:-}" = --smoke ] && smoke=1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/s3lib.sh"
bench=$build/tests/bench/bench_s3
[ -x "$bench" ] || { echo "bench_s3.sh: $bench not built" >&2; exit 2; }

if ((smoke)); then
    size=$((4 << 20)) objects=4 streams=(1 4)
else
    size=$((24 << 20)) objects=16 streams=(1 4 8)
fi

work=$(mktemp -d /tmp/ckpt-bench-s3-XXXXXX)
tmpd=$work
[ -d /dev/shm ] && [ "$(df -k --output=avail /dev/shm | tail -1)" -gt $((size / 1024 * 2)) ] &&
    tmpd=$(mktemp -d /dev/shm/ckpt-bench-s3-XXXXXX)
cleanup() {
    s3lib_stop "$work/s3"
    rm -rf "$work" "$tmpd"
}
trap cleanup EXIT

s3lib_start "$work/s3"
url=$S3_URL
head -c "$size" /dev/urandom >"$tmpd/pack"

# curl: OBJECTS transfers, at most N at once, one process (like one client).
curl_run() { # put|get N
    local args=() i
    for ((i = 0; i < objects; i++)); do
        if [ "$1" = put ]; then
            args+=(-T "$tmpd/pack" "$url/curl/o$i")
        else
            args+=(-o /dev/null "$url/curl/o$i")
        fi
    done
    local t0
    t0=$(now)
    s3lib_curl "$2" "${args[@]}"
    mbps $((size * objects)) "$(since "$t0")"
}

ours_run() { # put|get N
    "$bench" "$1" "$2" "$objects" "$size" 2>/dev/null | sed -n 's/^MBps //p'
}

# Warm up both paths (first requests pay for page faults and connections).
"$bench" put 2 2 "$size" >/dev/null 2>&1
"$bench" get 2 2 "$size" >/dev/null 2>&1
curl_run put 2 >/dev/null
curl_run get 2 >/dev/null

echo "| streams | op | s3:// backend MB/s | curl MB/s | backend / curl |"
echo "|---|---|---|---|---|"
for n in "${streams[@]}"; do
    for op in put get; do
        ours=$(ours_run $op "$n")
        theirs=$(curl_run $op "$n")
        [ -n "$ours" ] || { echo "bench_s3.sh: bench_s3 $op failed" >&2; exit 1; }
        echo "| $n | ${op^^} | $ours | $theirs | $(ratio "$ours" "$theirs") |"
    done
done
echo
echo "($objects objects of $((size >> 20)) MiB per cell; s3rver 3.7.1 on 127.0.0.1; $(nproc) CPUs)"
