"""f32 against f64: the same programs run with `--precision f32` (issue 28
item 6: one program, both precisions), at 1 thread on the C backend.

The data of each row is copied to float32 (bench/out/f32data/), then
`arden bench` runs the row in f64 and in f32, interleaved, `--rounds` times;
the table gives each precision's minimum and their ratio. A ratio near 2
means the generated loops use twice the SIMD lanes in f32.

    bench/.venv/bin/python bench/precision.py [--only lse,mlp2] [--rounds 3]
"""

import argparse
import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import driver  # noqa: E402
from workloads import FUNCTIONS  # noqa: E402

DEFAULT_ROWS = ["lse", "lse_grad", "llsq", "matmul", "mlp2", "mlp2_grad", "softmax_ce", "softmax_ce_grad", "diffusion", "conv1d"]


def f32_copy(data):
    """bench/data/DATA with every float64 array stored as float32."""
    src = os.path.join(HERE, "data", data)
    dst = os.path.join(driver.OUT, "f32data", data)
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        a, b = os.path.join(src, f), os.path.join(dst, f)
        if f.endswith(".npy"):
            x = np.load(a)
            np.save(b, x.astype(np.float32) if x.dtype == np.float64 else x)
        else:
            shutil.copy(a, b)
    return dst


def bench(row, data_dir, precision, cache, runs, min_seconds):
    cmd = driver.taskset("0") + [driver.ARDEN, "bench", row["program"], "--entry", row["entry"], *driver.arden_args(row, data_dir),
                                 "--backend", "c", "--threads", "1", "--precision", precision,
                                 "--runs", str(runs), "--min-seconds", str(min_seconds), "--json"]
    r, _ = driver.run_json(cmd, driver.arden_env(cache))
    if not isinstance(r, dict):
        raise SystemExit(f"{row['name']} ({precision}): {r}")
    return r["min_ns"] * 1e-9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated rows (default: %s)" % ",".join(DEFAULT_ROWS))
    ap.add_argument("--rounds", type=int, default=3, help="interleaved f64/f32 rounds; the minimum counts")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.3)
    a = ap.parse_args()
    names = a.only.split(",") if a.only else DEFAULT_ROWS
    rows = [r for r in FUNCTIONS if r["name"] in names]
    if len(rows) != len(names):
        raise SystemExit(f"unknown rows: {sorted(set(names) - {r['name'] for r in rows})}")
    cache = tempfile.mkdtemp(prefix="arden-precision-")
    print(f"load at start: {os.getloadavg()}")
    print("| function | f64 | f32 | f64 / f32 |\n|---|---:|---:|---:|")
    for row in rows:
        f32_dir = f32_copy(row["data"])
        f64_dir = os.path.join(HERE, "data", row["data"])
        t64, t32 = [], []
        for _ in range(a.rounds):
            t64.append(bench(row, f64_dir, "f64", cache, a.runs, a.min_seconds))
            t32.append(bench(row, f32_dir, "f32", cache, a.runs, a.min_seconds))
        m64, m32 = min(t64), min(t32)
        print(f"| {row['title']} | {m64 * 1e3:.2f} ms | {m32 * 1e3:.2f} ms | {m64 / m32:.2f}× |", flush=True)
    print(f"load at end: {os.getloadavg()}")
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
