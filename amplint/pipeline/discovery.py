"""Find the Python files to lint from the paths given on the command line.

- Directories are walked for `*.py` files and Jupyter notebooks (`*.ipynb`); a file named explicitly is
  taken whatever its suffix.
- The configured `exclude` / `extend-exclude` apply to everything, explicit files included (pre-commit passes
  file names and users expect exclude to hold).
- `.gitignore` files (each anchored at its own directory) and `.git/info/exclude` apply to what the walk
  finds, not to explicit paths. A directory holding `.git` starts a new repository: outer rules stop there.
- Directories holding `pyvenv.cfg` (virtualenvs, whatever their name) are skipped.
- Symbolic links to directories found while walking are not followed (as git and ruff do): that keeps a
  `data -> /mnt/datasets` link from dragging the walk through a data set, and makes loops impossible.
  A link loop is reported; an explicitly named directory link is followed.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from amplint.config import Settings
from amplint.gitignore import PatternSet, load_gitignore
from amplint.source import SourceError, read_bytes

__all__ = ["Discovery", "discover"]

# (pattern set, path of the directory being walked relative to the set's base, with a trailing '/').
_Ignores = tuple[tuple[PatternSet, str], ...]
# What a walk picks up: Python files and Jupyter notebooks (as ruff does).
_SUFFIXES = (".py", ".ipynb")
# git, too, reads no ignore file over 100 MiB.
IGNORE_FILE_LIMIT = 100 * 1024 * 1024


@dataclass
class Discovery:
    files: list[Path] = field(default_factory=list)  # sorted, each file once
    problems: list[tuple[Path, str]] = field(default_factory=list)  # paths that could not be read


def describe_error(path: str, exc: OSError) -> str:
    """A short reason for a failed stat/scandir, for `Discovery.problems`."""
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        if os.path.islink(path):
            try:
                return f"broken symbolic link to {os.readlink(path)!r}"
            except OSError:
                return "broken symbolic link"
        return "does not exist"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def _root_relative(abs_path: str, root: str) -> str | None:
    """`abs_path` relative to `root` with a trailing '/' ('' for root itself); None when outside."""
    if abs_path == root:
        return ""
    prefix = root if root.endswith(os.sep) else root + os.sep
    if not abs_path.startswith(prefix):
        return None
    return Path(abs_path[len(prefix) :]).as_posix() + "/"


def _ignored(ignores: _Ignores, name: str, is_dir: bool) -> bool:
    # Deeper files come later and take precedence, so the first decision from the end wins.
    for patterns, prefix in reversed(ignores):
        result = patterns.match_relative(prefix + name, is_dir)
        if result is not None:
            return result
    return False


class _Walker:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.exclude = settings.exclude_patterns
        self.root = str(settings.root)
        # (path as shown, reached through a symbolic link, (st_dev, st_ino))
        self.found: list[tuple[Path, bool, tuple[int, int]]] = []
        self.problems: list[tuple[Path, str]] = []
        self.walked: set[tuple[int, int]] = set()

    def add(self, path: Path) -> None:
        display = os.fspath(path)
        abs_path = os.path.abspath(display)
        try:
            st = os.stat(abs_path)
        except OSError as exc:
            self.problems.append((path, describe_error(abs_path, exc)))
            return
        if stat.S_ISDIR(st.st_mode):
            if (st.st_dev, st.st_ino) in self.walked:
                return  # given twice, or inside a directory already walked
            if not self.settings.is_excluded(Path(abs_path), is_dir=True):
                self.walk(display, abs_path, st)
        elif stat.S_ISREG(st.st_mode):
            if not self.settings.is_excluded(Path(abs_path), is_dir=False):
                self.found.append((path, os.path.islink(abs_path), (st.st_dev, st.st_ino)))
        else:
            self.problems.append((path, "not a regular file or directory"))

    def _load(self, file: str, base: str, into: list[tuple[PatternSet, str]]) -> None:
        if not os.path.exists(file):
            return
        try:
            patterns = load_gitignore(read_bytes(Path(file), IGNORE_FILE_LIMIT), Path(base))
        except SourceError as exc:
            self.problems.append((Path(file), f"cannot read: {exc.message}"))
            return
        if patterns:
            into.append((patterns, ""))

    def _outer_ignores(self, abs_dir: str) -> _Ignores:
        """Ignore rules from the parent directories of a walk's start, down from its repository root
        (or from the settings root when there is no repository)."""
        if os.path.lexists(os.path.join(abs_dir, ".git")):
            return ()  # a repository root: its own rules are loaded by the walk
        chain: list[str] = []  # parents of abs_dir, nearest first
        top: str | None = None
        current = abs_dir
        while (parent := os.path.dirname(current)) != current:
            current = parent
            chain.append(current)
            if os.path.lexists(os.path.join(current, ".git")):
                top = current
                break
        if top is None:
            # Not in a repository: .gitignore files still count, from the settings root down.
            if _root_relative(abs_dir, self.root) in (None, ""):
                return ()
            top = self.root
            chain = chain[: chain.index(top) + 1]
        ignores: list[tuple[PatternSet, str]] = []
        for directory in reversed(chain):
            if directory == top and os.path.isdir(os.path.join(top, ".git")):
                self._load(os.path.join(top, ".git", "info", "exclude"), top, ignores)
            self._load(os.path.join(directory, ".gitignore"), directory, ignores)
        # Each set needs the walk start's path relative to its own base.
        return tuple((p, Path(os.path.relpath(abs_dir, p.base)).as_posix() + "/") for p, _ in ignores)

    def walk(self, display: str, abs_dir: str, st: os.stat_result) -> None:
        stack: list[tuple[str, str, str | None, _Ignores, int]] = [
            (display, abs_dir, _root_relative(abs_dir, self.root), self._outer_ignores(abs_dir), st.st_dev)
        ]
        self.walked.add((st.st_dev, st.st_ino))
        while stack:
            d_display, d_abs, rel_root, ignores, dev = stack.pop()
            try:
                with os.scandir(d_abs) as it:
                    entries = list(it)
            except OSError as exc:
                self.problems.append((Path(d_display), describe_error(d_abs, exc)))
                continue
            by_name = {entry.name: entry for entry in entries}
            if "pyvenv.cfg" in by_name:
                continue  # a virtualenv, whatever its name
            if ".git" in by_name:  # a (nested) repository: the outer rules do not apply inside it
                local: list[tuple[PatternSet, str]] = []
                if by_name[".git"].is_dir(follow_symlinks=False):
                    self._load(os.path.join(d_abs, ".git", "info", "exclude"), d_abs, local)
            else:
                local = list(ignores)
            if ".gitignore" in by_name:
                self._load(os.path.join(d_abs, ".gitignore"), d_abs, local)
            ignores = tuple(local)
            for entry in entries:
                self._visit(entry, d_display, rel_root, ignores, dev, stack)

    def _visit(
        self,
        entry: os.DirEntry[str],
        d_display: str,
        rel_root: str | None,
        ignores: _Ignores,
        dev: int,
        stack: list[tuple[str, str, str | None, _Ignores, int]],
    ) -> None:
        name = entry.name
        if name == ".git":
            return
        is_link = entry.is_symlink()
        # git treats a symbolic link as a file, whatever it points to.
        is_dir = not is_link and entry.is_dir(follow_symlinks=False)
        is_source = name.endswith(_SUFFIXES)
        if not (is_dir or is_link or is_source):
            return  # most files: skip before any pattern matching
        if rel_root is not None:
            excluded = self.exclude.match_relative(rel_root + name, is_dir) is True
        else:
            excluded = self.exclude.match(Path(entry.path), is_dir) is True
        if excluded or (ignores and _ignored(ignores, name, is_dir)):
            return
        display = os.path.join(d_display, name)
        if is_link:
            try:
                target = os.stat(entry.path)
            except OSError as exc:
                if exc.errno == errno.ELOOP or is_source:
                    self.problems.append((Path(display), describe_error(entry.path, exc)))
                return
            if is_source and stat.S_ISREG(target.st_mode):
                self.found.append((Path(display), True, (target.st_dev, target.st_ino)))
            return
        if is_dir:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                self.problems.append((Path(display), describe_error(entry.path, exc)))
                return
            key = (st.st_dev, st.st_ino)
            if key in self.walked:
                return  # already walked from another path given on the command line
            self.walked.add(key)
            child_rel = None if rel_root is None else f"{rel_root}{name}/"
            child_ignores = tuple((patterns, f"{prefix}{name}/") for patterns, prefix in ignores)
            stack.append((display, entry.path, child_rel, child_ignores, st.st_dev))
        elif entry.is_file(follow_symlinks=False):
            # A regular file lives on its directory's device; inode() is free from scandir.
            self.found.append((Path(display), False, (dev, entry.inode())))


def discover(paths: Sequence[Path], settings: Settings) -> Discovery:
    """The files to lint under `paths`, and the paths that could not be read."""
    walker = _Walker(settings)
    for path in paths:
        walker.add(Path(path))
    # A file reached twice (overlapping paths, links) keeps one name: its own rather than a link's,
    # then the first in sort order.
    chosen: dict[tuple[int, int], tuple[bool, Path]] = {}
    for path, via_link, identity in walker.found:
        if identity not in chosen or (via_link, path) < chosen[identity]:
            chosen[identity] = (via_link, path)
    files = sorted(path for _, path in chosen.values())
    problems = sorted(set(walker.problems), key=lambda item: (item[0], item[1]))
    return Discovery(files=files, problems=problems)
