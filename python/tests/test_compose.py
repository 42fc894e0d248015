"""The Python API composes like JAX's: nested derivatives (each one arden
program), has_aux, keyword arguments, dicts and lists as parameter trees,
shape errors that name the parameter, bools as numbers, lazy compilation."""

from __future__ import annotations

import time

import numpy as np
import pytest

import arden

SRC = """
entry cube (x: f64) : f64 = x * x * x + sin x
entry scaled (x: f64) (a: f64) : f64 = a * x * x * x
entry cubes [n] (x: [n]f64) : f64 = sum (for i. x[i] * x[i] * x[i])
entry wsum [n] (x: [n]f64) (w: [n]f64) : f64 = sum (for i. w[i] * x[i] * x[i])
entry counted (x: f64) (k: i64) : f64 = x * f64 k
entry with_aux [n] (w: [n]f64) (x: [n]f64) : (f64, ([n]f64, i64)) =
  (sum (for i. w[i] * w[i] * x[i]), (for i. w[i] * x[i], n))
entry pair (x: f64) : (f64, f64) = (x, x * x)
entry model [n] (p: (f64, [n]f64)) (x: [n]f64) : f64 =
  let (b, w) = p in sum (for i. tanh (w[i] * x[i] + b))
entry nested [n] (p: (([n]f64, f64), f64)) (x: [n]f64) : f64 =
  let ((w, b), s) = p in s * sum (for i. sin (w[i] * x[i] + b))
entry three [n] (w: [n]f64) (x: [n]f64) (y: [n]f64) : f64 = sum (for i. w[i] * x[i] * y[i])
entry quart32 (x: f32) : f32 = x * x * x * x
entry aux32 [n] (x: [n]f32) : (f32, f32) = (sum (for i. x[i] * x[i]), x[0])
entry lst [n] (p: ([n]f64, f64)) : f64 = let (w, c) = p in c * sum (for i. w[i] * w[i])
"""


@pytest.fixture
def m(backend: str) -> arden.Module:
    return arden.compile(SRC, backend=backend)


def fd(f, x: float, eps: float = 1e-5) -> float:
    return (f(x + eps) - f(x - eps)) / (2 * eps)


# ---------------------------------------------------------------- nesting


def test_second_and_third_derivatives(m: arden.Module) -> None:
    d2 = m.grad(m.grad("cube"))
    d3 = m.grad(m.grad(m.grad(m.cube)))
    for x in (0.3, -1.7, 2.0):
        assert d2(x) == pytest.approx(6 * x - np.sin(x), rel=1e-12)
        assert d3(x) == pytest.approx(6 - np.cos(x), rel=1e-12)
        # and against finite differences of the first derivative
        assert d2(x) == pytest.approx(fd(m.grad("cube"), x), rel=1e-6)


def test_nesting_with_other_parameters_and_argnums(m: arden.Module) -> None:
    x, a = 2.0, 3.0
    assert m.grad(m.grad("scaled"))(x, a) == pytest.approx(6 * a * x)
    # d/da of d/dx (a x^3) = 3 x^2
    assert m.grad(m.grad("scaled"), argnums=1)(x, a) == pytest.approx(3 * x * x)
    g = m.grad(m.grad("scaled"), argnums=(0, 1))(x, a)
    assert isinstance(g, tuple) and g == pytest.approx((6 * a * x, 3 * x * x))
    v, g = m.value_and_grad(m.grad("scaled"))(x, a)
    assert v == pytest.approx(3 * a * x * x) and g == pytest.approx(6 * a * x)


def test_forward_and_reverse_over_grad(m: arden.Module) -> None:
    rng = np.random.default_rng(1)
    x, v = rng.normal(size=4), rng.normal(size=4)
    g = m.grad("cubes")
    y, hv = m.jvp(g)((x,), (v,))  # Hessian-vector product
    np.testing.assert_allclose(y, 3 * x * x, rtol=1e-13)
    np.testing.assert_allclose(hv, 6 * x * v, rtol=1e-13)
    y, pull = m.vjp(g)(x)
    np.testing.assert_allclose(pull(v)[0], 6 * x * v, rtol=1e-13)
    np.testing.assert_allclose(m.jacfwd(g)(x), np.diag(6 * x), rtol=1e-13)
    np.testing.assert_allclose(m.jacrev(g)(x), np.diag(6 * x), rtol=1e-13)


def test_a_derivative_is_one_arden_program_compiled_once(m: arden.Module) -> None:
    d2 = m.grad(m.grad("cube"))
    assert d2 is m.grad(m.grad("cube"))  # made once per module
    # the derivative operators are in the program (expanded by arden's AD)
    lowered = m.ir(d2, stage="lower")
    assert lowered.count("vjp") + lowered.count("jvp") >= 2, lowered
    assert "sin" in m.ir(d2)
    assert not m._native.is_compiled("call", d2._native_name)
    d2(1.0)
    assert m._native.is_compiled("call", d2._native_name)
    assert not m._native.is_compiled("call", "cube")  # only what runs is compiled
    assert "derivative" in repr(d2) and "grad(grad(cube))" in repr(d2)


def test_compositions_that_are_not_derivatives_of_scalars_are_refused(m: arden.Module) -> None:
    with pytest.raises(TypeError, match=r"grad needs a scalar float result \(f64 or f32\), but `grad\(cubes\)` is \[n\]f64"):
        m.grad(m.grad("cubes"))
    with pytest.raises(TypeError, match=r"`pair` is \(f64, f64\) \(for a result \(loss, aux\) pass has_aux=True\)"):
        m.grad("pair")
    with pytest.raises(TypeError, match="not of function"):
        m.grad(m.vjp("cube"))
    with pytest.raises(TypeError, match="parameter `k` of type i64"):
        m.grad("counted", argnums=1)
    with pytest.raises(ValueError, match=r"argnums \(0, 0\) names a parameter twice"):
        m.grad("scaled", argnums=(0, 0))
    other = arden.compile(SRC, backend="interp")
    with pytest.raises(ValueError, match="another module"):
        m.grad(other.grad("cube"))


def test_single_precision(m: arden.Module) -> None:
    d2 = m.grad(m.grad("quart32"))
    assert d2(np.float32(2.0)) == pytest.approx(48.0)
    v, g = m.value_and_grad(m.grad("quart32"))(np.float32(1.5))
    assert v == pytest.approx(4 * 1.5**3) and g == pytest.approx(12 * 1.5**2)
    x = np.array([1.0, -2.0], dtype=np.float32)
    (loss, first), g = m.value_and_grad("aux32", has_aux=True)(x)
    assert loss == 5.0 and first == 1.0
    assert g.dtype == np.float32 and g.tolist() == [2.0, -4.0]


# ---------------------------------------------------------------- has_aux


def test_has_aux(m: arden.Module) -> None:
    rng = np.random.default_rng(2)
    w, x = rng.normal(size=3), rng.normal(size=3)
    g, (wx, n) = m.grad("with_aux", has_aux=True)(w, x)
    np.testing.assert_allclose(g, 2 * w * x, rtol=1e-14)
    np.testing.assert_allclose(wx, w * x, rtol=1e-14)
    assert n == 3
    (loss, (wx2, n2)), g2 = m.value_and_grad("with_aux", has_aux=True)(w, x)
    assert loss == pytest.approx(float(np.sum(w * w * x)), rel=1e-14)
    np.testing.assert_array_equal(g2, g)
    np.testing.assert_array_equal(wx2, wx)
    g3, _ = m.grad("with_aux", argnums=1, has_aux=True)(w, x)
    np.testing.assert_allclose(g3, w * w, rtol=1e-14)
    with pytest.raises(TypeError, match=r"has_aux=True needs a result \(loss, aux\); `cube` returns f64"):
        m.grad("cube", has_aux=True)


def test_has_aux_in_vjp_and_jvp(m: arden.Module) -> None:
    rng = np.random.default_rng(5)
    w, x, v = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3)
    y, pull, (wx, n) = m.vjp("with_aux", has_aux=True)(w, x)
    assert y == pytest.approx(float(np.sum(w * w * x)), rel=1e-14)
    np.testing.assert_allclose(wx, w * x, rtol=1e-14)
    assert n == 3
    gw, gx = pull(2.0)
    np.testing.assert_allclose(gw, 4 * w * x, rtol=1e-14)
    np.testing.assert_allclose(gx, 2 * w * w, rtol=1e-14)
    y2, ydot, (wx2, n2) = m.jvp("with_aux", has_aux=True)((w, x), (v, None))
    assert y2 == y and n2 == 3
    assert ydot == pytest.approx(float(np.sum(2 * w * v * x)), rel=1e-12)
    with pytest.raises(TypeError, match="vjp of `cube` with has_aux=True needs a result"):
        m.vjp("cube", has_aux=True)


# ---------------------------------------------------------------- keywords


def test_keyword_arguments(m: arden.Module) -> None:
    x, w = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    assert m.wsum(x, w) == m.wsum(x, w=w) == m.wsum(w=w, x=x) == 19.0
    np.testing.assert_array_equal(m.grad("wsum")(w=w, x=x), 2 * w * x)
    np.testing.assert_array_equal(m.grad("wsum", argnums=1)(x, w=w), x * x)
    assert m.grad(m.grad("scaled"))(a=3.0, x=2.0) == pytest.approx(36.0)
    y, pull = m.vjp("wsum")(x, w=w)
    assert y == 19.0
    assert m.wsum(x, w=w, count_ops=True)[0] == 19.0
    with pytest.raises(TypeError, match="entry `wsum` has no parameter named `v` \\(parameters: x, w\\)"):
        m.wsum(x, v=w)
    with pytest.raises(TypeError, match="two values for parameter `x`"):
        m.wsum(x, x=x)
    with pytest.raises(TypeError, match=r"entry `wsum` takes 2 arguments \(x: \[n\]f64, w: \[n\]f64\), but 1 was given: missing `w`"):
        m.wsum(x)


# ---------------------------------------------------------------- trees


def fd_tree(f, leaves, eps=1e-6):
    """Central differences of scalar f(leaves) for every element of every leaf."""
    out = []
    for k, leaf in enumerate(leaves):
        arr = np.array(leaf, dtype=np.float64)
        g = np.zeros_like(arr)
        for j in np.ndindex(arr.shape):
            p, q = [np.array(l, dtype=np.float64) for l in leaves], [np.array(l, dtype=np.float64) for l in leaves]
            p[k][j] += eps
            q[k][j] -= eps
            g[j] = (f(p) - f(q)) / (2 * eps)
        out.append(g)
    return out


def test_dict_parameters_and_gradients(m: arden.Module) -> None:
    rng = np.random.default_rng(3)
    w, x, b = rng.normal(size=4), rng.normal(size=4), 0.3
    params = {"w": w, "b": b}  # sorted keys: b, w (the tuple's order)
    assert m.model(params, x) == pytest.approx(float(np.sum(np.tanh(w * x + b))), rel=1e-14)
    g = m.grad("model")(params, x)
    assert isinstance(g, dict) and sorted(g) == ["b", "w"]
    gb, gw = fd_tree(lambda ls: m.model({"b": float(ls[0]), "w": ls[1]}, x), [b, w])
    assert g["b"] == pytest.approx(float(gb), rel=1e-6)
    np.testing.assert_allclose(g["w"], gw, rtol=1e-6)
    (v, gg) = m.value_and_grad("model")(params, x)
    assert v == m.model(params, x) and gg["b"] == g["b"]
    _, pull = m.vjp("model")(params, x)
    pb = pull(1.0)[0]
    assert isinstance(pb, dict) and pb["b"] == pytest.approx(g["b"])
    with pytest.raises(arden.ShapeError, match=r"parameter `p` is a tuple of 2 components .* dict of 3 entries"):
        m.model({"w": w, "b": b, "c": 1.0}, x)
    with pytest.raises(TypeError, match=r"parameter `x` is \[n\]f64, but was given a dict"):
        m.model(params, {"x": x})


def test_nested_trees_keep_their_structure(m: arden.Module) -> None:
    rng = np.random.default_rng(4)
    w, x = rng.normal(size=3), rng.normal(size=3)
    p = {"layer": [w, 0.2], "scale": 1.5}
    want = 1.5 * np.sum(np.sin(w * x + 0.2))
    assert m.nested(p, x) == pytest.approx(float(want), rel=1e-13)
    g = m.grad("nested")(p, x)
    assert isinstance(g, dict) and isinstance(g["layer"], list) and isinstance(g["layer"][0], np.ndarray)
    gw, gb, gs = fd_tree(lambda ls: m.nested({"layer": [ls[0], float(ls[1])], "scale": float(ls[2])}, x), [w, 0.2, 1.5])
    np.testing.assert_allclose(g["layer"][0], gw, rtol=1e-6)
    assert g["layer"][1] == pytest.approx(float(gb), rel=1e-6)
    assert g["scale"] == pytest.approx(float(gs), rel=1e-6)
    # a list of arrays as a tuple parameter; its gradient is a list
    gl = m.grad("lst")([w, 2.0])
    assert isinstance(gl, list)
    np.testing.assert_allclose(gl[0], 4.0 * w, rtol=1e-14)
    assert gl[1] == pytest.approx(float(np.sum(w * w)), rel=1e-14)
    # tuples stay tuples
    assert isinstance(m.grad("lst")((w, 2.0)), tuple)


# ---------------------------------------------------------------- errors, bools


def test_shape_errors_name_the_parameter(m: arden.Module) -> None:
    x = np.ones(3)
    with pytest.raises(arden.ShapeError, match=r"parameter `w` expects shape \[n\]f64 but was given shape \[4\] \(with n = 3 from parameter `x`\)"):
        m.wsum(x, np.ones(4))
    with pytest.raises(arden.ShapeError, match=r"parameter `x` expects shape \[n\]f64 but was given shape \[3\] \(with n = 2 from parameter `p.1`\)"):
        m.model((0.0, np.ones(2)), x)
    with pytest.raises(arden.ShapeError, match=r"parameter `w`"):
        m.grad("wsum")(x, np.ones(2))
    # the parameter that disagrees with the others is named, even when it
    # comes first (it used to be reported as an error about `x`)
    with pytest.raises(arden.ShapeError, match=r"parameter `w` expects shape \[n\]f64 but was given shape \[4\] \(with n = 3 from parameter `x`\)"):
        m.three(np.ones(4), x, x)
    with pytest.raises(arden.ShapeError, match=r"parameter `y` .* \(with n = 3 from parameter `w`\)"):
        m.three(x, x, np.ones(5))


def test_bool_arrays_are_numbers(m: arden.Module) -> None:
    mask = np.array([True, False, True])
    assert m.wsum(np.ones(3), mask) == 2.0
    np.testing.assert_array_equal(m.grad("wsum")(np.ones(3), mask), [2.0, 0.0, 2.0])


# ---------------------------------------------------------------- laziness


def test_compile_is_lazy(backend: str) -> None:
    m = arden.compile(SRC, backend=backend)
    assert not any(m._native.is_compiled("call", e) for e in m.entries)
    assert m.cube(1.0) == pytest.approx(1 + np.sin(1.0))
    assert [e for e in m.entries if m._native.is_compiled("call", e)] == ["cube"]
    m.grad("wsum")
    assert not m._native.is_compiled("call", m.grad("wsum")._native_name)
    # errors of the program itself are still reported by compile
    with pytest.raises(arden.CompileError):
        arden.compile(SRC + "entry bad (x: f64) : f64 = y\n", backend=backend)


@pytest.mark.skipif(not arden.have_c_compiler(), reason="needs a C compiler")
def test_lazy_compile_does_not_wait_for_the_c_compiler(tmp_path, monkeypatch) -> None:
    # a fresh cache: nothing compiled before
    monkeypatch.setenv("ARDEN_CACHE_DIR", str(tmp_path))
    src = SRC + "".join(f"entry e{k} [n] (x: [n]f64) : f64 = sum (for i. exp (x[i] * {k}.0))\n" for k in range(8))
    t = time.perf_counter()
    m = arden.compile(src, backend="c")
    t_compile = time.perf_counter() - t
    t = time.perf_counter()
    m.e3(np.ones(2))
    t_first = time.perf_counter() - t
    # compile() runs no C compiler, the first call runs one: compile is
    # the faster of the two (by a wide margin, even on a loaded machine)
    assert t_compile < t_first
    assert [e for e in m.entries if m._native.is_compiled("call", e)] == ["e3"]


# ---------------------------------------------------------------- vmap


def test_vmap_maps_entries_and_derivatives(m: arden.Module) -> None:
    xs, w = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.0]]), np.array([2.0, 1.0])
    got = m.vmap("wsum", in_axes=(0, None))(xs, w)
    np.testing.assert_allclose(got, [m.wsum(x, w) for x in xs])
    # per-row gradients: vmap of grad, one compiled call
    g = m.vmap(m.grad("wsum"), in_axes=(0, None))(xs, w)
    np.testing.assert_allclose(g, [m.grad("wsum")(x, w) for x in xs])
    # both mapped; a tuple result comes back as a tuple of stacked parts
    a, b = m.vmap("pair")(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(a, [1.0, 2.0, 3.0])
    np.testing.assert_allclose(b, [1.0, 4.0, 9.0])
    # a dict argument mapped part by part, its gradient in the same structure
    p = {"b": np.array([0.1, 0.2]), "w": np.array([[1.0, 2.0], [3.0, 4.0]])}
    x = np.array([0.5, -0.5])
    gp = m.vmap(m.grad("model"), in_axes=(0, None))(p, x)
    for k in range(2):
        one = m.grad("model")({"b": p["b"][k], "w": p["w"][k]}, x)
        np.testing.assert_allclose(gp["b"][k], one["b"])
        np.testing.assert_allclose(gp["w"][k], one["w"])
    assert m.vmap("wsum", in_axes=(0, None)) is m.vmap("wsum", in_axes=[0, None])


def test_vmap_errors(m: arden.Module) -> None:
    with pytest.raises(ValueError, match="in_axes entries are 0"):
        m.vmap("wsum", in_axes=(1, None))
    with pytest.raises(ValueError, match="in_axes has 1 entries"):
        m.vmap("wsum", in_axes=(0,))
    with pytest.raises(ValueError, match="at least one argument"):
        m.vmap("wsum", in_axes=(None, None))
    with pytest.raises(arden.ShapeError, match="batch"):
        m.vmap("wsum")(np.ones((3, 2)), np.ones((4, 2)))
