#!/bin/bash
# check_exports.sh LIB HEADER MAP — libckpt exports exactly the functions its
# public header declares: `nm -D --defined-only LIB` lists nothing but ckpt_*
# (plus the version node, an absolute symbol), and the three lists agree.
set -euo pipefail
lib=$1 header=$2 map=$3
fail=0

exported=$(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//' | sort -u)
declared=$(grep -oE '\bckpt_[a-z0-9_]+\(' "$header" | tr -d '(' | sort -u)
mapped=$(sed -n '/global:/,/local:/p' "$map" | grep -oE '\bckpt_[a-z0-9_]+' | sort -u)

bad=$(grep -vE '^ckpt_' <<<"$exported" || true)
if [ -n "$bad" ]; then
    echo "FAIL: $lib exports symbols other than ckpt_*:"; echo "$bad" | sed 's/^/  /'; fail=1
fi
if [ "$exported" != "$declared" ]; then
    echo "FAIL: exported vs declared in $header:"; diff <(echo "$declared") <(echo "$exported") || true; fail=1
fi
if [ "$mapped" != "$declared" ]; then
    echo "FAIL: $map vs declared in $header:"; diff <(echo "$declared") <(echo "$mapped") || true; fail=1
fi
n=$(wc -l <<<"$exported")
[ $fail = 0 ] && echo "ok: $n symbols, all ckpt_*, matching the header and the map"
exit $fail
