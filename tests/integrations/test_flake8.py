"""The flake8 plugin, run for real: `flake8 --select AMP` on files on disk, compared with amplint's own
report of the same files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_LINE, OTHERS, amplint_run, write

import amplint


def flake8(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
    )


def amplint_findings(cwd: Path, name: str) -> list[str]:
    """amplint's findings for one file, as flake8's default format prints them."""
    proc = amplint_run(cwd, "check", "--format", "json", name)
    return [
        f"{d['path']}:{d['line']}:{d['column']}: {d['code']} {d['message']}"
        for d in json.loads(proc.stdout)["diagnostics"]
    ]


def test_flake8_reports_what_amplint_reports_at_the_same_position(tmp_path: Path) -> None:
    write(tmp_path / "model.py", HAZARD)
    proc = flake8(tmp_path, "--select", "AMP", "model.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines == amplint_findings(tmp_path, "model.py")
    assert lines[0].startswith(f"model.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE} ")


def test_columns_count_characters(tmp_path: Path) -> None:
    # "é😀" is two characters and six UTF-8 bytes: the finding is at character column 19.
    text = HAZARD.replace(
        "    s = torch.cuda.amp.GradScaler()", '    t = "é😀"; s = torch.cuda.amp.GradScaler()'
    )
    assert text != HAZARD
    write(tmp_path / "uni.py", text)
    proc = flake8(tmp_path, "--select", "AMP", "uni.py")
    assert proc.stdout.splitlines() == amplint_findings(tmp_path, "uni.py")
    assert proc.stdout.startswith(f"uni.py:5:19: {HAZARD_CODE} ")


def test_flake8_select_ignore_and_noqa_decide(tmp_path: Path) -> None:
    write(tmp_path / "others.py", OTHERS)
    write(tmp_path / "model.py", HAZARD.replace("GradScaler()\n", f"GradScaler()  # noqa: {HAZARD_CODE}\n"))
    # amplint's own configuration does not apply under flake8: its `ignore` is not read.
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nignore = ["AMP011", "AMP006"]\n')

    def codes(*args: str) -> list[str]:
        proc = flake8(tmp_path, *args, "others.py", "model.py")
        assert "Traceback" not in proc.stderr, proc.stderr
        return [line.split()[1] for line in proc.stdout.splitlines()]

    assert codes("--select", "AMP") == ["AMP011", "AMP006"]  # model.py's finding has a noqa
    assert codes("--select", "AMP006") == ["AMP006"]
    assert codes("--select", "AMP", "--ignore", "AMP006") == ["AMP011"]
    assert "AMP011" in codes()  # the plugin's codes are selected by default, as flake8 does for plugins


def test_plugin_is_registered(tmp_path: Path) -> None:
    proc = flake8(tmp_path, "--version")
    assert proc.returncode == 0, proc.stderr
    assert f"amplint: {amplint.__version__}" in proc.stdout


def test_plugin_does_not_import_torch(tmp_path: Path) -> None:
    # A `torch` that fails on import, first on the path: flake8 would report the plugin crashing.
    write(
        tmp_path / "shadow" / "torch" / "__init__.py",
        'raise ImportError("the flake8 plugin imported torch")\n',
    )
    write(tmp_path / "model.py", HAZARD)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "shadow"), os.environ.get("PYTHONPATH", "")]),
    }
    proc = flake8(tmp_path, "--select", "AMP", "model.py", env=env)
    assert "imported torch" not in proc.stderr, proc.stderr
    assert proc.stdout.startswith(f"model.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE} "), (
        proc.stdout + proc.stderr
    )


def test_opt_in_rules_run_under_flake8_only_when_named(tmp_path: Path) -> None:
    write(
        tmp_path / "gate.py",
        "import torch\n\n\ndef log_probs(x):\n    return torch.log(torch.softmax(x, dim=-1))\n",
    )
    # AMP003 (opt-in) is not run, and would hold only where the caller runs it in half.
    assert flake8(tmp_path, "--select", "AMP", "gate.py").stdout == ""
    named = flake8(tmp_path, "--select", "AMP", "--amplint-extend-select", "AMP014", "gate.py")
    assert named.stdout.startswith("gate.py:5:12: AMP014 "), named.stdout + named.stderr


def test_flake8_reads_the_projects_execution_modes(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[project]\nname = 'p'\n")
    write(
        tmp_path / "gate.py",
        "import torch\n\n\ndef log_probs(x):\n    return torch.log_softmax(x, dim=-1)\n",
    )
    assert flake8(tmp_path, "--select", "AMP", "--amplint-extend-select", "AMP003", "gate.py").stdout == ""
    # A script elsewhere in the project runs it in bfloat16: now it is a hazard, with evidence.
    write(
        tmp_path / "run.py",
        "import torch\nfrom gate import log_probs\n\ntorch.set_default_dtype(torch.bfloat16)\nlog_probs(torch.ones(3))\n",
    )
    found = flake8(tmp_path, "--select", "AMP", "--amplint-extend-select", "AMP003", "gate.py").stdout
    assert (
        found.startswith("gate.py:5:12: AMP003 ")
        and "cast-bf16: `set_default_dtype(torch.bfloat16)` at run.py:4" in found
    )
