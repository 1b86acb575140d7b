"""Human-readable output in the style of ruff: a header per finding, the source line, markers."""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

from amplint.diagnostics import Diagnostic, Severity
from amplint.report import ReportSummary, applies, confidence_note, fix_counts
from amplint.source import NEWLINE, source_line

TAB_WIDTH = 4

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_CYAN = "\x1b[36m"
_GUTTER = "\x1b[1;34m"
_SEVERITY_STYLE = {
    Severity.ERROR: "\x1b[1;31m",
    Severity.WARNING: "\x1b[1;33m",
    Severity.INFO: "\x1b[1;34m",
}

# The line breaks Python's tokenizer (and so libcst's line numbers) knows; str.splitlines()
# also splits on \f, \v, \x1c... which would shift every later line number.


class _Style:
    def __init__(self, color: bool) -> None:
        self.color = color

    def __call__(self, text: str, code: str) -> str:
        return f"{code}{text}{_RESET}" if self.color and text else text


def _visible(char: str) -> str:
    """Control characters from a file name, message or source line must not reach the terminal raw
    (an escape sequence could rewrite the screen), so show them as their Unicode control pictures."""
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)
    if code == 0x7F:
        return "\u2421"
    if 0x80 <= code < 0xA0:
        return "\ufffd"
    return char


def _sanitize(text: str) -> str:
    return "".join(_visible(char) for char in text)


def _char_width(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _layout(line: str, start: int, end: int) -> tuple[str, int, int]:
    """Expand `line` for display and map code point offsets [start, end) to display columns, so the
    markers line up under tabs and wide characters alike."""
    parts: list[str] = []
    width = 0
    display_start: int | None = None
    display_end: int | None = None
    for index, char in enumerate(line):
        if index == start:
            display_start = width
        if index == end:
            display_end = width
        if char == "\t":
            step = TAB_WIDTH - width % TAB_WIDTH
            parts.append(" " * step)
            width += step
        else:
            shown = _visible(char)
            parts.append(shown)
            width += _char_width(shown)
    if display_start is None:
        display_start = width
    if display_end is None:
        display_end = width
    return "".join(parts), display_start, display_end


def _severity(value: object) -> Severity | None:
    try:
        return Severity(value)
    except ValueError:
        return None


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _severity_style(diagnostic: Diagnostic) -> str:
    severity = _severity(diagnostic.severity)
    return _SEVERITY_STYLE.get(severity, _BOLD) if severity is not None else _BOLD


def _header(diagnostic: Diagnostic, style: _Style, summary: ReportSummary | None) -> str:
    """`path:line:column: CODE [*] message`, the first line of a finding (all of it, concise)."""
    fixable = f" {style('[*]', _CYAN)}" if applies(diagnostic, summary) else ""
    return (
        f"{style(_sanitize(diagnostic.location), _BOLD)}:{diagnostic.line}:{diagnostic.column}: "
        f"{style(diagnostic.code, _severity_style(diagnostic))}{fixable} {_sanitize(diagnostic.message)}"
    )


def _finding(
    diagnostic: Diagnostic, sources: Mapping[str, str], style: _Style, summary: ReportSummary | None
) -> list[str]:
    out = [_header(diagnostic, style, summary)]
    gutter_width = len(str(max(diagnostic.line, 1)))
    blank = " " * gutter_width
    source = source_line(sources.get(diagnostic.location), diagnostic.line)
    if source is not None:
        start = max(diagnostic.column, 1) - 1
        multiline = diagnostic.end_line > diagnostic.line
        end = len(source) if multiline else max(diagnostic.end_column - 1, start)
        shown, display_start, display_end = _layout(source, start, end)
        carets = "^" * max(display_end - display_start, 1)
        note = f" span continues to line {diagnostic.end_line}" if multiline else ""
        bar = style("|", _GUTTER)
        out.append(f"{blank} {bar}")
        out.append(f"{style(str(diagnostic.line), _GUTTER)} {bar} {shown}".rstrip())
        out.append(f"{blank} {bar} {' ' * display_start}{style(carets, _severity_style(diagnostic))}{note}")
        out.append(f"{blank} {bar}")
    if diagnostic.help:
        help_lines = [_sanitize(part) for part in NEWLINE.split(diagnostic.help)]
        label = f"{blank} {style('= help', _CYAN)}: "
        out.append(label + help_lines[0])
        indent = " " * (gutter_width + len(" = help: "))
        out.extend((indent + part).rstrip() for part in help_lines[1:])
    runtime = confidence_note(diagnostic)
    if runtime is not None:
        kind, _, evidence = runtime.partition(": ")
        out.append(f"{blank} {style('= ' + kind, _CYAN)}" + (f": {_sanitize(evidence)}" if evidence else ""))
    return out


def _conditional_lines(summary: ReportSummary | None) -> list[str]:
    """What a run without --show-conditional left out: the conditional findings, and the files whose
    half-precision rules it did not run, every finding of theirs being conditional there."""
    left = []
    if summary is not None and summary.conditional:
        left.append(f"{_plural(summary.conditional, 'conditional finding')} not shown")
    if summary is not None and summary.unchecked:
        left.append(f"{_plural(summary.unchecked, 'file')} not checked for half-precision hazards")
    if not left:
        return []
    does = "checks and shows" if summary is not None and summary.unchecked else "shows"
    return [
        f"{', and '.join(left)}: nothing in the project runs that code in bf16/fp16 "
        f"(--show-conditional {does} them; `modes` in [tool.amplint] says how a library is run)."
    ]


def _summary_lines(diagnostics: Sequence[Diagnostic], summary: ReportSummary | None) -> list[str]:
    if summary is not None and summary.quiet:
        return []
    remaining = len(diagnostics)
    fixable, hidden = fix_counts(diagnostics, summary)
    if summary is not None and (summary.fix_applied or summary.diff) and summary.fixed:
        if summary.fix_applied:
            return [f"Fixed {_plural(summary.fixed, 'finding')}, {remaining} remaining."]
        # With --diff the findings shown are those in the file as it is, the fixable ones included.
        return [f"Would fix {_plural(summary.fixed, 'finding')}, {remaining - summary.fixed} remaining."]
    hint = _conditional_lines(summary)
    hint.extend(_traced_lines(summary))
    if remaining == 0:
        return ["All checks passed!", *hint]
    lines = [f"Found {_plural(remaining, 'finding')}.", *hint]
    # After --fix anything still fixable could not be applied, so the hint would be a lie.
    if fixable and not (summary is not None and summary.fix_applied):
        lines.append(f"[*] {fixable} fixable with the --fix option.")
    if hidden:
        fixes = "fix" if hidden == 1 else "fixes"
        lines.append(f"{hidden} hidden {fixes} can be enabled with the --unsafe-fixes option.")
    return lines


def _traced_lines(summary: ReportSummary | None) -> list[str]:
    """`check --deep`: what the traces made of the candidates, in all and per file."""
    if summary is None or not summary.traced:
        return []
    total: Counter[str] = Counter()
    for tally in summary.traced.values():
        total.update(tally)
    said = ", ".join(f"{count} {outcome}" for outcome, count in total.items())
    lines = [
        f"Traced {_plural(sum(total.values()), 'candidate')} in {_plural(len(summary.traced), 'file')}: {said}."
    ]
    for path, tally in summary.traced.items():
        lines.append(
            f"  {_sanitize(path)}: " + ", ".join(f"{count} {outcome}" for outcome, count in tally.items())
        )
    return lines


def _statistics(diagnostics: Sequence[Diagnostic]) -> list[str]:
    counts = Counter(diagnostic.code for diagnostic in diagnostics)
    names: dict[str, str] = {}
    fixable: set[str] = set()
    for diagnostic in diagnostics:
        names.setdefault(diagnostic.code, diagnostic.name)
        if diagnostic.fix is not None:
            fixable.add(diagnostic.code)
    rows = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    count_width = max((len(str(count)) for _, count in rows), default=1)
    code_width = max((len(code) for code, _ in rows), default=1)
    return [
        f"{count:>{count_width}}  {_sanitize(code):<{code_width}}  "
        f"{'[*]' if code in fixable else '   '}  {_sanitize(names[code])}".rstrip()
        for code, count in rows
    ]


def render(
    diagnostics: Sequence[Diagnostic],
    *,
    sources: Mapping[str, str],
    color: bool,
    statistics: bool = False,
    summary: ReportSummary | None = None,
    concise: bool = False,
) -> str:
    """The findings with their source lines (with `concise`, one line each, as ruff's `concise`)."""
    style = _Style(color)
    lines: list[str] = []
    if statistics:
        lines.extend(_statistics(diagnostics))
        if diagnostics:
            lines.append("")
    elif concise:
        lines.extend(_header(diagnostic, style, summary) for diagnostic in diagnostics)
        lines.append("")
    else:
        for diagnostic in diagnostics:
            lines.extend(_finding(diagnostic, sources, style, summary))
            lines.append("")
    lines.extend(_summary_lines(diagnostics, summary))
    while lines and not lines[-1]:
        lines.pop()  # --quiet leaves no summary after the blank separator
    return "\n".join(lines) + "\n" if lines else ""
