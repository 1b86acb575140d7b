"""The tests mirror the packages (tests/static, tests/rules, tests/runtime, ...); helpers shared by
several of them live in `support.py` beside this file, which pytest puts on the import path."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 64 KiB tmpfs (a full disk, a mount point); skipped where this machine cannot mount one
    (it needs root)."""
    point = tmp_path / "disk"
    point.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], check=True)
