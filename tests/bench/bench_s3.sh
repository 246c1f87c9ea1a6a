#!/usr/bin/env bash
# bench_s3.sh BUILD_DIR [--smoke] — PUT and GET throughput of pack-sized
# objects (24 MiB) through both s3:// backends (bench_s3 with
# CKPT_S3_SIGNATURE=v2, libs3, and =v4, libcurl) against a plain
# upload/download of the same bytes to the same server with curl (SigV4,
# --parallel), same run, 1/4/8 parallel streams. Prints a markdown table:
# MB/s (10^6 bytes/s) and each backend's ratio to curl.
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

ours_run() { # v2|v4 put|get N
    CKPT_S3_SIGNATURE=$1 "$bench" "$2" "$3" "$objects" "$size" 2>/dev/null | sed -n 's/^MBps //p'
}

# Warm up every path (first requests pay for page faults and connections).
for sig in v2 v4; do
    CKPT_S3_SIGNATURE=$sig "$bench" put 2 2 "$size" >/dev/null 2>&1
    CKPT_S3_SIGNATURE=$sig "$bench" get 2 2 "$size" >/dev/null 2>&1
done
curl_run put 2 >/dev/null
curl_run get 2 >/dev/null

echo "| streams | op | v2 (libs3) MB/s | v4 (libcurl) MB/s | curl MB/s | v2 / curl | v4 / curl |"
echo "|---|---|---|---|---|---|---|"
for n in "${streams[@]}"; do
    for op in put get; do
        v2=$(ours_run v2 $op "$n")
        v4=$(ours_run v4 $op "$n")
        theirs=$(curl_run $op "$n")
        [ -n "$v2" ] && [ -n "$v4" ] || { echo "bench_s3.sh: bench_s3 $op failed" >&2; exit 1; }
        echo "| $n | ${op^^} | $v2 | $v4 | $theirs | $(ratio "$v2" "$theirs") | $(ratio "$v4" "$theirs") |"
    done
done
echo
echo "($objects objects of $((size >> 20)) MiB per cell; s3rver 3.7.1 on 127.0.0.1; $(nproc) CPUs)"
