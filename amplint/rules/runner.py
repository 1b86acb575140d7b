"""The static pass over one file: read, pre-scan, parse, run the rules, turn findings into diagnostics."""

from __future__ import annotations

import ast
import re
import sys
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange

from amplint.diagnostics import SAFE, Confidence, Diagnostic, Edit, Fix, Span, sort_diagnostics
from amplint.results import UNPARSABLE, FileResult, unparsable_diagnostic, unreadable
from amplint.rule import Rule
from amplint.rules.suppression import file_is_exempt, line_suppresses
from amplint.source import (
    WORD,
    LineIndex,
    SourceError,
    SourceFile,
    display_path,
    python_ast,
    python_compiles,
    read_source,
)
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.cst_compat import parse_module
from amplint.static.engine.interpret import half_only_by_caller
from amplint.static.modes import role_of
from amplint.static.profile import CALLER, NEWEST_PYTHON, Profile
from amplint.static.regions import region_marks, skip_bodies

__all__ = [
    "UNPARSABLE",
    "FileResult",
    "lint_file",
    "lint_source",
    "lint_text",
    "unparsable_diagnostic",
    "unreadable",
]


def lint_file(
    path: Path, rules: Sequence[type[Rule]], display: str | None = None, *, profile: Profile = CALLER
) -> FileResult:
    display = display if display is not None else display_path(path)
    try:
        source = read_source(path)
    except SourceError as exc:
        return unreadable(path, display, exc)
    return lint_source(source, rules, display, profile=profile)


def lint_text(
    text: str,
    rules: Sequence[type[Rule]],
    path: str = "<string>",
    *,
    profile: Profile = CALLER,
    conditional: bool = True,
) -> FileResult:
    """Lint source text. `profile`: the half dtypes the code runs in; by default both (library code
    runs in whatever dtype its caller picks), as for a project where nothing sets one. `conditional`:
    as for `lint_source`."""
    source = SourceFile.of_text(text, Path(path))
    return lint_source(source, rules, path, profile=profile, conditional=conditional)


def lint_source(
    source: SourceFile,
    rules: Sequence[type[Rule]],
    display: str,
    *,
    profile: Profile = CALLER,
    conditional: bool = True,
) -> FileResult:
    """Lint a file. Without `conditional` (a run that hides conditional findings), the rules whose
    every finding would be conditional in this file are left out, and `result.unchecked` says so."""
    result = FileResult(source.path, display, source)
    text = source.text
    if file_is_exempt(text):
        return result
    words = frozenset(WORD.findall(text)) if rules else frozenset()
    active = _triggered(rules, words, text)
    if not conditional and half_only_by_caller(words, text, profile):
        active = _without_half_rules(active, result)
    if len(text) > LARGE:
        return _lint_in_parts(source, active, display, profile, result)
    return _lint_whole(text, active, words, display, profile, result, gate=not conditional)


def _without_half_rules(active: Sequence[type[Rule]], result: FileResult) -> list[type[Rule]]:
    """`active` less the rules resting on half values, where each finding of theirs would be
    conditional (`half_only_by_caller`); `result` says whether any was left out."""
    kept = [rule for rule in active if not rule.rests_on_half]
    result.unchecked = result.unchecked or len(kept) < len(active)
    return kept


def _triggered(rules: Sequence[type[Rule]], words: frozenset[str], text: str) -> list[type[Rule]]:
    """The rules that can match `text`: a trigger word among its `words`, a word of each of its other
    groups, and its trigger pattern."""
    return [
        rule
        for rule in rules
        if (not rule.triggers or rule.triggers & words)
        and all(group & words for group in rule.also_triggers)
        and (rule.trigger_pattern is None or rule.trigger_pattern.search(text) is not None)
    ]


# Text past this many characters is checked a part at a time (`_lint_in_parts`): Python's compiler
# takes about a hundred bytes of memory per byte of source, libcst several hundred.
LARGE = 1_048_576
_PART = 512 * 1024
# A part is compiled a piece of about this size at a time: Python compiles a small piece faster per
# byte than a large one, and only the pieces holding a rule's word are parsed into a syntax tree
# (which costs twice the compiling), so the time follows the code the rules read. 8 kB cost the least
# on `benchmarks/large_file.py`'s module (4 and 32 kB more).
_PIECE = 8 * 1024
# Where a top-level statement may start: a line at column 0 that is neither blank, a comment, a
# closing bracket, nor the continuation of a compound statement.
_STATEMENT_START = re.compile(r"^(?![ \t\r\n#)\]}]|(?:else|elif|except|finally)\b)", re.MULTILINE)
# A whole import statement on one line (a docstring's "from here on" is not one).
_NAMES = r"[\w.]+(?:[ \t]+as[ \t]+\w+)?(?:[ \t]*,[ \t]*[\w.]+(?:[ \t]+as[ \t]+\w+)?)*"
_IMPORT_LINE = re.compile(
    rf"^(?:import[ \t]+{_NAMES}|from[ \t]+[\w.]+[ \t]+import[ \t]+{_NAMES})[ \t]*$", re.MULTILINE
)


def _cuts(text: str, size: int = _PART, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) offsets of consecutive parts of `text[start:end]` of about `size` characters, each
    cut where a top-level statement may start (a cut inside a string or brackets shows when the part
    is compiled)."""
    end = len(text) if end is None else end
    cuts = []
    for match in _STATEMENT_START.finditer(text, start + size, end):
        if start + size <= match.start() < end:
            cuts.append((start, match.start()))
            start = match.start()
    cuts.append((start, end))
    return cuts


# A part of a large file as Python parsed it: its syntax tree, libcst's module where the syntax is
# newer than the running Python, None where only compiled, or why it is refused.
_Parsed = ast.Module | cst.Module | Diagnostic | None


def _compiled(
    text: str, display: str, profile: Profile, wanted: frozenset[str] = frozenset()
) -> Iterator[tuple[int, int, int, _Parsed]]:
    """The pieces of `text` with their first line, each compiled alone at the file's lines (parsed
    into a tree when it holds one of the `wanted` words). The pieces before one that compiles start
    and end at top-level statements (a piece cut inside a string or brackets does not compile), so
    a piece that fails is compiled again with the rest of its part; a part that fails, and fails
    differently with the next one's text added, was cut inside a statement and is joined to the next."""
    parts = _cuts(text)
    index, line, counted = 0, 1, 0
    while index < len(parts):
        end = parts[index][1]
        for start, piece_end in _cuts(text, _PIECE, *parts[index]):
            line += text.count("\n", counted, start)
            counted = start
            parsed = _part(text, start, piece_end, display, line, profile, wanted)
            if isinstance(parsed, Diagnostic):
                break
            yield start, piece_end, line, parsed
        else:
            index += 1
            continue
        if piece_end != end:
            parsed = _part(text, start, end, display, line, profile, wanted)
        while isinstance(parsed, Diagnostic) and index + 1 < len(parts):
            joined = _part(text, start, parts[index + 1][1], display, line, profile, wanted)
            if isinstance(joined, Diagnostic) and (joined.line, joined.column) == (
                parsed.line,
                parsed.column,
            ):
                break  # the same error with more text: the file's, not the cut's
            index += 1
            end = parts[index][1]
            parsed = joined
        yield start, end, line, parsed
        index += 1


def _part(
    text: str, start: int, end: int, display: str, first_line: int, profile: Profile, wanted: frozenset[str]
) -> _Parsed:
    """`text[start:end]`, a part of a large file, compiled (and, where it holds one of the `wanted`
    words, parsed) as `_python_tree` does, its AMP900 at the file's line. A part after the first
    follows a statement: one `pass` line stands for what comes before it (a late `from __future__`
    stays late)."""
    tree = bool(wanted) and not wanted.isdisjoint(WORD.findall(text, start, end))
    lead = "" if first_line == 1 else "pass\n"
    parsed = _python_tree(lead + text[start:end], display, tree=tree, python=profile.python)
    if not isinstance(parsed, Diagnostic):
        return parsed
    line = max(parsed.line + first_line - 1 - (1 if lead else 0), 1)
    return replace(parsed, line=line, end_line=line)


def invalid_code(text: str, display: str, profile: Profile = CALLER) -> str | None:
    """Why a fix's result is not valid code, or None when it is: libcst parses it, or for a large
    file (which libcst never reads whole), Python compiles every part of it."""
    if len(text) > LARGE:
        errors = (parsed for *_, parsed in _compiled(text, display, profile))
        return next((error.message for error in errors if isinstance(error, Diagnostic)), None)
    try:
        cst.parse_module(text)
    except cst.ParserSyntaxError as exc:
        return exc.message
    return None


def _lint_in_parts(
    source: SourceFile, active: Sequence[type[Rule]], display: str, profile: Profile, result: FileResult
) -> FileResult:
    """A large file, checked so that memory follows a part and time the code the rules need. Python
    compiles it a part at a time (about `_PART` characters). The rules read only its top-level
    statements that hold a word some active rule looks for (found in Python's tree of the part),
    parsed by libcst as modules of their own whose positions are the file's: the file's one-line
    imports on the first line, one string over the lines between the statements kept."""
    text = source.text
    triggers = frozenset().union(*(rule.triggers for rule in active))
    imports = "; ".join(match.group().strip() for match in _IMPORT_LINE.finditer(text))
    kept: list[tuple[int, str]] = []  # (first line, statement) of those the rules need
    for start, _, first_line, parsed in _compiled(
        text, display, profile, triggers if active else frozenset()
    ):
        if isinstance(parsed, Diagnostic):
            result.diagnostics = [parsed]
            return result
        part = text[start:_]
        if isinstance(parsed, cst.Module):  # newer syntax than the running Python: the part whole
            kept.append((first_line, part))
        elif parsed is not None:
            kept += _statements(part, parsed, first_line, triggers)
    batch: list[tuple[int, str]] = []
    size = 0
    for statement in kept:  # libcst reads about a part's worth at a time
        batch.append(statement)
        size += len(statement[1])
        if size >= _PART:
            _lint_kept(source, batch, imports, active, display, profile, result)
            batch, size = [], 0
    _lint_kept(source, batch, imports, active, display, profile, result)
    result.diagnostics = sort_diagnostics(result.diagnostics)
    return result


def _statements(
    part: str, tree: ast.Module, first_line: int, triggers: frozenset[str]
) -> list[tuple[int, str]]:
    """The top-level statements of a part (parsed after a lead line when not the file's first) that
    hold a trigger word, with their line in the file."""
    lines = part.splitlines(keepends=True)
    shift = 0 if first_line == 1 else 1  # the lead `pass` line
    found = []
    for statement in tree.body[shift:]:
        decorators: list[ast.expr] = getattr(statement, "decorator_list", None) or []
        begin = min([statement.lineno, *(d.lineno for d in decorators)]) - shift
        end = (statement.end_lineno or statement.lineno) - shift
        code = "".join(lines[begin - 1 : end])
        if not triggers.isdisjoint(WORD.findall(code)):
            found.append((begin + first_line - 1, code))
    return found


def _lint_kept(
    source: SourceFile,
    kept: list[tuple[int, str]],
    imports: str,
    active: Sequence[type[Rule]],
    display: str,
    profile: Profile,
    result: FileResult,
) -> None:
    """Run the rules over statements of a large file, laid out at their own lines, into `result`."""
    if not kept:
        return
    pieces = [imports]
    line = 1  # the last line written so far
    for first_line, statement in kept:
        body = statement.rstrip("\r\n")
        gap = first_line - line - 1  # lines to skip between what is written and the statement
        pieces.append('\n"""' + "\n" * (gap - 1) + '"""\n' if gap >= 2 else "\n" * (gap + 1))
        pieces.append(body)
        line = first_line + body.count("\n")
    module = "".join(pieces) + "\n"
    words = frozenset(WORD.findall(module))
    wanted = _triggered(active, words, module)
    found = _lint_whole(module, wanted, words, display, profile, FileResult(source.path, display, source))
    result.diagnostics += [d for d in found.diagnostics if d.line >= kept[0][0]]
    result.internal_errors += found.internal_errors
    result.warnings += found.warnings
    result.libcst_rejected = result.libcst_rejected or found.libcst_rejected


def _lint_whole(
    text: str,
    active: Sequence[type[Rule]],
    words: frozenset[str],
    display: str,
    profile: Profile,
    result: FileResult,
    *,
    gate: bool = False,
) -> FileResult:
    """Lint a whole module. `gate`: conditional findings are not wanted (`lint_source`), so the rules
    resting on half values are left out where Python's tree shows every half spelling harmless."""
    # Python's own (fast, C) parser decides whether the file is broken: AMP900 exactly where it
    # refuses the file in the grammar of the project's Python, whatever libcst, which accepts some of
    # those, makes of it. Syntax newer than the running Python is libcst's to read.
    tree = _python_tree(text, display, tree=bool(active), python=profile.python)
    if isinstance(tree, Diagnostic):
        result.diagnostics.append(tree)
        return result
    if (
        gate
        and isinstance(tree, ast.Module)
        and any(rule.rests_on_half for rule in active)
        and half_only_by_caller(words, text, profile, tree)
    ):
        active = _without_half_rules(active, result)
    if not active or tree is None:
        return result
    if isinstance(tree, cst.Module):
        module, parsed = tree, text
    else:
        marks = region_marks(active)
        skipped = skip_bodies(text, *marks, tree=tree) if marks is not None else None
        if skipped == "":
            return result  # no site of an active rule anywhere in the file
        parsed = skipped or text
        parsed_module = _libcst_module(parsed, display, result)
        if parsed_module is None:
            return result
        module = parsed_module
    python = tree if isinstance(tree, ast.Module) else None
    ctx = FileContext(result.path, module, words, parsed, profile=profile, tree=python)
    lines = LineIndex(text)
    too_deep: list[str] = []
    for rule in active:
        try:
            diagnostics = [_diagnostic(ctx, rule, finding, display, lines) for finding in rule().check(ctx)]
        except RecursionError:
            too_deep.append(rule.code)  # one file's shape, not a bug: the other rules and files go on
            continue
        except MemoryError:
            result.diagnostics = [unparsable_diagnostic(display, _OUT_OF_MEMORY)]
            return result
        except Exception:
            # The innermost frames say where; a deep recursion's thousand frames would say nothing more.
            trace = traceback.format_exc(limit=-_TRACE_FRAMES)
            result.internal_errors.append(f"{rule.code} crashed on {display}:\n{trace}")
            continue
        result.diagnostics.extend(
            d for d in diagnostics if not line_suppresses(lines.line_text(d.line), d.code)
        )
    ctx.release()
    if too_deep:
        message = (
            f"{_TOO_DEEP} for {', '.join(too_deep)}; the rest of the file was checked by the other rules"
        )
        result.diagnostics.append(unparsable_diagnostic(display, message))
    result.diagnostics = sort_diagnostics(result.diagnostics)
    return result


_TOO_DEEP = "nesting too deep (RecursionError)"
_OUT_OF_MEMORY = "out of memory while checking it (lower max-file-size?); the file was not checked"
_TRACE_FRAMES = 12


def _libcst_module(text: str, display: str, result: FileResult) -> cst.Module | None:
    """libcst's parse of text Python accepts; None when it fails, said in `result`."""
    try:
        return parse_module(text)
    except cst.ParserSyntaxError as exc:
        # Python accepted it: the file is not broken, only beyond libcst; not checked, and said so.
        first = exc.message.splitlines()[0] if exc.message else "syntax"
        result.libcst_rejected = unparsable_diagnostic(
            display, f"SyntaxError: {exc.message}", exc.raw_line, exc.raw_column + 1
        )
        result.warnings.append(
            f"{display}:{exc.raw_line}:{exc.raw_column + 1}: not checked: Python accepts it, but "
            f"amplint's parser (libcst) does not ({first})"
        )
    except RecursionError:
        result.diagnostics.append(
            unparsable_diagnostic(display, f"{_TOO_DEEP} to parse; the file was not checked")
        )
    except MemoryError:
        result.diagnostics.append(unparsable_diagnostic(display, _OUT_OF_MEMORY))
    return None


_RUNNING = sys.version_info[:2]


def _python_tree(
    text: str, display: str, *, tree: bool = True, python: tuple[int, int] = NEWEST_PYTHON
) -> ast.Module | cst.Module | Diagnostic | None:
    """Python's own parse of the file (None without `tree`: only compiled), or the AMP900
    diagnostic saying why the project's Python (`python`) rejects it: exactly where `compile(text,
    path, "exec")` raises, in the grammar of `python` when that is not newer than the running Python.
    When it is newer, syntax the running parser does not know yet is libcst's to read: a file only
    the running parser refuses is valid, and libcst's parse of it stands for Python's."""
    older = python < _RUNNING
    try:
        if not tree and not older:
            python_compiles(text, display)
            return None
        parsed = python_ast(text, display, compiled=True, feature_version=python[1] if older else -1)
        return parsed if tree else None
    except SyntaxError as exc:
        target = f"Python {python[0]}.{python[1]}"
        why = f"{target}, the project's Python, refuses it"
        if python > _RUNNING:
            # A parser's limits ("too many nested parentheses") bind newer Pythons as well.
            newer = None if exc.msg.startswith("too many") else _newer_syntax(text)
            if newer is not None:
                return newer
            # Broken in the newer grammar too: the running parser's message says best where.
            running = f"Python {_RUNNING[0]}.{_RUNNING[1]}"
            why = f"{running} refuses it, and it is not newer syntax that {target} accepts"
        return unparsable_diagnostic(
            display, f"SyntaxError: {exc.msg}", exc.lineno or 1, exc.offset or 1, help=why
        )
    except ValueError as exc:
        return unparsable_diagnostic(display, f"SyntaxError: {exc}")
    except RecursionError:
        return unparsable_diagnostic(
            display, f"{_TOO_DEEP} for Python's own parser; the file was not checked"
        )
    except MemoryError:
        return unparsable_diagnostic(display, "too large for Python's own parser; the file was not checked")


def _newer_syntax(text: str) -> cst.Module | None:
    """libcst's parse of a file the running Python refused, when the refusal is its parser's and
    libcst's newer grammar accepts the file; None when the file is broken there too, or when the
    compiler, not the parser, refused it (a late `from __future__ import` is wrong in every Python)."""
    try:
        python_ast(text)
    except SyntaxError:
        pass
    except (ValueError, RecursionError, MemoryError):
        return None
    else:
        return None  # the parser accepts it: what the compiler refused is refused by newer ones too
    try:
        return parse_module(text)
    except (cst.ParserSyntaxError, RecursionError, MemoryError):
        return None


def _compile_error(text: str, display: str, python: tuple[int, int] = NEWEST_PYTHON) -> Diagnostic | None:
    """The AMP900 diagnostic for text that the project's Python rejects, else None."""
    error = _python_tree(text, display, tree=False, python=python)
    return error if isinstance(error, Diagnostic) else None


def _diagnostic(
    ctx: FileContext, rule: type[Rule], finding: Finding, display: str, lines: LineIndex
) -> Diagnostic:
    where = ctx.position(finding.node)
    return Diagnostic(
        code=rule.code,
        name=rule.name,
        message=finding.message,
        path=display,
        line=where.start.line,
        column=where.start.column + 1,
        end_line=where.end.line,
        end_column=where.end.column + 1,
        severity=rule.severity,
        confidence=Confidence.CONDITIONAL
        if _conditional(ctx, finding) or (rule.training_run and role_of(display) == "test")
        else Confidence.STATIC,
        fix=render_fix(ctx, finding.fix, lines, rule.fix_applicability) if finding.fix else None,
        help=finding.help,
        extra=dict(finding.extra) | _evidence(ctx, finding),
    )


def _conditional(ctx: FileContext, finding: Finding) -> bool:
    """A finding that says it holds only in the caller's half dtype, where no configured precision
    says the code runs so: no execution mode of the project reaches it, nothing makes it happen. So
    is one whose half dtype comes from modes that the project's tests, benchmarks or examples alone
    set: a test that runs a model in half says what the test does, not how the project runs it."""
    if ctx.profile.origin == "configured":
        return False
    return finding.caller_only or (finding.side_only and _side_only(ctx, finding.node))


def _side_only(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether every execution mode of the top-level definition holding `node` rests on the
    project's tests, benchmarks or examples."""
    top = ctx.index.top_of.get(node)
    name = top.name.value if isinstance(top, (cst.ClassDef, cst.FunctionDef)) else None
    return ctx.profile.only_in(ctx.profile.modes_of(name)) is not None


def _evidence(ctx: FileContext, finding: Finding) -> dict[str, object]:
    """The finding's dtype evidence as `extra["why"]`: 1-based line and column, and what happened."""
    steps = []
    for step in finding.evidence:
        where = ctx.position(step.node).start
        steps.append({"line": where.line, "column": where.column + 1, "message": step.text})
    return {"why": steps} if steps else {}


def render_fix(ctx: FileContext, plan: FixPlan, lines: LineIndex, applicability: str = SAFE) -> Fix | None:
    """A rule's fix as text edits at the file's lines and columns; None where the replacement cannot
    be laid out in the file's own indentation."""
    edits = []
    for old, new in plan.replacements:
        where = ctx.position(old)
        # Positions exclude a node's own parentheses, so render the replacement without them too.
        if getattr(old, "lpar", None) and getattr(new, "lpar", None):
            new = new.with_changes(lpar=[], rpar=[])
            old = old.with_changes(lpar=[], rpar=[])
        start = lines.offset(where.start.line, where.start.column + 1)
        end = lines.offset(where.end.line, where.end.column + 1)
        content = _render(ctx, old, new, lines.text[start:end], lines.line_text(where.start.line))
        if content is None:
            return None
        edits.append(
            Edit(where.start.line, where.start.column + 1, where.end.line, where.end.column + 1, content)
        )
    if plan.needs_torch_import:
        line = _import_line(ctx)
        edits.append(Edit(line, 1, line, 1, f"import torch{ctx.module.default_newline}"))
    covers = tuple(_span(ctx.position(node)) for node in plan.covers)
    return Fix(plan.description, tuple(sorted(edits)), plan.applicability or applicability, covers)


def _span(where: CodeRange) -> Span:
    return Span(where.start.line, where.start.column + 1, where.end.line, where.end.column + 1)


def _render(
    ctx: FileContext, old: cst.CSTNode, new: cst.CSTNode, original: str, first_line: str
) -> str | None:
    """The code for `new` as it must appear in the file. A node rendered on its own lacks the
    indentation of the block around it on continuation lines; find the indentation that turns the
    old node's rendering into the file's text, and apply it to the new one. None if none does."""
    rendered_old = ctx.code(old)
    if rendered_old == original:
        return ctx.code(new)
    newline = ctx.module.default_newline
    whitespace = first_line[: len(first_line) - len(first_line.lstrip())]
    for width in range(len(whitespace), 0, -1):
        indent = whitespace[:width]
        for blank_lines_too in (False, True):
            if _indent(rendered_old, indent, newline, blank_lines_too) == original:
                return _indent(ctx.code(new), indent, newline, blank_lines_too)
    return None


def _indent(code: str, indent: str, newline: str, blank_lines_too: bool) -> str:
    first, *rest = code.split(newline)
    return newline.join([first, *(indent + line if line or blank_lines_too else line for line in rest)])


def _import_line(ctx: FileContext) -> int:
    """Where `import torch` goes: before the first import, else after the docstring and
    `from __future__` imports."""
    body = ctx.module.body
    fallback: cst.BaseStatement | None = None
    for index, statement in enumerate(body):
        small = statement.body[0] if isinstance(statement, cst.SimpleStatementLine) else None
        is_docstring = (
            index == 0 and isinstance(small, cst.Expr) and isinstance(small.value, cst.SimpleString)
        )
        is_future = isinstance(small, cst.ImportFrom) and _is_future(small)
        if isinstance(small, (cst.Import, cst.ImportFrom)) and not is_future:
            return ctx.position(statement).start.line
        if fallback is None and not is_docstring and not is_future:
            fallback = statement
    if fallback is not None:
        return ctx.position(fallback).start.line
    return len(ctx.module.code.splitlines()) + 1


def _is_future(node: cst.ImportFrom) -> bool:
    return isinstance(node.module, cst.Name) and node.module.value == "__future__"
