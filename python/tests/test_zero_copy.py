"""Zero copy on both backends: contiguous inputs of the parameter's dtype
are read in place (bool arrays are copied once by the interpreter), array
results are NumPy arrays over the backend's own buffer, and a result that
is an input comes back as an independent copy.

Copies are observed two ways: data addresses, and the process's peak
resident memory (VmHWM, reset through /proc/self/clear_refs) around a call
on a large array: a copy of the input (or of the result) would raise the
peak by the array's size."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import arden
from arden import _arden

SRC = """
entry sum64 [n] (x: [n]f64) : f64 = sum x
entry isum32 [n] (x: [n]i32) : i32 = sum x
entry ident [n] (x: [n]f64) : [n]f64 = x
entry ident_b [n] (x: [n]bool) : [n]bool = x
entry ident2 [n][m] (a: [n][m]f64) : [n*m]f64 = flatten a
entry first [n][m] (a: [n][m]f64) : [m]f64 = a[0]
entry scale [n] (x: [n]f64) (s: f64) : [n]f64 = for i. x[i] * s
entry neg [n] (x: [n]bool) : [n]bool = for i. !x[i]
entry pair [n] (x: [n]f64) : ([n]f64, [n]f64) = let y = for i. x[i] + 1.0 in (y, y)
entry row [n][m] (a: [n][m]f64) : [m]f64 = let b = for i j. a[i, j] * 2.0 in b[1]
"""

BIG = 10_000_000  # 80 MB of float64


@pytest.fixture
def m(backend: str) -> arden.Module:
    return arden.compile(SRC, backend=backend)


def _kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_growth(call) -> int:
    """Bytes by which the peak resident memory exceeds the resident memory
    before `call()` (whose result is kept alive until the peak is read)."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
    except OSError:
        pytest.skip("cannot reset the peak resident memory here")
    before = _kib("VmRSS")
    result = call()
    growth = (_kib("VmHWM") - before) * 1024
    del result
    return growth


needs_proc = pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="Linux /proc only")


def assert_owned_by_arden(r: np.ndarray) -> None:
    """`r` is a view of a buffer arden made, owned by its base."""
    assert isinstance(r.base, _arden.Buffer), type(r.base)
    assert not r.flags.owndata and r.flags.c_contiguous and r.flags.writeable
    assert r.base.address == r.__array_interface__["data"][0]


def test_input_addresses_are_used_in_place(m: arden.Module) -> None:
    x = np.arange(6.0)
    assert _arden.borrowed_addresses(m.sum64._prepare((x,))) == [x.ctypes.data]
    xi = np.arange(6, dtype=np.int32)
    assert _arden.borrowed_addresses(m.isum32._prepare((xi,))) == [xi.ctypes.data]


@needs_proc
def test_inputs_are_not_copied(m: arden.Module) -> None:
    x = np.ones(BIG)
    x[0] = 2.0
    grew = peak_growth(lambda: m.sum64(x))
    assert grew < x.nbytes // 2, f"peak grew by {grew} bytes: the {x.nbytes}-byte input was copied"
    assert m.sum64(x) == BIG + 1.0
    xi = np.ones(2 * BIG, dtype=np.int32)
    grew = peak_growth(lambda: m.isum32(xi))
    assert grew < xi.nbytes // 2, f"peak grew by {grew} bytes: the {xi.nbytes}-byte input was copied"


@needs_proc
def test_results_are_not_copied(m: arden.Module) -> None:
    x = np.ones(BIG)
    # the result's buffer (80 MB) is needed once; a copy would need it twice
    grew = peak_growth(lambda: m.scale(x, 3.0))
    assert grew < 1.5 * x.nbytes, f"peak grew by {grew} bytes for an {x.nbytes}-byte result"


def test_results_are_views_of_the_backends_buffer(m: arden.Module, backend: str) -> None:
    x = np.arange(5.0)
    r = m.scale(x, 2.0)
    assert np.array_equal(r, x * 2.0)
    assert_owned_by_arden(r)
    assert r.base.allocator == ("c" if backend == "c" else "rust")
    assert r.ctypes.data != x.ctypes.data
    b = m.neg(np.array([True, False, True]))
    assert b.dtype == np.bool_ and b.tolist() == [False, True, False]
    assert_owned_by_arden(b)
    # a row of a larger buffer: the buffer is handed over, the view is the row
    rr = m.row(np.arange(6.0).reshape(3, 2))
    assert rr.tolist() == [4.0, 6.0]
    assert rr.base.address == rr.ctypes.data
    rr[0] = -1.0  # results belong to the caller
    assert rr[0] == -1.0


def test_results_sharing_a_buffer_are_independent(m: arden.Module) -> None:
    a, b = m.pair(np.arange(3.0))
    assert a.ctypes.data != b.ctypes.data
    a[0] = 100.0
    assert b.tolist() == [1.0, 2.0, 3.0]
    assert_owned_by_arden(a)
    assert_owned_by_arden(b)


@pytest.mark.parametrize("entry", ["ident", "ident2", "first"])
def test_a_result_that_is_an_input_outlives_it(m: arden.Module, entry: str) -> None:
    x = np.arange(6.0)
    arg = x if entry == "ident" else x.reshape(2, 3)
    expected = {"ident": x.copy(), "ident2": x.copy(), "first": x[:3].copy()}[entry]
    y = getattr(m, entry)(arg)
    assert np.array_equal(y, expected)
    assert_owned_by_arden(y)
    assert not np.shares_memory(y, x)
    x[:] = -7.0  # writing the input leaves the result alone
    assert np.array_equal(y, expected)
    del x, arg
    gc.collect()
    junk = [np.full(6, 13.0) for _ in range(100)]  # reuse the freed memory
    assert np.array_equal(y, expected)
    y[1] = 42.0
    assert y[1] == 42.0
    del junk


def test_bool_inputs_and_results(m: arden.Module) -> None:
    xb = np.array([True, False, True])
    y = m.ident_b(xb)
    assert y.dtype == np.bool_ and y.tolist() == [True, False, True]
    assert not np.shares_memory(y, xb)
    xb[0] = False
    assert y.tolist() == [True, False, True]
    # bytes other than 0 and 1 viewed as bool come back as proper bools
    raw = np.array([0, 2, 255], dtype=np.uint8).view(np.bool_)
    assert m.neg(raw).tolist() == [True, False, False]
    assert m.ident_b(raw).view(np.uint8).tolist() == [0, 1, 1]


def test_buffers_are_freed_with_their_arrays(m: arden.Module) -> None:
    x = np.ones(1000)
    r = m.scale(x, 2.0)
    owner = r.base
    v = r[10:20]  # a view keeps the buffer through `r`
    del r
    gc.collect()
    assert v.tolist() == [2.0] * 10
    assert owner.address != 0
    del v, owner
    gc.collect()
