"""Progress on a terminal, nothing elsewhere: a check whose stderr is a pseudo-terminal draws its
progress line and clears it; piped, or with --quiet, it prints none."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from support import HAZARD, write


def _stderr_on_a_terminal(cwd: Path, *args: str) -> bytes:
    main, secondary = pty.openpty()
    try:
        subprocess.run(
            [sys.executable, "-m", "amplint", *args],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=secondary,
            env={**os.environ, "NO_COLOR": "1"},
        )
        os.close(secondary)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the terminal is closed once everything is read
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(main)


def test_a_check_shows_progress_only_on_a_terminal(tmp_path: Path) -> None:
    for i in range(30):
        write(tmp_path / f"m{i}.py", HAZARD)
    shown = _stderr_on_a_terminal(tmp_path, "check", ".", "--no-cache")
    assert b"checking files" in shown and shown.endswith(b"\r\x1b[2K")  # drawn, then cleared
    quiet = _stderr_on_a_terminal(tmp_path, "check", ".", "--no-cache", "--quiet")
    assert b"checking files" not in quiet
    piped = subprocess.run(
        [sys.executable, "-m", "amplint", "check", ".", "--no-cache"],
        cwd=tmp_path,
        capture_output=True,
    )
    assert b"checking files" not in piped.stderr and b"\x1b" not in piped.stderr


def test_the_progress_line_names_each_step_before_the_files_and_the_time_taken(tmp_path: Path) -> None:
    # A large tree sat at `0/4719` for a minute: finding the files and reading the project's
    # execution modes come before the first file is checked, and the line says so, with the time.
    for i in range(30):
        write(tmp_path / f"m{i}.py", HAZARD)
    shown = _stderr_on_a_terminal(tmp_path, "check", ".", "--no-cache")
    assert re.search(rb"checking files \(finding files\) \d+s", shown)
    assert re.search(rb"checking files 0/30 \(reading execution modes\) \d+s", shown)
    assert re.search(rb"checking files \d+/30 \d+s", shown)
