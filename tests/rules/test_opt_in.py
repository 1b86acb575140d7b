"""Opt-in rules (off by default) run only where `select` or `extend-select` names their code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import amplint_run, write

from amplint.config import Settings
from amplint.rules import all_rules, rules_for

OPT_IN = sorted(rule.code for rule in all_rules() if not rule.default_on)
# AMP014 is opt-in: `log` of a softmax, where `log_softmax` stays finite.
DECAY = """\
import torch


def log_probs(logits):
    return torch.log(torch.softmax(logits, dim=-1))
"""


def test_the_catalogue_has_opt_in_rules_and_says_so() -> None:
    assert "AMP014" in OPT_IN and "AMP001" not in OPT_IN
    for rule in all_rules():
        if not rule.default_on:
            assert "Off by default (opt-in)" in rule.docs(), rule.code
            assert f"--extend-select {rule.code}" in rule.docs(), rule.code


@pytest.mark.parametrize(
    ("settings", "on"),
    [
        (Settings(), False),
        (Settings(select=("AMP0",)), False),  # a prefix does not turn an opt-in rule on
        (Settings(select=("AMP014",)), True),
        (Settings(extend_select=("AMP014",)), True),
        (Settings(extend_select=("AMP014",), ignore=("AMP014",)), False),  # ties go to ignore
        (Settings(extend_select=("AMP014",), ignore=("AMP0",)), True),  # the longer entry wins
        (Settings(select=("ALL",)), True),  # as in ruff: every rule
        (Settings(select=("ALL",), ignore=("AMP014",)), False),  # ALL is the least specific entry
        (Settings(select=("ALL",), ignore=("AMP0",)), False),
    ],
)
def test_selection(settings: Settings, on: bool) -> None:
    assert settings.is_selected("AMP014", opt_in=True) is on
    codes = {rule.code for rule in rules_for(settings, Path("m.py"))}
    assert ("AMP014" in codes) is on


def test_default_rules_stay_on_beside_extend_select() -> None:
    codes = {rule.code for rule in rules_for(Settings(extend_select=("AMP014",)), Path("m.py"))}
    default = {r.code for r in all_rules() if r.default_on and not r.runtime_only and r.code != "AMP900"}
    assert default <= codes and "AMP014" in codes and not (set(OPT_IN) - {"AMP014"}) & codes


def test_the_core_rules_are_on_by_default() -> None:
    codes = {rule.code for rule in rules_for(Settings(), Path("m.py"))}
    assert {"AMP001", "AMP007", "AMP013"} <= codes
    # Opt-in by the first-contact reads (docs/measured.md): 25, 24 and 21 of them, none real; AMP004's
    # 22, 2 real; AMP020's 23, 9 useful; AMP017's 21, 6 useful; AMP005's 20, 4 real; AMP009's 21, 9
    # useful; AMP016's 20, 11 useful.
    opt_in = {"AMP002", "AMP003", "AMP004", "AMP005", "AMP009", "AMP010", "AMP016", "AMP017", "AMP020"}
    assert not opt_in & codes


def _codes(cwd: Path, *args: str) -> list[str]:
    # The function's logits are its caller's: the finding is conditional, shown on request.
    proc = amplint_run(cwd, "check", "--no-cache", "--show-conditional", "--format", "json", *args, "m.py")
    assert proc.returncode in (0, 1), proc.stderr
    # AMP003, where a configuration turns it on, reports the same line: this test is about AMP014.
    return [d["code"] for d in json.loads(proc.stdout)["diagnostics"] if d["code"] != "AMP003"]


def test_the_command_line_and_the_configuration_turn_it_on(tmp_path: Path) -> None:
    write(tmp_path / "m.py", DECAY)
    assert _codes(tmp_path) == []
    assert _codes(tmp_path, "--extend-select", "AMP014") == ["AMP014"]
    assert _codes(tmp_path, "--select", "AMP014") == ["AMP014"]
    assert _codes(tmp_path, "--select", "ALL") == ["AMP014"]
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nextend-select = ["AMP014"]\n')
    assert _codes(tmp_path) == ["AMP014"]
    assert _codes(tmp_path, "--ignore", "AMP014") == []


def test_a_bad_extend_select_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path / "m.py", DECAY)
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nextend-select = ["XYZ1"]\n')
    proc = amplint_run(tmp_path, "check", "m.py")
    assert proc.returncode == 2
    assert "extend-select" in proc.stderr and "Traceback" not in proc.stderr
