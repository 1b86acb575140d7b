"""Gitignore-style pattern matching, written to git's rules (see `gitignore(5)` and git's wildmatch).

Used for `.gitignore` files during discovery and for the `exclude` / `per-file-ignores` globs of the
configuration, so that one pattern language covers every path setting.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Pattern", "PatternSet", "load_gitignore", "parse_pattern"]

# POSIX classes as git's wildmatch sees them (ASCII, C locale).
_POSIX_CLASSES: dict[str, str] = {
    "alnum": "a-zA-Z0-9",
    "alpha": "a-zA-Z",
    "blank": " \\t",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "\\x21-\\x7e",
    "lower": "a-z",
    "print": "\\x20-\\x7e",
    "punct": re.escape(string.punctuation).replace("]", "\\]"),
    "space": " \\t\\n\\r\\f\\v",
    "upper": "A-Z",
    "xdigit": "0-9A-Fa-f",
}


@dataclass(frozen=True)
class Pattern:
    """One parsed pattern line."""

    text: str  # the line as written (after trimming), for messages
    negated: bool
    dir_only: bool
    # Anchored patterns match the whole path relative to the base; others match the last name, which is
    # the same as matching at any depth since they cannot match a '/'.
    anchored: bool
    regex: re.Pattern[str] | None  # None: malformed (e.g. unterminated `[`), never matches, like git

    def matches(self, rel: str, is_dir: bool) -> bool:
        """Whether the pattern matches `rel`, a '/'-separated path relative to the base."""
        if self.regex is None or (self.dir_only and not is_dir):
            return False
        return self.regex.fullmatch(rel if self.anchored else rel[rel.rfind("/") + 1 :]) is not None


def _trim_trailing_spaces(line: str) -> str:
    # git drops trailing spaces unless backslash-escaped; tabs are kept.
    last_space: int | None = None
    i = 0
    while i < len(line):
        c = line[i]
        if c == " ":
            if last_space is None:
                last_space = i
        elif c == "\\":
            i += 1
            if i == len(line):
                return line
            last_space = None
        else:
            last_space = None
        i += 1
    return line if last_space is None else line[:last_space]


def _translate_bracket(pat: str, i: int) -> tuple[str, int] | None:
    """Regex for the class starting at pat[i] == '[' and the index after it; None if malformed."""
    n = len(pat)
    j = i + 1
    negate = j < n and pat[j] in "!^"
    if negate:
        j += 1
    items: list[str] = []
    first = True
    while True:
        if j >= n:
            return None  # unterminated: git never matches such a pattern
        c = pat[j]
        if c == "]" and not first:
            j += 1
            break
        first = False
        if pat.startswith("[:", j):
            end = pat.find(":]", j + 2)
            if end != -1:
                cls = _POSIX_CLASSES.get(pat[j + 2 : end])
                if cls is None:
                    return None
                items.append(cls)
                j = end + 2
                continue
        if c == "\\":
            j += 1
            if j >= n:
                return None
            c = pat[j]
        j += 1
        if j + 1 < n and pat[j] == "-" and pat[j + 1] != "]":
            hi = pat[j + 1]
            j += 2
            if hi == "\\":
                if j >= n:
                    return None
                hi = pat[j]
                j += 1
            if c <= hi:  # a reversed range matches nothing in git (and is an error for `re`)
                items.append(f"{re.escape(c)}-{re.escape(hi)}")
        else:
            items.append(re.escape(c))
    body = "".join(items)
    # A class never matches '/', even negated or when it lists '/'.
    if negate:
        return f"[^/{body}]", j
    return (f"(?!/)[{body}]" if body else "(?!)"), j


def _translate(pat: str) -> str | None:
    """Regex source for a wildmatch pattern (leading and trailing '/' already removed)."""
    out: list[str] = []
    i, n = 0, len(pat)
    while i < n:
        c = pat[i]
        if c == "*":
            j = i
            while j < n and pat[j] == "*":
                j += 1
            whole_component = (i == 0 or pat[i - 1] == "/") and (j == n or pat[j] == "/")
            if j - i >= 2 and whole_component:
                if j == n:
                    out.append(".*")  # `foo/**`, `**`: everything below
                else:
                    out.append("(?:.*/)?")  # `**/`: zero or more directories
                    j += 1
            else:
                out.append("[^/]*")  # `*`, and `**` glued to other text, which git treats as `*`
            i = j
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            res = _translate_bracket(pat, i)
            if res is None:
                return None
            cls, i = res
            out.append(cls)
        elif c == "\\":
            if i + 1 == n:
                return None  # a trailing lone backslash makes git's pattern invalid
            out.append(re.escape(pat[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse_pattern(line: str) -> Pattern | None:
    """Parse one `.gitignore` line; None for blank lines and comments."""
    line = line.rstrip("\r\n")
    if not line or line.startswith("#"):
        return None
    text = _trim_trailing_spaces(line)
    pat = text
    negated = pat.startswith("!")
    if negated:
        pat = pat[1:]
    dir_only = pat.endswith("/")
    if dir_only:
        pat = pat[:-1]
    if not pat:
        return None
    anchored = "/" in pat
    if pat.startswith("/"):
        pat = pat[1:]
    body = _translate(pat)
    regex = None if body is None else re.compile(body, re.DOTALL)
    return Pattern(text=text, negated=negated, dir_only=dir_only, anchored=anchored, regex=regex)


class PatternSet:
    """The patterns of one `.gitignore` file (or one setting), anchored at `base`."""

    def __init__(self, patterns: Iterable[str], base: Path) -> None:
        self.base = Path(os.path.abspath(base))
        self._base_str = str(self.base)
        parsed = (parse_pattern(p) for p in patterns)
        self.patterns: tuple[Pattern, ...] = tuple(p for p in parsed if p is not None)
        # Last matching pattern wins, so search from the end.
        self._reversed = self.patterns[::-1]
        # Most paths match nothing: one combined regex per kind rejects them in a single call.
        self._quick = {is_dir: self._combine(is_dir) for is_dir in (False, True)}

    def _combine(self, is_dir: bool) -> tuple[re.Pattern[str] | None, re.Pattern[str] | None]:
        def join(anchored: bool) -> re.Pattern[str] | None:
            sources = [
                f"(?:{p.regex.pattern})"
                for p in self.patterns
                if p.regex is not None and p.anchored == anchored and (is_dir or not p.dir_only)
            ]
            return re.compile("|".join(sources), re.DOTALL) if sources else None

        return join(True), join(False)

    def __len__(self) -> int:
        return len(self.patterns)

    def __repr__(self) -> str:
        return f"PatternSet({[p.text for p in self.patterns]!r}, base={self._base_str!r})"

    def match_relative(self, rel: str, is_dir: bool) -> bool | None:
        """Match a '/'-separated path relative to `base`.

        True: ignored; False: re-included by a negated pattern; None: no pattern matched.
        Only the path itself is matched, not its parent directories (see `is_ignored`).
        """
        anchored, unanchored = self._quick[is_dir]
        if not (
            (anchored is not None and anchored.fullmatch(rel))
            or (unanchored is not None and unanchored.fullmatch(rel[rel.rfind("/") + 1 :]))
        ):
            return None
        for pattern in self._reversed:
            if pattern.matches(rel, is_dir):
                return not pattern.negated
        return None

    def _match_name(self, name: str, is_dir: bool) -> bool | None:
        # For paths outside `base`: only unanchored patterns have a meaning there.
        for pattern in self._reversed:
            if not pattern.anchored and pattern.matches(name, is_dir):
                return not pattern.negated
        return None

    def _relative(self, path: Path) -> str | None:
        """`path` relative to base ('/'-separated, '' for base itself), or None when outside it."""
        if not path.is_absolute():
            norm = os.path.normpath(path)
            if norm == os.curdir:
                return ""
            if norm == os.pardir or norm.startswith(os.pardir + os.sep):
                return None
            return Path(norm).as_posix()
        abs_path = os.path.normpath(path)
        if abs_path == self._base_str:
            return ""
        prefix = self._base_str if self._base_str.endswith(os.sep) else self._base_str + os.sep
        if not abs_path.startswith(prefix):
            return None
        return Path(abs_path[len(prefix) :]).as_posix()

    def match(self, path: Path, is_dir: bool) -> bool | None:
        """Like `match_relative`; a relative `path` is taken relative to `base`.

        An absolute path outside `base` is matched by its name against the unanchored patterns only.
        """
        rel = self._relative(path)
        if rel is None:
            return self._match_name(path.name, is_dir)
        if rel == "":
            return None  # the base directory itself is never matched, as in git
        return self.match_relative(rel, is_dir)

    def is_ignored(self, path: Path, is_dir: bool) -> bool:
        """Whether git would ignore `path`: it matches, or one of its parent directories (below `base`)
        does. A file inside an ignored directory cannot be re-included, as in git."""
        rel = self._relative(path)
        if rel is None:
            return self._match_name(path.name, is_dir) is True
        if rel == "":
            return False
        parts = rel.split("/")
        for i in range(1, len(parts)):
            if self.match_relative("/".join(parts[:i]), True) is True:
                return True
        return self.match_relative(rel, is_dir) is True


def load_gitignore(data: bytes, base: Path) -> PatternSet:
    """The patterns of a `.gitignore`-format file's bytes, anchored at `base` (its directory, or the
    folder it applies to)."""
    # git works on bytes; surrogateescape keeps undecodable names matchable against os.scandir's names.
    text = data.decode("utf-8", "surrogateescape")
    return PatternSet(text.split("\n"), base)
