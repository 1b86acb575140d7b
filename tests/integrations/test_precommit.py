"""The pre-commit hook, declared in `.pre-commit-hooks.yaml` and run for real with `pre-commit try-repo`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_LINE

REPO_ROOT = Path(__file__).resolve().parents[2]
HOOKS_FILE = REPO_ROOT / ".pre-commit-hooks.yaml"

CLEAN = "def add(a, b):\n    return a + b\n"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git_env() -> dict[str, str]:
    # Drop GIT_DIR and friends (set when pytest runs from a git hook) so that every git
    # call below acts on the repository it is pointed at, not the caller's.
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    return env


def _git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, env=_git_env(), capture_output=True, text=True, check=True
    )
    return result.stdout


def _init_repo(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    _git(path, "config", "user.email", "amplint-tests@example.com")
    _git(path, "config", "user.name", "amplint tests")
    _git(path, "config", "commit.gpgsign", "false")


def test_hooks_file_declares_amplint_hook() -> None:
    hooks = yaml.safe_load(HOOKS_FILE.read_text(encoding="utf-8"))
    assert isinstance(hooks, list)
    assert [hook["id"] for hook in hooks] == ["amplint", "amplint-lock"]
    hook = hooks[0]
    assert hook["name"] == "amplint"
    assert hook["description"]
    assert hook["entry"] == "amplint check"
    assert hook["language"] == "python"
    assert hook["types_or"] == ["python", "jupyter"]
    # amplint has its own worker pool: several pools at once would oversubscribe the CPUs.
    assert hook["require_serial"] is True
    # pass_filenames must stay on: the hook checks the files pre-commit hands it.
    assert hook.get("pass_filenames", True) is True


def test_hooks_file_declares_the_lockfile_hook() -> None:
    hooks = yaml.safe_load(HOOKS_FILE.read_text(encoding="utf-8"))
    hook = hooks[1]
    assert hook["entry"] == "amplint lock --check"
    assert hook["language"] == "python"
    assert hook["types"] == ["python"]
    # The lock covers the runtime targets, not the files pre-commit hands over: it runs once.
    assert hook["pass_filenames"] is False
    assert hook["require_serial"] is True


def test_hooks_file_passes_pre_commit_schema() -> None:
    clientlib = pytest.importorskip("pre_commit.clientlib")
    hooks = clientlib.load_manifest(str(HOOKS_FILE))
    assert [hook["id"] for hook in hooks] == ["amplint", "amplint-lock"]


def test_check_without_paths_checks_current_directory(tmp_path: Path) -> None:
    # pre-commit runs `amplint check` with no paths when it passes no file names.
    (tmp_path / "bad.py").write_text(HAZARD, encoding="utf-8")
    (tmp_path / "clean.py").write_text(CLEAN, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--no-color"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"bad.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in result.stdout
    assert "clean.py" not in result.stdout


@dataclass
class TryRepo:
    hook_repo: Path
    project: Path
    env: dict[str, str]

    def run(self, *args: str, hook: str = "amplint") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pre_commit", "try-repo", str(self.hook_repo), hook, *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
        )


@pytest.fixture(scope="module")
def try_repo(tmp_path_factory: pytest.TempPathFactory) -> TryRepo:
    pytest.importorskip("pre_commit")
    base = tmp_path_factory.mktemp("precommit")

    # try-repo only carries *tracked* uncommitted changes over (`git add -u`), so a new,
    # untracked file such as `.pre-commit-hooks.yaml` would be missing from its clone.
    # Snapshot the working tree (tracked and untracked, minus ignored) into a scratch
    # repository and commit it there instead: the amplint repository is never touched.
    hook_repo = base / "amplint-snapshot"
    _init_repo(hook_repo)
    listed = _git(REPO_ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in filter(None, listed.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():  # skips tracked files deleted in the working tree
            target = hook_repo / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    _git(hook_repo, "add", "-A")
    _git(hook_repo, "commit", "-q", "-m", "snapshot")

    project = base / "project"
    _init_repo(project)
    (project / "bad.py").write_text(HAZARD, encoding="utf-8")
    (project / "clean.py").write_text(CLEAN, encoding="utf-8")
    _git(project, "add", "bad.py", "clean.py")

    env = _git_env()
    # try-repo builds its hook environment in a temporary store of its own; an isolated
    # PRE_COMMIT_HOME still keeps its logs and any cache out of the user's home.
    env["PRE_COMMIT_HOME"] = str(base / "pre-commit-home")
    env["PRE_COMMIT_COLOR"] = "never"
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return TryRepo(hook_repo=hook_repo, project=project, env=env)


def test_try_repo_all_files_flags_hazard(try_repo: TryRepo) -> None:
    result = try_repo.run("--all-files")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "amplint" in output
    assert "Failed" in output
    assert f"bad.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in output
    assert "clean.py:" not in output


def test_try_repo_clean_file_passes(try_repo: TryRepo) -> None:
    result = try_repo.run("--files", "clean.py")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "Passed" in output
    assert HAZARD_CODE not in output


def test_try_repo_lock_hook_runs_the_lockfile_check(try_repo: TryRepo) -> None:
    # The hook's own environment has no torch unless the user adds it (additional_dependencies):
    # the hook runs once, without file names, and says what is missing.
    result = try_repo.run("--all-files", hook="amplint-lock")
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "amplint lock --check" in output and "Failed" in output
    assert "amplint lock traces the model and needs torch" in output
