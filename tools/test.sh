#!/usr/bin/env bash
# Runs the whole test suite: installs and builds what it needs first.
# Release build: every ctest test (unit, integration with real PyTorch,
# benchmark smoke runs). Then an ASan+UBSan build runs the unit tests.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/tools/bootstrap.sh" "$here/build"
(cd "$here/build" && ctest --output-on-failure --timeout 900 "$@")

"$here/tools/bootstrap.sh" "$here/build-asan" -DCKPT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
(cd "$here/build-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit "$@")

# Fuzz smoke: every libFuzzer target for 20 s (clang build).
CC=clang "$here/tools/bootstrap.sh" "$here/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON
(cd "$here/build-fuzz" && ctest --output-on-failure -L fuzz "$@")
