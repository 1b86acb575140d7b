"""The CI report formats, each read back by what consumes it: JUnit XML by junitparser (the parser
CI plugins and test-report tools build on), GitLab Code Quality against the fields and values GitLab
documents for `artifacts:reports:codequality`, JSON Lines line by line, concise as ruff prints it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from junitparser import Failure, JUnitXml
from support import HAZARD, HAZARD_CODE, OTHERS, amplint_run, write

from amplint.diagnostics import Diagnostic
from amplint.report import FORMATS, render

# GitLab's Code Quality report format (docs.gitlab.com, "Code Quality report format"): the fields it
# requires, the severities it knows, lines counted from 1.
GITLAB_SCHEMA = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["description", "check_name", "fingerprint", "severity", "location"],
        "properties": {
            "description": {"type": "string", "minLength": 1},
            "check_name": {"type": "string", "minLength": 1},
            "fingerprint": {"type": "string", "minLength": 1},
            "severity": {"enum": ["info", "minor", "major", "critical", "blocker"]},
            "location": {
                "type": "object",
                "required": ["path", "lines"],
                "properties": {
                    "path": {"type": "string", "minLength": 1},
                    "lines": {
                        "type": "object",
                        "required": ["begin"],
                        "properties": {
                            "begin": {"type": "integer", "minimum": 1},
                            "end": {"type": "integer"},
                        },
                    },
                },
            },
        },
    },
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    write(tmp_path / "a.py", HAZARD)
    write(tmp_path / "b.py", OTHERS + HAZARD)
    write(tmp_path / "clean.py", "x = 1\n")
    return tmp_path


def _json(cwd: Path) -> list[dict]:
    proc = amplint_run(cwd, "check", ".", "--format", "json", "--no-cache")
    return json.loads(proc.stdout)["diagnostics"]


def test_junit_is_read_by_junitparser(project: Path) -> None:
    expected = _json(project)
    proc = amplint_run(project, "check", ".", "--format", "junit", "--no-cache")
    assert proc.returncode == 1
    report = JUnitXml.fromstring(proc.stdout)
    suites = {suite.name: suite for suite in report}
    assert set(suites) == {"a.py", "b.py"}
    cases = [case for suite in report for case in suite]
    assert len(cases) == len(expected) == report.tests == report.failures
    for case, diagnostic in zip(cases, expected, strict=True):
        (failure,) = case.result
        assert isinstance(failure, Failure)
        assert (failure.type, failure.message) == (diagnostic["code"], diagnostic["message"])
        assert case.classname == diagnostic["path"]
        assert f"{diagnostic['path']}:{diagnostic['line']}:{diagnostic['column']}:" in failure.text


def test_junit_without_findings_is_one_passing_case(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", "x = 1\n")
    proc = amplint_run(tmp_path, "check", ".", "--format", "junit", "--no-cache")
    assert proc.returncode == 0
    report = JUnitXml.fromstring(proc.stdout)
    cases = [case for suite in report for case in suite]
    assert len(cases) == 1 and cases[0].is_passed and report.failures == 0


def test_junit_stays_xml_when_a_message_holds_control_characters() -> None:
    odd = Diagnostic("AMP001", "x", "escape \x1b[31m and NUL \x00 & <tag>", "p\x07.py", 1, 1, 1, 2)
    root = ET.fromstring(render("junit", [odd], sources={}, color=False))
    failure = root.find("testsuite/testcase/failure")
    assert failure is not None and failure.get("message") == "escape \ufffd[31m and NUL \ufffd & <tag>"


def test_gitlab_matches_gitlabs_format_and_fingerprints_are_unique(project: Path) -> None:
    expected = _json(project)
    proc = amplint_run(project, "check", ".", "--format", "gitlab", "--no-cache")
    assert proc.returncode == 1
    issues = json.loads(proc.stdout)
    jsonschema.validate(issues, GITLAB_SCHEMA)
    assert [(i["check_name"], i["location"]["path"], i["location"]["lines"]["begin"]) for i in issues] == [
        (d["code"], d["path"], d["line"]) for d in expected
    ]
    assert len({i["fingerprint"] for i in issues}) == len(issues)


def test_gitlab_fingerprints_survive_a_line_shift(tmp_path: Path) -> None:
    """GitLab compares fingerprints between pipelines: a finding that only moved is not new."""
    path = write(tmp_path / "m.py", HAZARD + HAZARD.replace("import torch\n", ""))
    before = json.loads(amplint_run(tmp_path, "check", ".", "--format", "gitlab", "--no-cache").stdout)
    write(path, "\n\n" + path.read_text())
    after = json.loads(amplint_run(tmp_path, "check", ".", "--format", "gitlab", "--no-cache").stdout)
    assert len(before) == 2 and [i["check_name"] for i in before] == [HAZARD_CODE] * 2
    assert [i["fingerprint"] for i in after] == [i["fingerprint"] for i in before]
    assert [i["location"]["lines"]["begin"] for i in after] == [
        i["location"]["lines"]["begin"] + 2 for i in before
    ]


def test_json_lines_holds_one_diagnostic_per_line(project: Path) -> None:
    proc = amplint_run(project, "check", ".", "--format", "json-lines", "--no-cache")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert [json.loads(line) for line in lines] == _json(project)


def test_concise_is_one_line_per_finding_then_the_summary(project: Path) -> None:
    expected = _json(project)
    proc = amplint_run(project, "check", ".", "--format", "concise", "--no-cache")
    assert proc.returncode == 1
    findings, _, summary = proc.stdout.partition("\n\n")
    assert findings.splitlines() == [
        f"{d['path']}:{d['line']}:{d['column']}: {d['code']}{' [*]' if d['fix'] and d['fix']['applicability'] == 'safe' else ''} {d['message']}"
        for d in expected
    ]
    assert summary.startswith(f"Found {len(expected)} findings.")
    quiet = amplint_run(project, "check", ".", "--format", "concise", "--no-cache", "--quiet")
    assert quiet.stdout == findings + "\n"


def test_markdown_summary_counts_links_and_escapes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GITHUB_REPOSITORY", raising=False)
    piped = Diagnostic("AMP002", "half-precision-attention-scores", "a | b", "m.py", 3, 1, 3, 4)
    text = render("markdown", [piped], sources={}, color=False)
    assert "| AMP002 `half-precision-attention-scores` | 1 |" in text
    assert "| `m.py:3` | AMP002 | a \\| b |" in text  # no link outside GitHub Actions
    monkeypatch.setenv("GITHUB_REPOSITORY", "o/r")
    monkeypatch.setenv("GITHUB_SHA", "abc")
    many = [Diagnostic("AMP008", "x", "m", f"d/f{i}.py", 1, 1, 1, 2) for i in range(501)]
    text = render("markdown", many, sources={}, color=False)
    assert text.startswith("### amplint: 501 findings in 501 files\n")
    assert "[`d/f0.py:1`](https://github.com/o/r/blob/abc/d/f0.py#L1)" in text
    assert text.count("| AMP008 | m |") == 500 and "And 1 more, not listed here" in text


ODD_NAMES = [b"caf\xe9.py", b"new\nline.py", b"tab\there.py", b'quote"s.py', "é€😀.py".encode()]


@pytest.mark.parametrize("format_", FORMATS)
def test_every_format_reports_files_with_odd_names(tmp_path: Path, format_: str) -> None:
    """Names that are not UTF-8, or hold a line break, a tab or a quote: one finding each, no crash."""
    for name in ODD_NAMES:
        (tmp_path / os.fsdecode(name)).write_text(HAZARD, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "amplint", "check", ".", "--no-cache", "--format", format_],
        cwd=tmp_path,
        capture_output=True,
    )
    assert done.returncode == 1, done.stderr.decode(errors="replace")[-2000:]
    assert b"Traceback" not in done.stderr
    if format_ == "gitlab":
        issues = json.loads(done.stdout.decode("utf-8", "surrogateescape"))
        assert sorted(issue["location"]["path"] for issue in issues) == sorted(map(os.fsdecode, ODD_NAMES))
        assert len({issue["fingerprint"] for issue in issues}) == len(ODD_NAMES)
