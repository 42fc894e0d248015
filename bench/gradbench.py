#!/usr/bin/env python3
"""Time every GradBench eval's largest default workload through `arden gradbench`.

Inputs are generated as the evals generate them (PROTOCOL.md beside the
GradBench logs): the uniform inputs of llsq, lse, ode, det and kmeans are
numpy's `np.random.seed(31337); np.random.rand(...)` numbers exactly (numpy's
legacy generator is MT19937, reproduced here with Python's own); gmm's
normal inputs come from Python's generator (same distributions, not the same
numbers: numpy's default_rng is not reproducible without numpy); ba and ht
read GradBench's data files (../shared/gradbench/data); lstm's text is the
first 4,144 characters of the Sonnets that are available there, repeated to
reach c characters (GradBench draws lstm's parameters without a seed
anyway). Only the Python standard library is needed.

Usage: bench/gradbench.sh [--evals llsq,lse,...] [--runs N] [--min-seconds S]
                          [--multithreaded] [--fast-math] [--arden PATH] [--data DIR] [--small]
       bench/gradbench.sh --logs [--runs N]   (the workloads of ../shared/gradbench/logs)
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The targets of issue 11: the fastest tool measured on the same workloads
# (the golden C++ tool; for ode, JAX), single thread, in milliseconds.
TARGETS = {
    ("llsq", "gradient"): 3.2,
    ("lse", "gradient"): 5.1,
    ("gmm", "jacobian"): 164.0,
    ("gmm", "objective"): 42.0,
    ("ba", "jacobian"): 364.0,
    ("ht", "jacobian"): 24.5,
    ("lstm", "jacobian"): 99.0,
    ("kmeans", "dir"): 44.0,
    ("ode", "gradient"): 134.0,
    ("det", "gradient"): 2380.0,
}


def numpy_rand(seed):
    """A `random.Random` whose random() gives np.random.seed(seed); np.random.rand()."""
    mt = [0] * 624
    mt[0] = seed & 0xFFFFFFFF
    for i in range(1, 624):
        mt[i] = (1812433253 * (mt[i - 1] ^ (mt[i - 1] >> 30)) + i) & 0xFFFFFFFF
    r = random.Random()
    r.setstate((3, tuple(mt + [624]), None))
    return r


def rand(r, n):
    return [r.random() for _ in range(n)]


def llsq(small):
    n, m = (1024, 32) if small else (16392, 128)
    r = numpy_rand(31337)
    return f"n={n},m={m}", ["primal", "gradient"], {"x": rand(r, m), "n": n}


def lse(small):
    n = 10000 if small else 1280000
    r = numpy_rand(31337)
    return f"n={n}", ["primal", "gradient"], {"x": rand(r, n)}


def ode(small):
    n, s = (1000, 10) if small else (100000, 100)
    r = numpy_rand(31337)
    return f"n={n},s={s}", ["primal", "gradient"], {"x": rand(r, n), "s": s}


def det(small):
    ell = 8 if small else 11
    r = numpy_rand(31337)
    return f"{ell}", ["primal", "gradient"], {"A": rand(r, ell * ell), "ell": ell}


def kmeans(small):
    k, n, d = (100, 1000, 8) if small else (1000, 10000, 16)
    r = numpy_rand(31337)
    points = [rand(r, d) for _ in range(n)]
    return f"k={k},n={n},d={d}", ["cost", "dir"], {"points": points, "centroids": points[-k:]}


def gmm(small):
    d, k, n = (10, 25, 1000) if small else (64, 100, 1000)
    r = random.Random(31337)
    normal = lambda: r.gauss(0.0, 1.0)
    x = [[normal() for _ in range(d)] for _ in range(n)]
    alpha = [normal() for _ in range(k)]
    mu = [[r.random() for _ in range(d)] for _ in range(k)]
    q = [[normal() for _ in range(d)] for _ in range(k)]
    l = [[normal() for _ in range(d * (d - 1) // 2)] for _ in range(k)]
    inp = {"d": d, "k": k, "n": n, "x": x, "m": 0, "gamma": 1.0, "alpha": alpha, "mu": mu, "q": q, "l": l}
    return f"{d}_{k}_{n}", ["objective", "jacobian"], inp


def ba(small, data):
    i = 1 if small else 14
    name = next(f for f in os.listdir(os.path.join(data, "ba")) if f.startswith(f"ba{i}_"))
    lines = open(os.path.join(data, "ba", name)).read().splitlines()
    n, m, p = [int(v) for v in lines[0].split()]
    inp = {
        "n": n, "m": m, "p": p,
        "cam": [float(v) for v in lines[1].split()],
        "x": [float(v) for v in lines[2].split()],
        "w": float(lines[3]),
        "feat": [float(v) for v in lines[4].split()],
    }
    return name[:-4], ["objective", "jacobian"], inp


def ht_model(path):
    triangles = [[int(v) for v in line.split(":")] for line in open(os.path.join(path, "triangles.txt")) if line.strip()]
    bones = [line.rstrip("\n").split(":") for line in open(os.path.join(path, "bones.txt")) if line.strip()]
    names = [b[0] for b in bones]
    parents = [int(b[1]) for b in bones]
    mat = lambda vals: [[float(vals[4 * r + c]) for c in range(4)] for r in range(4)]
    relatives = [mat(b[2:18]) for b in bones]
    inverses = [mat(b[18:34]) for b in bones]
    positions, weights = [], []
    for line in open(os.path.join(path, "vertices.txt")):
        if not line.strip():
            continue
        atoms = line.split(":")
        positions.append([float(v) for v in atoms[:3]] + [1.0])
        w = [0.0] * len(bones)
        for i in range(int(atoms[8])):
            w[int(atoms[9 + 2 * i])] = float(atoms[10 + 2 * i])
        weights.append(w)
    return {
        "bone_count": len(bones), "bone_names": names, "parents": parents,
        "base_relatives": relatives, "inverse_base_absolutes": inverses,
        "base_positions": positions, "weights": weights, "triangles": triangles, "is_mirrored": False,
    }


def ht(small, data, variant="complicated"):
    i = 1 if small else 11
    folder = os.path.join(data, "ht", f"{variant}_big")
    name = next(f for f in os.listdir(folder) if f.startswith(f"hand{i}_"))
    lines = open(os.path.join(folder, name)).read().splitlines()
    npts, ntheta = [int(v) for v in lines[0].split()]
    rows = [line.split() for line in lines[1:1 + npts]]
    corr = [int(r[0]) for r in rows]
    points = [[float(v) for v in r[1:]] for r in rows]
    at = 1 + npts
    us = []
    if variant == "complicated":
        us = [[float(v) for v in line.split()] for line in lines[at:at + npts]]
        at += npts
    theta = [float(lines[at + j]) for j in range(ntheta)]
    inp = {"theta": theta, "data": {"model": ht_model(os.path.join(folder, "model")), "correspondences": corr, "points": points}, "us": us}
    return f"{name[:-4]} ({variant})", ["objective", "jacobian"], inp


def lstm(small, data):
    l, c = (2, 1024) if small else (6, 8192)
    text = open(os.path.join(data, "lstm", "lstm_full.txt"), encoding="utf8").read()
    while len(text) < c:
        text += text
    text = text[:c]
    bits = math.ceil(math.log2(max(ord(ch) for ch in text)))
    seq = [[float(b) for b in bin(ord(ch))[2:].zfill(bits)] for ch in text]
    r = random.Random(31337)
    inp = {
        "main_params": [rand(r, 4 * bits) for _ in range(2 * l)],
        "extra_params": [rand(r, bits) for _ in range(3)],
        "state": [rand(r, bits) for _ in range(2 * l)],
        "sequence": seq,
    }
    return f"l={l},c={c}", ["objective", "jacobian"], inp


def saddle(small):
    return "w=0", ["rr", "ff", "fr", "rf"], {"start": [1.0, 1.0]}


def particle(small):
    return "w=0", ["rr", "ff", "fr", "rf"], {"w": 0.0}


def hello(small):
    return "x=3", ["square", "double"], 3.0


def workloads(args):
    data = args.data
    table = {
        "hello": lambda: [hello(args.small)],
        "llsq": lambda: [llsq(args.small)],
        "lse": lambda: [lse(args.small)],
        "ode": lambda: [ode(args.small)],
        "det": lambda: [det(args.small)],
        "kmeans": lambda: [kmeans(args.small)],
        "gmm": lambda: [gmm(args.small)],
        "ba": lambda: [ba(args.small, data)],
        "ht": lambda: [ht(args.small, data, "complicated"), ht(args.small, data, "simple")],
        "lstm": lambda: [lstm(args.small, data)],
        "saddle": lambda: [saddle(args.small)],
        "particle": lambda: [particle(args.small)],
    }
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--evals", default="hello,llsq,lse,ode,det,kmeans,gmm,ba,ht,lstm,saddle,particle")
    ap.add_argument("--runs", type=int, default=3, help="min_runs of each evaluate (default 3)")
    ap.add_argument("--min-seconds", type=float, default=0.0, help="min_seconds of each evaluate (default 0)")
    ap.add_argument("--multithreaded", action="store_true")
    ap.add_argument("--fast-math", action="store_true", help="pass --fast-math to arden gradbench (reassociated floating point)")
    ap.add_argument("--arden", default=os.environ.get("ARDEN", os.path.join(ROOT, "target", "release", "arden")))
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "gradbench", "data"))
    ap.add_argument("--small", action="store_true", help="small workloads (a quick check)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--logs", action="store_true", help="time the workloads of the golden tool's logs instead")
    args = ap.parse_args()
    if args.logs:
        return time_logs(args)
    table = workloads(args)
    results = []
    print(f"{'eval':8} {'workload':34} {'function':10} {'runs':>4} {'mean ms':>10} {'min ms':>10} {'target':>8} {'ratio':>6}")
    for name in args.evals.split(","):
        cmd = [args.arden, "gradbench"] + (["--multithreaded"] if args.multithreaded else []) + (["--fast-math"] if args.fast_math else [])
        tool = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ids = iter(range(10**9))

        def ask(msg):
            msg = {"id": next(ids), **msg}
            tool.stdin.write(json.dumps(msg) + "\n")
            tool.stdin.flush()
            line = tool.stdout.readline()
            if not line:
                sys.exit(f"{name}: the tool stopped")
            r = json.loads(line)
            if r.get("success") is False:
                sys.exit(f"{name}: {r.get('error')}")
            return r

        ask({"kind": "start", "eval": name})
        d = ask({"kind": "define", "module": name})
        compile_ms = sum(t["nanoseconds"] for t in d.get("timings", [])) / 1e6
        print(f"{name:8} {'(define: compile)':34} {'':10} {'':>4} {compile_ms:10.1f}")
        for desc, functions, inp in table[name]():
            if isinstance(inp, dict):
                inp = {**inp, "min_runs": args.runs, "min_seconds": args.min_seconds}
            for f in functions:
                r = ask({"kind": "evaluate", "module": name, "function": f, "input": inp, "description": desc})
                ts = [t["nanoseconds"] / 1e6 for t in r["timings"] if t["name"] == "evaluate"]
                mean = sum(ts) / len(ts)
                target = None if args.small else TARGETS.get((name, f))
                if name == "ht" and "simple" in desc:
                    target = None
                ratio = f"{mean / target:6.2f}" if target else ""
                tgt = f"{target:8.1f}" if target else ""
                print(f"{name:8} {desc:34} {f:10} {len(ts):4} {mean:10.3f} {min(ts):10.3f} {tgt:>8} {ratio:>6}", flush=True)
                results.append({"eval": name, "workload": desc, "function": f, "runs": len(ts), "mean_ms": mean, "min_ms": min(ts), "target_ms": target})
        tool.stdin.close()
        tool.wait()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def time_logs(args):
    """Replay every evaluate message of ../shared/gradbench/logs/*.jsonl with
    min_runs = --runs, and print the mean time of each."""
    logs = os.path.join(os.path.dirname(args.data.rstrip("/")), "logs")
    cmd = [args.arden, "gradbench"] + (["--multithreaded"] if args.multithreaded else []) + (["--fast-math"] if args.fast_math else [])
    print(f"{'log':10} {'function':10} {'workload':24} {'runs':>4} {'mean ms':>10} {'min ms':>10}")
    for name in sorted(os.listdir(logs)):
        if not name.endswith(".jsonl"):
            continue
        tool = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        total = 0.0
        for line in open(os.path.join(logs, name)):
            msg = json.loads(line).get("message")
            if msg is None:
                continue
            if msg["kind"] == "evaluate" and isinstance(msg["input"], dict):
                msg["input"] = {**msg["input"], "min_runs": args.runs, "min_seconds": args.min_seconds}
            tool.stdin.write(json.dumps(msg) + "\n")
            tool.stdin.flush()
            r = json.loads(tool.stdout.readline())
            if msg["kind"] == "define":
                ms = sum(t["nanoseconds"] for t in r.get("timings", [])) / 1e6
                print(f"{name[:-6]:10} {'(define)':10} {'compile':24} {'':>4} {ms:10.1f}")
            if msg["kind"] == "evaluate":
                if not r.get("success"):
                    sys.exit(f"{name}: {r.get('error')}")
                ts = [t["nanoseconds"] / 1e6 for t in r["timings"] if t["name"] == "evaluate"]
                total += sum(ts) / len(ts)
                print(f"{name[:-6]:10} {msg['function']:10} {str(msg.get('description', '')):24} {len(ts):4} {sum(ts) / len(ts):10.3f} {min(ts):10.3f}", flush=True)
        print(f"{name[:-6]:10} {'(total)':10} {'sum of the means':24} {'':>4} {total:10.3f}")
        tool.stdin.close()
        tool.wait()


if __name__ == "__main__":
    main()
