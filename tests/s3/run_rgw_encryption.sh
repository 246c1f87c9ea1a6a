#!/usr/bin/env bash
# run_rgw_encryption.sh CKPTCTL CKPTFS — client-side encryption
# (docs/ENCRYPTION.md) against Ceph's RADOS Gateway, run under with_rgw.sh
# (CKPT_TEST_STORE_URL, RGW_ENDPOINT and the AWS keys set):
#   * ckptctl put with --encryption-key-file, then restore on a fresh state
#     directory (a new node) bit-exact, and verify;
#   * restore without the key and with another key: exit 3, naming the
#     option or the key id;
#   * every object of the store, downloaded with the AWS CLI, is searched
#     for a marker string the file holds every 4 KiB: not found, and the
#     store has its `encryption` marker; the same put without a key into
#     another prefix stores the marker in plain (the control);
#   * the mount: node a (ckptfs --encryption-key-file) writes a file holding
#     the marker, durable (ckptctl wait), unmounted; no object of its prefix
#     holds the marker (the control: node p, a mount without a key on
#     another prefix, stores it in plain); node b, with the key and a new
#     staging directory, reads the file's bytes back (sha256); node c, with
#     a key file that lacks the key, mounts and does not show the step,
#     logging the key id it lacks; node d, without a key, does not mount
#     (exit 3, "is encrypted: give --encryption-key-file"); no key file's
#     key (base64, hex or raw) is in any daemon's log, status or argv.
# Each daemon is stopped by its PID and every mount unmounted in the EXIT
# trap, whatever failed.
set -u
ckptctl=${1:?usage: run_rgw_encryption.sh CKPTCTL CKPTFS}
ckptfs=${2:?usage: run_rgw_encryption.sh CKPTCTL CKPTFS}
for v in CKPT_TEST_STORE_URL RGW_ENDPOINT AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY; do
    [ -n "${!v:-}" ] || { echo "run_rgw_encryption: $v is not set: run under with_rgw.sh" >&2; exit 2; }
done
tmp=$(mktemp -d)
declare -A fs_pid=()
cleanup() {
    local name
    for name in "${!fs_pid[@]}"; do stop_node "$name" > /dev/null 2>&1; done
    rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
    echo "run_rgw_encryption: FAIL: $*" >&2
    local log
    for log in "$tmp"/node-*.log; do
        [ -e "$log" ] && { echo "--- $log" >&2; tail -20 "$log" >&2; }
    done
    exit 1
}
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
# FILE of 3 MiB of random bytes holding MARKER every 4 KiB (a codec cannot
# shrink it, and any 4 KiB of it that reached the store in plain shows).
marked_file() { # FILE MARKER
    python3 - "$1" "$2" <<'PY' || fail "making $1"
import os, sys
data = bytearray(os.urandom(3 << 20))
for at in range(0, len(data) - 64, 4096):
    data[at:at + len(sys.argv[2])] = sys.argv[2].encode()
open(sys.argv[1], "wb").write(data)
PY
}

# start_node NAME STORE [CKPTFS-OPTION...]: ckptfs for node NAME on
# $tmp/mnt-NAME (staging $tmp/staging-NAME, log $tmp/node-NAME.log) in the
# background; 0 once the mount answers (.ckptfs/status), 1 if the daemon
# exits first or 30 s pass.
start_node() {
    local name=$1 store=$2 i
    shift 2
    mkdir -p "$tmp/mnt-$name"
    "$ckptfs" --store "$store" --staging "$tmp/staging-$name" --node "$name" --refresh 0.5 \
        --drain 60 "$@" -f "$tmp/mnt-$name" 2> "$tmp/node-$name.log" &
    fs_pid[$name]=$!
    for ((i = 0; i < 300; i++)); do
        [ -e "$tmp/mnt-$name/.ckptfs/status" ] && return 0
        kill -0 "${fs_pid[$name]}" 2> /dev/null || return 1
        sleep 0.1
    done
    return 1
}
# stop_node NAME: unmounts node NAME, waits up to 90 s for its daemon to
# drain and exit (then SIGKILL), reaps it; returns the daemon's exit status
# (137 when killed).
stop_node() {
    local name=$1 pid=${fs_pid[$1]:-} i
    if mountpoint -q "$tmp/mnt-$name" 2> /dev/null; then
        timeout 30 fusermount3 -u "$tmp/mnt-$name" || fusermount3 -uz "$tmp/mnt-$name"
    fi
    [ -n "$pid" ] || return 0
    unset "fs_pid[$name]"
    for ((i = 0; i < 900; i++)); do
        kill -0 "$pid" 2> /dev/null || break
        sleep 0.1
    done
    kill -KILL "$pid" 2> /dev/null
    wait "$pid"
}

"$ckptctl" keygen "$tmp/key" > /dev/null || fail keygen
"$ckptctl" keygen "$tmp/other" > /dev/null || fail keygen
mkdir "$tmp/src"
marked_file "$tmp/src/model.bin" "$marker"

ctl "$enc" w --encryption-key-file "$tmp/key" put --step 1 "$tmp/src" || fail "put with a key"
ctl "$enc" r --encryption-key-file "$tmp/key" restore --step 1 --to "$tmp/out" ||
    fail "restore with the key"
cmp "$tmp/src/model.bin" "$tmp/out/model.bin" || fail "restored bytes differ"
ctl "$enc" r --encryption-key-file "$tmp/key" verify --step 1 || fail verify

ctl "$enc" n restore --step 1 --to "$tmp/nokey" 2> "$tmp/err"
rc=$?
if [ $rc != 3 ] || ! grep -q "is encrypted: give --encryption-key-file" "$tmp/err"; then
    fail "restore without a key: exit $rc, $(cat "$tmp/err")"
fi
ctl "$enc" o --encryption-key-file "$tmp/other" restore --step 1 --to "$tmp/other-out" 2> "$tmp/err"
rc=$?
if [ $rc != 3 ] || ! grep -q "which the key file does not hold" "$tmp/err"; then
    fail "restore with another key: exit $rc, $(cat "$tmp/err")"
fi

download "$enc" "$tmp/objs-enc"
[ -f "$tmp/objs-enc/encryption" ] || fail "no encryption marker object"
ls "$tmp/objs-enc/jobs/job/packs/"*/*.pack > /dev/null 2>&1 || fail "no pack downloaded"
if grep -rlF "$marker" "$tmp/objs-enc"; then fail "the marker is in an encrypted store's object"; fi

ctl "$plain" p put --step 1 "$tmp/src" || fail "put without a key"
download "$plain" "$tmp/objs-plain"
grep -rqF "$marker" "$tmp/objs-plain" || fail "control: the marker is not in the plain store"

# ---- the mount ----
# A marker of its own, so that no object of the steps above can match it.
mmarker=ckptfs-rgw-plaintext-marker-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
mstore=$CKPT_TEST_STORE_URL/mount
mplain=$CKPT_TEST_STORE_URL/mount-plain
marked_file "$tmp/src/mount.bin" "$mmarker"
want=$(sha256sum < "$tmp/src/mount.bin" | cut -d' ' -f1)
: > "$tmp/daemon-output" # every daemon's log, status and argv: no key in any (below)

# keep_output NAME: node NAME's status and argv into the daemons' output.
keep_output() {
    cat "$tmp/mnt-$1/.ckptfs/status" >> "$tmp/daemon-output"
    tr '\0' ' ' < "/proc/${fs_pid[$1]}/cmdline" >> "$tmp/daemon-output"
}

# write_step NAME: the file as step 1 of job through node NAME's mount,
# durable (ckptctl wait on the mount's status), then unmounted.
write_step() {
    local mnt=$tmp/mnt-$1
    mkdir -p "$mnt/job/step-1" || fail "mkdir in node $1's mount"
    cp "$tmp/src/mount.bin" "$mnt/job/step-1/model.bin" || fail "writing into node $1's mount"
    : > "$mnt/job/step-1/.ckpt-complete"
    "$ckptctl" --mount "$mnt" --job job wait --step 1 --timeout 120 ||
        fail "step 1 of node $1 not durable in 120 s"
    keep_output "$1"
    stop_node "$1" || fail "node $1: ckptfs exit $?"
}

start_node a "$mstore" --encryption-key-file "$tmp/key" || fail "node a (with the key) did not mount"
write_step a
download "$mstore" "$tmp/objs-mount"
if grep -rlF "$mmarker" "$tmp/objs-mount"; then fail "the marker is in an object the mount wrote"; fi
[ -f "$tmp/objs-mount/encryption" ] || fail "no encryption marker object under the mount's prefix"
ls "$tmp/objs-mount/jobs/job/packs/"*/*.pack > /dev/null 2>&1 || fail "the mount stored no pack"
echo "run_rgw_encryption: $(find "$tmp/objs-mount" -type f | wc -l) objects of the mount, none holds the marker"

# The control: the same file through a mount without a key is in plain.
start_node p "$mplain" || fail "node p (no key, plain store) did not mount"
write_step p
download "$mplain" "$tmp/objs-mount-plain"
grep -rqF "$mmarker" "$tmp/objs-mount-plain" || fail "control: the marker is not in the plain mount's store"

start_node b "$mstore" --encryption-key-file "$tmp/key" || fail "node b (with the key) did not mount"
for ((i = 0; i < 300; i++)); do
    [ -e "$tmp/mnt-b/job/step-1/model.bin" ] && break
    sleep 0.1
done
got=$(timeout 120 sha256sum < "$tmp/mnt-b/job/step-1/model.bin" | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "node b read sha256 ${got:-nothing}, node a wrote $want"
echo "run_rgw_encryption: node b (new staging, the key) reads back what node a wrote: sha256 $got"
keep_output b
stop_node b || fail "node b: ckptfs exit $?"

# Another key: the store is encrypted and the daemon has a keyring, so it
# mounts; step 1's part record is sealed with a key id the keyring lacks, so
# the step is not shown and the log names the key id.
start_node c "$mstore" --encryption-key-file "$tmp/other" || fail "node c (another key) did not mount"
for ((i = 0; i < 300; i++)); do
    grep -q "which the key file does not hold" "$tmp/node-c.log" && break
    kill -0 "${fs_pid[c]}" 2> /dev/null || break
    sleep 0.1
done
grep -q "cannot load step 1 of job: .*sealed with key id .*, which the key file does not hold" \
    "$tmp/node-c.log" || fail "node c (another key) does not log the key id it lacks"
if [ -e "$tmp/mnt-c/job/step-1/model.bin" ]; then fail "node c (another key) shows step 1"; fi
echo "run_rgw_encryption: node c (another key) does not show step 1:" \
    "$(grep -m1 -o "sealed with key id .*" "$tmp/node-c.log")"
keep_output c
stop_node c || fail "node c: ckptfs exit $?"

# No key: the daemon refuses the encrypted store before it mounts.
if start_node d "$mstore"; then fail "node d (no key) mounted the encrypted store"; fi
stop_node d
rc=$?
if [ $rc != 3 ] || ! grep -q "is encrypted: give --encryption-key-file" "$tmp/node-d.log"; then
    fail "node d (no key): exit $rc, $(cat "$tmp/node-d.log")"
fi
echo "run_rgw_encryption: node d (no key) does not mount, exit $rc:" \
    "$(grep -m1 -o "is encrypted: .*" "$tmp/node-d.log")"

cat "$tmp"/node-*.log >> "$tmp/daemon-output"
python3 - "$tmp/daemon-output" "$tmp/key" "$tmp/other" <<'PY' || fail "a key is in a daemon's output"
import base64, sys
out = open(sys.argv[1], "rb").read()
for path in sys.argv[2:]:
    for line in open(path, "rb").read().splitlines():
        b64 = line.split(b" ")[2]
        raw = base64.b64decode(b64, validate=True)
        for form in (b64, b64.rstrip(b"="), raw, raw.hex().encode(), raw.hex().upper().encode()):
            if form in out:
                sys.exit("%s: a key of it is in the daemons' output" % path)
print("run_rgw_encryption: no key in %d bytes of the daemons' logs, status and argv" % len(out))
PY
echo "run_rgw_encryption: ok"
