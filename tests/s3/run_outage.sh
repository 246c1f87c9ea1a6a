#!/usr/bin/env bash
# run_outage.sh DRIVER [OUTAGE_S [WHAT]] — the S3 server goes away in the
# middle of a sequence of uploads and comes back: the uploads complete after
# recovery, none fails, nothing is lost.
#
# WHAT is what goes away:
#   s3rver   (default) an s3rver this script starts (SIGTERM by PID);
#   rgw      radosgw of the Ceph cluster in $RGW_DIR (run under
#            tests/s3/with_rgw.sh, which sets the endpoint and keys): its
#            clients get connection errors;
#   osd      the cluster's only OSD: radosgw keeps answering, but every
#            request that touches RADOS stalls until RGW's rados op timeout
#            (10 s, tests/s3/rgw.sh) and then fails with HTTP 408/5xx.
#
#   1. start s3rver; start "s3_fault_driver outage 40" (1 MiB puts, one every
#      200 ms, the default retry policy: 12 tries, waits of 100 ms doubling
#      to 10 s with equal jitter, 26 to 53 s in total);
#   2. after 5 completed puts, stop s3rver (SIGTERM by PID): requests in
#      flight are cut, new ones are refused;
#   3. OUTAGE_S seconds later (default 20, the issue's figure; the retry
#      policy covers at least 26 s), start it again on the same port with the
#      same data directory;
#   4. the driver must finish with every put ok, then list and read back all
#      40 objects intact; the longest put must have spanned the outage.
#
# Both servers and the driver are stopped by PID in an EXIT trap; bounded
# waits everywhere (the driver gets 240 s).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:?usage: run_outage.sh S3_FAULT_DRIVER [OUTAGE_S]}
outage=${2:-20}
what=${3:-s3rver}
n=40
case $what in
s3rver) ;;
rgw | osd) [ -n "${RGW_DIR:-}" ] || { echo "run_outage: $what needs RGW_DIR (run it under with_rgw.sh)" >&2; exit 2; } ;;
*) echo "run_outage: unknown server part '$what' (s3rver, rgw or osd)" >&2; exit 2 ;;
esac

work=$(mktemp -d /tmp/ckpt-s3outage-XXXXXX)
driver_pid=""
status=1
cleanup() {
    [ -n "$driver_pid" ] && kill "$driver_pid" 2>/dev/null || true
    if [ "$what" = s3rver ]; then
        bash "$here/s3rver.sh" stop "$work/s3" || true
    elif [ -n "$down" ]; then
        server_up || true
    fi
    if [ "$status" = 0 ]; then
        rm -rf "$work"
    else
        echo "run_outage: failed; logs kept in $work" >&2
    fi
}
down=""
server_down() {
    case $what in
    s3rver) bash "$here/s3rver.sh" stop "$work/s3" ;;
    *) bash "$here/rgw.sh" "stop-$what" "$RGW_DIR" ;;
    esac
    down=1
}
server_up() {
    case $what in
    s3rver) bash "$here/s3rver.sh" start "$work/s3" --owner $$ --port "$port" >/dev/null ;;
    *) bash "$here/rgw.sh" "start-$what" "$RGW_DIR" ;;
    esac
    down=""
}
trap cleanup EXIT

if [ "$what" = s3rver ]; then
    port=$(bash "$here/s3rver.sh" start "$work/s3" --owner $$)
    export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
    export CKPT_S3_ENDPOINT=http://127.0.0.1:$port
fi
echo "run_outage: $what down for $outage s after the 5th of $n uploads to $CKPT_S3_ENDPOINT"
: >"$work/progress"
timeout 240 "$driver" outage "$n" "$work/progress" >"$work/driver.out" 2>"$work/driver.err" &
driver_pid=$!

done_puts() { wc -l <"$work/progress"; }
for ((i = 0; i < 300 && $(done_puts) < 5; i++)); do
    kill -0 "$driver_pid" 2>/dev/null || break
    sleep 0.1
done
[ "$(done_puts)" -ge 5 ] || { echo "run_outage: the first 5 uploads did not complete" >&2; cat "$work/driver.err" >&2; exit 1; }

server_down
t_down=$(date +%s.%N)
echo "run_outage: $what stopped after $(done_puts) uploads"
sleep "$outage"
before=$(done_puts)
server_up
echo "run_outage: $what back after $(awk -v a="$(date +%s.%N)" -v b="$t_down" 'BEGIN { printf "%.1f", a - b }') s; $before uploads done by then"
if [ "$before" -ge "$n" ]; then
    echo "run_outage: the uploads were over before the server came back: no outage was tested" >&2
    exit 1
fi

rc=0
wait "$driver_pid" || rc=$?
driver_pid=""
cat "$work/driver.err"
if [ "$rc" != 0 ]; then
    echo "run_outage: driver failed (status $rc)" >&2
    exit 1
fi
grep -q ' FAIL ' "$work/progress" && { echo "run_outage: an upload failed" >&2; exit 1; }
longest=$(sed -n 's/^longest_put_s //p' "$work/driver.out")
# The put that hit the outage waited for the server: it took most of it.
if ! awk -v l="$longest" -v o="$outage" 'BEGIN { exit !(l >= o * 0.7) }'; then
    echo "run_outage: longest put $longest s is shorter than the outage ($outage s)?" >&2
    exit 1
fi
status=0
echo "run_outage: ok ($n uploads, none failed, none lost; longest put $longest s)"
