# shellcheck shell=bash
# benchopt.sh — the command-line helpers the bench scripts share
# (bench_durable.sh, bench_resume.sh, bench_fuse_save.sh, peers/run.sh).
# Sourced, not run; the caller has `set -euo pipefail`.
#
#   usage               print the caller's header comment (line 2 up to
#                       `set -euo`) without its `# ` and exit 2
#   bench_build_dir ARGS
#                       usage when ARGS is empty or starts with -h/--help;
#                       else sets build to the first one's absolute path
#                       (the caller shifts it)
#   bench_opt NAME ARGS one option of bench_durable/bench_resume's common set
#                       (--smoke, --size-mib N, --reps N, --workdir DIR,
#                       -h/--help, the build dir): sets size, reps, workdir or
#                       build, and nargs to the words it took (1 or 2); an
#                       unknown option is an error naming NAME

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }

bench_build_dir() {
    [ $# -ge 1 ] || usage
    case "$1" in -h | --help) usage ;; esac
    build=$(cd "$1" && pwd)
}

bench_opt() {
    local name=$1
    shift
    nargs=1
    case "$1" in
    --smoke) size=32 reps=1 ;;
    --size-mib) size=${2:?--size-mib needs a number}; nargs=2 ;;
    --reps) reps=${2:?--reps needs a number}; nargs=2 ;;
    --workdir) workdir=${2:?--workdir needs a directory}; nargs=2 ;;
    -h | --help) usage ;;
    -*) echo "$name: unknown option $1" >&2; usage ;;
    *) [ -z "$build" ] || usage; build=$(cd "$1" && pwd) ;;
    esac
}
