#!/usr/bin/env bash
# The benchmark of issue 9 ("How fast"): arden's C backend (1 and 2 threads),
# its interpreter and JAX on CPU (1 and 2 threads), on the same functions and
# data. Writes bench/results.json, docs/PERFORMANCE.md and docs/performance.svg.
#
#   bench/run.sh [driver options, e.g. --only lse,lse_grad --min-seconds 0.5]
#
# Environment: BENCH_RUNS (default 5) and BENCH_MIN_SECONDS (default 1.0):
# each time is taken over at least that many calls lasting that long;
# BENCH_INTERP_TIMEOUT (default 60): the interpreter's time limit per function;
# PYTHON (default python3): the Python that makes the virtualenv.
# Needs: cargo, a C compiler, python3 (3.9+) with venv, network access once
# (pip installs jax and numpy into bench/.venv), taskset (util-linux) to pin CPUs.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cd "$root"

echo "== building arden (cargo build --release)"
cargo build --release

venv="$here/.venv"
if ! "$venv/bin/python" -c 'import jax, numpy' 2>/dev/null; then
    echo "== making $venv with jax (CPU) and numpy"
    "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install --quiet --upgrade pip
    "$venv/bin/pip" install --quiet "jax[cpu]" numpy
fi
py="$venv/bin/python"

echo "== generating the data (bench/data, fixed seed)"
"$py" "$here/gen.py"

echo "== timing"
"$py" "$here/driver.py" \
    --runs "${BENCH_RUNS:-5}" \
    --min-seconds "${BENCH_MIN_SECONDS:-1.0}" \
    --interp-timeout "${BENCH_INTERP_TIMEOUT:-60}" \
    "$@"
