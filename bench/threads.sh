#!/bin/sh
# How the C backend scales with threads: `arden bench --threads T` for
# T = 1, 2, 4, … up to the number of cores, on a few bench/ programs
# (data made here, fixed), rounds interleaved, minimum per call kept.
# Prints one table row per function: the time at each thread count and
# the speed-up over 1 thread. For a 16-core machine (a GPU machine's host).
#
#   bench/threads.sh [path/to/arden] [rounds]
#
# With LOAD=1, one busy loop per core runs meanwhile (a machine busy with
# other work: libgomp's spinning barriers made 2 threads 10-25x slower
# than 1 there before GOMP_SPINCOUNT was bounded).
#
# Needs python3 (no packages) and the C compiler arden uses. Rounds run
# every function at every thread count before the next round starts.
set -e
ARDEN=${1:-target/release/arden}
ROUNDS=${2:-3}
D=$(mktemp -d)
python3 - "$D" <<'PY'
import json, math, sys
d = sys.argv[1]
def vec(n, a=0.37): return [math.sin(a * k) + 0.5 for k in range(n)]
def save(name, v): json.dump(v, open(f"{d}/{name}.json", "w"))
save("x1m", vec(1_000_000))
save("x1000", vec(1000)); save("z1m", vec(1000 * 1000, 0.11))
save("pts", [vec(8, 0.1 * i + 0.3) for i in range(100_000)])
save("cent", [vec(8, 0.7 * i + 0.2) for i in range(32)])
save("m16", vec(16, 0.21)); save("t200k", vec(200_000, 0.13)); save("s200k", vec(200_000, 0.29))
save("x100k", vec(100_000, 0.01)); save("y100k", [0.0] * 100_000)
PY
P=bench/programs
# label|file|entry|args
cat > "$D/cases" <<EOF
lse|$P/logsumexp.ard|lse|--arg @$D/x1m.json
lse_grad|$P/logsumexp.ard|lse_grad|--arg @$D/x1m.json
kmeans_cost|$P/kmeans_newton.ard|cost|--arg @$D/pts.json --arg @$D/cent.json
llsq_grad|$P/llsq.ard|llsq_grad|--arg @$D/m16.json --arg @$D/t200k.json --arg @$D/s200k.json
unflat|$P/fusion.ard|unflat|--arg @$D/x1000.json --arg @$D/x1000.json --arg @$D/z1m.json
rk4|$P/rk4.ard|rk4_last|--arg @$D/x100k.json --arg @$D/y100k.json --arg 0.01 --arg 100
rk4_grad|$P/rk4.ard|rk4_last_grad|--arg @$D/x100k.json --arg @$D/y100k.json --arg 0.01 --arg 100
EOF
if [ "${LOAD:-0}" = 1 ]; then
    for _ in $(seq "$(nproc)"); do sh -c 'while :; do :; done' & done
    trap 'kill $(jobs -p) 2>/dev/null' EXIT
fi
cores=$(nproc)
threads=1; t=2; while [ "$t" -le "$cores" ]; do threads="$threads $t"; t=$((t * 2)); done
r=0
while [ "$r" -lt "$ROUNDS" ]; do
    while IFS='|' read -r label file entry args; do
        for t in $threads; do
            # shellcheck disable=SC2086
            ns=$("$ARDEN" bench "$file" --entry "$entry" $args --threads "$t" --runs 3 --min-seconds 0.2 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["min_ns"])')
            echo "$label $t $ns" >> "$D/times"
        done
    done < "$D/cases"
    r=$((r + 1))
done
python3 - "$D/times" <<'PY'
import sys
best = {}
for line in open(sys.argv[1]):
    label, t, ns = line.split()
    key = (label, int(t))
    best[key] = min(best.get(key, float("inf")), int(ns))
labels = list(dict.fromkeys(k[0] for k in best))
ts = sorted({k[1] for k in best})
print(f"{'function':12}" + "".join(f"{'T=' + str(t):>13}" for t in ts) + f"   speed-up at T={ts[-1]}")
for l in labels:
    row = "".join(f"{best[(l, t)] / 1e6:10.3f} ms" for t in ts)
    print(f"{l:12}{row}   {best[(l, 1)] / best[(l, ts[-1])]:.2f}x")
PY
rm -rf "$D"
