"""Compile, shape and run-time errors: their classes, messages and locations."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

import arden

from conftest import EXAMPLES, run_cli

BAD = """-- a program with an error on line 3
entry f (x: f64) : f64 =
  x + y
"""


def test_compile_error_is_rendered_with_location(tmp_path: pathlib.Path, cli) -> None:
    with pytest.raises(arden.CompileError) as info:
        arden.compile(BAD, name="bad.ard")
    e = info.value
    assert (e.line, e.column) == (3, 7)
    text = str(e)
    assert "unknown name `y`" in text
    assert "bad.ard:3:7" in text
    assert "x + y" in text and "^" in text
    assert "hint: did you mean `x`?" in text
    assert e.messages == ["unknown name `y`"]
    assert isinstance(e, arden.ArdenError)
    # the same rendering as `arden check`
    f = tmp_path / "bad.ard"
    f.write_text(BAD)
    r = run_cli(cli, ["check", str(f)])
    assert r.returncode == 1
    with pytest.raises(arden.CompileError) as info2:
        arden.load(f)
    assert str(info2.value).strip() in r.stderr
    assert (info2.value.line, info2.value.column) == (3, 7)


def test_several_compile_errors_report_the_first_location() -> None:
    src = "entry f (x: f64) : f64 = x +\nentry g (x: i64) : f64 = x\n"
    with pytest.raises(arden.CompileError) as info:
        arden.compile(src)
    assert info.value.line is not None and info.value.line >= 1
    assert info.value.column is not None
    assert len(info.value.messages) >= 1


def test_load_missing_file() -> None:
    with pytest.raises(OSError):
        arden.load("/nonexistent/dir/x.ard")


def test_shape_error_has_the_cli_message(cli, backend: str) -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend=backend)
    with pytest.raises(arden.ShapeError) as info:
        m.dot(np.ones(3), np.ones(4))
    msg = str(info.value)
    assert msg == "parameter `b` expects shape [n]f64 but was given shape [4] (with n = 3 from parameter `a`)"
    r = run_cli(cli, ["run", str(EXAMPLES / "dot.ard"), "--entry", "dot", "--arg", "[1,1,1]", "--arg", "[1,1,1,1]"])
    assert r.returncode == 1 and msg in r.stderr
    assert isinstance(info.value, ValueError)


def test_rank_and_structure_errors(backend: str) -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend=backend)
    with pytest.raises(arden.ShapeError, match=r"parameter `a` expects \[n\]f64, but was given a value of type \[2\]\[2\]f64"):
        m.dot(np.ones((2, 2)), np.ones(2))
    with pytest.raises(arden.ShapeError, match="but was given a tuple of 2 values"):
        m.dot((1.0, 2.0), np.ones(2))
    with pytest.raises(arden.ShapeError, match=r"expects shape \[k\]\[m\]f64 but was given shape \[2\]\[2\]"):
        m.matmul(np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(TypeError, match=r"entry `dot` takes 2 arguments \(a: \[n\]f64, b: \[n\]f64\), but 1 was given"):
        m.dot(np.ones(2))


def test_tuple_parameters(backend: str) -> None:
    m = arden.compile(
        "entry f [n] (p: (f64, [n]f64)) (k: i64) : (f64, [n]f64) = (p.0 * f64 k, for i. p.1[i] + p.0)",
        backend=backend,
    )
    y, v = m.f((2.0, np.array([1.0, 2.0])), 3)
    assert y == 6.0 and np.array_equal(v, [3.0, 4.0])
    assert str(m.f.signature) == "f [n] (p: (f64, [n]f64)) (k: i64) : (f64, [n]f64)"
    with pytest.raises(arden.ShapeError, match=r"parameter `p` expects \(f64, \[n\]f64\), but was given"):
        m.f(np.ones(2), 3)
    with pytest.raises(arden.ShapeError):
        m.f((1.0, np.ones(2), 3.0), 3)


RUNTIME = """
entry at [n] (x: [n]f64) (i: i64) : f64 = x[i]
entry divide (a: i64) (b: i64) : i64 = a / b
entry coerce [n] (x: [n]f64) : [3]f64 = x :> [3]f64
"""


def test_runtime_errors_name_the_location(backend: str) -> None:
    m = arden.compile(RUNTIME, name="rt.ard", backend=backend)
    assert m.at(np.array([1.0, 2.0]), 1) == 2.0
    with pytest.raises(arden.RuntimeError) as info:
        m.at(np.array([1.0, 2.0]), 5)
    assert "rt.ard:2:" in str(info.value) and "5" in str(info.value)
    assert isinstance(info.value, RuntimeError)  # the built-in, too
    with pytest.raises(arden.RuntimeError, match="rt.ard:3:"):
        m.divide(1, 0)
    assert m.divide(7, 2) == 3
    with pytest.raises(arden.RuntimeError, match="rt.ard:4:"):
        m.coerce(np.ones(4))
    assert np.array_equal(m.coerce(np.ones(3)), np.ones(3))


def test_runtime_error_matches_cli(cli, tmp_path: pathlib.Path) -> None:
    f = tmp_path / "rt.ard"
    f.write_text(RUNTIME)
    r = run_cli(cli, ["run", str(f), "--entry", "divide", "--arg", "1", "--arg", "0", "--backend", "interp"])
    assert r.returncode == 1
    m = arden.load(f, backend="interp")
    with pytest.raises(arden.RuntimeError) as info:
        m.divide(1, 0)
    assert str(info.value) in r.stderr


def test_unknown_entry() -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend="interp")
    with pytest.raises(arden.EntryError, match="no entry point named `nope`; entry points: dot, matmul"):
        m.nope
    assert not hasattr(m, "nope")
    with pytest.raises(arden.EntryError):
        m.grad("nope")
    with pytest.raises(arden.EntryError):
        m.ir("nope")


def test_options_are_validated() -> None:
    src = "entry f (x: f64) : f64 = x"
    with pytest.raises(ValueError, match="backend"):
        arden.compile(src, backend="gpu")
    with pytest.raises(ValueError, match="opt_level"):
        arden.compile(src, opt_level=2)
    with pytest.raises(ValueError, match="threads"):
        arden.compile(src, threads=0)
    with pytest.raises(TypeError):
        arden.compile(b"entry f (x: f64) : f64 = x")  # type: ignore[arg-type]
    m = arden.compile(src, opt_level=0, threads=2, backend="interp")
    assert (m.opt_level, m.threads, m.backend) == (0, 2, "interp")
    with pytest.raises(ValueError, match="threads"):
        m.f(1.0, threads=0)


HOSTILE = [
    None,
    "text",
    {"a": 1},
    object(),
    [[1.0, 2.0], [3.0]],
    np.array(["a", "b"]),
    np.array([1 + 2j]),
    np.array([object()], dtype=object),
    2**70,
    [2**70],
    float("nan"),
    np.ones((2, 2, 2, 2, 2, 2, 2, 2, 2)),
    np.ones(0),
    np.ones((0, 3)),
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_arguments_raise_not_crash(value, backend: str) -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend=backend)
    try:
        r = m.dot(value, value)
    except (TypeError, ValueError, OverflowError, arden.ArdenError):
        return
    # what is accepted is a valid call and gives a float
    assert isinstance(r, float)


def test_failing_c_compiler(monkeypatch, tmp_path: pathlib.Path) -> None:
    """backend="c" asked for: a C compiler failure is a BackendError (on
    the first call: entries are compiled lazily); by default the entry
    falls back to the interpreter with a warning, as `arden run` does."""
    monkeypatch.setenv("CC", "/bin/false")
    monkeypatch.setenv("ARDEN_CACHE_DIR", str(tmp_path))
    src = "entry f (x: f64) : f64 = x * 3.0"
    m = arden.compile(src, backend="c")
    with pytest.raises(arden.BackendError, match="C backend"):
        m.f(2.0)
    m = arden.compile(src)
    with pytest.warns(arden.ArdenWarning, match="running on the interpreter instead"):
        assert m.f(2.0) == 6.0
    with pytest.warns(arden.ArdenWarning, match="running on the interpreter instead"):
        assert m.grad("f")(2.0) == 3.0


def test_arrays_beyond_available_memory_are_refused(backend: str) -> None:
    m = arden.compile("entry big (n: i64) : f64 = sum (replicate n 1.0)", name="big.ard", backend=backend)
    avail = int([l for l in open("/proc/meminfo") if l.startswith("MemAvailable:")][0].split()[1]) * 1024
    with pytest.raises(arden.RuntimeError, match="big.ard:1:"):
        m.big(2 * avail // 8)
    assert m.big(1000) == 1000.0
