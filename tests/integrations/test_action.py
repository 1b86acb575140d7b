"""The composite GitHub Action in `action.yml`, its steps run the way the runner runs them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_LINE

REPO_ROOT = Path(__file__).resolve().parents[2]
ACTION_FILE = REPO_ROOT / "action.yml"

CLEAN = "def add(a, b):\n    return a + b\n"

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# A workflow command as the runner parses it; properties escape ',' and ':' themselves,
# and the message escapes newlines, so one command is exactly one line.
WORKFLOW_COMMAND = re.compile(
    r"::(?P<command>error|warning|notice) "
    r"file=(?P<file>[^,:]+),line=(?P<line>\d+),col=(?P<col>\d+),"
    r"endLine=(?P<end_line>\d+),endColumn=(?P<end_column>\d+),"
    r"title=(?P<title>[^,:]+)::(?P<message>[^\r\n]+)"
)


def load_action() -> dict[str, Any]:
    return yaml.safe_load(ACTION_FILE.read_text(encoding="utf-8"))


def substitute(text: str, context: dict[str, str]) -> str:
    # The runner evaluates `${{ ... }}` into the text before the step starts; only the
    # expressions this action may use are known here, so anything else fails loudly.
    def evaluate(match: re.Match[str]) -> str:
        expression = match.group(1)
        if expression not in context:
            raise AssertionError(f"unexpected expression in action.yml: {match.group(0)}")
        return context[expression]

    return EXPRESSION.sub(evaluate, text)


@dataclass
class StepResult:
    name: str
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Runner:
    """Runs the action's steps with a fresh venv's `bin` first on PATH."""

    venv_bin: Path
    runner_temp: Path
    action_path: Path
    install: StepResult | None = None

    def run_step(
        self, step: dict[str, Any], workspace: Path, inputs: dict[str, str] | None = None
    ) -> StepResult:
        action = load_action()
        values = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
        values.update(inputs or {})
        context = {"github.action_path": str(self.action_path), "github.workspace": str(workspace)}
        context.update({f"inputs.{name}": value for name, value in values.items()})

        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"} and not key.startswith("GIT_")
        }
        env.update(
            {
                "PATH": f"{self.venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
                "VIRTUAL_ENV": str(self.venv_bin.parent),
                "CI": "true",
                "GITHUB_ACTIONS": "true",
                "GITHUB_WORKSPACE": str(workspace),
                "GITHUB_ACTION_PATH": str(self.action_path),
                "GITHUB_REPOSITORY": "amplint/example",
                "GITHUB_EVENT_NAME": "pull_request",
                "GITHUB_SHA": "0" * 40,
                "GITHUB_SERVER_URL": "https://github.com",
                "GITHUB_STEP_SUMMARY": str(self.runner_temp / "step-summary.md"),
                "RUNNER_OS": "Linux",
                "RUNNER_TEMP": str(self.runner_temp),
                "NO_COLOR": "1",
            }
        )
        env.update({key: substitute(str(value), context) for key, value in step.get("env", {}).items()})

        # Like the runner: the script goes to a file under RUNNER_TEMP, run by bash.
        script = self.runner_temp / "step.sh"
        script.write_text(substitute(step["run"], context), encoding="utf-8")
        result = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=workspace,
            env=env,
            capture_output=True,
            text=True,
        )
        return StepResult(step.get("name", ""), result.returncode, result.stdout, result.stderr)


def _steps() -> list[dict[str, Any]]:
    """The steps that run a script (the SARIF upload is another action's step)."""
    return [step for step in load_action()["runs"]["steps"] if "run" in step]


def _install_step() -> dict[str, Any]:
    (step,) = [step for step in _steps() if "pip install" in step["run"]]
    return step


def _check_step() -> dict[str, Any]:
    (step,) = [step for step in _steps() if "amplint check --format github" in step["run"]]
    return step


def _summary_step() -> dict[str, Any]:
    (step,) = [step for step in _steps() if "--format markdown" in step["run"]]
    return step


def _sarif_step() -> dict[str, Any]:
    (step,) = [step for step in _steps() if "--format sarif" in step["run"]]
    return step


def _lock_step() -> dict[str, Any]:
    (step,) = [step for step in _steps() if "amplint lock" in step["run"]]
    return step


def test_action_metadata() -> None:
    action = load_action()
    assert action["name"]
    assert action["description"]
    assert set(action["branding"]) == {"icon", "color"}
    inputs = action["inputs"]
    assert inputs["paths"]["default"] == "."
    assert inputs["args"]["default"] == ""
    assert inputs["python"]["default"] == "python"
    assert inputs["lock-check"]["default"] == "false"
    assert action["runs"]["using"] == "composite"
    assert [step["shell"] for step in _steps()] == ["bash"] * len(_steps())
    assert inputs["summary"]["default"] == "true" and inputs["sarif"]["default"] == "false"
    # The tests below run every script step: install, check, summary, SARIF, the lockfile check.
    assert _steps() == [_install_step(), _check_step(), _summary_step(), _sarif_step(), _lock_step()]
    (upload,) = [step for step in action["runs"]["steps"] if "uses" in step]
    assert upload["uses"].startswith("github/codeql-action/upload-sarif@")
    assert upload["with"]["sarif_file"] == "${{ runner.temp }}/amplint.sarif"
    assert upload["if"] == _sarif_step()["if"] == "${{ !cancelled() && inputs.sarif == 'true' }}"
    assert _summary_step()["if"] == "${{ !cancelled() && inputs.summary == 'true' }}"
    # The lockfile check runs only when asked for, and also after a lint that found something.
    assert _lock_step()["if"] == "${{ !cancelled() && inputs.lock-check == 'true' }}"
    assert "amplint lock --check --format github" in _lock_step()["run"]


def test_no_input_is_interpolated_into_a_script() -> None:
    # `${{ inputs.* }}` in `run:` would be pasted into the script before bash parses it.
    for step in _steps():
        assert not re.search(r"\$\{\{[^}]*\binputs\.", step["run"]), step["run"]


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Runner:
    base = tmp_path_factory.mktemp("action")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    runner_temp = base / "runner-temp"
    runner_temp.mkdir()
    # The runner's action path is a fresh checkout of the action; a copy of the working
    # tree stands in for it, so pip's in-tree build leaves no `build/` in this repository.
    action_path = base / "action-checkout"
    shutil.copytree(
        REPO_ROOT,
        action_path,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
        ),
    )
    runner = Runner(venv_bin=venv / "bin", runner_temp=runner_temp, action_path=action_path)
    # Installing is the slow part, so it runs once here and is checked in its own test.
    install_workspace = base / "install-workspace"
    install_workspace.mkdir()
    runner.install = runner.run_step(_install_step(), install_workspace)
    return runner


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    # actions/checkout leaves a git repository in GITHUB_WORKSPACE.
    root = tmp_path / "workspace"
    root.mkdir()
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    (root / "bad.py").write_text(HAZARD, encoding="utf-8")
    (root / "clean.py").write_text(CLEAN, encoding="utf-8")
    return root


def test_install_step_installs_amplint_into_the_venv(runner: Runner) -> None:
    result = runner.install
    assert result is not None
    assert result.returncode == 0, result.stdout + result.stderr
    amplint = runner.venv_bin / "amplint"
    assert amplint.is_file()
    version = subprocess.run([str(amplint), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("amplint ")


def test_check_step_reports_workflow_commands(runner: Runner, workspace: Path) -> None:
    result = runner.run_step(_check_step(), workspace)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines, result.stderr
    for line in lines:
        match = WORKFLOW_COMMAND.fullmatch(line)
        assert match, f"not a well-formed workflow command: {line!r}"
        assert match["file"] == "bad.py"
        assert HAZARD_CODE in match["title"]
        assert (match["line"], match["col"]) == (str(HAZARD_LINE), str(HAZARD_COLUMN))
        assert int(match["end_line"]) >= int(match["line"])


def test_check_step_several_paths_and_args(runner: Runner, workspace: Path) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "other.py").write_text(HAZARD, encoding="utf-8")
    result = runner.run_step(_check_step(), workspace, {"paths": "bad.py  sub/other.py"})
    assert result.returncode == 1, result.stdout + result.stderr
    matches = [WORKFLOW_COMMAND.fullmatch(line) for line in result.stdout.splitlines()]
    files = [match["file"] if match else None for match in matches]
    assert files == ["bad.py", "sub/other.py"]

    result = runner.run_step(_check_step(), workspace, {"args": "--select AMP006 --quiet"})
    assert (result.returncode, result.stdout) == (0, "")

    result = runner.run_step(_check_step(), workspace, {"args": "--exit-zero"})
    assert result.returncode == 0
    assert HAZARD_CODE in result.stdout


def test_summary_step_appends_every_finding_with_a_link(runner: Runner, workspace: Path) -> None:
    summary = runner.runner_temp / "step-summary.md"
    summary.write_text("earlier step\n", encoding="utf-8")
    result = runner.run_step(_summary_step(), workspace)
    assert result.returncode == 0, result.stdout + result.stderr
    text = summary.read_text(encoding="utf-8")
    assert text.startswith("earlier step\n### amplint: 1 finding in 1 file\n")
    link = (
        f"[`bad.py:{HAZARD_LINE}`](https://github.com/amplint/example/blob/{'0' * 40}/bad.py#L{HAZARD_LINE})"
    )
    assert f"| {link} | {HAZARD_CODE} |" in text


def test_sarif_step_writes_the_file_the_upload_reads(runner: Runner, workspace: Path) -> None:
    result = runner.run_step(_sarif_step(), workspace, {"sarif": "true"})
    assert result.returncode == 0, result.stdout + result.stderr
    log = json.loads((runner.runner_temp / "amplint.sarif").read_text(encoding="utf-8"))
    (run,) = log["runs"]
    assert [r["ruleId"] for r in run["results"]] == [HAZARD_CODE]


def test_lock_step_runs_the_lockfile_check(runner: Runner, workspace: Path) -> None:
    # The action's venv has no torch, which the traces need: the step says so and fails.
    (workspace / "pyproject.toml").write_text(
        '[tool.amplint.runtime]\ntargets = ["clean.py:factory"]\n', encoding="utf-8"
    )
    result = runner.run_step(_lock_step(), workspace, {"lock-check": "true"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "amplint lock traces the model and needs torch" in result.stderr


def test_clean_workspace_passes(runner: Runner, workspace: Path) -> None:
    result = runner.run_step(_check_step(), workspace, {"paths": "clean.py"})
    assert (result.returncode, result.stdout) == (0, ""), result.stderr


@pytest.mark.parametrize(
    "inputs",
    [
        {"paths": "a.py; touch pwned"},
        {"paths": "$(touch pwned)"},
        {"paths": "`touch pwned`"},
        # clean.py exits 0, so an injected command after it would run even under `bash -e`.
        {"paths": "clean.py; touch pwned"},
        {"paths": "clean.py && touch pwned"},
        {"paths": "clean.py\ntouch pwned"},
        {"paths": "a.py || touch pwned"},
        {"paths": '"; touch pwned; echo "'},
        {"paths": "${{ inputs.args }}", "args": "$(touch pwned)"},
        {"args": "--quiet; touch pwned"},
        {"args": "$(touch pwned)"},
    ],
)
def test_hostile_inputs_execute_nothing(runner: Runner, workspace: Path, inputs: dict[str, str]) -> None:
    result = runner.run_step(_check_step(), workspace, inputs)
    assert not list(workspace.rglob("pwned"))
    assert not (runner.runner_temp / "pwned").exists()
    assert not (REPO_ROOT / "pwned").exists()
    # The hostile words reach amplint as plain arguments (paths that do not exist, or
    # unknown options), which it rejects with a usage error.
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error:" in result.stderr


def test_hostile_python_input_executes_nothing(runner: Runner, workspace: Path) -> None:
    result = runner.run_step(_check_step(), workspace, {"python": "python; touch pwned"})
    assert result.returncode == 127, result.stdout + result.stderr
    assert not list(workspace.rglob("pwned"))


def test_globs_in_paths_are_not_expanded(runner: Runner, workspace: Path) -> None:
    # With `set -f` the pattern reaches amplint verbatim instead of matching bad.py.
    result = runner.run_step(_check_step(), workspace, {"paths": "*.py"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "*.py" in result.stderr
