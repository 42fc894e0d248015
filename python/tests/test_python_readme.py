"""The examples of python/README.md run as shown: a line ending in
`# → VALUE` evaluates to VALUE (its repr, whitespace aside), and a line
followed by `# → Error: message` raises that error."""

from __future__ import annotations

import re

import numpy as np
import pytest

import arden

from conftest import REPO

TEXT = (REPO / "python" / "README.md").read_text()
BLOCKS = [b for b in re.findall(r"```python\n(.*?)```", TEXT, flags=re.S) if "# →" in b]


def squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


def test_the_readme_has_checked_examples() -> None:
    assert len(BLOCKS) >= 4
    assert sum(b.count("# →") for b in BLOCKS) >= 12


@pytest.mark.parametrize("k", range(len(BLOCKS)))
def test_readme_example(k: int) -> None:
    ns = {"np": np, "arden": arden}
    lines = BLOCKS[k].splitlines()
    pending: list = []
    checked = 0
    for i, line in enumerate(lines):
        if line.lstrip().startswith("# →"):
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if nxt.lstrip().startswith("# →"):
            exec("\n".join(pending), ns)
            pending = []
            want = nxt.split("# →", 1)[1].strip()
            with pytest.raises(Exception) as info:
                exec(line, ns)
            assert f"{type(info.value).__name__}: {info.value}" == want
            checked += 1
        elif "# →" in line:
            code, want = line.split("# →", 1)
            exec("\n".join(pending), ns)
            pending = []
            got = eval(code, ns)
            assert squash(repr(got)) == squash(want), f"{code.strip()}: {got!r}"
            checked += 1
        else:
            pending.append(line)
    exec("\n".join(pending), ns)
    assert checked > 0
