"""`--fix` loses nothing: a file it may not write is reported and left alone, a rewritten file keeps
its mode, owner, group and hard links, a file changed since it was read is not overwritten, and two
runs at once leave every file either as it was or fixed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_FIXED, amplint_run, write

from amplint.source import WriteRefused, replace_file

needs_posix = pytest.mark.skipif(os.name != "posix", reason="owners, groups and hard links are POSIX")


def test_a_read_only_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    path.chmod(0o444)
    done = amplint_run(tmp_path, "check", "--fix", "model.py")
    assert path.read_text(encoding="utf-8") == HAZARD
    assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert "amplint: warning: model.py: read-only (no write permission); left as it is" in done.stderr
    assert "Fixed" not in done.stdout  # nothing was written, so nothing is counted as fixed
    assert done.returncode == 1  # the finding remains


@needs_posix
def test_a_hard_linked_file_is_written_through_its_inode(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    other = tmp_path / "elsewhere.py"
    os.link(path, other)
    inode = path.stat().st_ino
    assert amplint_run(tmp_path, "check", "--fix", "model.py").returncode == 0
    assert path.stat().st_ino == inode and path.stat().st_nlink == 2
    assert other.read_text(encoding="utf-8") == HAZARD_FIXED  # both names still share the content
    # No temporary copy is left beside them.
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["elsewhere.py", "model.py"]


@needs_posix
@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0, reason="changing a file's owner needs root"
)
def test_a_file_of_another_owner_and_group_keeps_them(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    os.chown(path, 65534, 65534)  # nobody / nogroup
    path.chmod(0o640)
    assert amplint_run(tmp_path, "check", "--fix", "model.py").returncode == 0
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o640)
    assert path.read_text(encoding="utf-8") == HAZARD_FIXED


@needs_posix
def test_a_file_with_mode_640_keeps_it(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    path.chmod(0o640)
    assert amplint_run(tmp_path, "check", "--fix", "model.py").returncode == 0
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.read_text(encoding="utf-8") == HAZARD_FIXED


def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    path.write_text(HAZARD + "# edited meanwhile\n", encoding="utf-8")
    with pytest.raises(WriteRefused, match="changed on disk since it was read"):
        replace_file(path, HAZARD_FIXED.encode(), expected=HAZARD.encode())
    assert path.read_text(encoding="utf-8") == HAZARD + "# edited meanwhile\n"


def test_two_runs_at_once_leave_each_file_as_it_was_or_fixed(tmp_path: Path) -> None:
    paths = [write(tmp_path / "pkg" / f"m{i}.py", HAZARD) for i in range(40)]
    command = [sys.executable, "-m", "amplint", "check", "--fix", "--no-cache", "--jobs", "1", "pkg"]
    runs = [
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for run in runs:
        run.communicate()
    assert {path.read_text(encoding="utf-8") for path in paths} == {HAZARD_FIXED}
    assert sorted(p.name for p in (tmp_path / "pkg").iterdir()) == sorted(p.name for p in paths)


def test_a_read_only_lockfile_is_not_replaced(tmp_path: Path) -> None:
    """`amplint lock --update` writes with `replace_file`, which leaves a read-only file alone."""
    lock = tmp_path / "amplint.lock"
    lock.write_text("old\n", encoding="utf-8")
    lock.chmod(0o444)
    with pytest.raises(WriteRefused, match="read-only"):
        replace_file(lock, b"new\n")
    assert lock.read_text(encoding="utf-8") == "old\n"
