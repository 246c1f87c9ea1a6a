#!/usr/bin/env bash
# ckptfs --config (fs/fs_config.c) and its log (fs/fs_log.c), through the
# real daemon: errors name the file and line; a secret in a file others can
# read is refused without being printed; a 0600 file's secret is accepted
# and appears in neither argv nor the initial environment; the command line
# wins over the file (--node, --log-level); stderr lines carry journald
# priority prefixes; relative paths are taken from the starting directory.
#   test_ckptfs_config.sh PATH/TO/ckptfs
set -euo pipefail
ckptfs=$(readlink -f "$1") # the block that changes directory runs it too
tmp=$(mktemp -d /tmp/ckptfs-config.XXXXXX)
pid=""
cleanup() {
    local rc=$?
    set +e
    for m in "$tmp/mnt" "$tmp/cwd/mnt"; do
        mountpoint -q "$m" && { timeout 30 fusermount3 -u "$m" || fusermount3 -uz "$m"; }
    done
    if [ -n "$pid" ]; then
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
passed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }

# expect_refusal FILE WANT: the daemon exits 2 naming WANT, before mounting.
expect_refusal() {
    local rc=0
    timeout 20 "$ckptfs" --config "$1" "$tmp/mnt" 2>"$tmp/err" || rc=$?
    [ "$rc" = 2 ] || { cat "$tmp/err"; fail "$1: exit $rc, wanted 2"; }
    grep -qF -- "$2" "$tmp/err" || { cat "$tmp/err"; fail "$1: '$2' not in the error"; }
}
mkdir "$tmp/mnt"

printf 'store = file://%s/store\n# comment\nstagin = /x\n' "$tmp" >"$tmp/typo.conf"
expect_refusal "$tmp/typo.conf" "$tmp/typo.conf:3: unknown key 'stagin'"
printf 'upload-threads = 64\n' >"$tmp/value.conf"
expect_refusal "$tmp/value.conf" "$tmp/value.conf:1: upload-threads wants a whole number 1..32, got '64'"
expect_refusal "$tmp/missing.conf" "$tmp/missing.conf: No such file or directory"
ok "bad configuration files: exit 2 with file:line"

secret=Sx9-not-for-logs-$$
printf 'store = file://%s/store\naws-access-key-id = AKIDTEST\naws-secret-access-key = %s\n' \
    "$tmp" "$secret" >"$tmp/secret.conf"
for mode in 644 640 604; do
    chmod "$mode" "$tmp/secret.conf"
    expect_refusal "$tmp/secret.conf" "$tmp/secret.conf:2: holds a secret but is readable by group or others (mode 0$mode)"
    grep -q "$secret" "$tmp/err" && fail "the secret is in the error"
done
rc=0
timeout 20 "$ckptfs" --aws-secret-access-key "$secret" "$tmp/mnt" 2>"$tmp/err" || rc=$?
[ "$rc" = 2 ] || fail "--aws-secret-access-key on the command line: exit $rc, wanted 2"
ok "a secret in a group/world-readable file is refused, unprinted; not an option"

# A 0600 file: mounts. The command line wins: --node and --log-level.
chmod 600 "$tmp/secret.conf"
cat >>"$tmp/secret.conf" <<CONF
staging = $tmp/staging
mountpoint = $tmp/mnt
node = from-file
log-level = debug
drain = 5
CONF
"$ckptfs" --config "$tmp/secret.conf" --node from-cli -f 2>"$tmp/log" &
pid=$!
for _ in $(seq 100); do [ -e "$tmp/mnt/.ckptfs/status" ] && break; sleep 0.1; done
[ -e "$tmp/mnt/.ckptfs/status" ] || { cat "$tmp/log"; fail "no mount"; }
grep -q "^$tmp/secret.conf $tmp/mnt fuse.ckptfs " /proc/mounts || fail "the config is not the mount's source"
grep -q '"node":"from-cli"' "$tmp/mnt/.ckptfs/status" || fail "--node did not win: $(head -c 200 "$tmp/mnt/.ckptfs/status")"
for f in cmdline environ; do
    tr '\0' '\n' <"/proc/$pid/$f" | grep -q "$secret" && fail "the secret is in /proc/PID/$f"
done
ok "0600 file accepted; the command line wins (node from-cli); secret not in argv or environ"
grep -qx "<6>ckptfs: file://$tmp/store mounted on $tmp/mnt (staging $tmp/staging)" "$tmp/log" ||
    { cat -A "$tmp/log"; fail "no <6> info line on a non-terminal stderr"; }
ok "stderr (not a terminal) lines carry <N> prefixes"
timeout 30 fusermount3 -u "$tmp/mnt"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
wait "$pid" || fail "ckptfs exit $?"
pid=""

# run_once ENV... -- ARGS...: mounts with the config (stderr to $tmp/log),
# unmounts, waits for a clean exit.
run_once() {
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$ckptfs" --config "$tmp/secret.conf" "$@" -f 2>"$tmp/log" &
    pid=$!
    for _ in $(seq 100); do [ -e "$tmp/mnt/.ckptfs/status" ] && break; sleep 0.1; done
    [ -e "$tmp/mnt/.ckptfs/status" ] || { cat "$tmp/log"; fail "no mount"; }
    timeout 30 fusermount3 -u "$tmp/mnt"
    wait "$pid" || fail "ckptfs exit $?"
    pid=""
}

# --log-level warn on the command line beats log-level = debug in the file.
run_once -- --log-level warn
grep -q "^<6>" "$tmp/log" && { cat -A "$tmp/log"; fail "info lines at --log-level warn"; }
ok "--log-level warn drops info lines"

# Under systemd ($JOURNAL_STREAM): "<6>" and no "ckptfs:" (journald adds it).
run_once JOURNAL_STREAM=9:12345 -- --log-level info
grep -qx "<6>file://$tmp/store mounted on $tmp/mnt (staging $tmp/staging)" "$tmp/log" ||
    { cat -A "$tmp/log"; fail "no journald-style line under JOURNAL_STREAM"; }
ok "under \$JOURNAL_STREAM: <N> lines without the ckptfs: prefix"
# Relative paths are taken from the directory ckptfs starts in: libfuse
# moves the daemon to / when it starts serving, after which a relative
# staging directory named nothing (the mount came up, and every write
# failed with EIO).
mkdir "$tmp/cwd" "$tmp/cwd/mnt"
(cd "$tmp/cwd" && exec "$ckptfs" mnt --store "file://$tmp/store-rel" --staging rel-staging \
    --node rel -f 2>"$tmp/log") &
pid=$!
for _ in $(seq 100); do [ -e "$tmp/cwd/mnt/.ckptfs/status" ] && break; sleep 0.1; done
[ -e "$tmp/cwd/mnt/.ckptfs/status" ] || { cat "$tmp/log"; fail "no mount from relative paths"; }
mkdir "$tmp/cwd/mnt/job"
printf 'relative paths\n' >"$tmp/cwd/mnt/job/f.txt" || { cat "$tmp/log"; fail "write failed"; }
[ "$(cat "$tmp/cwd/mnt/job/f.txt")" = "relative paths" ] || fail "read back differs"
[ -e "$tmp/cwd/rel-staging/index.db" ] || { cat "$tmp/log"; fail "no index.db in the relative staging directory"; }
grep -q "error" "$tmp/log" && { cat "$tmp/log"; fail "errors in the log"; }
grep -qF "mounted on $tmp/cwd/mnt (staging $tmp/cwd/rel-staging)" "$tmp/log" ||
    { cat "$tmp/log"; fail "the log does not name the absolute paths"; }
timeout 30 fusermount3 -u "$tmp/cwd/mnt"
wait "$pid" || fail "ckptfs exit $?"
pid=""
ok "relative MOUNTPOINT and --staging are taken from the starting directory"
echo "test_ckptfs_config: $passed checks passed"
