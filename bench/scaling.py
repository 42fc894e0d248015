"""Thread scaling of arden's C backend on a many-core machine, beside JAX
(issue 26, "scaling to many cores"; issue 31's JAX-on-GPU baseline).

    python3 bench/scaling.py [--threads 1,4,8,16] [--only NAME,...] [--runs 3]
                             [--min-seconds 0.2] [--rounds 1] [--no-jax] [--arden PATH] [--tag T]

For every function of workloads.py (its data made by gen.py beforehand):

- `arden bench --threads T` pinned with taskset to CPUs 0..T-1, for each T
  (default 1, 2, 4, ... up to the number of cores, and that number), rounds
  interleaved over functions and thread counts, the minimum kept;
- arden's result at 1 thread and at the most threads, compared byte for
  byte (the language promises the same bits at every thread count);
- JAX on the CPU at 1 thread (single-threaded XLA flags, CPU 0) and at the
  most threads (default flags, the same CPUs as arden's), and JAX on the GPU
  where jax finds one (JAX_PLATFORMS=cuda), unless --no-jax.

Writes bench/scaling.json and bench/scaling.md (a section that driver.py
copies into docs/PERFORMANCE.md). Needs the Python of the benchmark (numpy;
jax for the JAX columns) and a C compiler for arden.
"""

import argparse
import concurrent.futures
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

JSON_OUT = os.path.join(HERE, "scaling.json")
MD_OUT = os.path.join(HERE, "scaling.md")


def outputs(tag):
    """scaling.json and scaling.md, or scaling-TAG.* for a run kept apart."""
    if not tag:
        return JSON_OUT, MD_OUT
    return os.path.join(HERE, f"scaling-{tag}.json"), os.path.join(HERE, f"scaling-{tag}.md")


def cpus(threads):
    return f"0-{threads - 1}" if threads > 1 else "0"


def default_threads():
    n = os.cpu_count() or 1
    ts, t = [1], 2
    while t < n:
        ts.append(t)
        t *= 2
    return ts + [n] if n > 1 else ts


def arden_time(arden, row, cache, threads, runs, min_seconds):
    cmd = driver.taskset(cpus(threads)) + [
        arden, "bench", row["program"], "--entry", row["entry"], *driver.arden_args(row),
        "--threads", str(threads), "--runs", str(runs), "--min-seconds", str(min_seconds), "--json"]
    r, _ = driver.run_json(cmd, driver.arden_env(cache), timeout=600)
    return r["min_ns"] if isinstance(r, dict) else r


def same_bits(arden, row, cache, threads):
    """Whether arden's result file at `threads` equals the one at 1 thread, byte for byte."""
    outs = []
    for t in (1, threads):
        path = os.path.join(cache, f"{row['name']}_{t}t.json")
        cmd = [arden, "run", row["program"], "--entry", row["entry"], *driver.arden_args(row),
               "--threads", str(t), "--output", path]
        p = subprocess.run(cmd, env=driver.arden_env(cache), capture_output=True, text=True, cwd=driver.ROOT)
        if p.returncode != 0:
            return f"exit {p.returncode}: {p.stderr.strip()[-300:]}"
        with open(path, "rb") as f:
            outs.append(f.read())
    return outs[0] == outs[1]


def jax_times(names, mode, threads, runs, min_seconds):
    """{name: min_ns} of jax_workloads.py in one process: mode "cpu" (pinned) or "gpu"."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if mode == "gpu":
        env["JAX_PLATFORMS"] = "cuda"
        pin = []
    else:
        env["JAX_PLATFORMS"] = "cpu"
        if threads == 1:
            env.update(driver.ONE_THREAD_ENV, XLA_FLAGS=driver.JAX_1T_FLAGS)
        pin = driver.taskset(cpus(threads))
    out = os.path.join(tempfile.mkdtemp(prefix="arden-scaling-jax-"), "jax.json")
    cmd = pin + [sys.executable, os.path.join(HERE, "jax_workloads.py"), "--only", ",".join(names),
                 "--runs", str(runs), "--min-seconds", str(min_seconds), "--out", out]
    p = subprocess.run(cmd, env=env, cwd=driver.ROOT, capture_output=True, text=True)
    if not os.path.exists(out):
        driver.log(f"JAX ({mode}, {threads} threads) gave nothing: {p.stderr.strip()[-400:]}")
        return {}
    with open(out) as f:
        return {r["name"]: r["min_ns"] for r in json.load(f)}


def gpu_name():
    try:
        p = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        return p.stdout.strip().splitlines()[0] if p.returncode == 0 and p.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return None


def measure(a):
    rows = [r for r in FUNCTIONS if not a.only or r["name"] in a.only.split(",")]
    threads = [int(t) for t in a.threads.split(",")] if a.threads else default_threads()
    most = max(threads)
    cache = tempfile.mkdtemp(prefix="arden-scaling-cache-")
    meta = driver.machine()
    meta.update(threads=threads, runs=a.runs, min_seconds=a.min_seconds, rounds=a.rounds, gpu=gpu_name())
    if a.commit:
        meta["commit"] = a.commit
    data = dict(meta=meta, rows={r["name"]: dict(title=r["title"], arden={}) for r in rows})
    busy = []
    if a.load:
        # a machine busy with other work: one spinning process per core
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        meta["load"] = f"{len(busy)} spinning processes"
    try:
        return timed(a, rows, threads, most, cache, meta, data)
    finally:
        for p in busy:
            p.kill()


def timed(a, rows, threads, most, cache, meta, data):
    def save():
        with open(outputs(a.tag)[0], "w") as f:
            json.dump(data, f, indent=1)

    driver.log(f"compiling {len(rows)} functions, their bits at 1 and {most} threads")
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, (os.cpu_count() or 1) // 4)) as pool:
        for row, ok in zip(rows, pool.map(lambda r: same_bits(a.arden, r, cache, most), rows)):
            data["rows"][row["name"]]["same_bits"] = ok
    for k in range(a.rounds):
        for row in rows:
            for t in threads:
                ns = arden_time(a.arden, row, cache, t, a.runs, a.min_seconds)
                times = data["rows"][row["name"]]["arden"]
                if isinstance(ns, int):
                    times[str(t)] = min(ns, times.get(str(t), ns)) if isinstance(times.get(str(t)), int) else ns
                else:
                    times[str(t)] = ns
            driver.log(f"round {k + 1}: {row['name']} {data['rows'][row['name']]['arden']}")
            save()
    if not a.no_jax:
        names = [r["name"] for r in rows]
        modes = [("jax_cpu_1t", "cpu", 1), (f"jax_cpu_{most}t", "cpu", most)]
        if meta["gpu"]:
            modes.append(("jax_gpu", "gpu", 0))
        for key, mode, t in modes:
            driver.log(f"{key}")
            for name, ns in jax_times(names, mode, t, a.runs, a.min_seconds).items():
                if name in data["rows"]:
                    data["rows"][name][key] = ns
            save()
    data["meta"]["loadavg_end"] = driver.loadavg()
    save()
    return data


def fmt(ns):
    return driver.fmt_t(ns / 1e9) if isinstance(ns, int) else "failed"


def report(data, md_out=MD_OUT):
    meta = data["meta"]
    threads = meta["threads"]
    most = max(threads)
    lines = ["## Thread scaling on a many-core machine", "",
             f"`bench/scaling.py`, {meta['date']}, {meta['cpu']}, {meta['cores']} cores, commit {meta['commit']}, "
             f"load {' '.join(meta['loadavg_start'] or ['?'])} at the start. arden: `arden bench --threads T` pinned "
             f"to CPUs 0..T-1, minimum of {meta['rounds']} round(s) of {meta['runs']} calls (at least "
             f"{meta['min_seconds']} s each). JAX on the CPU: 1 thread (single-threaded XLA flags, CPU 0) and "
             f"{most} threads (default flags, CPUs 0-{most - 1})"
             + (f"; JAX on the GPU: {meta['gpu']}, float64." if meta.get("gpu") else ".")
             + (f" Under load: {meta['load']} ran meanwhile." if meta.get("load") else "")
             + f" *bits*: arden's result at {most} threads equals the one at 1 thread byte for byte.", ""]
    gpu = bool(meta.get("gpu"))
    head = ["function"] + [f"{t}T" for t in threads] + [f"speed-up {most}T", "bits", "JAX 1T",
                                                          f"JAX {most}T", f"arden/JAX {most}T"]
    if gpu:
        head.append("JAX GPU")
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in data["rows"].items():
        t = r["arden"]
        one, top = t.get("1"), t.get(str(most))
        jt = r.get(f"jax_cpu_{most}t")
        cells = [r["title"]] + [fmt(t.get(str(k))) for k in threads]
        cells.append(driver.fmt_x(one / top) if isinstance(one, int) and isinstance(top, int) else "–")
        cells.append({True: "same", False: "**differ**"}.get(r.get("same_bits"), str(r.get("same_bits"))))
        cells += [fmt(r.get("jax_cpu_1t")) if "jax_cpu_1t" in r else "–", fmt(jt) if jt else "–",
                  driver.fmt_x(top / jt) if isinstance(top, int) and jt else "–"]
        if gpu:
            cells.append(fmt(r["jax_gpu"]) if "jax_gpu" in r else "–")
        lines.append("| " + " | ".join(cells) + " |")
    with open(md_out, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", help="comma-separated thread counts (default: 1, 2, 4, ... and the core count)")
    ap.add_argument("--only", help="comma-separated function names (default: all)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--no-jax", action="store_true", help="time arden only")
    ap.add_argument("--load", action="store_true", help="with one spinning process per core meanwhile (a busy machine)")
    ap.add_argument("--arden", default=driver.ARDEN, help="the arden binary (default target/release/arden)")
    ap.add_argument("--commit", help="the commit the arden binary was built from (default: the checkout's HEAD)")
    ap.add_argument("--tag", help="write scaling-TAG.json and scaling-TAG.md (a comparison run) instead")
    ap.add_argument("--report-only", action="store_true", help="rewrite the .md from the .json")
    a = ap.parse_args()
    json_out, md_out = outputs(a.tag)
    if a.report_only:
        with open(json_out) as f:
            report(json.load(f), md_out)
        return
    t0 = time.time()
    report(measure(a), md_out)
    driver.log(f"done in {time.time() - t0:.0f} s: {md_out}")


if __name__ == "__main__":
    main()
