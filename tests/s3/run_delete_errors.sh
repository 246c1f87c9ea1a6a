#!/usr/bin/env bash
# run_delete_errors.sh DRIVER — the V4 backend's DeleteObjects against
# tests/s3/fake_s3_delete.py, which answers per-key failures that real
# servers do not give on demand, and a store without DeleteObjects
# (docs/S3.md, "Batched delete"). DRIVER is s3_delete_batch.
#   errors:  5 keys in one POST (Content-MD5 checked by the fake); the one
#            transient key alone is sent again, twice (3 tries); nothing
#            else is resent.
#   nobatch: one refused POST (501 NotImplemented), then every key by
#            DELETE: 6 for two batches of 3, the refusal remembered.
# The fake is stopped by PID in an EXIT trap; each run is bounded.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:?usage: run_delete_errors.sh S3_DELETE_BATCH}
me=run_delete_errors
# shellcheck source=testlib.sh
. "$here/testlib.sh"
s3t_python
s3t_work /tmp/ckpt-s3delerr-XXXXXX
fake_pid=""
cleanup() {
    s3t_stop fake_pid
    s3t_finish
}
trap cleanup EXIT
export AWS_ACCESS_KEY_ID=FAKEKEY AWS_SECRET_ACCESS_KEY=FAKESECRET CKPT_S3_SIGNATURE=v4

run_against() { # NAME MODE [FAKE OPTIONS]
    local name=$1 mode=$2
    shift 2
    : >"$work/$name.log"
    "$py" "$here/fake_s3_delete.py" --log "$work/$name.log" "$@" >"$work/$name.port" &
    fake_pid=$!
    s3t_wait_file "$work/$name.port" "$fake_pid" "" "the fake"
    CKPT_S3_ENDPOINT=http://127.0.0.1:$(cat "$work/$name.port") timeout 60 "$driver" "$mode"
    s3t_stop fake_pid
    echo "run_delete_errors: $name: requests: $(paste -sd, "$work/$name.log")"
}

expect() { # NAME EXPECTED_LOG
    local got
    got=$(paste -sd, "$work/$1.log")
    [ "$got" = "$2" ] || { echo "run_delete_errors: $1: got $got, want $2" >&2; exit 1; }
}

run_against errors errors
expect errors "POST n=5 quiet=1,POST n=1 quiet=1,POST n=1 quiet=1"
run_against nobatch nobatch --no-batch
expect nobatch "POST refused,DELETE /ckpt-test/n/a,DELETE /ckpt-test/n/b,DELETE /ckpt-test/n/c,DELETE /ckpt-test/n/a,DELETE /ckpt-test/n/b,DELETE /ckpt-test/n/c"
status=0
echo "run_delete_errors: ok"
