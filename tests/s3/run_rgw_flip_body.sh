#!/usr/bin/env bash
# run_rgw_flip_body.sh CKPTCTL — a PUT body altered in flight is refused by
# Ceph RGW, and ckptctl retries it until the store holds the right bytes.
# Runs under with_rgw.sh (RGW_ENDPOINT set).
#
# faultproxy.py stands between ckptctl and RGW and flips one bit in the
# middle of half the request bodies (flip_body=0.5, seeded: FAULT_SEED).
# The signed x-amz-content-sha256 then no longer matches the body, so RGW
# answers 400 XAmzContentSHA256Mismatch (or BadDigest), which the V4
# backend takes as transient. Checked:
#   * the put succeeds, and a restore straight from RGW (no proxy) is
#     bit-exact;
#   * the proxy flipped at least one body, and every flipped body got RGW's
#     digest refusal (the proxy counts the answers by their S3 error code),
#     so it is RGW that refused, not the proxy or ckptctl;
#   * the proxy saw exactly one PUT more per flipped body than ckptctl
#     reports (its retries), plus the two empty PUTs of the backend's probe
#     for conditional PUT (docs/S3.md, "Conditional PUT"), below the count.
# The proxy is stopped by PID in the EXIT trap (and by --owner-pid if this
# script is killed); the put and the restore are bounded by timeout.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ckptctl=${1:?usage: run_rgw_flip_body.sh CKPTCTL}
me=run_rgw_flip_body
# shellcheck source=testlib.sh
. "$here/testlib.sh"
s3t_rgw_client /var/tmp/ckpt-flip-body.XXXXXX

seed=${FAULT_SEED:-4242}
"$py" "$here/faultproxy.py" --target-port "${RGW_ENDPOINT##*:}" --port-file "$work/proxy.port" \
    --pid-file "$work/proxy.pid" --stats-file "$work/stats.json" --seed "$seed" \
    --owner-pid $$ --faults flip_body=0.5 2>"$work/proxy.log" &
proxy_pid=$!
s3t_wait_file "$work/proxy.port" "$proxy_pid" "$work/proxy.log" "the fault proxy"
proxied=http://127.0.0.1:$(cat "$work/proxy.port")
echo "$me: RGW at $RGW_ENDPOINT, flipping proxy at $proxied (seed $seed)"

# Two packs of random bytes and a bundle of small files: five PUTs or so.
mkdir -p "$work/src/step-1"
head -c 30000000 /dev/urandom >"$work/src/step-1/weights.bin"
for i in $(seq 20); do head -c 20000 /dev/urandom >"$work/src/step-1/shard-$i.bin"; done
store=s3://$RGW_BUCKET/flip-body-$RANDOM

timeout 300 "$ckptctl" --s3-endpoint "$proxied" --store "$store" --job j put --step 1 --json \
    "$work/src" >"$work/put.json"
timeout 300 "$ckptctl" --s3-endpoint "$RGW_ENDPOINT" --store "$store" --job j restore --step 1 \
    --to "$work/dst" >"$work/restore.out"
diff -r "$work/src" "$work/dst" || { echo "$me: the restored tree differs" >&2; exit 1; }

s3t_stop proxy_pid # writes the final stats
"$py" - "$work/stats.json" "$work/put.json" <<'EOF'
import json, sys
stats = json.load(open(sys.argv[1]))
put = json.load(open(sys.argv[2]))
flipped = stats["flip_body"]
refused = {k[len("flip_body_answer_"):]: v for k, v in stats.items()
           if k.startswith("flip_body_answer_")}
digest = sum(v for k, v in refused.items()
             if k in ("XAmzContentSHA256Mismatch", "BadDigest", "InvalidDigest"))
puts = put.get("puts")
print("run_rgw_flip_body: %d bodies flipped, RGW answered %s; %d PUTs at the proxy, "
      "%s PUTs reported by ckptctl" % (flipped, refused, stats.get("method_PUT", 0), puts))
assert flipped >= 1, "no body was flipped: the test proves nothing (another FAULT_SEED?)"
assert digest == flipped, "not every flipped body was refused with a digest error: %s" % refused
probe = 2  # a plain PUT and a create of the probe object, not among ckptctl's puts
assert puts is not None and stats["method_PUT"] == puts + flipped + probe, \
    "PUTs at the proxy != ckptctl's PUTs + one retry per flipped body + the probe's 2"
EOF
status=0
echo "$me: passed"
