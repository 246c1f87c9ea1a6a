#!/usr/bin/env bash
# CLI behaviour of ckptctl: help, exit codes, error messages, and that a
# corrupted store object is reported (exit 4) without leaving a bad file.
#   test_ckptctl_cli.sh PATH/TO/ckptctl
set -u
ckptctl=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME=$tmp/cache CKPT_STORE=file://$tmp/store CKPT_JOB=cli
unset CKPT_STEP
passed=0 failed=0

# expect CODE DESCRIPTION -- COMMAND...: runs COMMAND, checks its exit code.
expect() {
    local want=$1 what=$2
    shift 3
    "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" = "$want" ]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        echo "FAIL: $what: exit $got, wanted $want"; cat "$tmp/err"
    fi
}
# contains FILE TEXT DESCRIPTION
contains() {
    if grep -q -- "$2" "$1"; then passed=$((passed + 1)); else
        failed=$((failed + 1)); echo "FAIL: $3: '$2' not in $1:"; cat "$1"; fi
}

expect 0 "top-level help" -- "$ckptctl" --help
contains "$tmp/out" "Exit codes" "help lists exit codes"
for verb in put get ls; do
    expect 0 "$verb --help" -- "$ckptctl" "$verb" --help
    contains "$tmp/out" "usage: ckptctl" "$verb help has usage"
done
expect 2 "no verb" -- "$ckptctl"
expect 2 "unknown verb" -- "$ckptctl" frobnicate
contains "$tmp/err" "unknown verb" "unknown verb message"
expect 2 "bad step" -- "$ckptctl" get --step -3 --to "$tmp/x"
expect 2 "put without step" -- "$ckptctl" put "$tmp"
expect 2 "relative file URL" -- "$ckptctl" --store file://relative/dir ls
expect 2 "unknown scheme" -- "$ckptctl" --store gopher://x ls
expect 2 "hostile job name" -- "$ckptctl" --job ../etc get --step 1 --to "$tmp/x"
contains "$tmp/err" "invalid job name" "job name message"
expect 1 "missing step" -- "$ckptctl" get --step 42 --to "$tmp/x"
contains "$tmp/err" "not committed" "missing step message"
expect 2 "put of a missing dir" -- "$ckptctl" put --step 1 "$tmp/nope"

# A real put/get round trip with an odd file name and a nested directory.
mkdir -p "$tmp/src/sub dir"
head -c 3000000 /dev/urandom >"$tmp/src/sub dir/weights #1.bin"
printf 'hello\n' >"$tmp/src/latest"
ln -s latest "$tmp/src/link"
expect 0 "put" -- "$ckptctl" put --step 1 "$tmp/src"
contains "$tmp/err" "skipping" "symlink skipped with a warning"
expect 0 "get" -- "$ckptctl" get --step 1 --to "$tmp/dst"
if cmp -s "$tmp/src/sub dir/weights #1.bin" "$tmp/dst/sub dir/weights #1.bin" &&
   cmp -s "$tmp/src/latest" "$tmp/dst/latest"; then passed=$((passed + 1)); else
    failed=$((failed + 1)); echo "FAIL: restored files differ"; fi
expect 5 "put of an existing step" -- "$ckptctl" put --step 1 "$tmp/src"

# Flip one byte in the middle of every pack: get must fail with exit 4 and
# must not leave the damaged file under its real name.
for p in $(find "$tmp/store" -name '*.pack'); do
    size=$(stat -c %s "$p")
    printf '\xff' | dd of="$p" bs=1 seek=$((size / 2)) conv=notrunc status=none
done
expect 4 "get of a corrupted step" -- "$ckptctl" get --step 1 --to "$tmp/bad"
contains "$tmp/err" "weights #1.bin" "corruption message names the file"
if [ -e "$tmp/bad/sub dir/weights #1.bin" ]; then
    failed=$((failed + 1)); echo "FAIL: corrupted file left under its name"
else passed=$((passed + 1)); fi
if ls -a "$tmp/bad/sub dir" 2>/dev/null | grep -q ckpt-restore; then
    failed=$((failed + 1)); echo "FAIL: temporary restore file left behind"
else passed=$((passed + 1)); fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
