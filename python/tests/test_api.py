"""Introspection, IR, documentation and the type stub."""

from __future__ import annotations

import ast
import inspect
import pathlib
import pydoc

import numpy as np
import pytest

import arden

from conftest import EXAMPLES, run_cli


def test_entries_and_signatures() -> None:
    m = arden.load(EXAMPLES / "gmm.ard", backend="interp")
    assert m.entries == ("gmm_objective",)
    sig = m.gmm_objective.signature
    assert [p.name for p in sig.params] == ["alpha", "mu", "q", "l", "x", "gamma", "m"]
    assert [p.type for p in sig.params] == ["[k]f64", "[k][d]f64", "[k][d]f64", "[k][(d*d - d)/2]f64", "[n][d]f64", "f64", "i64"]
    assert sig.params[3].dims == ("k", "(d*d - d)/2")
    assert sig.params[6].dtype == np.int64 and sig.params[6].rank == 0
    assert sig.sizes == ("d", "k", "n")
    assert sig.result == "f64"
    assert str(sig).startswith("gmm_objective [d][k][n] (alpha: [k]f64) (mu: [k][d]f64)")
    assert "gmm_objective [d][k][n]" in m.gmm_objective.__doc__
    assert m["gmm_objective"] is m.gmm_objective
    assert "gmm_objective" in dir(m)


def test_ir_stages(cli) -> None:
    m = arden.load(EXAMPLES / "logsumexp.ard", backend="interp")
    for stage in ("lower", "ad", "opt"):
        text = m.ir("lse", stage=stage)
        assert text.startswith("entry lse [n]")
        r = run_cli(cli, ["ir", str(EXAMPLES / "logsumexp.ard"), "--entry", "lse", "--stage", stage])
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == text.strip()
    r = run_cli(cli, ["ir", str(EXAMPLES / "logsumexp.ard"), "--entry", "lse"])
    assert r.stdout.strip() == m.ir("lse").strip()  # the same default stage
    with pytest.raises(ValueError, match="stage"):
        m.ir("lse", stage="nope")


def test_opt_levels(backend: str) -> None:
    src = (EXAMPLES / "gmm_grad.ard").read_text()
    m0 = arden.compile(src, backend=backend, opt_level=0)
    m1 = arden.compile(src, backend=backend, opt_level=1)
    assert (m0.opt_level, m1.opt_level) == (0, 1)
    # level 0 runs the IR of the ad stage unchanged
    assert m0.ir("gmm_gradient", "opt") == m0.ir("gmm_gradient", "ad")
    rng = np.random.default_rng(3)
    args = (rng.normal(size=2), rng.normal(size=(2, 3)), rng.normal(size=(2, 3)) * 0.3,
            rng.normal(size=(2, 3)) * 0.3, rng.normal(size=(4, 3)), 1.0, 0)
    for a, b in zip(m0.gmm_gradient(*args), m1.gmm_gradient(*args)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(m0.grad("gmm_objective", 1)(*args), m1.grad("gmm_objective", 1)(*args), rtol=1e-10, atol=1e-12)


def test_help_and_docstrings() -> None:
    text = pydoc.render_doc(arden, renderer=pydoc.plaintext)
    for word in ("compile", "load", "grad", "ShapeError", "CompileError", "backend"):
        assert word in text
    public = [getattr(arden, n) for n in arden.__all__ if n != "__version__"]
    for obj in public:
        assert inspect.getdoc(obj), obj
    for cls in (arden.Module, arden.Entry, arden.Signature, arden.Param):
        for name, member in vars(cls).items():
            if callable(member) and not name.startswith("_"):
                assert inspect.getdoc(member), f"{cls.__name__}.{name}"


def test_stub_declares_every_public_name() -> None:
    pkg = pathlib.Path(arden.__file__).parent
    stub = ast.parse((pkg / "__init__.pyi").read_text())
    declared = set()
    for node in stub.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
        elif isinstance(node, ast.Assign):
            declared.update(t.id for t in node.targets if isinstance(t, ast.Name))
    assert set(arden.__all__) <= declared
    assert (pkg / "py.typed").exists()
    for name in ("grad", "value_and_grad", "vjp", "jvp", "jacfwd", "jacrev", "ir", "entry"):
        assert name in [n.name for c in stub.body if isinstance(c, ast.ClassDef) and c.name == "Module" for n in c.body if isinstance(n, ast.FunctionDef)]


def test_module_repr_and_backend() -> None:
    m = arden.compile("entry f (x: f64) : f64 = x", backend="interp")
    assert m.backend == "interp" and "entries=['f']" in repr(m)
    if arden.have_c_compiler():
        assert arden.compile("entry f (x: f64) : f64 = x").backend == "c"


def test_identity_entry_on_the_default_backend() -> None:
    m = arden.compile("entry f [n] (x: [n]f64) : [n]f64 = x")
    assert np.array_equal(m.f(np.arange(3.0)), np.arange(3.0))


def test_threads_option(backend: str) -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend=backend, threads=2)
    assert m.threads == 2
    x = np.arange(100000.0)
    assert m.dot(x, x, threads=1) == pytest.approx(float(x @ x), rel=1e-12)
    assert m.dot(x, x) == pytest.approx(float(x @ x), rel=1e-12)


def test_trace_and_precision(backend: str, capfd: pytest.CaptureFixture[str]) -> None:
    src = 'entry f [n] (x: [n]f64) : f64 = sum (trace "x" (for i. x[i] / 3.0))\n'
    x = np.array([1.0, 2.0])
    m = arden.compile(src, backend=backend)
    assert m.f(x) == pytest.approx(1.0)
    assert capfd.readouterr().err == "x: [0.3333333333333333, 0.6666666666666666]\n"
    # derivatives pass through a trace; the primal is printed
    np.testing.assert_allclose(m.grad("f")(x), [1 / 3, 1 / 3])
    assert capfd.readouterr().err == "x: [0.3333333333333333, 0.6666666666666666]\n"
    quiet = arden.compile(src, backend=backend, trace=False)
    assert quiet.f(x) == pytest.approx(1.0)
    assert capfd.readouterr().err == ""
    single = arden.compile(src, backend=backend, precision="f32")
    r = single.f(x.astype(np.float32))
    assert r == pytest.approx(1.0, rel=1e-6) and "f64" not in single.ir("f", "opt")
    assert capfd.readouterr().err == "x: [0.33333334, 0.6666667]\n"
    with pytest.raises(ValueError, match="precision"):
        arden.compile(src, precision="f16")
