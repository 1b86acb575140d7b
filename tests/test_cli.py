"""The command line as users run it: `python -m amplint` in a subprocess, on real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_FIXED, HAZARD_LINE, OTHERS, amplint_run, write

import amplint
from amplint.rules import all_rules, rule_by_code

# HAZARD: AMP008 flags `torch.cuda.amp.GradScaler()` at line 5, column 9 (1-based), and fixes it.
# OTHERS: AMP011 (no automatic fix) on line 6, AMP006 (fixed) on the line after.
# All three rules are on by default; `AMP00` covers AMP006 and AMP008 but not AMP011.

CLEAN = """\
import torch


def forward(x):
    return torch.relu(x)
"""


def check_json(cwd: Path, *args: str | Path) -> tuple[int, dict]:
    proc = amplint_run(cwd, "check", "--format", "json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def codes(report: dict) -> list[str]:
    return [d["code"] for d in report["diagnostics"]]


# --- exit codes -------------------------------------------------------------------------------


def test_clean_file_exits_0(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", CLEAN)
    proc = amplint_run(tmp_path, "check", "clean.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "AMP" not in proc.stdout


def test_finding_exits_1_and_names_position(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "model.py")
    assert proc.returncode == 1, proc.stderr
    assert f"model.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in proc.stdout


def test_default_path_is_cwd(tmp_path: Path) -> None:
    write(tmp_path / "pkg" / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check")
    assert proc.returncode == 1
    assert f"pkg/model.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in proc.stdout


def test_exit_zero(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--exit-zero", "model.py")
    assert proc.returncode == 0
    assert HAZARD_CODE in proc.stdout


def test_nonexistent_path_exits_2_naming_it(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "model.py", "no_such_dir")
    assert proc.returncode == 2
    assert "no_such_dir" in proc.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["check", "--no-such-flag"],
        ["check", "--format", "xml"],
        ["check", "--select", "FOO1"],
        ["check", "--ignore", "E501"],
        ["check", "--fix", "--diff"],
        ["frobnicate"],
        [],
    ],
    ids=["unknown-flag", "bad-format", "bad-select", "bad-ignore", "fix-and-diff", "bad-command", "none"],
)
def test_usage_errors_exit_2(tmp_path: Path, args: list[str]) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip()
    assert "Traceback" not in proc.stderr


def test_bad_select_names_the_code(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--select", f"{HAZARD_CODE},XYZ9", "model.py")
    assert proc.returncode == 2
    assert "XYZ9" in proc.stderr


# --- select / ignore ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["AMP011", "AMP006", "AMP008"]),
        (["--select", "AMP008"], ["AMP008"]),
        (["--select", "AMP011,AMP006"], ["AMP011", "AMP006"]),
        (["--select", "AMP011", "--select", "AMP008"], ["AMP011", "AMP008"]),
        (["--select", "amp006"], ["AMP006"]),
        # A prefix: AMP006 and AMP008 start with AMP00, AMP011 does not.
        (["--select", "AMP00"], ["AMP006", "AMP008"]),
        (["--select", "AMP0"], ["AMP011", "AMP006", "AMP008"]),
        (["--ignore", "AMP008"], ["AMP011", "AMP006"]),
        (["--ignore", "AMP008,AMP006"], ["AMP011"]),
        (["--ignore", "AMP008", "--ignore", "AMP011"], ["AMP006"]),
        (["--ignore", "AMP00"], ["AMP011"]),
        (["--ignore", "AMP0"], []),
        (["--ignore", "AMP"], []),
        (["--select", "AMP0", "--ignore", "AMP011"], ["AMP006", "AMP008"]),
        # The longest matching prefix decides.
        (["--select", "AMP008", "--ignore", "AMP0"], ["AMP008"]),
    ],
)
def test_select_and_ignore(tmp_path: Path, args: list[str], expected: list[str]) -> None:
    write(tmp_path / "a_others.py", OTHERS)
    write(tmp_path / "b_hazard.py", HAZARD)
    returncode, report = check_json(tmp_path, *args, ".")
    assert codes(report) == expected
    assert returncode == (1 if expected else 0)


# --- output formats and options ----------------------------------------------------------------


def test_json_format_has_documented_keys(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    returncode, report = check_json(tmp_path, "model.py")
    assert returncode == 1
    assert set(report) >= {"version", "diagnostics", "summary"}
    assert report["version"] == amplint.__version__
    [diagnostic] = report["diagnostics"]
    assert set(diagnostic) >= {
        "code",
        "name",
        "message",
        "path",
        "line",
        "column",
        "end_line",
        "end_column",
        "severity",
        "confidence",
        "fix",
        "help",
    }
    assert diagnostic["code"] == HAZARD_CODE
    assert diagnostic["name"] == "deprecated-cuda-amp-api"
    assert diagnostic["path"] == "model.py"
    assert (diagnostic["line"], diagnostic["column"]) == (HAZARD_LINE, HAZARD_COLUMN)
    # `torch.cuda.amp.GradScaler()` is 27 characters; the end is exclusive.
    assert (diagnostic["end_line"], diagnostic["end_column"]) == (HAZARD_LINE, HAZARD_COLUMN + 27)
    assert diagnostic["severity"] == "info"  # AMP008 is a deprecation: info, not a warning
    [edit] = diagnostic["fix"]["edits"]
    assert edit["content"] == 'torch.amp.GradScaler("cuda")'
    assert (edit["line"], edit["column"], edit["end_column"]) == (
        HAZARD_LINE,
        HAZARD_COLUMN,
        HAZARD_COLUMN + 27,
    )
    summary = report["summary"]
    assert summary["files_checked"] == 1
    assert summary["findings"] == 1
    assert summary["fixable"] == 1


def test_json_format_clean_is_empty_list(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", CLEAN)
    returncode, report = check_json(tmp_path, "clean.py")
    assert returncode == 0
    assert report["diagnostics"] == []
    assert report["summary"]["findings"] == 0


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_output_file_gets_report_and_stdout_nothing(tmp_path: Path, fmt: str) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--format", fmt, "--output", "reports/out.txt", "model.py")
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout == ""
    report = (tmp_path / "reports" / "out.txt").read_text(encoding="utf-8")
    assert HAZARD_CODE in report
    if fmt == "json":
        assert json.loads(report)["diagnostics"][0]["line"] == HAZARD_LINE
    else:
        assert "\x1b[" not in report  # no colour codes in a file
        assert f"model.py:{HAZARD_LINE}:{HAZARD_COLUMN}:" in report


def test_quiet_prints_findings_but_no_summary(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    loud = amplint_run(tmp_path, "check", "model.py")
    quiet = amplint_run(tmp_path, "check", "--quiet", "model.py")
    assert loud.returncode == quiet.returncode == 1
    assert "Found 1 finding" in loud.stdout
    assert "Found" not in quiet.stdout
    assert "fixable" not in quiet.stdout
    assert "model.py:5:9: AMP008" in quiet.stdout


def test_quiet_clean_prints_nothing(tmp_path: Path) -> None:
    write(tmp_path / "clean.py", CLEAN)
    proc = amplint_run(tmp_path, "check", "-q", "clean.py")
    assert proc.returncode == 0
    assert proc.stdout.strip() == ""


def test_statistics_counts_per_rule(tmp_path: Path) -> None:
    write(tmp_path / "a.py", HAZARD)
    write(tmp_path / "b.py", HAZARD)
    write(tmp_path / "c.py", OTHERS)
    proc = amplint_run(tmp_path, "check", "--statistics", ".")
    assert proc.returncode == 1
    lines = [line.split() for line in proc.stdout.splitlines()]
    counts = {line[1]: int(line[0]) for line in lines if len(line) >= 2 and line[1].startswith("AMP")}
    assert counts == {"AMP008": 2, "AMP011": 1, "AMP006": 1}


def test_no_color_when_piped(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "model.py")
    assert "\x1b[" not in proc.stdout


# --- version and rule docs ----------------------------------------------------------------------


def test_version(tmp_path: Path) -> None:
    proc = amplint_run(tmp_path, "--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"amplint {amplint.__version__}"


def test_rule_page_has_docs_and_examples(tmp_path: Path) -> None:
    proc = amplint_run(tmp_path, "rule", "AMP001")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    rule = rule_by_code("AMP001")
    assert rule is not None
    assert out.startswith("# AMP001 low-precision-log-weights")
    for section in (
        "## What it does",
        "## Why is this bad?",
        "## Fix",
        "## Flagged (1)",
        "## Not flagged (1)",
    ):
        assert section in out
    assert "After `--fix --unsafe-fixes`:" in out  # AMP001's fix changes the dtype consumers see
    # Every example's code appears (indented) on the page.
    for example in (*rule.bad, *rule.good):
        for line in example.code.splitlines():
            if line.strip():
                assert f"    {line}" in out, line
    assert rule.bad[0].fixed is not None
    for line in rule.bad[0].fixed.splitlines():
        if line.strip():
            assert f"    {line}" in out


def test_rule_code_is_case_insensitive(tmp_path: Path) -> None:
    proc = amplint_run(tmp_path, "rule", "amp001")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# AMP001 ")


def test_rule_all_lists_every_code(tmp_path: Path) -> None:
    proc = amplint_run(tmp_path, "rule", "--all")
    assert proc.returncode == 0
    listed = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    assert listed == [rule.code for rule in all_rules()]
    assert {"AMP001", "AMP002", "AMP003", "AMP900"} <= set(listed)


def test_rule_all_json(tmp_path: Path) -> None:
    proc = amplint_run(tmp_path, "rule", "--all", "--format", "json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert [item["code"] for item in data] == [rule.code for rule in all_rules()]


@pytest.mark.parametrize("args", [["rule", "NOPE"], ["rule", "AMP999"], ["rule"]])
def test_rule_unknown_exits_2(tmp_path: Path, args: list[str]) -> None:
    proc = amplint_run(tmp_path, *args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    if len(args) > 1:
        assert args[1] in proc.stderr


# --- configuration ------------------------------------------------------------------------------


def pyproject(tmp_path: Path, body: str) -> None:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'demo'\n\n[tool.amplint]\n" + body)


def test_config_select(tmp_path: Path) -> None:
    write(tmp_path / "a.py", OTHERS)
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, 'select = ["AMP006"]\n')
    _, report = check_json(tmp_path, ".")
    assert codes(report) == ["AMP006"]


def test_config_ignore(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, f'ignore = ["{HAZARD_CODE}"]\n')
    proc = amplint_run(tmp_path, "check", "b.py")
    assert proc.returncode == 0, proc.stdout


def test_cli_select_overrides_config_ignore(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, f'ignore = ["{HAZARD_CODE}"]\n')
    returncode, report = check_json(tmp_path, "--select", HAZARD_CODE, "b.py")
    assert returncode == 1
    assert codes(report) == [HAZARD_CODE]


def test_config_found_from_subdirectory_path(tmp_path: Path) -> None:
    write(tmp_path / "src" / "b.py", HAZARD)
    pyproject(tmp_path, f'ignore = ["{HAZARD_CODE}"]\n')
    proc = amplint_run(tmp_path / "src", "check", "b.py")
    assert proc.returncode == 0, proc.stdout


def test_config_per_file_ignores(tmp_path: Path) -> None:
    write(tmp_path / "legacy" / "old.py", HAZARD)
    write(tmp_path / "src" / "new.py", HAZARD)
    pyproject(tmp_path, '[tool.amplint.per-file-ignores]\n"legacy/*.py" = ["AMP008"]\n')
    _, report = check_json(tmp_path, ".")
    assert [d["path"] for d in report["diagnostics"]] == ["src/new.py"]


def test_config_exclude_and_extend_exclude(tmp_path: Path) -> None:
    write(tmp_path / "generated" / "g.py", HAZARD)
    write(tmp_path / "vendor" / "v.py", HAZARD)
    write(tmp_path / "src" / "s.py", HAZARD)
    pyproject(tmp_path, 'extend-exclude = ["vendor/"]\n')
    _, report = check_json(tmp_path, ".")
    assert sorted(d["path"] for d in report["diagnostics"]) == ["generated/g.py", "src/s.py"]

    pyproject(tmp_path, 'exclude = ["generated"]\nextend-exclude = ["vendor/"]\n')
    _, report = check_json(tmp_path, ".")
    assert [d["path"] for d in report["diagnostics"]] == ["src/s.py"]


def test_cli_extend_exclude(tmp_path: Path) -> None:
    write(tmp_path / "vendor" / "v.py", HAZARD)
    write(tmp_path / "src" / "s.py", HAZARD)
    _, report = check_json(tmp_path, "--extend-exclude", "vendor", ".")
    assert [d["path"] for d in report["diagnostics"]] == ["src/s.py"]


def test_config_unknown_key_warns_naming_it_and_is_ignored(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, 'selct = ["AMP001"]\n')
    proc = amplint_run(tmp_path, "check", "b.py")
    assert proc.returncode == 1  # the defaults stand: the hazard is reported
    assert "amplint: warning: " in proc.stderr and "unknown key 'selct' ignored" in proc.stderr
    assert HAZARD_CODE in proc.stdout


def test_config_invalid_toml_exits_2(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, "select = [\n")
    proc = amplint_run(tmp_path, "check", "b.py")
    assert proc.returncode == 2
    assert "pyproject.toml" in proc.stderr


def test_config_bad_code_exits_2(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, 'ignore = ["E501"]\n')
    proc = amplint_run(tmp_path, "check", "b.py")
    assert proc.returncode == 2
    assert "E501" in proc.stderr


def test_config_flag_with_amplint_toml(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    write(tmp_path / "ci" / "amplint.toml", f'ignore = ["{HAZARD_CODE}"]\n')
    assert amplint_run(tmp_path, "check", "b.py").returncode == 1
    proc = amplint_run(tmp_path, "check", "--config", "ci/amplint.toml", "b.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_config_flag_beats_discovered_pyproject(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    pyproject(tmp_path, f'ignore = ["{HAZARD_CODE}"]\n')
    write(tmp_path / "strict.toml", 'select = ["AMP"]\n')
    assert amplint_run(tmp_path, "check", "b.py").returncode == 0
    assert amplint_run(tmp_path, "check", "--config", "strict.toml", "b.py").returncode == 1


def test_config_flag_missing_file_exits_2(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--config", "missing.toml", "b.py")
    assert proc.returncode == 2
    assert "missing.toml" in proc.stderr


def test_config_flag_unknown_key_warns(tmp_path: Path) -> None:
    write(tmp_path / "b.py", HAZARD)
    write(tmp_path / "amplint.toml", f'ignroe = ["{HAZARD_CODE}"]\n')
    proc = amplint_run(tmp_path, "check", "--config", "amplint.toml", "b.py")
    assert proc.returncode == 1  # not ignored: the key was misspelt
    assert "unknown key 'ignroe' ignored" in proc.stderr and "did you mean 'ignore'?" in proc.stderr


# --- suppression --------------------------------------------------------------------------------


def with_comment(comment: str) -> str:
    """HAZARD with `comment` at the end of the flagged line."""
    flagged = "torch.cuda.amp.GradScaler()\n"
    assert HAZARD.count(flagged) == 1
    return HAZARD.replace(flagged, f"torch.cuda.amp.GradScaler()  {comment}\n")


@pytest.mark.parametrize(
    ("comment", "suppressed"),
    [
        ("# noqa", True),
        ("# noqa: AMP008", True),
        ("# noqa:AMP008", True),
        ("# noqa: AMP006, AMP008", True),
        ("# NOQA: amp008", True),
        ("# noqa: AMP006", False),
        ("# noqa: AMP0081", False),
        ("# nothing to see", False),
    ],
)
def test_line_noqa(tmp_path: Path, comment: str, suppressed: bool) -> None:
    write(tmp_path / "model.py", with_comment(comment))
    returncode, report = check_json(tmp_path, "model.py")
    if suppressed:
        assert (returncode, codes(report)) == (0, [])
    else:
        assert (returncode, codes(report)) == (1, [HAZARD_CODE])


def test_noqa_on_another_line_does_not_suppress(tmp_path: Path) -> None:
    # The comment sits on the line after the finding.
    assert HAZARD.count("    return s\n") == 1
    write(tmp_path / "model.py", HAZARD.replace("    return s\n", "    return s  # noqa\n"))
    returncode, report = check_json(tmp_path, "model.py")
    assert (returncode, codes(report)) == (1, [HAZARD_CODE])


def test_file_noqa(tmp_path: Path) -> None:
    write(tmp_path / "exempt.py", "# amplint: noqa\n" + HAZARD)
    write(tmp_path / "checked.py", HAZARD)
    returncode, report = check_json(tmp_path, ".")
    assert returncode == 1
    assert [d["path"] for d in report["diagnostics"]] == ["checked.py"]


def test_fix_respects_noqa(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", with_comment(f"# noqa: {HAZARD_CODE}"))
    before = path.read_bytes()
    proc = amplint_run(tmp_path, "check", "--fix", "model.py")
    assert proc.returncode == 0
    assert path.read_bytes() == before
    # Without the comment, --fix does rewrite the same code.
    control = write(tmp_path / "control.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "--fix", "control.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert control.read_text(encoding="utf-8") == HAZARD_FIXED


# --- which files are checked --------------------------------------------------------------------


def test_explicit_file_with_other_suffix_is_checked(tmp_path: Path) -> None:
    write(tmp_path / "model.txt", HAZARD)
    proc = amplint_run(tmp_path, "check", "model.txt")
    assert proc.returncode == 1
    assert f"model.txt:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in proc.stdout


def test_walk_only_takes_py_files(tmp_path: Path) -> None:
    write(tmp_path / "model.txt", HAZARD)
    write(tmp_path / "notes.md", HAZARD)
    write(tmp_path / "model.py", HAZARD)
    returncode, report = check_json(tmp_path, ".")
    assert returncode == 1
    assert [d["path"] for d in report["diagnostics"]] == ["model.py"]
    assert report["summary"]["files_checked"] == 1


def test_walk_skips_default_excludes_and_gitignored(tmp_path: Path) -> None:
    for skipped in (
        ".venv/lib/m.py",
        "build/lib/m.py",
        "__pycache__/m.py",
        ".git/hooks/m.py",
        "pkg/__pycache__/m.py",
        "ignored_dir/m.py",
        "pkg/ignored_file.py",
        "pkg/secret_generated.py",
        "env_named_oddly/lib/m.py",
    ):
        write(tmp_path / skipped, HAZARD)
    write(tmp_path / "env_named_oddly" / "pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path / ".gitignore", "ignored_dir/\nignored_file.py\n")
    write(tmp_path / "pkg" / ".gitignore", "*_generated.py\n")
    write(tmp_path / "pkg" / "model.py", HAZARD)
    write(tmp_path / "top.py", HAZARD)
    returncode, report = check_json(tmp_path, ".")
    assert returncode == 1
    assert [d["path"] for d in report["diagnostics"]] == ["pkg/model.py", "top.py"]
    assert report["summary"]["files_checked"] == 2


def test_walk_skips_gitignored_inside_git_repo(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    write(tmp_path / ".gitignore", "scratch/\n")
    write(tmp_path / "scratch" / "m.py", HAZARD)
    write(tmp_path / "src" / "m.py", HAZARD)
    # Walking from a subdirectory still honours the repository's top-level .gitignore.
    write(tmp_path / "src" / "scratch" / "x.py", HAZARD)
    _, report = check_json(tmp_path, ".")
    assert [d["path"] for d in report["diagnostics"]] == ["src/m.py"]
    _, report = check_json(tmp_path / "src", ".")
    assert [d["path"] for d in report["diagnostics"]] == ["m.py"]


def test_same_file_twice_is_reported_once(tmp_path: Path) -> None:
    write(tmp_path / "pkg" / "model.py", HAZARD)
    _, report = check_json(tmp_path, "pkg", "pkg/model.py", "./pkg/model.py")
    assert codes(report) == [HAZARD_CODE]


# --- ordering and positions ---------------------------------------------------------------------


def test_diagnostics_sorted_by_path_line_column(tmp_path: Path) -> None:
    two = HAZARD + "\n\ndef more(y):\n    pairs = (y, torch.cuda.amp.GradScaler())\n    return pairs\n"
    write(tmp_path / "z.py", two)
    write(tmp_path / "a" / "b.py", OTHERS)
    write(tmp_path / "m.py", HAZARD)
    write(tmp_path / "a.py", two)
    returncode, report = check_json(tmp_path, "z.py", ".")
    assert returncode == 1
    found = [(d["path"], d["line"], d["column"], d["code"]) for d in report["diagnostics"]]
    assert found == sorted(found)
    assert [f[0] for f in found] == ["a.py", "a.py", "a/b.py", "a/b.py", "m.py", "z.py", "z.py"]
    assert ("m.py", HAZARD_LINE, HAZARD_COLUMN, HAZARD_CODE) in found
    assert ("z.py", 10, 17, HAZARD_CODE) in found  # `torch.cuda.amp.GradScaler()` after `pairs = (y, `
    assert ("a/b.py", 6, 114, "AMP011") in found and ("a/b.py", 7, 11, "AMP006") in found


def test_text_positions_are_one_based(tmp_path: Path) -> None:
    # A hazard at the very start of a line reports column 1.
    write(tmp_path / "m.py", "import torch\ntorch.cuda.amp.GradScaler()\n")
    proc = amplint_run(tmp_path, "check", "m.py")
    assert proc.returncode == 1, proc.stdout
    assert "m.py:2:1: AMP008" in proc.stdout


# --- Python API ---------------------------------------------------------------------------------


def test_api_check_source() -> None:
    diagnostics = amplint.check_source(HAZARD)
    assert [type(d) for d in diagnostics] == [amplint.Diagnostic]
    [d] = diagnostics
    assert (d.code, d.line, d.column, d.path) == (HAZARD_CODE, HAZARD_LINE, HAZARD_COLUMN, "<string>")
    assert d.fix is not None
    assert amplint.check_source(HAZARD, ignore=[HAZARD_CODE]) == []
    assert amplint.check_source(CLEAN) == []


def test_api_check_source_syntax_error() -> None:
    [d] = amplint.check_source("def f(:\n", path="broken.py")
    assert (d.code, d.path, d.line) == ("AMP900", "broken.py", 1)


def test_api_check_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pkg" / "a.py", HAZARD)
    write(tmp_path / "pkg" / "b.py", OTHERS)
    monkeypatch.chdir(tmp_path)
    diagnostics = amplint.check_paths([tmp_path / "pkg"])
    assert all(isinstance(d, amplint.Diagnostic) for d in diagnostics)
    assert [(d.path, d.code) for d in diagnostics] == [
        ("pkg/a.py", "AMP008"),
        ("pkg/b.py", "AMP011"),
        ("pkg/b.py", "AMP006"),
    ]
    assert [d.code for d in amplint.check_paths(["pkg"], select=["AMP008"])] == ["AMP008"]
    assert [d.code for d in amplint.check_paths(["pkg"], ignore=["AMP00"])] == ["AMP011"]
    assert [d.code for d in amplint.check_paths(["pkg"], ignore=["AMP0"])] == []


def test_api_check_paths_honours_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "pkg" / "a.py", HAZARD)
    pyproject(tmp_path, f'ignore = ["{HAZARD_CODE}"]\n')
    monkeypatch.chdir(tmp_path)
    assert amplint.check_paths(["pkg"]) == []


def test_a_reader_that_leaves_early_ends_the_run_quietly() -> None:
    # `amplint rule --all | head -1`: the reader is gone before amplint writes.
    read, write_end = os.pipe()
    os.close(read)
    try:
        command = [sys.executable, "-m", "amplint", "rule", "--all"]
        done = subprocess.run(command, stdout=write_end, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write_end)
    assert done.stderr == "" and done.returncode == 2
