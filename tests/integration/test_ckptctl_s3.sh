#!/usr/bin/env bash
# ckptctl on an s3:// store (run under with_s3rver.sh): --s3-endpoint on the
# command line, a put/restore round trip, latest, and a clear error for a
# missing bucket. (Bad credentials need a strict server: unit.test_backend_s3
# checks them, and that the secret never appears in a message.)
#   with_s3rver.sh bash test_ckptctl_s3.sh PATH/TO/ckptctl
set -u
ckptctl=$1
endpoint=$CKPT_S3_ENDPOINT
unset CKPT_S3_ENDPOINT # from here on, only the option names the endpoint
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache
passed=0 failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

mkdir -p "$tmp/src/step-1"
head -c 5000000 /dev/urandom >"$tmp/src/step-1/w.bin"
if "$ckptctl" --s3-endpoint "$endpoint" --store "$CKPT_TEST_STORE_URL" --job s3cli put --step 1 \
    "$tmp/src" >"$tmp/out" 2>&1; then ok; else bad "put"; cat "$tmp/out"; fi
if "$ckptctl" --s3-endpoint "$endpoint" --store "$CKPT_TEST_STORE_URL" --job s3cli restore \
    --latest --to "$tmp/dst" >"$tmp/out" 2>&1 && cmp -s "$tmp/src/step-1/w.bin" "$tmp/dst/step-1/w.bin"
then ok; else bad "restore"; cat "$tmp/out"; fi
latest=$("$ckptctl" --s3-endpoint "$endpoint" --store "$CKPT_TEST_STORE_URL" --job s3cli latest)
[ "$latest" = 1 ] && ok || bad "latest said '$latest'"

# A missing bucket: exit 3 with a message naming it.
"$ckptctl" --s3-endpoint "$endpoint" --store s3://no-such-bucket-here/x --job s3cli latest \
    >"$tmp/out" 2>&1
rc=$?
[ "$rc" = 3 ] && grep -q "no-such-bucket-here" "$tmp/out" && ok || { bad "missing bucket: exit $rc"; cat "$tmp/out"; }
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
