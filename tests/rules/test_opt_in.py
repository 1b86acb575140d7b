"""Opt-in rules (off by default) run only where `select` or `extend-select` names their code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import amplint_run, write

from amplint.config import Settings
from amplint.rules import all_rules, rules_for

OPT_IN = sorted(rule.code for rule in all_rules() if not rule.default_on)
# AMP001 is opt-in: a bf16 sigmoid that becomes a log-space decay.
DECAY = """\
import torch


def decay(x):
    w = -torch.exp(torch.sigmoid(x.bfloat16()))
    return w
"""


def test_the_catalogue_has_opt_in_rules_and_says_so() -> None:
    assert "AMP001" in OPT_IN
    for rule in all_rules():
        if not rule.default_on:
            assert "Off by default (opt-in)" in rule.docs(), rule.code
            assert f"--extend-select {rule.code}" in rule.docs(), rule.code


@pytest.mark.parametrize(
    ("settings", "on"),
    [
        (Settings(), False),
        (Settings(select=("AMP0",)), False),  # a prefix does not turn an opt-in rule on
        (Settings(select=("AMP001",)), True),
        (Settings(extend_select=("AMP001",)), True),
        (Settings(extend_select=("AMP001",), ignore=("AMP001",)), False),  # ties go to ignore
        (Settings(extend_select=("AMP001",), ignore=("AMP0",)), True),  # the longer entry wins
    ],
)
def test_selection(settings: Settings, on: bool) -> None:
    assert settings.is_selected("AMP001", opt_in=True) is on
    codes = {rule.code for rule in rules_for(settings, Path("m.py"))}
    assert ("AMP001" in codes) is on


def test_default_rules_stay_on_beside_extend_select() -> None:
    codes = {rule.code for rule in rules_for(Settings(extend_select=("AMP001",)), Path("m.py"))}
    default = {r.code for r in all_rules() if r.default_on and not r.runtime_only and r.code != "AMP900"}
    assert default <= codes and "AMP001" in codes and not (set(OPT_IN) - {"AMP001"}) & codes


def _codes(cwd: Path, *args: str) -> list[str]:
    proc = amplint_run(cwd, "check", "--no-cache", "--format", "json", *args, "m.py")
    assert proc.returncode in (0, 1), proc.stderr
    return [d["code"] for d in json.loads(proc.stdout)["diagnostics"]]


def test_the_command_line_and_the_configuration_turn_it_on(tmp_path: Path) -> None:
    write(tmp_path / "m.py", DECAY)
    assert _codes(tmp_path) == []
    assert _codes(tmp_path, "--extend-select", "AMP001") == ["AMP001"]
    assert _codes(tmp_path, "--select", "AMP001") == ["AMP001"]
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nextend-select = ["AMP001"]\n')
    assert _codes(tmp_path) == ["AMP001"]
    assert _codes(tmp_path, "--ignore", "AMP001") == []


def test_a_bad_extend_select_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path / "m.py", DECAY)
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nextend-select = ["XYZ1"]\n')
    proc = amplint_run(tmp_path, "check", "m.py")
    assert proc.returncode == 2
    assert "extend-select" in proc.stderr and "Traceback" not in proc.stderr
