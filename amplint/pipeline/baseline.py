"""Adopting amplint on code that already has findings: a baseline records them, and a later run with
`--baseline FILE` reports only the findings that are not in it.

A finding is recorded by its rule, its file and a fingerprint of the text of its line (whitespace
collapsed), not by its line number, so that code moving up or down leaves it matched; identical
findings are counted, so that a second copy of a recorded line is new.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from amplint.diagnostics import Diagnostic
from amplint.source import source_line

_VERSION = 1
_FIELDS = ("code", "path", "fingerprint", "count")


class BaselineError(Exception):
    """A baseline file that cannot be read or written; the message names it."""


def _key(sources: Mapping[str, str], diagnostic: Diagnostic) -> tuple[str, str, str]:
    content = " ".join((source_line(sources.get(diagnostic.location), diagnostic.line) or "").split())
    fingerprint = hashlib.sha256(f"{diagnostic.code}\0{content}".encode()).hexdigest()[:16]
    return diagnostic.code, Path(diagnostic.location).as_posix(), fingerprint


def write(path: Path, diagnostics: Sequence[Diagnostic], sources: Mapping[str, str]) -> int:
    """Record `diagnostics` in `path`; how many."""
    counts = Counter(_key(sources, d) for d in diagnostics)
    findings = [
        {"code": code, "path": file, "fingerprint": fingerprint, "count": n}
        for (code, file, fingerprint), n in sorted(
            counts.items(), key=lambda item: (item[0][1], item[0][0], item[0][2])
        )
    ]
    try:
        path.write_text(
            json.dumps({"version": _VERSION, "findings": findings}, indent=2) + "\n", encoding="utf-8"
        )
    except OSError as exc:
        raise BaselineError(f"cannot write the baseline {path}: {exc.strerror or exc}") from None
    return len(diagnostics)


def read(path: Path) -> Counter[tuple[str, str, str]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"cannot read the baseline {path}: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise BaselineError(f"{path} is not a baseline amplint wrote (not JSON: {exc})") from None
    findings = data.get("findings") if isinstance(data, dict) and data.get("version") == _VERSION else None
    if not isinstance(findings, list):
        raise BaselineError(
            f"{path} is not a baseline amplint wrote (expected version {_VERSION} and findings)"
        )
    recorded: Counter[tuple[str, str, str]] = Counter()
    for item in findings:
        code, file, fingerprint, count = (item.get(k) if isinstance(item, dict) else None for k in _FIELDS)
        if not (isinstance(code, str) and isinstance(file, str) and isinstance(fingerprint, str)) or not (
            isinstance(count, int) and count >= 1
        ):
            raise BaselineError(f"{path}: a finding needs {', '.join(_FIELDS)} (a count >= 1), got {item!r}")
        recorded[(code, file, fingerprint)] += count
    return recorded


def new_findings(
    path: Path, diagnostics: Sequence[Diagnostic], sources: Mapping[str, str]
) -> tuple[list[Diagnostic], int]:
    """The findings that the baseline at `path` does not record, and how many it did."""
    recorded = read(path)
    kept: list[Diagnostic] = []
    for diagnostic in diagnostics:
        key = _key(sources, diagnostic)
        if recorded[key] > 0:
            recorded[key] -= 1
        else:
            kept.append(diagnostic)
    return kept, len(diagnostics) - len(kept)
