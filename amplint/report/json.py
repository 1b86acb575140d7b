"""Machine-readable output: every diagnostic exactly as `Diagnostic.to_dict()` describes it."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from enum import Enum
from pathlib import PurePath
from typing import Any

from amplint.diagnostics import Diagnostic
from amplint.report import ReportSummary, applies, fix_counts


def amplint_version() -> str:
    # The package's __init__ may not define a version (or may be missing while it is written).
    import amplint

    return str(getattr(amplint, "__version__", "0"))


def json_default(value: object) -> Any:
    """Make rule-supplied `extra` values serialisable instead of failing the whole report."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, PurePath):
        return value.as_posix()
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    return str(value)


def diagnostic_dict(diagnostic: Diagnostic) -> dict[str, Any]:
    data = diagnostic.to_dict()
    if diagnostic.extra:
        # `to_dict` lets an `extra` key shadow a real field; the real field must win (in place,
        # so the key order stays that of the dataclass).
        data.update(replace(diagnostic, extra={}).to_dict())
    return data


def summary_dict(diagnostics: Sequence[Diagnostic], summary: ReportSummary | None) -> dict[str, Any]:
    summary = summary or ReportSummary()
    fixable, hidden = fix_counts(diagnostics, summary)
    severities = Counter(str(getattr(d.severity, "value", d.severity)) for d in diagnostics)
    return {
        "files_checked": summary.files_checked,
        "findings": len(diagnostics),
        "fixable": fixable,
        "hidden_fixes": hidden,
        "fixed": summary.fixed,
        "fix_applied": summary.fix_applied,
        "diff": summary.diff,
        "by_severity": {name: severities.get(name, 0) for name in ("error", "warning", "info")},
        # `check --deep`: per file, the candidates confirmed, refuted, unreached and not confirmed.
        **({"traced": summary.traced} if summary.traced else {}),
    }


def render(diagnostics: Sequence[Diagnostic], *, summary: ReportSummary | None = None) -> str:
    document = {
        "version": amplint_version(),
        "diagnostics": [diagnostic_dict(diagnostic) for diagnostic in diagnostics],
        "summary": summary_dict(diagnostics, summary),
    }
    return json.dumps(document, indent=2, ensure_ascii=False, default=json_default) + "\n"


def render_lines(diagnostics: Sequence[Diagnostic]) -> str:
    """JSON Lines: one diagnostic per line, as `render` gives them, for streaming consumers (`jq -c`)."""
    return "".join(
        json.dumps(diagnostic_dict(d), ensure_ascii=False, default=json_default) + "\n" for d in diagnostics
    )


def render_statistics(diagnostics: Sequence[Diagnostic], *, summary: ReportSummary | None = None) -> str:
    """`--statistics --format json`: one object per rule with findings, most findings first, in the
    shape of ruff's (`code`, `name`, `count`, `fixable`, `fixable_count`: the findings `--fix`, with
    this run's `--unsafe-fixes`, would fix)."""
    counts = Counter(d.code for d in diagnostics)
    names = {d.code: d.name for d in diagnostics}
    fixable = Counter(d.code for d in diagnostics if applies(d, summary))
    rows = [
        {
            "code": code,
            "name": names[code],
            "count": count,
            "fixable": fixable[code] > 0,
            "fixable_count": fixable[code],
        }
        for code, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    ]
    return json.dumps(rows, indent=2, ensure_ascii=False) + "\n"
