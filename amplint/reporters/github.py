"""GitHub Actions workflow commands, which the runner turns into annotations on the pull request."""

from __future__ import annotations

from collections.abc import Sequence

from amplint.diagnostics import Diagnostic, Severity

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
    properties = [("file", diagnostic.path), ("line", str(diagnostic.line))]
    # GitHub only honours columns when the annotation stays on one line.
    single_line = diagnostic.end_line <= diagnostic.line
    if single_line:
        properties.append(("col", str(diagnostic.column)))
    properties.append(("endLine", str(max(diagnostic.end_line, diagnostic.line))))
    if single_line:
        properties.append(("endColumn", str(max(diagnostic.end_column, diagnostic.column))))
    properties.append(("title", f"{diagnostic.code} {diagnostic.name}"))
    message = diagnostic.message
    if diagnostic.fix is not None:
        message += f"\nFix available (amplint --fix): {diagnostic.fix.description}"
    if diagnostic.help:
        message += f"\nhelp: {diagnostic.help}"
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    return f"::{_command(diagnostic.severity)} {rendered}::{escape_data(message)}"


def render(diagnostics: Sequence[Diagnostic]) -> str:
    return "".join(annotation(diagnostic) + "\n" for diagnostic in diagnostics)
