#!/usr/bin/env bash
# The float codec where the store's link is the limit: time to durable and
# restore time of one checkpoint with `--compression auto` (zstd per byte
# plane where it wins, the default) against `--compression lz4` (the LZ4
# codecs only, the codec before zstd), side by side in one run, behind a
# rate-limited link and without one (docs/BENCHMARKS.md, "Float codec
# behind a slow link"). A benchmark: it asserts no speed; it fails when a
# put or a restore fails or a restored file differs.
#
#   tests/bench/bench_codec_link.sh BUILD_DIR [--smoke] [--size-mib N] [--reps N]
#       [--workdir DIR] [--rate-mbps N] [--scenarios full,bf16,mixed]
#
# Checkpoints (untimed, once): a torch.save of each scenario of the peers
# benchmark (tests/bench/peers/workloads.py: `full`, a transformer and its
# AdamW state in fp32 after a step on dense gradients; `bf16`, the same in
# bf16; `mixed`, bf16 weights, fp32 master weights and their AdamW state),
# --size-mib each (default 512). One s3rver on 127.0.0.1 and, in
# front of it, tests/s3/faultproxy.py capping each direction at
# --rate-mbps MB/s (default 200: a cloud link a node's GPUs share). Every
# repetition, for each scenario and each link (capped, then direct), both
# codecs in alternating order:
#   put      `ckptctl put --compression C` of the checkpoint into a fresh
#            job (nothing deduplicates): chunk, compress, upload, publish;
#            it returns once the step is durable;
#   restore  `ckptctl restore` of that step into /dev/shm (every chunk and
#            the file's digest verified), then compared with the original.
# `sync` (untimed) runs before each timed step. The tables give medians
# over the repetitions, the ratio lz4 / auto per repetition (its median and
# range: above 1, auto is faster), the stored MB and the machine's load.
#
# --smoke: 16 MiB of `full`, 1 repetition (CI: proves it runs). The s3rver
# and the proxy stop by PID in an EXIT trap; work files go to a fresh dir
# under --workdir (default /var/tmp) and under /dev/shm, removed on exit.
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "$0")" && pwd)
. "$here/benchopt.sh"
build="" size=512 reps=5 workdir=/var/tmp rate=200 scenarios=full,bf16,mixed smoke=0
while [ $# -gt 0 ]; do
    case "$1" in
    --rate-mbps) rate=${2:?--rate-mbps needs a number}; nargs=2 ;;
    --scenarios) scenarios=${2:?--scenarios needs names}; nargs=2 ;;
    --smoke) smoke=1 nargs=1 ;;
    *) bench_opt bench_codec_link "$@" ;;
    esac
    shift "$nargs"
done
[ -n "$build" ] || usage
((!smoke)) || { size=16 reps=1 scenarios=full; }
. "$here/s3lib.sh"
ckptctl=$build/tools/ckptctl
[ -x "$ckptctl" ] || { echo "bench_codec_link: $ckptctl not built" >&2; exit 2; }
py=/usr/bin/python3
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset CKPT_STORE CKPT_JOB

work=$(mktemp -d "$workdir/ckpt-bench-codec-link.XXXXXX")
shm=$(mktemp -d /dev/shm/ckpt-bench-codec-link.XXXXXX)
proxy_pid=""
cleanup() {
    [ -z "$proxy_pid" ] || { kill "$proxy_pid" 2>/dev/null; wait "$proxy_pid" 2>/dev/null; } || true
    s3lib_stop "$work/s3"
    rm -rf "$work" "$shm"
}
trap cleanup EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

IFS=, read -r -a scens <<<"$scenarios"
for scen in "${scens[@]}"; do
    echo "== checkpoint: $scen, ~$size MiB" >&2
    mkdir -p "$work/ckpt-$scen"
    $py - "$here/peers" "$scen" "$work/ckpt-$scen" "$size" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import workloads
s = workloads.SCENARIOS[sys.argv[2]](int(sys.argv[4]) << 20)
s.save(sys.argv[3], 1)
s.close()
EOF
done

s3lib_start "$work/s3"
direct=$CKPT_S3_ENDPOINT
$py "$here/../s3/faultproxy.py" --target-port "$S3_PORT" --port-file "$work/proxy.port" \
    --rate-mbps "$rate" --owner-pid $$ >"$work/proxy.log" 2>&1 &
proxy_pid=$!
for _ in $(seq 300); do
    [ -s "$work/proxy.port" ] && break
    kill -0 "$proxy_pid" 2>/dev/null || { echo "bench_codec_link: the proxy died" >&2; cat "$work/proxy.log" >&2; exit 1; }
    sleep 0.1
done
[ -s "$work/proxy.port" ] || { echo "bench_codec_link: no proxy port" >&2; exit 1; }
capped=http://127.0.0.1:$(cat "$work/proxy.port")

results=$work/results.tsv # scen link codec rep put_s restore_s stored_bytes
: >"$results"
n=0
# One put and one restore of scenario $1's checkpoint over link $2 (capped
# or direct) with codec $3, repetition $4.
one() {
    local scen=$1 link=$2 codec=$3 rep=$4
    n=$((n + 1))
    local prefix=codeclink-$n state=$work/state-$n out=$shm/restore-$n t0 put_s restore_s stored
    export CKPT_S3_ENDPOINT
    if [ "$link" = capped ]; then CKPT_S3_ENDPOINT=$capped; else CKPT_S3_ENDPOINT=$direct; fi
    local store=(--store "s3://ckpt-test/$prefix" --state-dir "$state" --job bench)
    sync
    t0=$(now)
    stored=$("$ckptctl" "${store[@]}" put --step 1 --compression "$codec" "$work/ckpt-$scen" --json |
        $py -c 'import json,sys; print(json.load(sys.stdin)["stored_bytes"])')
    put_s=$(since "$t0")
    sync
    t0=$(now)
    "$ckptctl" "${store[@]}" -q restore --step 1 --to "$out"
    restore_s=$(since "$t0")
    cmp "$work/ckpt-$scen/ckpt-000001.pt" "$out/ckpt-000001.pt" ||
        { echo "bench_codec_link: $scen $codec: the restored file differs" >&2; exit 1; }
    rm -rf "$out" "$state" "$work/s3/data/ckpt-test/$prefix"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$scen" "$link" "$codec" "$rep" "$put_s" "$restore_s" \
        "$stored" >>"$results"
    echo "  $scen $link $codec rep $rep: put ${put_s}s restore ${restore_s}s stored $stored" >&2
}

for rep in $(seq 0 "$reps"); do # repetition 0 warms the server and the caches, untimed
    for scen in "${scens[@]}"; do
        for link in capped direct; do
            if ((rep % 2)); then order=(lz4 auto); else order=(auto lz4); fi
            for codec in "${order[@]}"; do one "$scen" "$link" "$codec" "$rep"; done
        done
    done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

$py - "$results" "$rate" "$size" <<'EOF'
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]).read().splitlines()]
rate, size = sys.argv[2], sys.argv[3]
def med(xs):
    return statistics.median(xs)
print("| checkpoint | link | auto: durable s | lz4: durable s | lz4/auto | auto: restore s "
      "| lz4: restore s | lz4/auto | stored MB auto / lz4 |")
print("|---|---|---|---|---|---|---|---|---|")
for scen in dict.fromkeys(r[0] for r in rows):
    for link in ("capped", "direct"):
        by = {}
        for r in rows:
            if r[0] == scen and r[1] == link and r[3] != "0":
                by.setdefault(r[3], {})[r[2]] = (float(r[4]), float(r[5]), int(r[6]))
        reps = [v for v in by.values() if len(v) == 2]
        if not reps:
            continue
        cells = []
        for k in (0, 1):
            a = [v["auto"][k] for v in reps]
            l = [v["lz4"][k] for v in reps]
            q = [v["lz4"][k] / v["auto"][k] for v in reps]
            cells += ["%.2f" % med(a), "%.2f" % med(l),
                      "**%.2f×** [%.2f–%.2f]" % (med(q), min(q), max(q))]
        stored = "%.0f / %.0f" % (med([v["auto"][2] for v in reps]) / 1e6,
                                  med([v["lz4"][2] for v in reps]) / 1e6)
        name = "%s MB/s" % rate if link == "capped" else "none"
        print("| %s, %s MiB | %s | %s | %s |" % (scen, size, name, " | ".join(cells), stored))
print()
print("%d repetitions after an untimed one; ratios per repetition, median [min–max]." %
      len({r[3] for r in rows if r[3] != "0"}))
EOF
echo
echo "load average before: $load_before; after: $load_after; $(nproc) CPUs"
