"""Generate the benchmark's input data with a fixed seed.

Writes bench/data/WORKLOAD/NAME.npy (float64 arrays; int64 where a maker
gives integers, e.g. class labels) and
bench/data/WORKLOAD/params.json (scalars) for every workload of
workloads.py. Existing data is kept unless --force is given (the data only
depends on the seed and the sizes, both fixed).

    python bench/gen.py [--force]
"""

import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import SEED, SIZES  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def gmm(rng, d, k, n):
    return dict(
        alpha=rng.standard_normal(k),
        mu=rng.standard_normal((k, d)),
        q=0.1 * rng.standard_normal((k, d)),
        l=0.1 * rng.standard_normal((k, d * (d - 1) // 2)),
        x=rng.standard_normal((n, d)),
    ), dict(gamma=1.0, m=0)


def lse(rng, n):
    return dict(x=rng.standard_normal(n)), {}


def llsq(rng, n, m):
    t = np.linspace(-1.0, 1.0, n)
    return dict(x=rng.standard_normal(m), t=t, s=np.sign(t)), {}


def kmeans(rng, k, n, d):
    return dict(x=rng.standard_normal((n, d)), c=rng.standard_normal((k, d))), {}


def rk4(rng, n, steps):
    return dict(x=rng.uniform(-1.0, 1.0, n), y0=rng.uniform(0.5, 1.5, n)), dict(h=1.0 / steps, steps=steps)


def mlp_small(rng, h, m):
    # examples/mlp_train.ard's initial parameters and data, exactly
    assert (h, m) == (8, 8)
    w1 = np.array([[0.5 * math.sin(1.3 * j + i + 1.0) for i in range(2)] for j in range(8)])
    b1 = np.array([0.1 * math.cos(j) for j in range(8)])
    w2 = np.array([0.5 * math.sin(0.7 * j + 2.0) for j in range(8)])
    x = np.array([[-1.0, -1.0], [-1.0, 1.0], [1.0, -1.0], [1.0, 1.0],
                  [-0.5, -0.5], [-0.5, 0.5], [0.5, -0.5], [0.5, 0.5]])
    y = np.array([1.0, -1.0, -1.0, 1.0, 0.25, -0.25, -0.25, 0.25])
    return dict(w1=w1, b1=b1, w2=w2, x=x, y=y), dict(b2=0.0, lr=0.1)


def mlp_large(rng, h, m):
    # the same network and target (y = x0 x1) with more units and points
    x = rng.uniform(-1.0, 1.0, (m, 2))
    return dict(
        w1=rng.standard_normal((h, 2)),
        b1=0.1 * rng.standard_normal(h),
        w2=rng.standard_normal(h) / math.sqrt(h),
        x=x,
        y=x[:, 0] * x[:, 1],
    ), dict(b2=0.0, lr=0.1)


def matmul(rng, n, k, m):
    return dict(a=rng.standard_normal((n, k)), b=rng.standard_normal((k, m))), {}


def mlp2(rng, b, d, h):
    x = rng.standard_normal((b, d))
    return dict(
        w1=rng.standard_normal((h, d)) / math.sqrt(d),
        b1=0.1 * rng.standard_normal(h),
        w2=rng.standard_normal(h) / math.sqrt(h),
        x=x,
        y=np.sin(x[:, 0]) * x[:, 1],
    ), dict(b2=0.0)


def softmax(rng, n, d, c):
    return dict(w=0.1 * rng.standard_normal((c, d)), x=rng.standard_normal((n, d)),
                label=rng.integers(0, c, n).astype(np.int64)), {}


def diffusion(rng, n, m, steps):
    return dict(u0=rng.random((n, m))), dict(r=0.2, steps=steps)


def conv1d(rng, b, c, l, f, w):
    return dict(filt=rng.standard_normal((f, c, w)) / math.sqrt(c * w), bias=0.1 * rng.standard_normal(f),
                x=rng.standard_normal((b, c, l))), {}


MAKERS = dict(gmm_d10=gmm, gmm_d64=gmm, lse=lse, llsq=llsq, kmeans=kmeans, rk4=rk4,
              mlp_small=mlp_small, mlp_large=mlp_large, matmul=matmul, mlp2=mlp2, softmax=softmax,
              diffusion=diffusion, conv1d=conv1d)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--force", action="store_true", help="regenerate existing data")
    a = ap.parse_args()
    for i, (name, sizes) in enumerate(SIZES.items()):
        out = os.path.join(DATA, name)
        stamp = os.path.join(out, "params.json")
        if os.path.exists(stamp) and not a.force:
            with open(stamp) as f:
                if json.load(f).get("_sizes") == sizes:
                    continue
        # one generator per workload, so adding one does not change the others
        rng = np.random.default_rng([SEED, i])
        arrays, params = MAKERS[name](rng, **sizes)
        os.makedirs(out, exist_ok=True)
        for k, v in arrays.items():
            dtype = np.int64 if np.issubdtype(np.asarray(v).dtype, np.integer) else np.float64
            np.save(os.path.join(out, k + ".npy"), np.ascontiguousarray(v, dtype=dtype))
        params["_sizes"] = sizes
        # written last: its presence marks the directory complete
        with open(stamp, "w") as f:
            json.dump(params, f, indent=1)
        print(f"gen: {name} {sizes}")


if __name__ == "__main__":
    main()
