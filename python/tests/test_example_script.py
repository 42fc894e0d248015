"""The example script examples/python/gmm_fit.py runs (a short fit) and
writes its figure."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import EXAMPLES

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_gmm_fit_script(tmp_path, suffix: str) -> None:
    out = tmp_path / f"fit.{suffix}"
    r = subprocess.run(
        [sys.executable, str(EXAMPLES / "python" / "gmm_fit.py"), "--iterations", "40", "--points", "300", "--output", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    m = re.search(r"loss ([0-9.]+) -> ([0-9.]+)", r.stdout)
    assert m, r.stdout
    first, last = float(m.group(1)), float(m.group(2))
    assert last < first - 0.3  # the fit makes progress
    assert "fitting" in r.stderr and "40/40" in r.stderr  # the tqdm progress bar
    data = out.read_bytes()
    assert len(data) > 10_000
    assert data.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in data[:2000]
