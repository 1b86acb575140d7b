"""One walk over a module that records what rules and reports look up: the imports, the regions
dataflow runs over (each function body, and the module body), every call, and which top-level
statement each call or product sits in (so a position is computed for that statement only)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from amplint.imports import import_aliases


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


@dataclass
class ModuleIndex:
    aliases: dict[str, str] = field(default_factory=dict)
    scopes: list[Scope] = field(default_factory=list)
    function_names: set[str] = field(default_factory=set)
    calls: list[cst.Call] = field(default_factory=list)
    top_of: dict[cst.CSTNode, cst.BaseStatement] = field(default_factory=dict)


# Fields that hold only formatting (whitespace, commas, parentheses): never worth walking into.
_FORMATTING = re.compile(
    r"^(whitespace.*|.*_whitespace.*|lpar|rpar|comma|dot|semicolon|colon|equal|leading_lines|"
    r"lines_after_decorators|header|footer|newline|trailing_whitespace|operator|star|asynchronous)$"
)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(
            f.name for f in dataclasses.fields(kind) if not _FORMATTING.match(f.name)
        )
    return names


def walk(root: cst.CSTNode) -> Iterator[cst.CSTNode]:
    """Every node below `root`, in source order, formatting nodes left out. A plain walk over the
    node fields: libcst's visitor machinery costs five times as much for a read-only traversal."""
    stack: list[cst.CSTNode] = [root]
    while stack:
        node = stack.pop()
        yield node
        for name in reversed(_fields(type(node))):
            value = getattr(node, name)
            if isinstance(value, cst.CSTNode):
                stack.append(value)
            elif isinstance(value, (list, tuple)):
                stack.extend(item for item in reversed(value) if isinstance(item, cst.CSTNode))


def index_module(module: cst.Module) -> ModuleIndex:
    index = ModuleIndex(scopes=[Scope(module, tuple(module.body))])
    for top in module.body:
        for node in walk(top):
            if isinstance(node, cst.Call):
                index.calls.append(node)
                index.top_of[node] = top
            elif isinstance(node, cst.BinaryOperation):
                index.top_of[node] = top
            elif isinstance(node, cst.FunctionDef):
                index.scopes.append(Scope(node, suite_body(node.body)))
                index.function_names.add(node.name.value)
            elif isinstance(node, (cst.Import, cst.ImportFrom)):
                index.aliases.update(import_aliases(node))
        index.top_of[top] = top
    return index
