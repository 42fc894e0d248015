"""Fit a Gaussian mixture to generated 2-D data by gradient descent, with the
gradient of arden's GMM objective (examples/gmm.ard) taken by arden's
reverse-mode AD from Python, and draw the fitted components and the loss
curve.

    pip install ./python matplotlib tqdm
    python examples/python/gmm_fit.py                      # writes gmm_fit.png
    python examples/python/gmm_fit.py --iterations 500 --output fit.svg

The objective is ADBench's GMM log-likelihood with a Wishart prior; with a
small prior weight (gamma) maximising it fits the mixture to the data, so
the loss minimised here is minus the objective per data point. Parameters
(see examples/gmm.ard): alpha (log mixture weights), mu (means), q (log of
the diagonal of each component's inverse-covariance factor Q) and l (the
strictly lower part of Q); the component's covariance is (Q^T Q)^-1.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

import arden

HERE = pathlib.Path(__file__).resolve().parent
GMM = HERE.parent / "gmm.ard"


def make_data(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n points from three 2-D Gaussians; returns the points and true means."""
    means = np.array([[-2.0, -1.0], [2.5, 0.5], [0.0, 2.5]])
    covs = [
        np.array([[0.6, 0.25], [0.25, 0.4]]),
        np.array([[0.3, -0.2], [-0.2, 0.8]]),
        np.array([[0.9, 0.0], [0.0, 0.2]]),
    ]
    weights = np.array([0.45, 0.35, 0.2])
    labels = rng.choice(3, size=n, p=weights)
    x = np.empty((n, 2))
    for j in range(3):
        idx = labels == j
        x[idx] = rng.multivariate_normal(means[j], covs[j], size=int(idx.sum()))
    return x, means


def covariance(q: np.ndarray, l: np.ndarray) -> np.ndarray:
    """The covariance (Q^T Q)^-1 of one component (d = 2: l holds Q[1, 0])."""
    qm = np.diag(np.exp(q))
    qm[1, 0] = l[0]
    return np.linalg.inv(qm.T @ qm)


class Adam:
    """Adam steps on a tuple of arrays (plain NumPy)."""

    def __init__(self, params: tuple, lr: float) -> None:
        self.lr, self.t = lr, 0
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]

    def step(self, params: tuple, grads: tuple) -> tuple:
        self.t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        out = []
        for i, (p, g) in enumerate(zip(params, grads)):
            self.m[i] = b1 * self.m[i] + (1 - b1) * g
            self.v[i] = b2 * self.v[i] + (1 - b2) * g * g
            mh = self.m[i] / (1 - b1**self.t)
            vh = self.v[i] / (1 - b2**self.t)
            out.append(p - self.lr * mh / (np.sqrt(vh) + eps))
        return tuple(out)


def fit(x: np.ndarray, k: int, iterations: int, lr: float, backend: str | None, seed: int, progress: bool = True):
    """Gradient descent on minus the GMM objective per point; returns the
    parameters (alpha, mu, q, l), the loss per iteration and the module."""
    from tqdm import tqdm

    m = arden.load(GMM, backend=backend)
    n, d = x.shape
    rng = np.random.default_rng(seed)
    gamma, wishart_m = 1e-3, 0
    params = (
        np.zeros(k),
        x[rng.choice(n, size=k, replace=False)].copy(),
        np.zeros((k, d)),
        np.zeros((k, d * (d - 1) // 2)),
    )
    # the objective and its gradient with respect to alpha, mu, q and l
    value_and_grad = m.value_and_grad("gmm_objective", argnums=(0, 1, 2, 3))
    opt = Adam(params, lr)
    losses = []
    bar = tqdm(range(iterations), desc="fitting", unit="it", disable=not progress)
    for _ in bar:
        obj, grads = value_and_grad(*params, x, gamma, wishart_m)
        losses.append(-obj / n)
        params = opt.step(params, tuple(-g / n for g in grads))
        bar.set_postfix(loss=f"{losses[-1]:.4f}")
    return params, np.array(losses), m


def draw(x: np.ndarray, params: tuple, losses: np.ndarray, true_means: np.ndarray, out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Ellipse

    alpha, mu, q, l = params
    weights = np.exp(alpha - alpha.max())
    weights /= weights.sum()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.8))
    ax.scatter(x[:, 0], x[:, 1], s=5, alpha=0.35, color="gray", label="data")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j in range(len(alpha)):
        cov = covariance(q[j], l[j])
        vals, vecs = np.linalg.eigh(cov)
        angle = np.degrees(np.arctan2(vecs[1, 1], vecs[0, 1]))
        for nsig in (1, 2):
            ax.add_patch(
                Ellipse(mu[j], 2 * nsig * np.sqrt(vals[1]), 2 * nsig * np.sqrt(vals[0]), angle=angle,
                        fill=False, lw=2 if nsig == 1 else 1, color=colors[j % len(colors)])
            )
        ax.plot(*mu[j], "o", color=colors[j % len(colors)], label=f"component {j} (weight {weights[j]:.2f})")
    ax.plot(true_means[:, 0], true_means[:, 1], "kx", ms=10, mew=2, label="true means")
    ax.set_title("fitted Gaussian mixture (1σ and 2σ ellipses)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best", fontsize=8)
    ax2.plot(np.arange(1, len(losses) + 1), losses)
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("loss (− objective / n)")
    ax2.set_title("loss")
    ax2.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iterations", type=int, default=300, help="gradient steps (default 300)")
    ap.add_argument("--points", type=int, default=600, help="generated data points (default 600)")
    ap.add_argument("--components", type=int, default=3, help="mixture components to fit (default 3)")
    ap.add_argument("--lr", type=float, default=0.05, help="Adam learning rate (default 0.05)")
    ap.add_argument("--backend", choices=["c", "interp"], default=None, help="arden backend (default: C when a compiler is found)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=pathlib.Path, default=pathlib.Path("gmm_fit.png"), help="a .png or .svg file (default gmm_fit.png)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    if a.iterations < 1 or a.points < a.components or a.components < 1:
        ap.error("need iterations >= 1 and points >= components >= 1")
    rng = np.random.default_rng(a.seed)
    x, true_means = make_data(rng, a.points)
    t0 = time.perf_counter()
    params, losses, m = fit(x, a.components, a.iterations, a.lr, a.backend, a.seed, progress=not a.quiet)
    elapsed = time.perf_counter() - t0
    draw(x, params, losses, true_means, a.output)
    print(f"backend={m.backend} iterations={a.iterations} loss {losses[0]:.4f} -> {losses[-1]:.4f} "
          f"({elapsed:.2f}s); wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
