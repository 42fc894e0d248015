"""The CNN case study of seed paper 000 (examples/cnn/lenet.ard): check it
against JAX and time a training epoch side by side with JAX.

    bench/.venv/bin/python bench/cnn.py --data DIR [--check] [--threads 1,2] [--runs 3] [--epochs 40] [--jax-gpu]

DIR holds what shared/cnn/make_data.py writes (`python3 make_data.py --out
DIR`; it needs numpy, scipy and scikit-learn). The Python here needs numpy
and jax (bench/run.sh makes bench/.venv with both); arden runs through its
command line (target/release/arden, built by `cargo build --release`).

--check: the mean gradient of the first batch of 100 (`batch_grad`) and the
weights after one epoch (`train_epoch`, lr 2.0, batches of 100) against the
same computed by JAX (`jax.grad` of the same network written with
`lax.conv_general_dilated`); prints the largest relative difference per
parameter and fails above 1e-10.

Timing: `arden bench --entry train_epoch` (C backend, minimum over --runs
calls after one warm-up, per thread count) and JAX's jitted epoch (a
`lax.scan` over the batches, on the CPU; XLA pinned to one thread for 1,
its default for more; --jax-gpu adds its time on a GPU). One epoch's
time times --epochs is reported beside the
reference figures of shared/cnn/README.md; an epoch's time does not depend
on the weights, so N epochs take N times one.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARDEN = os.environ.get("ARDEN", os.path.join(ROOT, "target", "release", "arden"))
PROGRAM = os.path.join(ROOT, "examples", "cnn", "lenet.ard")
PARAMS = ["k1", "b1", "k2", "b2", "fc", "b"]


def arden_args(data, xs, ys, extra=()):
    out = []
    for p in PARAMS:
        out += ["--arg", "@" + os.path.join(data, p + ".npy")]
    out += ["--arg", "@" + xs, "--arg", "@" + ys]
    for e in extra:
        out += ["--arg", str(e)]
    return out


def arden_run(data, entry, xs, ys, extra=()):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        subprocess.run([ARDEN, "run", PROGRAM, "--entry", entry, "--backend", "c", *arden_args(data, xs, ys, extra),
                        "--output", out], check=True)
        with open(out) as f:
            return [np.asarray(a, dtype=np.float64) for a in json.load(f)]


def jax_network():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    from jax import lax

    def forward(p, x):
        k1, b1, k2, b2, fc, b = p
        c1 = jax.nn.sigmoid(lax.conv_general_dilated(x[:, None], k1[:, None], (1, 1), "VALID") + b1[None, :, None, None])
        s1 = c1.reshape(c1.shape[0], 6, 12, 2, 12, 2).mean(axis=(3, 5))
        c2 = jax.nn.sigmoid(lax.conv_general_dilated(s1, k2, (1, 1), "VALID") + b2[None, :, None, None])
        s2 = c2.reshape(c2.shape[0], 12, 4, 2, 4, 2).mean(axis=(3, 5))
        return jax.nn.sigmoid(jnp.einsum("scij,tcij->st", s2, fc) + b[None])

    def loss(p, x, y):
        r = forward(p, x)
        return jnp.mean(0.5 * jnp.sum((r - jax.nn.one_hot(y, 10)) ** 2, axis=1))

    def epoch(p, xs, ys, lr):
        def step(p, batch):
            g = jax.grad(loss)(p, *batch)
            return tuple(w - lr * gw for w, gw in zip(p, g)), None
        return lax.scan(step, p, (xs, ys))[0]

    return jax, jax.jit(jax.grad(loss)), jax.jit(epoch)


def load(data):
    w = tuple(np.load(os.path.join(data, p + ".npy")) for p in PARAMS)
    return w, np.load(os.path.join(data, "train_x.npy")), np.load(os.path.join(data, "train_y.npy"))


def check(data, batch, lr):
    _, grad, epoch = jax_network()
    w, x, y = load(data)
    worst = 0.0
    with tempfile.TemporaryDirectory() as d:
        xs, ys = os.path.join(d, "x.npy"), os.path.join(d, "y.npy")
        np.save(xs, x[:batch])
        np.save(ys, y[:batch])
        got = arden_run(data, "batch_grad", xs, ys)
        want = grad(w, x[:batch], y[:batch])
        for name, a, b in zip(PARAMS, got, want):
            rel = float(np.max(np.abs(a - np.asarray(b))) / np.max(np.abs(np.asarray(b))))
            worst = max(worst, rel)
            print(f"check: first batch's gradient, {name}: max relative difference {rel:.2e}")
        steps = len(x) // batch
        got = arden_run(data, "train_epoch", os.path.join(data, "train_x.npy"), os.path.join(data, "train_y.npy"), [lr, batch])
        want = epoch(w, x[:steps * batch].reshape(steps, batch, 28, 28), y[:steps * batch].reshape(steps, batch), lr)
        for name, a, b in zip(PARAMS, got, want):
            rel = float(np.max(np.abs(a - np.asarray(b))) / np.max(np.abs(np.asarray(b))))
            worst = max(worst, rel)
            print(f"check: weights after one epoch, {name}: max relative difference {rel:.2e}")
    if worst > 1e-10:
        sys.exit(f"check failed: arden and JAX differ by {worst:.2e} (relative) > 1e-10")
    print(f"check: ok (worst {worst:.2e})")


def time_arden(data, threads, runs, batch, lr):
    cmd = [ARDEN, "bench", PROGRAM, "--entry", "train_epoch", "--backend", "c", "--threads", str(threads),
           "--runs", str(runs), "--min-seconds", "0", "--json",
           *arden_args(data, os.path.join(data, "train_x.npy"), os.path.join(data, "train_y.npy"), [lr, batch])]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["min_ns"] / 1e9


def time_jax(data, runs, batch, lr):
    jax, _, epoch = jax_network()
    w, x, y = load(data)
    steps = len(x) // batch
    xs, ys = x[:steps * batch].reshape(steps, batch, 28, 28), y[:steps * batch].reshape(steps, batch)
    jax.block_until_ready(epoch(w, xs, ys, lr))
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(epoch(w, xs, ys, lr))
        best = min(best, time.perf_counter() - t0)
    return best


def jax_in_process(a, batch, lr, env, pin=()):
    """time_jax in a process of its own (XLA reads its flags when it starts)."""
    code = ("import sys; sys.path.insert(0, %r); import cnn; print(cnn.time_jax(%r, %d, %d, %r))"
            % (os.path.dirname(os.path.abspath(__file__)), a.data, a.runs, batch, lr))
    out = subprocess.run([*pin, sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env).stdout
    return float(out.split()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the directory shared/cnn/make_data.py wrote")
    ap.add_argument("--check", action="store_true", help="compare with JAX (gradient, one epoch)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts to time ('' for none)")
    ap.add_argument("--runs", type=int, default=3, help="timed epochs per measurement (minimum taken)")
    ap.add_argument("--epochs", type=int, default=40, help="the epoch count to scale one epoch's time to")
    ap.add_argument("--no-jax", action="store_true", help="time arden only")
    ap.add_argument("--jax-gpu", action="store_true", help="also time JAX's epoch on the GPU (JAX_PLATFORMS=cuda)")
    a = ap.parse_args()
    batch, lr = 100, 2.0
    if not os.path.exists(os.path.join(a.data, "train_x.npy")):
        sys.exit(f"cnn.py: no data in {a.data}: run shared/cnn/make_data.py --out {a.data}")
    if a.check:
        check(a.data, batch, lr)
    for t in [int(s) for s in a.threads.split(",") if s]:
        sec = time_arden(a.data, t, a.runs, batch, lr)
        print(f"arden C, {t} thread(s): one epoch {sec:.3f} s, {a.epochs} epochs {a.epochs * sec:.1f} s")
        if not a.no_jax:
            flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" if t == 1 else ""
            # on the CPU, also where jax sees a GPU (it would take it)
            env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
            js = jax_in_process(a, batch, lr, env, ["taskset", "-c", "0" if t == 1 else f"0-{t - 1}"])
            print(f"JAX, {t} thread(s): one epoch {js:.3f} s, {a.epochs} epochs {a.epochs * js:.1f} s; arden / JAX {sec / js:.2f}x")
    if a.jax_gpu:
        js = jax_in_process(a, batch, lr, dict(os.environ, JAX_PLATFORMS="cuda"))
        print(f"JAX on the GPU: one epoch {js:.3f} s, {a.epochs} epochs {a.epochs * js:.1f} s")
    print("reference (shared/cnn/README.md, 2-core AMD EPYC): hand-written C + OpenMP 77 s / 40 s at 1 / 2 threads, "
          "PyTorch CPU 134 s / 89 s, for 40 epochs")


if __name__ == "__main__":
    main()
