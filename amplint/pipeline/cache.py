"""The result cache: what checking a file found, keyed by everything that decides it.

An entry's key hashes the file's bytes, the path it was checked under, the rule selection that
applies to it (`select`, `extend-select`, `ignore`, its `per-file-ignores`), the file's precision profile
(`Profile.key()`: its dtypes, origin and execution modes), and the code doing the checking: the amplint version and a
fingerprint of amplint's own source files, the libcst version and the Python version. Any change to
one of them misses; nothing is ever invalidated in place. An entry holds the file's diagnostics
(fixes included) as JSON, without the path, so that a warm run reports exactly what a cold run does.

The cache lives in `.amplint_cache/` in the project root (the directory of the configuration file,
else the working directory), or in the folder `cache-dir` names. amplint makes that folder whole
(built under a temporary name with its CACHEDIR.TAG and a `.gitignore` of `*`, then renamed into
place) and afterwards uses, prunes and removes only a folder holding its own tag: a folder it did not
make (one holding other files, a symbolic link, the project or a folder above it, the home folder, a
git repository) is never tagged, ignored, pruned or deleted. Entries are written to a temporary file
and renamed into place, so processes sharing the cache see whole entries or none; an entry that
cannot be read or decoded is a miss. A cache that cannot be created or written turns the cache off
for the rest of the run, with one warning, and the check goes on.

This module imports neither libcst nor the rules: a run answered from the cache never loads them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from amplint.config import Settings
from amplint.diagnostics import APPLICABILITIES, CellEdit, Confidence, Diagnostic, Edit, Fix, Severity, Span
from amplint.pipeline.precision import Precision
from amplint.results import FileResult
from amplint.source import SourceError, current_umask, decode_source, within

__all__ = ["CACHE_DIR_NAME", "Cache", "cache_directory", "clean", "refusal"]

CACHE_DIR_NAME = ".amplint_cache"
_FORMAT = 4  # bump when the entry layout changes
# Entries live in one directory per version of the checking code (`v1-<fingerprint>`): a change of
# amplint, libcst or Python starts a new one, and a run that writes keeps the few most recently used
# of the others (two environments sharing a checkout keep theirs) and removes the rest.
_KEEP_OTHER_VERSIONS = 3
_VERSION_DIR = re.compile(r"v[0-9]+-[0-9a-f]{16}")
_REMOVING_DIR = re.compile(r"\.removing-v[0-9]+-[0-9a-f]{16}-[0-9]+-[0-9a-f]{8}")
_CACHEDIR_TAG = (
    "Signature: 8a477f597d28d172789f06886806bc55\n"
    "# This file is a cache directory tag created by amplint.\n"
    "# For information about cache directory tags, see https://bford.info/cachedir/\n"
)
_GITIGNORE = "# Automatically created by amplint.\n*\n"


def cache_directory(settings: Settings) -> Path:
    return settings.cache_dir or settings.root / CACHE_DIR_NAME


def refusal(directory: Path, root: Path) -> str | None:
    """Why `directory` cannot hold the cache of the project in `root`, for the user; None when it is
    absent (amplint makes it), empty (amplint replaces it with its own) or amplint's."""
    problem = _not_ours(directory, root, emptying=False)
    if problem is None:
        return None
    return f"the cache folder {directory} {problem}: amplint keeps its cache only in a folder it made"


def _protected(directory: Path, root: Path) -> str | None:
    """Why `directory` is never amplint's, whatever it holds: `/`, the home folder, the project or
    the working directory or a folder above them, a git repository."""
    real = os.path.realpath(directory)
    if real == os.path.realpath(os.sep):
        return "is the file system's root"
    if real == os.path.realpath(os.path.expanduser("~")):
        return "is the home folder"
    bases = [("the project", root)]
    with contextlib.suppress(OSError):  # a working directory since deleted holds nothing
        bases.append(("the working directory", Path.cwd()))
    for what, base in bases:
        if within(os.path.realpath(base), real):
            return f"holds {what}"
    if os.path.lexists(directory / ".git"):
        return "holds a git repository (.git)"
    return None


def _not_ours(directory: Path, root: Path, *, emptying: bool) -> str | None:
    """Why `directory` cannot be used as amplint's cache (`emptying`: removed), None when it can."""
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    problem = _protected(directory, root)
    if problem is not None:
        return problem
    if emptying and os.path.ismount(directory):
        return "is a mount point"
    if _is_ours(directory):
        return None
    if emptying:
        return "holds no CACHEDIR.TAG that amplint wrote"
    try:
        with os.scandir(directory) as entries:
            if next(entries, None) is None:
                return None
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return "holds files amplint did not write (no CACHEDIR.TAG of amplint's)"


def _code_fingerprint() -> bytes:
    """What identifies the checking code: amplint's version and every source file of the package
    (name, size, modification time), so an edited or added rule misses; libcst's version; Python's."""
    import amplint

    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"amplint {amplint.__version__}\0python {sys.version}\0format {_FORMAT}\0".encode())
    package = Path(amplint.__file__).parent
    for directory, subdirs, names in os.walk(package):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                st = os.stat(os.path.join(directory, name))
                relative = os.path.relpath(os.path.join(directory, name), package)
                digest.update(f"{relative}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    digest.update(_libcst_version().encode())
    return digest.digest()


def _libcst_version() -> str:
    """libcst's version, read from its `_version.py` without importing libcst (which is slow)."""
    from importlib.util import find_spec

    try:
        spec = find_spec("libcst")
    except (ImportError, ValueError):
        return "libcst ?"
    if spec is None or not spec.submodule_search_locations:
        return "libcst ?"
    for location in spec.submodule_search_locations:
        try:
            return Path(location, "_version.py").read_text(encoding="utf-8")
        except OSError:
            continue
    return "libcst ?"


@dataclass
class Entry:
    """A stored result: the file's diagnostics and its `FileResult.unchecked`."""

    diagnostics: list[Diagnostic]
    unchecked: bool


class Cache:
    """The entries of one project. `readonly` reads entries and never writes (as for `--diff`);
    `precision`: the profile each file is checked under (a change of a file's profile misses)."""

    def __init__(
        self,
        directory: Path,
        settings: Settings,
        *,
        readonly: bool = False,
        precision: Precision | None = None,
    ) -> None:
        self.directory = directory
        fingerprint = _code_fingerprint()
        self.entries = directory / f"v{_FORMAT}-{fingerprint.hex()[:16]}"
        self.settings = settings
        self.readonly = readonly
        self.warning: str | None = None  # why the cache was turned off, for one message
        # Why the folder is not amplint's (then nothing is read or written), for one message.
        self.refused = refusal(directory, settings.root)
        self._prepared = False
        self._counter = 0
        selection = f"select {','.join(settings.select)}\0extend-select {','.join(settings.extend_select)}\0"
        selection += f"ignore {','.join(settings.ignore)}\0"
        selection += f"max-file-size {settings.max_file_size}\0"
        # Without it the rules whose every finding would be conditional in a file are not run there.
        selection += f"show-conditional {settings.show_conditional}\0"
        self._run_key = fingerprint + selection.encode()
        self.precision = precision or Precision()

    # -- keys ------------------------------------------------------------------------------------
    def key(self, path: Path, display: str, raw: bytes) -> str:
        ignored = ",".join(sorted(self.settings.ignored_codes_for(path)))
        digest = hashlib.blake2b(self._run_key, digest_size=20)
        profile = self.precision.of(display).key()
        digest.update(f"{os.fspath(path)}\0{display}\0{ignored}\0{profile}\0".encode())
        digest.update(hashlib.blake2b(raw, digest_size=20).digest())
        return digest.hexdigest()

    # -- reading ---------------------------------------------------------------------------------
    def load(self, key: str, display: str) -> Entry | None:
        """What is stored under `key`, its diagnostics reported under `display`; None for a miss (no
        entry, or one that cannot be read or decoded)."""
        if self.refused is not None:
            return None
        try:
            data = (self.entries / key).read_bytes()
        except OSError:
            return None
        try:
            entry = json.loads(data)
            if not isinstance(entry, dict) or entry.get("key") != key:
                return None
            items, unchecked = entry["diagnostics"], entry["unchecked"]
            if not isinstance(items, list) or not isinstance(unchecked, bool):
                return None
            return Entry([_decode(item, display) for item in items], unchecked)
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
            return None

    def result(self, path: Path, display: str, raw: bytes, entry: Entry) -> FileResult:
        """A cached result as checking would have returned it: with the source text when there are
        findings (reports show their lines), without it otherwise (nothing reads it)."""
        source = None
        if entry.diagnostics:
            try:
                source = decode_source(raw, path)
            except SourceError:
                source = None  # a file that does not decode: its AMP900 is the finding
        return FileResult(path, display, source, entry.diagnostics, unchecked=entry.unchecked)

    # -- writing ---------------------------------------------------------------------------------
    def store(self, key: str, result: FileResult) -> None:
        """Remember a result under `key` (the key of the bytes that produced it). A result with
        internal errors or warnings is not stored: the next run tries again, and reports them again."""
        if (
            self.readonly
            or self.refused is not None
            or self.warning is not None
            or result.internal_errors
            or result.warnings
        ):
            return
        blob = _encode(key, result.diagnostics, result.unchecked)
        if blob is None:
            return  # a rule's `extra` that JSON cannot hold exactly: not cacheable
        try:
            self._prepare()
            self._counter += 1
            temporary = self.entries / f".{key}.{os.getpid()}.{self._counter}.{os.urandom(4).hex()}.tmp"
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(blob)
                os.replace(temporary, self.entries / key)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
        except OSError as exc:
            self.warning = (
                f"cannot write the cache in {self.directory}: {exc.strerror or exc}; going on without it"
            )

    def store_checked(self, path: Path, display: str, result: FileResult) -> None:
        """Remember a result whose bytes the caller does not hold (a fix just written): the bytes are
        the source encoded back, stored only when they decode to the very text that was checked."""
        if (
            self.readonly
            or self.warning is not None
            or result.source is None
            or result.internal_errors
            or result.warnings
        ):
            return
        source = result.source
        try:
            raw = source.encode(source.text)
            if decode_source(raw, path).text != source.text:
                return
        except (SourceError, UnicodeError):
            return
        self.store(self.key(path, display, raw), result)

    def _prepare(self) -> None:
        if self._prepared:
            return
        if _not_ours(self.directory, self.settings.root, emptying=False) is None and not _is_ours(
            self.directory
        ):
            _make(self.directory)  # absent or empty: made whole, or made meanwhile by another process
        if not _is_ours(self.directory):
            raise OSError(f"{self.directory} is not a cache amplint made")
        self.entries.mkdir(exist_ok=True)
        self._prepared = True
        self._prune()

    def _prune(self) -> None:
        """Remove the entries of all but the most recently used other versions of the code: amplint's
        version folders only (its names, real folders, in the folder holding its tag)."""
        try:
            with os.scandir(self.directory) as scan:
                others = [
                    (entry.stat(follow_symlinks=False).st_mtime, Path(entry.path))
                    for entry in scan
                    if _VERSION_DIR.fullmatch(entry.name)
                    and entry.name != self.entries.name
                    and entry.is_dir(follow_symlinks=False)
                ]
        except OSError:
            return
        for _, old in sorted(others, reverse=True)[_KEEP_OTHER_VERSIONS:]:
            _remove(old)


def _make(directory: Path) -> None:
    """Make the cache folder whole: built beside it under a temporary name, with its tag and its
    `.gitignore`, then renamed into place (over an empty folder; never over anything else), so that
    no process sees a cache folder without its tag. Failing to rename is not an error here: another
    process may have made it, and the caller looks."""
    import shutil  # here: a run answered from the cache neither makes nor removes a folder

    directory.parent.mkdir(parents=True, exist_ok=True)
    building = tempfile.mkdtemp(dir=directory.parent, prefix=f".{directory.name}.", suffix=".tmp")
    try:
        os.chmod(building, 0o777 & ~current_umask())  # as `mkdir` makes it (mkdtemp's folder is private)
        for name, text in (("CACHEDIR.TAG", _CACHEDIR_TAG), (".gitignore", _GITIGNORE)):
            with open(os.path.join(building, name), "x", encoding="utf-8") as handle:
                handle.write(text)
        with contextlib.suppress(OSError):
            os.rename(building, directory)
    finally:
        if os.path.lexists(building):
            shutil.rmtree(building, ignore_errors=True)


def _encode(key: str, diagnostics: Iterable[Diagnostic], unchecked: bool) -> bytes | None:
    items = []
    originals = list(diagnostics)
    for d in originals:
        fix = None
        if d.fix is not None:
            fix = {
                "description": d.fix.description,
                "applicability": d.fix.applicability,
                "edits": [
                    [e.line, e.column, e.end_line, e.end_column, e.content]
                    + ([e.cell] if isinstance(e, CellEdit) else [])
                    for e in d.fix.edits
                ],
                "covers": [[c.line, c.column, c.end_line, c.end_column] for c in d.fix.covers],
            }
        items.append(
            {
                "code": d.code,
                "name": d.name,
                "message": d.message,
                "span": [d.line, d.column, d.end_line, d.end_column],
                "severity": d.severity.value,
                "confidence": d.confidence.value,
                "fix": fix,
                "help": d.help,
                "extra": d.extra,
            }
        )
    try:
        entry = {"key": key, "diagnostics": items, "unchecked": unchecked}
        blob = json.dumps(entry, separators=(",", ":")).encode("utf-8")
        decoded = [_decode(item, "") for item in json.loads(blob)["diagnostics"]]
    except (TypeError, ValueError, RecursionError):
        return None
    # Only what comes back exactly is stored: `extra` may hold tuples or non-string keys.
    for original, back in zip(originals, decoded, strict=True):
        if back != replace(original, path="") or back.extra != original.extra:
            return None
    return blob


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _integer(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("expected an integer")
    return value


def _edit(values: Any) -> Edit:
    if not isinstance(values, list):
        raise TypeError("expected a list")
    if len(values) == 6:  # an edit in a notebook cell
        line, column, end_line, end_column, content, cell = values
        return CellEdit(
            _integer(line),
            _integer(column),
            _integer(end_line),
            _integer(end_column),
            _string(content),
            _integer(cell),
        )
    line, column, end_line, end_column, content = values
    return Edit(_integer(line), _integer(column), _integer(end_line), _integer(end_column), _string(content))


def _decode(item: Any, display: str) -> Diagnostic:
    line, column, end_line, end_column = (_integer(v) for v in item["span"])
    fix = None
    if item["fix"] is not None:
        edits = tuple(_edit(edit) for edit in item["fix"]["edits"])
        applicability = _string(item["fix"]["applicability"])
        if applicability not in APPLICABILITIES:
            raise ValueError(f"unknown fix applicability {applicability!r}")
        covers = tuple(Span(*(_integer(v) for v in span)) for span in item["fix"]["covers"])
        fix = Fix(_string(item["fix"]["description"]), edits, applicability, covers)
    help_text = item["help"]
    extra = item["extra"]
    if not isinstance(extra, dict):
        raise TypeError("expected an object")
    return Diagnostic(
        code=_string(item["code"]),
        name=_string(item["name"]),
        message=_string(item["message"]),
        path=display,
        line=line,
        column=column,
        end_line=end_line,
        end_column=end_column,
        severity=Severity(item["severity"]),
        confidence=Confidence(item["confidence"]),
        fix=fix,
        help=None if help_text is None else _string(help_text),
        extra=extra,
    )


def _remove(directory: Path) -> None:
    """Remove one of amplint's version folders, which other processes may still be writing to:
    renamed out of their way first (atomic), then deleted."""
    doomed = directory.with_name(f".removing-{directory.name}-{os.getpid()}-{os.urandom(4).hex()}")
    try:
        os.rename(directory, doomed)
    except OSError:
        return  # already gone (another process pruned it)
    _delete(doomed)


def _delete(directory: Path) -> None:
    """Delete a folder of amplint's that is out of every writer's way."""
    import shutil

    for _ in range(3):  # a writer that resolved its path before the rename may add a file
        shutil.rmtree(directory, ignore_errors=True)
        if not os.path.lexists(directory):
            break


def _is_ours(directory: Path) -> bool:
    """Whether `directory` holds amplint's tag: a plain file with exactly its text."""
    return _holds(directory / "CACHEDIR.TAG", _CACHEDIR_TAG)


def _holds(path: Path, text: str) -> bool:
    """Whether `path` is a plain file (not a link) holding exactly `text`."""
    expected = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    with os.fdopen(fd, "rb") as handle:
        try:
            return stat.S_ISREG(os.fstat(fd).st_mode) and handle.read(len(expected) + 1) == expected
        except OSError:
            return False


def clean(directory: Path, root: Path) -> str:
    """Remove the cache in `directory` (`root`: the project's folder); what was done, for the user.
    Only what amplint provably wrote goes: its version folders, tag and `.gitignore` in a folder
    holding its tag; the folder itself when nothing else is left. Raises OSError when it cannot, or
    when the folder is not amplint's."""
    if not os.path.lexists(directory):
        return f"no cache at {directory}"
    problem = _not_ours(directory, root, emptying=True)
    if problem is not None:
        raise OSError(f"{directory} {problem}; it is not a cache amplint made, and nothing in it was removed")
    with os.scandir(directory) as scan:
        doomed = [
            Path(entry.path)
            for entry in scan
            if (_VERSION_DIR.fullmatch(entry.name) or _REMOVING_DIR.fullmatch(entry.name))
            and entry.is_dir(follow_symlinks=False)
        ]
    for folder in doomed:
        if _VERSION_DIR.fullmatch(folder.name):
            _remove(folder)
        else:
            _delete(folder)  # left by a run that was stopped while it pruned
    # The tag goes last: a clean that is stopped leaves a folder still recognised as amplint's.
    for name, text in ((".gitignore", _GITIGNORE), ("CACHEDIR.TAG", _CACHEDIR_TAG)):
        if _holds(directory / name, text):
            (directory / name).unlink()
    try:
        os.rmdir(directory)
    except OSError:
        return (
            f"removed amplint's cache from {directory}; the folder stays, holding files amplint did not write"
        )
    return f"removed {directory}"
