#!/usr/bin/env bash
# The training stall: torch.save of a >= 1 GiB state dict into (a) the local
# disk directly, (b) libfuse's own passthrough_ll example mounted over a
# directory on the same disk (the FUSE transport floor for a staging-file
# design), (c) ckptfs (file:// store and staging on the same disk), timed
# round-robin in one run. Reports per-target medians and the ratios
# passthrough_ll/disk, ckptfs/passthrough_ll, ckptfs/disk (a benchmark: it
# asserts no speed).
#
#   tests/bench/bench_fuse_save.sh BUILD_DIR [--smoke] [--size-mib N] [--reps N]
#       [--state random|model|both] [--ckptfs PATH] [--ckptctl PATH]
#       [--require-ckptfs] [--workdir DIR] [--json FILE] [--same-state]
#       [--ckptfs-base PATH] [--ckptfs-also NAME=PATH ...] [--close-sync-bg]
#       [--series N [--series-reps R]] [--rclone] [--keep N]
#
# Every save writes new bytes (all values change between saves, untimed) as
# in full training; --same-state saves identical bytes (dedup's best case).
# --smoke: 64 MiB, 1 repetition, random tensors only (CI: proves it runs).
# Default: 1024 MiB, 5 repetitions, both states (random fp32 tensors; a
# transformer + AdamW state). ckptfs is taken from --ckptfs or BUILD_DIR/fs/ckptfs;
# when it is not there the run reports (a) and (b) only and says so loudly,
# or fails with --require-ckptfs. ckptctl (--ckptctl or BUILD_DIR/tools/ckptctl)
# is used to wait, untimed, until each ckptfs save is durable before the next
# save, so its background upload does not slow the other targets.
# --ckptfs-base PATH mounts a second ckptfs (say, built from an earlier
# commit) as target ckptfs-base, with a store and staging of its own, so a
# change is measured before/after side by side in one run; --ckptfs-also
# NAME=PATH adds more (NAME starting with ckptfs-). --close-sync-bg also
# mounts the --ckptfs build with --close-sync background as target
# ckptfs-bg (docs/MOUNT.md, "When close() waits for the disk"). --series N: then
# N saves per target in a row with no waiting, earlier ckptfs steps still
# uploading, one target at a time, each settled before the next target's
# saves (fuse_save_bench.py); --series-reps R: R such rounds (default 1),
# per save index the median of the R paired ratios. --rclone: also rclone
# mount (Debian's rclone) of a local directory as its remote, with the VFS
# cache mode the peers bench uses (`writes`); after each save the run waits,
# untimed, until rclone has copied the file to its remote. --keep N: each
# target keeps its N newest files, the trainer deleting older ones just
# before a save (default 1: the previous file goes; a large N keeps every
# checkpoint, as a job without rotation does: ~N GiB of disk per target).
# passthrough_ll is compiled from /usr/share/doc/libfuse3-dev/examples into
# BUILD_DIR/tests/bench/. Work files go to a fresh dir under --workdir
# (default /var/tmp: a disk, not a tmpfs). Every mount is unmounted in a trap
# (lazily if busy), daemons are killed by PID, the work dir is removed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/benchopt.sh"
bench_build_dir "$@"
shift
size=1024 reps=5 state=both ckptfs="" ckptctl="" require=0 workdir=/var/tmp json="" smoke=0
base="" series=0 series_reps=1 rclone=0 keep=1 close_bg=0
also=()
same=()
while [ $# -gt 0 ]; do
    case "$1" in
    --smoke) smoke=1 size=64 reps=1 state=random ;;
    --size-mib) size=$2; shift ;;
    --reps) reps=$2; shift ;;
    --state) state=$2; shift ;;
    --ckptfs) ckptfs=$2; shift ;;
    --ckptctl) ckptctl=$2; shift ;;
    --require-ckptfs) require=1 ;;
    --workdir) workdir=$2; shift ;;
    --json) json=$2; shift ;;
    --same-state) same=(--same-state) ;;
    --ckptfs-base) base=$2; shift ;;
    --ckptfs-also) also+=("$2"); shift ;;
    --close-sync-bg) close_bg=1 ;;
    --series) series=$2; shift ;;
    --series-reps) series_reps=$2; shift ;;
    --rclone) rclone=1 ;;
    --keep) keep=$2; shift ;;
    -h|--help) usage ;;
    *) echo "bench_fuse_save: unknown option $1" >&2; usage ;;
    esac
    shift
done
[ -n "$ckptfs" ] || ckptfs=$build/fs/ckptfs
[ -n "$ckptctl" ] || ckptctl=$build/tools/ckptctl
py=/usr/bin/python3
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ "$smoke" = 1 ]; then run_limit=600 settle=60; else run_limit=5400 settle=300; fi

if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
    echo "bench_fuse_save: FUSE not usable here (/dev/fuse, fusermount3)" >&2
    exit 77
fi

work=$(mktemp -d "$workdir/ckptfs-bench.XXXXXX")
mounts=() pids=() runner=""

is_mounted() { awk -v m="$1" '$5 == m { f = 1 } END { exit !f }' /proc/self/mountinfo; }

cleanup() {
    local rc=$? i
    trap - EXIT INT TERM
    if [ -n "$runner" ]; then  # the timed run (timeout passes the TERM on to python)
        kill -TERM "$runner" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$runner" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$runner" 2>/dev/null || true
        wait "$runner" 2>/dev/null || true
    fi
    if [ "$rc" != 0 ]; then  # what the daemons said, before their work dir goes
        df -h "$work" >&2 || true
        for f in "$work"/*.log; do
            [ -e "$f" ] || continue
            echo "== bench_fuse_save: the run failed; last lines of $f" >&2
            tail -n 20 "$f" >&2
        done
        for m in "$work"/ckptfs*/.ckptfs/status; do
            [ -e "$m" ] && { echo "== $m" >&2; timeout 10 cat "$m" >&2 || true; }
        done
    fi
    for i in "${!mounts[@]}"; do
        if is_mounted "${mounts[$i]}"; then
            timeout 20 fusermount3 -u "${mounts[$i]}" 2>/dev/null ||
                timeout 10 fusermount3 -u -z "${mounts[$i]}" 2>/dev/null || true
        fi
        if kill -0 "${pids[$i]}" 2>/dev/null; then
            for _ in $(seq 100); do kill -0 "${pids[$i]}" 2>/dev/null || break; sleep 0.1; done
            kill -9 "${pids[$i]}" 2>/dev/null || true
        fi
        wait "${pids[$i]}" 2>/dev/null || true
    done
    rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# mount_daemon NAME MOUNTPOINT CMD...: start CMD in the background, wait (at
# most 20 s, failing fast if it exits) until MOUNTPOINT is a FUSE mount.
mount_daemon() {
    local name=$1 mnt=$2 pid
    shift 2
    mkdir -p "$mnt"
    "$@" >"$work/$name.log" 2>&1 &
    pid=$!
    mounts+=("$mnt") pids+=("$pid")
    for _ in $(seq 200); do
        if is_mounted "$mnt"; then return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "bench_fuse_save: $name exited before mounting; its log:" >&2
            cat "$work/$name.log" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "bench_fuse_save: $name not mounted on $mnt after 20 s; its log:" >&2
    cat "$work/$name.log" >&2
    return 1
}

fstype=$(stat -f -c %T "$work")
echo "== torch.save into disk / passthrough_ll / ckptfs: $size MiB, $reps repetitions"
echo "kernel $(uname -r), libfuse $(pkg-config --modversion fuse3), $(nproc) CPUs," \
     "work dir $work ($fstype)"
[ "$fstype" != tmpfs ] || echo "!! WARNING: $workdir is a tmpfs, not a disk: use --workdir"

ptll=$build/tests/bench/passthrough_ll
src=/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c
if [ ! -x "$ptll" ] || [ "$src" -nt "$ptll" ]; then
    mkdir -p "$(dirname "$ptll")"
    # shellcheck disable=SC2046  # pkg-config prints several words
    gcc -O2 -Wall -o "$ptll.tmp" "$src" $(pkg-config --cflags --libs fuse3)
    mv "$ptll.tmp" "$ptll"
fi

mkdir -p "$work/disk" "$work/ptll-src"
mount_daemon passthrough_ll "$work/ptll" "$ptll" -f -o "source=$work/ptll-src" "$work/ptll"
targets=(--target "disk=$work/disk" --target "passthrough_ll=$work/ptll/job")
settle_args=()

# mount_ckptfs NAME BINARY [OPTION...]: mount BINARY as target NAME, store
# and staging under $work/NAME-*, with the options given.
mount_ckptfs() {
    local name=$1 bin=$2
    shift 2
    echo "$name: $bin $* (store file://$work/$name-store, staging $work/$name-staging)"
    mkdir -p "$work/$name-store" "$work/$name-staging"
    mount_daemon "$name" "$work/$name" "$bin" "$work/$name" --store "file://$work/$name-store" \
        --staging "$work/$name-staging" --node bench -f "$@"
    timeout 30 mkdir "$work/$name/bench"
    targets+=(--target "$name=$work/$name/bench")
    settle_args+=(--settle "$name=file://$work/$name-store")
}

if [ -n "$base" ] && [ ! -x "$base" ]; then
    echo "bench_fuse_save: --ckptfs-base $base is not an executable" >&2
    exit 1
fi
if [ -x "$ckptfs" ]; then
    mount_ckptfs ckptfs "$ckptfs"
    [ -z "$base" ] || mount_ckptfs ckptfs-base "$base"
    [ "$close_bg" = 0 ] || mount_ckptfs ckptfs-bg "$ckptfs" --close-sync background
    for spec in ${also[@]+"${also[@]}"}; do
        case "${spec%%=*}" in
        ckptfs-?*) ;;
        *) echo "bench_fuse_save: --ckptfs-also $spec: NAME must start with ckptfs-" >&2; exit 1 ;;
        esac
        [ -x "${spec#*=}" ] || { echo "bench_fuse_save: --ckptfs-also $spec: not an executable" >&2; exit 1; }
        mount_ckptfs "${spec%%=*}" "${spec#*=}"
    done
    if [ -x "$ckptctl" ]; then
        settle_args+=(--settle-ckptctl "$ckptctl" --settle-job bench --settle-timeout "$settle")
    else
        echo "!! no ckptctl at $ckptctl: not waiting for durability between saves"
        settle_args=()
    fi
else
    echo
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo "!! ckptfs NOT BUILT: no executable at $ckptfs"
    if [ "$require" = 1 ]; then
        echo "!! --require-ckptfs given: failing."
        echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
        exit 1
    fi
    echo "!! Reporting disk and passthrough_ll ONLY (no ckptfs numbers in this run)."
    echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
    echo
fi

if [ "$rclone" = 1 ]; then
    command -v rclone >/dev/null || { echo "bench_fuse_save: --rclone: no rclone on PATH" >&2; exit 1; }
    mkdir -p "$work/rclone-remote" "$work/rclone-cache"
    mount_daemon rclone "$work/rclone" rclone mount "$work/rclone-remote" "$work/rclone" \
        --vfs-cache-mode writes --cache-dir "$work/rclone-cache" --log-level NOTICE
    mkdir -p "$work/rclone/job"
    targets+=(--target "rclone=$work/rclone/job")
    settle_args+=(--settle-file "rclone=$work/rclone-remote/job")
fi

json_args=()
[ -z "$json" ] || json_args=(--json "$json")
# In the background and waited for, so that a signal reaches the trap at once
# (bash defers traps while a foreground command runs).
timeout --kill-after=10 "$run_limit" "$py" "$here/fuse_save_bench.py" "${targets[@]}" \
    --size-mib "$size" --reps "$reps" --state "$state" ${settle_args[@]+"${settle_args[@]}"} \
    ${json_args[@]+"${json_args[@]}"} ${same[@]+"${same[@]}"} --series "$series" --series-reps "$series_reps" --keep "$keep" &
runner=$!
wait "$runner"
runner=""

if [ -x "$ckptfs" ]; then
    echo
    echo "== $work/ckptfs/.ckptfs/status after the run"
    timeout 10 cat "$work/ckptfs/.ckptfs/status" || echo "(status not readable)"
fi
