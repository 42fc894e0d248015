"""The benchmark's workloads and functions (issue 9, "How fast").

One table shared by gen.py (which data to make), jax_workloads.py (which
JAX function computes each row) and driver.py (how to call arden).

A function row:
  name      key used in results.json and by jax_workloads.py
  title     the row's label in docs/PERFORMANCE.md
  data      the data directory under bench/data/ (written by gen.py)
  program   the arden program, relative to the repository root
  entry     its entry point
  args      the entry's arguments in order: "@name" is bench/data/DATA/name.npy,
            anything else is a JSON literal (or "$name" for params.json[name])
  interp    whether to time the interpreter too (a call expected to take
            less than ~20 s at ~10 million scalar operations per second;
            run with a time limit anyway)
  target    the issue-9 targets this row counts for: "1t" (arden C 1T <= JAX
            1T), "2t" (2 threads >= 1.7x faster than 1)
"""

GMM_ARGS = ["@alpha", "@mu", "@q", "@l", "@x", "$gamma", "$m"]
RK4_ARGS = ["@x", "@y0", "$h", "$steps"]
MLP_ARGS = ["@w1", "@b1", "@w2", "$b2", "@x", "@y"]

FUNCTIONS = [
    dict(name="gmm_d10", title="GMM objective, d=10 k=25 n=1000", data="gmm_d10",
         program="examples/gmm.ard", entry="gmm_objective", args=GMM_ARGS, interp=True, target=["1t"]),
    dict(name="gmm_d10_grad", title="GMM gradient, d=10 k=25 n=1000", data="gmm_d10",
         program="examples/gmm_grad.ard", entry="gmm_gradient", args=GMM_ARGS, interp=True, target=["1t", "2t"]),
    dict(name="gmm_d64", title="GMM objective, d=64 k=100 n=1000", data="gmm_d64",
         program="examples/gmm.ard", entry="gmm_objective", args=GMM_ARGS, interp=False, target=["1t"]),
    dict(name="gmm_d64_grad", title="GMM gradient, d=64 k=100 n=1000", data="gmm_d64",
         program="examples/gmm_grad.ard", entry="gmm_gradient", args=GMM_ARGS, interp=False, target=["1t", "2t"]),
    dict(name="lse", title="logsumexp, n=1,280,000", data="lse",
         program="bench/programs/logsumexp.ard", entry="lse", args=["@x"], interp=True, target=["1t", "2t"]),
    dict(name="lse_grad", title="logsumexp gradient, n=1,280,000", data="lse",
         program="bench/programs/logsumexp.ard", entry="lse_grad", args=["@x"], interp=True, target=["1t", "2t"]),
    dict(name="llsq", title="least squares, n=16392 m=128", data="llsq",
         program="bench/programs/llsq.ard", entry="llsq", args=["@x", "@t", "@s"], interp=True, target=["1t"]),
    dict(name="llsq_grad", title="least squares gradient, n=16392 m=128", data="llsq",
         program="bench/programs/llsq.ard", entry="llsq_grad", args=["@x", "@t", "@s"], interp=True, target=["1t"]),
    dict(name="kmeans", title="k-means cost, k=1000 n=10000 d=16", data="kmeans",
         program="examples/kmeans.ard", entry="cost", args=["@x", "@c"], interp=False, target=["1t", "2t"]),
    dict(name="kmeans_newton", title="k-means Newton direction, k=1000 n=10000 d=16", data="kmeans",
         program="bench/programs/kmeans_newton.ard", entry="newton_direction", args=["@x", "@c"], interp=False,
         target=["1t", "2t"]),
    dict(name="rk4", title="RK4, n=100,000, 100 steps", data="rk4",
         program="bench/programs/rk4.ard", entry="rk4", args=RK4_ARGS, interp=False, target=["1t"]),
    dict(name="rk4_grad", title="RK4 gradient of the last component", data="rk4",
         program="bench/programs/rk4.ard", entry="rk4_last_grad", args=RK4_ARGS, interp=False, target=["1t"]),
    dict(name="mlp_step_small", title="MLP training step, h=8 m=8 (the example's size)", data="mlp_small",
         program="bench/programs/mlp_step.ard", entry="mlp_step", args=MLP_ARGS + ["$lr"], interp=True, target=["1t"]),
    dict(name="mlp_step", title="MLP training step, h=256 m=10000", data="mlp_large",
         program="bench/programs/mlp_step.ard", entry="mlp_step", args=MLP_ARGS + ["$lr"], interp=True,
         target=["1t", "2t"]),
    dict(name="matmul", title="matrix product, 512×512×512", data="matmul",
         program="bench/programs/dense.ard", entry="matmul", args=["@a", "@b"], interp=False, target=["1t", "2t"]),
    dict(name="mlp2", title="two-layer tanh network, b=4096 d=32 h=128", data="mlp2",
         program="bench/programs/dense.ard", entry="mlp2_loss", args=MLP_ARGS, interp=False, target=["1t", "2t"]),
    dict(name="mlp2_grad", title="two-layer tanh network gradient, b=4096 d=32 h=128", data="mlp2",
         program="bench/programs/dense.ard", entry="mlp2_grad", args=MLP_ARGS, interp=False, target=["1t", "2t"]),
    dict(name="softmax_ce", title="softmax cross-entropy, n=20000 d=100 c=10", data="softmax",
         program="bench/programs/dense.ard", entry="softmax_ce_loss", args=["@w", "@x", "@label"], interp=False,
         target=["1t", "2t"]),
    dict(name="softmax_ce_grad", title="softmax cross-entropy gradient, n=20000 d=100 c=10", data="softmax",
         program="bench/programs/dense.ard", entry="softmax_ce_grad", args=["@w", "@x", "@label"], interp=False,
         target=["1t", "2t"]),
    dict(name="diffusion", title="2-d diffusion, 256×256, 50 steps", data="diffusion",
         program="bench/programs/stencil.ard", entry="diffusion", args=["@u0", "$r", "$steps"], interp=False,
         target=["1t", "2t"]),
    dict(name="diffusion_grad", title="2-d diffusion gradient w.r.t. the initial state, 256×256, 50 steps", data="diffusion",
         program="bench/programs/stencil.ard", entry="diffusion_grad", args=["@u0", "$r", "$steps"], interp=False,
         target=["1t", "2t"]),
    dict(name="conv1d", title="1-d convolution + sigmoid, 8×8×1024, 16 filters of width 5", data="conv1d",
         program="bench/programs/stencil.ard", entry="conv1d_layer", args=["@filt", "@bias", "@x"], interp=False,
         target=["1t", "2t"]),
    dict(name="conv1d_grad", title="1-d convolution + sigmoid, gradient w.r.t. the filters", data="conv1d",
         program="bench/programs/stencil.ard", entry="conv1d_grad", args=["@filt", "@bias", "@x"], interp=False,
         target=["1t", "2t"]),
]

# JAX-only variants of a row (jax_workloads.py times them when named with
# --only; driver.py at 1 thread, reported beside the row)
JAX_VARIANTS = dict(kmeans=["kmeans_direct"], kmeans_newton=["kmeans_newton_direct"])

# Sizes of the generated data (gen.py).
SIZES = {
    "gmm_d10": dict(d=10, k=25, n=1000),
    "gmm_d64": dict(d=64, k=100, n=1000),
    "lse": dict(n=1_280_000),
    "llsq": dict(n=16392, m=128),
    "kmeans": dict(k=1000, n=10000, d=16),
    "rk4": dict(n=100_000, steps=100),
    "mlp_small": dict(h=8, m=8),
    "mlp_large": dict(h=256, m=10000),
    "matmul": dict(n=512, k=512, m=512),
    "mlp2": dict(b=4096, d=32, h=128),
    "softmax": dict(n=20000, d=100, c=10),
    "diffusion": dict(n=256, m=256, steps=50),
    "conv1d": dict(b=8, c=8, l=1024, f=16, w=5),
}

SEED = 20240909
