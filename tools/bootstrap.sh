#!/usr/bin/env bash
# Installs what ckptfs needs to build and test (Debian 12, as root) and builds it.
# Idempotent and quick when everything is already there. Used by tools/demo.sh,
# tools/test.sh and .ci/run; safe to run by hand.
#
#   tools/bootstrap.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
shift || true

packages=(build-essential cmake pkg-config clang clang-format libjson-c-dev
          libxxhash-dev liblz4-dev libsqlite3-dev libfuse3-dev fuse3 libs3-dev
          python3 python3-torch libopenblas0-pthread
          nodejs curl patch
          dpkg-dev man-db systemd)  # the .deb: dpkg-shlibdeps, man, systemd-analyze
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "bootstrap: installing ${missing[*]}" >&2
    if [ "$(id -u)" != 0 ]; then
        echo "bootstrap: missing packages and not root; run as root or install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
elif (($#)); then
    # An existing build dir takes the options too (-DCKPT_TEST_HOOKS=ON from
    # tools/test.sh must not be lost to a cache made without it).
    cmake -S "$here" -B "$build" "$@" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "bootstrap: built in $build" >&2
