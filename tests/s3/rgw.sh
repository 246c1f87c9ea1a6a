#!/usr/bin/env bash
# rgw.sh — a throw-away single-host Ceph cluster with a RADOS Gateway (RGW,
# Ceph's S3 server) for the tests: one mon, one OSD, one radosgw, all inside
# one directory, nothing in /etc/ceph, no systemd, no network but 127.0.0.1.
#
#   rgw.sh start DIR [--memstore] [--https] [--owner PID]
#         creates the cluster in DIR (must be empty or absent), starts the
#         three daemons, creates an S3 user (radosgw-admin, generated keys)
#         and the bucket ckpt-test, and returns once an authenticated bucket
#         PUT has succeeded. Writes DIR/env (sourceable shell assignments)
#         and prints its path. --memstore: the OSD keeps objects in RAM
#         (faster, not crash-safe; default bluestore on a 4 GiB sparse file,
#         CKPT_RGW_BLOCK_BYTES to change its size: the peer benchmark's GiBs).
#         --https: RGW also serves HTTPS with a self-signed certificate.
#         --owner PID: a watchdog stops the cluster when PID exits.
#   rgw.sh stop DIR        stops every daemon of DIR by its PID (TERM, then KILL)
#   rgw.sh stop-rgw DIR    stops radosgw only      rgw.sh start-rgw DIR   starts it again
#   rgw.sh stop-osd DIR    stops the OSD only      rgw.sh start-osd DIR   starts it, waits until up
#   rgw.sh status DIR      prints the PIDs and whether each daemon runs
#   rgw.sh rss DIR         prints the RSS (KiB) of each daemon and the sum
#
# DIR/env sets: RGW_ENDPOINT (http://127.0.0.1:PORT), RGW_ACCESS_KEY,
# RGW_SECRET_KEY, RGW_BUCKET (ckpt-test), RGW_DIR, and with --https
# RGW_HTTPS_ENDPOINT (https://localhost:PORT) and RGW_CA_FILE. The keys are
# only ever in DIR/env (mode 600) and DIR/user.json, never on a command line.
#
# Files: DIR/ceph.conf, DIR/{mon,osd,rgw}/ (data), DIR/run/ (admin sockets,
# pid files), DIR/log/, DIR/crash/, DIR/pids/{mon,osd,rgw}.pid (the PIDs this
# script started; stop kills exactly those).
#
# Every ceph/radosgw-admin call runs under `timeout` (a cluster without a mgr
# or with the OSD down blocks them forever otherwise). Exit status 2 when a
# tool is missing (install ceph-mon ceph-osd radosgw ceph-common: tools/
# bootstrap.sh does) or the cluster does not come up: never a silent skip.
set -euo pipefail

BUCKET=ckpt-test
CEPH_TIMEOUT=20

die() {
    echo "rgw.sh: $*" >&2
    exit 2
}

need_tools() {
    local t
    for t in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool curl python3 \
        openssl; do
        command -v "$t" >/dev/null ||
            die "$t not found: install ceph-mon ceph-osd radosgw ceph-common (tools/bootstrap.sh does)"
    done
}

# A TCP port on 127.0.0.1 nobody listens on now, from the kernel's ephemeral
# range (32768-60999): never in 6800-7300, where the OSD binds its ports.
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ceph_cli() {
    timeout "$CEPH_TIMEOUT" ceph -c "$DIR/ceph.conf" --connect-timeout 10 "$@"
}

rgw_admin() {
    timeout "$CEPH_TIMEOUT" radosgw-admin -c "$DIR/ceph.conf" -n client.rgw "$@"
}

# Starts one daemon in the foreground (-f) of its own session (setsid: it
# must not get signals meant for the test) and records its PID.
spawn() {
    local name=$1
    shift
    setsid "$@" -f -c "$DIR/ceph.conf" >>"$DIR/log/$name.out" 2>&1 </dev/null &
    echo $! >"$DIR/pids/$name.pid"
}

pid_of() { [ -f "$DIR/pids/$1.pid" ] && cat "$DIR/pids/$1.pid"; }

running() {
    local pid
    pid=$(pid_of "$1") || return 1
    kill -0 "$pid" 2>/dev/null
}

# Stops the daemon NAME that this script started: SIGTERM, 20 s, SIGKILL.
# (osd fast shutdown = false makes the OSD's clean stop take a few seconds.)
stop_daemon() {
    local name=$1 pid i
    pid=$(pid_of "$name") || return 0
    rm -f "$DIR/pids/$name.pid"
    kill -TERM "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 200; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    echo "rgw.sh: $name (pid $pid) ignored SIGTERM for 20 s: SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
}

# Appends "SECONDS-SINCE-START what" to DIR/log/start.timing: where the
# bring-up time goes (docs/S3.md quotes it).
phase() {
    awk -v a="$(date +%s.%N)" -v b="$t0" -v w="$1" 'BEGIN { printf "%5.1f %s\n", a - b, w }' \
        >>"$DIR/log/start.timing"
}

# A random AES-256 key in base64, for the testing KMS backend.
kms_key() { head -c 32 /dev/urandom | base64; }

write_conf() {
    local fsid=$1 mon_port=$2 rgw_port=$3 ssl_port=$4 store=$5
    local frontend="beast endpoint=127.0.0.1:$rgw_port"
    if [ -n "$ssl_port" ]; then
        frontend+=" ssl_endpoint=127.0.0.1:$ssl_port ssl_certificate=$DIR/tls/rgw.crt"
        frontend+=" ssl_private_key=$DIR/tls/rgw.key"
    fi
    # Options: Ceph's src/vstart.sh (a developer cluster) and the Ceph
    # configuration reference; why each speed-up matters: docs/S3.md.
    cat >"$DIR/ceph.conf" <<EOF
[global]
fsid = $fsid
mon host = v2:127.0.0.1:$mon_port
public addr = 127.0.0.1
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
keyring = $DIR/keyring
run dir = $DIR/run
admin socket = $DIR/run/\$name.\$pid.asok
pid file = $DIR/run/\$name.pid
log file = $DIR/log/\$name.log
mon cluster log file = $DIR/log/cluster.log
crash dir = $DIR/crash
log to stderr = false
err to stderr = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
mon max pg per osd = 1000
rados osd op timeout = 10
rados mon op timeout = 10

[mon]
mon data = $DIR/mon
paxos propose interval = 0.1
mon osd full ratio = .99
mon osd nearfull ratio = .99
osd failsafe full ratio = .99

[osd]
osd data = $DIR/osd
osd objectstore = $store
osd fast shutdown = false
osd memory target = 1073741824
bluestore block create = true
bluestore block size = ${CKPT_RGW_BLOCK_BYTES:-4294967296}
bluestore fsck on mount = false
bluestore fsck on mkfs = false
bdev aio poll ms = 20
memstore device bytes = 2147483648
osd heartbeat grace = 60

[client.rgw]
# radosgw defaults to the "secure" mode towards the mon, which cephx-less
# auth cannot provide: without this it never connects (EACCES, -13).
ms mon client mode = crc
rgw frontends = $frontend
rgw data = $DIR/rgw
rgw luarocks location = $DIR/rgw/luarocks
rgw dns name = localhost
rgw gc obj min wait = 30
rgw gc processor period = 30
rgw enable usage log = false
# SSE-KMS with keys from this file (the "testing" KMS backend: for tests
# only), so that --s3-sse aws:kms:testkey-1 can be tried; SSE-C needs
# nothing (over HTTPS: rgw crypt require ssl stays true). docs/S3.md.
rgw crypt s3 kms backend = testing
rgw crypt s3 kms encryption keys = testkey-1=$(kms_key) testkey-2=$(kms_key)
EOF
}

# Signs with SigV4 (curl --aws-sigv4); the key pair reaches curl through a
# config file on stdin, never its argv.
curl_signed() {
    local endpoint=$1
    shift
    printf 'user = "%s:%s"\n' "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" |
        curl -K - -s --aws-sigv4 aws:amz:us-east-1:s3 -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' \
            --max-time 10 "$@" "$endpoint"
}

# Waits until an authenticated PUT of the bucket succeeds: that needs RGW,
# the mon and the OSD (an anonymous GET / answers 200 even with RADOS stuck).
wait_bucket_put() {
    local budget=$1 i code
    for ((i = 0; i < budget * 4; i++)); do
        running rgw || die "radosgw exited:
$(tail -20 "$DIR/log/rgw.out" "$DIR/log/client.rgw.log" 2>/dev/null)"
        code=$(curl_signed "$RGW_ENDPOINT/$BUCKET" -X PUT -o /dev/null -w '%{http_code}') || code=000
        [ "$code" = 200 ] && return 0
        sleep 0.25
    done
    die "an authenticated PUT of bucket $BUCKET did not succeed within $budget s (last HTTP $code)"
}

wait_osd_up() {
    local i
    for ((i = 0; i < 240; i++)); do
        running osd || die "ceph-osd exited:
$(tail -20 "$DIR/log/osd.out" "$DIR/log/osd.0.log" 2>/dev/null)"
        if ceph_cli osd dump -f json 2>/dev/null |
            python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(0 if d["osds"] and d["osds"][0]["up"] else 1)' \
                2>/dev/null; then
            return 0
        fi
        sleep 0.25
    done
    die "the OSD did not come up within 60 s"
}

make_certificate() {
    mkdir -p "$DIR/tls"
    timeout 30 openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=localhost \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$DIR/tls/rgw.key" -out "$DIR/tls/rgw.crt" >"$DIR/log/openssl.out" 2>&1 ||
        die "openssl could not make a certificate: $(cat "$DIR/log/openssl.out")"
}

start_watchdog() {
    local owner=$1
    # A detached loop that stops the cluster once the owner is gone; it
    # exits by itself when the cluster is stopped (DIR/pids/mon.pid gone).
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -f "$3/pids/mon.pid" ]; do sleep 1; done
                    [ -f "$3/pids/mon.pid" ] && rm -f "$3/pids/watchdog.pid" && bash "$2" stop "$3"
                    exit 0' \
        rgw-watchdog "$owner" "$(realpath "$0")" "$DIR" >/dev/null 2>&1 </dev/null &
    echo $! >"$DIR/pids/watchdog.pid"
}

do_start() {
    DIR=${1:?usage: rgw.sh start DIR [--memstore] [--https] [--owner PID]}
    shift
    local store=bluestore https=0 owner=""
    while [ $# -gt 0 ]; do
        case $1 in
        --memstore) store=memstore ;;
        --https) https=1 ;;
        --owner) owner=${2:?--owner needs a pid}; shift ;;
        *) die "start: unknown option $1" ;;
        esac
        shift
    done
    need_tools
    mkdir -p "$DIR"
    DIR=$(realpath "$DIR")
    [ -z "$(ls -A "$DIR")" ] || die "$DIR is not empty: start makes a new cluster in an empty directory"
    mkdir -p "$DIR"/{mon,osd,rgw/luarocks,run,log,crash,pids}
    local t0 fsid mon_port rgw_port ssl_port=""
    t0=$(date +%s.%N)
    # Whatever makes start fail from here on, the daemons it started go too.
    trap 'do_stop_dir' EXIT

    fsid=$(cat /proc/sys/kernel/random/uuid)
    mon_port=$(free_port)
    rgw_port=$(free_port)
    if ((https)); then
        ssl_port=$(free_port)
        make_certificate
    fi
    write_conf "$fsid" "$mon_port" "$rgw_port" "$ssl_port" "$store"

    # The monitor: a keyring with the mon. key (needed by --mkfs even with
    # cephx off) and a monmap naming the one mon.
    timeout 30 ceph-authtool --create-keyring "$DIR/keyring" --gen-key -n mon. --cap mon 'allow *' \
        >"$DIR/log/mkfs.out" 2>&1 || die "ceph-authtool failed: $(cat "$DIR/log/mkfs.out")"
    timeout 30 monmaptool --create --clobber --fsid "$fsid" --addv a "[v2:127.0.0.1:$mon_port]" \
        "$DIR/monmap" >>"$DIR/log/mkfs.out" 2>&1 || die "monmaptool failed: $(cat "$DIR/log/mkfs.out")"
    timeout 60 ceph-mon -c "$DIR/ceph.conf" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/keyring" \
        >>"$DIR/log/mkfs.out" 2>&1 || die "ceph-mon --mkfs failed: $(tail -20 "$DIR/log/mkfs.out")"
    spawn mon ceph-mon -i a
    phase "mon made and started"

    # The OSD: registered with the mon, then its store made by --mkfs.
    local uuid id
    uuid=$(cat /proc/sys/kernel/random/uuid)
    id=$(ceph_cli osd new "$uuid" 2>>"$DIR/log/mkfs.out") || die "ceph osd new failed:
$(tail -20 "$DIR/log/mkfs.out" "$DIR/log/mon.a.log" 2>/dev/null)"
    [ "$id" = 0 ] || die "ceph osd new gave id '$id', expected 0"
    echo "$uuid" >"$DIR/osd/fsid.txt"
    timeout 120 ceph-osd -c "$DIR/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" \
        >>"$DIR/log/mkfs.out" 2>&1 || die "ceph-osd --mkfs failed: $(tail -20 "$DIR/log/mkfs.out")"
    spawn osd ceph-osd -i 0
    phase "osd registered, its store made, started"

    # RGW creates its pools on first start; it waits for the OSD itself.
    spawn rgw radosgw -n client.rgw

    # The S3 user, with keys generated by radosgw-admin (read back from its
    # JSON, so they never appear on a command line).
    local i ok=0
    for ((i = 0; i < 30; i++)); do
        if rgw_admin user create --uid=ckpt --display-name=ckpt-tests >"$DIR/user.json" \
            2>>"$DIR/log/mkfs.out"; then
            ok=1
            break
        fi
        sleep 1
    done
    ((ok)) || die "radosgw-admin user create failed: $(tail -20 "$DIR/log/mkfs.out")"
    phase "S3 user created"
    chmod 600 "$DIR/user.json"
    RGW_ACCESS_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["access_key"])' "$DIR/user.json")
    RGW_SECRET_KEY=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["keys"][0]["secret_key"])' "$DIR/user.json")
    RGW_ENDPOINT=http://127.0.0.1:$rgw_port

    wait_bucket_put 90
    phase "bucket PUT succeeded"
    (
        umask 077
        {
            echo "RGW_DIR=$DIR"
            echo "RGW_ENDPOINT=$RGW_ENDPOINT"
            echo "RGW_ACCESS_KEY=$RGW_ACCESS_KEY"
            echo "RGW_SECRET_KEY=$RGW_SECRET_KEY"
            echo "RGW_BUCKET=$BUCKET"
            if ((https)); then
                echo "RGW_HTTPS_ENDPOINT=https://localhost:$ssl_port"
                echo "RGW_CA_FILE=$DIR/tls/rgw.crt"
            fi
        } >"$DIR/env"
    )
    if ((https)); then
        # The HTTPS frontend answers, and only with the certificate trusted.
        curl_signed "https://localhost:$ssl_port/$BUCKET" --cacert "$DIR/tls/rgw.crt" -o /dev/null \
            --fail || die "RGW does not answer over HTTPS on port $ssl_port"
    fi
    [ -n "$owner" ] && start_watchdog "$owner"
    trap - EXIT
    awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f\n", a - b }' >"$DIR/start_seconds"
    echo "rgw.sh: cluster up in $(cat "$DIR/start_seconds") s ($store), RGW at $RGW_ENDPOINT" >&2
    echo "$DIR/env"
}

do_stop_dir() {
    if [ -f "$DIR/pids/watchdog.pid" ]; then
        kill "$(cat "$DIR/pids/watchdog.pid")" 2>/dev/null || true
        rm -f "$DIR/pids/watchdog.pid"
    fi
    stop_daemon rgw
    stop_daemon osd
    stop_daemon mon
}

load_env() {
    # shellcheck disable=SC1091
    . "$DIR/env"
    RGW_ENDPOINT=${RGW_ENDPOINT:?}
}

do_start_rgw() {
    running rgw && die "radosgw of $DIR already runs"
    load_env
    spawn rgw radosgw -n client.rgw
    wait_bucket_put 60
}

do_start_osd() {
    running osd && die "the OSD of $DIR already runs"
    spawn osd ceph-osd -i 0
    wait_osd_up
}

do_status() {
    local d
    for d in mon osd rgw; do
        if running "$d"; then echo "$d $(pid_of "$d") running"; else echo "$d - stopped"; fi
    done
}

do_rss() {
    local d pid kb sum=0
    for d in mon osd rgw; do
        pid=$(pid_of "$d") || continue
        kb=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null) || kb=0
        echo "$d ${kb:-0}"
        sum=$((sum + ${kb:-0}))
    done
    echo "total $sum"
}

cmd=${1:-}
shift || true
[ -n "$cmd" ] && [ "$cmd" != start ] && { DIR=$(realpath "${1:?usage: rgw.sh $cmd DIR}"); }
case $cmd in
start) do_start "$@" ;;
stop) do_stop_dir ;;
stop-rgw) stop_daemon rgw ;;
start-rgw) do_start_rgw ;;
stop-osd) stop_daemon osd ;;
start-osd) do_start_osd ;;
status) do_status ;;
rss) do_rss ;;
*) die "usage: rgw.sh start DIR [--memstore] [--https] [--owner PID] | stop DIR |
       stop-rgw DIR | start-rgw DIR | stop-osd DIR | start-osd DIR | status DIR | rss DIR" ;;
esac
