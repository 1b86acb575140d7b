"""Every finding says why the value is half where it is: in the message, as `why` in JSON, as SARIF
`relatedLocations`, and `check --explain FILE:LINE` prints the facts of a line."""

from __future__ import annotations

import json
from pathlib import Path

from support import amplint_run, write

# The autocast region opens on line 5; the product on line 6 (column 27) makes the sigmoid's input bf16.
MODEL = """\
import torch


def decay(x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        w = torch.sigmoid(x @ x.T)
        return torch.exp(-torch.exp(w))
"""
WHY = "`matmul` runs in bf16 under autocast at line 5"


def _check(tmp_path: Path, *args: str) -> str:
    write(tmp_path / "model.py", MODEL)
    proc = amplint_run(tmp_path, "check", "--no-cache", "--select", "AMP001", *args, "model.py")
    assert proc.returncode == 1, proc.stderr
    return proc.stdout


def test_the_message_says_why(tmp_path: Path) -> None:
    out = _check(tmp_path)
    assert f"bf16 here: {WHY}" in out


def test_json_carries_the_evidence_chain(tmp_path: Path) -> None:
    (finding,) = json.loads(_check(tmp_path, "--format", "json"))["diagnostics"]
    assert (finding["line"], finding["column"]) == (6, 13)
    assert finding["why"] == [{"line": 6, "column": 27, "message": WHY}]


def test_sarif_carries_it_as_related_locations(tmp_path: Path) -> None:
    (result,) = json.loads(_check(tmp_path, "--format", "sarif"))["runs"][0]["results"]
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["artifactLocation"]["uri"] == "model.py"
    assert related["physicalLocation"]["region"] == {"startLine": 6, "startColumn": 27}
    assert related["message"]["text"] == WHY


def test_explain_prints_every_expression_of_the_line(tmp_path: Path) -> None:
    write(tmp_path / "model.py", MODEL)
    proc = amplint_run(tmp_path, "check", "--explain", "model.py:6")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "model.py:6: w = torch.sigmoid(x @ x.T)"
    rows = {line.split()[0]: line for line in lines[1:] if line.startswith("  ")}
    assert f"bf16 here: {WHY}" in rows["torch.sigmoid(x"]
    assert "`x` is an input of `decay`, in the caller's dtype" in rows["x"]
    assert lines[-1] == "  runs under: cuda autocast bfloat16 (line 5)"


def test_explain_outside_the_region_keeps_the_callers_choices(tmp_path: Path) -> None:
    write(tmp_path / "model.py", MODEL + "\n\ndef plain(y):\n    return torch.sigmoid(y)\n")
    proc = amplint_run(tmp_path, "check", "--explain", "model.py:11")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("  runs under: ")
    assert "(the caller's)" in proc.stdout and "off" in proc.stdout.splitlines()[-1]


def test_explain_names_a_bad_target(tmp_path: Path) -> None:
    write(tmp_path / "model.py", MODEL)
    for target in ("model.py", "model.py:99", "missing.py:1"):
        proc = amplint_run(tmp_path, "check", "--explain", target)
        assert proc.returncode == 2, (target, proc.stdout)
        assert proc.stderr.strip() and "Traceback" not in proc.stderr, target
