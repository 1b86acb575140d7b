"""No code of the checked repository runs while amplint checks it: a repository holding modules named
like the standard library's (`json.py`, `tomllib.py`, `tokenize.py`, ...) is checked by every way
amplint is started (the console script, `python -m amplint`, the GitHub Action's commands as
action.yml writes them, the pre-commit hook's entry, the language server's command, the worker
pool under each start method), and none of those modules is imported."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support import HAZARD, HAZARD_CODE, write

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(sys.executable).parent
# What each planted module does when imported: leave a mark beside itself (builtins only).
PLANTED = "open(__file__ + '.ran', 'w').close()\n"


# Seconds: a guard against a hang only. Each command here takes a few seconds, and about 30 on two
# cores loaded by eight busy processes and other jobs.
GUARD = 600


def plant(root: Path) -> Path:
    """A repository with a finding to report, a configuration to read, and a module for every name
    of the standard library."""
    write(root / "model.py", HAZARD)
    write(root / "pyproject.toml", "[tool.amplint]\nextend-select = []\n")
    for name in sys.stdlib_module_names:
        if name != "__main__":
            write(root / f"{name}.py", PLANTED)
    return root


def ran(root: Path) -> list[str]:
    return sorted(path.name.removesuffix(".py.ran") for path in root.glob("*.ran"))


def script(name: str) -> Path:
    path = SCRIPTS / name
    if not path.is_file():
        pytest.skip(f"no `{name}` console script beside {sys.executable} (amplint is not installed)")
    return path


def checked(root: Path, command: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 1, done.stderr  # the finding, reported
    assert f"model.py:5:9: {HAZARD_CODE}" in done.stdout
    return done


def test_the_planted_modules_would_run(tmp_path: Path) -> None:
    """The trap works: Python started the ordinary way in the repository imports them."""
    root = plant(tmp_path)
    subprocess.run([sys.executable, "-S", "-c", "import json, tokenize, difflib"], cwd=root, check=True)
    assert {"difflib", "json", "tokenize"} <= set(ran(root))


def test_the_console_script(tmp_path: Path) -> None:
    root = plant(tmp_path)
    checked(root, [str(script("amplint")), "check", "."])
    assert ran(root) == []


@pytest.mark.parametrize(
    "flags",
    [
        pytest.param(
            [],
            marks=pytest.mark.skipif(
                sys.version_info < (3, 11),
                reason="before 3.11 `runpy`, which runs `-m`, is imported from the working directory",
            ),
            id="python -m amplint",
        ),
        pytest.param(["-I"], id="python -I -m amplint"),
    ],
)
def test_python_m_amplint(tmp_path: Path, flags: list[str]) -> None:
    root = plant(tmp_path)
    checked(root, [sys.executable, *flags, "-m", "amplint", "check", "."])
    assert ran(root) == []


def _action_commands() -> list[str]:
    """Each line of action.yml's scripts that starts Python."""
    action = yaml.safe_load((REPO_ROOT / "action.yml").read_text(encoding="utf-8"))
    lines = [
        line.strip()
        for step in action["runs"]["steps"]
        if "run" in step
        for line in step["run"].splitlines()
        if '"$AMPLINT_PYTHON"' in line
    ]
    assert len(lines) == 5  # install, check, summary, SARIF, lockfile check
    return lines


def test_the_action_starts_python_isolated() -> None:
    for line in _action_commands():
        assert line.startswith('"$AMPLINT_PYTHON" -I -m '), line


def test_the_action_check_command_as_written(tmp_path: Path) -> None:
    root = plant(tmp_path / "workspace")
    (check,) = [line for line in _action_commands() if "amplint check --format github" in line]
    env = {
        **os.environ,
        "AMPLINT_PYTHON": sys.executable,
        "AMPLINT_ARGS": "--no-cache",
        "AMPLINT_PATHS": ".",
    }
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", f"set -f\n{check}"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=GUARD,
    )
    # Isolated, the interpreter imports the installed amplint (the trap is in the workspace either way).
    assert done.returncode == 1, done.stderr
    assert f"title={HAZARD_CODE}" in done.stdout
    assert ran(root) == []


def test_the_pre_commit_hook_entry(tmp_path: Path) -> None:
    hooks = yaml.safe_load((REPO_ROOT / ".pre-commit-hooks.yaml").read_text(encoding="utf-8"))
    (hook,) = [hook for hook in hooks if hook["id"] == "amplint"]
    # pre-commit runs a `language: python` hook's entry from its environment's scripts, in the
    # repository's root, with the staged files after it.
    program, *args = shlex.split(hook["entry"])
    root = plant(tmp_path)
    checked(root, [str(script(program)), *args, "model.py", "json.py"])
    assert ran(root) == []


def test_the_language_server_command(tmp_path: Path) -> None:
    pytest.importorskip("pygls")
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    root = plant(tmp_path)
    # The command docs/integrations.md gives editors.
    assert '"amplint", "server"' in (REPO_ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    server = script("amplint")

    async def session() -> list[types.Diagnostic]:
        client = LanguageClient("amplint-test", "1")
        published: asyncio.Queue[types.PublishDiagnosticsParams] = asyncio.Queue()

        @client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def _diagnostics(params: types.PublishDiagnosticsParams) -> None:
            published.put_nowait(params)

        await client.start_io(str(server), "server", cwd=str(root))
        try:
            await client.initialize_async(
                types.InitializeParams(capabilities=types.ClientCapabilities(), root_uri=root.as_uri())
            )
            client.initialized(types.InitializedParams())
            client.text_document_did_open(
                types.DidOpenTextDocumentParams(
                    text_document=types.TextDocumentItem(
                        uri=(root / "model.py").as_uri(), language_id="python", version=1, text=HAZARD
                    )
                )
            )
            opened = await asyncio.wait_for(published.get(), GUARD)
            await client.shutdown_async(None)
            client.exit(None)
            return list(opened.diagnostics)
        finally:
            await client.stop()

    diagnostics = asyncio.run(session())
    assert [d.code for d in diagnostics] == [HAZARD_CODE]
    assert ran(root) == []


# A program outside the repository that checks it with a pool of two workers started by `method`.
POOL_RUNNER = """\
import multiprocessing
import sys

if __name__ == "__main__":
    multiprocessing.set_start_method(sys.argv[1])
    from amplint.cli import main

    sys.exit(main(["check", "--no-cache", "--jobs", "2", "."]))
"""


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="PYTHONSAFEPATH, which keeps a new interpreter's working directory off"
    " its import path, came in Python 3.11",
)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_worker_pool_under_every_start_method(tmp_path: Path, method: str) -> None:
    # These start each worker (and their helpers) as a new interpreter run with `-c` in the repository.
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    root = plant(tmp_path / "repo")
    runner = write(tmp_path / "runner" / "run.py", POOL_RUNNER)
    checked(root, [sys.executable, str(runner), method])
    assert ran(root) == []
