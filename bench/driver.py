"""Run the benchmark and write bench/results.json, docs/PERFORMANCE.md and
docs/performance.svg. Called by bench/run.sh (which builds arden, makes the
virtualenv and the data first); run it directly to redo a part:

    bench/.venv/bin/python bench/driver.py [--only NAME,...] [--runs N] [--min-seconds S]
                                           [--interp-timeout S] [--report-only]

For every function of workloads.py: arden's C backend at 1 and 2 threads
(`arden bench --json`, pinned with taskset to CPU 0, resp. CPUs 0-1), the
interpreter where a call is expected to be short (with a time limit), JAX at
1 thread (XLA_FLAGS single-threaded, taskset -c 0) and 2 threads (default
flags, taskset -c 0,1), the cold compile time of each arden program (a fresh
ARDEN_CACHE_DIR) and its warm start (front end + loading the cached library,
in a later process), and a check that arden's and JAX's results agree. JAX
runs right after arden on each function, so that both see about the same
load from the rest of the machine.
--report-only rewrites the two documents from an existing results.json.
"""

import argparse
import datetime
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from workloads import FUNCTIONS, JAX_VARIANTS  # noqa: E402

ARDEN = os.path.join(ROOT, "target", "release", "arden")
PY = sys.executable
OUT = os.path.join(HERE, "out")
RESULTS = os.path.join(HERE, "results.json")
DOC = os.path.join(ROOT, "docs", "PERFORMANCE.md")
SVG = os.path.join(ROOT, "docs", "performance.svg")
NOTES = os.path.join(HERE, "notes.md")
# the GradBench section (measured with bench/gradbench.sh, kept by hand)
GRADBENCH = os.path.join(HERE, "gradbench.md")
# gradients whose cost once grew quadratically (bench/linear/run.sh, kept by hand)
LINEAR = os.path.join(HERE, "linear.md")
# thread scaling on a many-core machine (bench/scaling.py, run there; its output kept)
SCALING = os.path.join(HERE, "scaling.md")

JAX_1T_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
ONE_THREAD_ENV = {k: "1" for k in ["OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                                  "NPROC", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"]}

# issue 9's targets
TARGET_RATIO_1T = 1.0
TARGET_SPEEDUP_2T = 1.7
TARGET_COLD_MS = 1500.0
TARGET_WARM_MS = 50.0


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def taskset(cpus):
    return ["taskset", "-c", cpus] if shutil.which("taskset") else []


def arden_args(row, data_dir=None):
    """The row's `--arg`s, its data read from `data_dir` (default bench/data/DATA)."""
    d = data_dir or os.path.join(HERE, "data", row["data"])
    with open(os.path.join(d, "params.json")) as f:
        params = json.load(f)
    out = []
    for a in row["args"]:
        if a.startswith("@"):
            out += ["--arg", "@" + os.path.join(d, a[1:] + ".npy")]
        elif a.startswith("$"):
            out += ["--arg", json.dumps(params[a[1:]])]
        else:
            out += ["--arg", a]
    return out


def arden_env(cache):
    env = dict(os.environ, ARDEN_CACHE_DIR=cache)
    for k in ["ARDEN_CFLAGS", "ARDEN_NUM_THREADS"]:
        env.pop(k, None)
    return env


def run_json(cmd, env, timeout=None):
    """Run a command printing one JSON object; (object, wall seconds) or (error text, wall)."""
    t = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return f"timeout after {timeout:g} s", time.perf_counter() - t
    wall = time.perf_counter() - t
    if p.returncode != 0:
        return f"exit {p.returncode}: {p.stderr.strip()[-500:]}", wall
    return json.loads(p.stdout.strip().splitlines()[-1]), wall


def arden_bench(row, cache, backend, threads, runs, min_seconds, timeout=None):
    cmd = taskset("0" if threads == 1 else "0,1") + [
        ARDEN, "bench", row["program"], "--entry", row["entry"], *arden_args(row),
        "--backend", backend, "--runs", str(runs), "--min-seconds", str(min_seconds), "--json"]
    if backend == "c":
        cmd += ["--threads", str(threads)]
    r, wall = run_json(cmd, arden_env(cache), timeout)
    if isinstance(r, dict):
        r["wall_s"] = wall
    return r


def flatten_json(v, out):
    if isinstance(v, list):
        for x in v:
            flatten_json(x, out)
    else:
        out.append(float(v))


def arden_result(row, cache):
    """arden's result (C backend, 1 thread), its leaves flattened."""
    path = os.path.join(OUT, "arden", row["name"] + ".json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    cmd = [ARDEN, "run", row["program"], "--entry", row["entry"], *arden_args(row),
           "--backend", "c", "--threads", "1", "--output", path]
    p = subprocess.run(cmd, env=arden_env(cache), capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f"arden run failed for {row['name']}: {p.stderr}")
    with open(path) as f:
        vals = []
        flatten_json(json.load(f), vals)
    return np.array(vals)


def run_jax(names, threads, runs, min_seconds, save_dir=None):
    """Time JAX functions in a fresh process with the thread settings."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if threads == 1:
        env.update(ONE_THREAD_ENV, XLA_FLAGS=JAX_1T_FLAGS)
    out = os.path.join(OUT, f"jax_{threads}t_{names[0]}.json")
    cmd = taskset("0" if threads == 1 else "0,1") + [
        PY, os.path.join(HERE, "jax_workloads.py"), "--only", ",".join(names),
        "--runs", str(runs), "--min-seconds", str(min_seconds), "--out", out]
    if save_dir:
        cmd += ["--save-dir", save_dir]
    p = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"jax_workloads.py failed (exit {p.returncode})")
    with open(out) as f:
        return {r["name"]: r for r in json.load(f)}


def machine():
    def cmd(args):
        try:
            return subprocess.run(args, capture_output=True, text=True).stdout.strip()
        except OSError:
            return "?"

    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cc = os.environ.get("CC", "cc")
    return dict(
        date=datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
        uname=cmd(["uname", "-a"]) or " ".join(platform.uname()),
        cpu=cpu,
        cores=os.cpu_count(),
        cc=cmd([cc, "--version"]).splitlines()[0] if cmd([cc, "--version"]) else "?",
        commit=cmd(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]),
        loadavg_start=loadavg(),
    )


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[:3]
    except OSError:
        return None


def cpu_snapshot():
    """(busy CPU seconds of the whole machine, CPU seconds of our finished children, wall time)."""
    import resource
    hz = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(v[:8]) - v[3] - v[4]) / hz  # all but idle and iowait
    except OSError:
        busy = None
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, ru.ru_utime + ru.ru_stime, time.time()


def others_share(start, end, cores):
    """The share of the machine's CPU time used by other processes between two snapshots."""
    if start[0] is None or end[0] is None:
        return None
    wall = end[2] - start[2]
    others = (end[0] - start[0]) - (end[1] - start[1])
    return max(0.0, others / (wall * (cores or 1)))


def rel_diff(a, b):
    if a.shape != b.shape:
        return math.inf
    scale = max(float(np.max(np.abs(b))), 1e-300) if b.size else 1.0
    return float(np.max(np.abs(a - b))) / scale if a.size else 0.0


def measure(a):
    rows = [r for r in FUNCTIONS if not a.only or r["name"] in a.only.split(",")]
    os.makedirs(OUT, exist_ok=True)
    meta = machine()
    snap0 = cpu_snapshot()
    meta.update(runs=a.runs, min_seconds=a.min_seconds, interp_timeout_s=a.interp_timeout)
    cache = tempfile.mkdtemp(prefix="arden-bench-cache-")
    results = {}
    programs = {}
    jax_version = "?"
    try:
        for row in rows:
            log(f"{row['name']}: arden")
            res = results[row["name"]] = dict(name=row["name"], title=row["title"], program=row["program"],
                                              entry=row["entry"], target=row["target"], loadavg=loadavg())
            first = row["program"] not in programs
            res["c_1t"] = arden_bench(row, cache, "c", 1, a.runs, a.min_seconds)
            if not isinstance(res["c_1t"], dict):
                raise SystemExit(f"arden bench failed for {row['name']}: {res['c_1t']}")
            if first:
                # the first call of a program in a fresh cache directory compiles it
                assert not res["c_1t"]["cached"], res["c_1t"]
                programs[row["program"]] = dict(cold_compile_ms=res["c_1t"]["compile_ms"],
                                                cold_frontend_ms=res["c_1t"]["frontend_ms"])
            res["c_2t"] = arden_bench(row, cache, "c", 2, a.runs, a.min_seconds)
            w = res["c_2t"]
            assert w["cached"], w
            warm = programs[row["program"]].setdefault("warm", [])
            warm.append(w["frontend_ms"] + w["compile_ms"])
            if row["interp"]:
                log(f"{row['name']}: interpreter (limit {a.interp_timeout:g} s)")
                res["interp"] = arden_bench(row, cache, "interp", 1, 1, 0, timeout=a.interp_timeout)
            else:
                res["interp"] = "skipped (a call would take well over 20 s)"
            av = arden_result(row, cache)
            # JAX right after arden on the same function, so that both see
            # about the same load from the rest of the machine
            log(f"{row['name']}: JAX")
            save = os.path.join(OUT, "jax")
            variants = JAX_VARIANTS.get(row["name"], [])
            jax1 = run_jax([row["name"]] + variants, 1, a.runs, a.min_seconds, save_dir=save)
            jax2 = run_jax([row["name"]], 2, a.runs, a.min_seconds)
            res["jax_1t"] = jax1[row["name"]]
            res["jax_2t"] = jax2[row["name"]]
            jax_version = res["jax_1t"]["jax_version"]
            for v in variants:
                res.setdefault("jax_1t_variants", {})[v] = jax1[v]
            jv = np.load(os.path.join(save, row["name"] + ".npy"))
            d = rel_diff(av, jv)
            res["check"] = dict(max_rel_diff=d, ok=d <= 1e-8, n=int(av.size))
            log(f"{row['name']}: arden vs JAX max relative difference {d:.2e} ({'ok' if d <= 1e-8 else 'MISMATCH'})")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    for p in programs.values():
        p["warm_start_ms"] = min(p.pop("warm"))
    meta["loadavg_end"] = loadavg()
    meta["others_cpu_share"] = others_share(snap0, cpu_snapshot(), meta["cores"])
    meta["jax"] = jax_version
    old = {}
    if a.only and os.path.exists(RESULTS):
        with open(RESULTS) as f:
            old = json.load(f)
    if old:
        # a partial run: keep the other functions' earlier results
        old["functions"].update(results)
        old["programs"].update(programs)
        old["meta_partial"] = meta
        data = old
    else:
        data = dict(meta=meta, functions=results, programs=programs)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
    return data


# ---- the report

def t_of(r):
    """The time per call (minimum over the timed calls) in seconds, or None."""
    return r["min_ns"] / 1e9 if isinstance(r, dict) else None


def fmt_t(s):
    if s is None:
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.2f} ms"
    return f"{s:.2f} s"


def fmt_bytes(b):
    if b is None:
        return "–"
    for unit, size in [("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)]:
        if b >= size:
            return f"{b / size:.1f} {unit}"
    return f"{b} B"


def fmt_x(x):
    return f"{x:.2f}×" if x is not None else "–"


def rows_in_order(data):
    order = [r["name"] for r in FUNCTIONS]
    return sorted(data["functions"].values(), key=lambda r: order.index(r["name"]) if r["name"] in order else 99)


def report(data):
    meta = data["meta"]
    fns = rows_in_order(data)
    progs = data["programs"]
    lines = []
    w = lines.append
    w("# Performance: arden's C backend, its interpreter and JAX")
    w("")
    w("Generated by `bench/run.sh` (see the README's *Benchmark* section); do not edit by hand: "
      "rerun the script. The workloads and targets are those of issue 9 (\"How fast\").")
    w("")
    w(f"- date: {meta['date']}, arden commit `{meta['commit']}`")
    w(f"- machine: `{meta['uname']}`")
    w(f"- CPU: {meta['cpu']}, {meta['cores']} cores")
    w(f"- C compiler: {meta['cc']}; JAX {meta['jax']} (CPU, float64)")
    la0, la1 = meta.get("loadavg_start"), meta.get("loadavg_end")
    share = meta.get("others_cpu_share")
    if share is None:
        busy_text = ""
    elif share > 0.1:
        busy_text = (f" **The machine was busy**: other processes used {share:.0%} of its CPU time during the run, so "
                     "the times are noisy, the 2-thread ones in particular (a second thread often had no core of "
                     "its own).")
    else:
        busy_text = f" Other processes used {share:.0%} of the machine's CPU time during the run."
    w(f"- load average at the start / end of the run: {' '.join(la0 or ['?'])} / {' '.join(la1 or ['?'])}."
      + busy_text)
    w(f"- every time is the **minimum** over at least {meta['runs']} timed calls lasting at least "
      f"{meta['min_seconds']:g} s together, after one warm-up call (the minimum is the least disturbed by the "
      "other load); `bench/results.json` also has the median and mean.")
    w("")
    w("## The table")
    w("")
    w("| function | arden C 1T | arden C 2T | 2T speed-up | interp | JAX 1T | JAX 2T | arden / JAX (1T) "
      "| cold compile | warm start |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in fns:
        c1, c2, j1, j2 = t_of(r["c_1t"]), t_of(r["c_2t"]), t_of(r["jax_1t"]), t_of(r["jax_2t"])
        it = r["interp"]
        if isinstance(it, dict):
            interp = fmt_t(t_of(it))
        elif it.startswith("skipped"):
            interp = "skipped"
        elif it.startswith("timeout"):
            interp = "over " + it.split()[-2] + " s"
        else:
            interp = "error"
        p = progs.get(r["program"], {})
        w(f"| {r['title']} | {fmt_t(c1)} | {fmt_t(c2)} | {fmt_x(c1 / c2)} | {interp} | {fmt_t(j1)} | "
          f"{fmt_t(j2)} | **{fmt_x(c1 / j1)}** | {p.get('cold_compile_ms', 0) / 1e3:.2f} s | "
          f"{p.get('warm_start_ms', 0):.1f} ms |")
    w("")
    w("1T / 2T: one thread (`arden bench --threads 1`; JAX with "
      f"`XLA_FLAGS=\"{JAX_1T_FLAGS}\"`; both pinned to CPU 0 with `taskset`) and two threads "
      "(`--threads 2`; JAX's default flags; pinned to CPUs 0-1). *arden / JAX (1T)*: arden's time divided by "
      "JAX's, below 1 when arden is faster. *interp*: the reference interpreter (one call, after a warm-up "
      "call), skipped where a call would take well over 20 s. *cold compile*: C generation, C compiler and "
      "loading of the program's first timed entry (compiled alone, as `arden run` compiles it) into an empty cache (`ARDEN_CACHE_DIR`); "
      "*warm start*: a later process's front end (parse, check, lower, differentiate, optimise) plus finding and "
      "loading the cached library, i.e. everything before the first call but reading the arguments. "
      "arden's times are those of `CompiledEntry::call_borrowed` (arguments read in place, the result "
      "left in the buffer the C code made, as the Python package calls it); JAX's those of a `jax.jit` "
      "function with `block_until_ready`.")
    w("")
    # ---- targets
    w("## Issue 9's targets")
    w("")
    w("| target | function | measured | verdict |")
    w("|---|---|---:|---|")
    missed = 0
    total = 0
    for r in fns:
        c1, c2, j1 = t_of(r["c_1t"]), t_of(r["c_2t"]), t_of(r["jax_1t"])
        ratio = c1 / j1
        total += 1
        if ratio <= TARGET_RATIO_1T:
            verdict = f"met ({1 / ratio:.1f}× faster than JAX)" if ratio < 0.9 else f"met (arden takes {ratio:.2f}× JAX's time)"
        else:
            missed += 1
            verdict = (f"**missed** by {(ratio - 1) * 100:.0f}% (arden takes {ratio:.2f}× JAX's time)" if ratio < 2
                       else f"**missed**: arden takes {ratio:.1f}× JAX's time")
        w(f"| 1T time ≤ 1.0× JAX | {r['title']} | {fmt_x(ratio)} | {verdict} |")
    for r in fns:
        if "2t" not in r["target"]:
            continue
        s = t_of(r["c_1t"]) / t_of(r["c_2t"])
        total += 1
        if s >= TARGET_SPEEDUP_2T:
            verdict = "met"
        else:
            missed += 1
            verdict = (f"**missed**: {s:.2f}× instead of 1.7× (2 threads are "
                       + ("slower than 1)" if s < 1 else f"{(s - 1) * 100:.0f}% faster, not 70%)"))
        js = t_of(r["jax_1t"]) / t_of(r["jax_2t"])
        w(f"| 2T ≥ 1.7× faster than 1T | {r['title']} | {fmt_x(s)} (JAX: {fmt_x(js)}) | {verdict} |")
    for name, p in progs.items():
        total += 2
        c = p["cold_compile_ms"]
        v = "met" if c <= TARGET_COLD_MS else f"**missed** by {c - TARGET_COLD_MS:.0f} ms ({c / TARGET_COLD_MS:.2f}× the limit)"
        missed += c > TARGET_COLD_MS
        w(f"| cold compile ≤ 1.5 s | `{name}` | {c / 1e3:.2f} s | {v} |")
        m = p["warm_start_ms"]
        v = "met" if m <= TARGET_WARM_MS else f"**missed** by {m - TARGET_WARM_MS:.0f} ms ({m / TARGET_WARM_MS:.2f}× the limit)"
        missed += m > TARGET_WARM_MS
        w(f"| warm start ≤ 50 ms | `{name}` | {m:.1f} ms | {v} |")
    w("")
    w(f"{total - missed} of {total} targets met, {missed} missed. JAX's own 2-thread speed-up, in "
      "parentheses, shows how much of a second core the machine had to give during the run.")
    w("")
    # ---- the chart
    w("## Chart")
    w("")
    w("![arden vs JAX per function](performance.svg)")
    w("")
    w("Time per call, log scale: arden's C backend and JAX, 1 and 2 threads.")
    w("")
    # ---- agreement
    w("## Same results")
    w("")
    w("Every arden result (C backend, 1 thread) is compared with JAX's on the same data: "
      "`max |arden - jax| / max |jax|` over all elements of the result (all leaves of a tuple).")
    w("")
    w("| function | elements | max relative difference | agree (≤ 1e-8) |")
    w("|---|---:|---:|---|")
    for r in fns:
        c = r["check"]
        w(f"| {r['title']} | {c['n']} | {c['max_rel_diff']:.1e} | {'yes' if c['ok'] else '**no**'} |")
    w("")
    # ---- details
    w("## What runs")
    w("")
    w("| function | arden program and entry | peak bytes (arden C, one call) | JAX compile (first call) |")
    w("|---|---|---:|---:|")
    for r in fns:
        pk = r["c_1t"].get("peak_bytes")
        w(f"| {r['title']} | `{r['program']}` `{r['entry']}` | {fmt_bytes(pk)} | "
          f"{r['jax_1t']['compile_s']:.2f} s |")
    w("")
    w("The JAX versions are in `bench/jax_workloads.py` (float64, derivatives by `jax.grad` / `jax.jvp`). "
      "The input data is made by `bench/gen.py` with a fixed seed.")
    variants = [(r, k, v) for r in fns for k, v in r.get("jax_1t_variants", {}).items()]
    if variants:
        w("")
        w("JAX's k-means computes the squared distances as |x|² − 2 x·c + |c|² with a matrix product, as JAX "
          "code usually does; the literal Σ_a (x_a − c_a)² (what the arden program says) is much slower under "
          "XLA:")
        w("")
        for r, k, v in variants:
            w(f"- {r['title']}: literal form {fmt_t(v['min_ns'] / 1e9)} at 1 thread "
              f"(arden / that: {fmt_x(t_of(r['c_1t']) / (v['min_ns'] / 1e9))}).")
    for extra in (SCALING, NOTES, GRADBENCH, LINEAR):
        if os.path.exists(extra):
            w("")
            with open(extra) as f:
                w(f.read().rstrip())
    w("")
    with open(DOC, "w") as f:
        f.write("\n".join(lines))
    with open(SVG, "w") as f:
        f.write(svg(fns))


def svg(fns):
    """Horizontal bars, log scale: per function, arden C and JAX at 1 and 2 threads."""
    series = [("c_1t", "arden C, 1 thread", "#1f6feb"), ("jax_1t", "JAX, 1 thread", "#f08c00"),
              ("c_2t", "arden C, 2 threads", "#7aa7f5"), ("jax_2t", "JAX, 2 threads", "#f7c27a")]
    times = [t_of(r[k]) for r in fns for k, _, _ in series if t_of(r[k])]
    lo = 10 ** math.floor(math.log10(min(times)))
    hi = 10 ** math.ceil(math.log10(max(times)))
    label_w, plot_w, bar_h, gap = 330, 560, 9, 14
    group_h = len(series) * bar_h + gap
    top = 60
    height = top + len(fns) * group_h + 50
    width = label_w + plot_w + 130

    def x_of(t):
        return label_w + plot_w * (math.log10(t) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    def esc(s):
        return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
         f'<rect width="{width}" height="{height}" fill="white"/>',
         f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14" font-weight="bold">'
         'Time per call (log scale, shorter is faster): arden C backend vs JAX</text>']
    o.append(f'<text x="{label_w + plot_w + 110}" y="{top - 10}" text-anchor="end" font-size="10">'
             'arden / JAX, 1T</text>')
    for i, (_, name, color) in enumerate(series):
        x = label_w + i * 150
        o.append(f'<rect x="{x}" y="30" width="12" height="10" fill="{color}"/>')
        o.append(f'<text x="{x + 16}" y="39">{esc(name)}</text>')
    k = 0
    decade = lo
    while decade <= hi * 1.0001:
        x = x_of(decade)
        o.append(f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{top + len(fns) * group_h}" '
                 'stroke="#ddd"/>')
        o.append(f'<text x="{x:.1f}" y="{top + len(fns) * group_h + 14}" text-anchor="middle">'
                 f'{esc(fmt_t(decade).replace(".00", "").replace(".0 ", " "))}</text>')
        decade *= 10
        k += 1
    for gi, r in enumerate(fns):
        y0 = top + gi * group_h
        o.append(f'<text x="{label_w - 8}" y="{y0 + len(series) * bar_h / 2 + 4}" text-anchor="end">'
                 f'{esc(r["title"])}</text>')
        for si, (key, _, color) in enumerate(series):
            t = t_of(r[key])
            if not t:
                continue
            y = y0 + si * bar_h
            o.append(f'<rect x="{label_w}" y="{y}" width="{max(x_of(t) - label_w, 1):.1f}" '
                     f'height="{bar_h - 1}" fill="{color}"/>')
            o.append(f'<text x="{x_of(t) + 4:.1f}" y="{y + bar_h - 1}" font-size="8">{esc(fmt_t(t))}</text>')
        ratio = t_of(r["c_1t"]) / t_of(r["jax_1t"])
        o.append(f'<text x="{label_w + plot_w + 110}" y="{y0 + len(series) * bar_h / 2 + 4}" text-anchor="end" '
                 f'font-weight="bold" fill="{"#1a7f37" if ratio <= 1 else "#cf222e"}">{ratio:.2f}×</text>')
    o.append(f'<text x="{label_w + plot_w / 2}" y="{height - 12}" text-anchor="middle">'
             'time per call (minimum over the timed calls)</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated function names (default: all; others keep their results)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--interp-timeout", type=float, default=60.0)
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    if a.report_only:
        with open(RESULTS) as f:
            data = json.load(f)
    else:
        if not os.path.exists(ARDEN):
            raise SystemExit(f"{ARDEN} is missing: run `cargo build --release` (bench/run.sh does)")
        data = measure(a)
    report(data)
    log(f"wrote {os.path.relpath(RESULTS, ROOT)}, {os.path.relpath(DOC, ROOT)}, {os.path.relpath(SVG, ROOT)}")


if __name__ == "__main__":
    main()
