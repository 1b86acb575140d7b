"""Settings from `[tool.amplint]` in `pyproject.toml`, or the top level of `amplint.toml` /
`.amplint.toml` (or of any TOML file given with `--config`).

Each checked file gets the nearest configuration above it, as in ruff; `extend = "../pyproject.toml"`
reads another configuration first and lets this one's keys override it. All path patterns
(`exclude`, `extend-exclude`, `per-file-ignores`) are gitignore-style and anchored at `Settings.root`,
the directory of the configuration file in use (inherited patterns too, as if written there).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from amplint.gitignore import PatternSet
from amplint.static.modes import mode_named
from amplint.static.profile import MODE_NAMES, NEWEST_PYTHON, PRECISIONS, Profile, TorchRange, configured

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = [
    "DEFAULT_EXCLUDE",
    "ConfigError",
    "Settings",
    "find_config",
    "load_settings",
    "nearest_settings",
    "parse_size",
    "validate_codes",
]

DEFAULT_EXCLUDE: tuple[str, ...] = (
    ".git",
    ".hg",
    ".svn",
    ".bzr",
    ".venv",
    "venv",
    ".tox",
    ".nox",
    ".eggs",
    "*.egg-info",
    "build",
    "dist",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".amplint_cache",
    "node_modules",
    "site-packages",
    "__pypackages__",
    "_build",
    "buck-out",
    ".ipynb_checkpoints",
)

_CODE_RE = re.compile(r"AMP[0-9]{0,3}")
_CODES_EXPECTED = 'rule codes such as "AMP001", prefixes such as "AMP0", or "ALL"'
# As in ruff: every rule, the opt-in ones too; the least specific selector, so any code or prefix
# in `ignore` (or in `select` beside it) decides over it.
ALL = "ALL"
_PATTERNS_EXPECTED = 'gitignore-style patterns such as "build" or "tests/data/"'
_KNOWN_KEYS = (
    "cache-dir",
    "deep",
    "exclude",
    "extend",
    "extend-exclude",
    "extend-select",
    "ignore",
    "max-file-size",
    "modes",
    "per-file-ignores",
    "precision",
    "runtime",
    "select",
    "show-conditional",
    "target-version",
    "torch-version",
)
_PRECISION_EXPECTED = "one of " + ", ".join(f'"{value}"' for value in PRECISIONS)


class ConfigError(Exception):
    """A configuration problem; the message names the file (or CLI flag) and the offending key.
    `path`: the configuration file at fault, where one is (the files below it go unchecked)."""

    def __init__(self, message: str, path: Path | None = None) -> None:
        super().__init__(message)
        self.path = path


def _show(value: object) -> str:
    return repr(value) if not isinstance(value, bool) else str(value).lower()


def validate_codes(values: object, where: str) -> tuple[str, ...]:
    """Check a list of rule codes or prefixes and return them upper-cased.

    `where` starts the error message: a key (`"pyproject.toml: [tool.amplint] 'select'"`) or a flag.
    """
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where} must be a list of {_CODES_EXPECTED}, got {_show(values)}")
    codes: list[str] = []
    for value in values:
        code = value.strip().upper()
        if code != ALL and not _CODE_RE.fullmatch(code):
            raise ConfigError(f"{where} has an invalid rule code {value!r} (expected {_CODES_EXPECTED})")
        codes.append(code)
    return tuple(codes)


def _validate_patterns(values: object, where: str) -> tuple[str, ...]:
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) and v.strip() for v in values):
        raise ConfigError(f"{where} must be a list of {_PATTERNS_EXPECTED}, got {_show(values)}")
    return tuple(values)


def parse_size(value: object, where: str) -> int:
    """A size in bytes: an integer, or a string with a unit ("2MB", "512 KiB", "16GiB")."""
    units = {
        "": 1,
        "b": 1,
        "kb": 1000,
        "kib": 1024,
        "mb": 1000**2,
        "mib": 1024**2,
        "gb": 1000**3,
        "gib": 1024**3,
    }
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif match is not None and match[2].lower() in units:
        size = int(match[1]) * units[match[2].lower()]
    else:
        size = -1
    if size < 1:
        raise ConfigError(
            f'{where} must be a positive size in bytes, or a string such as "2MB", got {_show(value)}'
        )
    return size


def _validate_torch(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise ConfigError(f'{where} must be a torch requirement such as ">=2.1", got {_show(value)}')
    try:
        TorchRange.parse(value)
    except ValueError as exc:
        raise ConfigError(f'{where} must be a torch requirement such as ">=2.1,<2.6": {exc}') from None
    return value


_TARGET_EXPECTED = 'a Python version such as "py312" or "3.12"'


def _validate_target(value: object, where: str) -> str:
    """`target-version` as "3.12"; "py312", "py3.12" and "3.12" all name it."""
    match = re.fullmatch(r"(?:py)?3\.?(\d{1,2})", value.strip().lower()) if isinstance(value, str) else None
    if match is None or not 0 <= int(match[1]) <= NEWEST_PYTHON[1]:
        newest = f"3.{NEWEST_PYTHON[1]}"
        raise ConfigError(f"{where} must be {_TARGET_EXPECTED} (up to {newest}), got {_show(value)}")
    return f"3.{int(match[1])}"


# As in ruff, the oldest Python a `requires-python` floor can name: one below it (">=3.4", left
# from long ago) is not a grammar the project's code keeps, and would make every annotated
# assignment an AMP900.
OLDEST_REQUIRED_PYTHON = (3, 7)


def _python_requirement(data: Mapping[str, Any]) -> str:
    """The oldest Python `[project] requires-python` admits, as "3.10"; "" when it names no lower
    bound (or in a spelling amplint cannot read): its grammar is what the project's code must parse in."""
    project = data.get("project")
    requires = project.get("requires-python") if isinstance(project, dict) else None
    if not isinstance(requires, str):
        return ""
    lows = [
        (int(match[1]), int(match[2]))
        for spec in requires.split(",")
        if (match := re.fullmatch(r"\s*(?:>=|~=|==|===|>)\s*(\d+)\.(\d+)[\w.*]*\s*", spec))
    ]
    low = min(lows, default=None)
    if low is None or low[0] != 3 or low > NEWEST_PYTHON:
        return ""
    low = max(low, OLDEST_REQUIRED_PYTHON)
    return f"{low[0]}.{low[1]}"


def _torch_dependency(data: Mapping[str, Any]) -> str:
    """The torch requirement in `[project] dependencies` (without the name), or ""."""
    project = data.get("project")
    dependencies = project.get("dependencies") if isinstance(project, dict) else None
    strings = [d for d in dependencies if isinstance(d, str)] if isinstance(dependencies, list) else []
    return _torch_requirement(strings)


def _torch_requirement(requirements: Iterable[str]) -> str:
    """The first torch requirement among `requirements` that amplint can read, or ""."""
    for requirement in requirements:
        if re.match(r"torch\s*($|[<>=!~;\[(])", requirement.strip()):
            try:
                TorchRange.parse(requirement)
            except ValueError:
                return ""  # a spelling amplint cannot read: as if none were declared
            return requirement.strip()
    return ""


# Where else a project pins torch: setup.py's `install_requires` strings, setup.cfg's
# `install_requires` lines, and requirements files (a line each; `-r`, comments and options aside).
_QUOTED_TORCH = re.compile(r"""["'](torch\b[^"']*)["']""")
_LINE_TORCH = re.compile(r"^[ \t]*(torch\b[^#\n]*)", re.MULTILINE)


def _pins_here(directory: Path) -> bool:
    """Whether `directory` holds a setup file or a requirements file: a project's root."""
    return any((directory / name).is_file() for name in ("setup.py", "setup.cfg")) or any(
        directory.glob("requirements*.txt")
    )


def _pinned_torch(directory: Path) -> tuple[str, str]:
    """(the torch requirement, the file that states it) from the setup files and requirements files
    of a project's root; empty strings when none does."""
    found: list[tuple[Path, re.Pattern[str]]] = [
        (directory / "setup.cfg", _LINE_TORCH),
        (directory / "setup.py", _QUOTED_TORCH),
        *((path, _LINE_TORCH) for path in sorted(directory.glob("requirements*.txt"))),
    ]
    for path, pattern in found:
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        requirement = _torch_requirement(match.group(1) for match in pattern.finditer(text))
        if re.search(r"[<>=~]", requirement):  # a bare `torch` says nothing of its versions
            return requirement, str(path)
    return "", ""


def _validate_precision(value: object, where: str) -> str:
    if not isinstance(value, str) or value not in PRECISIONS:
        raise ConfigError(f"{where} must be {_PRECISION_EXPECTED}, got {_show(value)}")
    return value


def _validate_modes(values: object, where: str) -> tuple[str, ...]:
    expected = ", ".join(f'"{name}"' for name in sorted(MODE_NAMES))
    if not isinstance(values, list | tuple) or not all(isinstance(v, str) for v in values):
        raise ConfigError(f"{where} must be a list of modes ({expected}), got {_show(values)}")
    for value in values:
        try:
            mode_named(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return tuple(values)


def _longest_prefix(code: str, prefixes: Iterable[str]) -> int:
    return max((0 if p == ALL else len(p) for p in prefixes if p == ALL or code.startswith(p)), default=-1)


@dataclass(frozen=True)
class Settings:
    select: tuple[str, ...] = ("AMP",)
    extend_select: tuple[str, ...] = ()  # added to `select`, so opt-in rules can join the defaults
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob, codes) in file order
    exclude: tuple[str, ...] = DEFAULT_EXCLUDE
    extend_exclude: tuple[str, ...] = ()
    root: Path = field(default_factory=Path.cwd)  # relative patterns are anchored here
    config_path: Path | None = None
    precision: str = "auto"  # one of PRECISIONS; "auto": detected from the checked files
    # The execution modes of a library that runs none of its code itself ("autocast-bf16",
    # "cast-fp16", ...): every file runs in these. Empty: found in the project (amplint.static.modes).
    modes: tuple[str, ...] = ()
    # Also report findings whose half precision rests on nothing in the project (the caller's pick).
    show_conditional: bool = False
    # `check` traces every candidate it can reach in the project's own modes (`--deep`).
    deep: bool = False
    # The torch the project supports, as a requirement (">=2.1,<2.6"); "" for any. From
    # `torch-version`, else the torch entry of `[project] dependencies` in the nearest pyproject.toml,
    # else the torch pin of that project root's setup.cfg, setup.py or requirements*.txt.
    torch_version: str = ""
    # The Python whose grammar the code follows ("3.12"); "" for the newest amplint's parser knows.
    # From `target-version`, else the lower bound of `requires-python` in the nearest pyproject.toml.
    target_version: str = ""
    # Larger files are not read (an AMP900 says so, from the file's size). Generated modules run to
    # megabytes; past 1 MiB a file is checked a part at a time, its memory following the part.
    max_file_size: int = 16 * 1024 * 1024
    cache_dir: Path | None = (
        None  # `cache-dir` (relative to `root`) or `--cache-dir`; None: root/.amplint_cache
    )
    # `[tool.amplint.runtime]`, kept raw until the runtime pass defines its keys.
    runtime: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # What the configuration holds that amplint does not know (unknown keys), said, never fatal.
    warnings: tuple[str, ...] = field(default=(), compare=False, hash=False)
    # Where each key that is not a default came from: a configuration file or a command-line flag.
    origins: tuple[tuple[str, str], ...] = field(default=(), compare=False, hash=False)
    # Found, not given with --config: a file below a nearer configuration gets that one instead
    # (`nearest_settings`), with the command line's flags (`overrides`) applied to it as well.
    nearest: bool = False
    overrides: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        # Lexical absolute path: symlinked checkouts keep the path the user sees.
        object.__setattr__(self, "root", Path(os.path.abspath(self.root)))

    @property
    def configured_profile(self) -> Profile | None:
        """The precision profile `precision` names; None for "auto" (detect it from the files)."""
        profile = configured(self.precision)
        return None if profile is None else self.for_project(profile)

    def for_project(self, profile: Profile) -> Profile:
        """`profile` with the torch versions and the Python the project supports."""
        major, _, minor = self.target_version.partition(".")
        python = (int(major), int(minor)) if self.target_version else NEWEST_PYTHON
        return replace(profile, torch=TorchRange.parse(self.torch_version), python=python)

    def is_selected(self, code: str, *, opt_in: bool = False) -> bool:
        """Whether `code` is on: the longest matching prefix in select (and extend-select) and ignore
        decides; ties go to ignore. An `opt_in` rule (off by default) is on only where select or
        extend-select names its code exactly, or `ALL`: a prefix such as `AMP` does not turn it on."""
        code = code.upper()
        chosen = (*self.select, *self.extend_select)
        if opt_in and code not in chosen and ALL not in chosen:
            return False
        return _longest_prefix(code, chosen) > _longest_prefix(code, self.ignore)

    @cached_property
    def exclude_patterns(self) -> PatternSet:
        """`exclude` + `extend-exclude` as one pattern set anchored at `root` (later patterns win)."""
        return PatternSet((*self.exclude, *self.extend_exclude), self.root)

    def is_excluded(self, path: Path, is_dir: bool) -> bool:
        """Whether `path` (relative to the cwd, or absolute) or one of its parent directories below `root`
        is excluded."""
        return self.exclude_patterns.is_ignored(Path(os.path.abspath(path)), is_dir)

    @cached_property
    def _per_file_matchers(self) -> tuple[tuple[PatternSet, bool, tuple[str, ...]], ...]:
        matchers = []
        for glob, codes in self.per_file_ignores:
            # A leading '!' (as in ruff) applies the codes to files that do NOT match.
            negated = glob.startswith("!")
            matchers.append((PatternSet([glob[1:] if negated else glob], self.root), negated, codes))
        return tuple(matchers)

    def ignored_codes_for(self, path: Path) -> frozenset[str]:
        """Codes and prefixes that `per-file-ignores` turns off for the file `path`."""
        abs_path = Path(os.path.abspath(path))
        codes: set[str] = set()
        for patterns, negated, glob_codes in self._per_file_matchers:
            # is_ignored also matches parent directories, so "tests/" covers files deep under tests.
            if patterns.is_ignored(abs_path, is_dir=False) != negated:
                codes.update(glob_codes)
        return frozenset(codes)

    def is_ignored_for(self, code: str, path: Path) -> bool:
        """Whether `per-file-ignores` turns `code` off for the file `path`."""
        code = code.upper()
        return any(code.startswith(prefix) for prefix in self.ignored_codes_for(path))

    def with_overrides(
        self,
        *,
        select: Sequence[str] | None = None,
        extend_select: Sequence[str] | None = None,
        ignore: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        extend_exclude: Sequence[str] | None = None,
        precision: str | None = None,
        torch_version: str | None = None,
        cache_dir: Path | None = None,
        modes: Sequence[str] | None = None,
        show_conditional: bool | None = None,
    ) -> Settings:
        """Apply command-line flags: `--select`, `--exclude`, `--precision` and `--cache-dir` replace
        the configured values, `--extend-select`, `--ignore` and `--extend-exclude` add to them. Lists may be
        comma-separated."""
        changes: dict[str, Any] = {}
        new_ignore = self.ignore
        if select is not None:
            changes["select"] = validate_codes(_split(select), "--select")
            # Naming a code on the command line beats the config ignoring that very code.
            new_ignore = tuple(c for c in new_ignore if c not in changes["select"])
        if extend_select is not None:
            added = validate_codes(_split(extend_select), "--extend-select")
            changes["extend_select"] = (*self.extend_select, *added)
            new_ignore = tuple(c for c in new_ignore if c not in added)
        if ignore is not None:
            new_ignore = (*new_ignore, *validate_codes(_split(ignore), "--ignore"))
        if new_ignore != self.ignore:
            changes["ignore"] = new_ignore
        if exclude is not None:
            changes["exclude"] = _validate_patterns(_split(exclude), "--exclude")
        if extend_exclude is not None:
            changes["extend_exclude"] = (
                *self.extend_exclude,
                *_validate_patterns(_split(extend_exclude), "--extend-exclude"),
            )
        if precision is not None and precision != self.precision:
            changes["precision"] = _validate_precision(precision, "--precision")
        if torch_version is not None:
            changes["torch_version"] = _validate_torch(torch_version, "--torch-version")
        if cache_dir is not None:
            changes["cache_dir"] = Path(os.path.abspath(cache_dir))  # relative to the cwd, as flags are
        if modes is not None:
            changes["modes"] = _validate_modes(_split(modes), "--modes")
        if show_conditional is not None and show_conditional != self.show_conditional:
            changes["show_conditional"] = show_conditional
        given = {
            "select": select,
            "extend_select": extend_select,
            "ignore": ignore,
            "exclude": exclude,
            "extend_exclude": extend_exclude,
            "precision": precision,
            "torch_version": torch_version,
            "cache_dir": None if cache_dir is None else changes["cache_dir"],
            "modes": modes,
            "show_conditional": show_conditional,
        }
        flags = tuple(
            (key, tuple(_split(value)) if isinstance(value, (list, tuple)) else value)
            for key, value in given.items()
            if value is not None
        )
        if not changes and not flags:
            return self
        origins = dict(self.origins)
        origins.update((key, "--" + key.replace("_", "-")) for key in changes)
        return replace(self, **changes, origins=tuple(origins.items()), overrides=(*self.overrides, *flags))

    def origin(self, key: str) -> str:
        """Where the value of `key` (a field name) came from: a file, a flag, or "default"."""
        return dict(self.origins).get(key, "default")


def _split(values: Sequence[str]) -> list[str]:
    if isinstance(values, str):
        values = [values]
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not valid UTF-8: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc


def _amplint_table(data: Mapping[str, Any]) -> object | None:
    tool = data.get("tool")
    return tool.get("amplint") if isinstance(tool, dict) else None


# Looked for in each directory, in this order (as ruff: its own files before pyproject.toml).
CONFIG_NAMES = (".amplint.toml", "amplint.toml", "pyproject.toml")


def _config_in(directory: Path) -> Path | None:
    """The configuration file of `directory`: `.amplint.toml`, `amplint.toml`, or a `pyproject.toml`
    with a `[tool.amplint]` table; None when it has none."""
    for name in CONFIG_NAMES:
        candidate = directory / name
        if candidate.is_file() and (
            name != "pyproject.toml" or _amplint_table(_read_toml(candidate)) is not None
        ):
            return candidate
    return None


def find_config(start: Path) -> Path | None:
    """The configuration file in `start` or its nearest parent directory that has one.

    A `pyproject.toml` without `[tool.amplint]` is skipped; one that is not valid TOML raises
    ConfigError.
    """
    directory = Path(os.path.abspath(start))
    if not directory.is_dir() and directory.exists():
        directory = directory.parent
    for candidate_dir in (directory, *directory.parents):
        found = _config_in(candidate_dir)
        if found is not None:
            return found
    return None


# Deeper `extend` chains are a mistake, not a layout: said in one line, before Python's own limit.
_MAX_EXTEND_DEPTH = 64


def _load_file(path: Path, chain: tuple[Path, ...] = ()) -> Settings:
    """The settings `path` holds, after those of the file it extends (if any)."""
    if len(chain) >= _MAX_EXTEND_DEPTH:
        raise ConfigError(
            f"{chain[0]}: 'extend' chain deeper than {_MAX_EXTEND_DEPTH} files (reached {path})", chain[0]
        )
    if path in chain:
        cycle = " -> ".join(str(p) for p in (*chain, path))
        raise ConfigError(f"{chain[-1]}: 'extend' makes a cycle: {cycle}")
    if not path.is_file():
        where = f"{chain[-1]}: 'extend' names" if chain else "config file"
        raise ConfigError(f"{where} {path}, which does not exist")
    data = _read_toml(path)
    if path.name != "pyproject.toml":
        return _settings_from_table(data, path, "", (*chain, path))
    table = _amplint_table(data)
    if table is None:
        raise ConfigError(f"{path}: no [tool.amplint] table")
    return _settings_from_table(table, path, "[tool.amplint] ", (*chain, path))


def _settings_from_table(table: object, path: Path, section: str, chain: tuple[Path, ...]) -> Settings:
    prefix = f"{path}: {section}"
    if not isinstance(table, dict):
        raise ConfigError(f"{prefix.rstrip()} must be a table, got {_show(table)}")
    base = Settings()
    if "extend" in table:
        target = table["extend"]
        if not isinstance(target, str) or not target.strip():
            raise ConfigError(
                f"{prefix}'extend' must be the path of a configuration file, got {_show(target)}"
            )
        base = _load_file(Path(os.path.abspath(path.parent / os.path.expanduser(target))), chain)
    warnings = list(base.warnings)
    for key in table:
        if key not in _KNOWN_KEYS:  # a warning, not an error: a newer amplint's key must not stop this one
            message = f"{prefix}unknown key {key!r} ignored (known keys: {', '.join(_KNOWN_KEYS)})"
            close = difflib.get_close_matches(key.replace("_", "-").lower(), _KNOWN_KEYS, n=1)
            warnings.append(message + (f"; did you mean {close[0]!r}?" if close else ""))
    changes: dict[str, Any] = {"root": path.parent, "config_path": path, "warnings": tuple(warnings)}
    if "select" in table:
        changes["select"] = validate_codes(table["select"], f"{prefix}'select'")
    if "extend-select" in table:  # extends what the base selects
        added = validate_codes(table["extend-select"], f"{prefix}'extend-select'")
        changes["extend_select"] = (*base.extend_select, *added)
    if "ignore" in table:
        changes["ignore"] = validate_codes(table["ignore"], f"{prefix}'ignore'")
    if "exclude" in table:
        changes["exclude"] = _validate_patterns(table["exclude"], f"{prefix}'exclude'")
    if "extend-exclude" in table:
        added = _validate_patterns(table["extend-exclude"], f"{prefix}'extend-exclude'")
        changes["extend_exclude"] = (*base.extend_exclude, *added)
    if "per-file-ignores" in table:
        per_file = table["per-file-ignores"]
        if not isinstance(per_file, dict):
            raise ConfigError(
                f"{prefix}'per-file-ignores' must be a table mapping gitignore-style patterns to lists of "
                f"{_CODES_EXPECTED}, got {_show(per_file)}"
            )
        changes["per_file_ignores"] = tuple(
            (glob, validate_codes(codes, f"{prefix}'per-file-ignores' entry {glob!r}"))
            for glob, codes in per_file.items()
        )
    if "precision" in table:
        changes["precision"] = _validate_precision(table["precision"], f"{prefix}'precision'")
    if "modes" in table:
        changes["modes"] = _validate_modes(table["modes"], f"{prefix}'modes'")
    if "show-conditional" in table:
        value = table["show-conditional"]
        if not isinstance(value, bool):
            raise ConfigError(f"{prefix}'show-conditional' must be true or false, got {_show(value)}")
        changes["show_conditional"] = value
    if "deep" in table:
        value = table["deep"]
        if not isinstance(value, bool):
            raise ConfigError(f"{prefix}'deep' must be true or false, got {_show(value)}")
        changes["deep"] = value
    if "max-file-size" in table:
        changes["max_file_size"] = parse_size(table["max-file-size"], f"{prefix}'max-file-size'")
    if "torch-version" in table:
        changes["torch_version"] = _validate_torch(table["torch-version"], f"{prefix}'torch-version'")
    if "target-version" in table:
        changes["target_version"] = _validate_target(table["target-version"], f"{prefix}'target-version'")
    if "cache-dir" in table:
        directory = table["cache-dir"]
        if not isinstance(directory, str) or not directory.strip():
            raise ConfigError(
                f"{prefix}'cache-dir' must be a folder path as a string, got {_show(directory)}"
            )
        changes["cache_dir"] = Path(os.path.abspath(path.parent / directory))
    if "runtime" in table:
        runtime = table["runtime"]
        if not isinstance(runtime, dict):
            raise ConfigError(f"{prefix}'runtime' must be a table, got {_show(runtime)}")
        changes["runtime"] = {**base.runtime, **runtime}
    origins = dict(base.origins)
    origins.update((key, str(path)) for key in changes if key not in ("root", "config_path", "warnings"))
    return replace(base, **changes, origins=tuple(origins.items()))


def _common_directory(paths: Sequence[Path], cwd: Path) -> Path:
    dirs = []
    for path in paths:
        full = Path(os.path.abspath(cwd / path))
        dirs.append(str(full if full.is_dir() else full.parent))
    return Path(os.path.commonpath(dirs)) if dirs else cwd


def load_settings(
    paths: Sequence[Path], config_file: Path | None = None, cwd: Path | None = None
) -> Settings:
    """Settings for linting `paths` (relative to `cwd`, default the process cwd).

    With `config_file`: a `pyproject.toml` must hold `[tool.amplint]`; any other TOML file holds the
    settings at its top level; it applies to every file. Without: the nearest configuration above the
    common directory of `paths` (defaults anchored at `cwd` when there is none), and a file below a
    nearer one gets that one (`nearest_settings`). Without `torch-version`, the torch requirement the
    nearest `pyproject.toml` declares stands for it.
    """
    cwd = Path(os.path.abspath(cwd if cwd is not None else Path.cwd()))
    start = _common_directory(paths, cwd)
    if config_file is not None:
        path = Path(os.path.abspath(cwd / config_file))
        if not path.is_file():
            raise ConfigError(f"{config_file}: config file not found")
        return _declared(_load_file(path), start)
    found = find_config(start)
    settings = Settings(root=cwd) if found is None else _load_file(found)
    return _declared(replace(settings, nearest=True), start)


def nearest_settings(settings: Settings) -> Callable[[Path], Settings]:
    """The settings of each file under a run's `settings`: those of the nearest configuration above
    the file (found once per folder), with the run's command-line flags over them. Settings given
    with `--config` (or built by hand) apply to every file."""
    if not settings.nearest:
        return lambda path: settings
    # folder -> its nearest configuration (or why it cannot be read), each folder looked at once
    configs: dict[str, Path | ConfigError | None] = {}
    loaded: dict[Path, Settings | ConfigError] = (
        {} if settings.config_path is None else {settings.config_path: settings}
    )

    def config_of(folder: str) -> Path | ConfigError | None:
        if folder not in configs:
            parent = os.path.dirname(folder)
            try:
                found: Path | ConfigError | None = _config_in(Path(folder))
            except ConfigError as exc:  # only a pyproject.toml is read to find one
                found = ConfigError(str(exc), Path(folder) / "pyproject.toml")
            configs[folder] = found if found is not None or parent == folder else config_of(parent)
        return configs[folder]

    def settings_of(path: Path) -> Settings:
        """Raises ConfigError naming the broken configuration that the file falls under."""
        found = config_of(os.path.dirname(os.path.abspath(path)))
        if isinstance(found, ConfigError):
            raise found
        if found is None:
            return settings
        if found not in loaded:
            try:
                own = _declared(replace(_load_file(found), nearest=True), found.parent)
                loaded[found] = own.with_overrides(**dict(settings.overrides))
            except ConfigError as exc:
                loaded[found] = ConfigError(str(exc), exc.path or found)
        result = loaded[found]
        if isinstance(result, ConfigError):
            raise result
        return result

    return settings_of


def _declared(settings: Settings, start: Path) -> Settings:
    """`settings` with what the nearest project root above `start` (a folder with a
    `pyproject.toml`, `setup.py`, `setup.cfg` or a requirements file) declares of the project: its
    torch requirement unless `torch-version` says which torch it supports (`[project]
    dependencies`, else setup.cfg, setup.py or a requirements file), the lower bound of its
    `requires-python` unless `target-version` says which Python."""
    for directory in (start, *start.parents):
        candidate = directory / "pyproject.toml"
        has_pyproject = candidate.is_file()
        if not has_pyproject and not _pins_here(directory):
            continue
        data = _read_toml(candidate) if has_pyproject else {}
        changes: dict[str, Any] = {}
        where = {
            "torch_version": f"{candidate} [project] dependencies",
            "target_version": f"{candidate} [project] requires-python",
        }
        if not settings.torch_version:
            changes["torch_version"] = _torch_dependency(data)
            if not changes["torch_version"]:
                changes["torch_version"], where["torch_version"] = _pinned_torch(directory)
        if not settings.target_version:
            changes["target_version"] = _python_requirement(data)
        changes = {key: value for key, value in changes.items() if value}
        origins = (*settings.origins, *((key, where[key]) for key in changes))
        return replace(settings, **changes, origins=origins) if changes else settings
    return settings
