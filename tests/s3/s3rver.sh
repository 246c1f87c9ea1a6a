#!/usr/bin/env bash
# s3rver.sh — installs, starts and stops s3rver (npm, pinned 3.7.1), the
# S3-compatible server every S3 test runs against, on 127.0.0.1.
#
#   s3rver.sh install                  install s3rver into the cache (idempotent), print its dir
#   s3rver.sh start DIR [options]      start one instance whose files live in DIR; print its port
#       --strict         verify every signature (default: --allow-mismatched-signatures,
#                        needed because libs3 2.0 signs bucket-level requests differently,
#                        see docs/S3.md)
#       --port N         listen on N (default: a free port chosen by the server: -p 0);
#                        restarting on the port of an earlier run reuses DIR/data
#       --bucket NAME    bucket to create at start (repeatable; default ckpt-test)
#       --owner PID      stop the server when process PID exits (a crashed or killed
#                        test never leaves a server behind)
#       --vhost-domain D virtual-hosted addressing under D: BUCKET.s3.D is the bucket
#                        (s3rver's --service-endpoint; curl resolves *.localhost to
#                        127.0.0.1 itself, so "localhost" needs no DNS)
#   s3rver.sh stop DIR                 stop the instance of DIR by its PID (SIGTERM, then SIGKILL)
#
# Files in DIR: data/ (objects; kept across stop/start), s3rver.pid, s3rver.port,
# s3rver.log, watchdog.pid.
#
# The install goes to $CKPT_S3RVER_CACHE, else /var/cache/ckptfs when writable,
# else ${XDG_CACHE_HOME:-~/.cache}/ckptfs; concurrent installs are serialised
# with flock. Anything missing (node, npm, the registry) is a loud failure with
# exit status 2: a test that needs s3rver never skips silently.
#
# CKPT_S3RVER_VERBOSE=1 makes s3rver log every request to DIR/s3rver.log.
#
# Every wait is bounded: readiness 30 s, stop 10 s, install 300 s.
set -euo pipefail

S3RVER_VERSION=3.7.1

die() {
    echo "s3rver.sh: $*" >&2
    exit 2
}

cache_root() {
    if [ -n "${CKPT_S3RVER_CACHE:-}" ]; then
        echo "$CKPT_S3RVER_CACHE"
    elif mkdir -p /var/cache/ckptfs 2>/dev/null && [ -w /var/cache/ckptfs ]; then
        echo /var/cache/ckptfs
    else
        echo "${XDG_CACHE_HOME:-$HOME/.cache}/ckptfs"
    fi
}

# Our patch to s3rver (s3rver-3.7.1.patch, see docs/S3.md: atomic puts, no
# crash on put/delete races); its hash names the install, so a changed patch
# gets a fresh install.
PATCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/s3rver-$S3RVER_VERSION.patch

install_dir() {
    local h
    h=$(sha1sum "$PATCH" | cut -c1-8)
    echo "$(cache_root)/s3rver-$S3RVER_VERSION-p$h"
}

do_install() {
    command -v node >/dev/null || die "node not found: install nodejs (tools/bootstrap.sh does)"
    local dir js
    dir=$(install_dir)
    js=$dir/node_modules/s3rver/bin/s3rver.js
    if [ -f "$dir/.patched" ]; then
        echo "$dir"
        return 0
    fi
    if ! command -v npm >/dev/null; then
        # Debian's nodejs comes without npm; NodeSource's bundles it (and
        # conflicts with Debian's npm package), so npm is installed only
        # when missing, not from tools/bootstrap.sh's list.
        [ "$(id -u)" = 0 ] || die "npm not found: install npm (apt-get install npm), or run as root"
        echo "s3rver.sh: installing npm" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; } ||
            die "npm not found and apt-get install npm failed"
    fi
    mkdir -p "$dir" || die "cannot create $dir"
    (
        flock -w 300 9 || die "timed out waiting for another s3rver install ($dir/.lock)"
        if [ ! -f "$dir/.patched" ]; then
            rm -rf "$dir/node_modules"
            echo "s3rver.sh: installing s3rver@$S3RVER_VERSION into $dir" >&2
            timeout 300 npm install --no-audit --no-fund --prefix "$dir" "s3rver@$S3RVER_VERSION" \
                >"$dir/npm-install.log" 2>&1 ||
                die "npm install s3rver@$S3RVER_VERSION failed (see $dir/npm-install.log):
$(tail -20 "$dir/npm-install.log")"
            command -v patch >/dev/null || die "patch not found: install patch (tools/bootstrap.sh does)"
            patch -s -p1 -d "$dir/node_modules/s3rver" <"$PATCH" ||
                die "cannot apply $PATCH to s3rver in $dir"
            # Marks a complete install: only now does the start path see it.
            touch "$dir/.patched"
        fi
    ) 9>"$dir/.lock"
    [ -f "$dir/.patched" ] && [ -f "$js" ] || die "s3rver not installed at $js"
    echo "$dir"
}

do_start() {
    local dir=${1:?usage: s3rver.sh start DIR [--strict] [--port N] [--bucket NAME] [--owner PID]}
    shift
    local strict=0 port=0 owner="" vhost="" buckets=()
    while [ $# -gt 0 ]; do
        case $1 in
        --strict) strict=1 ;;
        --port) port=${2:?--port needs a number}; shift ;;
        --bucket) buckets+=("${2:?--bucket needs a name}"); shift ;;
        --owner) owner=${2:?--owner needs a pid}; shift ;;
        --vhost-domain) vhost=${2:?--vhost-domain needs a domain}; shift ;;
        *) die "start: unknown option $1" ;;
        esac
        shift
    done
    ((${#buckets[@]})) || buckets=(ckpt-test)

    local inst
    inst=$(do_install)
    mkdir -p "$dir/data"
    if [ -f "$dir/s3rver.pid" ] && kill -0 "$(cat "$dir/s3rver.pid")" 2>/dev/null; then
        die "an s3rver already runs for $dir (pid $(cat "$dir/s3rver.pid"))"
    fi
    rm -f "$dir/s3rver.pid" "$dir/s3rver.port"

    local args=(-d "$dir/data" -a 127.0.0.1 -p "$port")
    # Per-request logging costs s3rver's single thread dearly: only on demand.
    [ -n "${CKPT_S3RVER_VERBOSE:-}" ] || args+=(--silent)
    ((strict)) || args+=(--allow-mismatched-signatures)
    [ -z "$vhost" ] || args+=(--service-endpoint "$vhost")
    for b in "${buckets[@]}"; do
        args+=(--configure-bucket "$b")
    done
    # --openssl-legacy-provider: s3rver encrypts list continuation tokens with
    # DES, which Node 20's OpenSSL 3 only offers through the legacy provider.
    # setsid: the server must not get the terminal's or ctest's signals meant
    # for the test; it is stopped by PID only.
    : >"$dir/s3rver.log"
    setsid node --openssl-legacy-provider "$inst/node_modules/s3rver/bin/s3rver.js" "${args[@]}" \
        >"$dir/s3rver.log" 2>&1 </dev/null &
    local pid=$!
    echo "$pid" >"$dir/s3rver.pid"
    # Whatever makes this script fail from here on, the server goes too.
    trap 'kill -KILL '"$pid"' 2>/dev/null; rm -f "'"$dir"'/s3rver.pid"' EXIT

    # Ready when it prints its address and answers HTTP (bounded: 30 s).
    local got="" i
    for ((i = 0; i < 300; i++)); do
        if ! kill -0 "$pid" 2>/dev/null; then
            die "s3rver exited during startup:
$(tail -20 "$dir/s3rver.log")"
        fi
        got=$(sed -n 's/^S3rver listening on [0-9.]*:\([0-9]*\)$/\1/p' "$dir/s3rver.log" | head -1) || got=""
        if [ -n "$got" ] && curl -s -o /dev/null --max-time 2 "http://127.0.0.1:$got/"; then
            break
        fi
        got=""
        sleep 0.1
    done
    if [ -z "$got" ]; then
        kill -KILL "$pid" 2>/dev/null || true
        die "s3rver did not become ready in 30 s:
$(tail -20 "$dir/s3rver.log")"
    fi
    echo "$got" >"$dir/s3rver.port"

    if [ -n "$owner" ]; then
        # Watchdog: a detached loop that kills the server once the owner is
        # gone. It exits by itself when the server is gone, so it never
        # outlives either.
        setsid bash -c 'while kill -0 "$1" 2>/dev/null && kill -0 "$2" 2>/dev/null; do sleep 1; done
                        kill -TERM "$2" 2>/dev/null; sleep 2; kill -KILL "$2" 2>/dev/null; exit 0' \
            s3rver-watchdog "$owner" "$pid" >/dev/null 2>&1 </dev/null &
        echo $! >"$dir/watchdog.pid"
    fi
    trap - EXIT
    echo "$got"
}

do_stop() {
    local dir=${1:?usage: s3rver.sh stop DIR}
    local pid
    if [ -f "$dir/watchdog.pid" ]; then
        kill "$(cat "$dir/watchdog.pid")" 2>/dev/null || true
        rm -f "$dir/watchdog.pid"
    fi
    [ -f "$dir/s3rver.pid" ] || return 0
    pid=$(cat "$dir/s3rver.pid")
    rm -f "$dir/s3rver.pid"
    kill -TERM "$pid" 2>/dev/null || return 0
    local i
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

cmd=${1:-}
shift || true
case $cmd in
install) do_install ;;
start) do_start "$@" ;;
stop) do_stop "$@" ;;
*) die "usage: s3rver.sh install | start DIR [options] | stop DIR" ;;
esac
