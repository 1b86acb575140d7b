"""File discovery on real trees: excludes, .gitignore, virtualenvs, symbolic links, unreadable paths."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from amplint.config import Settings
from amplint.pipeline.discovery import discover


def _tree(root: Path, *files: str) -> None:
    for name in files:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n")


def _rel(root: Path, paths: list[Path]) -> list[str]:
    return [p.relative_to(root).as_posix() for p in paths]


def _walk(root: Path, **settings: object) -> list[str]:
    result = discover([root], Settings(root=root, **settings))  # type: ignore[arg-type]
    assert result.problems == []
    return _rel(root, result.files)


def test_walk_takes_py_files_sorted(tmp_path: Path) -> None:
    _tree(tmp_path, "b.py", "a/z.py", "a/b/c.py", "notes.txt", "stub.pyi", "a/data.json")
    assert _walk(tmp_path) == ["a/b/c.py", "a/z.py", "b.py"]


def test_paths_keep_the_form_the_user_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path, "src/pkg/m.py", "top.py")
    monkeypatch.chdir(tmp_path)
    result = discover([Path("src"), Path("./top.py")], Settings(root=tmp_path))
    assert result.files == [Path("src/pkg/m.py"), Path("top.py")]
    assert not result.files[0].is_absolute()


def test_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path, "pkg/a.py", "pkg/sub/b.py")
    monkeypatch.chdir(tmp_path)
    paths = [Path("pkg/a.py"), Path("pkg"), Path("./pkg/a.py"), Path("pkg/sub"), tmp_path / "pkg"]
    result = discover(paths, Settings(root=tmp_path))
    assert result.files == [Path("pkg/a.py"), Path("pkg/sub/b.py")]


def test_default_excludes(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        "ok.py",
        ".venv/lib/x.py",
        "build/lib/x.py",
        "__pycache__/x.py",
        "pkg.egg-info/x.py",
        "sub/node_modules/x.py",
        ".tox/py311/x.py",
    )
    assert _walk(tmp_path) == ["ok.py"]


def test_exclude_and_extend_exclude(tmp_path: Path) -> None:
    _tree(tmp_path, "build/x.py", "tests/data/bad.py", "tests/test_ok.py", "gen_pb2.py")
    assert _walk(tmp_path, extend_exclude=("tests/data", "*_pb2.py")) == ["tests/test_ok.py"]
    assert _walk(tmp_path, exclude=("tests/data",)) == ["build/x.py", "gen_pb2.py", "tests/test_ok.py"]


def test_explicit_file_any_suffix_but_exclude_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path, "script", "tool.pyw", "tests/data/bad.py", "build/gen.py", "src/ok.py")
    (tmp_path / ".gitignore").write_text("src/\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings(extend_exclude=("tests/data",), root=tmp_path)
    paths = [Path(p) for p in ("script", "tool.pyw", "tests/data/bad.py", "build/gen.py", "src/ok.py")]
    result = discover(paths, settings)
    # Excluded through a parent directory (tests/data, build); .gitignore does not apply to named files.
    assert result.files == [Path("script"), Path("src/ok.py"), Path("tool.pyw")]
    assert result.problems == []


def test_explicit_excluded_directory_is_skipped(tmp_path: Path) -> None:
    _tree(tmp_path, "build/x.py")
    result = discover([tmp_path / "build"], Settings(root=tmp_path))
    assert result.files == [] and result.problems == []


def test_virtualenv_detected_by_pyvenv_cfg(tmp_path: Path) -> None:
    _tree(tmp_path, "main.py", "myenv/pyvenv.cfg", "myenv/lib/site.py", "notenv/lib/mod.py")
    assert _walk(tmp_path) == ["main.py", "notenv/lib/mod.py"]


def test_gitignore_applies_to_the_walk(tmp_path: Path) -> None:
    _tree(tmp_path, "a.py", "gen/x.py", "sub/gen/y.py", "scratch_1.py", "keep/z.py")
    (tmp_path / ".gitignore").write_text("# generated\ngen/\nscratch_*.py\n")
    assert _walk(tmp_path) == ["a.py", "keep/z.py"]


def test_nested_gitignore_with_negation(tmp_path: Path) -> None:
    _tree(
        tmp_path,
        "a.py",
        "skip.py",
        "pkg/skip.py",
        "pkg/local.py",
        "pkg/deep/local.py",
        "other/local.py",
        "pkg/ignored_dir/keep.py",
    )
    (tmp_path / ".gitignore").write_text("skip.py\nignored_dir/\n")
    # Anchored at pkg/: re-include pkg/skip.py, ignore only pkg/local.py; the re-include inside an
    # ignored directory cannot work, as in git.
    (tmp_path / "pkg" / ".gitignore").write_text("!skip.py\n/local.py\n!ignored_dir/keep.py\n")
    assert _walk(tmp_path) == ["a.py", "other/local.py", "pkg/deep/local.py", "pkg/skip.py"]


def test_git_info_exclude_and_walk_from_subdirectory(tmp_path: Path) -> None:
    _tree(tmp_path, "src/pkg/a.py", "src/pkg/secret.py", "src/pkg/gen/b.py", "src/pkg/c.py")
    (tmp_path / ".git" / "info").mkdir(parents=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("secret.py\n")
    (tmp_path / ".gitignore").write_text("/src/pkg/gen/\n")
    (tmp_path / "src" / ".gitignore").write_text("pkg/c.py\n")
    settings = Settings(root=tmp_path / "src" / "pkg")
    # Starting below the repository root still uses the rules from the root down.
    result = discover([tmp_path / "src" / "pkg"], settings)
    assert _rel(tmp_path, result.files) == ["src/pkg/a.py"]


def test_nested_repository_drops_outer_rules(tmp_path: Path) -> None:
    _tree(tmp_path, "x.py", "vendor/lib/x.py", "vendor/lib/y.py")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".gitignore").write_text("x.py\n")
    (tmp_path / "vendor" / "lib" / ".git").write_text("gitdir: ../../.git/modules/lib\n")
    assert _walk(tmp_path) == ["vendor/lib/x.py", "vendor/lib/y.py"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_walk_agrees_with_git_ls_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _tree(
        repo,
        "a.py",
        "b_test.py",
        "logs/x.py",
        "pkg/a.py",
        "pkg/tmp_1.py",
        "pkg/tmp_keep.py",
        "pkg/sub/c.py",
        "pkg/sub/d.py",
        "pkg/sub/deep/e.py",
        "docs/conf.py",
        "docs/api/f.py",
    )
    (repo / ".gitignore").write_text("*_test.py\nlogs/\ntmp_*.py\n/docs/*\n!/docs/api/\n")
    (repo / "pkg" / ".gitignore").write_text("!tmp_keep.py\nsub/*.py\n!sub/d.py\n")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q"], cwd=repo, env=env, check=True)
    (repo / ".git" / "info" / "exclude").write_text("deep/\n")
    out = subprocess.run(
        ["git", "ls-files", "--others", "--exclude-standard"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = sorted(line for line in out.splitlines() if line.endswith(".py"))
    assert expected  # the comparison means something only if git lists files
    assert _walk(repo, exclude=()) == expected


# --- symbolic links --------------------------------------------------------------------------------


def test_symlink_to_ancestor_does_not_loop(tmp_path: Path) -> None:
    _tree(tmp_path, "a.py", "sub/b.py")
    (tmp_path / "sub" / "up").symlink_to("..")
    (tmp_path / "self").symlink_to(".")
    assert _walk(tmp_path) == ["a.py", "sub/b.py"]


def test_symlink_loop_between_two_links(tmp_path: Path) -> None:
    _tree(tmp_path, "a.py")
    (tmp_path / "la").symlink_to("lb")
    (tmp_path / "lb").symlink_to("la")
    result = discover([tmp_path], Settings(root=tmp_path))
    assert _rel(tmp_path, result.files) == ["a.py"]
    assert result.problems == [
        (tmp_path / "la", "symbolic link loop"),
        (tmp_path / "lb", "symbolic link loop"),
    ]


def test_explicit_symlink_loop_and_broken_link(tmp_path: Path) -> None:
    (tmp_path / "la").symlink_to("lb")
    (tmp_path / "lb").symlink_to("la")
    (tmp_path / "gone.py").symlink_to("missing.py")
    paths = [tmp_path / "la", tmp_path / "gone.py", tmp_path / "nowhere.py"]
    result = discover(paths, Settings(root=tmp_path))
    assert result.files == []
    assert result.problems == [
        (tmp_path / "gone.py", "broken symbolic link to 'missing.py'"),
        (tmp_path / "la", "symbolic link loop"),
        (tmp_path / "nowhere.py", "does not exist"),
    ]


def test_symlinks_found_while_walking(tmp_path: Path) -> None:
    _tree(tmp_path, "proj/real.py", "outside/lib/o.py")
    proj = tmp_path / "proj"
    (proj / "alias.py").symlink_to("real.py")  # a file link: taken, but the same file only once
    (proj / "other.py").symlink_to(tmp_path / "outside" / "lib" / "o.py")
    (proj / "lib").symlink_to(tmp_path / "outside" / "lib")  # directory links are not followed
    (proj / "dangling.py").symlink_to("nothing.py")
    (proj / "dangling_dir").symlink_to("nothing")  # not a .py name: nothing to report
    result = discover([proj], Settings(root=proj))
    assert _rel(proj, result.files) == ["other.py", "real.py"]
    assert result.problems == [(proj / "dangling.py", "broken symbolic link to 'nothing.py'")]
    # A directory link named on the command line is followed.
    linked = discover([proj / "lib"], Settings(root=proj))
    assert linked.files == [proj / "lib" / "o.py"]


# --- unreadable directories ------------------------------------------------------------------------


def test_permission_denied_reported_and_walk_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(tmp_path, "a.py", "locked/x.py", "locked/deeper/y.py", "z/b.py")
    locked = str(tmp_path / "locked")
    real_scandir = os.scandir

    def scandir(path: str) -> object:
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", path)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = discover([tmp_path], Settings(root=tmp_path))
    assert _rel(tmp_path, result.files) == ["a.py", "z/b.py"]
    assert result.problems == [(tmp_path / "locked", "permission denied")]


def test_missing_path_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    _tree(tmp_path, "a.py")
    result = discover([tmp_path / "missing", tmp_path / "a.py"], Settings(root=tmp_path))
    assert result.files == [tmp_path / "a.py"]
    assert result.problems == [(tmp_path / "missing", "does not exist")]
