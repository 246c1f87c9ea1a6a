#!/usr/bin/env bash
# run_rgw_cond_put.sh DRIVER CKPTCTL — conditional creates on Ceph RGW
# (docs/S3.md, "Conditional PUT"). Runs under with_rgw.sh (RGW_ENDPOINT set).
#
#   * RGW's answer, probed by the backend at its first create and logged
#     once: "supported"; a create of an existing key is refused (the driver's
#     `create`), and a plain curl create gets 412 PreconditionFailed;
#   * two lease claims for one node name, one held between its read and its
#     create: exactly one holds the name (`race`);
#   * faultproxy.py drops the answer to the first pack PUT and the first
#     manifest PUT after RGW stored them (--fault-match, --fault-max 1): the
#     driver's creates are retried, meet their own objects (412) and succeed
#     (`lost`); then a ckptctl put through the same kind of proxy succeeds
#     and a restore straight from RGW is bit-exact.
# The proxies are stopped by PID in the EXIT trap (and by --owner-pid if
# this script is killed); every client run is bounded by timeout, and the
# hold is released by the driver itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:?usage: run_rgw_cond_put.sh DRIVER CKPTCTL}
ckptctl=${2:?usage: run_rgw_cond_put.sh DRIVER CKPTCTL}
me=run_rgw_cond_put
# shellcheck source=testlib.sh
. "$here/testlib.sh"
s3t_rgw_client /var/tmp/ckpt-cond-put.XXXXXX
run=cond-$RANDOM

# A proxy that loses the answer to the first PUT matching each expression.
start_proxy() { # NAME REGEX...
    local name=$1 args=()
    shift
    for rx in "$@"; do args+=(--fault-match "$rx"); done
    "$py" "$here/faultproxy.py" --target-port "${RGW_ENDPOINT##*:}" \
        --port-file "$work/$name.port" --stats-file "$work/$name.json" --owner-pid $$ \
        --faults drop_resp=1 --fault-max 1 "${args[@]}" 2>"$work/$name.log" &
    proxy_pid=$!
    s3t_wait_file "$work/$name.port" "$proxy_pid" "$work/$name.log" "the fault proxy"
    proxied=http://127.0.0.1:$(cat "$work/$name.port")
}

# 1. RGW creates: the probe's answer in the log, and a create refused.
timeout 60 "$driver" create "$RGW_ENDPOINT" "$run/create" 2>"$work/create.err"
grep -q "conditional PUT (If-None-Match) supported" "$work/create.err" ||
    { cat "$work/create.err" >&2; echo "$me: the probe did not find RGW's support" >&2; exit 1; }
[ "$(grep -c "conditional PUT" "$work/create.err")" = 1 ] ||
    { echo "$me: the probe's answer was not logged exactly once" >&2; exit 1; }
printf 'user = "%s:%s"\n' "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" >"$work/curl.cfg"
curl_put() { # KEY
    curl -s -K "$work/curl.cfg" --aws-sigv4 "aws:amz:us-east-1:s3" -X PUT --data-binary x \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -H "If-None-Match: *" -o /dev/null \
        -w '%{http_code}' --max-time 20 "$RGW_ENDPOINT/$RGW_BUCKET/$run/$1"
}
first=$(curl_put curl/probe) second=$(curl_put curl/probe)
echo "$me: RGW answers If-None-Match: * with $first for a new key, $second for an existing one"
[ "$first" = 200 ] && [ "$second" = 412 ] || { echo "$me: RGW's answers changed" >&2; exit 1; }

# 2. Two claims of one node name: exactly one holds it.
timeout 120 "$driver" race "$RGW_ENDPOINT" "$run/race" "$work/race-hold"

# 3. Lost answers to creates that RGW carried out.
start_proxy lost '^PUT [^ ]*/jobs/j/packs/' '^PUT [^ ]*\.manifest '
timeout 120 "$driver" lost "$proxied" "$run/lost"
s3t_stop proxy_pid # writes the final stats
"$py" - "$work/lost.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["drop_resp"] == 2, "the proxy dropped %d answers, not 2: %s" % (s["drop_resp"], s)
PY

# 4. The same through ckptctl: a pack and the manifest lose their answers.
mkdir -p "$work/src/step-1"
head -c 3000000 /dev/urandom >"$work/src/step-1/weights.bin"
echo small >"$work/src/step-1/meta.json"
start_proxy put '^PUT [^ ]*/packs/' '^PUT [^ ]*\.manifest '
store=s3://$RGW_BUCKET/$run/put
timeout 300 "$ckptctl" --s3-endpoint "$proxied" --store "$store" --job j put --step 1 \
    "$work/src" >"$work/put.out" 2>"$work/put.err"
s3t_stop proxy_pid
timeout 300 "$ckptctl" --s3-endpoint "$RGW_ENDPOINT" --store "$store" --job j restore --step 1 \
    --to "$work/dst" >"$work/restore.out"
diff -r "$work/src" "$work/dst" || { echo "$me: the restored tree differs" >&2; exit 1; }
"$py" - "$work/put.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["drop_resp"] == 2, "the proxy dropped %d answers, not 2: %s" % (s["drop_resp"], s)
PY
status=0
echo "$me: passed"
