"""Every entry of every example program, called from Python with NumPy
inputs, gives the command line's result."""

from __future__ import annotations

import json
import zlib
from typing import Any, Dict

import numpy as np
import pytest

import arden

from conftest import BACKENDS, EXAMPLES, cli_json

EXAMPLE_FILES = sorted(EXAMPLES.glob("*.ard"))

# Scalar parameters whose generic value (0.5 for floats, 3 for integers)
# does not make sense for the example.
SCALARS: Dict[str, Any] = {
    "lo": 0.0,
    "hi": 1.0,
    "h": 0.01,
    "steps": 4,
    "lr": 0.1,
    "m": 0,
    "gamma": 1.0,
    "omega": 2.0,
    "zeta": 0.1,
}
SIZE = 3


def make_args(sig: arden.Signature, rng: np.random.Generator) -> list:
    sizes = {s: SIZE for s in sig.sizes}

    def dim(expr: str) -> int:
        return int(eval(expr.replace("/", "//"), {"__builtins__": {}}, dict(sizes)))

    def value(p: arden.Param) -> Any:
        if p.components is not None:
            return tuple(value(c) for c in p.components)
        shape = tuple(dim(d) for d in p.dims)
        if not shape:
            if p.name in SCALARS:
                v = SCALARS[p.name]
                return int(v) if p.dtype.kind == "i" else float(v)
            return {"f": 0.5, "i": 3, "b": True}[p.dtype.kind]
        if p.dtype.kind == "f":
            return rng.uniform(0.05, 0.95, size=shape).astype(p.dtype)
        if p.dtype.kind == "i":
            return rng.integers(0, 3, size=shape).astype(p.dtype)
        return rng.integers(0, 2, size=shape).astype(bool)

    return [value(p) for p in sig.params]


def to_json(v: Any) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(to_json(x) for x in v) + "]"
    if isinstance(v, np.ndarray):
        return json.dumps(v.tolist())
    return json.dumps(v)


def same(py: Any, cli: Any, exact: bool) -> bool:
    if isinstance(py, tuple):
        return isinstance(cli, list) and len(py) == len(cli) and all(same(a, b, exact) for a, b in zip(py, cli))
    a = np.asarray(py)
    b = np.asarray(cli, dtype=a.dtype)
    if a.shape != b.shape:
        return False
    if exact:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
    if a.dtype.kind == "f":
        return bool(np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True))
    return bool(np.array_equal(a, b))


CASES = []
for f in EXAMPLE_FILES:
    for e in arden.load(f, backend="interp").entries:
        CASES.append((f.name, e))


def test_every_example_is_covered() -> None:
    assert len(EXAMPLE_FILES) >= 10
    assert len(CASES) >= 30


_modules: Dict[Any, arden.Module] = {}


def module(name: str, backend: str) -> arden.Module:
    key = (name, backend)
    if key not in _modules:
        _modules[key] = arden.load(EXAMPLES / name, backend=backend)
    return _modules[key]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("file,entry", CASES)
def test_example_matches_cli(cli: Any, file: str, entry: str, backend: str) -> None:
    m = module(file, backend)
    sig = getattr(m, entry).signature
    args = make_args(sig, np.random.default_rng(zlib.crc32(f"{file}:{entry}".encode())))
    expected = cli_json(
        cli,
        ["run", str(EXAMPLES / file), "--entry", entry, "--backend", "interp"]
        + [x for a in args for x in ("--arg", to_json(a))],
    )
    got = getattr(m, entry)(*args)
    # the same interpreter gives the same bits; the C backend may reassociate sums
    assert same(got, expected, exact=backend == "interp"), (got, expected)
    # results are NumPy arrays, Python scalars and tuples
    def kinds(v: Any) -> None:
        if isinstance(v, tuple):
            for x in v:
                kinds(x)
        else:
            assert isinstance(v, (np.ndarray, float, int, bool)), type(v)
    kinds(got)
