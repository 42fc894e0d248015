"""The benchmark's functions in JAX, timed with jax.jit and block_until_ready.

Each function computes what the arden program of the same row of
workloads.py computes, in float64 (jax_enable_x64), on the data of gen.py.
Derivatives are JAX's (jax.grad, jax.jvp), never written by hand. Thread
settings come from the caller's environment (XLA_FLAGS, taskset): set them
before this process starts, as driver.py does.

    python bench/jax_workloads.py [--only NAME,...] [--runs N] [--min-seconds S]
                                  [--save-dir DIR] [--out FILE]

Prints (and with --out writes) one JSON object per function: name, compile_s
(first call: tracing + XLA compilation + one run), runs, min_ns, median_ns,
mean_ns. With --save-dir, also writes each result, its leaves flattened and
concatenated, to DIR/NAME.npy for the agreement check.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

import jax

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.scipy.special import logsumexp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import FUNCTIONS, JAX_VARIANTS  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


# ---- GMM (ADBench / GradBench objective with a Wishart prior, as examples/gmm.ard)

def packed_lower_indices(d):
    """Row and column of each entry of ADBench's column-major packing of the
    strictly lower triangle: column 0 rows 1..d-1, then column 1 rows 2..d-1..."""
    rows, cols = [], []
    for i in range(d):
        for j in range(i + 1, d):
            rows.append(j)
            cols.append(i)
    return np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64)


def log_gamma_distrib(a, p):
    return 0.25 * p * (p - 1) * math.log(math.pi) + sum(math.lgamma(a - 0.5 * j) for j in range(p))


def make_gmm(gamma, m):
    def objective(alpha, mu, q, l, x):
        n, d = x.shape
        k = alpha.shape[0]
        rows, cols = packed_lower_indices(d)
        lower = jnp.zeros((k, d, d)).at[:, rows, cols].set(l)
        qmat = lower + jax.vmap(jnp.diag)(jnp.exp(q))
        xc = x[:, None, :] - mu[None, :, :]  # [n][k][d]
        qx = jnp.einsum("kab,nkb->nka", qmat, xc)
        main = alpha[None, :] + jnp.sum(q, axis=1)[None, :] - 0.5 * jnp.sum(qx * qx, axis=2)
        slse = jnp.sum(logsumexp(main, axis=1))
        constant = -(n * d) * 0.5 * math.log(2.0 * math.pi)
        big_n = d + m + 1
        c = big_n * d * (math.log(gamma) - 0.5 * math.log(2.0)) - log_gamma_distrib(0.5 * big_n, d)
        fro = jnp.sum(jnp.exp(q) ** 2, axis=1) + jnp.sum(l * l, axis=1)
        prior = jnp.sum(0.5 * gamma * gamma * fro - m * jnp.sum(q, axis=1)) - k * c
        return constant + slse - n * logsumexp(alpha) + prior

    return objective


def gmm_fn(grad):
    def build(a, p):
        obj = make_gmm(p["gamma"], p["m"])
        f = jax.grad(obj, argnums=(0, 1, 2, 3)) if grad else obj
        return f, [a["alpha"], a["mu"], a["q"], a["l"], a["x"]]

    return build


# ---- logsumexp

def lse_fn(grad):
    def build(a, p):
        return (jax.grad(logsumexp) if grad else logsumexp), [a["x"]]

    return build


# ---- least squares: 0.5 sum_i (s_i - sum_j x_j t_i^j)^2

def llsq(x, t, s):
    powers = t[:, None] ** jnp.arange(x.shape[0], dtype=jnp.float64)[None, :]  # [n][m]
    r = s - powers @ x
    return 0.5 * jnp.sum(r * r)


def llsq_fn(grad):
    def build(a, p):
        return (jax.grad(llsq) if grad else llsq), [a["x"], a["t"], a["s"]]

    return build


# ---- k-means

# The squared distances as |x|^2 - 2 x.c + |c|^2 with a matrix product: what
# JAX code usually does, and 5x (cost) to 20x (Newton direction) faster
# under XLA than the literal sum over d of (x - c)^2 (kmeans_cost_direct),
# which materialises [n][k][d] arrays. The faster one is the baseline; the
# literal one is timed too (driver.py, at 1 thread) and reported beside it.
def kmeans_cost(x, c):
    d2 = jnp.sum(x * x, axis=1)[:, None] - 2.0 * (x @ c.T) + jnp.sum(c * c, axis=1)[None, :]  # [n][k]
    return jnp.sum(jnp.min(d2, axis=1))


def kmeans_cost_direct(x, c):
    d2 = jnp.sum((x[:, None, :] - c[None, :, :]) ** 2, axis=2)  # [n][k]
    return jnp.sum(jnp.min(d2, axis=1))


def newton(cost):
    def direction(x, c):
        # the Hessian is diagonal: its diagonal is the Hessian-vector product with ones
        g, h = jax.jvp(jax.grad(lambda c_: cost(x, c_)), (c,), (jnp.ones_like(c),))
        return jnp.where(h == 0.0, 0.0, -g / jnp.where(h == 0.0, 1.0, h))

    return direction


def kmeans_fn(f):
    def build(a, p):
        return f, [a["x"], a["c"]]

    return build


# ---- RK4 of y' = (x_0, x_1 y_0, x_2 y_1, ...)

def chain(x, y):
    return jnp.concatenate([x[:1], x[1:] * y[:-1]])


def rk4(x, y0, h, steps):
    def step(y, _):
        k1 = chain(x, y)
        k2 = chain(x, (0.5 * h) * k1 + y)
        k3 = chain(x, (0.5 * h) * k2 + y)
        k4 = chain(x, h * k3 + y)
        return y + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4), None

    y, _ = lax.scan(step, y0, None, length=steps)
    return y


def rk4_fn(grad):
    def build(a, p):
        h, steps = p["h"], p["steps"]
        if grad:
            f = jax.grad(lambda x, y0: rk4(x, y0, h, steps)[-1])
        else:
            def f(x, y0):
                return rk4(x, y0, h, steps)
        return f, [a["x"], a["y0"]]

    return build


# ---- MLP training step (examples/mlp_train.ard's network)

def mlp_loss(params, x, y):
    w1, b1, w2, b2 = params
    hidden = jnp.tanh(x @ w1.T + b1)  # [m][h]
    r = hidden @ w2 + b2 - y
    return jnp.sum(r * r) / x.shape[0]


def mlp_fn(a, p):
    lr = p["lr"]

    def step(w1, b1, w2, b2, x, y):
        params = (w1, b1, w2, b2)
        g = jax.grad(mlp_loss)(params, x, y)
        return tuple(v - lr * gv for v, gv in zip(params, g))

    return step, [a["w1"], a["b1"], a["w2"], jnp.float64(p["b2"]), a["x"], a["y"]]


# ---- dense kernels (bench/programs/dense.ard)

def matmul_fn(a, p):
    return (lambda x, y: x @ y), [a["a"], a["b"]]


def mlp2_loss(params, x, y):
    w1, b1, w2, b2 = params
    out = jnp.tanh(x @ w1.T + b1) @ w2 + b2
    return jnp.sum((out - y) ** 2) / x.shape[0]


def mlp2_fn(grad):
    def build(a, p):
        args = [a["w1"], a["b1"], a["w2"], jnp.float64(p["b2"]), a["x"], a["y"]]
        if not grad:
            return (lambda w1, b1, w2, b2, x, y: mlp2_loss((w1, b1, w2, b2), x, y)), args
        return (lambda w1, b1, w2, b2, x, y: jax.grad(mlp2_loss)((w1, b1, w2, b2), x, y)), args
    return build


def softmax_ce(w, x, label):
    logits = x @ w.T
    mx = jnp.max(logits, axis=1)
    lse = mx + jnp.log(jnp.sum(jnp.exp(logits - mx[:, None]), axis=1))
    return jnp.sum(lse - jnp.take_along_axis(logits, label[:, None], axis=1)[:, 0]) / x.shape[0]


def softmax_fn(grad):
    def build(a, p):
        f = jax.grad(softmax_ce) if grad else softmax_ce
        return f, [a["w"], a["x"], a["label"]]
    return build


# ---- a stencil and a convolution (bench/programs/stencil.ard)

def diffusion(u0, r, steps):
    def step(u, _):
        p = jnp.pad(u, 1)
        return u + r * (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u), None
    u, _ = lax.scan(step, u0, None, length=steps)
    return jnp.sum(u * u)


def diffusion_fn(grad):
    def build(a, p):
        steps = int(p["steps"])
        f = (lambda u0, r: jax.grad(diffusion)(u0, r, steps)) if grad else (lambda u0, r: diffusion(u0, r, steps))
        return f, [a["u0"], jnp.float64(p["r"])]
    return build


def conv1d_layer(filt, bias, x):
    z = lax.conv_general_dilated(x, filt, (1,), "VALID", dimension_numbers=("NCH", "OIH", "NCH"))
    return jax.nn.sigmoid(z + bias[None, :, None])


def conv1d_fn(grad):
    def build(a, p):
        f = jax.grad(lambda g, b, x: jnp.sum(conv1d_layer(g, b, x))) if grad else conv1d_layer
        return f, [a["filt"], a["bias"], a["x"]]
    return build


BUILDERS = dict(
    gmm_d10=gmm_fn(False), gmm_d10_grad=gmm_fn(True), gmm_d64=gmm_fn(False), gmm_d64_grad=gmm_fn(True),
    lse=lse_fn(False), lse_grad=lse_fn(True), llsq=llsq_fn(False), llsq_grad=llsq_fn(True),
    kmeans=kmeans_fn(kmeans_cost), kmeans_newton=kmeans_fn(newton(kmeans_cost)),
    kmeans_direct=kmeans_fn(kmeans_cost_direct), kmeans_newton_direct=kmeans_fn(newton(kmeans_cost_direct)), rk4=rk4_fn(False), rk4_grad=rk4_fn(True),
    mlp_step_small=mlp_fn, mlp_step=mlp_fn,
    matmul=matmul_fn, mlp2=mlp2_fn(False), mlp2_grad=mlp2_fn(True), softmax_ce=softmax_fn(False), softmax_ce_grad=softmax_fn(True),
    diffusion=diffusion_fn(False), diffusion_grad=diffusion_fn(True), conv1d=conv1d_fn(False), conv1d_grad=conv1d_fn(True),
)


def load(data):
    d = os.path.join(DATA, data)
    arrays = {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d) if f.endswith(".npy")}
    with open(os.path.join(d, "params.json")) as f:
        params = json.load(f)
    return arrays, params


def flat(result):
    return np.concatenate([np.ravel(np.asarray(v)) for v in jax.tree_util.tree_leaves(result)])


def time_one(row, runs, min_seconds, save_dir):
    arrays, params = load(row["data"])
    fn, args = BUILDERS[row["name"]](arrays, params)
    jitted = jax.jit(fn)
    args = [jax.device_put(jnp.asarray(v)) for v in args]
    t0 = time.perf_counter()
    out = jax.block_until_ready(jitted(*args))
    compile_s = time.perf_counter() - t0
    if save_dir:
        np.save(os.path.join(save_dir, row["name"] + ".npy"), flat(out))
    jax.block_until_ready(jitted(*args))  # warm-up
    times = []
    while len(times) < runs or sum(times) < min_seconds:
        t = time.perf_counter()
        out = jax.block_until_ready(jitted(*args))
        times.append(time.perf_counter() - t)
        del out
    ns = [int(t * 1e9) for t in times]
    return dict(name=row["name"], compile_s=compile_s, runs=len(ns), min_ns=min(ns),
                median_ns=int(statistics.median(ns)), mean_ns=int(statistics.fmean(ns)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="comma-separated function names (default: all)")
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--save-dir")
    ap.add_argument("--out")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None
    if a.save_dir:
        os.makedirs(a.save_dir, exist_ok=True)
    results = []
    rows = FUNCTIONS + [dict(row, name=name) for row in FUNCTIONS for name in JAX_VARIANTS.get(row["name"], [])]
    for row in rows:
        if (only and row["name"] not in only) or (not only and row["name"] not in {r["name"] for r in FUNCTIONS}):
            continue
        r = time_one(row, a.runs, a.min_seconds, a.save_dir)
        r["jax_version"] = jax.__version__
        results.append(r)
        print(json.dumps(r), flush=True)
        if a.out:
            with open(a.out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
