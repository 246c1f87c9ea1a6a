#!/usr/bin/env bash
# The peer tier against a slow store: close -> replicated vs a plain copy to
# the peer and vs close -> durable, a new node's resume from the peer vs from
# the store, time to durable and the writer's CPU and peak RSS with
# replication on and off (docs/BENCHMARKS.md, "Peers: replicated before
# durable").
#
#   tests/bench/bench_replicas.sh BUILD_DIR [--smoke] [bench_replicas.py options]
#       --size-mib N (1024)  --reps N (3)  --rate-mbps N (100: the store's link)
#       --out DIR (results: replicas.json, replicas.md)  --workdir DIR (/var/tmp)
#       --store-dir DIR (s3rver's objects; default in --workdir; /dev/shm keeps
#       the store's writes off the node's disk, as a remote store's are)
#
# bench_replicas.py does the work (its docstring says what each phase
# measures); this wrapper runs it with Debian's python3 (torch). It starts
# s3rver, the capped proxy, the peer's mount and a TCP sink itself, and
# stops each by its PID. Needs a -DCKPT_TEST_HOOKS=ON build (the resume
# phase holds the writer's pack PUTs), s3rver, FUSE, python3-torch.
# --smoke (CI, label bench): 8 MiB, 1 repetition; fails when a phase does
# not complete or a read differs from what was written, never on a timing.
# The full run in docs/BENCHMARKS.md:
#   nice -n 10 tests/bench/bench_replicas.sh build --size-mib 1024 --reps 3 \
#       --store-dir /dev/shm --out DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd)
shift
py=/usr/bin/python3
for t in "$build/fs/ckptfs" "$build/tools/ckptctl" "$py"; do
    [ -x "$t" ] || { echo "bench_replicas: $t missing" >&2; exit 2; }
done
[ -e /dev/fuse ] || { echo "bench_replicas: /dev/fuse missing" >&2; exit 2; }
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$py" "$here/bench_replicas.py" --build "$build" "$@"
