#!/usr/bin/env bash
# with_s3rver.sh COMMAND...: runs COMMAND against a fresh s3rver on 127.0.0.1
# (tests/s3/s3rver.sh: installs s3rver with npm on first use, starts it, and
# stops it by PID when this script exits, even on failure), with the store
# environment set: CKPT_TEST_STORE_URL=s3://ckpt-test/<random>,
# CKPT_S3_ENDPOINT, and s3rver's well-known test credentials in the
# environment (never on a command line).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
s3rver="$here/../s3/s3rver.sh"
work=$(mktemp -d /var/tmp/ckpt-with-s3rver.XXXXXX)
cleanup() {
    bash "$s3rver" stop "$work/s3" || true
    rm -rf "$work"
}
trap cleanup EXIT
port=$(bash "$s3rver" start "$work/s3" --owner $$ --bucket ckpt-test)
export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
export CKPT_S3_ENDPOINT=http://127.0.0.1:$port
export CKPT_TEST_STORE_URL=s3://ckpt-test/run-$RANDOM
echo "with_s3rver: s3rver on 127.0.0.1:$port, store $CKPT_TEST_STORE_URL" >&2
"$@"
