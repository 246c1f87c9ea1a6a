#!/usr/bin/env bash
# CPU seconds of the seal pipeline (chunk, hash, compress, pack), old build
# against new, side by side: `ckptctl put` of one directory into a file://
# store on /dev/shm (no network, no disk write), the two ckptctl builds
# alternating, REPS times each; prints each run's CPU seconds (perf stat
# task-clock: on a busy machine CPU time holds far better than wall time),
# wall seconds and stored bytes, then the medians and the ratio new / old.
# A benchmark: it asserts no speed.
#
#   tests/bench/bench_seal_cpu.sh OLD_CKPTCTL NEW_CKPTCTL DIR [REPS [STORE]]
#
# DIR: what to put (e.g. a torch.save checkpoint, as bench_durable.sh
# makes). REPS default 5. State dirs and jobs are fresh per run (nothing
# deduplicates). STORE: put there instead (e.g. s3://ckpt-test/seal, with
# CKPT_S3_ENDPOINT and the keys in the environment): time to durable of the
# whole put, old against new; CPU s is then ckptctl's alone (the server's
# is not counted). The /dev/shm store is removed on exit; STORE is not.
# OLD_PUT_ARGS, NEW_PUT_ARGS: more `put` arguments for each side, e.g. the
# same build twice with OLD_PUT_ARGS="--seal-threads 1" NEW_PUT_ARGS=
# "--seal-threads 2" (docs/BENCHMARKS.md, "Seal threads").
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
old=$1 new=$2 dir=$3 reps=${4:-5} store=${5:-}
for b in "$old" "$new"; do
    [ -x "$b" ] || { echo "bench_seal_cpu: $b is not executable" >&2; exit 2; }
done
command -v perf >/dev/null || { echo "bench_seal_cpu: perf not found (linux-perf)" >&2; exit 2; }
shm=$(mktemp -d /dev/shm/ckpt-seal-cpu.XXXXXX)
trap 'rm -rf "$shm"' EXIT

read -r -a old_args <<<"${OLD_PUT_ARGS:-}"
read -r -a new_args <<<"${NEW_PUT_ARGS:-}"
logical=$(du -sb --apparent-size "$dir" | cut -f1)

one() { # BIN LABEL: prints "LABEL cpu_s wall_s stored_bytes"
    local -a args=()
    if [ "$2" = new ]; then args=("${new_args[@]}"); else args=("${old_args[@]}"); fi
    local t0 t1 out
    rm -rf "$shm/store" "$shm/state"
    mkdir "$shm/state"
    t0=$(date +%s.%N)
    perf stat -x, -e task-clock -o "$shm/stat" "$1" --store "${store:-file://$shm/store}" \
        --job "seal$(date +%s%N)" \
        --state-dir "$shm/state" --node bench -q --json put --step 1 ${args[@]+"${args[@]}"} "$dir" >"$shm/out"
    t1=$(date +%s.%N)
    out=$(sed -n 's/.*"stored_bytes":\([0-9]*\).*/\1/p' "$shm/out")
    awk -F, -v l="$2" -v a="$t0" -v b="$t1" -v s="$out" \
        '/task-clock/ { printf "%s %.3f %.3f %s\n", l, $1 / 1000, b - a, s }' "$shm/stat"
}

one "$old" warmup >/dev/null
one "$new" warmup >/dev/null
res=()
for ((r = 1; r <= reps; r++)); do
    if ((r % 2)); then res+=("$(one "$old" old)" "$(one "$new" new)")
    else res+=("$(one "$new" new)" "$(one "$old" old)"); fi
done
echo "| build | CPU s | wall s | stored bytes |"
echo "|---|---|---|---|"
printf '%s\n' "${res[@]}" | awk '{ printf "| %s | %s | %s | %s |\n", $1, $2, $3, $4 }'
echo "put: old ${OLD_PUT_ARGS:-(no more arguments)}, new ${NEW_PUT_ARGS:-(no more arguments)}; $logical bytes"
printf '%s\n' "${res[@]}" | awk -v n="$reps" -v gib="$logical" '
    { cpu[$1] = cpu[$1] " " $2; wall[$1] = wall[$1] " " $3; st[$1] = $4 }
    function med(s,   v, k, i, j, t) {
        k = split(s, v, " ")
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
    }
    END {
        o = med(cpu["old"]); w = med(cpu["new"])
        printf "\nmedian CPU s of %d runs each: old %.3f, new %.3f, new/old %.2f; stored new/old %.4f\n",
            n, o, w, w / o, st["new"] / st["old"]
        o = med(wall["old"]); w = med(wall["new"])
        printf "median wall s: old %.3f, new %.3f, new/old %.2f\n", o, w, w / o
        printf "per GiB: old %.3f CPU s, %.0f MiB/s; new %.3f CPU s, %.0f MiB/s\n",
            med(cpu["old"]) * 2^30 / gib, gib / 2^20 / o, med(cpu["new"]) * 2^30 / gib, gib / 2^20 / w
    }'
