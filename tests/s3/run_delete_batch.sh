#!/usr/bin/env bash
# run_delete_batch.sh DRIVER — proves at the wire that the V4 backend's
# batched delete (S3 DeleteObjects, docs/S3.md) deletes many keys per HTTP
# request, and that the V2 one (libs3: no DeleteObjects) falls back to one
# DELETE per key. DRIVER is s3_delete_batch (tests/s3/s3_delete_batch.c).
#
# Per signature: the driver puts N objects straight to the server, then
# deletes them with one st_del_many through faultproxy.py with no faults,
# which counts the requests it forwards (its stats file, written when it is
# stopped); then checks at the server that nothing is left.
#   V4: N = 1200 keys -> 2 requests (ST_DEL_BATCH_MAX = 1000 per request)
#   V2: N = 50 keys   -> 50 requests
#
# The server: with CKPT_TEST_S3_ENDPOINT set (tests/s3/with_rgw.sh: Ceph
# RGW, its keys in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) that one;
# otherwise a strict s3rver this script starts (tests/s3/s3rver.sh). The
# proxy and s3rver are stopped by PID in an EXIT trap; every driver run is
# bounded by timeout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:?usage: run_delete_batch.sh S3_DELETE_BATCH}
me=run_delete_batch
# shellcheck source=testlib.sh
. "$here/testlib.sh"
s3t_python

s3t_work /tmp/ckpt-s3delbatch-XXXXXX
proxy_pid="" started_s3rver=0
cleanup() {
    s3t_stop proxy_pid
    [ "$started_s3rver" = 1 ] && bash "$here/s3rver.sh" stop "$work/s3" || true
    s3t_finish
}
trap cleanup EXIT

if [ -n "${CKPT_TEST_S3_ENDPOINT:-}" ]; then
    server=$CKPT_TEST_S3_ENDPOINT
    what="the server at $server"
else
    port=$(bash "$here/s3rver.sh" start "$work/s3" --strict --bucket ckpt-test --owner $$)
    started_s3rver=1
    server=http://127.0.0.1:$port
    export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
    what="strict s3rver at $server"
fi
server_port=${server##*:}

start_proxy() { # STATS_FILE
    rm -f "$work/proxy.port"
    "$py" "$here/faultproxy.py" --target-port "$server_port" --port-file "$work/proxy.port" \
        --pid-file "$work/proxy.pid" --stats-file "$1" --owner-pid $$ --faults "" \
        2>>"$work/proxy.log" &
    proxy_pid=$!
    s3t_wait_file "$work/proxy.port" "$proxy_pid" "$work/proxy.log" "the proxy"
}

one_signature() { # v2|v4 N EXPECTED_REQUESTS
    local sig=$1 n=$2 want=$3 prefix=batch-$1-$$ got
    export CKPT_S3_SIGNATURE=$sig
    CKPT_S3_ENDPOINT=$server timeout 300 "$driver" put "$n" "$prefix"
    start_proxy "$work/stats-$sig.json"
    CKPT_S3_ENDPOINT=http://127.0.0.1:$(cat "$work/proxy.port") timeout 120 \
        "$driver" del "$n" "$prefix"
    s3t_stop proxy_pid
    got=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["requests"])' \
        "$work/stats-$sig.json")
    # Checked with V4: libs3's V2 listing signature does not match s3rver's.
    CKPT_S3_SIGNATURE=v4 CKPT_S3_ENDPOINT=$server timeout 60 "$driver" check "$prefix"
    echo "run_delete_batch: $sig: $n keys deleted in $got HTTP requests (want $want) on $what"
    [ "$got" = "$want" ] || { echo "run_delete_batch: $sig: wrong request count" >&2; exit 1; }
}

one_signature v4 1200 2
one_signature v2 50 50
status=0
echo "run_delete_batch: ok"
