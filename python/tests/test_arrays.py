"""Arguments: zero-copy for contiguous arrays of the right dtype, copies
for the rest, lossless conversions only; results without a copy."""

from __future__ import annotations

import numpy as np
import pytest

import arden
from arden import _arden

from conftest import EXAMPLES, run_cli

TYPES = """
entry sum64 [n] (x: [n]f64) : f64 = sum x
entry sum32 [n] (x: [n]f32) : f32 = sum x
entry isum [n] (x: [n]i64) : i64 = sum x
entry isum32 [n] (x: [n]i32) : i32 = sum x
entry count [n] (x: [n]bool) : i64 = sum (for i. if x[i] then 1 else 0)
entry neg [n] (x: [n]bool) : [n]bool = for i. !x[i]
entry scale [n][m] (a: [n][m]f64) (s: f64) : [n][m]f64 = for i j. a[i, j] * s
entry rowsums [n][m] (a: [n][m]f64) : [n]f64 = for i. sum a[i]
entry half (x: f32) : f32 = x * 0.5f32
entry twice32 (k: i32) : i32 = k * 2i32
entry ident [n] (x: [n]f64) : [n]f64 = x
"""


@pytest.fixture
def m(backend: str) -> arden.Module:
    return arden.compile(TYPES, backend=backend)


def test_contiguous_inputs_are_not_copied(m: arden.Module) -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    conv = m.scale._prepare((a, 2.0))
    assert conv[0] is a
    assert _arden.borrowed_addresses(conv) == [a.ctypes.data, conv[1].ctypes.data]
    x32 = np.ones(5, dtype=np.float32)
    xi = np.arange(5, dtype=np.int32)
    xb = np.array([True, False])
    assert _arden.borrowed_addresses(m.sum32._prepare((x32,))) == [x32.ctypes.data]
    assert _arden.borrowed_addresses(m.isum32._prepare((xi,))) == [xi.ctypes.data]
    assert _arden.borrowed_addresses(m.count._prepare((xb,))) == [xb.ctypes.data]
    # a contiguous slice (a view into a larger buffer) is read in place too
    big = np.arange(10.0)
    view = big[2:7]
    assert _arden.borrowed_addresses(m.sum64._prepare((view,))) == [big.ctypes.data + 2 * 8]
    assert m.sum64(view) == float(np.sum(view))


def test_results_are_handed_over_without_a_copy(m: arden.Module) -> None:
    r = m.scale(np.ones((2, 3)), 2.0)
    assert isinstance(r, np.ndarray) and r.shape == (2, 3) and r.dtype == np.float64
    # the array wraps the backend's buffer (a Rust Vec or the C runtime's
    # allocation), owned by its base, not a NumPy copy of it
    assert isinstance(r.base, _arden.Buffer)
    assert r.base.address == r.__array_interface__["data"][0]
    assert not r.flags.owndata and r.flags.c_contiguous and r.flags.writeable
    r[0, 0] = 5.0  # results belong to the caller
    assert r[0, 0] == 5.0


def test_result_does_not_alias_the_input(m: arden.Module) -> None:
    x = np.arange(4.0)
    y = m.ident(x)
    assert np.array_equal(y, x)
    y[0] = 100.0
    assert x[0] == 0.0


@pytest.mark.parametrize(
    "make",
    [
        lambda a: a[:, ::2],  # steps
        lambda a: a[::-1, :],  # negative steps
        lambda a: a.T.copy().T,  # Fortran order
        lambda a: np.asfortranarray(a),
        lambda a: a.T.T[1:, 1:],
    ],
    ids=["step", "reversed", "fortran-view", "fortran", "offset-view"],
)
def test_non_contiguous_inputs_are_copied_and_correct(m: arden.Module, make) -> None:
    base = np.arange(30, dtype=np.float64).reshape(5, 6) * 0.25
    a = make(base)
    expected = a.sum(axis=1)
    assert np.array_equal(m.rowsums(a), expected)
    assert np.array_equal(m.scale(a, 3.0), a * 3.0)
    conv = m.rowsums._prepare((a,))
    assert conv[0].flags.c_contiguous and np.array_equal(conv[0], a)


def test_transposes_are_copied_and_correct(m: arden.Module) -> None:
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    assert np.array_equal(m.rowsums(a.T), a.T.sum(axis=1))
    assert np.array_equal(m.scale(a.T, 0.5), a.T * 0.5)


def test_unaligned_and_byteswapped_inputs(m: arden.Module) -> None:
    buf = np.zeros(8 * 5 + 1, dtype=np.uint8)
    una = buf[1:].view(np.float64)
    una[:] = [1, 2, 3, 4, 5]
    assert not una.flags.aligned
    assert m.sum64(una) == 15.0
    swapped = np.arange(4, dtype=">f8")
    assert m.sum64(swapped) == 6.0


def test_lossless_conversions(m: arden.Module) -> None:
    assert m.sum64(np.arange(4, dtype=np.int64)) == 6.0
    assert m.sum64(np.arange(4, dtype=np.int32)) == 6.0
    assert m.sum64(np.arange(4, dtype=np.float32)) == 6.0
    assert m.sum64(np.arange(4, dtype=np.uint8)) == 6.0
    assert m.isum(np.arange(4, dtype=np.int32)) == 6
    assert m.sum32(np.arange(4, dtype=np.int16)) == 6.0
    assert m.sum32(np.arange(4, dtype=np.float16)) == 6.0
    # lists and Python scalars have no dtype: converted when the values fit
    assert m.sum64([1, 2, 3]) == 6.0
    assert m.sum64([1.5, 2]) == 3.5
    assert m.sum32([0.5, 0.25]) == 0.75
    assert m.isum([1, 2, 3]) == 6
    assert m.isum32([1, 2, 3]) == 6
    assert m.count([True, False, True]) == 2
    assert m.scale([[1, 2], [3, 4]], 2) == pytest.approx(np.array([[2, 4], [6, 8]]))
    assert m.half(3) == 1.5
    assert m.half(np.float32(3.0)) == 1.5
    assert m.twice32(21) == 42
    assert m.sum64([]) == 0.0
    assert m.scale(np.ones((0, 3)), 1.0).shape == (0, 3)


def test_lossy_conversions_are_refused(m: arden.Module) -> None:
    with pytest.raises(TypeError, match=r"parameter `x` expects f32 values, but was given an array of dtype float64.*astype\(numpy.float32\)"):
        m.sum32(np.ones(3))
    with pytest.raises(TypeError, match="expects i64 values, but was given an array of dtype float64"):
        m.isum(np.ones(3))
    with pytest.raises(TypeError, match="expects i32 values, but was given an array of dtype int64"):
        m.isum32(np.arange(3))
    with pytest.raises(TypeError, match="expects f32 values"):
        m.sum32(np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError, match="expects bool values"):
        m.count(np.arange(3))
    with pytest.raises(TypeError, match="expects f64 values"):
        m.sum64(np.array([1 + 1j]))
    with pytest.raises(TypeError, match="expects i64 values"):
        m.isum([1.5, 2.0])
    with pytest.raises(TypeError, match="expects bool values"):
        m.count([1, 0])
    with pytest.raises(OverflowError, match="does not fit i32"):
        m.twice32(2**40)
    with pytest.raises(OverflowError, match="does not fit i64"):
        m.isum([2**70])
    with pytest.raises(OverflowError, match="overflows f32"):
        m.half(1e300)
    with pytest.raises(TypeError, match="ragged|cannot make an array"):
        m.scale([[1.0, 2.0], [3.0]], 1.0)


def test_bools_convert_to_numbers(m: arden.Module) -> None:
    # as NumPy and JAX convert them: False, True -> 0, 1 (a mask summed as floats)
    assert m.sum64(np.array([True, False, True])) == 2.0
    assert m.sum64([True, True]) == 2.0
    assert m.sum32(np.array([True, True, True])) == 3.0
    assert m.isum(np.array([True, False])) == 1
    assert m.isum32(np.array([True, True])) == 2


def test_scalar_and_bool_results(m: arden.Module) -> None:
    r = m.sum32(np.ones(3, dtype=np.float32))
    assert isinstance(r, float) and r == 3.0
    r = m.isum32(np.ones(3, dtype=np.int32))
    assert isinstance(r, int) and r == 3
    b = m.neg(np.array([True, False]))
    assert b.dtype == np.bool_ and b.tolist() == [False, True]


def test_count_ops_match_the_cli(backend: str, cli) -> None:
    m = arden.load(EXAMPLES / "dot.ard", backend=backend)
    r, counts = m.dot(np.ones(3), np.arange(3.0), count_ops=True)
    assert r == 3.0
    assert set(counts) == {"arith", "reads", "writes", "stored"}
    out = run_cli(cli, ["run", str(EXAMPLES / "dot.ard"), "--entry", "dot", "--arg", "[1,1,1]", "--arg", "[0,1,2]", "--count-ops"])
    assert out.returncode == 0, out.stderr
    line = [l for l in out.stderr.splitlines() if l.startswith("ops:")][0]
    cli_counts = dict(kv.split("=") for kv in line[len("ops: "):].split())
    for k, v in cli_counts.items():
        assert counts[k] == int(v), (k, counts, line)
    _, bigger = m.dot(np.ones(6), np.ones(6), count_ops=True)
    assert bigger["reads"] > counts["reads"]
