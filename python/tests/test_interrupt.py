"""Ctrl-C interrupts a long call (issue 23, item 4); reading a source file is
bounded (item 5); the wrong Python values are TypeErrors naming the
parameter, and "too large" arrays are located errors (item 10)."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

import arden

# A call of a minute or more on either backend (the interpreter runs the
# sequential loop; the C backend the innermost `for`, which polls the stop
# flag between chunks of its iterations).
LONG = {
    "c": ("entry spin (n: i64) : f64 = sum (for (i < n). sin (f64 i))", 3_000_000_000),
    "interp": ("entry spin (n: i64) : f64 = loop acc = 0.0 for i < n do acc + sin (f64 i)", 3_000_000_000),
}

CHILD = r"""
import signal, sys, time
import arden
# Ctrl-C raises KeyboardInterrupt even where the suite was started with
# SIGINT ignored (a background job of a non-interactive shell), in which
# case Python installs no handler of its own
signal.signal(signal.SIGINT, signal.default_int_handler)
src, n, backend = sys.argv[1], int(sys.argv[2]), sys.argv[3]
m = arden.compile(src, name="spin.ard", backend=backend, threads=int(sys.argv[4]))
assert m.spin(10) == m.spin(10)  # compiled and warm
print("ready", flush=True)
t0 = time.monotonic()
try:
    m.spin(n)
    print("finished", time.monotonic() - t0, flush=True)
except KeyboardInterrupt:
    print("interrupted", time.monotonic(), flush=True)
# the module is still usable: the stop flag was cleared
print("after", m.spin(3), flush=True)
"""


@pytest.mark.parametrize("threads", [1, 2])
def test_ctrl_c_interrupts_a_long_call(backend: str, threads: int) -> None:
    if backend == "interp" and threads == 2:
        pytest.skip("the interpreter runs on one thread")
    src, n = LONG[backend]
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, src, str(n), backend, str(threads)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == "ready", line + child.stderr.read()
        time.sleep(1.0)
        child.send_signal(signal.SIGINT)
        sent = time.monotonic()
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
    lines = out.splitlines()
    assert lines and lines[0].startswith("interrupted"), out + err
    # CLOCK_MONOTONIC is system-wide: the child's clock is comparable
    delay = float(lines[0].split()[1]) - sent
    assert delay < 1.5, f"KeyboardInterrupt came {delay:.2f} s after SIGINT"
    expected = arden.compile(src, backend=backend).spin(3)
    assert lines[1] == f"after {expected}", out + err
    assert child.returncode == 0, err


def test_load_reads_a_bounded_prefix_of_a_device() -> None:
    """`/dev/zero` is read up to the source size limit once, not to the end."""
    if not os.path.exists("/dev/zero"):
        pytest.skip("no /dev/zero")
    with pytest.raises(arden.CompileError, match="source file is too large"):
        arden.load("/dev/zero")


def test_load_of_a_large_file_reports_without_rereading(tmp_path: pathlib.Path) -> None:
    f = tmp_path / "big.ard"
    with open(f, "wb") as out:
        out.write(b"-- " + b"x" * (3 << 20) + b"\n")
    with pytest.raises(arden.CompileError, match="source file is too large") as info:
        arden.load(f)
    assert (info.value.line, info.value.column) == (1, 1)


def test_load_of_a_fifo_reports_the_location(tmp_path: pathlib.Path) -> None:
    """A named pipe is read once: the compile error still has its line and
    column (the old error path read the file a second time, which blocks
    on a pipe)."""
    fifo = tmp_path / "prog.ard"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", 'printf "entry f (x: f64) : f64 =\\n  x + y\\n" > "$1"', "sh", str(fifo)])
    try:
        with pytest.raises(arden.CompileError) as info:
            arden.load(fifo)
        assert (info.value.line, info.value.column) == (2, 7)
    finally:
        writer.wait(timeout=10)


@pytest.mark.parametrize(
    "entry, value, given",
    [
        ("f", None, "None"),
        ("g", [1.0, None], "None"),
        ("h", [[1.0], [None]], "None"),
        ("g", [1.0, "x"], "dtype <U"),
    ],
)
def test_wrong_values_for_a_float_are_type_errors(entry: str, value, given: str) -> None:
    m = arden.compile(
        "entry f (x: f64) : f64 = x\n"
        "entry g [n] (x: [n]f64) : f64 = sum x\n"
        "entry h [n][m] (x: [n][m]f64) : f64 = sum (flatten x)",
        backend="interp",
    )
    with pytest.raises(TypeError, match="parameter `x` expects f64 values") as info:
        getattr(m, entry)(value)
    assert not isinstance(info.value, OverflowError)
    assert given in str(info.value)


def test_none_for_an_integer_is_a_type_error() -> None:
    m = arden.compile("entry f (n: i64) : i64 = n + 1", backend="interp")
    with pytest.raises(TypeError, match="parameter `n` expects i64 values, but was given None"):
        m.f(None)
    # integers past i64 are still an OverflowError
    with pytest.raises(OverflowError, match="parameter `n`"):
        m.f(2**70)


def test_too_large_arrays_are_located(backend: str) -> None:
    m = arden.compile("entry big (n: i64) : f64 =\n  sum (replicate (n * n) 1.0)", name="big.ard", backend=backend)
    with pytest.raises(arden.RuntimeError, match=r"is too large at big\.ard:2:") as info:
        m.big(1 << 20)
    assert "array of shape [1099511627776]" in str(info.value)
    assert m.big(3) == 9.0
