#!/usr/bin/env bash
# run_rgw_encryption.sh CKPTCTL — client-side encryption (docs/ENCRYPTION.md)
# against Ceph's RADOS Gateway, run under with_rgw.sh (CKPT_TEST_STORE_URL,
# RGW_ENDPOINT and the AWS keys set):
#   * ckptctl put with --encryption-key-file, then restore on a fresh state
#     directory (a new node) bit-exact, and verify;
#   * restore without the key and with another key: exit 3, naming the
#     option or the key id;
#   * every object of the store, downloaded with the AWS CLI, is searched
#     for a marker string the file holds every 4 KiB: not found, and the
#     store has its `encryption` marker; the same put without a key into
#     another prefix stores the marker in plain (the control).
set -u
ckptctl=${1:?usage: run_rgw_encryption.sh CKPTCTL}
for v in CKPT_TEST_STORE_URL RGW_ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
    [ -n "${!v:-}" ] || { echo "run_rgw_encryption: $v is not set: run under with_rgw.sh" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "run_rgw_encryption: FAIL: $*" >&2; exit 1; }
marker=CKPTFS-RGW-SECRET-MARKER-51c2
enc=$CKPT_TEST_STORE_URL/enc
plain=$CKPT_TEST_STORE_URL/plain

ctl() { # STORE STATE-NAME ARGS...
    local store=$1 state=$2
    shift 2
    "$ckptctl" --store "$store" --state-dir "$tmp/state-$state" --job job "$@"
}
# The objects under store URL $1 (s3://bucket/prefix) into directory $2.
download() {
    AWS_DEFAULT_REGION=us-east-1 aws --endpoint-url "$RGW_ENDPOINT" s3 cp --recursive --quiet \
        "$1" "$2" || fail "aws s3 cp $1"
}

"$ckptctl" keygen "$tmp/key" > /dev/null || fail keygen
"$ckptctl" keygen "$tmp/other" > /dev/null || fail keygen
mkdir "$tmp/src"
python3 - "$tmp/src/model.bin" "$marker" <<'PY' || fail "making the file"
import os, sys
data = bytearray(os.urandom(3 << 20))
for at in range(0, len(data) - 64, 4096):
    data[at:at + len(sys.argv[2])] = sys.argv[2].encode()
open(sys.argv[1], "wb").write(data)
PY

ctl "$enc" w --encryption-key-file "$tmp/key" put --step 1 "$tmp/src" || fail "put with a key"
ctl "$enc" r --encryption-key-file "$tmp/key" restore --step 1 --to "$tmp/out" ||
    fail "restore with the key"
cmp "$tmp/src/model.bin" "$tmp/out/model.bin" || fail "restored bytes differ"
ctl "$enc" r --encryption-key-file "$tmp/key" verify --step 1 || fail verify

ctl "$enc" n restore --step 1 --to "$tmp/nokey" 2> "$tmp/err"
rc=$?
[ $rc = 3 ] && grep -q "is encrypted: give --encryption-key-file" "$tmp/err" ||
    fail "restore without a key: exit $rc, $(cat "$tmp/err")"
ctl "$enc" o --encryption-key-file "$tmp/other" restore --step 1 --to "$tmp/other-out" 2> "$tmp/err"
rc=$?
[ $rc = 3 ] && grep -q "which the key file does not hold" "$tmp/err" ||
    fail "restore with another key: exit $rc, $(cat "$tmp/err")"

download "$enc" "$tmp/objs-enc"
[ -f "$tmp/objs-enc/encryption" ] || fail "no encryption marker object"
ls "$tmp/objs-enc/jobs/job/packs/"*/*.pack > /dev/null 2>&1 || fail "no pack downloaded"
if grep -rlF "$marker" "$tmp/objs-enc"; then fail "the marker is in an encrypted store's object"; fi

ctl "$plain" p put --step 1 "$tmp/src" || fail "put without a key"
download "$plain" "$tmp/objs-plain"
grep -rqF "$marker" "$tmp/objs-plain" || fail "control: the marker is not in the plain store"
echo "run_rgw_encryption: ok"
