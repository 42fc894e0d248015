"""Shared fixtures of the arden Python tests.

The tests compare with the command line (`arden run`), found at
`$ARDEN_CLI`, else `target/release/arden` in the repository (what
`cargo build --release` makes; CI builds it before running these tests).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any, List, Optional

import pytest

import arden

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def cli_path() -> Optional[pathlib.Path]:
    p = os.environ.get("ARDEN_CLI")
    if p:
        return pathlib.Path(p)
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    cand = target / "release" / "arden"
    return cand if cand.exists() else None


@pytest.fixture(scope="session")
def cli() -> pathlib.Path:
    p = cli_path()
    if os.environ.get("ARDEN_CLI") and not p.exists():
        # named but missing: a mistake (CI names it), not a reason to skip
        pytest.fail(f"ARDEN_CLI={p} does not exist")
    if p is None or not p.exists():
        pytest.skip("the arden command line is not built (cargo build --release, or set ARDEN_CLI)")
    return p


def run_cli(cli: pathlib.Path, args: List[str]) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli)] + args, capture_output=True, text=True, timeout=300)


def cli_json(cli: pathlib.Path, args: List[str]) -> Any:
    r = run_cli(cli, args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


BACKENDS = ["interp"] + (["c"] if arden.have_c_compiler() else [])


@pytest.fixture(params=BACKENDS)
def backend(request: Any) -> str:
    return request.param
