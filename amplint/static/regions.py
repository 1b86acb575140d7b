"""The function bodies, and the classes, the libcst pass can skip.

Parsing with libcst costs about ten times what Python's own parser does, and most of a large model
file (configuration handling, output classes, weight initialisation, boilerplate) holds nothing a
rule could flag. Python's parser finds the functions of the module and the methods of its classes;
the body of one whose code (its docstrings and comments aside) holds none of the words marking the
active rules' sites (`Rule.region_words`) is replaced by a `pass` on its first line and blank lines
after it. Every line keeps its number and every kept line its text, so positions in the smaller
module are positions in the file.

What rules read module-wide stays: the imports, class headers and bases, signatures with their
defaults, module constants and every statement outside a class or function. A skipped body must not
change a finding elsewhere either: the bodies that call a function whose body is kept stay, and
those that call them, as deep as the engine follows a parameter (rules judge a parameter by what
every caller passes), and so do the bodies that read a module-level
constant (rules resolve `EPS = 1e-12` where it is used), the bodies that call a submodule built by
a wanted constructor (`self.attend = nn.Softmax(dim=-1)` makes `self.attend(dots)` a softmax) or
spell a wanted name through an import alias, and the `__init__` of each class whose methods, or
whose relatives' methods in the file, stay (attributes get their submodules, numbers and dtypes
there). A class with nothing kept, that no kept body names and whose own statements hold no mark,
goes whole but for its header; a file where nothing is kept or marked is not parsed at all.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from amplint.source import WORD, python_ast

if TYPE_CHECKING:
    from amplint.rule import Rule

_CALLED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")
# One physical line with its line break, as Python's tokenizer counts lines.
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# A comment on a line that holds no string (the `#` of one might be inside it).
_COMMENT = re.compile(r"^([^#'\"\r\n]*)#[^\r\n]*", re.MULTILINE)
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
    """`text` with the function bodies that no rule needs blanked out (see the module docstring);
    "" when no body stays and nothing outside one holds a mark either (no site anywhere: nothing to
    parse); None when no body can go or Python's parser rejects the text (the caller parses it whole
    and reports what is wrong)."""
    if tree is None:
        try:
            tree = python_ast(text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
    lines = _LINE.findall(text)
    bodies = [_Body(function, owner, lines) for function, owner in _functions(tree.body)]
    bodies = [body for body in bodies if body.start is not None]
    statements = list(_statements(tree.body))  # walked once: both of these read every statement
    wanted = (
        words | _constants(tree.body, lines) | _submodules(statements, words) | _aliases(tree.body, words)
    )
    needed = _needed(bodies, wanted, pattern, _families(statements))
    if not bodies and not _marked(_code(lines, 1, tree.body), wanted, pattern):
        return ""
    if len(needed) == len(bodies):
        return None
    for body in bodies:
        if body not in needed:
            body.blank(lines)
    named = frozenset().union(*(body.words for body in needed))
    kept = sorted(body.function.lineno for body in needed)
    for node in _idle_classes(tree.body, kept, named, lines, wanted, pattern):
        _blank(lines, _first_line(node.body[0]) - 1, node.end_lineno or node.lineno)
    if not needed and not _marked(_code(lines, 1, tree.body), wanted, pattern):
        return ""
    return "".join(lines)


def _marked(code: str, wanted: frozenset[str], pattern: re.Pattern[str] | None) -> bool:
    return bool(frozenset(WORD.findall(code)) & wanted) or (
        pattern is not None and pattern.search(code) is not None
    )


def _idle_classes(
    statements: Sequence[ast.stmt],
    kept: Sequence[int],
    named: frozenset[str],
    lines: Sequence[str],
    wanted: frozenset[str],
    pattern: re.Pattern[str] | None,
) -> Iterator[ast.ClassDef]:
    """The module's classes whose bodies go whole: no method of theirs stays (`kept`: the sorted
    lines of the functions that stay), no kept body names them, and their class-level statements hold
    no mark (a configuration class, a model output)."""
    for node in statements:
        if not isinstance(node, ast.ClassDef) or node.name in named:
            continue
        start, end = _first_line(node.body[0]), node.end_lineno or node.lineno
        if start == node.lineno or bisect.bisect_right(kept, end) > bisect.bisect_left(kept, start):
            continue  # `class A: pass` on one line; a method of its own that stays
        if not _marked(_code(lines[start - 1 : end], start, node.body), wanted, pattern):
            yield node


def _functions(
    statements: Sequence[ast.stmt], owner: str | None = None
) -> Iterator[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str | None]]:
    """The functions of the module and the methods of its classes (nested classes too), each with
    the name of the class it belongs to."""
    for statement in statements:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield statement, owner
        elif isinstance(statement, ast.ClassDef):
            yield from _functions(statement.body, statement.name)


def _families(statements: Sequence[ast.stmt]) -> dict[str, frozenset[str]]:
    """Each class among `statements` (every statement of the module) with the classes of the module
    it is joined to by inheritance, either way and through other classes (a base's method reads what
    a subclass's `__init__` sets). Bases from elsewhere join nothing: every `nn.Module` would be one
    family."""
    classes = [node for node in statements if isinstance(node, ast.ClassDef)]
    joined: dict[str, set[str]] = {node.name: set() for node in classes}
    for node in classes:
        for name in {called_name(base) for base in node.bases} & joined.keys():
            joined[node.name].add(name)
            joined[name].add(node.name)
    families: dict[str, frozenset[str]] = {}
    for start in joined:
        if start in families:
            continue
        family, frontier = {start}, [start]
        while frontier:
            for other in joined[frontier.pop()] - family:
                family.add(other)
                frontier.append(other)
        for name in family:
            families[name] = frozenset(family)
    return families


class _Body:
    """The lines of one function's body, and the words in the function."""

    def __init__(
        self, function: ast.FunctionDef | ast.AsyncFunctionDef, owner: str | None, lines: Sequence[str]
    ) -> None:
        first: ast.stmt | ast.expr = function.body[0]
        first = min([first, *getattr(first, "decorator_list", [])], key=lambda node: node.lineno)
        self.function, self.name, self.owner = function, function.name, owner
        self.start: int | None = first.lineno - 1
        self.end = function.end_lineno or first.lineno
        before = lines[first.lineno - 1][: first.col_offset]
        if before.strip(" \t") not in {"", "@"}:  # `def f(): return x`: the body shares the header's line
            self.start = None
            return
        # The signature counts: a default (`value=-1e9`) is read where the body uses the name.
        self.text = _code(lines[function.lineno - 1 : self.end], function.lineno, function.body)
        # Its own name counts only where the function names itself again (`super().forward(x)`, a
        # recursion), not in its `def`: every `forward` would otherwise name and call every other one.
        words, calls = WORD.findall(self.text), _CALLED.findall(self.text)
        self.words = frozenset(words) - ({self.name} if words.count(self.name) == 1 else set())
        self.calls = frozenset(calls) - ({self.name} if calls.count(self.name) == 1 else set())
        # `super().__init__()` calls a base's constructor: `_constructors` says which ones stay.
        self.calls -= {"__init__"}

    def blank(self, lines: list[str]) -> None:
        assert self.start is not None
        _blank(lines, self.start, self.end)


def _first_line(statement: ast.stmt) -> int:
    """Where a statement starts, its decorators included."""
    return min([statement.lineno, *(node.lineno for node in getattr(statement, "decorator_list", []))])


def _blank(lines: list[str], start: int, end: int) -> None:
    """`pass` on line `start` (0-based) at its indentation, and only the line breaks of the lines up
    to `end`, so lines stay where they were."""
    first = lines[start]
    indent = first[: len(first) - len(first.lstrip(" \t"))]
    for number in range(start, end):
        line = lines[number]
        ending = line[len(line.rstrip("\r\n")) :]
        lines[number] = (indent + "pass" if number == start else "") + ending


def _code(lines: Sequence[str], first: int, body: Sequence[ast.stmt]) -> str:
    """`lines` (the first being line `first`) without the docstrings among `body` and the comments
    on lines that hold no string: no rule reads them, and a usage example (`>>>
    model.from_pretrained(...)`) or a note on `1e-5` marks nothing."""
    kept = list(lines)
    for statement in body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            for number in range(statement.lineno, (statement.end_lineno or statement.lineno) + 1):
                kept[number - first] = "\n"
    return _COMMENT.sub(r"\1", "".join(kept))


def _needed(
    bodies: list[_Body],
    wanted: frozenset[str],
    pattern: re.Pattern[str] | None,
    families: dict[str, frozenset[str]],
) -> set[_Body]:
    """The bodies holding a wanted word or the pattern; the bodies that call or name one of their
    functions (`helper(...)`, `self._norm(...)`: a parameter holds what every caller passes); the
    `__init__` of the classes these read (`_constructors`); and the bodies of the functions all of
    these call, and of those they call in turn (the dtype-facts engine reads a helper's return
    value, such as scores built in `self._scores(q, k)`)."""
    needed = {
        body for body in bodies if body.words & wanted or (pattern is not None and pattern.search(body.text))
    }
    # A body that names one (`interface = get_interface(impl, eager_attention_forward)`) calls it
    # too; `super().__init__()` names a base's constructor, not the kept one.
    # Their callers' callers too, as deep as the engine follows a parameter to what is passed.
    callers = needed
    for _ in range(_CALL_DEPTH):
        names = {body.name for body in callers} - {"__init__"}
        callers = {body for body in bodies if body.words & names} - needed
        if not callers:
            break
        needed |= callers
    by_name: dict[str, list[_Body]] = {}
    for body in bodies:
        by_name.setdefault(body.name, []).append(body)
    frontier = set(needed)
    while frontier:
        for _ in range(_CALL_DEPTH):
            called = {callee for body in frontier for name in body.calls for callee in by_name.get(name, ())}
            frontier = called - needed
            if not frontier:
                break
            needed |= frontier
        frontier = _constructors(bodies, needed, families) - needed
        needed |= frontier
    return needed


def _constructors(bodies: list[_Body], needed: set[_Body], families: dict[str, frozenset[str]]) -> set[_Body]:
    """The `__init__` bodies that what stays reads, where attributes get their submodules, numbers
    and dtypes: those of a class whose family has a kept method, or that a kept function other than
    an `__init__` names (`block = Block(dim)`, then `block.eps`). An `__init__` naming a class
    (`self.layer = Layer(config)`) keeps nothing: a method of `Layer` that stays keeps it."""
    live: set[str] = set()
    for body in needed:
        if body.name != "__init__":
            if body.owner is not None:
                live.add(body.owner)
            live |= body.words & families.keys()
    live = {member for name in live for member in families.get(name, {name})}
    return {body for body in bodies if body.name == "__init__" and body.owner in live}


def _submodules(statements: Sequence[ast.stmt], words: frozenset[str]) -> frozenset[str]:
    """Attributes assigned a module whose constructor is a wanted word (`self.attend =
    nn.Softmax(dim=-1)`), among `statements` (every statement of the module): a body that calls
    `self.attend(dots)` is a softmax's body."""
    return frozenset(
        target.attr
        for node in statements
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
        for target in node.targets
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
        and called_name(node.value.func) in words
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


def called_name(func: ast.expr) -> str:
    """`Softmax` for `nn.Softmax` and `Softmax`."""
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _aliases(body: Sequence[ast.stmt], words: frozenset[str]) -> frozenset[str]:
    """Names a module-level import binds to a wanted word (`from torch.distributions import
    Categorical as Cat`): a body spells the site with the alias."""
    return frozenset(
        alias.asname
        for statement in body
        if isinstance(statement, (ast.Import, ast.ImportFrom))
        for alias in statement.names
        if alias.asname is not None and words & frozenset(alias.name.split("."))
    )


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
