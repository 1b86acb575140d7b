"""The pytest plugin, as a team uses it: a test in their own suite checks the model's traced dtypes
against the committed `amplint.lock`, in a real pytest run in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import amplint_run, write

ROOT = Path(__file__).resolve().parents[2]

MODEL = """\
import torch


class Head(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.proj(x){cast}


def factory():
    torch.manual_seed(0)
    return Head(), (torch.randn(2, 8),)
"""

USER_TEST = """\
def test_dtype_contract(amplint_lock):
    amplint_lock.check("model.py:factory")
"""


def _pytest(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_contract.py"],
        cwd=root,
        capture_output=True,
        text=True,
    )


def test_the_fixture_passes_on_the_locked_model_and_fails_naming_the_change(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.amplint]\n")
    write(tmp_path / "model.py", MODEL.format(cast=""))
    write(tmp_path / "test_contract.py", USER_TEST)
    locked = amplint_run(tmp_path, "lock", "model.py:factory")
    assert locked.returncode == 0, locked.stderr
    assert (tmp_path / "amplint.lock").is_file()
    passed = _pytest(tmp_path)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "1 passed" in passed.stdout
    # A float32 upcast added to the model's output: the contract the lock records is broken.
    write(tmp_path / "model.py", MODEL.format(cast=".float()"))
    failed = _pytest(tmp_path)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "amplint: amplint.lock differs from the trace" in failed.stdout
    assert "model.py:10:" in failed.stdout  # the line of the model where the dtype changed


def test_a_missing_lock_fails_with_what_to_do(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.amplint]\n")
    write(tmp_path / "model.py", MODEL.format(cast=""))
    write(tmp_path / "test_contract.py", USER_TEST)
    failed = _pytest(tmp_path)
    assert failed.returncode == 1
    assert "amplint.lock does not exist: write it with `amplint lock` and commit it" in failed.stdout


def _interpreter_without_torch(folder: Path) -> Path:
    """A real virtual environment (no system site-packages) holding what this one holds but torch:
    each installed distribution linked in, torch's left out."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    installed = Path(pytest.__file__).resolve().parents[1]
    for entry in installed.iterdir():
        stem = entry.name.split("-")[0].split(".")[0].lower()
        # amplint itself comes from the tree under test (PYTHONPATH); .pth files would bring it too.
        if (
            stem in {"torch", "torchgen", "functorch", "amplint"}
            or entry.suffix == ".pth"
            or stem.startswith("__")
        ):
            continue
        (Path(purelib) / entry.name).symlink_to(entry)
    return python


def test_without_torch_the_fixture_says_how_to_install_it(tmp_path: Path) -> None:
    python = _interpreter_without_torch(tmp_path / "venv")
    project = tmp_path / "project"
    write(project / "pyproject.toml", "[tool.amplint]\n")
    write(project / "model.py", MODEL.format(cast=""))
    write(project / "test_contract.py", USER_TEST)
    locked = amplint_run(project, "lock", "model.py:factory")  # written where torch is installed
    assert locked.returncode == 0, locked.stderr
    # The package alone on the path: the checkout's root may hold an `amplint.egg-info` (an editable
    # install writes one), whose entry point would register the plugin a second time.
    source = tmp_path / "source"
    source.mkdir()
    (source / "amplint").symlink_to(ROOT / "amplint")
    environment = {**os.environ, "PYTHONPATH": str(source)}
    no_torch = subprocess.run([python, "-c", "import torch"], env=environment, capture_output=True, text=True)
    assert no_torch.returncode == 1 and "No module named 'torch'" in no_torch.stderr
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "amplint.integrations.pytest_plugin"],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "amplint: amplint_lock traces the model and needs torch: pip install 'amplint[runtime]'"
        in done.stdout
    )
    output = done.stdout + done.stderr
    assert "Traceback" not in output and "ModuleNotFoundError" not in output
