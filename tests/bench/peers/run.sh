#!/usr/bin/env bash
# The peer benchmark: ckptfs side by side with s3fs, rclone mount (VFS cache
# modes writes and full), torch.save then `aws s3 cp`, and the local disk
# alone (the floor), every tool on the same S3 server in the same run, the
# order rotated per repetition (docs/BENCHMARKS.md, "Peers").
#
#   tests/bench/peers/run.sh BUILD_DIR [--smoke] [--servers s3rver,rgw]
#       [--tools LIST] [--plan SCENARIO:SIZE_MIB:REPS[:SAVES]]... [--reps N] [--saves N]
#       [--out DIR] [--doc FILE] [--workdir DIR] [--rgw-memstore]
#       [--table-mib N] [--budget-min N] [--append] [--dry-run]
#       [--rclone-write-back DUR]
#
# Default (the full run; docs/BENCHMARKS.md, "Peers: the run above", says how
# each piece's estimate was measured; --dry-run prints them): 1 save per
# run, every tool in every piece. First the tables, on every server in
# turn: --reps repetitions (default 5) of full (the transformer + AdamW,
# fp32), bf16, finetune (2 saves: the second is what a frozen backbone
# makes incremental), ddp and dcp at --table-mib (default 16) MiB. Then the
# growth points of full, 1 repetition: 256 MiB on every server (the last
# first, so it runs on), then 1 GiB and 4 GiB on the first server (s3rver;
# one 4 GiB repetition of all six tools is ~10 min here, it cannot be on
# both in 30 min). Before each piece run.sh prints its estimate (a
# per-repetition cost model from the quiet run, estimate_s) and after it
# the elapsed time; a piece whose estimate does not fit in what is left of
# --budget-min (default 30) is skipped with a message (also in machine.txt)
# rather than overrunning. The whole plan is estimated (pessimistically)
# at ~30 min; quiet, it took 23.5 min (docs/BENCHMARKS.md, "Peers: the run
# above").
# --plan SCENARIO:MIB:REPS[:SAVES] (repeatable) replaces the plan for every
# server; docs/BENCHMARKS.md, "Peers", lists the plan that was run.
# --tools LIST: the tools to run (default ckptfs,s3fs,rclone-writes,
# rclone-full,aws-cp,local); s3fs-1put and aws-cp-1put are s3fs and aws-cp
# set to one PUT per file (tools.py), for the single-PUT comparison;
# ckptfs runs with its defaults, ckptfs-cold is ckptfs whose resuming node
# does not warm up (`--prefetch none`: the cold read path).
# --rclone-write-back DUR: rclone's --vfs-write-back, the delay from a
# close to the upload (default 1s; rclone's own default, 5s, only adds idle
# waiting to rclone's time to durable: ~10 min of the full run; "" for it).
# --smoke: s3rver only, full at 8 MiB and dcp at 4 MiB, 1 repetition, 1 save,
# rclone's --vfs-write-back 100ms (so the smoke takes about a minute) (CI,
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
# results.jsonl gets one line per run as it ends, and the report is also
# written when the run is killed or fails, from the runs that finished.
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
write_back=1s # rclone's --vfs-write-back (--rclone-write-back; --smoke: 100ms)
rgw_flags=()  # --rgw-memstore: the OSD in RAM (rgw.sh --memstore)
table_mib=16 budget_min=30 append=0 dry=0
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
    --table-mib) table_mib=${2:?}; shift ;;
    --budget-min) budget_min=${2:?}; shift ;;
    --append) append=1 ;;
    --rclone-write-back) write_back=$2; shift ;;
    --dry-run) dry=1 doc="" ;; # the plan and its estimates only; writes nothing
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
    if [ "$smoke" = 1 ] || [ "$dry" = 1 ]; then out=$work/out; else out=$src/docs/peers; fi
fi
mkdir -p "$out"
[ "$append" = 1 ] || : >"$out/results.jsonl" # --append: a second run adds to the first
proxy_pid="" bench_pid="" reported=1 t_start=$(date +%s)
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then # it unmounts in its trap
        kill -TERM "$bench_pid" 2>/dev/null || true
        for _ in $(seq 300); do kill -0 "$bench_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$bench_pid" 2>/dev/null || true
    fi
    [ -z "$proxy_pid" ] || { kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; }
    if [ "$reported" = 0 ] && [ -s "$out/results.jsonl" ]; then # killed or failed: what finished
        echo "peers: stopped early (exit $rc); reporting the runs that finished" >&2
        echo "stopped early (exit $rc) after $(($(date +%s) - t_start)) s;" \
            "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
        report || true
    fi
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

table_plan() { # the tables: every scenario, --reps repetitions, at --table-mib
    if [ "$smoke" = 1 ]; then
        echo full:8:1 dcp:4:1 # a file, a step directory of 4 ranks (ddp differs in its saver only)
        return
    fi
    local t=$table_mib
    echo "full:$t:$reps bf16:$t:$reps finetune:$t:$reps:2 ddp:$t:$reps dcp:$t:$reps"
}

growth_plan() { # SERVER IS_FIRST_SERVER: the growth plots' points, 1 repetition
    [ "$smoke" = 0 ] || return 0
    local plan="full:256:1"
    [ "$2" = 0 ] || plan+=" full:1024:1 full:4096:1"
    echo "$plan"
}

start_estimate_s() { # SERVER: seconds to start it and its proxy
    case $1 in rgw) echo 30 ;; *) echo 8 ;; esac
}

# estimate_s SCENARIO:MIB:REPS[:SAVES]: seconds for one piece, every tool
# of $tool_list once per repetition. Per repetition (all six tools): a fixed
# part per scenario (finetune's with its 2 saves; mounts, rclone's 1 s
# write-back, aws's start, polling, the resume mount, the reference replay)
# plus a part per GiB saved (saving, uploading, reading back, verifying, the
# reference replay: 4 GiB took 610 s for the six); the numbers are from the
# quiet run of 2026-12-02 (docs/BENCHMARKS.md, "Peers: the run above"), a little
# pessimistic, plus the state's build and warm-up save once.
estimate_s() {
    local sc mib n sv fixed per_gib=145 # s per GiB saved, all six tools of one repetition
    IFS=: read -r sc mib n sv <<<"$1"
    sv=${sv:-$saves}
    case $sc in
    full | bf16 | ddp) fixed=12 ;;
    dcp) fixed=13 ;;
    finetune) fixed=18 ;; # its 2 saves
    *) fixed=30 ;;
    esac
    local ntools
    ntools=$(tr , '\n' <<<"$tool_list" | wc -l)
    echo $(((n * (fixed + sv * per_gib * mib / 1024) * ntools / 6) + 8 * mib / 1024 + 5))
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
        --stats-file "$work/proxy.stats" --stats-interval 0.05 --owner-pid $$ >"$work/proxy.log" 2>&1 &
    proxy_pid=$!
    for _ in $(seq 100); do [ -s "$work/proxy.port" ] && return 0; sleep 0.1; done
    echo "peers: the counting proxy did not start: $(cat "$work/proxy.log")" >&2
    exit 1
}

stop_proxy() {
    kill "$proxy_pid" 2>/dev/null || true
    wait "$proxy_pid" 2>/dev/null || true
    proxy_pid=""
}

{
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "kernel: $(uname -r); CPUs: $(nproc) ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
    echo "memory: $(free -g | awk '/Mem:/ { print $2 }') GiB; workdir: $(stat -f -c %T "$work") ($workdir)"
    echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rclone --vfs-write-back: ${write_back:-the rclone default (5s)}"
    echo "versions: ckptfs $(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo ?);" \
        "$(s3fs --version 2>&1 | head -1 | sed 's/ (commit.*//');" \
        "$(rclone version 2>/dev/null | head -1); $($aws --version 2>&1 | cut -d' ' -f1);" \
        "torch $($py -c 'import torch; print(torch.__version__)'); libfuse $(pkg-config --modversion fuse3)"
} >"$out/machine.new"
[ "$append" = 1 ] && [ -s "$out/machine.txt" ] && { echo; cat "$out/machine.txt"; } >>"$out/machine.new"
mv "$out/machine.new" "$out/machine.txt"
cat "$out/machine.txt" >&2

t_start=$(date +%s)
budget_s=$((budget_min * 60))
status=0
IFS=, read -ra server_list <<<"$servers"
# The whole plan first, so every piece can print its estimate against it.
pieces=() # SERVER/SCENARIO:MIB:REPS[:SAVES], in the order they run
add_pieces() { # SERVER PLAN...
    local server=$1
    shift
    for p in "$@"; do pieces+=("$server/$p"); done
    echo "plan on $server (scenario:MiB:repetitions[:saves], $saves saves per run unless said):" \
        "$*" >>"$out/machine.txt"
}
if [ ${#plans[@]} -gt 0 ]; then
    for server in "${server_list[@]}"; do add_pieces "$server" "${plans[@]}"; done
else
    # Every server's tables first, then the growth points from the last
    # server back (so it runs on without a restart), 4 GiB on the first
    # server only: what the budget skips is growth, never a table.
    for server in "${server_list[@]}"; do
        read -ra mine <<<"$(table_plan)"
        add_pieces "$server" "${mine[@]}"
    done
    for ((i = ${#server_list[@]} - 1; i >= 0; i--)); do
        read -ra mine <<<"$(growth_plan "${server_list[$i]}" $((i == 0)))"
        [ ${#mine[@]} -eq 0 ] || add_pieces "${server_list[$i]}" "${mine[@]}"
    done
fi
# Per piece: its estimate, with its server's start when it changes server.
ests=() total_est=0 prev=""
for p in "${pieces[@]}"; do
    est=$(estimate_s "${p#*/}")
    [ "${p%%/*}" = "$prev" ] || est=$((est + $(start_estimate_s "${p%%/*}")))
    prev=${p%%/*} ests+=("$est") total_est=$((total_est + est))
    [ "$dry" = 0 ] || echo "peers: piece ${p%%/*} ${p#*/}: estimated $est s" >&2
done
echo "peers: ${#pieces[@]} pieces, estimated $((total_est / 60)) min $((total_est % 60)) s" \
    "(budget $budget_min min)" | tee -a "$out/machine.txt" >&2
[ "$dry" = 0 ] || exit 0

report() { # from every run that finished; also from the EXIT trap
    reported=1
    $py "$here/report.py" --results "$out/results.jsonl" --machine "$out/machine.txt" --out "$out" \
        --command "bash tests/bench/peers/run.sh BUILD${orig_args:+ $orig_args}" ${doc:+--doc "$doc"}
}
reported=0 current=""
n=0
for p in "${pieces[@]}"; do
    n=$((n + 1))
    server=${p%%/*} piece=${p#*/}
    est=${ests[$((n - 1))]}
    used=$(($(date +%s) - t_start))
    if [ $((used + est)) -gt "$budget_s" ]; then
        echo "peers: SKIPPED piece $n/${#pieces[@]} $server $piece: estimated $est s, only" \
            "$((budget_s - used)) s left of --budget-min $budget_min" | tee -a "$out/machine.txt" >&2
        continue
    fi
    if [ "$server" != "$current" ]; then
        [ -z "$current" ] || { stop_proxy; stop_server "$current"; }
        echo "== server $server" >&2
        t_srv=$(date +%s)
        start_server "$server"
        start_proxy
        current=$server
        echo "peers: $server started in $(($(date +%s) - t_srv)) s" | tee -a "$out/machine.txt" >&2
    fi
    echo "peers: piece $n/${#pieces[@]} $server $piece: estimated $est s (at $used s of" \
        "$budget_s)" >&2
    t_piece=$(date +%s)
    $py "$here/peers_bench.py" --server "$server" --bucket ckpt-test --direct "$endpoint" \
        --proxy "http://127.0.0.1:$(cat "$work/proxy.port")" --proxy-stats "$work/proxy.stats" \
        --server-pids "$server_pids" --ckptfs "$build/fs/ckptfs" --ckptctl "$build/tools/ckptctl" \
        --aws "$aws" --work "$work/runs" --out "$out/results.jsonl" --tools "$tool_list" \
        --saves "$saves" --vfs-write-back "$write_back" --plan "$piece" &
    bench_pid=$!
    wait "$bench_pid" || status=1
    bench_pid=""
    echo "peers: piece $n/${#pieces[@]} $server $piece: took $(($(date +%s) - t_piece)) s" \
        "(estimated $est s)" | tee -a "$out/machine.txt" >&2
done
[ -z "$current" ] || { stop_proxy; stop_server "$current"; }
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); wall time: $(($(date +%s) - t_start)) s" \
    "(estimated $total_est s)" >>"$out/machine.txt"

report || status=1
echo "peers: results in $out" >&2
exit "$status"
