"""Jupyter notebooks (`.ipynb`): the code cells are checked as one module, and fixes are written back
into the cells.

- One module: the code cells are joined in order, each after a marker comment line, so that the
  `import torch` of cell 1 is known in cell 5, as when the notebook runs top to bottom (ruff does the
  same). A table maps the module's lines back to (cell, line in the cell).
- Cells are numbered as ruff numbers them: `cell N` is the N-th cell of the notebook counting every
  cell, markdown and raw ones included (`cells[N - 1]` in the JSON), so the number is unambiguous
  whatever the cell types are.
- IPython syntax (`%magic`, `!shell`, `obj?`, `x = !cmd`, a `%%time` cell magic line) starts a logical
  line, never a Python statement: each such line is replaced by a `pass` line with the same
  indentation, so the rest of the cell is checked, nothing is found or fixed there, and the line is
  put back verbatim. A cell whose cell magic does not run its body as Python (`%%bash`,
  `%%writefile`) is skipped whole.
- A cell that does not parse even then is reported (AMP900 naming the cell) and left out; the other
  cells are checked. A cell that Python accepts and libcst cannot read is left out with a warning
  naming it (no AMP900: the notebook is not broken). A file that is not JSON, or not a notebook, is one AMP900 at the JSON position.
- Writing a fix replaces only the `source` value of each changed cell in the file's text: outputs,
  metadata, key order and every other byte stay as they were. The new source keeps its form (a list
  of lines or one string) and the file's indentation, line endings and escaping of non-ASCII.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from json.decoder import JSONArray, scanstring  # type: ignore[attr-defined]
from json.scanner import py_make_scanner  # type: ignore[attr-defined]
from pathlib import Path
from typing import TYPE_CHECKING, Any

from amplint.diagnostics import (
    CELL,
    IPYNB_LINE,
    CellEdit,
    Diagnostic,
    Edit,
    Span,
    cell_location,
    sort_diagnostics,
)
from amplint.results import UNPARSABLE, FileResult, unparsable_diagnostic, unreadable
from amplint.source import NEWLINE, LineIndex, SourceError, SourceFile, read_source
from amplint.static.profile import CALLER, Profile

if TYPE_CHECKING:
    from amplint.fixing.edits import FixOutcome
    from amplint.rule import Rule

__all__ = ["SUFFIX", "cell_sources", "fix_notebook", "is_notebook", "lint_notebook", "lint_notebook_file"]

SUFFIX = ".ipynb"
# What a line of IPython syntax becomes in the module: a statement wherever the line could stand.
_MASK = "pass  # amplint: IPython syntax"
# IPython's escapes at the start of a logical line: magics (`%`, `%%`), shell (`!`, `!!`), help (`?`,
# `??`) and autocall (`/`, `,`, `;`). None of them can start a Python statement.
_ESCAPES = ("%", "!", "?", "/", ",", ";")
# `x = %time f()`, `files = !ls`: the output of a magic or a shell command assigned to names.
_ASSIGNED = re.compile(r"[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!]")
# Cell magics that run their body as Python; any other skips the cell.
_PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug", "python", "python3", "pypy"})


def is_notebook(path: Path) -> bool:
    return path.suffix == SUFFIX


class NotebookError(Exception):
    """The file is not a notebook that can be checked; the message says why, for an AMP900."""

    def __init__(self, message: str, line: int = 1, column: int = 1) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


# --- reading: JSON with the spans of the values that may be rewritten --------------------------------


class _Text(str):
    """A JSON string value and the span of its literal in the file, quotes included."""

    span: tuple[int, int]


class _Array(list[Any]):
    """A JSON array and its span in the file, brackets included."""

    span: tuple[int, int]


def _text(document: str, end: int, strict: bool) -> tuple[_Text, int]:
    value, stop = scanstring(document, end, strict)
    located = _Text(value)
    located.span = (end - 1, stop)
    return located, stop


def _array(state: tuple[str, int], scan_once: Any) -> tuple[_Array, int]:
    values, stop = JSONArray(state, scan_once)
    located = _Array(values)
    located.span = (state[1] - 1, stop)
    return located, stop


class _Decoder(json.JSONDecoder):
    """The standard decoder on its pure-Python scanner, the one that calls these hooks: string and
    array values come back with their spans."""

    def __init__(self) -> None:
        super().__init__()
        self.parse_string = _text
        self.parse_array = _array
        self.scan_once = py_make_scanner(self)


# --- IPython syntax ----------------------------------------------------------------------------------


def _split_lines(text: str) -> list[str]:
    """The lines of `text`, each with its line break, broken where Python's tokenizer breaks them."""
    starts = LineIndex(text).starts
    return [
        text[start:end] for start, end in zip(starts, [*starts[1:], len(text)], strict=True) if start < end
    ]


def _string_end(line: str, start: int, quote: str) -> int:
    """Where the string literal open at `start` and closed by `quote` ends on this line; -1 if it
    goes on past the line."""
    index = start
    while index < len(line):
        if line[index] == "\\":
            index += 2
        elif line.startswith(quote, index):
            return index + len(quote)
        else:
            index += 1
    return -1


def _scan(line: str, quote: str | None, depth: int) -> tuple[str | None, int, bool, str]:
    """Follow one physical line of Python: the string still open after it (its closing quote), the
    bracket depth, whether a backslash continues it, and its last character that is code."""
    last = ""
    index = 0
    while index < len(line):
        if quote is not None:
            end = _string_end(line, index, quote)
            if end < 0:
                break
            index, quote, last = end, None, '"'
            continue
        char = line[index]
        if char == "#":
            return None, depth, False, last
        if char in "'\"":
            quote = line[index : index + 3] if line[index : index + 3] in ('"""', "'''") else char
            index += len(quote)
            continue
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(depth - 1, 0)
        if not char.isspace():
            last = char
        index += 1
    if quote is not None and len(quote) == 1 and not line.endswith("\\"):
        quote = None  # a one-quote string ends with its line unless a backslash carries it on
    return quote, depth, quote is None and line.endswith("\\"), last


@dataclass
class _Masked:
    text: str  # the cell with each line of IPython syntax replaced by a `pass` line
    hidden: list[str]  # the replaced lines as they were, in order


def _mask(text: str) -> _Masked | None:
    """The cell as Python, or None for a cell magic whose body is not Python."""
    lines = _split_lines(text)
    first = next((line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")), "")
    cell_magic = first[2:].split()[:1] if first.startswith("%%") else []
    if cell_magic and cell_magic[0] not in _PYTHON_CELL_MAGICS:
        return None
    out: list[str] = []
    hidden: list[str] = []
    quote: str | None = None
    depth = 0
    continued = False
    magic_indent: str | None = None  # set while a masked line goes on (trailing backslash)
    for line in lines:
        body = line.rstrip("\r\n")
        indent = body[: len(body) - len(body.lstrip())]
        starts_statement = quote is None and depth == 0 and not continued
        if magic_indent is not None or (starts_statement and _is_ipython(body.lstrip())):
            magic_indent = indent if magic_indent is None else magic_indent
            out.append(magic_indent + _MASK + line[len(body) :])
            hidden.append(body)
            magic_indent = magic_indent if body.endswith("\\") else None
            continue
        quote, depth, continued, last = _scan(body, quote, depth)
        if starts_statement and last == "?" and quote is None and depth == 0 and not continued:
            out.append(indent + _MASK + line[len(body) :])  # `obj?`, `obj.method??`: help
            hidden.append(body)
            continue
        out.append(line)
    return _Masked("".join(out), hidden)


def _is_ipython(statement: str) -> bool:
    return statement.startswith(_ESCAPES) or _ASSIGNED.match(statement) is not None


def _unmask(text: str, hidden: Sequence[str]) -> str:
    """Put the lines of IPython syntax back, in order, wherever a fix moved them."""
    lines = _split_lines(text)
    masks = [index for index, line in enumerate(lines) if line.strip() == _MASK]
    if len(masks) != len(hidden):
        raise NotebookError("a fix touched a line of IPython syntax")
    for index, original in zip(masks, hidden, strict=True):
        lines[index] = original + lines[index][len(lines[index].rstrip("\r\n")) :]
    return "".join(lines)


# --- the notebook as one module ----------------------------------------------------------------------


@dataclass
class _Cell:
    number: int  # 1-based among all the notebook's cells
    text: str  # the source, joined
    value: _Text | _Array  # the `source` value in the file
    file_lines: list[int]  # the line of the .ipynb holding each line of the cell (at least one)
    masked: _Masked | None = None  # None: not checked

    def where(self, line: int) -> dict[str, int]:
        return {CELL: self.number, IPYNB_LINE: self.file_lines[min(line, len(self.file_lines)) - 1]}


def _marker(number: int) -> str:
    return f"# amplint: notebook cell {number}\n"


@dataclass
class _Notebook:
    source: SourceFile  # the .ipynb file
    line_starts: list[int]  # where each line of the file starts
    cells: list[_Cell]  # every code cell
    problems: list[Diagnostic] = field(default_factory=list)  # cells that could not be checked

    @property
    def checked(self) -> list[_Cell]:
        return [cell for cell in self.cells if cell.masked is not None]

    def module(self) -> SourceFile:
        parts: list[str] = []
        for cell in self.checked:
            assert cell.masked is not None
            text = cell.masked.text
            parts += [_marker(cell.number), text if text.endswith(("\n", "\r")) or not text else text + "\n"]
        return SourceFile(self.source.path, "".join(parts), "utf-8", False, "\n")

    def starts(self) -> list[int]:
        """The module line of each checked cell's first line."""
        starts = []
        line = 1
        for cell in self.checked:
            assert cell.masked is not None
            starts.append(line + 1)
            line += 1 + len(_split_lines(cell.masked.text))
        return starts

    def locate(self, line: int, starts: list[int]) -> tuple[_Cell, int]:
        index = max(bisect.bisect_right(starts, line) - 1, 0)
        return self.checked[index], max(line - starts[index] + 1, 1)

    def place(self, diagnostic: Diagnostic, starts: list[int]) -> Diagnostic:
        """A diagnostic on the module as one on its cell."""
        cell, line = self.locate(diagnostic.line, starts)
        fix = diagnostic.fix
        if fix is not None:
            covers = tuple(self._place_span(span, starts) for span in fix.covers)
            fix = replace(
                fix, edits=tuple(self._place_edit(edit, starts) for edit in fix.edits), covers=covers
            )
        return replace(
            diagnostic,
            line=line,
            end_line=line + diagnostic.end_line - diagnostic.line,
            fix=fix,
            extra={**diagnostic.extra, **cell.where(line)},
        )

    def _place_edit(self, edit: Edit, starts: list[int]) -> CellEdit:
        cell, line = self.locate(edit.line, starts)
        end_line = line + edit.end_line - edit.line
        return CellEdit(line, edit.column, end_line, edit.end_column, edit.content, cell.number)

    def _place_span(self, span: Span, starts: list[int]) -> Span:
        _, line = self.locate(span.line, starts)
        return replace(span, line=line, end_line=line + span.end_line - span.line)

    def drop(self, diagnostic: Diagnostic, starts: list[int], *, report: bool = True) -> None:
        """Leave out the cell of an AMP900 found on the module, and report it (`report`)."""
        cell, _ = self.locate(diagnostic.line, starts)
        if report:
            self.problems.append(self.place(diagnostic, starts))
        cell.masked = None

    def rewrite(self, module: str) -> str:
        """The file's text with the cells as they are in `module` (a fixed module)."""
        segments: dict[int, list[str]] = {}
        current: list[str] | None = None
        markers = iter(self.checked)
        expected = next(markers, None)
        for line in _split_lines(module):
            if expected is not None and line == _marker(expected.number):
                current = segments[expected.number] = []
                expected = next(markers, None)
            elif current is not None:
                current.append(line)
        if expected is not None or len(segments) != len(self.checked):
            raise NotebookError("the fixed module lost a cell marker")
        changes: list[tuple[tuple[int, int], str]] = []
        for cell in self.checked:
            assert cell.masked is not None
            new = "".join(segments[cell.number])
            if not cell.masked.text.endswith(("\n", "\r")) and new.endswith("\n"):
                new = new[:-1]  # the line break the module added
            if new != cell.masked.text:
                changes.append((cell.value.span, self._render(cell, _unmask(new, cell.masked.hidden))))
        pieces: list[str] = []
        cursor = 0
        for (start, end), rendered in sorted(changes):
            pieces += [self.source.text[cursor:start], rendered]
            cursor = end
        return "".join([*pieces, self.source.text[cursor:]])

    def _render(self, cell: _Cell, text: str) -> str:
        """The JSON for a new `source`, in the form and style of the old one."""
        ascii_only = self.source.text.isascii()  # then non-ASCII text was written as \\u escapes
        if isinstance(cell.value, _Text):
            return json.dumps(text, ensure_ascii=ascii_only)
        items = [json.dumps(line, ensure_ascii=ascii_only) for line in _split_lines(text)]
        if not items:
            return "[]"
        original = self.source.text
        start, end = cell.value.span
        newline = self.source.newline
        key_indent = _indent_at(original, self.line_starts, start)
        if newline in original[start:end] and cell.value:
            item_indent = _indent_at(original, self.line_starts, cell.value[0].span[0])
            closing_indent = _indent_at(original, self.line_starts, end - 1)
        elif newline in original:
            unit = re.search(r"[\r\n]([ \t]+)\S", original)
            item_indent = key_indent + (unit.group(1) if unit else " ")
            closing_indent = key_indent
        else:
            return "[" + _separator(original, cell.value).join(items) + "]"
        return (
            f"[{newline}"
            + f",{newline}".join(item_indent + item for item in items)
            + newline
            + closing_indent
            + "]"
        )


def _indent_at(text: str, line_starts: list[int], offset: int) -> str:
    start = line_starts[bisect.bisect_right(line_starts, offset) - 1]
    line = text[start:offset]
    return line[: len(line) - len(line.lstrip(" \t"))]


def _separator(text: str, array: _Array) -> str:
    """Between the items of a one-line array: as between the old items, else as after the file's first
    key."""
    if len(array) >= 2:
        return text[array[0].span[1] : array[1].span[0]]
    return "," if re.match(r'\s*\{\s*"(?:[^"\\]|\\.)*":\S', text) else ", "


def _file_lines(value: _Text | _Array, line_starts: list[int]) -> list[int]:
    """For each line of a cell, the line of the file where the string holding its start begins."""
    lines: list[int] = []
    at_start = True
    for piece in value if isinstance(value, _Array) else [value]:
        if not isinstance(piece, _Text) or not piece:
            continue
        file_line = bisect.bisect_right(line_starts, piece.span[0])
        if at_start:
            lines.append(file_line)
        lines += [file_line for match in NEWLINE.finditer(piece) if match.end() < len(piece)]
        at_start = piece.endswith(("\n", "\r"))
    return lines or [bisect.bisect_right(line_starts, value.span[0])]


def _load(source: SourceFile, display: str) -> _Notebook:
    """The notebook's code cells, as they are in the file."""
    try:
        document = _Decoder().decode(source.text)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not valid JSON: {exc.msg}", exc.lineno, exc.colno) from None
    except RecursionError:
        raise NotebookError("not valid JSON: nested too deeply") from None
    cells = document.get("cells") if isinstance(document, dict) else None
    if not isinstance(cells, list):
        raise NotebookError("not a Jupyter notebook: no `cells` list (nbformat 4)")
    line_starts = LineIndex(source.text).starts
    notebook = _Notebook(source, line_starts, [])
    if _language(document) not in (None, "python"):
        return notebook  # an R or Julia notebook: nothing to check
    for number, raw in enumerate(cells, start=1):
        if not isinstance(raw, dict) or raw.get("cell_type") != "code" or "source" not in raw:
            continue
        value = raw["source"]
        if isinstance(value, _Text) or (isinstance(value, _Array) and all(isinstance(v, str) for v in value)):
            notebook.cells.append(_Cell(number, "".join(value), value, _file_lines(value, line_starts)))
        else:
            where = {
                CELL: number,
                IPYNB_LINE: bisect.bisect_right(line_starts, getattr(value, "span", (0,))[0]),
            }
            problem = unparsable_diagnostic(
                display, "the cell's `source` is neither text nor a list of lines"
            )
            notebook.problems.append(replace(problem, extra=where))
    return notebook


def _read(source: SourceFile, display: str, profile: Profile) -> _Notebook:
    """The notebook with its code cells as Python: IPython syntax masked, cells that do not parse
    reported and left out."""
    from amplint.rules.runner import _compile_error

    notebook = _load(source, display)
    for cell in notebook.cells:
        cell.masked = _mask(cell.text)
        error = None if cell.masked is None else _compile_error(cell.masked.text, display, profile.python)
        if error is not None:
            cell.masked = None
            notebook.problems.append(replace(error, extra={**error.extra, **cell.where(error.line)}))
    return notebook


def _language(document: dict[str, Any]) -> str | None:
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        return None
    for key, name in (("kernelspec", "language"), ("language_info", "name")):
        section = metadata.get(key)
        if isinstance(section, dict) and isinstance(section.get(name), str):
            return str(section[name]).lower()
    return None


def _notebook_error(source: SourceFile, display: str, error: NotebookError) -> FileResult:
    return FileResult(
        source.path,
        display,
        source,
        [unparsable_diagnostic(display, error.message, error.line, error.column)],
    )


# --- checking and fixing -----------------------------------------------------------------------------


def _lint(notebook: _Notebook, rules: Sequence[type[Rule]], display: str, profile: Profile) -> FileResult:
    """Check the module; a cell that Python accepts and libcst does not is left out with a warning
    (the notebook is not broken: no AMP900, as for a `.py` file)."""
    from amplint.rules.runner import lint_source

    warnings: list[str] = []
    while True:
        starts = notebook.starts()
        result = lint_source(notebook.module(), rules, display, profile=profile)
        broken = next((d for d in result.diagnostics if d.code == UNPARSABLE), None)
        if broken is not None:
            notebook.drop(broken, starts)
        elif (rejected := result.libcst_rejected) is not None:
            where = notebook.place(rejected, starts)
            reason = rejected.message.removeprefix("SyntaxError: ").splitlines()[0]
            warnings.append(
                f"{display}:cell {where.extra[CELL]}:{where.line}:{where.column}: not checked: Python "
                f"accepts it, but amplint's parser (libcst) does not ({reason})"
            )
            notebook.drop(rejected, starts, report=False)
        else:
            break
    placed = [notebook.place(d, starts) for d in result.diagnostics]
    result.diagnostics = sort_diagnostics([*notebook.problems, *placed])
    result.warnings = [*warnings, *result.warnings]
    result.source = notebook.source
    return result


def lint_notebook(
    source: SourceFile, rules: Sequence[type[Rule]], display: str, *, profile: Profile = CALLER
) -> FileResult:
    """Check a notebook read with `read_source`."""
    try:
        notebook = _read(source, display, profile)
    except NotebookError as exc:
        return _notebook_error(source, display, exc)
    return _lint(notebook, rules, display, profile)


def lint_notebook_file(
    path: Path, rules: Sequence[type[Rule]], display: str, *, profile: Profile = CALLER
) -> FileResult:
    try:
        source = read_source(path)
    except SourceError as exc:
        return unreadable(path, display, exc)
    return lint_notebook(source, rules, display, profile=profile)


def fix_notebook(
    source: SourceFile,
    rules: Sequence[type[Rule]],
    display: str,
    *,
    profile: Profile = CALLER,
    unsafe: bool = False,
    conditional: bool = False,
) -> FixOutcome:
    """Fix the cells as `fixes.fix_source` fixes a file; `new_text` is the notebook's new JSON."""
    from amplint.fixing.edits import FixOutcome, fix_source

    try:
        notebook = _read(source, display, profile)
    except NotebookError as exc:
        return FixOutcome(_notebook_error(source, display, exc), source.text)
    result = _lint(notebook, rules, display, profile)
    if not any(d.fix is not None for d in result.diagnostics):
        return FixOutcome(result, source.text)
    starts = notebook.starts()
    outcome = fix_source(
        notebook.module(), rules, display, profile=profile, unsafe=unsafe, conditional=conditional
    )
    if not outcome.changed:
        return FixOutcome(result, source.text, errors=outcome.errors)
    try:
        new_text = notebook.rewrite(outcome.new_text)
    except NotebookError as exc:
        return FixOutcome(result, source.text, errors=[f"{display}: {exc.message}; notebook left unchanged"])
    fixed = lint_notebook(replace(source, text=new_text), rules, display, profile=profile)
    fixed.source = source  # `FixOutcome.changed` compares `new_text` with the text that was read
    applied = [notebook.place(d, starts) for d in outcome.applied]
    return FixOutcome(fixed, new_text, outcome.fixed, outcome.errors, applied)


def cell_sources(source: SourceFile, display: str) -> dict[str, str]:
    """The text of each code cell, under the name reports give it (`nb.ipynb:cell 3`), for snippets."""
    try:
        notebook = _load(source, display)
    except NotebookError:
        return {}
    return {cell_location(display, cell.number): cell.text for cell in notebook.cells}
