#!/usr/bin/env bash
# bench_s3.sh BUILD_DIR [--smoke] [--servers s3rver,rgw] — PUT and GET
# throughput of pack-sized objects (24 MiB) through both s3:// backends
# (bench_s3 with CKPT_S3_SIGNATURE=v2, libs3, and =v4, libcurl) against a
# plain upload/download of the same bytes to the same server with curl
# (SigV4, --parallel), same run, 1/4/8 parallel streams. Prints a markdown
# table per server: MB/s (10^6 bytes/s) and each backend's ratio to curl.
#
# Servers, in one run: s3rver (tests/s3/s3rver.sh) and Ceph's RADOS Gateway
# on a throw-away bluestore cluster (tests/s3/rgw.sh); each is started here
# and stopped by PID in an EXIT trap. For RGW it also reports what the
# cluster costs: its start time and the RSS of ceph-mon, ceph-osd and
# radosgw idle (before the benchmark) and after it.
#
# --smoke: 4 MiB objects, fewer of them, 1 and 4 streams, s3rver only (a
# CI-sized proof that it runs); --servers picks the servers either way.
# Object data lives in /dev/shm when there is room, so curl reads no disk.
#
# Both servers here are limited by the machine's 2 CPUs, not by the client
# (see docs/S3.md); the ratio in a row is what this measures.
set -euo pipefail
build=${1:?usage: bench_s3.sh BUILD_DIR [--smoke] [--servers s3rver,rgw]}
shift
smoke=0 servers=""
while [ $# -gt 0 ]; do
    case $1 in
    --smoke) smoke=1; shift ;;
    --servers) servers=${2:?--servers needs a list}; shift 2 ;;
    *) echo "bench_s3.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
here=$(cd "$(dirname "$0")" && pwd)
rgw_sh=$here/../s3/rgw.sh
. "$here/s3lib.sh"
bench=$build/tests/bench/bench_s3
[ -x "$bench" ] || { echo "bench_s3.sh: $bench not built" >&2; exit 2; }

if ((smoke)); then
    size=$((4 << 20)) objects=4 streams=(1 4)
    : "${servers:=s3rver}"
else
    size=$((24 << 20)) objects=16 streams=(1 4 8)
    : "${servers:=s3rver,rgw}"
fi

work=$(mktemp -d /var/tmp/ckpt-bench-s3-XXXXXX)
tmpd=$work
[ -d /dev/shm ] && [ "$(df -k --output=avail /dev/shm | tail -1)" -gt $((size / 1024 * 2)) ] &&
    tmpd=$(mktemp -d /dev/shm/ckpt-bench-s3-XXXXXX)
cleanup() {
    s3lib_stop "$work/s3"
    [ -d "$work/rgw" ] && { bash "$rgw_sh" stop "$work/rgw" || true; }
    rm -rf "$work" "$tmpd"
}
trap cleanup EXIT
head -c "$size" /dev/urandom >"$tmpd/pack"

# curl: OBJECTS transfers, at most N at once, one process (like one client).
curl_run() { # put|get N
    local args=() i
    for ((i = 0; i < objects; i++)); do
        if [ "$1" = put ]; then
            args+=(-T "$tmpd/pack" "$S3_URL/curl/o$i")
        else
            args+=(-o /dev/null "$S3_URL/curl/o$i")
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

# One table against the server s3lib_start/s3lib_use pointed at.
table() { # TITLE
    # Warm up every path (first requests pay for page faults and connections).
    for sig in v2 v4; do
        CKPT_S3_SIGNATURE=$sig "$bench" put 2 2 "$size" >/dev/null 2>&1
        CKPT_S3_SIGNATURE=$sig "$bench" get 2 2 "$size" >/dev/null 2>&1
    done
    curl_run put 2 >/dev/null
    curl_run get 2 >/dev/null

    echo "### $1"
    echo
    echo "| streams | op | v2 (libs3) MB/s | v4 (libcurl) MB/s | curl MB/s | v2 / curl | v4 / curl |"
    echo "|---|---|---|---|---|---|---|"
    local n op v2 v4 theirs
    for n in "${streams[@]}"; do
        for op in put get; do
            v2=$(ours_run v2 $op "$n")
            v4=$(ours_run v4 $op "$n")
            theirs=$(curl_run $op "$n")
            [ -n "$v2" ] && [ -n "$v4" ] || { echo "bench_s3.sh: bench_s3 $op failed on $1" >&2; exit 1; }
            echo "| $n | ${op^^} | $v2 | $v4 | $theirs | $(ratio "$v2" "$theirs") | $(ratio "$v4" "$theirs") |"
        done
    done
    echo
    echo "($objects objects of $((size >> 20)) MiB per cell; $(nproc) CPUs; load average before: $load0)"
    echo
}

rss_line() { bash "$rgw_sh" rss "$work/rgw" | awk '{ printf "%s %.0f MiB  ", $1, $2 / 1024 }'; }

for server in ${servers//,/ }; do
    load0=$(cut -d' ' -f1-3 /proc/loadavg)
    case $server in
    s3rver)
        s3lib_start "$work/s3"
        table "s3rver 3.7.1 on 127.0.0.1"
        s3lib_stop "$work/s3"
        ;;
    rgw)
        env_file=$(bash "$rgw_sh" start "$work/rgw" --owner $$)
        # shellcheck disable=SC1090
        . "$env_file"
        s3lib_use "$RGW_ENDPOINT" "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY"
        sleep 5 # settle: the idle RSS is measured after the start's bursts
        idle=$(rss_line)
        table "Ceph RGW $(radosgw --version 2>/dev/null | awk '{ print $3 }') (one mon, one bluestore OSD, radosgw; 127.0.0.1)"
        echo "RGW cluster: up in $(cat "$RGW_DIR/start_seconds") s; RSS idle: $idle; after the benchmark: $(rss_line)"
        echo
        bash "$rgw_sh" stop "$work/rgw"
        ;;
    *) echo "bench_s3.sh: unknown server $server (s3rver, rgw)" >&2; exit 2 ;;
    esac
done
