#!/usr/bin/env bash
# Runs the whole test suite: installs and builds what it needs first.
# Release build: every ctest test (unit, integration with real PyTorch,
# benchmark smoke runs). Then an ASan+UBSan build runs the unit tests and the
# integration and S3 tests (docs/RELIABILITY.md, "Sanitizers").
#
# Several tests at a time: most of them wait on daemons, S3 servers, FUSE and
# fsync rather than compute (the Release suite two at a time kept the 2 cores
# 48% busy), so each build's tests run CKPT_TEST_JOBS at a time (Release 4,
# ASan 3: instrumented code is CPU-bound several times longer). What must not
# share the machine says so in its CMakeLists (RUN_SERIAL: the tests that time
# the product against its documented bounds; RESOURCE_LOCK ceph_cluster: one
# throw-away Ceph cluster at a time), and COST starts the longest tests first.
# docs/RELIABILITY.md, "What runs", has the figures.
#
# Every build here has the test hooks (-DCKPT_TEST_HOOKS=ON: the daemon obeys
# $CKPT_FAULT, docs/BACKENDS.md), and CI=1 makes a test that cannot run here
# (a unit case's UT_SKIP) fail instead of being reported as skipped.
#
# --quick (first argument): the Release build's unit and lint tests only,
# two at a time: the inner loop (~3 minutes on 2 cores). Other arguments go
# to every ctest run (e.g. -R NAME).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export CI=${CI:-1}
# Every stage runs even when one before it failed (the log then shows all
# that fails); the script exits non-zero if any did.
failed=()
stage() { # NAME DIR CTEST-ARGS...: one ctest run, its failure recorded
    local name=$1 dir=$2
    shift 2
    (cd "$dir" && ctest --output-on-failure "$@") || failed+=("$name")
}

quick=0
if [ "${1:-}" = --quick ]; then
    quick=1
    shift
fi
"$here/tools/bootstrap.sh" "$here/build" -DCKPT_TEST_HOOKS=ON
if [ $quick = 1 ]; then
    # Unit and lint tests: each is one process on one core, two at a time.
    stage "release unit" "$here/build" --timeout 900 -j2 -L 'unit|lint' "$@"
    [ ${#failed[@]} -eq 0 ] || { printf 'FAILED stages: %s\n' "${failed[*]}" >&2; exit 1; }
    echo "unit and lint passed (the whole suite: tools/test.sh)"
    exit 0
fi
stage "release" "$here/build" --timeout 900 -j"${CKPT_TEST_JOBS:-4}" "$@"

"$here/tools/bootstrap.sh" "$here/build-asan" -DCKPT_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DCKPT_TEST_HOOKS=ON
# Every sanitizer error ends the process that hit it (abort_on_error: a
# daemon that aborts takes its mount down, a ckptctl exits 134), leaks are
# errors at exit, and mountlib fails a test whose daemon logged a report
# even if it exited 0. integration.python_binding sets its own ASAN_OPTIONS
# (tests/integration/CMakeLists.txt: libasan preloaded into python, no leak
# check there).
# The ASan set: unit, integration and s3 tests, all but the benchmark smoke
# runs (label bench: their figures mean nothing in a Debug+ASan build, and
# they only repeat code paths the S3 tests run) and RGW (run once, in the
# Release build: its cluster costs minutes).
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
stage "asan" "$here/build-asan" --timeout 900 -j"${CKPT_TEST_JOBS:-3}" -L 'unit|integration|s3' -LE 'bench|rgw' "$@"
unset ASAN_OPTIONS UBSAN_OPTIONS

# Fuzz: every libFuzzer target for 30 s, from its seeds (clang build).
CC=clang "$here/tools/bootstrap.sh" "$here/build-fuzz" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON -DCKPT_TEST_HOOKS=ON
stage "fuzz" "$here/build-fuzz" -j2 -L fuzz "$@" # one core each

if [ ${#failed[@]} -ne 0 ]; then
    printf 'FAILED stages: %s\n' "${failed[*]}" >&2
    exit 1
fi
echo "every stage passed"
