"""`benchmarks/modes_diff.py`: the projects whose execution modes differ between two commits, read by
the commits' own `amplint/` (here the working tree's, for both) on a fake corpus of real layouts."""

from __future__ import annotations

from pathlib import Path

import modes_diff  # benchmarks/ is on the path (pyproject)
import pytest

REPO = Path(__file__).resolve().parents[2]
MANIFEST = """\
[[review]]
id = "r1"
date = "2026-01-01"
seed = 1

[[project]]
name = "opt"
version = "1.0"
sdist = false
first_checked = "r1"

[[project]]
name = "plain"
version = "1.0"
sdist = false
first_checked = "r1"
"""
TRAIN = """\
import argparse
from opt.model import GPT


def main(args):
    model = GPT()
    if args.fp16:
        model.half()


p = argparse.ArgumentParser()
p.add_argument("--fp16", action="store_true")
"""


@pytest.fixture
def corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    files = {
        "opt-1.0/pyproject.toml": "[project]\nname = 'opt'\n",
        "opt-1.0/opt/__init__.py": "",
        "opt-1.0/opt/model.py": "class GPT:\n    def step(self, x):\n        return x\n",
        "opt-1.0/train.py": TRAIN,
        "plain-1.0/pyproject.toml": "[project]\nname = 'plain'\n",
        "plain-1.0/plain.py": "import torch\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "corpus.toml").write_text(MANIFEST)
    monkeypatch.setattr(modes_diff, "snapshot", lambda rev, corpus: (rev, REPO))
    return tmp_path


def test_the_modes_each_commit_reads(corpus: Path) -> None:
    found = modes_diff.modes_at("HEAD", [str(corpus / "opt-1.0"), str(corpus / "plain-1.0")], corpus)
    # The cast runs only under `--fp16`, a `store_true` option nothing passes: an option's.
    assert found[str(corpus / "opt-1.0")] == {"opt-1.0/opt/model.py": {"GPT": ["cast-fp16:option"]}}
    assert found[str(corpus / "plain-1.0")] == {}


def test_the_same_modes_print_no_project(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["A", "B", "--corpus", str(corpus), "--manifest", str(corpus / "corpus.toml")]
    assert modes_diff.main(args) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "" and "0 of 2 fetched projects differ" in out.err
