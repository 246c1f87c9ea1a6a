#!/usr/bin/env bash
# Time to resume on a new node (docs/BENCHMARKS.md, "Time to resume"): from
# the moment `ckptfs` has mounted on an empty staging directory to the
# trainer's load being done, side by side in one run with the raw-GET
# bound; prints markdown tables of seconds and ratios (a benchmark: it
# asserts no speed, only that every load gives the saved tensors back).
#
#   tests/bench/bench_resume.sh BUILD_DIR [--smoke] [--size-mib N] [--reps N]
#       [--workdir DIR]
#
# Two checkpoints are put into a fresh s3rver with `ckptctl put` (untimed):
#   tsave: torch.save of a transformer + AdamW state (--size-mib, default
#          1024; tests/bench/fuse_save_bench.py model_state), one file;
#   dcp:   a 4-rank PyTorch DCP step (torchrun, gloo; resume_dcp.py) of a
#          --size-mib fp32 tensor sharded by rows: 4 .distcp files and
#          .metadata.
# Timed, for each checkpoint, every repetition (scenarios in reverse order
# every other repetition; `sync` untimed before each):
#   (cold)     ckptfs mounted on an empty staging with `--prefetch none`,
#              then the load: torch.load of the file / 4 ranks'
#              dcp.load_state_dict through the mount; reads are answered as
#              their runs arrive (docs/WARMUP.md);
#   (prefetch) the same with `--prefetch JOB`: warm-up starts at mount time,
#              the load runs at once (not waiting for warm-up to end);
#   (rawget)   curl GET of the step's pack objects, 4 in flight (what
#              ckptfs fetches with), into /dev/shm;
#   (local)    the same load from a copy on /dev/shm (restored untimed):
#              the load's own cost, no network.
# The clock of (cold) and (prefetch) starts when the mount is live (listed
# in /proc/self/mountinfo and answering stat), as a job script's `mount`
# returning, and stops when the loader exits. The raw-GET bound is
# rawget + local (download, then load: what a node without ckptfs does
# at best with the same parallel GETs); ratios are bound / ckptfs, so >= 1
# means ckptfs beats it (medians; per-repetition ratios' median and range
# in brackets). An untimed warm-up round (cold) comes first.
#
# --smoke: 32 MiB, 1 repetition, no warm-up round (CI: proves it runs and
# every load is correct).
# Starts its own s3rver on 127.0.0.1 (tests/s3/s3rver.sh) and stops it by PID
# in an EXIT trap, unmounts every mount it made there too; work files under
# a fresh dir in --workdir (default /var/tmp: a disk) and /dev/shm, both
# removed on exit.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
. "$here/benchopt.sh"
build="" size=1024 reps=3 workdir=/var/tmp
while [ $# -gt 0 ]; do
    bench_opt bench_resume "$@"
    shift "$nargs"
done
[ -n "$build" ] || usage
. "$here/s3lib.sh"
ckptctl=$build/tools/ckptctl ckptfs=$build/fs/ckptfs
for b in "$ckptctl" "$ckptfs"; do
    [ -x "$b" ] || { echo "bench_resume: $b not built" >&2; exit 2; }
done
for tool in fusermount3 mountpoint torchrun; do
    command -v $tool >/dev/null || { echo "bench_resume: $tool not found" >&2; exit 2; }
done
[ -e /dev/fuse ] || { echo "bench_resume: no /dev/fuse" >&2; exit 2; }
py=/usr/bin/python3
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset CKPT_STORE CKPT_JOB

work=$(mktemp -d "$workdir/ckpt-bench-resume.XXXXXX")
shm=$(mktemp -d /dev/shm/ckpt-bench-resume.XXXXXX)
mnt=$work/mnt daemon_pid=""
cleanup() {
    s3lib_unmount "$mnt" "$daemon_pid"
    s3lib_stop "$work/s3"
    rm -rf "$work" "$shm"
}
trap cleanup EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
s3lib_start "$work/s3"
store=s3://ckpt-test/resume

# ---- the checkpoints, untimed
echo "== checkpoints: torch.save ~$size MiB, 4-rank DCP ~$size MiB" >&2
mkdir -p "$work/tsave" "$work/dcp" "$mnt"
$py - "$here" "$work/tsave/ckpt_000100.pt" "$size" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from fuse_save_bench import model_state
state = model_state(int(sys.argv[3]) << 20)
torch.save(state, sys.argv[2])
PY
port=$((29500 + $$ % 400))
dcp_ranks() { # save|load DIR: 4 ranks of resume_dcp.py (Debian torch 1.13 needs --redirects/--tee/--log_dir)
    port=$((port + 1))
    rm -rf "$work/trlogs"
    torchrun --nnodes 1 --nproc_per_node 4 --redirects 1 --tee 1 --master_addr 127.0.0.1 \
        --master_port "$port" --log_dir "$work/trlogs" "$here/resume_dcp.py" "$1" "$2" "$size" \
        >"$work/torchrun.log" 2>&1 || { tail -30 "$work/torchrun.log" >&2; return 1; }
}
dcp_ranks save "$work/dcp/step-000200"
bytes_tsave=$(du -sb "$work/tsave" | cut -f1) bytes_dcp=$(du -sb "$work/dcp" | cut -f1)
ctl() { "$ckptctl" --store "$store" --state-dir "$work/state" --node writer -q "$@"; }
ctl --job tsave put --step 100 "$work/tsave"
ctl --job dcp put --step 200 "$work/dcp"
ctl --job tsave restore --step 100 --to "$shm/local-tsave"
ctl --job dcp restore --step 200 --to "$shm/local-dcp"

load_tsave() { # DIR: torch.load of the checkpoint file in DIR, checked
    $py - "$1/ckpt_000100.pt" <<'PY'
import sys, torch
state = torch.load(sys.argv[1])
assert set(state) == {"model", "optimizer", "step"}, sorted(state)
PY
}
load_dcp() { dcp_ranks load "$1/step-000200"; } # DIR

list_packs() { # JOB: its pack keys (ListObjectsV2), one a line
    local xml
    xml=$(curl -sS --fail "${S3_SIGV4[@]}" \
        -K <(printf 'user = "%s:%s"\n' "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY") \
        "$S3_URL?list-type=2&max-keys=1000&prefix=resume/jobs/$1/packs/")
    grep -o '<Key>[^<]*\.pack</Key>' <<<"$xml" | sed 's/<[^>]*>//g'
}
raw_get() { # JOB
    local args=() k
    rm -rf "$shm/get" && mkdir -p "$shm/get"
    for k in $(list_packs "$1"); do args+=(-o "$shm/get/${k##*/}" "$S3_URL/$k"); done
    [ ${#args[@]} -gt 0 ] || { echo "bench_resume: no packs of $1" >&2; return 1; }
    s3lib_curl 4 "${args[@]}"
}

# mount_and_load JOB EXTRA...: prints the seconds from the mount being live
# to the load done, on an empty staging (a new node).
mount_and_load() {
    local job=$1 t0 secs
    shift
    rm -rf "$work/staging"
    sync
    "$ckptfs" "$mnt" --store "$store" --staging "$work/staging" --node "resume$RANDOM" -f "$@" \
        >>"$work/ckptfs.log" 2>&1 &
    daemon_pid=$!
    local due=$((SECONDS + 30))
    until mountpoint -q "$mnt" && stat "$mnt" >/dev/null 2>&1; do
        kill -0 "$daemon_pid" 2>/dev/null || { tail -20 "$work/ckptfs.log" >&2; return 1; }
        [ $SECONDS -lt $due ] || { echo "bench_resume: no mount after 30 s" >&2; return 1; }
        sleep 0.02
    done
    t0=$(now)
    "load_$job" "$mnt/$job"
    secs=$(since "$t0")
    fusermount3 -u "$mnt"
    wait "$daemon_pid"
    daemon_pid=""
    echo "$secs"
}
timed() { local t0; sync; t0=$(now); "$@" >/dev/null; since "$t0"; }

# scenario JOB NAME: prints its seconds
scenario() {
    case $2 in
    cold) mount_and_load "$1" --prefetch none ;;
    prefetch) mount_and_load "$1" --prefetch "$1" ;;
    rawget) timed raw_get "$1" ;;
    local) timed "load_$1" "$shm/local-$1" ;;
    esac
}

names=(cold prefetch rawget local)
declare -A t
if [ "$reps" -gt 1 ]; then
    echo "== warm-up round (untimed)" >&2
    for job in tsave dcp; do scenario "$job" cold >/dev/null; done
fi
for ((r = 1; r <= reps; r++)); do
    order=("${names[@]}")
    [ $((r % 2)) -eq 1 ] || order=(local rawget prefetch cold)
    for job in tsave dcp; do
        for n in "${order[@]}"; do
            t[$job.$n.$r]=$(scenario "$job" "$n")
            echo "   rep $r $job $n: ${t[$job.$n.$r]} s" >&2
        done
    done
done

median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { printf '%s\n' "$@" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.2f-%.2f", lo, hi }'; }

echo
echo "Time to resume: mount live on an empty node -> load done (s3rver on 127.0.0.1, busy machine; load average before: $load_before)"
echo
echo "| checkpoint | bytes | ckptfs cold | ckptfs --prefetch | raw GET | local load | bound (GET + load) | bound / cold | bound / prefetch |"
echo "|---|---|---|---|---|---|---|---|---|"
for job in tsave dcp; do
    declare -a c=() p=() g=() l=() b=() rc=() rp=()
    for ((r = 1; r <= reps; r++)); do
        c+=("${t[$job.cold.$r]}") p+=("${t[$job.prefetch.$r]}")
        g+=("${t[$job.rawget.$r]}") l+=("${t[$job.local.$r]}")
        bnd=$(awk -v a="${t[$job.rawget.$r]}" -v b="${t[$job.local.$r]}" 'BEGIN { print a + b }')
        b+=("$bnd")
        rc+=("$(ratio "$bnd" "${t[$job.cold.$r]}")") rp+=("$(ratio "$bnd" "${t[$job.prefetch.$r]}")")
    done
    bytes=bytes_$job
    printf '| %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %s [%s, %s] | %s [%s, %s] |\n' \
        "$job" "${!bytes}" "$(median "${c[@]}")" "$(median "${p[@]}")" "$(median "${g[@]}")" \
        "$(median "${l[@]}")" "$(median "${b[@]}")" \
        "$(ratio "$(median "${b[@]}")" "$(median "${c[@]}")")" "$(median "${rc[@]}")" "$(range "${rc[@]}")" \
        "$(ratio "$(median "${b[@]}")" "$(median "${p[@]}")")" "$(median "${rp[@]}")" "$(range "${rp[@]}")"
done
echo
echo "seconds, median of $reps repetitions; ratios: medians' ratio [median, range of the per-repetition ratios]"
