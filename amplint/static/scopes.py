"""One walk over a module that records what rules and reports look up: the imports, the regions
dataflow runs over (each function body, and the module body), every call, and which top-level
statement each call or product sits in (so a position is computed for that statement only)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import libcst as cst

from amplint.static.imports import import_aliases


@dataclass(frozen=True)
class Scope:
    node: cst.Module | cst.FunctionDef
    body: tuple[cst.BaseStatement, ...]


def suite_body(block: cst.BaseSuite) -> tuple[cst.BaseStatement, ...]:
    """The statements of a block, whether indented or written after the colon."""
    if isinstance(block, cst.IndentedBlock):
        return tuple(block.body)
    if isinstance(block, cst.SimpleStatementSuite):
        return (cst.SimpleStatementLine(body=block.body),)
    return ()


def named_params(function: cst.FunctionDef) -> list[cst.Param]:
    """The parameters a call can name: positional-only, ordinary and keyword-only (not `*args` or
    `**kwargs`)."""
    params = function.params
    return [*params.posonly_params, *params.params, *params.kwonly_params]


@dataclass
class ModuleIndex:
    aliases: dict[str, str] = field(default_factory=dict)
    scopes: list[Scope] = field(default_factory=list)
    function_names: set[str] = field(default_factory=set)
    calls: list[cst.Call] = field(default_factory=list)
    top_of: dict[cst.CSTNode, cst.BaseStatement] = field(default_factory=dict)
    # Every node of the module's statements, not only calls and products: the statement holding it.
    statement_of: dict[cst.CSTNode, cst.BaseStatement] = field(default_factory=dict)


# Fields that hold only formatting (whitespace, commas, parentheses): never worth walking into.
_FORMATTING = re.compile(
    r"^(whitespace.*|.*_whitespace.*|lpar|rpar|comma|dot|semicolon|colon|equal|leading_lines|"
    r"lines_after_decorators|header|footer|newline|trailing_whitespace|operator|star|asynchronous)$"
)
_FIELDS: dict[type, tuple[str, ...]] = {}


def registered_buffer(node: cst.CSTNode, name: str) -> cst.BaseExpression | None:
    """The value of `<module>.register_buffer("name", value, ...)` when `node` is that call."""
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value == "register_buffer"
        and len(node.args) > 1
        and isinstance(node.args[0].value, cst.SimpleString)
        and node.args[0].value.evaluated_value == name
    ):
        return node.args[1].value
    return None


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(
            f.name for f in dataclasses.fields(kind) if not _FORMATTING.match(f.name)
        )
    return names


# What a field value is, by its type: 1 a node, 2 a sequence (of nodes), 0 anything else. libcst's
# node classes are ABCs, and an isinstance() check against an ABC costs a Python-level call: looking
# the type up here instead makes the walk about a third faster.
_VALUE_KINDS: dict[type, int] = {}
_REVERSED_FIELDS: dict[type, tuple[str, ...]] = {}


def _value_kind(kind: type) -> int:
    value = _VALUE_KINDS[kind] = (
        1 if issubclass(kind, cst.CSTNode) else 2 if issubclass(kind, (list, tuple)) else 0
    )
    return value


_EXPRESSIONS: dict[type, bool] = {}


def walk(root: cst.CSTNode, *, expressions: bool = True) -> Iterator[cst.CSTNode]:
    """Every node below `root`, in source order, formatting nodes left out. A plain walk over the
    node fields: libcst's visitor machinery costs five times as much for a read-only traversal.
    Without `expressions`, an expression is the last node of its branch: a walk for statements,
    definitions or assignments (which no expression holds) skips most of the tree."""
    stack: list[cst.CSTNode] = [root]
    kinds = _VALUE_KINDS
    while stack:
        node = stack.pop()
        yield node
        if not expressions:
            leaf = _EXPRESSIONS.get(type(node))
            if leaf is None:
                leaf = _EXPRESSIONS[type(node)] = issubclass(type(node), cst.BaseExpression)
            if leaf:
                continue
        names = _REVERSED_FIELDS.get(type(node))
        if names is None:
            names = _REVERSED_FIELDS[type(node)] = tuple(reversed(_fields(type(node))))
        for name in names:
            value = getattr(node, name)
            kind = kinds.get(type(value))
            if kind is None:
                kind = _value_kind(type(value))
            if kind == 1:
                stack.append(value)
            elif kind == 2:
                for item in reversed(value):
                    item_kind = kinds.get(type(item))
                    if item_kind is None:
                        item_kind = _value_kind(type(item))
                    if item_kind == 1:
                        stack.append(item)


def index_module(module: cst.Module) -> ModuleIndex:
    index = ModuleIndex(scopes=[Scope(module, tuple(module.body))])
    statement_of = index.statement_of
    for top in module.body:
        for node in walk(top):
            statement_of.setdefault(node, top)
            # Exact types (what the parser makes), not isinstance(): see _VALUE_KINDS.
            kind = type(node)
            if kind is cst.Call:
                index.calls.append(cast(cst.Call, node))
                index.top_of[node] = top
            elif kind is cst.BinaryOperation:
                index.top_of[node] = top
            elif kind is cst.FunctionDef:
                function = cast(cst.FunctionDef, node)
                index.scopes.append(Scope(function, suite_body(function.body)))
                index.function_names.add(function.name.value)
            elif kind is cst.Import or kind is cst.ImportFrom:
                index.aliases.update(import_aliases(cast(cst.Import | cst.ImportFrom, node)))
        index.top_of[top] = top
    return index
