"""`--diff --unsafe-fixes` marks each hunk with the applicability and code of the fixes in it, in
the place of a section heading, so that the diff still applies with `patch` and `git apply`."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import amplint_run, write

from amplint.fixing.edits import unified_diff

# A safe fix (AMP008 on line 6, adding `import torch` above it in its round), then, in the next
# round, an unsafe one on the same line (AMP021); and an unsafe fix alone far below (AMP021).
SOURCE = """\
from contextlib import nullcontext
from torch.cuda.amp import GradScaler, autocast


def evaluate(model, x):
    with autocast() and nullcontext():
        return model(x)


scaler = GradScaler()










def predict(model, x):
    with torch_autocast("cpu") and nullcontext():
        return model(x)


from torch import autocast as torch_autocast
"""
SELECT = ("--select", "AMP008,AMP021")


def _hunks(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line.startswith("@@")]


def test_each_hunk_names_the_applicability_of_its_fixes(tmp_path: Path) -> None:
    write(tmp_path / "model.py", SOURCE)
    diff = amplint_run(tmp_path, "check", *SELECT, "--diff", "--unsafe-fixes", "model.py").stdout
    # The unsafe fix comes first: it says what applying the hunk does. The second hunk's lines
    # are those of the file as read, though its fix was found in a text with `import torch` added.
    assert _hunks(diff) == [
        "@@ -1,13 +1,14 @@ unsafe fix: AMP021; safe fix: AMP008",
        "@@ -19,7 +20,7 @@ unsafe fix: AMP021",
    ]
    # Without --unsafe-fixes every hunk is safe, and left as difflib writes it.
    safe = amplint_run(tmp_path, "check", *SELECT, "--diff", "model.py").stdout
    assert all(re.fullmatch(r"@@ -\d+(,\d+)? \+\d+(,\d+)? @@", hunk) for hunk in _hunks(safe))


@pytest.mark.parametrize("tool", ["patch", "git"])
def test_the_marked_diff_still_applies(tmp_path: Path, tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"no {tool}")
    write(tmp_path / "diffed" / "model.py", SOURCE)
    write(tmp_path / "fixed" / "model.py", SOURCE)
    diff = amplint_run(tmp_path / "diffed", "check", *SELECT, "--diff", "--unsafe-fixes", "model.py").stdout
    assert "unsafe fix: AMP021" in diff
    amplint_run(tmp_path / "fixed", "check", *SELECT, "--fix", "--unsafe-fixes", "model.py")
    command = ["patch", "-p1"] if tool == "patch" else ["git", "apply", "-p1", "-"]
    subprocess.run(command, cwd=tmp_path / "diffed", input=diff, text=True, check=True, capture_output=True)
    assert (tmp_path / "diffed" / "model.py").read_text() == (tmp_path / "fixed" / "model.py").read_text()


def test_a_mark_goes_to_the_hunks_its_lines_fall_in() -> None:
    old = "".join(f"line {i}\n" for i in range(1, 31))
    new = old.replace("line 2\n", "line two\n").replace("line 25\n", "line twenty-five\n")
    diff = unified_diff("f.py", old, new, [(2, 2, "safe fix: A"), (25, 25, "unsafe fix: B")])
    assert _hunks(diff) == ["@@ -1,5 +1,5 @@ safe fix: A", "@@ -22,7 +22,7 @@ unsafe fix: B"]


def test_a_notebook_diff_is_left_unmarked(tmp_path: Path) -> None:
    """A notebook's fixes count lines within its cells; its diff is of the .ipynb file."""
    cell = 'import torch\n\n\ndef f(m, x):\n    with torch.autocast("cpu") and torch.no_grad():\n        return m(x)\n'
    notebook = {
        "cells": [
            {"cell_type": "code", "metadata": {}, "source": cell, "outputs": [], "execution_count": None}
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    write(tmp_path / "n.ipynb", json.dumps(notebook, indent=1))
    proc = amplint_run(tmp_path, "check", *SELECT, "--diff", "--unsafe-fixes", "n.ipynb")
    assert proc.returncode == 1, proc.stderr
    assert 'torch.autocast(\\"cpu\\"), torch.no_grad()' in proc.stdout
    assert all(re.fullmatch(r"@@ -\d+(,\d+)? \+\d+(,\d+)? @@", hunk) for hunk in _hunks(proc.stdout))
