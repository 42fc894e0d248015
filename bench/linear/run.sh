#!/usr/bin/env bash
# Issue 24, item 1: time every gradient of bench/linear/grads.ard at n and
# 4n on the C backend, one thread, and print a Markdown table of the
# minimum time and peak array bytes and their growth (linear is 4x).
#
#   bench/linear/run.sh [ARDEN_BINARY] [N]     (defaults: target/release/arden, 4000)
#
# Environment: RUNS (default 3), OPT (default -O1; -O0 for the IR as `ad` made it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$(dirname "$here")")"
arden="${1:-$root/target/release/arden}"
n="${2:-4000}"
runs="${RUNS:-3}"
opt="${OPT:--O1}"
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
for size in "$n" $((4 * n)); do
    python3 - "$data" "$size" <<'PY'
import json, random, sys
d, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(24)
vec = lambda: [0.99 + 0.02 * rng.random() for _ in range(n)]
json.dump(vec(), open(f"{d}/y{n}.json", "w"))
json.dump([vec(), vec(), vec()], open(f"{d}/m{n}.json", "w"))
PY
done
echo "| gradient | time n=$n | time n=$((4 * n)) | growth | peak n=$n | peak n=$((4 * n)) | growth |"
echo "|---|---|---|---|---|---|---|"
for e in $(grep -o '^entry [a-z0-9]*' "$here/grads.ard" | cut -d' ' -f2); do
    arg=y
    [[ $e == row* ]] && arg=m
    row="| \`$e\`"
    declare -a t=() p=()
    for size in "$n" $((4 * n)); do
        out=$("$arden" bench "$here/grads.ard" $opt --entry "$e" --arg "@$data/$arg$size.json" --backend c --threads 1 --runs "$runs" --min-seconds 0 --json)
        t+=("$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["min_ns"])')")
        p+=("$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["peak_bytes"])')")
    done
    python3 - "$e" "${t[0]}" "${t[1]}" "${p[0]}" "${p[1]}" <<'PY'
import sys
e, t0, t1, p0, p1 = sys.argv[1], *map(float, sys.argv[2:])
ms = lambda ns: f"{ns / 1e6:.3f} ms" if ns < 1e9 else f"{ns / 1e9:.2f} s"
mb = lambda b: f"{b / 2**20:.2f} MiB" if b < 2**30 else f"{b / 2**30:.2f} GiB"
print(f"| `{e}` | {ms(t0)} | {ms(t1)} | {t1 / t0:.1f}x | {mb(p0)} | {mb(p1)} | {p1 / max(p0, 1):.1f}x |")
PY
done
