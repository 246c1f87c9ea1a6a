#!/usr/bin/env bash
# test_s3_rgw.sh CKPTCTL — both S3 backends against Ceph's RADOS Gateway, run
# under tests/s3/with_rgw.sh --https (which starts a throw-away cluster and
# sets RGW_*, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY):
#   * put / restore / latest round trips with --s3-signature v4 and v2 over
#     HTTP, and v4 over HTTPS trusting RGW's self-signed certificate through
#     --s3-ca-file;
#   * HTTPS without the CA file: exit 3, "not trusted";
#   * a wrong secret on each signature: exit 3, SignatureDoesNotMatch, and
#     the secret in no output.
set -u
ckptctl=${1:?usage: test_s3_rgw.sh CKPTCTL}
for v in RGW_ENDPOINT RGW_HTTPS_ENDPOINT RGW_CA_FILE RGW_BUCKET; do
    [ -n "${!v:-}" ] || { echo "test_s3_rgw: $v is not set: run under with_rgw.sh --https" >&2; exit 2; }
done
unset CKPT_S3_ENDPOINT CKPT_S3_SIGNATURE CKPT_S3_CA_FILE
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; cat "$tmp/out"; }
store=s3://$RGW_BUCKET/rgw-cli-$RANDOM

mkdir -p "$tmp/src/step-1"
head -c 3000000 /dev/urandom >"$tmp/src/step-1/w.bin"

roundtrip() { # NAME JOB OPTIONS...
    local name=$1 job=$2
    shift 2
    rm -rf "$tmp/dst"
    if "$ckptctl" "$@" --store "$store" --job "$job" put --step 1 "$tmp/src" >"$tmp/out" 2>&1 &&
        "$ckptctl" "$@" --store "$store" --job "$job" restore --latest --to "$tmp/dst" \
            >"$tmp/out" 2>&1 &&
        cmp -s "$tmp/src/step-1/w.bin" "$tmp/dst/step-1/w.bin" &&
        [ "$("$ckptctl" "$@" --store "$store" --job "$job" latest 2>"$tmp/out")" = 1 ]; then
        ok
    else
        bad "$name round trip"
    fi
}
roundtrip "v4 http" v4 --s3-endpoint "$RGW_ENDPOINT" --s3-signature v4
roundtrip "v2 http" v2 --s3-endpoint "$RGW_ENDPOINT" --s3-signature v2
roundtrip "v4 https" v4s --s3-endpoint "$RGW_HTTPS_ENDPOINT" --s3-ca-file "$RGW_CA_FILE"

refused() { # NAME WORD... -- OPTIONS...
    local name=$1 words=()
    shift
    while [ "$1" != -- ]; do words+=("$1"); shift; done
    shift
    "$ckptctl" "$@" --store "$store" --job v4 ls >"$tmp/out" 2>&1
    local rc=$?
    [ "$rc" = 3 ] || { bad "$name: exit $rc, wanted 3"; return; }
    for w in "${words[@]}"; do
        grep -qF -- "$w" "$tmp/out" || { bad "$name: no '$w' in the message"; return; }
    done
    ! grep -qF -- "$secret" "$tmp/out" || { bad "$name: the secret is in the output"; return; }
    echo "  $name: $(cat "$tmp/out")"
    ok
}
secret=$AWS_SECRET_ACCESS_KEY
refused "https without the CA" "not trusted" --s3-ca-file -- --s3-endpoint "$RGW_HTTPS_ENDPOINT"
secret="rgw-wrong-secret-$RANDOM$RANDOM"
export AWS_SECRET_ACCESS_KEY=$secret
refused "v4 wrong secret" SignatureDoesNotMatch AWS_SECRET_ACCESS_KEY -- \
    --s3-endpoint "$RGW_ENDPOINT" --s3-signature v4
refused "v2 wrong secret" SignatureDoesNotMatch -- --s3-endpoint "$RGW_ENDPOINT" --s3-signature v2

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
