# shellcheck shell=bash
# s3lib.sh — helpers shared by the S3 benchmarks (bench_s3.sh,
# bench_durable.sh). Sourced, not run; the caller has `set -euo pipefail`.
#
#   s3lib_start DIR     start an s3rver whose files live in DIR (tests/s3/s3rver.sh,
#                       owned by this shell: it dies with it), on 127.0.0.1 only;
#                       sets S3_PORT and S3_URL (the bucket ckpt-test), exports
#                       AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (s3rver's defaults)
#                       and CKPT_S3_ENDPOINT for ckptctl and bench_s3
#   s3lib_stop DIR      stop it by its PID (for the caller's EXIT trap; never fails)
#   s3lib_unmount MNT PID
#                       unmount the ckptfs at MNT the caller started as PID and
#                       end it by that PID (EXIT traps; never fails)
#   s3lib_use ENDPOINT KEY SECRET
#                       point everything at another S3 server (Ceph RGW: the
#                       bucket ckpt-test must exist): sets S3_URL, exports the
#                       keys and CKPT_S3_ENDPOINT
#   s3lib_curl N ARGS   one curl process, up to N transfers at once, SigV4-signed
#                       (ARGS: -T FILE URL / -o FILE URL pairs), failing on any
#                       HTTP error — the raw baseline a benchmark compares with.
#                       The keys reach curl through a config file descriptor,
#                       never its argv.
#   now                 wall clock in seconds (float)
#   since T0            seconds since T0 (from now)
#   mbps BYTES SECS     10^6 bytes per second, one decimal
#   ratio A B           A / B, two decimals
#
# curl >= 7.75 signs SigV4 itself (--aws-sigv4); s3rver takes it.

S3LIB_S3RVER=$(cd "$(dirname "${BASH_SOURCE[0]}")/../s3" && pwd)/s3rver.sh
S3_SIGV4=(--aws-sigv4 aws:amz:us-east-1:s3 -H "x-amz-content-sha256:UNSIGNED-PAYLOAD")

s3lib_start() {
    command -v curl >/dev/null || { echo "s3lib: curl not found" >&2; return 2; }
    S3_PORT=$(bash "$S3LIB_S3RVER" start "$1" --owner $$)
    s3lib_use "http://127.0.0.1:$S3_PORT" S3RVER S3RVER
}

s3lib_use() {
    # shellcheck disable=SC2034 # for the caller
    S3_URL=$1/ckpt-test
    export AWS_ACCESS_KEY_ID=$2 AWS_SECRET_ACCESS_KEY=$3
    export CKPT_S3_ENDPOINT=$1
}

s3lib_stop() {
    bash "$S3LIB_S3RVER" stop "$1" || true
}

s3lib_unmount() { # MNT PID: unmount a ckptfs the caller started and end it by PID (PID "": none)
    [ -n "$2" ] || return 0
    fusermount3 -u "$1" 2>/dev/null || fusermount3 -u -z "$1" 2>/dev/null || true
    kill "$2" 2>/dev/null || true
    wait "$2" 2>/dev/null || true
}

s3lib_curl() {
    local n=$1
    shift
    curl -sS --no-progress-meter --fail --parallel --parallel-max "$n" "${S3_SIGV4[@]}" \
        -K <(printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY") "$@"
}

now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.3f", a - b }'; }
mbps() { awk -v b="$1" -v t="$2" 'BEGIN { printf "%.1f", b / t / 1e6 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
