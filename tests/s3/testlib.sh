# testlib.sh — the prologue the tests/s3 runner scripts share, sourced after
# `set -euo pipefail` with `here` (this folder) and `me` (the script's name,
# for messages) set:
#   s3t_python             py=/usr/bin/python3 (the one the suite uses), or exit 2
#   s3t_work TEMPLATE      work=$(mktemp -d TEMPLATE); status=1 until the
#                          script sets status=0 at its end
#   s3t_finish [WHERE]     from the EXIT trap: remove $work after success,
#                          else say where the logs are kept (WHERE, or $work)
#   s3t_stop VAR           kill and reap the PID held in variable VAR (this
#                          script's child), then empty VAR; no-op when empty
#   s3t_wait_file FILE PID LOG WHAT
#                          wait up to 10 s for FILE (a port file) to be written
#                          while PID lives; else show LOG and exit 1
#   s3t_rgw_client TEMPLATE
#                          the prologue of a client of with_rgw.sh's RGW behind
#                          a proxy: RGW_ENDPOINT set (else exit 2), s3t_python,
#                          s3t_work TEMPLATE, proxy_pid="" stopped (and $work
#                          finished) in the EXIT trap, the store's settings
#                          taken from the command line only, the cache in $work
# Only PIDs the script started are ever signalled.

s3t_python() {
    py=/usr/bin/python3
    [ -x "$py" ] || { echo "$me: /usr/bin/python3 not found" >&2; exit 2; }
}

s3t_work() { # TEMPLATE
    work=$(mktemp -d "$1")
    status=1
}

s3t_finish() { # [WHERE]
    if [ "$status" = 0 ]; then
        rm -rf "$work"
    else
        echo "$me: failed; logs kept in ${1:-$work}" >&2
    fi
}

s3t_stop() { # VAR
    local pid=${!1}
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
    printf -v "$1" '%s' ""
}

s3t_wait_file() { # FILE PID LOG WHAT
    local i
    for ((i = 0; i < 100; i++)); do
        [ -s "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    [ -z "$3" ] || cat "$3" >&2
    echo "$me: $4 did not start in 10 s" >&2
    exit 1
}

s3t_rgw_client() { # TEMPLATE
    [ -n "${RGW_ENDPOINT:-}" ] || { echo "$me: run it under tests/s3/with_rgw.sh" >&2; exit 2; }
    s3t_python
    s3t_work "$1"
    proxy_pid=""
    trap 's3t_stop proxy_pid; s3t_finish' EXIT
    unset CKPT_S3_ENDPOINT CKPT_S3_SSE
    export XDG_CACHE_HOME=$work/cache
}
