#!/usr/bin/env bash
# with_rgw.sh [--memstore] [--https] COMMAND...: runs COMMAND against a fresh
# throw-away Ceph cluster with a RADOS Gateway on 127.0.0.1 (tests/s3/rgw.sh),
# stopped by PID when this script exits, even on failure.
#
# COMMAND gets the RGW variables of rgw.sh (RGW_ENDPOINT, RGW_ACCESS_KEY,
# RGW_SECRET_KEY, RGW_BUCKET, RGW_DIR; RGW_HTTPS_ENDPOINT and RGW_CA_FILE with
# --https) and the store environment every S3 test reads:
#   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY   the RGW user's keys
#   CKPT_S3_ENDPOINT = CKPT_TEST_S3_ENDPOINT    RGW's HTTP endpoint
#   CKPT_TEST_STORE_URL                         s3://ckpt-test/run-<random>
#   CKPT_TEST_S3_HTTPS_ENDPOINT                 with --https: RGW_HTTPS_ENDPOINT
# COMMAND may call "rgw.sh stop-rgw|start-rgw|stop-osd|start-osd $RGW_DIR"
# for fault tests. The cluster's files (logs) are kept in RGW_DIR when
# COMMAND fails, and removed when it succeeds.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
opts=()
while [ $# -gt 0 ]; do
    case $1 in
    --memstore | --https) opts+=("$1"); shift ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: with_rgw.sh [--memstore] [--https] COMMAND..." >&2; exit 2; }

me=with_rgw
# shellcheck source=testlib.sh
. "$here/testlib.sh"
s3t_work /var/tmp/ckpt-with-rgw.XXXXXX
cleanup() {
    bash "$here/rgw.sh" stop "$work/ceph" || true
    s3t_finish "$work/ceph/log"
}
trap cleanup EXIT
env_file=$(bash "$here/rgw.sh" start "$work/ceph" --owner $$ "${opts[@]}")
set -a
# shellcheck disable=SC1090
. "$env_file"
set +a
export AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY
export CKPT_S3_ENDPOINT=$RGW_ENDPOINT CKPT_TEST_S3_ENDPOINT=$RGW_ENDPOINT
export CKPT_TEST_STORE_URL=s3://$RGW_BUCKET/run-$RANDOM
[ -z "${RGW_HTTPS_ENDPOINT:-}" ] || export CKPT_TEST_S3_HTTPS_ENDPOINT=$RGW_HTTPS_ENDPOINT
echo "with_rgw: RGW on $RGW_ENDPOINT (cluster up in $(cat "$RGW_DIR/start_seconds") s)," \
    "store $CKPT_TEST_STORE_URL" >&2
rc=0
"$@" || rc=$?
echo "with_rgw: daemons' RSS (KiB) after the command: $(bash "$here/rgw.sh" rss "$RGW_DIR" | tr '\n' ' ')" >&2
[ "$rc" = 0 ] && status=0
exit "$rc"
