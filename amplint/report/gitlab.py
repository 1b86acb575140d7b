"""GitLab Code Quality: the JSON array a job publishes as `artifacts:reports:codequality`, which the
merge request widget and the changes tab show (a subset of the Code Climate issue spec)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from amplint.diagnostics import Diagnostic, Severity
from amplint.report import cell_position, confidence_note

# GitLab's five levels: a finding that can break a model is "major", a likely one "minor".
_SEVERITIES = {Severity.ERROR: "major", Severity.WARNING: "minor", Severity.INFO: "info"}


def _fingerprint(diagnostic: Diagnostic, occurrence: int) -> str:
    """Stable across runs and line shifts (rule, file, message and which occurrence of those it is),
    unique within the report: GitLab shows only the first finding of a fingerprint and compares the
    fingerprints of two pipelines to tell new findings from fixed ones."""
    key = "\0".join((diagnostic.code, diagnostic.location, diagnostic.message, str(occurrence)))
    # A file name that is not UTF-8 reaches here as surrogate escapes of its bytes.
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def issue(diagnostic: Diagnostic, occurrence: int) -> dict[str, Any]:
    description = f"{diagnostic.code} {diagnostic.name}: {diagnostic.message}"
    if diagnostic.cell is not None:
        description += f" ({cell_position(diagnostic)})"
    note = confidence_note(diagnostic)
    if note is not None:
        description += f" [{note}]"
    end = diagnostic.file_line + max(diagnostic.end_line - diagnostic.line, 0)
    return {
        "description": description,
        "check_name": diagnostic.code,
        "fingerprint": _fingerprint(diagnostic, occurrence),
        "severity": _SEVERITIES.get(Severity(diagnostic.severity), "minor"),
        "location": {"path": diagnostic.path, "lines": {"begin": diagnostic.file_line, "end": end}},
    }


def render(diagnostics: Sequence[Diagnostic]) -> str:
    seen: Counter[tuple[str, str, str]] = Counter()
    issues = []
    for diagnostic in diagnostics:
        key = (diagnostic.code, diagnostic.location, diagnostic.message)
        issues.append(issue(diagnostic, seen[key]))
        seen[key] += 1
    return json.dumps(issues, indent=2, ensure_ascii=False) + "\n"
