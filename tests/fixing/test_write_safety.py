"""`--fix` loses nothing: a file it may not write is reported and left alone, a rewritten file keeps
its mode, owner, group and hard links, a file changed since it was read is not overwritten, and two
runs at once leave every file either as it was or fixed."""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_CODE, HAZARD_COLUMN, HAZARD_FIXED, HAZARD_LINE, amplint_run, write

import amplint.source
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


def _fill(disk: Path, leave: int) -> None:
    """Fill `disk` until exactly `leave` blocks are free."""
    fs = os.statvfs(disk)
    (disk / "filler").write_bytes(b"\0" * ((fs.f_bavail - leave) * fs.f_frsize))
    assert os.statvfs(disk).f_bavail == leave


# Exactly two 4 KiB blocks; its fix adds one byte, so the fixed file needs a third.
GROWING = HAZARD + "#" * (8192 - len(HAZARD) - 1) + "\n"


@needs_posix
@pytest.mark.parametrize("kind", ["hard link", "other owner"])
def test_a_full_disk_never_truncates_a_file_written_in_place(tmpfs: Path, kind: str) -> None:
    path = tmpfs / "model.py"
    path.write_text(GROWING, encoding="utf-8")
    if kind == "hard link":
        os.link(path, tmpfs / "elsewhere.py")
    else:
        os.chown(path, 65534, 65534)
    # Room for the whole fixed copy beside it (three blocks), none for the file to grow by one.
    _fill(tmpfs, leave=3)
    before = sorted(p.name for p in tmpfs.iterdir())
    done = amplint_run(tmpfs, "check", "--fix", "--no-cache", "model.py")
    assert path.read_text(encoding="utf-8") == GROWING  # whole, as it was
    assert "amplint: warning: model.py: not enough free space to rewrite it in place" in done.stderr
    assert "Fixed" not in done.stdout and done.returncode == 1
    assert sorted(p.name for p in tmpfs.iterdir()) == before  # no copy left behind
    # Given the room, the same run fixes it in place.
    (tmpfs / "filler").unlink()
    assert amplint_run(tmpfs, "check", "--fix", "--no-cache", "model.py").returncode == 0
    assert path.read_text(encoding="utf-8") == HAZARD_FIXED + GROWING[len(HAZARD) :]
    assert path.stat().st_nlink == (2 if kind == "hard link" else 1)
    assert path.stat().st_uid == (os.geteuid() if kind == "hard link" else 65534)


@needs_posix
def test_a_full_disk_leaves_a_file_whole_and_names_it(tmpfs: Path) -> None:
    path = tmpfs / "model.py"
    path.write_text(GROWING, encoding="utf-8")
    _fill(tmpfs, leave=2)  # not even room for the fixed copy
    done = amplint_run(tmpfs, "check", "--fix", "--no-cache", "model.py")
    assert path.read_text(encoding="utf-8") == GROWING
    assert (
        "amplint: error: model.py: could not write the fix: cannot write the new content beside it "
        "(No space left on device); left as it is" in done.stderr
    )
    assert done.returncode == 2
    assert sorted(p.name for p in tmpfs.iterdir()) == ["filler", "model.py"]


def _saved_meanwhile(monkeypatch: pytest.MonkeyPatch, save: Callable[[], None]) -> None:
    """Make an editor's save land once the fixed copy is complete, just before it would be put in place."""
    made = amplint.source._temporary

    def temporary(path: Path, data: bytes, mode: int) -> str:
        tmp = made(path, data, mode)
        save()
        return tmp

    monkeypatch.setattr(amplint.source, "_temporary", temporary)


@pytest.mark.parametrize("hard_linked", [False, True], ids=["renamed", "in place"])
@pytest.mark.parametrize("save", ["by rename", "in place, same size"])
def test_a_save_while_the_fix_is_written_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_linked: bool, save: str
) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    if hard_linked:
        os.link(path, tmp_path / "elsewhere.py")
    edited = HAZARD.replace("s = ", "t = ")  # the user's edit: the same size

    def editor() -> None:
        if save == "by rename":
            write(tmp_path / "model.py~", edited)
            os.replace(tmp_path / "model.py~", path)
        else:
            with open(path, "r+", encoding="utf-8") as handle:
                handle.write(edited)

    _saved_meanwhile(monkeypatch, editor)
    names = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(WriteRefused, match="changed on disk while the fix was written"):
        replace_file(path, HAZARD_FIXED.encode(), expected=HAZARD.encode())
    assert path.read_text(encoding="utf-8") == edited
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # the fixed copy is gone


@needs_posix
def test_a_failed_write_in_place_puts_the_old_bytes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    os.link(path, tmp_path / "elsewhere.py")
    written = amplint.source._write_all
    failures = [OSError(errno.EIO, "Input/output error")]

    def write_all(fd: int, data: bytes) -> None:
        if failures:
            os.write(fd, data[: len(data) // 2])  # half way, as a failing disk stops
            raise failures.pop()
        written(fd, data)

    monkeypatch.setattr(amplint.source, "_write_all", write_all)
    with pytest.raises(
        OSError, match=r"could not rewrite it in place \(Input/output error\); left as it was"
    ):
        replace_file(path, HAZARD_FIXED.encode(), expected=HAZARD.encode())
    assert path.read_text(encoding="utf-8") == HAZARD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.py", "model.py"]


@needs_posix
def test_when_the_old_bytes_cannot_go_back_the_error_names_the_fixed_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "model.py", HAZARD)
    os.link(path, tmp_path / "elsewhere.py")

    def write_all(fd: int, data: bytes) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(amplint.source, "_write_all", write_all)
    with pytest.raises(OSError, match="the fixed content is kept in ") as raised:
        replace_file(path, HAZARD_FIXED.encode(), expected=HAZARD.encode())
    kept = Path(str(raised.value).rsplit("kept in ", 1)[1])
    assert kept.parent == tmp_path and kept.read_text(encoding="utf-8") == HAZARD_FIXED


def _escape_hatch(tmp_path: Path) -> tuple[Path, Path]:
    """A repository with a committed symbolic link leading out of it, and the file it leads to."""
    repo, outside = tmp_path / "repo", tmp_path / "outside"
    victim = write(outside / "victim.py", HAZARD)
    write(repo / "own.py", HAZARD)
    (repo / "innocent.py").symlink_to("../outside/victim.py")
    return repo, victim


@pytest.mark.parametrize("option", ["--fix", "--add-noqa"])
def test_a_symlink_leading_out_of_the_tree_is_checked_but_never_written(tmp_path: Path, option: str) -> None:
    repo, victim = _escape_hatch(tmp_path)
    done = amplint_run(repo, "check", option, "--no-cache", ".")
    assert victim.read_text(encoding="utf-8") == HAZARD
    assert (repo / "innocent.py").is_symlink()
    assert f"innocent.py: a symbolic link leads to {victim}, outside the checked folders" in done.stderr
    assert (repo / "own.py").read_text(encoding="utf-8") != HAZARD  # the tree's own file is written
    if option == "--fix":
        assert f"innocent.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in done.stdout  # still reported
        assert "Fixed 1 finding, 1 remaining." in done.stdout and done.returncode == 1


def test_a_symlink_inside_the_project_is_written_through(tmp_path: Path) -> None:
    target = write(tmp_path / "lib" / "model.py", HAZARD)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").symlink_to("../lib/model.py")
    assert amplint_run(tmp_path, "check", "--fix", "--no-cache", "src").returncode == 0
    assert target.read_text(encoding="utf-8") == HAZARD_FIXED  # the project root holds it


@pytest.mark.parametrize("option", ["--output", "--write-baseline"])
def test_a_report_is_never_written_through_a_symlink_out_of_the_tree(tmp_path: Path, option: str) -> None:
    repo, _ = _escape_hatch(tmp_path)
    (repo / "report.txt").symlink_to("../outside/report.txt")
    (repo / "out").symlink_to("../outside")  # a linked folder on the way leads out as well
    for name in ("report.txt", "out/report.txt"):
        done = amplint_run(repo, "check", option, name, "own.py")
        assert done.returncode == 2
        assert "through a symbolic link, outside the checked folders; not written" in done.stderr
    assert sorted(p.name for p in (tmp_path / "outside").iterdir()) == ["victim.py"]
    # A file named outside the tree is where the user asked for it.
    elsewhere = tmp_path / "amplint.txt"
    done = amplint_run(repo, "check", option, str(elsewhere), "own.py")
    assert done.returncode in (0, 1) and elsewhere.is_file()


def test_stdin_with_a_symlinked_filename_writes_nothing(tmp_path: Path) -> None:
    repo, victim = _escape_hatch(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "amplint", "check", "--fix", "-", "--stdin-filename", "innocent.py"],
        cwd=repo,
        input=HAZARD,
        capture_output=True,
        text=True,
        timeout=600,  # a hang's guard: it takes seconds, ~20 s on a loaded machine
    )
    assert done.stdout == HAZARD_FIXED  # the fixed code goes to stdout, as for a formatter
    assert victim.read_text(encoding="utf-8") == HAZARD
