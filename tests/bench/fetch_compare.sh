#!/usr/bin/env bash
# A new node's fetch of one large file through the mount, two builds side by
# side in one run (docs/BENCHMARKS.md, "A new node's fetch of a 1 GiB file
# through the mount"): a benchmark aid, asserts no speed, only that every
# byte read through the mount is the file's.
#
#   tests/bench/fetch_compare.sh BEFORE_BUILD AFTER_BUILD [--size-mib N] [--reps N]
#
# One file of --size-mib (default 1024) random bytes is put into an own
# s3rver (127.0.0.1) with AFTER's ckptctl. Each repetition, for each build
# (order alternating): ckptfs mounted on an empty staging, the file read
# whole (sha256sum) through it; printed: wall seconds of the read, the
# daemon's CPU seconds (utime + stime), its store GETs (.ckptfs/metrics) and
# the bytes it read back for the whole-file digest (.ckptfs/status; "-" for
# a build without the counter). Unmounts in an EXIT trap and stops the
# daemon and the s3rver by PID; work files are removed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
builds=() size=1024 reps=2
while [ $# -gt 0 ]; do
    case "$1" in
    --size-mib) size=${2:?}; shift 2 ;;
    --reps) reps=${2:?}; shift 2 ;;
    -*) echo "fetch_compare: unknown option $1" >&2; exit 2 ;;
    *) builds+=("$1"); shift ;;
    esac
done
[ ${#builds[@]} -eq 2 ] || { sed -n 7p "$0" >&2; exit 2; }
. "$here/s3lib.sh"
work=$(mktemp -d /var/tmp/ckpt-fetch-compare.XXXXXX)
mnt=$work/mnt daemon_pid=""
cleanup() {
    s3lib_unmount "$mnt" "$daemon_pid"
    s3lib_stop "$work/s3"
    rm -rf "$work"
}
trap cleanup EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
s3lib_start "$work/s3"
store=s3://ckpt-test/fetch
mkdir -p "$work/src" "$mnt"
head -c "$((size << 20))" /dev/urandom >"$work/src/big.bin"
want=$(sha256sum <"$work/src/big.bin" | cut -d' ' -f1)
"${builds[1]}/tools/ckptctl" --store "$store" --job j --state-dir "$work/state" --node w -q \
    put --step 1 "$work/src"
rm -f "$work/src/big.bin"
json_get() { # FILE EXPR: a field of the JSON file, "-" if missing
    python3 -c 'import json,sys
try: print(eval(sys.argv[2], {"d": json.load(open(sys.argv[1]))}))
except (KeyError, TypeError): print("-")' "$1" "$2"
}
fetch_once() { # BUILD
    rm -rf "$work/staging"
    sync
    "$1/fs/ckptfs" "$mnt" --store "$store" --staging "$work/staging" --node "n$RANDOM" -f \
        >>"$work/ckptfs.log" 2>&1 &
    daemon_pid=$!
    local due=$((SECONDS + 30)) t0 secs got gets cpu
    until [ -e "$mnt/j/big.bin" ] 2>/dev/null; do
        kill -0 "$daemon_pid" 2>/dev/null || { tail -20 "$work/ckptfs.log" >&2; return 1; }
        [ $SECONDS -lt $due ] || { echo "fetch_compare: no file after 30 s" >&2; return 1; }
        sleep 0.05
    done
    t0=$(now)
    got=$(sha256sum <"$mnt/j/big.bin" | cut -d' ' -f1)
    secs=$(since "$t0")
    [ "$got" = "$want" ] || { echo "fetch_compare: bytes differ ($1)" >&2; return 1; }
    gets=$(awk '/^ckptfs_store_requests_total\{/ && /kind="get"/ { n += $NF } END { print n + 0 }' \
        "$mnt/.ckptfs/metrics")
    cp "$mnt/.ckptfs/status" "$work/status.json"
    cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' \
        "/proc/$daemon_pid/stat")
    fusermount3 -u "$mnt"
    wait "$daemon_pid"
    daemon_pid=""
    printf '%s: read %s s, daemon CPU %s s, GETs %s, read back %s\n' "$1" "$secs" "$cpu" \
        "$gets" "$(json_get "$work/status.json" 'd["warmup"]["read_back_bytes"]')"
}
for ((r = 1; r <= reps; r++)); do
    order=("${builds[@]}")
    [ $((r % 2)) -eq 1 ] || order=("${builds[1]}" "${builds[0]}")
    for b in "${order[@]}"; do
        echo -n "rep $r "
        fetch_once "$b"
    done
done
