#!/usr/bin/env bash
# run_faults.sh DRIVER — the fault-injection test: s3rver behind
# faultproxy.py, which answers 500/503, drops requests and replies, cuts
# uploads and stalls, at a few percent of requests each; the driver
# (s3_fault_driver faults) must see no error and no wrong byte.
#
# Starts its own s3rver and proxy, stops both by PID in an EXIT trap (and
# both also stop by themselves if this script is killed: s3rver's watchdog
# and the proxy's --owner-pid). Bounded: the driver gets 480 s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:?usage: run_faults.sh S3_FAULT_DRIVER}
me=run_faults
# shellcheck source=testlib.sh
. "$here/testlib.sh"
s3t_python

s3t_work /tmp/ckpt-s3faults-XXXXXX
proxy_pid=""
cleanup() {
    s3t_stop proxy_pid
    bash "$here/s3rver.sh" stop "$work/s3" || true
    s3t_finish
}
trap cleanup EXIT

s3port=$(bash "$here/s3rver.sh" start "$work/s3" --owner $$)
# Rates per request. Stalls cost the driver's 1.5 s stall timeout each, so
# they are rarer than the rest.
faults=e500=0.03,e503=0.03,drop_req=0.03,drop_resp=0.03,cut_body=0.05,stall=0.004
"$py" "$here/faultproxy.py" --target-port "$s3port" --port-file "$work/proxy.port" \
    --pid-file "$work/proxy.pid" --stats-file "$work/stats.json" --seed "${FAULT_SEED:-4242}" \
    --stall-s 3 --owner-pid $$ --faults "$faults" 2>"$work/proxy.log" &
proxy_pid=$!
s3t_wait_file "$work/proxy.port" "$proxy_pid" "$work/proxy.log" "the fault proxy"
pport=$(cat "$work/proxy.port")
echo "run_faults: s3rver on $s3port, fault proxy on $pport ($faults)"

export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export CKPT_S3_ENDPOINT=http://127.0.0.1:$pport
rc=0
timeout 480 "$driver" faults || rc=$?

s3t_stop proxy_pid
echo "run_faults: proxy counts: $(tr -d '\n ' <"$work/stats.json")"
if [ "$rc" != 0 ]; then
    echo "run_faults: driver failed (status $rc)" >&2
    exit 1
fi
# Every kind of fault was injected at least once: the test tested something.
"$py" - "$work/stats.json" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1]))
missing = [f for f in ("e500", "e503", "drop_req", "drop_resp", "cut_body", "stall") if not c.get(f)]
if missing:
    sys.exit("run_faults: no %s fault was injected; raise the rates" % ", ".join(missing))
EOF
status=0
echo "run_faults: ok"
