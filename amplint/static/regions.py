"""The function bodies the libcst pass can skip.

Parsing with libcst costs about ten times what Python's own parser does, and most of a large model
file (configuration handling, output classes, weight initialisation, boilerplate) holds nothing a
rule could flag. Python's parser finds the functions of the module and the methods of its classes;
the body of one that holds none of the words marking the active rules' sites (`Rule.region_words`)
is replaced by a `pass` on its first line and blank lines after it. Every line keeps its number and
every kept line its text, so positions in the smaller module are positions in the file.

Only bodies go: class headers, base classes, signatures with their defaults, class attributes and
every statement outside a function stay, so what rules read module-wide (the imports, which classes
are modules, the names of the module's functions, parameter defaults, module constants) is what the
whole file says. A skipped body must not change a finding elsewhere either: the bodies that call a
function whose body is kept stay (rules judge a parameter by what every caller passes), and so do
the bodies that read a module-level constant (rules resolve `EPS = 1e-12` where it is used), and
the bodies that call a submodule built by a wanted constructor (`self.attend = nn.Softmax(dim=-1)`
makes `self.attend(dots)` a softmax).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from amplint.source import WORD, python_ast

if TYPE_CHECKING:
    from amplint.rule import Rule

_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
# One physical line with its line break, as Python's tokenizer counts lines.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# A module-level binding that may hold a number a rule resolves where it is used.
_NUMERIC = re.compile(r"\d|inf|finfo|eps|tiny", re.IGNORECASE)
# How deep the engine follows calls of the file's own functions (`amplint.static.engine.calls`).
_CALL_DEPTH = 3


def region_marks(rules: Iterable[type[Rule]]) -> tuple[frozenset[str], re.Pattern[str] | None] | None:
    """The words, and the pattern, that mark a body some active rule needs; None when a rule reads
    every body."""
    words: set[str] = set()
    patterns: list[str] = []
    for rule in rules:
        if rule.region_words is None:
            return None
        words |= rule.region_words
        if rule.region_pattern is not None:
            patterns.append(rule.region_pattern.pattern)
    return frozenset(words), re.compile("|".join(patterns)) if patterns else None


def skip_bodies(
    text: str,
    words: frozenset[str],
    pattern: re.Pattern[str] | None = None,
    *,
    tree: ast.Module | None = None,
) -> str | None:
    """`text` with the function bodies that no rule needs blanked out (see the module docstring), or
    None when none can be or Python's parser rejects the text (the caller parses it whole and
    reports what is wrong)."""
    if tree is None:
        try:
            tree = python_ast(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    lines = _LINE.findall(text)
    bodies = [_Body(function, lines) for function in _functions(tree.body)]
    bodies = [body for body in bodies if body.start is not None]
    if not bodies:
        return None
    wanted = words | _constants(tree.body, lines) | _submodules(tree, words)
    needed = _needed(bodies, wanted, pattern)
    if len(needed) == len(bodies):
        return None
    for body in bodies:
        if body not in needed:
            body.blank(lines)
    return "".join(lines)


def _functions(statements: Sequence[ast.stmt]) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions of the module and the methods of its classes (nested classes too)."""
    for statement in statements:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield statement
        elif isinstance(statement, ast.ClassDef):
            yield from _functions(statement.body)


class _Body:
    """The lines of one function's body, and the words in the function."""

    def __init__(self, function: ast.FunctionDef | ast.AsyncFunctionDef, lines: Sequence[str]) -> None:
        first: ast.stmt | ast.expr = function.body[0]
        first = min([first, *getattr(first, "decorator_list", [])], key=lambda node: node.lineno)
        self.name = function.name
        self.start: int | None = first.lineno - 1
        self.end = function.end_lineno or first.lineno
        before = lines[first.lineno - 1][: first.col_offset]
        if before.strip(" \t") not in {"", "@"}:  # `def f(): return x`: the body shares the header's line
            self.start = None
            return
        self.indent = before[: len(before) - len(before.lstrip(" \t"))]
        # The signature counts: a default (`value=-1e9`) is read where the body uses the name.
        self.text = "".join(lines[function.lineno - 1 : self.end])
        # Its own name counts only where the function names itself again (`super().forward(x)`, a
        # recursion), not in its `def`: every `forward` would otherwise name and call every other one.
        words, calls = WORD.findall(self.text), _CALLED.findall(self.text)
        self.words = frozenset(words) - ({self.name} if words.count(self.name) == 1 else set())
        self.calls = frozenset(calls) - ({self.name} if calls.count(self.name) == 1 else set())

    def blank(self, lines: list[str]) -> None:
        """`pass` where the body started and its line breaks after that, so lines stay where they were."""
        assert self.start is not None
        for number in range(self.start, self.end):
            line = lines[number]
            ending = line[len(line.rstrip("\r\n")) :]
            lines[number] = (self.indent + "pass" if number == self.start else "") + ending


def _needed(bodies: list[_Body], wanted: frozenset[str], pattern: re.Pattern[str] | None) -> set[_Body]:
    """The bodies holding a wanted word or the pattern; the bodies that call or name one of their
    functions (`helper(...)`, `self._norm(...)`: a parameter holds what every caller passes); the
    bodies of the functions they call, and of those they call in turn (the dtype-facts engine reads a
    helper's return value, such as scores built in `self._scores(q, k)`); and every `__init__`
    (where `self` attributes get their submodules, parameters and numbers)."""
    needed = {
        body for body in bodies if body.words & wanted or (pattern is not None and pattern.search(body.text))
    }
    names = {body.name for body in needed}
    # A body that names one (`interface = get_interface(impl, eager_attention_forward)`) calls it too.
    needed |= {body for body in bodies if body.words & names or body.name == "__init__"}
    by_name: dict[str, list[_Body]] = {}
    for body in bodies:
        by_name.setdefault(body.name, []).append(body)
    frontier = set(needed)
    for _ in range(_CALL_DEPTH):
        called = {callee for body in frontier for name in body.calls for callee in by_name.get(name, ())}
        frontier = called - needed
        if not frontier:
            break
        needed |= frontier
    return needed


def _submodules(tree: ast.Module, words: frozenset[str]) -> frozenset[str]:
    """Attributes assigned a module whose constructor is a wanted word (`self.attend =
    nn.Softmax(dim=-1)`): a body that calls `self.attend(dots)` is a softmax's body."""
    return frozenset(
        target.attr
        for node in _statements(tree.body)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for target in node.targets
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and _called_name(node.value.func) in words
    )


def _statements(body: Sequence[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement in `body` and in the blocks of its statements (an assignment is never inside
    an expression: `ast.walk` would visit every expression node as well)."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.stmt):
            yield node
        for name in ("finalbody", "orelse", "handlers", "cases", "body"):
            block = getattr(node, name, None)
            if isinstance(block, list):
                stack.extend(reversed(block))


def _called_name(func: ast.expr) -> str:
    """`Softmax` for `nn.Softmax` and `Softmax`."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _constants(body: Sequence[ast.stmt], lines: Sequence[str]) -> frozenset[str]:
    """Names bound at module level to what may be a number: `EPS = 1e-12`, `NEG_INF = -1e9`,
    `MASK = float("-inf")`, `MIN = torch.finfo(torch.float16).min`."""
    names: set[str] = set()
    for statement in body:
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets = [statement.target]
        else:
            continue
        text = "".join(lines[statement.lineno - 1 : statement.end_lineno or statement.lineno])
        if _NUMERIC.search(text):
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return frozenset(names)
