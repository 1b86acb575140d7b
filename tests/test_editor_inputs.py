"""What editors, formatters and CI jobs hand amplint: code on standard input named by
`--stdin-filename`, a cache folder of their choosing, colour asked for or refused by the environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_FIXED, HAZARD_LINE, amplint_run, write


def _amplint(
    cwd: Path, *args: str, stdin: bytes = b"", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    environment = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "amplint", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        env={**environment, **(env or {})},
    )


def test_stdin_is_checked_as_the_named_file_with_its_configuration(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml", '[tool.amplint]\nper-file-ignores = { "pkg/generated/*" = ["AMP008"] }\n'
    )
    (tmp_path / "pkg").mkdir()
    proc = _amplint(tmp_path, "check", "-", "--stdin-filename", "pkg/model.py", stdin=HAZARD.encode())
    assert proc.returncode == 1, proc.stderr
    assert f"pkg/model.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in proc.stdout.decode()
    # The named file need not exist, nor its folder; its per-file ignores apply.
    ignored = _amplint(
        tmp_path, "check", "-", "--stdin-filename", "pkg/generated/m.py", stdin=HAZARD.encode()
    )
    assert ignored.returncode == 0, ignored.stdout
    assert not (tmp_path / "pkg" / "model.py").exists()


def test_stdin_fix_writes_the_fixed_code_to_stdout_keeping_its_bytes(tmp_path: Path) -> None:
    code = ("\ufeff" + HAZARD.replace("\n", "\r\n")).encode("utf-8")
    proc = _amplint(tmp_path, "check", "-", "--stdin-filename", "m.py", "--fix", stdin=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ("\ufeff" + HAZARD_FIXED.replace("\n", "\r\n")).encode("utf-8")
    assert b"Fixed 1 finding, 0 remaining." in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written, nothing cached


def test_stdin_with_nothing_to_fix_comes_back_unchanged(tmp_path: Path) -> None:
    code = b"x = 1\n"
    proc = _amplint(tmp_path, "check", "-", "--fix", stdin=code)
    assert (proc.returncode, proc.stdout) == (0, code)


def test_stdin_that_python_refuses_is_one_amp900_naming_it(tmp_path: Path) -> None:
    proc = _amplint(
        tmp_path, "check", "-", "--stdin-filename", "broken.py", "--format", "concise", stdin=b"def f(:\n"
    )
    assert proc.returncode == 1
    assert proc.stdout.decode().startswith("broken.py:1:")
    assert "AMP900" in proc.stdout.decode()


def test_stdin_mixed_with_paths_is_a_usage_error(tmp_path: Path) -> None:
    write(tmp_path / "a.py", "x = 1\n")
    for args in (("-", "a.py"), ("a.py", "--stdin-filename", "b.py")):
        proc = _amplint(tmp_path, "check", *args)
        assert proc.returncode == 2 and proc.stderr.decode().count("\n") == 1, proc.stderr


def test_stdin_with_add_noqa_is_refused_and_the_file_on_disk_is_left_alone(tmp_path: Path) -> None:
    path = write(tmp_path / "m.py", HAZARD)
    proc = _amplint(tmp_path, "check", "-", "--stdin-filename", "m.py", "--add-noqa", stdin=HAZARD.encode())
    assert proc.returncode == 2
    assert (
        proc.stderr.decode()
        == "amplint: error: --add-noqa edits files: it cannot suppress findings in standard input\n"
    )
    assert path.read_text() == HAZARD


def test_cache_dir_moves_the_cache_and_clean_removes_only_a_cache(tmp_path: Path) -> None:
    write(tmp_path / "m.py", HAZARD)
    proc = amplint_run(tmp_path, "check", ".", "--cache-dir", "build/lint-cache")
    assert proc.returncode == 1
    cache = tmp_path / "build" / "lint-cache"
    assert (cache / "CACHEDIR.TAG").is_file() and not (tmp_path / ".amplint_cache").exists()
    mine = write(tmp_path / "src" / "keep.py", "x = 1\n")
    refused = amplint_run(tmp_path, "clean", "--cache-dir", "src")
    assert refused.returncode == 2 and "not a cache amplint made" in refused.stderr
    assert mine.is_file()
    assert amplint_run(tmp_path, "clean", "--cache-dir", "build/lint-cache").returncode == 0
    assert not cache.exists()


def test_cache_dir_in_the_configuration_is_relative_to_it(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\ncache-dir = ".cache/amplint"\n')
    write(tmp_path / "sub" / "m.py", HAZARD)
    assert amplint_run(tmp_path / "sub", "check", ".").returncode == 1
    assert (tmp_path / ".cache" / "amplint" / "CACHEDIR.TAG").is_file()
    write(tmp_path / "pyproject.toml", "[tool.amplint]\ncache-dir = 3\n")
    proc = amplint_run(tmp_path, "check", ".")
    assert proc.returncode == 2 and "'cache-dir' must be a folder path" in proc.stderr


def test_colour_follows_force_color_and_no_color(tmp_path: Path) -> None:
    write(tmp_path / "m.py", HAZARD)
    escape = b"\x1b["
    assert escape not in _amplint(tmp_path, "check", ".", "--no-cache").stdout  # a pipe: no colour
    assert escape in _amplint(tmp_path, "check", ".", "--no-cache", env={"FORCE_COLOR": "1"}).stdout
    both = {"FORCE_COLOR": "1", "NO_COLOR": "1"}
    assert escape not in _amplint(tmp_path, "check", ".", "--no-cache", env=both).stdout
    forced = _amplint(tmp_path, "check", ".", "--no-cache", "--no-color", env={"FORCE_COLOR": "1"})
    assert escape not in forced.stdout
