#!/bin/sh
# Time every GradBench eval's largest default workload through `arden gradbench`
# (single thread unless --multithreaded). See bench/gradbench.py for the inputs
# and options; `bench/gradbench.sh --small` is a quick check.
set -e
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$ARDEN" ]; then
  (cd "$root" && cargo build --release --quiet)
fi
exec python3 "$root/bench/gradbench.py" "$@"
