#!/usr/bin/env bash
# test_rgw_harness.sh — self-test of tests/s3/rgw.sh, the interface other
# tests build on: one memstore cluster with HTTPS, owned by a stand-in
# process; checks DIR/env, that the keys are on no command line, HTTPS with
# and without the certificate trusted, stop-/start-rgw and -osd, and that
# the owner's death stops exactly the daemons the harness started.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rgw_sh=$here/rgw.sh
work=$(mktemp -d /var/tmp/ckpt-rgw-harness.XXXXXX)
owner=""
status=1
cleanup() {
    bash "$rgw_sh" stop "$work/ceph" || true
    [ -n "$owner" ] && kill "$owner" 2>/dev/null || true
    if [ "$status" = 0 ]; then rm -rf "$work"; else echo "test_rgw_harness: failed; files in $work" >&2; fi
}
trap cleanup EXIT
fail() {
    echo "test_rgw_harness: FAIL: $*" >&2
    exit 1
}

# Nothing may be written outside DIR: files newer than this marker in the
# system's Ceph places are checked for at the end.
touch "$work/marker"

# The owner: a process of ours whose death must take the cluster with it.
setsid sleep 600 </dev/null >/dev/null 2>&1 &
owner=$!
env_file=$(bash "$rgw_sh" start "$work/ceph" --memstore --https --owner "$owner")
# shellcheck disable=SC1090
. "$env_file"
for v in RGW_DIR RGW_ENDPOINT RGW_ACCESS_KEY RGW_SECRET_KEY RGW_BUCKET RGW_HTTPS_ENDPOINT RGW_CA_FILE; do
    [ -n "${!v:-}" ] || fail "$v missing from $env_file"
done
[ "$(stat -c %a "$env_file")" = 600 ] || fail "$env_file is readable by others"
pids=$(cat "$RGW_DIR"/pids/{mon,osd,rgw}.pid)
echo "test_rgw_harness: up in $(cat "$RGW_DIR/start_seconds") s, pids $(echo $pids)"

# The secret is on no process's command line.
for p in /proc/[0-9]*/cmdline; do
    { tr '\0' ' ' <"$p"; } 2>/dev/null | grep -F "$RGW_SECRET_KEY" >/dev/null &&
        fail "the secret is in the argv of $p"
done

put() { # put URL [curl options]: HTTP status of a SigV4-signed PUT
    local url=$1
    shift
    printf 'user = "%s:%s"\n' "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" |
        curl -K - -s -o /dev/null -w '%{http_code}' --max-time 30 --aws-sigv4 aws:amz:us-east-1:s3 \
            -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT --data-binary hello "$@" "$url" || true
}
[ "$(put "$RGW_ENDPOINT/$RGW_BUCKET/o1")" = 200 ] || fail "signed PUT over HTTP"
[ "$(put "$RGW_HTTPS_ENDPOINT/$RGW_BUCKET/o2" --cacert "$RGW_CA_FILE")" = 200 ] || fail "PUT over HTTPS"
rc=0
curl -s -o /dev/null --max-time 10 "$RGW_HTTPS_ENDPOINT/" || rc=$?
[ "$rc" = 60 ] || fail "HTTPS without the certificate trusted: curl status $rc, expected 60"
# A wrong secret is refused (a real server checks signatures).
code=$(printf 'user = "%s:wrong-secret"\n' "$RGW_ACCESS_KEY" |
    curl -K - -s -o /dev/null -w '%{http_code}' --aws-sigv4 aws:amz:us-east-1:s3 \
        -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -X PUT --data-binary x "$RGW_ENDPOINT/$RGW_BUCKET/o3")
[ "$code" = 403 ] || fail "a wrong secret got HTTP $code, expected 403"

bash "$rgw_sh" stop-rgw "$RGW_DIR"
rc=0
curl -s -o /dev/null --max-time 5 "$RGW_ENDPOINT/" || rc=$?
[ "$rc" = 7 ] || fail "radosgw stopped but the port answers (curl status $rc)"
st=$(bash "$rgw_sh" status "$RGW_DIR")
grep -q '^mon .* running' <<<"$st" || fail "stop-rgw stopped the mon: $st"
bash "$rgw_sh" start-rgw "$RGW_DIR"
[ "$(put "$RGW_ENDPOINT/$RGW_BUCKET/o4")" = 200 ] || fail "PUT after start-rgw"

bash "$rgw_sh" stop-osd "$RGW_DIR"
st=$(bash "$rgw_sh" status "$RGW_DIR")
grep -q '^osd - stopped' <<<"$st" || fail "stop-osd: $st"
bash "$rgw_sh" start-osd "$RGW_DIR"
[ "$(put "$RGW_ENDPOINT/$RGW_BUCKET/o5")" = 200 ] || fail "PUT after start-osd"

# The owner dies: the watchdog stops the daemons (the current ones, by PID).
pids=$(cat "$RGW_DIR"/pids/{mon,osd,rgw}.pid)
kill "$owner"
owner=""
for ((i = 0; i < 60; i++)); do
    alive=0
    for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.5
done
((alive == 0)) || fail "daemons still run 30 s after their owner died"
[ -z "$(ls "$RGW_DIR/pids")" ] || fail "pid files left: $(ls "$RGW_DIR/pids")"
outside=$(find /etc/ceph /var/log/ceph /var/run/ceph /run/ceph /var/lib/ceph -newer "$work/marker" \
    2>/dev/null || true)
[ -z "$outside" ] || fail "the cluster wrote outside its directory: $outside"
status=0
echo "test_rgw_harness: ok"
