"""The straight-line regions that dataflow runs over: each function body, and the module body."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst


@dataclass(frozen=True)
class Scope:
    node: cst.Module | cst.FunctionDef
    body: tuple[cst.BaseStatement, ...]


class _FunctionCollector(cst.CSTVisitor):
    def __init__(self) -> None:
        self.functions: list[cst.FunctionDef] = []

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.functions.append(node)
        return True


def suite_body(block: cst.BaseSuite) -> tuple[cst.BaseStatement, ...]:
    """The statements of a block, whether indented or written after the colon."""
    if isinstance(block, cst.IndentedBlock):
        return tuple(block.body)
    if isinstance(block, cst.SimpleStatementSuite):
        return (cst.SimpleStatementLine(body=block.body),)
    return ()


def collect_scopes(module: cst.Module) -> list[Scope]:
    collector = _FunctionCollector()
    module.visit(collector)
    scopes = [Scope(module, tuple(module.body))]
    scopes.extend(Scope(fn, suite_body(fn.body)) for fn in collector.functions)
    return scopes
