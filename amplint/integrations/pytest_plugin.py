"""A pytest plugin (entry point `pytest11`): keep a model's dtype contract in the project's own tests.

    def test_dtypes_match_the_lock(amplint_lock):
        amplint_lock.check("mypkg/models.py:build")   # or no target: those of [tool.amplint.runtime]

`amplint_lock.check` traces the targets as `amplint lock --check` does and fails the test, listing
every op whose dtype differs from the committed `amplint.lock` with the line of the model it is in.
Loading the plugin costs nothing: torch is imported only when a test asks for a check.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from amplint.report import render

NEEDS_TORCH = "amplint: amplint_lock traces the model and needs torch: pip install 'amplint[runtime]'"


class LockCheck:
    """The `amplint_lock` fixture: `check()` compares a fresh trace with the lock."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def check(self, *targets: str, lockfile: str | Path | None = None, timeout: float | None = None) -> None:
        from amplint.config import ConfigError, load_settings
        from amplint.lock.command import LockError, lock_path, run_lock

        if importlib.util.find_spec("torch") is None:  # the trace's child would die on its import
            pytest.fail(NEEDS_TORCH, pytrace=False)
        try:
            settings = load_settings([self.root], None)
            path = lock_path(settings, Path(lockfile) if lockfile is not None else None)
            run = run_lock(settings, list(targets) or None, mode="check", path=path, timeout=timeout)
        except (ConfigError, LockError) as exc:
            pytest.fail(f"amplint: {exc}", pytrace=False)
        if run.differs:
            report = render("concise", run.diagnostics, sources={}, color=False)
            pytest.fail(f"amplint: {run.status}:\n{report}", pytrace=False)


@pytest.fixture
def amplint_lock(pytestconfig: pytest.Config) -> LockCheck:
    """Check traced dtypes against the project's `amplint.lock` (found from pytest's root)."""
    return LockCheck(Path(pytestconfig.rootpath))
