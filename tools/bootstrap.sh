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
          libxxhash-dev liblz4-dev libzstd-dev libsqlite3-dev libfuse3-dev fuse3 libs3-dev libcurl4-openssl-dev libxml2-dev libssl-dev
          libmicrohttpd-dev python3-prometheus-client
          python3 python3-torch libopenblas0-pthread
          nodejs curl patch openssl
          dpkg-dev man-db systemd  # the .deb: dpkg-shlibdeps, man, systemd-analyze
          linux-perf  # tests/bench/bench_seal_cpu.sh: CPU seconds (perf stat)
          faketime  # integration.gc_clocks: hosts whose clocks disagree
          rsync  # integration.posix_tools: rsync -a into the mount
          s3fs rclone awscli python3-matplotlib)  # tests/bench/peers: the peers and plots
# Ceph for the RGW tests (tests/s3/rgw.sh): no recommends, which would pull
# in systemd units, a mgr and its Python stack (~264 MB, ~1 min without).
ceph_packages=(ceph-mon ceph-osd radosgw ceph-common)

missing_of() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}
install_missing() {
    local missing
    mapfile -t missing < <(missing_of "$@")
    ((${#missing[@]})) || return 0
    echo "bootstrap: installing ${missing[*]}" >&2
    if [ "$(id -u)" != 0 ]; then
        echo "bootstrap: missing packages and not root; run as root or install them" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "${apt_updated:-}" ]; then
        apt-get update -qq
        apt_updated=1
    fi
    apt-get install -y -qq "${extra_apt_args[@]}" "${missing[@]}" >/dev/null
}
extra_apt_args=()
install_missing "${packages[@]}"
extra_apt_args=(--no-install-recommends)
install_missing "${ceph_packages[@]}"

if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
elif (($#)); then
    # An existing build dir takes the options too (-DCKPT_TEST_HOOKS=ON from
    # tools/test.sh must not be lost to a cache made without it).
    cmake -S "$here" -B "$build" "$@" >/dev/null
fi
cmake --build "$build" -j"$(nproc)" >/dev/null
echo "bootstrap: built in $build" >&2
