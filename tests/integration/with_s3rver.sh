#!/usr/bin/env bash
# with_s3rver.sh [--strict] COMMAND...: runs COMMAND against a fresh s3rver on 127.0.0.1
# (tests/s3/s3rver.sh: installs s3rver with npm on first use, starts it, and
# stops it by PID when this script exits, even on failure), with the store
# environment set: CKPT_TEST_STORE_URL=s3://ckpt-test/<random>,
# CKPT_S3_ENDPOINT, and s3rver's well-known test credentials in the
# environment (never on a command line). --strict: s3rver checks every
# signature (V2, and V4 with our patch); without it, mismatched signatures
# pass, which libs3's V2 bucket listings need (docs/S3.md). The signature
# the binaries use comes from CKPT_S3_SIGNATURE (default v4).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
s3rver="$here/../s3/s3rver.sh"
work=$(mktemp -d /var/tmp/ckpt-with-s3rver.XXXXXX)
cleanup() {
    bash "$s3rver" stop "$work/s3" || true
    rm -rf "$work"
}
trap cleanup EXIT
strict=()
if [ "${1:-}" = --strict ]; then
    strict=(--strict)
    shift
fi
port=$(bash "$s3rver" start "$work/s3" --owner $$ --bucket ckpt-test "${strict[@]}")
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export CKPT_S3_ENDPOINT=http://127.0.0.1:$port
export CKPT_TEST_STORE_URL=s3://ckpt-test/run-$RANDOM
echo "with_s3rver: s3rver${strict:+ (strict)} on 127.0.0.1:$port, store $CKPT_TEST_STORE_URL," \
    "signature ${CKPT_S3_SIGNATURE:-v4}" >&2
"$@"
