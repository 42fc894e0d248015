#!/bin/sh
# Times bench/programs/fusion.ard at -O0 and -O1 (C backend, 1 thread by
# default; THREADS=2 for OpenMP) at three sizes: median per call and the
# peak bytes of arrays (`arden bench --json`), and the process's peak RSS
# (`/usr/bin/time`). Usage: bench/fusion.sh [path/to/arden]
set -e
ARDEN=${1:-target/release/arden}
THREADS=${THREADS:-1}
P=bench/programs/fusion.ard
D=$(mktemp -d)
vec() { python3 -c "import json,math,sys; n=int(sys.argv[1]); print(json.dumps([math.sin(0.37*k)+0.5 for k in range(n)]))" "$1" > "$2"; }
run() { # entry, label, args...
    e=$1; label=$2; shift 2
    for O in 0 1; do
        /usr/bin/time -f "%e %M" -o "$D/time" "$ARDEN" bench "$P" -O "$O" --entry "$e" --threads "$THREADS" --runs 5 --min-seconds 0.5 --json "$@" > "$D/out"
        python3 - "$D/out" "$D/time" "$e" "$label" "$O" <<'PY'
import json, sys
b = json.load(open(sys.argv[1])); t = open(sys.argv[2]).read().split()
print(f"{sys.argv[3]:9} {sys.argv[4]:12} -O{sys.argv[5]}  median {b['median_ns']/1e6:9.3f} ms  peak arrays {b['peak_bytes']/1e6:8.2f} MB  max RSS {int(t[-1])/1024:7.1f} MB")
PY
    done
}
for n in 10000 100000 1000000; do
    vec $n "$D/x.json"
    for e in scan_sq prod_sq; do run $e "n=$n" --arg "@$D/x.json"; done
done
for n in 100 316 1000; do
    vec $n "$D/x.json"; vec $((n * n)) "$D/z.json"
    for e in row_scan row_prod unflat flat; do run $e "n=m=$n" --arg "@$D/x.json" --arg "@$D/x.json" --arg "@$D/z.json"; done
done
rm -r "$D"
