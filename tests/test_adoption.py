"""Adopting amplint on code with findings: `--add-noqa` suppresses them where they are, a baseline
records them so that only new ones are reported."""

from __future__ import annotations

import json
from pathlib import Path

from support import HAZARD, HAZARD_CODE, HAZARD_LINE, amplint_run, write

from amplint.rules.suppression import with_noqa


def _codes(cwd: Path, *args: str) -> list[tuple[str, str, int]]:
    proc = amplint_run(cwd, "check", ".", "--format", "json", "--no-cache", *args)
    return [(d["path"], d["code"], d["line"]) for d in json.loads(proc.stdout)["diagnostics"]]


def test_add_noqa_suppresses_every_finding_and_keeps_comments(tmp_path: Path) -> None:
    lines = HAZARD.splitlines()
    lines[HAZARD_LINE - 1] += "  # keep me"
    write(tmp_path / "a.py", "\n".join(lines) + "\n")
    write(tmp_path / "b.py", HAZARD.replace("\n", "\r\n"))
    proc = amplint_run(tmp_path, "check", ".", "--add-noqa", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    assert "added `# noqa` to 2 lines" in proc.stderr
    assert _codes(tmp_path) == []
    a = (tmp_path / "a.py").read_text().splitlines()[HAZARD_LINE - 1]
    assert a.endswith(f"  # keep me  # noqa: {HAZARD_CODE}")
    assert (tmp_path / "b.py").read_bytes().count(b"\r\n") == HAZARD.count("\n")  # line ends kept
    again = amplint_run(tmp_path, "check", ".", "--add-noqa", "--no-cache")
    assert "added `# noqa` to 0 lines" in again.stderr


def test_noqa_codes_join_an_existing_list_and_odd_lines_are_left() -> None:
    text = 'x = f(a)  # noqa: E501\ny = """\nabc""" + g(b)\nz = a + \\\n    b\n'
    new, skipped = with_noqa(text, {1: {"AMP003"}, 2: {"AMP001"}, 3: {"AMP002"}, 4: {"AMP004"}})
    assert new.splitlines()[0] == "x = f(a)  # noqa: E501, AMP003"
    assert new.splitlines()[2] == 'abc""" + g(b)  # noqa: AMP002'  # the string's last line takes it
    assert skipped == [2, 4]  # inside the string; after a backslash
    compile(new, "t.py", "exec")


def test_a_baseline_reports_only_new_findings_even_after_lines_move(tmp_path: Path) -> None:
    path = write(tmp_path / "m.py", HAZARD)
    recorded = amplint_run(tmp_path, "check", ".", "--write-baseline", "baseline.json", "--no-cache")
    assert recorded.returncode == 0 and "recorded 1 findings in baseline.json" in recorded.stderr
    assert amplint_run(tmp_path, "check", ".", "--baseline", "baseline.json", "--no-cache").returncode == 0
    # Moved down three lines: still the recorded finding.
    write(path, "\n\n\n" + HAZARD)
    moved = amplint_run(tmp_path, "check", ".", "--baseline", "baseline.json", "--no-cache")
    assert moved.returncode == 0 and "1 findings recorded in baseline.json left out" in moved.stderr
    # A second copy of the same line is a new finding.
    write(path, HAZARD + "\n" + HAZARD.replace("import torch\n", ""))
    assert _codes(tmp_path, "--baseline", "baseline.json") == [
        ("m.py", HAZARD_CODE, HAZARD_LINE + 1 + HAZARD.count("\n") - 1)
    ]


def test_a_bad_baseline_is_a_clear_error(tmp_path: Path) -> None:
    write(tmp_path / "m.py", HAZARD)
    write(tmp_path / "baseline.json", '{"version": 1, "findings": [{"code": "AMP008"}]}')
    proc = amplint_run(tmp_path, "check", ".", "--baseline", "baseline.json")
    assert proc.returncode == 2 and "baseline.json: a finding needs code, path, fingerprint" in proc.stderr
    proc = amplint_run(tmp_path, "check", ".", "--baseline", "missing.json")
    assert proc.returncode == 2 and "cannot read the baseline missing.json" in proc.stderr
