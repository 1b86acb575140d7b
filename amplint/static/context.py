"""What a rule sees of one file, and what it hands back."""

from __future__ import annotations

import ast
import bisect
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from amplint.source import NEWLINE, WORD, LineIndex, SourceError, decode_source, python_ast, read_bytes
from amplint.static.cst_compat import node_positions, parse_module
from amplint.static.dtypes import DtypeFacts
from amplint.static.facts import Step
from amplint.static.imports import ImportMap
from amplint.static.profile import CALLER, Profile
from amplint.static.scopes import ModuleIndex, Scope, index_module, walk


@dataclass(frozen=True)
class FixPlan:
    """A fix as rules express it: replace nodes; `needs_torch_import` adds `import torch`."""

    description: str
    replacements: tuple[tuple[cst.CSTNode, cst.CSTNode], ...]
    needs_torch_import: bool = False
    applicability: str | None = None  # None: the rule's `fix_applicability`
    # The nodes of other findings that the replacements fix too (`Fix.covers`), left as they stand.
    covers: tuple[cst.CSTNode, ...] = ()


@dataclass(frozen=True)
class Finding:
    node: cst.CSTNode
    message: str
    fix: FixPlan | None = None
    help: str | None = None
    extra: Mapping[str, object] = field(default_factory=dict)
    # Why the value has its dtype there (from the dtype-facts engine): related locations in reports.
    evidence: tuple[Step, ...] = ()
    # Its half dtype is only the caller's choice (`Fact.caller`; the message says so with
    # `CALLER_CLAUSE`): conditional where no execution mode or configured precision reaches it.
    caller_only: bool = False

    @property
    def side_only(self) -> bool:
        """Its evidence names execution modes that the project's tests, benchmarks or examples alone
        set (`Step.side`, marked where the engine writes the step)."""
        return any(step.side for step in self.evidence)


class FileContext:
    def __init__(
        self,
        path: Path,
        module: cst.Module,
        words: frozenset[str] = frozenset(),
        text: str | None = None,
        *,
        profile: Profile = CALLER,
        tree: ast.Module | None = None,
    ) -> None:
        self.path = path
        self.module = module
        self.profile = profile  # the half dtypes the project may run in (amplint.static.profile)
        self.words = words  # every identifier-like word of the file's text
        self.text = text  # the text `module` was parsed from, when known
        # Python's parse of a text whose top-level statements start on the lines of `text`'s (the
        # file's, of which `text` blanks some bodies): `_line_offsets` need not parse it again.
        self.tree = tree
        self.memo: dict[str, object] = {}  # per-file results that several rules share
        self._position_cache: dict[cst.CSTNode, tuple[int, Mapping[cst.CSTNode, CodeRange]]] = {}
        self._function_of_cache: dict[cst.CSTNode, dict[cst.CSTNode, cst.FunctionDef]] = {}
        # Per function: its nodes' positions rendered alone, the lines to shift them by, and the
        # columns to shift each rendered line by.
        self._function_position_cache: dict[
            cst.FunctionDef, tuple[Mapping[cst.CSTNode, CodeRange], int, list[int]] | None
        ] = {}

    @cached_property
    def index(self) -> ModuleIndex:
        return index_module(self.module)

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap(self.index.aliases)

    def in_code(self, words: frozenset[str]) -> bool:
        """Whether the file's code, not only a comment or docstring, names one of `words`."""
        return not self.words.isdisjoint(words) and not self.code_words.isdisjoint(words)

    @cached_property
    def code_words(self) -> frozenset[str]:
        """The words of the file's code (names, attributes, keywords, imports, strings), not of its
        comments or docstrings: a comment that names a GradScaler puts none in scope. The file's
        words where Python's tree of the whole file is not at hand."""
        if self.tree is None:
            return self.words
        docstrings: set[int] = set()  # a statement is walked before the string it holds
        found: set[str] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                docstrings.add(id(node.value))
            elif isinstance(node, ast.Name):
                found.add(node.id)
            elif isinstance(node, ast.Attribute):
                found.add(node.attr)
            elif isinstance(node, (ast.keyword, ast.arg)) and node.arg:
                found.add(node.arg)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                found.add(node.name)
            elif isinstance(node, ast.alias):
                found.update(WORD.findall(f"{node.name} {node.asname or ''}"))
            elif (
                isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            ):
                found.update(WORD.findall(node.value))
        return frozenset(found)

    @property
    def scopes(self) -> list[Scope]:
        return self.index.scopes

    def position(self, node: cst.CSTNode) -> CodeRange:
        """Where a node is. Position metadata for a whole module costs several times its parse, so
        it is computed for the one top-level statement that holds the node, and shifted."""
        top = self.index.top_of.get(node)
        if top is None:
            top = self.index.statement_of.get(node)
            if top is None:  # not a node of the module's statements
                return self._module_positions[node]
        # Narrower still: the innermost function around the node, where Python's parser says it is.
        function = self._functions_in(top).get(node)
        if function is not None:
            in_function = self._function_positions(function)
            if in_function is not None and node in in_function[0]:
                alone, lines, columns = in_function
                where = alone[node]
                return CodeRange(
                    CodePosition(where.start.line + lines, where.start.column + columns[where.start.line]),
                    CodePosition(where.end.line + lines, where.end.column + columns[where.end.line]),
                )
        offset, positions = self._statement_positions(top)
        where = positions[node]
        return CodeRange(
            CodePosition(where.start.line + offset, where.start.column),
            CodePosition(where.end.line + offset, where.end.column),
        )

    @cached_property
    def _module_positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        return node_positions(self.module, self.module)[0]

    @cached_property
    def _line_offsets(self) -> dict[cst.CSTNode, int]:
        """For each top-level statement, the number of lines before it (its leading comments included).
        Python's own parser finds where each statement starts at a fraction of what rendering every
        statement back to text costs; the rendering is the fallback."""
        if self.text is not None:
            from_python = _offsets_from_ast(self.module, self.text, self.tree)
            if from_python is not None:
                return from_python
        offsets: dict[cst.CSTNode, int] = {}
        lines = len(self.module.header)  # one EmptyLine per line
        for statement in self.module.body:
            offsets[statement] = lines
            lines += len(NEWLINE.findall(self.module.code_for_node(statement)))
        return offsets

    @cached_property
    def _def_lines(self) -> tuple[LineIndex, dict[cst.FunctionDef, tuple[int, str]]] | None:
        """The line of each function's `def` and its indentation, from a scan of the text for lines
        that look like one, matched by name in source order. A look-alike in a string can make a match
        wrong: `_function_positions` checks every one against the text."""
        if self.text is None:
            return None
        functions = [scope.node for scope in self.index.scopes if isinstance(scope.node, cst.FunctionDef)]
        lines = LineIndex(self.text)
        located: dict[cst.FunctionDef, tuple[int, str]] = {}
        candidates = [
            (match.group(2), match.start(), match.group(1)) for match in _DEF_LINE.finditer(self.text)
        ]
        at = 0
        for function in functions:
            name = function.name.value
            while at < len(candidates) and candidates[at][0] != name:
                at += 1
            if at == len(candidates):
                break
            _, offset, indent = candidates[at]
            located[function] = (bisect.bisect_right(lines.starts, offset), indent)
            at += 1
        return lines, located

    def scope_of(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module | None:
        """The innermost function whose body holds `node`, else the module; None for a node that is
        not in the module's statements."""
        top = self.index.top_of.get(node)
        if top is None:
            top = self.index.statement_of.get(node)
            if top is None:
                return None
        return self._functions_in(top).get(node) or self.module

    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        """The innermost function whose body holds `node`, a call or a binary operation; None at
        module level (and for other kinds of node, which the index does not place)."""
        top = self.index.top_of.get(node)
        return None if top is None else self._functions_in(top).get(node)

    def _functions_in(self, top: cst.BaseStatement) -> dict[cst.CSTNode, cst.FunctionDef]:
        """For each node in a top-level statement, the innermost function that holds it."""
        found = self._function_of_cache.get(top)
        if found is None:
            found = self._function_of_cache[top] = {}
            # Outer functions first (the walk's order), so inner ones overwrite what they hold.
            for function in [n for n in walk(top, expressions=False) if isinstance(n, cst.FunctionDef)]:
                for node in walk(function.body):
                    found[node] = function
        return found

    def _function_positions(
        self, function: cst.FunctionDef
    ) -> tuple[Mapping[cst.CSTNode, CodeRange], int, list[int]] | None:
        """Positions of the nodes in one function, rendered alone and shifted to the line of its
        `def`, each rendered line by its own column shift: the indentation where the file's line is
        the rendered one indented, none where it is the rendered one as it stands (a multi-line
        string's own lines do not move with the indentation). None where some line is neither (the
        caller falls back to the whole statement)."""
        if function in self._function_position_cache:
            return self._function_position_cache[function]
        positions: tuple[Mapping[cst.CSTNode, CodeRange], int, list[int]] | None = None
        layout = self._def_lines
        where = layout[1].get(function) if layout is not None else None
        if layout is not None and where is not None:
            lines = layout[0]
            def_line, indent = where
            # The lines the function renders before its `def`: comments, decorators and what lies
            # between them.
            before = len(function.leading_lines) + len(function.lines_after_decorators)
            before += sum(len(NEWLINE.findall(self.code(d))) for d in function.decorators)
            start = def_line - before
            alone, code = node_positions(function, self.module)
            rendered = code.splitlines()
            begin = lines.offset(start, 1) if start >= 1 else -1
            # At most the rendered text with the indentation and a two-character newline per line.
            span = len(code) + (len(indent) + 2) * len(rendered)
            original = (
                (self.text or "")[begin : begin + span].splitlines()[: len(rendered)] if begin >= 0 else []
            )
            if len(original) == len(rendered):
                columns = [0, *(_shift(a, b, indent) for a, b in zip(original, rendered, strict=True))]
                # Lines as `splitlines` counts them are libcst's lines unless the code holds a line
                # break of another kind (a form feed): then the shift must be the same on every line.
                uniform = len(rendered) != len(NEWLINE.findall(code)) + (not code.endswith(("\n", "\r")))
                if -1 not in columns and not (uniform and set(columns[1:]) - {len(indent)}):
                    columns.append(len(indent))  # the line after the last: where the function ends
                    positions = (alone, start - 1, columns)
        self._function_position_cache[function] = positions
        return positions

    def _statement_positions(
        self, statement: cst.BaseStatement
    ) -> tuple[int, Mapping[cst.CSTNode, CodeRange]]:
        cached = self._position_cache.get(statement)
        if cached is None:
            positions = node_positions(statement, self.module)[0]
            cached = self._position_cache[statement] = (self._line_offsets[statement], positions)
        return cached

    @cached_property
    def facts(self) -> DtypeFacts:
        """The dtype facts of this file's expressions (computed per function, on demand)."""
        return DtypeFacts(self)

    def release(self) -> None:
        """Let go of the dtype facts, which refer back to this context: once the rules are done,
        the file's tree is freed as soon as nothing else holds it, not at the garbage collector's
        next pass over older objects."""
        vars(self).pop("facts", None)
        self.memo.clear()

    def qualified(self, node: cst.BaseExpression) -> str | None:
        return self.imports.qualified(node)

    def elsewhere(self, display: str, digest: str) -> FileContext | None:
        """Another file of the project (by its display path), parsed, for its own dtype facts: read
        with the caller's profile, so that no further file is read from it. None when it is not a
        readable Python file, no longer has the bytes the project-wide pass read (`digest`), or does
        not parse."""
        key = (display, digest)
        if key not in _ELSEWHERE:
            if len(_ELSEWHERE) >= _ELSEWHERE_KEPT:
                del _ELSEWHERE[next(iter(_ELSEWHERE))]
            _ELSEWHERE[key] = _parsed(Path(display), digest)
        return _ELSEWHERE[key]

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def torch_name(self) -> tuple[cst.BaseExpression, bool]:
        """An expression for the `torch` module, and whether `import torch` must be added."""
        alias = self.imports.alias_for("torch")
        return cst.Name(alias or "torch"), alias is None

    def float32(self) -> tuple[cst.BaseExpression, bool]:
        torch, missing = self.torch_name()
        return cst.Attribute(value=torch, attr=cst.Name("float32")), missing


# The other files read last (a sampler's callers are read once for all its parameters).
_ELSEWHERE: dict[tuple[str, str], FileContext | None] = {}
_ELSEWHERE_KEPT = 8
_ELSEWHERE_LIMIT = 4 << 20  # a caller's file larger than this is not read (its calls stay unknown)


def _parsed(path: Path, digest: str) -> FileContext | None:
    if path.suffix != ".py":
        return None
    try:
        raw = read_bytes(path, _ELSEWHERE_LIMIT)
        if f"{zlib.crc32(raw):08x}" != digest:
            return None
        module = parse_module(decode_source(raw, path).text)
    except (SourceError, cst.ParserSyntaxError, RecursionError):
        return None
    return FileContext(path, module)


def _shift(mine: str, rendered: str, indent: str) -> int:
    """How many columns a rendered line moves by in the file's line `mine`: the indentation, none
    for a line that stands as it is (within a multi-line string), or -1 when it is neither."""
    if mine == f"{indent}{rendered}" if rendered.strip() else not mine.strip():
        return len(indent)
    return 0 if mine == rendered else -1


def scopes_holding(ctx: FileContext, nodes: Iterable[cst.CSTNode]) -> list[Scope]:
    """The scopes (function bodies, or the module body) whose own statements hold any of `nodes`
    (calls or binary operations), in module order: a rule whose candidates are rare runs its
    dataflow there only, not over every function of the file."""
    found: set[cst.CSTNode] = set()
    for node in nodes:
        if node in ctx.index.top_of:
            function = ctx.function_of(node)
            found.add(function if function is not None else ctx.module)
    return [scope for scope in ctx.scopes if scope.node in found]


# A line that starts a function definition (or a look-alike inside a string: checked later).
_DEF_LINE = re.compile(r"^([ \t]*)(?:async[ \t]+)?def[ \t]+([^\W\d]\w*)", re.MULTILINE)


def _offsets_from_ast(
    module: cst.Module, text: str, tree: ast.Module | None = None
) -> dict[cst.CSTNode, int] | None:
    """`FileContext._line_offsets` from the line numbers of Python's own parser; None when it rejects
    the text (syntax newer than the running Python) or its statements do not line up with libcst's.
    `tree`: that parse, when the caller has it."""
    if tree is None:
        try:
            tree = python_ast(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    starts: list[int] = []
    for statement in tree.body:
        decorators: list[ast.expr] = getattr(statement, "decorator_list", None) or []
        starts.append(min([statement.lineno, *(d.lineno for d in decorators)]))
    offsets: dict[cst.CSTNode, int] = {}
    index = 0
    for top in module.body:
        if index >= len(starts):
            return None
        # `a = 1; b = 2` is one libcst statement line and two statements for Python.
        offsets[top] = starts[index] - 1 - len(top.leading_lines)
        index += len(top.body) if isinstance(top, cst.SimpleStatementLine) else 1
    return offsets if index == len(starts) else None
