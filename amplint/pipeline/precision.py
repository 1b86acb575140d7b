"""The precision each checked file runs in: configured, or read from the whole project.

`precision` in `[tool.amplint]` (or `--precision`) fixes one profile for every file; `modes` names
the execution modes of a library that runs none of its own code. Otherwise the project around the
checked paths (the folder of the nearest `pyproject.toml`, `setup.py`, `setup.cfg` or `.git` above
them; without one, the checked paths and the files beside them) is indexed by `amplint.static.modes`: its training loops, scripts, tests and benchmarks are the
entry points, and each file gets the modes that reach it. A project that sets no precision anywhere
leaves every file to its caller: its findings are conditional (`--show-conditional` shows them).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from amplint.config import Settings
from amplint.pipeline.notebook import SUFFIX, cell_sources
from amplint.source import SourceError, decode_source, display_path, read_bytes
from amplint.static.modes import ProjectModes, index_modes, mode_named
from amplint.static.profile import CALLER, ModeWhy, Profile, may_set_precision

__all__ = ["Precision", "project_precision", "project_root"]

_MARKERS = ("pyproject.toml", "setup.py", "setup.cfg", ".git")


@dataclass(frozen=True)
class Precision:
    """The profile of each file of a run: configured (`default` for every file), or from the
    project's execution modes, where a file no mode reaches gets `default` (the caller's)."""

    default: Profile = CALLER
    modes: ProjectModes | None = None  # None: configured
    root: Path | None = None
    # The profile of each file asked about: the cache key, the check and the store each ask.
    _profiles: dict[str, Profile] = field(default_factory=dict, compare=False, repr=False)

    def of(self, display: str) -> Profile:
        profile = self._profiles.get(display)
        if profile is None:
            profile = self._profiles[display] = self._profile(display)
        return profile

    def _profile(self, display: str) -> Profile:
        whys = self.modes.of(display) if self.modes is not None else ()
        if not whys:
            return self.default
        assert self.modes is not None
        return replace(
            self.default,
            half=frozenset(why.mode.dtype for why in whys),
            origin="detected",
            evidence=tuple((why.path, why.line, why.what) for why in whys),
            modes=whys,
            definitions=tuple(sorted(self.modes.definitions.get(display, {}).items())),
            elsewhere=tuple(sorted(self.modes.elsewhere.get(display, {}).items())),
        )


def _marked(folder: Path) -> bool:
    """Whether `folder` holds a project marker."""
    return any((folder / marker).exists() for marker in _MARKERS)


def project_root(paths: Sequence[Path]) -> Path:
    """The folder of the project around `paths` (files, or folders): the nearest above their common
    folder that holds a project marker, else that common folder (above the packages it is in)."""
    folders = [os.path.abspath(path) for path in paths]
    common = Path(os.path.commonpath(folders)) if folders else Path.cwd()
    if not common.is_dir():
        common = common.parent
    # Never the home folder or the file system's root (a dotfiles repository is no project).
    stop = {Path.home(), Path(common.anchor)}
    for folder in (common, *common.parents):
        if folder in stop:
            break
        if _marked(folder):
            return folder
    # A package's folder (`flagai/`, checked alone) is imported from the folder that holds it
    # (`from flagai.model import ...`): that one is the project's.
    while (common / "__init__.py").is_file() and common.parent not in stop:
        common = common.parent
    return common


def project_precision(
    settings: Settings, files: Sequence[Path], overrides: Mapping[Path, bytes] | None = None
) -> Precision:
    """The precision of `files` under `settings`. `overrides`: the bytes of a file that is not (or
    not yet) on disk as checked (standard input under its `--stdin-filename`)."""
    configured = settings.configured_profile
    if settings.modes:
        whys = tuple(ModeWhy(mode_named(name), "", 0, name, (), "configured") for name in settings.modes)
        half = frozenset(why.mode.dtype for why in whys)
        return Precision(settings.for_project(Profile(half, "configured", modes=whys)))
    if configured is not None:
        return Precision(configured)
    from amplint.pipeline.discovery import discover

    root = project_root(files) if files else Path.cwd()
    scope = [root]
    if files and not _marked(root):
        # No project around the paths (a loose file in a downloads or temporary folder): the paths
        # and the files beside them, not every folder below theirs.
        scope = [*files, *(entry for entry in root.iterdir() if entry.suffix in (".py", SUFFIX))]
    # Absolute paths as strings: a project has thousands of files, and `Path` objects cost.
    own = {os.path.abspath(path) for path in files if not os.path.isdir(path)}
    project = {os.path.abspath(path) for path in discover(scope, settings).files}
    given = {os.path.abspath(path): raw for path, raw in (overrides or {}).items()}
    prefix = str(root).rstrip(os.sep) + os.sep
    found = index_modes(
        (
            entry
            for full in sorted(project | own | given.keys())
            for entry in _files(
                full, full.removeprefix(prefix).replace(os.sep, "/"), given, settings.max_file_size
            )
        ),
        partial(_texts, root) if _marked(root) else None,
    )
    # A file no entry point reaches is its caller's, as in a project that sets no precision.
    return Precision(settings.for_project(CALLER), found, root)


# The project's other files that may run its code or set its flags: shell scripts, configs, docs.
_TEXT_SUFFIXES = frozenset(
    {".sh", ".bash", ".md", ".rst", ".txt", ".yaml", ".yml", ".json", ".cfg", ".toml", ".ini"}
)
_SKIPPED = frozenset({"node_modules", "__pycache__", "site-packages", "venv", "env", "build", "dist"})
_MOST_TEXTS, _LARGEST_TEXT = 2000, 1 << 20


def _texts(root: Path) -> Iterator[tuple[str, bytes]]:
    """(display path, bytes) of the project's text files (at most 2000, each under 1 MiB): a
    command line in a script or a `fp16: true` in a config turns a flag on."""
    count = 0
    for folder, folders, names in os.walk(root):
        folders[:] = sorted(f for f in folders if not f.startswith(".") and f not in _SKIPPED)
        for name in sorted(names):
            if os.path.splitext(name)[1].lower() not in _TEXT_SUFFIXES:
                continue
            path = os.path.join(folder, name)
            try:
                if os.path.getsize(path) > _LARGEST_TEXT:
                    continue
                with open(path, "rb") as handle:
                    raw = handle.read()
            except OSError:
                continue
            yield display_path(path), raw
            count += 1
            if count >= _MOST_TEXTS:
                return


def _files(
    full: str, relative: str, given: Mapping[str, bytes], limit: int
) -> Iterator[tuple[str, str, Callable[[], bytes]]]:
    """(display, path from the root, reader) of a file, or of each code cell of a notebook (under
    the name reports give it: a setting in a cell is named `nb.ipynb:cell 3:2`)."""

    def load() -> bytes:
        if full in given:
            return given[full]
        try:
            return read_bytes(Path(full), limit)
        except SourceError:
            return b""  # unreadable or too large: its own check says so

    display = display_path(full)
    if not full.endswith(SUFFIX):
        yield display, relative, load
        return
    raw = load()
    if not may_set_precision(raw):
        return  # a notebook is an entry point or nothing: no code imports it
    try:
        cells = cell_sources(decode_source(raw, Path(full)), display)
    except SourceError:
        return
    for name, code in cells.items():
        yield name, relative, _constant(code.encode("utf-8", "surrogatepass"))


def _constant(raw: bytes) -> Callable[[], bytes]:
    return lambda: raw
