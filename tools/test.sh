#!/usr/bin/env bash
# Runs the whole test suite: installs and builds what it needs first.
# Release build: every ctest test (unit, integration with real PyTorch,
# benchmark smoke runs). Then an ASan+UBSan build runs the unit tests and the
# integration and S3 tests (docs/RELIABILITY.md, "Sanitizers").
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
# Every sanitizer error ends the process that hit it (abort_on_error: a
# daemon that aborts takes its mount down, a ckptctl exits 134), leaks are
# errors at exit, and mountlib fails a test whose daemon logged a report
# even if it exited 0. integration.python_binding sets its own ASAN_OPTIONS
# (tests/integration/CMakeLists.txt: libasan preloaded into python, no leak
# check there).
# The ASan set: unit, integration and s3 tests, all but the benchmark smoke
# runs (label bench: their figures mean nothing in a Debug+ASan build, and
# they only repeat code paths the S3 tests run). Serially, as in the Release
# run: the set takes about 6 min here, so CI stays well under 90 min, and
# the timing-bound tests (s3.outage, the kill -9 tests) see no neighbour
# (docs/RELIABILITY.md has the figures).
asan_env=(ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
          UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1)
(cd "$here/build-asan" && env "${asan_env[@]}" ctest --output-on-failure -L unit "$@")
(cd "$here/build-asan" && env "${asan_env[@]}" ctest --output-on-failure \
    -L 'integration|s3' -LE 'bench|rgw' "$@")  # RGW runs once, in the Release build (its cluster costs minutes)

# Fuzz: every libFuzzer target for 60 s, from its seeds (clang build).
CC=clang "$here/tools/bootstrap.sh" "$here/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON -DCKPT_TEST_HOOKS=ON
(cd "$here/build-fuzz" && ctest --output-on-failure -j2 -L fuzz "$@")  # one core each
