"""Issue 37.1: every ```python block of README.md and docs/**/*.md runs as written.

Each block runs as a script of its own (``python block.py``, so ``if __name__ == "__main__"``
holds) in a fresh process, in a folder holding ``mypkg/rules.py`` with ``MyRule``: the
reader's own rule, which the snippets name ``"mypkg.rules:MyRule"`` (here an exact rule, D-GRS
under its own name). A block is skipped only when the line before its fence says
``<!-- docs-test: not run (why) -->``; the set of such blocks is pinned below, each with its
reason. Blocks that would take minutes are written with a smaller preset (the text names the
real size), so what the reader sees is what runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = re.compile(r"^<!-- docs-test: not run \((.+)\) -->$")
#: the blocks not run, and why: keep this small
NOT_RUN = {("docs/contract.md", "a signature with its types, not a statement")}
#: seconds one block may take (the slowest, the Dask block of docs/scale-out.md, takes about a minute)
BLOCK_TIMEOUT_S = 420

MY_RULE = '''"""The reader's rule in the README's snippets: an exact rule (D-GRS under its own name)."""
from speccheck.verifiers.dgrs import DGRS


class MyRule(DGRS):
    name = "my-rule"
'''


def _pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").rglob("*.md"))


def python_blocks() -> list[tuple[str, int, str, str | None]]:
    """(page, first line, code, reason it is not run or None) of every ```python block."""
    out = []
    for page in _pages():
        lines = page.read_text().splitlines()
        i = 0
        while i < len(lines):
            if lines[i].strip() == "```python":
                start = i + 1
                end = next(j for j in range(start, len(lines)) if lines[j].strip() == "```")
                before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
                mark = MARK.match(before)
                out.append((str(page.relative_to(ROOT)), start + 1, "\n".join(lines[start:end]) + "\n",
                            mark.group(1) if mark else None))
                i = end
            i += 1
    return out


BLOCKS = python_blocks()


def test_blocks_are_found_and_few_are_not_run():
    assert len(BLOCKS) >= 5 and any(page == "README.md" for page, *_ in BLOCKS)
    skipped = {(page, why) for page, _, _, why in BLOCKS if why is not None}
    assert skipped == NOT_RUN, skipped


@pytest.mark.parametrize("page, line, code", [(p, n, c) for p, n, c, why in BLOCKS if why is None],
                         ids=[f"{p}:{n}" for p, n, _, why in BLOCKS if why is None])
def test_python_block_runs_as_written(page, line, code, tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "rules.py").write_text(MY_RULE)
    script = tmp_path / "block.py"
    script.write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg", "SPECCHECK_NO_PROGRESS": "1"}
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=BLOCK_TIMEOUT_S)
    where = f"{page}:{line}"
    assert proc.returncode == 0, f"{where} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, where
    if "speccheck.battery(\"mypkg.rules:MyRule\"" in code and "print(" in code:
        assert proc.stdout.startswith("exact 0"), (where, proc.stdout[:500])  # the rule ran and passed


def test_the_readme_battery_block_runs_without_the_readers_rule(tmp_path):
    """Without ``mypkg`` (a reader who pastes the block first) the run has no verdict, and the block
    still runs to its end: ``to_frame()`` is empty, ``report`` is None and the block checks it."""
    code = next(c for p, _, c, why in BLOCKS if p == "README.md" and "speccheck.battery(" in c)
    (tmp_path / "block.py").write_text(code)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "SPECCHECK_NO_PROGRESS": "1"}
    proc = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=BLOCK_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("no_verdict 2") and "mypkg" in proc.stdout, proc.stdout[:500]
