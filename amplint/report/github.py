"""GitHub Actions workflow commands, which the runner turns into annotations on the pull request."""

from __future__ import annotations

from collections.abc import Sequence

from amplint.diagnostics import SAFE, UNSAFE, Diagnostic, Severity
from amplint.report import cell_position, confidence_note

_COMMANDS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def escape_data(text: str) -> str:
    # The runner's own escaping (actions/toolkit `escapeData`); '%' first so that
    # the escapes added afterwards are not escaped again.
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    # ':' and ',' would otherwise end the property list or the value (toolkit `escapeProperty`).
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def _command(severity: object) -> str:
    try:
        return _COMMANDS[Severity(severity)]
    except ValueError:
        return "warning"


def annotation(diagnostic: Diagnostic) -> str:
    properties = [("file", diagnostic.path), ("line", str(diagnostic.file_line))]
    # GitHub only honours columns when the annotation stays on one line. A notebook finding sits on
    # the line of the .ipynb that holds its code, where columns would count JSON, not code: the title
    # says where in the cell it is instead.
    notebook = diagnostic.cell is not None
    single_line = diagnostic.end_line <= diagnostic.line and not notebook
    if single_line:
        properties.append(("col", str(diagnostic.column)))
    end_line = diagnostic.file_line if notebook else max(diagnostic.end_line, diagnostic.line)
    properties.append(("endLine", str(end_line)))
    if single_line:
        properties.append(("endColumn", str(max(diagnostic.end_column, diagnostic.column))))
    title = f"{diagnostic.code} {diagnostic.name}"
    properties.append(("title", f"{title} ({cell_position(diagnostic)})" if notebook else title))
    message = diagnostic.message
    if diagnostic.fix is not None:
        how = {SAFE: " (amplint --fix)", UNSAFE: " (amplint --fix --unsafe-fixes)"}
        message += f"\nFix available{how.get(diagnostic.fix.applicability, '')}: {diagnostic.fix.description}"
    if diagnostic.help:
        message += f"\nhelp: {diagnostic.help}"
    note = confidence_note(diagnostic)
    if note is not None:
        message += f"\n{note}"
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    return f"::{_command(diagnostic.severity)} {rendered}::{escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic]) -> str:
    return "".join(annotation(diagnostic) + "\n" for diagnostic in diagnostics)
