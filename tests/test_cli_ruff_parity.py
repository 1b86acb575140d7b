"""The flags and environment variables ruff users reach for, on real files: `--output-format`,
`--statistics` in JSON, `--exit-non-zero-on-fix`, `--fix-only`, `--show-files`, `--watch` and
`AMPLINT_*` variables (a flag wins over the variable, the variable over the configuration)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_CODE, HAZARD_FIXED, OTHERS, amplint_run, write

from amplint.cli import main

# A guard against a hang only: a check of these files takes about a second.
GUARD_SECONDS = 300


def _json(done: subprocess.CompletedProcess[str]) -> object:
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_output_format_is_format(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    spelled_as_ruff = _json(amplint_run(tmp_path, "check", "--no-cache", "--output-format", "json"))
    assert spelled_as_ruff == _json(amplint_run(tmp_path, "check", "--no-cache", "--format", "json"))
    assert isinstance(spelled_as_ruff, dict)
    assert [d["code"] for d in spelled_as_ruff["diagnostics"]] == [HAZARD_CODE]


def test_statistics_in_json_take_ruffs_shape(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    write(tmp_path / "load.py", OTHERS)
    rows = _json(amplint_run(tmp_path, "check", "--no-cache", "--statistics", "--output-format", "json"))
    assert rows == [
        {
            "code": "AMP006",
            "name": "half-precision-norm-statistics",
            "count": 1,
            "fixable": True,
            "fixable_count": 1,
        },
        {
            "code": "AMP008",
            "name": "deprecated-cuda-amp-api",
            "count": 1,
            "fixable": True,
            "fixable_count": 1,
        },
        {
            "code": "AMP011",
            "name": "eager-attention-in-fp16",
            "count": 1,
            "fixable": False,
            "fixable_count": 0,
        },
    ]
    refused = amplint_run(tmp_path, "check", "--no-cache", "--statistics", "--format", "sarif")
    assert refused.returncode == 2 and "--statistics counts findings in text or json" in refused.stderr


def test_exit_non_zero_on_fix(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", HAZARD)
    assert amplint_run(tmp_path, "check", "--no-cache", "--fix").returncode == 0  # all fixed
    write(model, HAZARD)
    done = amplint_run(tmp_path, "check", "--no-cache", "--fix", "--exit-non-zero-on-fix")
    assert done.returncode == 1 and model.read_text(encoding="utf-8") == HAZARD_FIXED
    # Nothing left to fix: nothing changed, exit 0.
    assert amplint_run(tmp_path, "check", "--no-cache", "--fix", "--exit-non-zero-on-fix").returncode == 0


def test_fix_only_fixes_and_reports_no_finding_left(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", HAZARD)
    load = write(tmp_path / "load.py", OTHERS)  # AMP011 has no fix: it is left, and not reported
    done = amplint_run(tmp_path, "check", "--no-cache", "--fix-only")
    assert (done.returncode, done.stdout) == (0, "Fixed 2 findings.\n"), done.stderr
    assert model.read_text(encoding="utf-8") == HAZARD_FIXED and load.read_text(encoding="utf-8") != OTHERS
    left = _json(amplint_run(tmp_path, "check", "--no-cache", "--format", "json"))
    assert isinstance(left, dict) and [d["code"] for d in left["diagnostics"]] == ["AMP011"]
    again = amplint_run(tmp_path, "check", "--no-cache", "--fix-only", "--exit-non-zero-on-fix")
    assert (again.returncode, again.stdout) == (0, "No findings fixed.\n")
    write(model, HAZARD)
    report = _json(amplint_run(tmp_path, "check", "--no-cache", "--fix-only", "--format", "json"))
    assert isinstance(report, dict)
    assert report["diagnostics"] == [] and report["summary"]["fixed"] == 1
    write(model, HAZARD)
    assert (
        amplint_run(tmp_path, "check", "--no-cache", "--fix-only", "--exit-non-zero-on-fix").returncode == 1
    )


def test_show_files_lists_what_a_check_reads_and_checks_nothing(tmp_path: Path) -> None:
    write(tmp_path / "pkg" / "model.py", HAZARD)
    write(
        tmp_path / "notes.ipynb",
        json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
    )
    write(tmp_path / "build" / "skipped.py", HAZARD)
    write(tmp_path / "readme.txt", "not python\n")
    done = amplint_run(tmp_path, "check", "--show-files")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [str(tmp_path / "notes.ipynb"), str(tmp_path / "pkg" / "model.py")]
    assert not (tmp_path / ".amplint_cache").exists()


def test_watch_checks_again_when_a_file_changes_and_ends_cleanly(tmp_path: Path) -> None:
    model = write(tmp_path / "model.py", HAZARD)
    watch = subprocess.Popen(
        [sys.executable, "-m", "amplint", "check", "--watch", "--no-cache", "--output-format", "concise"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert watch.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in watch.stdout], daemon=True).start()  # type: ignore[union-attr]

    def until(text: str) -> list[str]:
        seen = []
        while text not in (line := lines.get(timeout=GUARD_SECONDS)):
            seen.append(line)
        return [*seen, line]

    try:
        first = until("Found 1 finding.")
        assert any(f"model.py:5:9: {HAZARD_CODE}" in line for line in first)
        write(model, HAZARD_FIXED)  # the user fixes it by hand
        second = until("All checks passed!")
        assert any("A file changed: checking again." in line for line in second)
        write(tmp_path / "new.py", HAZARD)  # a file added is a change too
        third = until("Found 1 finding.")
        assert any(f"new.py:5:9: {HAZARD_CODE}" in line for line in third)
        watch.send_signal(signal.SIGTERM)
        assert watch.wait(timeout=GUARD_SECONDS) == 0
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()
    assert watch.stderr is not None and "Traceback" not in watch.stderr.read()


def test_watch_refuses_standard_input(tmp_path: Path) -> None:
    done = amplint_run(tmp_path, "check", "--watch", "-")
    assert done.returncode == 2 and "--watch checks files again as they change" in done.stderr


# --- AMPLINT_* environment variables --------------------------------------------------------------

CONFIG = """\
[tool.amplint]
select = ["AMP008"]
extend-select = ["AMP004"]
ignore = ["AMP006"]
extend-exclude = ["gen"]
precision = "bf16"
modes = ["autocast-bf16"]
torch-version = ">=2.1"
cache-dir = "configured"
"""


def _shown(capsys: pytest.CaptureFixture[str], *flags: str) -> tuple[dict[str, str], dict[str, str]]:
    """The settings `check --show-settings` prints, and where each came from."""
    assert main(["check", "--show-settings", *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index("from:")
    values = dict(line.split(": ", 1) for line in out[:start] if ": " in line and not line.startswith(" "))
    origins = dict(line.strip().split(": ", 1) for line in out[start + 1 :] if line.startswith("  "))
    return values, origins


@pytest.mark.parametrize(
    ("variable", "key", "environment", "flag", "configured", "from_environment", "from_flag"),
    [
        ("AMPLINT_SELECT", "select", "AMP010", "--select=AMP001", "AMP008", "AMP010", "AMP001"),
        (
            "AMPLINT_EXTEND_SELECT",
            "extend-select",
            "AMP013",
            "--extend-select=AMP012",
            "AMP004",
            "AMP004, AMP013",
            "AMP004, AMP012",
        ),
        (
            "AMPLINT_IGNORE",
            "ignore",
            "AMP007",
            "--ignore=AMP005",
            "AMP006",
            "AMP006, AMP007",
            "AMP006, AMP005",
        ),
        (
            "AMPLINT_EXTEND_EXCLUDE",
            "extend-exclude",
            "vendored",
            "--extend-exclude=third",
            "gen",
            "gen, vendored",
            "gen, third",
        ),
        ("AMPLINT_PRECISION", "precision", "fp16", "--precision=fp32", "bf16", "fp16", "fp32"),
        (
            "AMPLINT_MODES",
            "modes",
            "cast-fp16",
            "--modes=autocast-fp16",
            "autocast-bf16",
            "cast-fp16",
            "autocast-fp16",
        ),
        (
            "AMPLINT_TORCH_VERSION",
            "torch-version",
            ">=2.4",
            "--torch-version=>=2.6",
            ">=2.1",
            ">=2.4",
            ">=2.6",
        ),
    ],
)
def test_a_setting_comes_from_the_flag_else_the_environment_else_the_configuration(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    key: str,
    environment: str,
    flag: str,
    configured: str,
    from_environment: str,
    from_flag: str,
) -> None:
    write(tmp_path / "pyproject.toml", CONFIG)
    write(tmp_path / "model.py", HAZARD)
    monkeypatch.chdir(tmp_path)
    values, origins = _shown(capsys)
    assert values[key] == configured and origins[key] == str(tmp_path / "pyproject.toml")
    monkeypatch.setenv(variable, environment)
    values, origins = _shown(capsys)
    assert values[key] == from_environment and origins[key] == variable
    values, origins = _shown(capsys, flag)
    assert values[key] == from_flag and origins[key] == flag.split("=")[0]


def test_cache_dir_and_show_conditional_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "pyproject.toml", CONFIG + "show-conditional = true\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AMPLINT_CACHE_DIR", str(tmp_path / "from-environment"))
    monkeypatch.setenv("AMPLINT_SHOW_CONDITIONAL", "false")
    values, origins = _shown(capsys)
    assert (
        values["cache-dir"] == str(tmp_path / "from-environment")
        and origins["cache-dir"] == "AMPLINT_CACHE_DIR"
    )
    assert values["show-conditional"] == "false"
    values, origins = _shown(capsys, "--cache-dir", "from-flag", "--show-conditional")
    assert values["cache-dir"] == str(tmp_path / "from-flag") and origins["cache-dir"] == "--cache-dir"
    assert values["show-conditional"] == "true"


def test_output_format_file_and_no_cache_from_the_environment(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    environment = {**os.environ, "AMPLINT_OUTPUT_FORMAT": "json", "AMPLINT_NO_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "amplint", "check"],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and json.loads(done.stdout)["diagnostics"][0]["code"] == HAZARD_CODE
    assert not (tmp_path / ".amplint_cache").exists()
    flags_win = subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--format", "concise"],
        cwd=tmp_path,
        env={**environment, "AMPLINT_OUTPUT_FILE": str(tmp_path / "report.txt")},
        capture_output=True,
        text=True,
    )
    assert flags_win.returncode == 1 and flags_win.stdout == ""
    assert (tmp_path / "report.txt").read_text(encoding="utf-8").startswith(f"model.py:5:9: {HAZARD_CODE}")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "AMPLINT_NO_CACHE",
            "maybe",
            "AMPLINT_NO_CACHE must be one of 1, true, yes, on or 0, false, no, off",
        ),
        ("AMPLINT_OUTPUT_FORMAT", "xml", "AMPLINT_OUTPUT_FORMAT must be one of text, concise, json"),
        ("AMPLINT_SELECT", "AMP999", "AMPLINT_SELECT names 'AMP999', which matches no rule"),
    ],
)
def test_a_wrong_environment_value_is_a_usage_error_naming_the_variable(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    variable: str,
    value: str,
    message: str,
) -> None:
    write(tmp_path / "model.py", HAZARD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, value)
    assert main(["check"]) == 2
    assert message in capsys.readouterr().err
