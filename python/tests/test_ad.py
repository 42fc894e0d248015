"""grad, value_and_grad, vjp, jvp, jacfwd and jacrev against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import arden

from conftest import EXAMPLES


def gmm_args(rng: np.random.Generator, d: int = 3, k: int = 2, n: int = 5):
    return (
        rng.normal(size=k),
        rng.normal(size=(k, d)),
        rng.normal(size=(k, d)) * 0.3,
        rng.normal(size=(k, d * (d - 1) // 2)) * 0.3,
        rng.normal(size=(n, d)),
        1.0,
        0,
    )


def fd_grad(f, args, i, eps=1e-6):
    """Central differences of scalar f with respect to args[i]."""
    x = np.array(args[i], dtype=np.float64)
    g = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[j] += eps
        xm[j] -= eps
        ap, am = list(args), list(args)
        ap[i], am[i] = xp, xm
        g[j] = (f(*ap) - f(*am)) / (2 * eps)
    return g


def fd_jac(f, args, i, eps=1e-6):
    x = np.array(args[i], dtype=np.float64)
    y0 = np.asarray(f(*args))
    jac = np.zeros(y0.shape + x.shape)
    for j in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[j] += eps
        xm[j] -= eps
        ap, am = list(args), list(args)
        ap[i], am[i] = xp, xm
        jac[(...,) + j] = (np.asarray(f(*ap)) - np.asarray(f(*am))) / (2 * eps)
    return jac


@pytest.fixture
def gmm(backend: str) -> arden.Module:
    return arden.load(EXAMPLES / "gmm.ard", backend=backend)


def test_grad_gmm_against_finite_differences(gmm: arden.Module) -> None:
    args = gmm_args(np.random.default_rng(0))
    f = gmm.gmm_objective
    for i in range(4):
        g = gmm.grad("gmm_objective", argnums=i)(*args)
        assert g.shape == np.shape(args[i])
        np.testing.assert_allclose(g, fd_grad(f, args, i), rtol=1e-5, atol=1e-6)
    ga, gmu = gmm.grad("gmm_objective", argnums=(0, 1))(*args)
    np.testing.assert_allclose(ga, gmm.grad(f, 0)(*args), rtol=1e-12)
    np.testing.assert_allclose(gmu, gmm.grad(f, 1)(*args), rtol=1e-12)
    v, g = gmm.value_and_grad("gmm_objective", argnums=-3)(*args)
    assert v == pytest.approx(f(*args), rel=1e-12)
    np.testing.assert_allclose(g, fd_grad(f, args, 4), rtol=1e-5, atol=1e-6)


def test_grad_matches_the_languages_own_gradient(backend: str) -> None:
    m = arden.load(EXAMPLES / "gmm_grad.ard", backend=backend)
    args = gmm_args(np.random.default_rng(1))
    ours = m.grad("gmm_objective", argnums=(0, 1, 2, 3))(*args)
    theirs = m.gmm_gradient(*args)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_vjp_and_jvp(backend: str) -> None:
    m = arden.load(EXAMPLES / "rk4.ard", backend=backend)
    rng = np.random.default_rng(2)
    p = np.array([1.1, 0.4, 0.4, 0.1]) + 0.05 * rng.random(4)
    s0 = np.array([10.0, 5.0])
    args = (p, s0, 0.01, 20)
    f = m.lotka_volterra
    y, pullback = m.vjp("lotka_volterra")(*args)
    np.testing.assert_array_equal(y, f(*args))
    ybar = np.array([0.3, -0.7])
    pbar, s0bar, hbar, stepsbar = pullback(ybar)
    jp = fd_jac(f, args, 0)
    js = fd_jac(f, args, 1)
    np.testing.assert_allclose(pbar, ybar @ jp, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s0bar, ybar @ js, rtol=1e-5, atol=1e-6)
    assert stepsbar == 0
    dp = rng.normal(size=4)
    ds0 = rng.normal(size=2)
    y2, ydot = m.jvp("lotka_volterra")(args, (dp, ds0, 0.0, None))
    np.testing.assert_array_equal(y2, y)
    np.testing.assert_allclose(ydot, jp @ dp + js @ ds0, rtol=1e-5, atol=1e-6)


def test_jacfwd_and_jacrev(backend: str) -> None:
    m = arden.load(EXAMPLES / "rk4_jacobian.ard", backend=backend)
    args = (np.array([1.0, 0.5, 0.3, 0.2]), np.array([2.0, 1.0]), 0.05, 10)
    jf = m.jacfwd("lv_final")(*args)
    jr = m.jacrev("lv_final")(*args)
    assert jf.shape == (2, 4) and jr.shape == (2, 4)
    np.testing.assert_allclose(jf, fd_jac(m.lv_final, args, 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(jr, jf, rtol=1e-10, atol=1e-12)
    # and the language's own jacobian
    np.testing.assert_allclose(m.lv_jacobian(*args), jf, rtol=1e-10, atol=1e-12)
    jp, js = m.jacrev("lv_final", argnums=(0, 1))(*args)
    np.testing.assert_allclose(js, m.lv_jacobian_s0(*args), rtol=1e-10, atol=1e-12)
    # scalar parameter and scalar result
    dh = m.jacfwd("lv_final", argnums=2)(*args)
    assert dh.shape == (2,)
    np.testing.assert_allclose(dh, fd_jac(m.lv_final, args, 2), rtol=1e-5, atol=1e-7)


def test_matrix_jacobian_shapes(backend: str) -> None:
    m = arden.compile("entry sq [n][k] (a: [n][k]f64) : [n][k]f64 = for i j. a[i, j] * a[i, j]", backend=backend)
    a = np.arange(6.0).reshape(2, 3)
    expected = np.zeros((2, 3, 2, 3))
    for i in range(2):
        for j in range(3):
            expected[i, j, i, j] = 2 * a[i, j]
    np.testing.assert_array_equal(m.jacfwd("sq")(a), expected)
    np.testing.assert_array_equal(m.jacrev("sq")(a), expected)


def test_f32_gradient(backend: str) -> None:
    m = arden.compile("entry f [n] (x: [n]f32) : f32 = sum (for i. x[i] * x[i])", backend=backend)
    x = np.array([1.0, 2.0], dtype=np.float32)
    g = m.grad("f")(x)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [2.0, 4.0])


def test_tuple_result_vjp(backend: str) -> None:
    m = arden.load(EXAMPLES / "rk4.ard", backend=backend)
    args = (1.0, 0.0, 2.0, 0.1, 0.01, 5)
    y, pullback = m.vjp("oscillator")(*args)
    assert isinstance(y, tuple) and len(y) == 2
    cots = pullback((1.0, 0.0))
    assert len(cots) == 6
    eps = 1e-6
    fd = (m.oscillator(1.0 + eps, *args[1:])[0] - m.oscillator(1.0 - eps, *args[1:])[0]) / (2 * eps)
    assert cots[0] == pytest.approx(fd, rel=1e-6)


def test_derivative_errors(gmm: arden.Module) -> None:
    with pytest.raises(TypeError, match="cannot differentiate with respect to parameter `m`"):
        gmm.grad("gmm_objective", argnums=6)
    with pytest.raises(ValueError, match="out of range"):
        gmm.grad("gmm_objective", argnums=7)
    m = arden.load(EXAMPLES / "dot.ard", backend="interp")
    with pytest.raises(TypeError, match="scalar float result"):
        m.grad("matmul")
    with pytest.raises(arden.ShapeError):
        m.grad("dot")(np.ones(2), np.ones(3))
    with pytest.raises(TypeError, match="takes 2 arguments"):
        m.jvp("dot")((np.ones(2),), (np.ones(2),))
