"""The thread count on a busy machine (issue 26, "never slower with more
threads than with one, also on a busy machine"): each function of
workloads.py timed with 1 thread, with the count fixed at every core, with
the dynamic count over every core, and with no count given (the default),
on the quiet machine and then beside one spinning process per core.

    python3 bench/busy.py [--only rk4_grad,lse_grad] [--min-seconds 1.5] [--arden PATH] [--out FILE]

Every mode runs `arden bench --json` for at least --min-seconds (so that
the dynamic count takes its readings, every 100 ms, and backs off), all on
every core (taskset), and reports the median and the minimum of the calls
and the threads the calls' parallel loops took (fewest, most). The median
is the figure to read: on a busy machine the minimum hides the calls a
descheduled thread held up. Writes one JSON line per measurement to --out
(default bench/busy.jsonl) and prints a table. Needs the benchmark's data
(bench/gen.py) and numpy.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import driver  # noqa: E402
from workloads import FUNCTIONS  # noqa: E402

# (label, --threads, ARDEN_DYNAMIC_THREADS): None leaves it out
MODES = [("1 thread", "1", "0"), ("exact", "all", "0"), ("dynamic", "all", "1"), ("default", None, None)]


def bench(arden, row, cores, threads, dynamic, min_seconds, cache):
    env = driver.arden_env(cache)
    env.pop("ARDEN_DYNAMIC_THREADS", None)
    if dynamic is not None:
        env["ARDEN_DYNAMIC_THREADS"] = dynamic
    cmd = driver.taskset(f"0-{cores - 1}") + [arden, "bench", row["program"], "--entry", row["entry"], *driver.arden_args(row),
                                               "--runs", "3", "--min-seconds", str(min_seconds), "--json"]
    if threads is not None:
        cmd += ["--threads", str(cores) if threads == "all" else threads]
    r, wall = driver.run_json(cmd, env, timeout=600)
    if not isinstance(r, dict):
        return dict(error=str(r)[-300:])
    return dict(median_ms=r["median_ns"] / 1e6, min_ms=r["min_ns"] / 1e6, calls=r["runs"],
                threads_used=r.get("threads_used"), wall_s=round(wall, 1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="rk4_grad,diffusion_grad,conv1d_grad,lse_grad,gmm_d10_grad",
                    help="comma-separated function names of workloads.py")
    ap.add_argument("--min-seconds", type=float, default=1.5, help="seconds of calls per measurement")
    ap.add_argument("--arden", default=driver.ARDEN, help="the arden binary (default target/release/arden)")
    ap.add_argument("--out", default=os.path.join(HERE, "busy.jsonl"), help="JSON lines written here")
    a = ap.parse_args()
    names = a.only.split(",")
    rows = [r for r in FUNCTIONS if r["name"] in names]
    if len(rows) != len(names):
        sys.exit(f"busy.py: unknown function in {a.only}")
    cores = os.cpu_count() or 1
    cache = tempfile.mkdtemp(prefix="arden-busy-cache-")
    for row in rows:  # compile once, outside the timings
        bench(a.arden, row, cores, "1", "0", 0, cache)
    results = []
    with open(a.out, "w") as out:
        for phase in ["quiet", "busy"]:
            spinners = []
            if phase == "busy":
                spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
                time.sleep(1)
            try:
                for row in rows:
                    for label, threads, dynamic in MODES:
                        r = bench(a.arden, row, cores, threads, dynamic, a.min_seconds, cache)
                        r.update(phase=phase, name=row["name"], mode=label)
                        driver.log(json.dumps(r))
                        out.write(json.dumps(r) + "\n")
                        out.flush()
                        results.append(r)
            finally:
                for p in spinners:
                    p.kill()
    print(f"\nmedian ms per call ({cores} cores; busy = {cores} spinning processes)")
    print("| function | phase | " + " | ".join(m[0] for m in MODES) + " |")
    print("|---|---|" + "---|" * len(MODES))
    for row in rows:
        for phase in ["quiet", "busy"]:
            cells = []
            for label, _, _ in MODES:
                r = next(x for x in results if x["name"] == row["name"] and x["phase"] == phase and x["mode"] == label)
                cells.append(f"{r['median_ms']:.3g}" if "median_ms" in r else "error")
            print(f"| {row['name']} | {phase} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
