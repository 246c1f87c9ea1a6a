#!/usr/bin/env bash
# The peer benchmark: ckptfs side by side with s3fs, rclone mount (VFS cache
# modes writes and full), torch.save then `aws s3 cp`, and the local disk
# alone (the floor), every tool on the same S3 server in the same run, the
# order rotated per repetition (docs/BENCHMARKS.md, "Peers").
#
#   tests/bench/peers/run.sh BUILD_DIR [--smoke] [--servers s3rver,rgw]
#       [--tools LIST] [--plan SCENARIO:SIZE_MIB:REPS[:SAVES]]... [--reps N] [--saves N]
#       [--out DIR] [--doc FILE] [--workdir DIR] [--rgw-memstore]
#
# Default (the full run, about 26 min on this 2-vCPU machine while busy):
# both servers, 1 save per run (--saves); on each, full at 256 MiB (the
# transformer + AdamW, fp32) with --reps repetitions (default 5); on s3rver
# also dcp (the 4-rank DCP step) at 64 MiB with --reps repetitions, and one
# repetition each of full (the growth plot's second point), bf16, finetune
# (2 saves: the second is what a frozen backbone makes incremental) and ddp
# at 64 MiB. Sized by probes on the busy machine: one repetition of every
# tool took 133 s for full at 256 MiB with 2 saves and 4 min for dcp at 256
# MiB with 2 saves, so 1 GiB x 5 repetitions (~40 min per server) cannot
# fit the 30 minutes. The long variant, a separate command:
#   run.sh BUILD --servers s3rver --plan full:1024:5 --plan full:4096:1
# --plan SCENARIO:MIB:REPS[:SAVES] (repeatable) replaces the plan for every
# server; docs/BENCHMARKS.md, "Peers", lists the plan that was run.
# --smoke: s3rver only, full at 8 MiB and dcp at 4 MiB, 1 repetition, 1 save,
# rclone's --vfs-write-back 100ms instead of its 5 s (so the smoke takes
# about a minute; its durable times for rclone are not the default's) (CI,
# label bench: fails when a scenario errors or a restore is not
# byte-identical, never on a timing).
#
# --workdir (default /var/tmp) holds everything: servers, caches, staging.
# --rgw-memstore: RGW's OSD keeps objects in RAM instead of bluestore on a
# sparse file (with --workdir /dev/shm: bluestore needs O_DIRECT, which
# tmpfs refuses; Ceph's mon refuses to start with under 5% of its disk free).
#
# Writes into --out (default docs/peers in the source tree, linked from the page,
# or a temp dir with --smoke): results.jsonl (every run), peers.json (every
# figure: per-run values and the medians/ranges/ratios the tables show),
# *.png (plots), peers.md (the section), and, unless --smoke or --doc "",
# replaces the "Peers" section of --doc (default docs/BENCHMARKS.md).
#
# The servers (tests/s3/s3rver.sh, tests/s3/rgw.sh), one counting proxy in
# front of each (tests/s3/faultproxy.py without faults) and every mount are
# started by this run and stopped by PID in its EXIT trap (mounts: by
# peers_bench.py, which also unmounts in its own trap). Credentials only in
# the environment and mode-600 files. Everything on 127.0.0.1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../benchopt.sh"
bench_build_dir "$@"
shift
orig_args="$*"
src=$(cd "$here/../../.." && pwd)
servers=s3rver,rgw smoke=0 saves=1 reps=5 out="" doc=$src/docs/BENCHMARKS.md workdir=/var/tmp
write_back="" # rclone's --vfs-write-back: its default (5 s) unless --smoke
rgw_flags=()  # --rgw-memstore: the OSD in RAM (rgw.sh --memstore)
plans=() tool_list=ckptfs,s3fs,rclone-writes,rclone-full,aws-cp,local
while [ $# -gt 0 ]; do
    case "$1" in
    --smoke) smoke=1 servers=s3rver saves=1 doc="" write_back=100ms ;;
    --servers) servers=${2:?}; shift ;;
    --tools) tool_list=${2:?}; shift ;;
    --plan) plans+=("${2:?}"); shift ;;
    --saves) saves=${2:?}; shift ;;
    --reps) reps=${2:?}; shift ;;
    --out) out=${2:?}; shift ;;
    --doc) doc=$2; shift ;;
    --workdir) workdir=${2:?}; shift ;;
    --rgw-memstore) rgw_flags=(--memstore) ;;
    -h | --help) usage ;;
    *) echo "peers: unknown option $1" >&2; usage ;;
    esac
    shift
done

py=/usr/bin/python3
aws=/usr/bin/aws
for t in "$build/fs/ckptfs" "$build/tools/ckptctl" "$aws" /usr/bin/s3fs /usr/bin/rclone \
    /usr/bin/fusermount /usr/bin/fusermount3 "$py"; do
    [ -x "$t" ] || { echo "peers: $t missing (tools/bootstrap.sh installs s3fs rclone awscli" \
        "python3-matplotlib; build ckptfs first)" >&2; exit 2; }
done
$py -c 'import matplotlib, torch' || { echo "peers: python3-matplotlib/python3-torch missing" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "peers: /dev/fuse missing" >&2; exit 2; }
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset CKPT_STORE CKPT_JOB

work=$(mktemp -d "$workdir/ckpt-peers.XXXXXX")
if [ -z "$out" ]; then
    if [ "$smoke" = 1 ]; then out=$work/out; else out=$src/docs/peers; fi
fi
mkdir -p "$out"
: >"$out/results.jsonl"
proxy_pid="" bench_pid=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then # it unmounts in its trap
        kill -TERM "$bench_pid" 2>/dev/null || true
        for _ in $(seq 300); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$bench_pid" 2>/dev/null || true
    fi
    [ -z "$proxy_pid" ] || { kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; }
    bash "$src/tests/s3/s3rver.sh" stop "$work/s3rver" >/dev/null 2>&1 || true
    [ ! -d "$work/rgw" ] || bash "$src/tests/s3/rgw.sh" stop "$work/rgw" >/dev/null 2>&1 || true
    for m in $(awk -v w="$work" 'index($5, w) == 1 { print $5 }' /proc/self/mountinfo); do
        fusermount3 -u -z "$m" 2>/dev/null || true  # a mount peers_bench.py could not undo
    done
    if [ "$rc" = 0 ]; then rm -rf "$work"; else echo "peers: failed; logs kept in $work" >&2; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

default_plan() { # SERVER
    if [ "$smoke" = 1 ]; then
        echo full:8:1 dcp:4:1 # a file, a step directory of 4 ranks (ddp differs in its saver only)
    elif [ "$1" = s3rver ]; then
        echo "full:256:$reps dcp:64:$reps full:64:1 bf16:64:1 finetune:64:1:2 ddp:64:1"
    else
        echo "full:256:$reps"
    fi
}

# start_server NAME: sets endpoint, server_pids and the credentials.
start_server() {
    case $1 in
    s3rver)
        local port
        port=$(bash "$src/tests/s3/s3rver.sh" start "$work/s3rver" --owner $$)
        endpoint=http://127.0.0.1:$port
        server_pids=$(cat "$work/s3rver/s3rver.pid")
        export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER ;;
    rgw)
        local env_file
        # A sparse file: only what is stored takes disk (deleted objects
        # come back after RGW's GC, 30 s here).
        env_file=$(CKPT_RGW_BLOCK_BYTES=$((48 << 30)) bash "$src/tests/s3/rgw.sh" start "$work/rgw" \
            "${rgw_flags[@]}" --owner $$)
        # shellcheck disable=SC1090
        . "$env_file"
        endpoint=$RGW_ENDPOINT
        server_pids=$(cat "$work"/rgw/pids/*.pid | paste -sd,)
        export AWS_ACCESS_KEY_ID=$RGW_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$RGW_SECRET_KEY ;;
    *) echo "peers: unknown server $1 (s3rver, rgw)" >&2; exit 2 ;;
    esac
}
stop_server() {
    case $1 in
    s3rver) bash "$src/tests/s3/s3rver.sh" stop "$work/s3rver" ;;
    rgw) bash "$src/tests/s3/rgw.sh" stop "$work/rgw" ;;
    esac
}

start_proxy() {
    rm -f "$work/proxy.port" "$work/proxy.stats"
    $py "$src/tests/s3/faultproxy.py" --target-port "${endpoint##*:}" --port-file "$work/proxy.port" \
        --stats-file "$work/proxy.stats" --owner-pid $$ >"$work/proxy.log" 2>&1 &
    proxy_pid=$!
    for _ in $(seq 100); do [ -s "$work/proxy.port" ] && return 0; sleep 0.1; done
    echo "peers: the counting proxy did not start: $(cat "$work/proxy.log")" >&2
    exit 1
}

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "kernel: $(uname -r); CPUs: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
    echo "memory: $(free -g | awk '/Mem:/ { print $2 }') GiB; workdir: $(stat -f -c %T "$work") ($workdir)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "versions: ckptfs $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo ?);" \
        "$(s3fs --version 2>&1 | head -1 | sed 's/ (commit.*//');" \
        "$(rclone version 2>/dev/null | head -1); $($aws --version 2>&1 | cut -d' ' -f1);" \
        "torch $($py -c 'import torch; print(torch.__version__)'); libfuse $(pkg-config --modversion fuse3)"
} >"$out/machine.txt"
cat "$out/machine.txt" >&2

t_start=$(date +%s)
status=0
IFS=, read -ra server_list <<<"$servers"
for server in "${server_list[@]}"; do
    echo "== server $server" >&2
    start_server "$server"
    start_proxy
    mine=("${plans[@]}")
    [ ${#mine[@]} -gt 0 ] || read -ra mine <<<"$(default_plan "$server")"
    plan_args=()
    for p in "${mine[@]}"; do plan_args+=(--plan "$p"); done
    echo "plan on $server (scenario:MiB:repetitions, $saves saves per run): ${mine[*]}" >>"$out/machine.txt"
    $py "$here/peers_bench.py" --server "$server" --bucket ckpt-test --direct "$endpoint" \
        --proxy "http://127.0.0.1:$(cat "$work/proxy.port")" --proxy-stats "$work/proxy.stats" \
        --server-pids "$server_pids" --ckptfs "$build/fs/ckptfs" --ckptctl "$build/tools/ckptctl" \
        --aws "$aws" --work "$work/runs" --out "$out/results.jsonl" --tools "$tool_list" \
        --saves "$saves" --vfs-write-back "$write_back" "${plan_args[@]}" &
    bench_pid=$!
    wait "$bench_pid" || status=1
    bench_pid=""
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    proxy_pid=""
    stop_server "$server"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); wall time: $(($(date +%s) - t_start)) s" \
    >>"$out/machine.txt"

$py "$here/report.py" --results "$out/results.jsonl" --machine "$out/machine.txt" --out "$out" \
    --command "bash tests/bench/peers/run.sh BUILD${orig_args:+ $orig_args}" ${doc:+--doc "$doc"} || status=1
echo "peers: results in $out" >&2
exit "$status"
