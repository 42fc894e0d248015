"""The GIL is released during calls; many Python threads may call one
entry at once."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import arden

from conftest import EXAMPLES

SLOW = "entry slow (n: i64) : f64 = loop acc = 0.0 for i < n do acc + sin (f64 i)"


def test_eight_threads_call_one_entry(backend: str) -> None:
    m = arden.load(EXAMPLES / "gmm.ard", backend=backend, threads=1)
    rng = np.random.default_rng(5)
    d, k, n = 3, 4, 50
    inputs = [
        (rng.normal(size=k), rng.normal(size=(k, d)), rng.normal(size=(k, d)) * 0.3,
         rng.normal(size=(k, d * (d - 1) // 2)) * 0.3, rng.normal(size=(n, d)), 1.0, 0)
        for _ in range(8)
    ]
    expected = [m.gmm_objective(*a) for a in inputs]
    grad = m.grad("gmm_objective", argnums=1)
    expected_g = [grad(*a) for a in inputs]
    results: dict = {}
    errors: list = []
    barrier = threading.Barrier(8)

    def work(t: int) -> None:
        try:
            barrier.wait()
            for rep in range(20):
                a = inputs[(t + rep) % 8]
                results.setdefault(t, []).append(((t + rep) % 8, m.gmm_objective(*a), grad(*a)))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    assert sum(len(v) for v in results.values()) == 160
    for rs in results.values():
        for i, y, g in rs:
            assert y == expected[i]
            np.testing.assert_array_equal(g, expected_g[i])


def test_threads_share_one_input_array(backend: str) -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend=backend)
    x = np.arange(1000.0)
    want = float(x @ x)
    out: list = []

    def work() -> None:
        out.extend(m.dot(x, x) for _ in range(50))

    ts = [threading.Thread(target=work) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == 400 and all(v == pytest.approx(want, rel=1e-12) for v in out)


def test_the_gil_is_released_during_a_call(backend: str) -> None:
    m = arden.compile(SLOW, backend=backend, threads=1)
    n = 2_000_000 if backend == "interp" else 60_000_000
    t0 = time.perf_counter()
    m.slow(n)
    duration = time.perf_counter() - t0
    assert duration > 0.1, "the call is too quick for this test to mean anything"
    ticks: list = []
    th = threading.Thread(target=m.slow, args=(n,))
    th.start()
    while th.is_alive():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    th.join()
    # the main thread kept running while the call ran: no long gap
    gaps = np.diff(ticks)
    assert len(ticks) > 10
    assert gaps.max() < duration / 2, (gaps.max(), duration)


def test_fast_math_reassociates_in_c_only() -> None:
    """``fast_math=True`` compiles the C backend with reassociation: a long
    dot product agrees with the exact one to rounding, and its derivative
    too; the interpreter ignores the option; a non-bool is refused."""
    src = "entry dot [n] (a: [n]f64) (b: [n]f64) : f64 = sum (for i. a[i] * b[i])"
    rng = np.random.default_rng(11)
    a, b = rng.uniform(1.0, 2.0, 10_000), rng.uniform(1.0, 2.0, 10_000)
    exact = arden.compile(src, backend="interp")
    want, gwant = exact.dot(a, b), exact.grad("dot")(a, b)
    for backend in ("c", "interp"):
        fast = arden.compile(src, backend=backend, fast_math=True, threads=1)
        got = fast.dot(a, b)
        assert abs(got - want) <= 1e-12 * abs(want)
        np.testing.assert_allclose(fast.grad("dot")(a, b), gwant, rtol=1e-12)
        if backend == "interp":
            assert got == want
    with pytest.raises(ValueError, match="fast_math"):
        arden.compile(src, fast_math=1)
