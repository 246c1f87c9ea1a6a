#!/usr/bin/env bash
# Runs the whole test suite: installs and builds what it needs first.
# Release build: every ctest test (unit, integration with real PyTorch,
# benchmark smoke runs). Then an ASan+UBSan build runs the unit tests.
#
# Every build here has the test hooks (-DCKPT_TEST_HOOKS=ON: the daemon obeys
# $CKPT_FAULT, docs/BACKENDS.md), and CI=1 makes a test that cannot run here
# (a unit case's UT_SKIP) fail instead of being reported as skipped.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export CI=${CI:-1}
"$here/tools/bootstrap.sh" "$here/build" -DCKPT_TEST_HOOKS=ON
(cd "$here/build" && ctest --output-on-failure --timeout 900 "$@")

"$here/tools/bootstrap.sh" "$here/build-asan" -DCKPT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DCKPT_TEST_HOOKS=ON
(cd "$here/build-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit "$@")

# Fuzz: every libFuzzer target for 60 s, from its seeds (clang build).
CC=clang "$here/tools/bootstrap.sh" "$here/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON -DCKPT_TEST_HOOKS=ON
(cd "$here/build-fuzz" && ctest --output-on-failure -L fuzz "$@")
