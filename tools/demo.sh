#!/usr/bin/env bash
# The main job, end to end, on the embedded default store:
#   1. mount ckptfs (node A) and train a tiny model with real PyTorch that
#      saves ckpt-{step:06d}.pt into the mount every 2 steps, as trainers do;
#   2. wait until the last checkpoint is durable in the store;
#   3. preempt node A: kill -9 its daemon and throw away its staging disk;
#   4. mount again as a new node B (empty staging) and run the same script,
#      which resumes from the newest checkpoint it finds;
#   5. say what happened.
# Every mount is unmounted and every daemon killed (by PID) on exit.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/tools/bootstrap.sh" "$here/build"
ckptfs="$here/build/fs/ckptfs"
ckptctl="$here/build/tools/ckptctl"
store=${CKPT_STORE:-file://${XDG_DATA_HOME:-$HOME/.local/share}/ckptfs/store}
job="demo-$(date +%Y%m%d-%H%M%S)"
work=$(mktemp -d /var/tmp/ckptfs-demo.XXXXXX)
pid=""
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

cleanup() {
    [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
    for m in "$work"/mnt-*; do
        grep -q " $m fuse" /proc/mounts 2>/dev/null && fusermount3 -u -z "$m" || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

mount_node() { # mount_node NAME: starts ckptfs in the foreground, waits for the mount
    local name=$1 mnt="$work/mnt-$1"
    mkdir -p "$mnt"
    "$ckptfs" "$mnt" --store "$store" --staging "$work/staging-$name" --node "$name" -f \
        >>"$work/$name.log" 2>&1 &
    pid=$!
    for _ in $(seq 100); do
        grep -q " $mnt fuse" /proc/mounts && return 0
        kill -0 "$pid" 2>/dev/null || { cat "$work/$name.log"; return 1; }
        sleep 0.1
    done
    echo "ckptfs did not mount in 10 s" >&2
    return 1
}

echo "== store: $store   job: $job"
echo "== node A: mount ckptfs, train 6 steps, checkpoint every 2"
mount_node nodeA
mkdir "$work/mnt-nodeA/$job"
/usr/bin/python3 "$here/tests/integration/train_resume.py" "$work/mnt-nodeA/$job" "$work/ref" \
    --until 6 --every 2
ls -l "$work/mnt-nodeA/$job"

echo "== waiting until step 6 is durable in the store"
for _ in $(seq 600); do
    "$ckptctl" --store "$store" --job "$job" --json ls 2>/dev/null | grep -q '"step":6' && break
    sleep 0.2
done
"$ckptctl" --store "$store" --job "$job" ls

echo "== preempting node A: kill -9 the daemon, throw away its staging disk"
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
pid=""
fusermount3 -u -z "$work/mnt-nodeA"
rm -rf "$work/staging-nodeA"

echo "== node B: a fresh mount of the same store; the same script resumes"
mount_node nodeB
ls -l "$work/mnt-nodeB/$job"
out=$(/usr/bin/python3 "$here/tests/integration/train_resume.py" "$work/mnt-nodeB/$job" \
      "$work/ref" --until 10 --every 2)
echo "$out"
resumed=$(echo "$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["resumed_from"])')
fusermount3 -u "$work/mnt-nodeB" # a clean unmount drains the upload queue
wait "$pid" 2>/dev/null || true
pid=""
echo "== what happened"
echo "node A wrote checkpoints 2, 4, 6 and was preempted; node B found step $resumed in the"
echo "store, resumed from it, trained to step 10 and stored steps 8 and 10:"
"$ckptctl" --store "$store" --job "$job" ls
[ "$resumed" = 6 ] || { echo "expected to resume from step 6" >&2; exit 1; }
