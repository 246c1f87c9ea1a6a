#!/usr/bin/env bash
# Time to durable and restore, each against the raw limits it is measured
# by (docs/BENCHMARKS.md, "Targets"), side by side in one run; prints markdown
# tables of seconds and ratios (a benchmark: it asserts no speed).
#
#   tests/bench/bench_durable.sh BUILD_DIR [--smoke] [--size-mib N] [--reps N]
#       [--workdir DIR] [--rgw] [--before CKPTCTL] [--pin]
#
# One real torch.save checkpoint (a transformer + its AdamW state, fp32,
# --size-mib, default 512) sits in a staging-like directory on disk. Timed,
# every repetition:
#   (a) disk read of the checkpoint (dd, 1 MiB reads): warm, the page-cache
#       state every put below reads it in (resident, checked with fincore),
#       and cold after dropping this file's pages (dd iflag=nocache, i.e.
#       fadvise DONTNEED; /proc/sys/vm/drop_caches is not touched);
#   (b) CPU: `ckptctl put` into a file:// store on /dev/shm (chunk, hash,
#       compress, pack, write to memory: the pipeline without a network);
#   (c) raw PUT: curl (SigV4, one process, --parallel-max 4 = the ingest's
#       default pack uploads in flight, st_ingest_set_parallel) of the pack
#       files (b) produced: the very bytes and object sizes put stores;
#   (d) `ckptctl put` into s3:// on the same s3rver;
#   (e) disk write: the same pack files written to the disk 4 at a time,
#       each fsynced (dd conv=fsync);
#   (f) `ckptctl put` into a file:// store on the disk;
#   (g) raw GET: curl, --parallel-max 4 (restore's default threads,
#       st_store_read.c), of exactly the pack objects of (d)'s step, listed
#       with ListObjectsV2, into /dev/null;
#   (h) `ckptctl restore --step 100` of (d)'s step to /dev/shm (verified).
# Ratios (medians; the per-repetition ratios' median and range in brackets):
# durable s3:// = max(a warm, b, c) / d; durable file:// = max(a warm, b, e) / f;
# restore = g / h. Target >= 0.80 for all three.
#
# Reading aids, for where the time goes when s3rver shares the CPUs with the
# client: every step's CPU seconds (its processes plus s3rver's) and how busy
# the machine was (anyone's load); (b‖c) b and c at the same time; (g') g
# into files on /dev/shm; (h') restore from (b)'s store on /dev/shm, i.e.
# restore's local work without a network; (g‖h') g and h' at the same time.
# Every put gets a fresh job and state dir (nothing deduplicates); the steps
# run in reverse order every other repetition; `sync` (untimed) runs before
# each timed step so one step's writeback does not land in the next; one
# untimed warm-up round first. A failed step fails the run.
#
# --rgw: also a throw-away Ceph RGW (tests/s3/rgw.sh, bluestore, started
# and stopped here): every repetition also times (c) and (d) against it,
# (c-rgw) and (d-rgw), for the same ratio on a second S3 server in one run,
# and (b‖c-rgw): b and c-rgw at the same time (RGW's daemons run on the same
# CPUs as the seal: the bound when both must share them); and the restore's
# pair on RGW: (g-rgw) the raw GET of (d-rgw)'s packs into /dev/null and
# (h-rgw) the restore of (d-rgw)'s step.
# --before CKPTCTL: also time (d) (and d-rgw) and (h) with another ckptctl
# build, in the same repetitions: (d0), (d0-rgw), (h0), (h0-rgw) — before/after side
# by side ((h0) restores the same step (d) stored, so only the reader differs).
# Request counts of one (d) (PUT, HEAD, GET, LIST; ckptctl put --json) are
# printed with the tables. Server CPU s: s3rver's, plus the RGW daemons'.
# --pin: the S3 servers (every thread of s3rver and of the RGW daemons) run
# on CPU 1 only and everything the bench runs (ckptctl, curl, dd) on CPU 0
# only (taskset), so that client and server no longer take each other's
# CPU: a client with a core of its own, as a training node's is, against a
# server with one core. Every step, bounds included, runs pinned alike.
#
# --smoke: 32 MiB, 1 repetition (CI: proves it runs). Starts its own s3rver
# on 127.0.0.1 (tests/s3/s3rver.sh) and stops it by PID in an EXIT trap;
# work files go to a fresh dir under --workdir (default /var/tmp: a disk) and
# under /dev/shm, both removed on exit.
set -euo pipefail
shopt -s inherit_errexit # a step that fails inside $(...) fails the run

here=$(cd "$(dirname "$0")" && pwd)
. "$here/benchopt.sh"
build="" size=512 reps=5 workdir=/var/tmp use_rgw=0 before="" pin=0 pinned=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rgw) use_rgw=1 nargs=1 ;;
    --pin) pin=1 nargs=1 ;;
    --before) before=${2:?--before needs a ckptctl}; nargs=2 ;;
    *) bench_opt bench_durable "$@" ;;
    esac
    shift "$nargs"
done
[ -n "$build" ] || usage
. "$here/s3lib.sh"
ckptctl=$build/tools/ckptctl
[ -x "$ckptctl" ] || { echo "bench_durable: $ckptctl not built" >&2; exit 2; }
[ -z "$before" ] || [ -x "$before" ] || { echo "bench_durable: --before $before: not executable" >&2; exit 2; }
rgw_sh=$here/../s3/rgw.sh
ncpu=$(nproc) # before --pin: nproc counts the CPUs this shell may use
tools=(dd xargs)
((!pin)) || tools+=(taskset)
for tool in "${tools[@]}"; do
    command -v "$tool" >/dev/null || { echo "bench_durable: $tool not found" >&2; exit 2; }
done
py=/usr/bin/python3
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset CKPT_STORE CKPT_JOB

work=$(mktemp -d "$workdir/ckpt-bench-durable.XXXXXX") # disk: staging, stores, s3rver data
shm=$(mktemp -d /dev/shm/ckpt-bench-durable.XXXXXX)   # memory: CPU-only store, restores
cleanup() {
    s3lib_stop "$work/s3"
    [ ! -d "$work/rgw" ] || bash "$rgw_sh" stop "$work/rgw" >/dev/null 2>&1 || true
    rm -rf "$work" "$shm"
}
trap cleanup EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

s3lib_start "$work/s3"
s3pid=$(cat "$work/s3/s3rver.pid")
server_pids=("$s3pid")
s3rver_env=("$CKPT_S3_ENDPOINT" "$AWS_ACCESS_KEY_ID" "$AWS_SECRET_ACCESS_KEY")
if ((use_rgw)); then
    echo "== starting a throw-away Ceph RGW (tests/s3/rgw.sh)" >&2
    # Its OSD's block file (sparse) holds every round's objects: 4 puts of
    # the checkpoint per round (c-rgw, b‖c-rgw, d-rgw, d0-rgw) and the
    # warm-up's; a full OSD wedges RGW (requests hang) instead of failing
    # cleanly.
    rgw_bytes=$(((reps + 1) * 5 * size * 5 / 4 << 20))
    ((rgw_bytes >= 4 << 30)) || rgw_bytes=$((4 << 30))
    rgw_env=$(CKPT_RGW_BLOCK_BYTES=$rgw_bytes bash "$rgw_sh" start "$work/rgw" --owner $$)
    # shellcheck disable=SC1090
    . "$rgw_env"
    rgw_args=("$RGW_ENDPOINT" "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY")
    for d in mon osd rgw; do server_pids+=("$(cat "$work/rgw/pids/$d.pid")"); done
fi
if ((pin)); then
    ((ncpu >= 2)) || { echo "bench_durable: --pin needs 2 CPUs, this machine has $ncpu" >&2; exit 2; }
    # -a: every thread the server has now; threads it starts later inherit
    # the mask of the thread that starts them.
    for p in "${server_pids[@]}"; do taskset -a -p -c 1 "$p" >/dev/null; done
    taskset -p -c 0 $$ >/dev/null # this shell, hence every step it runs
    pinned="client steps pinned to CPU 0, the S3 servers to CPU 1 (--pin)"
fi
s3store=s3://ckpt-test/durable
staging=$work/staging
ckpt=$staging/ckpt_000100.pt
mkdir -p "$staging" "$shm/packs"

echo "== checkpoint: torch.save of a transformer + AdamW state, ~$size MiB" >&2
$py - "$here" "$ckpt" "$size" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import torch
from fuse_save_bench import model_state
torch.save(model_state(int(sys.argv[3]) << 20), sys.argv[2])
EOF
sync
logical=$(stat -c %s "$ckpt")

# Every ckptctl call: a fresh state dir (dedup index) on the disk, as a
# node's would be, and a fresh job per put, so nothing deduplicates.
ckpt_ctl() { # STORE JOB JSON-OUT ckptctl-args...
    local store=$1 job=$2 out=$3 state
    shift 3
    state=$(mktemp -d "$work/state.XXXXXX")
    "${bin:-$ckptctl}" --store "$store" --job "$job" --state-dir "$state" --node bench -q --json "$@" >"$out"
    rm -rf "$state"
}
# on_rgw CMD...: runs CMD (in a subshell) against the RGW instead of s3rver.
on_rgw() { (s3lib_use "${rgw_args[@]}"; "$@"); }

# The steps, untimed; ROUND numbers keep every repetition's objects apart.
put_cpu() { ckpt_ctl "file://$shm/cpu.$1" "cpu$1" "$work/cpu.json" put --step 100 "$staging"; }
put_s3() { ckpt_ctl "$s3store" "s3put$1" "$work/s3put.json" put --step 100 "$staging"; }
put_s3_before() { bin=$before ckpt_ctl "$s3store" "s3old$1" "$work/s3old.json" put --step 100 "$staging"; }
put_file() { ckpt_ctl "file://$work/fstore.$1" "file$1" "$work/file.json" put --step 100 "$staging"; }
restore_s3() { # ROUND: step 100 of (d)'s job, to /dev/shm (restore's default threads)
    ckpt_ctl "$s3store" "s3put$1" "$work/restore.json" restore --step 100 --to "$shm/restore.s3"
}
restore_s3_before() { # ROUND: (h) with the --before ckptctl
    bin=$before ckpt_ctl "$s3store" "s3put$1" "$work/restore0.json" restore --step 100 --to "$shm/restore.s3"
}
restore_cpu() { # ROUND: the same from (b)'s store on /dev/shm: restore without a network
    ckpt_ctl "file://$shm/cpu.$1" "cpu$1" "$work/lrestore.json" restore --step 100 --to "$shm/restore.cpu"
}
raw_put() { # ROUND: curl PUT of the reference packs, 4 in flight
    local args=() f
    for f in "$shm"/packs/*.pack; do
        args+=(-o /dev/null -T "$f" "$S3_URL/raw/$1/${f##*/}")
    done
    s3lib_curl 4 "${args[@]}"
}
raw_get() { # ROUND null|shm: curl GET of (d)'s pack objects, 4 in flight
    local args=() k out=/dev/null
    [ "$2" = null ] || mkdir -p "$shm/get"
    for k in $(list_packs "s3put$1"); do
        [ "$2" = null ] || out=$shm/get/${k##*/}
        args+=(-o "$out" "$S3_URL/$k")
    done
    [ ${#args[@]} -gt 0 ] || { echo "bench_durable: no packs listed for s3put$1" >&2; return 1; }
    s3lib_curl 4 "${args[@]}"
}
disk_write() { # ROUND: the reference packs to the disk, 4 at a time, each fsynced
    mkdir -p "$work/diskw.$1"
    xargs -P 4 -I{} dd if="$shm/packs/{}" of="$work/diskw.$1/{}" bs=4M conv=fsync status=none \
        < <(cd "$shm/packs" && printf '%s\n' *.pack)
}
read_ckpt() { # cold|warm
    [ "$1" = warm ] || dd if="$ckpt" iflag=nocache count=0 status=none
    dd if="$ckpt" of=/dev/null bs=1M status=none
}
at_once() { "$1" "$3" & local pid=$!; "$2" "$3"; wait "$pid"; } # FN1 FN2 ARG
raw_get_null() { raw_get "$1" null; }
raw_put_rgw() { on_rgw raw_put "$1"; }

# The pack keys of JOB in the s3:// store, one a line (ListObjectsV2). Signed
# with the keys, and the prefix's slashes encoded as SigV4's canonical query
# wants them (curl 7.88 signs the query as written): RGW checks both,
# s3rver neither.
list_packs() {
    local xml
    xml=$(s3lib_curl 1 "$S3_URL?list-type=2&max-keys=1000&prefix=durable%2Fjobs%2F$1%2Fpacks%2F")
    case $xml in *"<IsTruncated>true<"*)
        echo "bench_durable: more than 1000 packs: listing is not paged here" >&2; return 1 ;;
    esac
    grep -o '<Key>[^<]*\.pack</Key>' <<<"$xml" | sed 's/<[^>]*>//g'
}

# timed CMD...: syncs (untimed), runs CMD and prints "WALL CPU BUSY SRV": its
# wall seconds, the CPU seconds of its processes plus s3rver's meanwhile (the
# server shares the CPUs with the client), how busy the whole machine's
# CPUs were meanwhile, in % (other users' load included), and the servers'
# CPU seconds alone (near WALL: the server's one core was the limit under
# --pin, whatever the client did). `times` (run in
# this shell, not in a $(...) subshell) counts the children it has waited for.
timed() {
    local t0 s0 m0 wall s1 m1 tf=$work/times.$BASHPID
    sync
    s0=$(s3rver_cpu) m0=$(machine_cpu)
    times >"$tf.0"
    t0=$(now)
    "$@"
    wall=$(since "$t0")
    times >"$tf.1"
    s1=$(s3rver_cpu) m1=$(machine_cpu)
    cat "$tf.0" "$tf.1" | awk -v w="$wall" -v s0="$s0" -v s1="$s1" -v m0="$m0" -v m1="$m1" -v n="$ncpu" '
        NR % 2 == 0 { c = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); c += p[1] * 60 + p[2] }
                      cpu[NR / 2] = c }
        END { printf "%s %.2f %.0f %.2f\n", w, cpu[2] - cpu[1] + s1 - s0, 100 * (m1 - m0) / (w * n), s1 - s0 }'
    rm -f "$tf.0" "$tf.1"
}
machine_cpu() { # busy CPU seconds of the machine since boot (all but idle and iowait)
    awk -v hz="$(getconf CLK_TCK)" '/^cpu / { printf "%.3f", ($2 + $3 + $4 + $7 + $8 + $9) / hz }' /proc/stat
}
s3rver_cpu() { # CPU seconds of the S3 servers (s3rver; the RGW daemons with --rgw)
    local p
    for p in "${server_pids[@]}"; do cat "/proc/$p/stat"; done |
        awk -v hz="$(getconf CLK_TCK)" '{ s += $14 + $15 } END { printf "%.3f", s / hz }'
}

# step ROUND NAME: times step NAME of round ROUND; prints timed's line.
# Outputs that later steps of the round need are kept until the round ends.
step() {
    local r=$1
    case $2 in
    cold | warm) timed read_ckpt "$2" ;;
    cpu) timed put_cpu "$r" ;;
    rawput) timed raw_put "$r" ;;
    both) timed at_once put_cpu raw_put "${r}b" ;;
    s3put) timed put_s3 "$r" ;;
    s3put0) timed put_s3_before "$r" ;;
    rgwraw) timed on_rgw raw_put "$r" ;;
    rgwput) timed on_rgw put_s3 "$r" ;;
    rgwput0) timed on_rgw put_s3_before "$r" ;;
    rgwboth) timed at_once put_cpu raw_put_rgw "${r}r" ;;
    rgwget) timed on_rgw raw_get "$r" null ;;
    diskw) timed disk_write "$r"; rm -rf "$work/diskw.$r" ;;
    fileput) timed put_file "$r"; rm -rf "$work/fstore.$r" ;;
    rawget) timed raw_get "$r" null ;;
    getshm) timed raw_get "$r" shm; rm -rf "$shm/get" ;;
    restore | restore0 | rgwrestore | rgwrestore0)
        case $2 in
        restore) timed restore_s3 "$r" ;;
        restore0) timed restore_s3_before "$r" ;;
        rgwrestore) timed on_rgw restore_s3 "$r" ;;
        rgwrestore0) timed on_rgw restore_s3_before "$r" ;;
        esac
        cmp -s "$ckpt" "$shm/restore.s3/${ckpt##*/}" ||
            { echo "bench_durable: restored file differs" >&2; return 1; }
        rm -rf "$shm/restore.s3" ;;
    lrestore) timed restore_cpu "$r"; rm -rf "$shm/restore.cpu" ;;
    both_get) timed at_once restore_cpu raw_get_null "$r"; rm -rf "$shm/restore.cpu" ;;
    esac
}

json_u64() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$2"; }

declare -A res # measurement -> its values, one per repetition (KEY: wall s, KEY.cpu, KEY.busy, KEY.srv)
record() { # KEY "WALL [CPU BUSY SRV]" (a ratio: WALL alone)
    local v
    read -ra v <<<"$2"
    res[$1]+="${v[0]} "
    [ ${#v[@]} -lt 4 ] || res[$1.cpu]+="${v[1]} " res[$1.busy]+="${v[2]} " res[$1.srv]+="${v[3]} "
}
median() { # median of the numbers in $1, printed with format $2 (default %.3f)
    printf '%s\n' $1 | sort -g | awk -v f="${2:-%.3f}" \
        '{ v[NR] = $1 } END { printf f, NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
last() { local a; read -ra a <<<"${res[$1]}"; echo "${a[-1]}"; } # this repetition's value of $1
maxof() { printf '%s\n' "$@" | sort -g | tail -1; }
resident() { # % of the checkpoint's pages in the page cache
    if command -v fincore >/dev/null; then
        fincore -b -n -o RES "$ckpt" | awk -v n="$logical" '{ printf "%d", 100 * $1 / n }'
    else
        echo 100
    fi
}

echo "== warm-up round (untimed)" >&2
put_cpu 0
find "$shm/cpu.0" -name '*.pack' -exec mv -t "$shm/packs" {} +
rm -rf "$shm/cpu.0"
stored=$(find "$shm/packs" -name '*.pack' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
npacks=$(find "$shm/packs" -name '*.pack' | wc -l)
puts=(cold warm cpu rawput both s3put diskw fileput)
[ -z "$before" ] || puts+=(s3put0)
((!use_rgw)) || puts+=(rgwraw rgwput rgwboth)
[ -z "$before" ] || ((!use_rgw)) || puts+=(rgwput0)
for m in warm cpu rawput s3put rawget restore lrestore diskw fileput "${puts[@]:8}"; do
    step 0 "$m" >/dev/null
done
[ -z "$before" ] || step 0 restore0 >/dev/null
rm -rf "$shm/cpu.0" "$shm/cpu.0b" "$shm/cpu.0r"

resident_min=100
gets=(rawget getshm restore lrestore both_get)
[ -z "$before" ] || gets+=(restore0)
((!use_rgw)) || gets+=(rgwget rgwrestore)
[ -z "$before" ] || ((!use_rgw)) || gets+=(rgwrestore0)
for ((r = 1; r <= reps; r++)); do
    echo "== repetition $r of $reps" >&2
    # Every other repetition runs the steps in the reverse order.
    order=("${puts[@]}" "${gets[@]}")
    if ((r % 2 == 0)); then
        mapfile -t order < <(printf '%s\n' "${puts[@]}" | tac; printf '%s\n' "${gets[@]}" | tac)
    fi
    for m in "${order[@]}"; do
        case $m in cpu | s3put | fileput | both | s3put0 | rgwput | rgwput0 | rgwboth)
            pct=$(resident)
            ((pct >= resident_min)) || resident_min=$pct ;;
        esac
        t=$(step "$r" "$m") # an assignment: a failed step stops the run
        record "$m" "$t"
    done
    rm -rf "$shm/cpu.$r" "$shm/cpu.${r}b" "$shm/cpu.${r}r"
    # This repetition's ratios, from its own numbers.
    b=$(maxof "$(last warm)" "$(last cpu)" "$(last rawput)")
    record r_s3 "$(ratio "$b" "$(last s3put)")"
    record r_s3both "$(ratio "$(maxof "$b" "$(last both)")" "$(last s3put)")"
    record r_file "$(ratio "$(maxof "$(last warm)" "$(last cpu)" "$(last diskw)")" "$(last fileput)")"
    record r_restore "$(ratio "$(last rawget)" "$(last restore)")"
    record r_restoreshm "$(ratio "$(last getshm)" "$(last restore)")"
    record r_restoreboth "$(ratio "$(last both_get)" "$(last restore)")"
    [ -z "$before" ] || record r_s3_0 "$(ratio "$b" "$(last s3put0)")"
    [ -z "$before" ] || record r_restore_0 "$(ratio "$(last rawget)" "$(last restore0)")"
    if ((use_rgw)); then
        br=$(maxof "$(last warm)" "$(last cpu)" "$(last rgwraw)")
        record r_rgw "$(ratio "$br" "$(last rgwput)")"
        record r_rgwboth "$(ratio "$(maxof "$br" "$(last rgwboth)")" "$(last rgwput)")"
        [ -z "$before" ] || record r_rgw_0 "$(ratio "$br" "$(last rgwput0)")"
        record r_rgw_restore "$(ratio "$(last rgwget)" "$(last rgwrestore)")"
        [ -z "$before" ] || record r_rgw_restore_0 "$(ratio "$(last rgwget)" "$(last rgwrestore0)")"
    fi
done

declare -A med
for k in "${!res[@]}"; do med[$k]=$(median "${res[$k]}"); done
row() { # label key [bytes]
    local busy
    busy=$(printf "%.0f%%" "${med[$2.busy]}")
    # /proc/stat counts in ticks (10 ms): too coarse for a short step.
    awk -v w="${med[$2]}" 'BEGIN { exit !(w < 0.25) }' && busy="–"
    printf '| %s | %s | %s | %.2f | %.2f | %s |\n' "$1" "${med[$2]}" \
        "$(mbps "${3:-$logical}" "${med[$2]}")" "${med[$2.cpu]}" "${med[$2.srv]}" "$busy"
}
# The name of the slowest of the given keys (medians).
slowest() {
    local k best=""
    for k in "$@"; do
        if [ -z "$best" ] || awk -v a="${med[$k]}" -v b="${med[$best]}" 'BEGIN { exit !(a > b) }'; then
            best=$k
        fi
    done
    case $best in warm) echo "disk read" ;; cpu) echo CPU ;; rawput) echo "raw PUT" ;;
    diskw) echo "disk write" ;; both) echo "b and c at once" ;; rgwraw) echo "raw PUT to RGW" ;;
    rgwboth) echo "b and c-rgw at once" ;; esac
}
target() { # label bound-text bound-seconds ours-key ratio-key
    local range
    range=$(printf '%s\n' ${res[$5]} | sort -g | sed -n '1p; $p' | paste -sd' ' | awk '{ print $1 "–" $2 }')
    echo "| $1 | $2 | $3 | ${med[$4]} | **$(ratio "$3" "${med[$4]}")** ($(median "${res[$5]}" %.2f);" \
        "$range) | ≥ 0.80 |"
}
bound_s3=$(maxof "${med[warm]}" "${med[cpu]}" "${med[rawput]}")
bound_file=$(maxof "${med[warm]}" "${med[cpu]}" "${med[diskw]}")

mib=$(awk -v b="$logical" 'BEGIN { printf "%.1f", b / 1048576 }')
smib=$(awk -v b="$stored" 'BEGIN { printf "%.1f", b / 1048576 }')
echo
echo "Checkpoint: $mib MiB ($logical bytes), stored as $smib MiB in $npacks packs" \
    "($(json_u64 puts "$work/s3put.json") PUTs in all); restore: $(json_u64 gets "$work/restore.json") GETs."
reqs() { # JSON: the request counts of one put
    local k v out=""
    for k in puts heads gets lists; do
        v=$(json_u64 "$k" "$1")
        out+="${v:-?} ${k%s}s, "
    done
    echo "${out%, }"
}
echo "Requests of one put (d): $(reqs "$work/s3put.json")$([ -z "$before" ] ||
    echo "; with --before (d0): $(reqs "$work/s3old.json")") (? = not reported by that build)."
echo "Medians of $reps repetition(s). MB/s = 10^6 bytes per second of the checkpoint (of the" \
    "stored bytes for c, e, g). CPU s = user + system seconds of the step's processes plus" \
    "the S3 servers' (s3rver; with --rgw also the RGW daemons), the servers' share beside it; machine busy = all $ncpu CPUs' busy time over the step, anyone's load included."
echo
echo "| step | seconds | MB/s | CPU s | of which servers | machine busy |"
echo "|---|---|---|---|---|---|"
row "(a) disk read, warm page cache (as every put reads it)" warm
row "(a) disk read, cold (this file's pages dropped)" cold
row "(b) CPU: ckptctl put → file:// on /dev/shm" cpu
row "(c) raw PUT: curl, $npacks packs, 4 in flight" rawput "$stored"
row "(b‖c) b and c at the same time" both
row "(d) **ckptctl put → s3://**" s3put
[ -z "$before" ] || row "(d0) the same put with the --before ckptctl" s3put0
if ((use_rgw)); then
    row "(c-rgw) raw PUT to RGW: curl, $npacks packs, 4 in flight" rgwraw "$stored"
    row "(b‖c-rgw) b and c-rgw at the same time" rgwboth
    row "(d-rgw) **ckptctl put → s3:// on RGW**" rgwput
    [ -z "$before" ] || row "(d0-rgw) the same put on RGW with the --before ckptctl" rgwput0
fi
row "(e) disk write: $npacks packs, 4 at a time, fsync" diskw "$stored"
row "(f) **ckptctl put → file:// on disk**" fileput
row "(g) raw GET: curl, $npacks packs, 4 in flight, → /dev/null" rawget "$stored"
row "(g') the same GETs → files on /dev/shm" getshm "$stored"
row "(h) **ckptctl restore s3:// → /dev/shm** (4 threads)" restore
[ -z "$before" ] || row "(h0) the same restore with the --before ckptctl" restore0
row "(h') ckptctl restore from b's file:// store on /dev/shm" lrestore
row "(g‖h') g and h' at the same time" both_get
if ((use_rgw)); then
    row "(g-rgw) raw GET from RGW: curl, $npacks packs, 4 in flight, → /dev/null" rgwget "$stored"
    row "(h-rgw) **ckptctl restore s3:// on RGW → /dev/shm** (4 threads)" rgwrestore
    [ -z "$before" ] || row "(h0-rgw) the same restore from RGW with the --before ckptctl" rgwrestore0
fi
echo
echo "| target | bound | bound s | ckptctl s | **ratio** (per-rep: median; range) | target |"
echo "|---|---|---|---|---|---|"
target "**time to durable, s3://**" "slowest of a, b, c: $(slowest warm cpu rawput)" "$bound_s3" s3put r_s3
[ -z "$before" ] || target "time to durable, s3://, --before" "slowest of a, b, c" "$bound_s3" s3put0 r_s3_0
if ((use_rgw)); then
    bound_rgw=$(maxof "${med[warm]}" "${med[cpu]}" "${med[rgwraw]}")
    target "**time to durable, s3:// on RGW**" "slowest of a, b, c-rgw: $(slowest warm cpu rgwraw)" \
        "$bound_rgw" rgwput r_rgw
    [ -z "$before" ] || target "time to durable, RGW, --before" "slowest of a, b, c-rgw" "$bound_rgw" rgwput0 r_rgw_0
fi
target "time to durable, file:// on disk" "slowest of a, b, e: $(slowest warm cpu diskw)" \
    "$bound_file" fileput r_file
target "**restore, s3://**" "g: raw GET" "${med[rawget]}" restore r_restore
[ -z "$before" ] || target "restore, s3://, --before" "g: raw GET" "${med[rawget]}" restore0 r_restore_0
if ((use_rgw)); then
    target "**restore, s3:// on RGW**" "g-rgw: raw GET from RGW" "${med[rgwget]}" rgwrestore r_rgw_restore
    [ -z "$before" ] || target "restore, RGW, --before" "g-rgw: raw GET from RGW" "${med[rgwget]}" \
        rgwrestore0 r_rgw_restore_0
fi
echo
if [ -n "$pinned" ]; then
    echo "Reading aids ($pinned: the pipeline's work and the servers' run on separate CPUs):"
else
    echo "Reading aids (the CPUs are shared: the pipeline's work and s3rver's run on the same $ncpu):"
fi
echo
echo "| | bound | bound s | ckptctl s | ratio (per-rep: median; range) | |"
echo "|---|---|---|---|---|---|"
target "time to durable, s3://" "slowest of a, b, c, b‖c: $(slowest warm cpu rawput both)" \
    "$(maxof "$bound_s3" "${med[both]}")" s3put r_s3both
if ((use_rgw)); then
    target "time to durable, s3:// on RGW" \
        "slowest of a, b, c-rgw, b‖c-rgw: $(slowest warm cpu rgwraw rgwboth)" \
        "$(maxof "$bound_rgw" "${med[rgwboth]}")" rgwput r_rgwboth
fi
target "restore, s3://" "g': raw GET → /dev/shm" "${med[getshm]}" restore r_restoreshm
target "restore, s3://" "g‖h': raw GET and restore's local work at once" "${med[both_get]}" \
    restore r_restoreboth
echo
echo "(Checkpoint pages resident before every put: ≥ $resident_min%. s3rver 3.7.1 on 127.0.0.1;" \
    "$ncpu CPUs${pinned:+, $pinned}; load average before $load_before, after $(cut -d' ' -f1-3 /proc/loadavg).)"
