"""`benchmarks/corpus_grep.py`: the projects a rule change can touch, chosen by patterns over a fake
corpus of real files (a file must match every --all pattern and no --none pattern)."""

from __future__ import annotations

from pathlib import Path

import corpus_grep  # benchmarks/ is on the path (pyproject)
import pytest

MANIFEST = """\
[[review]]
id = "r1"
date = "2026-01-01"
seed = 1

[[review]]
id = "r2"
seed = 2

[[project]]
name = "trains"
version = "1.0"
sdist = false
first_checked = "r1"

[[project]]
name = "scaled"
version = "1.0"
sdist = false
first_checked = "r2"

[[project]]
name = "split"
version = "1.0"
sdist = false
first_checked = "r2"

[[project]]
name = "trains-late"
version = "1.0"
sdist = false
first_checked = "r2"

[[project]]
name = "absent"
version = "1.0"
sdist = false
first_checked = "r2"
"""

LOOP = "with torch.autocast('cuda', dtype=torch.float16):\n    loss = model(x)\nloss.backward()\n"


def _corpus(tmp_path: Path) -> tuple[Path, Path]:
    manifest = tmp_path / "corpus.toml"
    manifest.write_text(MANIFEST, encoding="utf-8")
    files = {
        "trains-1.0/pkg/train.py": LOOP,
        "scaled-1.0/pkg/train.py": "scaler = GradScaler()\n" + LOOP,
        # the patterns are met by two files, never by one
        "split-1.0/pkg/a.py": "loss.backward()\n",
        "split-1.0/pkg/b.py": "x = x.half()\n",
        "trains-late-1.0/scripts/run.py": LOOP,
    }
    for name, text in files.items():
        path = tmp_path / "corpus" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return manifest, tmp_path / "corpus"


def test_a_project_is_chosen_by_one_file_matching_every_pattern(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest, corpus = _corpus(tmp_path)
    args = ["--manifest", str(manifest), "--corpus", str(corpus)]
    patterns = ["--all", r"\.backward\(", "--all", r"autocast|\.half\(\)", "--none", "GradScaler|scaler"]
    assert corpus_grep.main(args + patterns) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "trains,trains-late"
    assert "1 projects are not fetched" in err

    assert corpus_grep.main(args + patterns + ["--from-review", "r2"]) == 0
    assert capsys.readouterr().out.strip() == "trains-late"


def test_an_unknown_review_is_a_usage_error(tmp_path: Path) -> None:
    manifest, corpus = _corpus(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        corpus_grep.main(
            ["--manifest", str(manifest), "--corpus", str(corpus), "--all", "x", "--from-review", "r9"]
        )
    assert exit_info.value.code == 2
