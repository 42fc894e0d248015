"""The README's Python example runs as shown: each `# → ...` comment is
what that line prints."""

from __future__ import annotations

import contextlib
import io
import os
import re

from conftest import REPO


def python_blocks(text: str, section: str):
    part = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", part, flags=re.S)


def test_readme_python_example() -> None:
    blocks = python_blocks((REPO / "README.md").read_text(), "Python")
    assert len(blocks) == 1
    code = blocks[0]
    assert len(code.strip().splitlines()) == 5
    expected = [m.group(1).strip() for m in re.finditer(r"# → (.*)$", code, flags=re.M)]
    assert len(expected) == 2
    out = io.StringIO()
    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    assert [l.strip() for l in out.getvalue().splitlines()] == expected
