#!/usr/bin/env bash
# Every C source and header the project tracks is formatted as .clang-format
# says (clang-format --dry-run --Werror). Fix with: clang-format -i FILE.
#   check_format.sh REPO_DIR
set -euo pipefail
cd "$1"
command -v clang-format >/dev/null || { echo "check_format: clang-format is not installed" >&2; exit 1; }
files=$(git ls-files '*.c' '*.h' 2>/dev/null || find . -name '*.[ch]' -not -path './build*')
bad=0 checked=0
for f in $files; do
    checked=$((checked + 1))
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "not formatted: $f" >&2
        bad=$((bad + 1))
    fi
done
echo "$((checked - bad)) passed, $bad failed"
[ "$bad" = 0 ]
