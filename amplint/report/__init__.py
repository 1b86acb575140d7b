"""Output formats for diagnostics: one `render()` entry point, one module per format."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from amplint.diagnostics import Diagnostic, sort_diagnostics

FORMATS = ("text", "concise", "json", "json-lines", "sarif", "github", "gitlab", "junit", "markdown", "html")


@dataclass(frozen=True)
class ReportSummary:
    """What the run did besides finding things.

    The diagnostics handed to `render()` are the ones that remain: after `--fix` they exclude
    the `fixed` ones; with `--diff` they exclude the ones the diff would fix.
    """

    files_checked: int | None = None
    fixed: int = 0
    fix_applied: bool = False  # --fix
    diff: bool = False  # --diff
    unsafe_fixes: bool = False  # --unsafe-fixes: unsafe fixes count as applicable
    # Absolute directory that relative paths are relative to; lets SARIF say where %SRCROOT% is.
    root: str | None = None
    quiet: bool = False  # --quiet: findings only, no summary lines
    # Findings not shown because no execution mode of the project supports them (--show-conditional).
    conditional: int = 0
    # Files not checked for half-precision hazards, as every finding would have been conditional.
    unchecked: int = 0
    # `check --deep`: per file, the candidates confirmed, refuted, unreached and not confirmed.
    traced: dict[str, dict[str, int]] = field(default_factory=dict)


def applies(diagnostic: Diagnostic, summary: ReportSummary | None) -> bool:
    """Whether the run's `--fix` (with its `--unsafe-fixes`) applies the finding's fix."""
    unsafe = summary is not None and summary.unsafe_fixes
    return diagnostic.fix is not None and diagnostic.fix.applies(unsafe)


def fix_counts(diagnostics: Sequence[Diagnostic], summary: ReportSummary | None) -> tuple[int, int]:
    """How many of the findings `--fix` would fix, and how many more `--unsafe-fixes` would add."""
    fixable = sum(applies(d, summary) for d in diagnostics)
    hidden = sum(d.fix is not None and d.fix.applies(True) and not applies(d, summary) for d in diagnostics)
    return fixable, hidden


def cell_position(diagnostic: Diagnostic) -> str:
    """Where a notebook finding is in its cell, for the formats that can only point at the line of the
    .ipynb file that holds it."""
    return f"cell {diagnostic.cell}, line {diagnostic.line}, column {diagnostic.column}"


def confidence_note(diagnostic: Diagnostic) -> str | None:
    """What the runtime pass said of a finding (`confirmed: ...`), for every format; None when the
    finding was never put to a trace."""
    evidence = diagnostic.extra.get("evidence") or diagnostic.extra.get("confirmation")
    if diagnostic.confidence.value == "static" and evidence is None:
        return None
    return f"{diagnostic.confidence.value}: {evidence}" if evidence else diagnostic.confidence.value


def render(
    fmt: str,
    diagnostics: Sequence[Diagnostic],
    *,
    sources: Mapping[str, str],
    color: bool,
    statistics: bool = False,
    summary: ReportSummary | None = None,
) -> str:
    """Render `diagnostics` in `fmt` (one of FORMATS). `sources` maps a path to its decoded text (for
    a notebook, also each cell's `Diagnostic.location` to the cell's text), `color` only affects
    the text formats, `statistics` the text formats and json (counts per rule instead of findings)."""
    ordered = sort_diagnostics(list(diagnostics))
    # Imported here so that choosing one format never loads the others (SARIF loads the catalogue).
    if fmt in ("text", "concise"):
        from amplint.report import text

        return text.render(
            ordered,
            sources=sources,
            color=color,
            statistics=statistics,
            summary=summary,
            concise=fmt == "concise",
        )
    if fmt in ("json", "json-lines"):
        from amplint.report import json

        if fmt == "json":
            if statistics:
                return json.render_statistics(ordered, summary=summary)
            return json.render(ordered, summary=summary)
        return json.render_lines(ordered)
    if fmt == "sarif":
        from amplint.report import sarif

        return sarif.render(ordered, summary=summary)
    if fmt == "github":
        from amplint.report import github

        return github.render(ordered)
    if fmt == "gitlab":
        from amplint.report import gitlab

        return gitlab.render(ordered)
    if fmt == "junit":
        from amplint.report import junit

        return junit.render(ordered)
    if fmt == "markdown":
        from amplint.report import markdown

        return markdown.render(ordered)
    if fmt == "html":
        from amplint.report import html

        return html.render(ordered, sources=sources)
    raise ValueError(f"unknown output format {fmt!r}; expected one of {', '.join(FORMATS)}")
