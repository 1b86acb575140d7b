"""What a rule sees of one file, and what it hands back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import libcst as cst
from libcst.metadata import CodePosition, CodeRange, MetadataWrapper, PositionProvider

from amplint.imports import ImportMap
from amplint.scopes import ModuleIndex, Scope, index_module
from amplint.source import NEWLINE


@dataclass(frozen=True)
class FixPlan:
    """A fix as rules express it: replace nodes; `needs_torch_import` adds `import torch`."""

    description: str
    replacements: tuple[tuple[cst.CSTNode, cst.CSTNode], ...]
    needs_torch_import: bool = False


@dataclass(frozen=True)
class Finding:
    node: cst.CSTNode
    message: str
    fix: FixPlan | None = None
    help: str | None = None
    extra: Mapping[str, object] = field(default_factory=dict)


class FileContext:
    def __init__(self, path: Path, module: cst.Module) -> None:
        self.path = path
        self.module = module
        self._position_cache: dict[cst.CSTNode, tuple[int, Mapping[cst.CSTNode, CodeRange]]] = {}

    @cached_property
    def index(self) -> ModuleIndex:
        return index_module(self.module)

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap(self.index.aliases)

    @property
    def scopes(self) -> list[Scope]:
        return self.index.scopes

    def position(self, node: cst.CSTNode) -> CodeRange:
        """Where a node is. Position metadata for a whole module costs several times its parse, so
        it is computed for the one top-level statement that holds the node, and shifted."""
        top = self.index.top_of.get(node)
        if top is None:
            return self._module_positions[node]
        offset, positions = self._statement_positions(top)
        where = positions[node]
        return CodeRange(
            CodePosition(where.start.line + offset, where.start.column),
            CodePosition(where.end.line + offset, where.end.column),
        )

    @cached_property
    def _module_positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        return MetadataWrapper(self.module, unsafe_skip_copy=True).resolve(PositionProvider)

    @cached_property
    def _line_offsets(self) -> dict[cst.CSTNode, int]:
        """For each top-level statement, the number of lines before it (its leading comments included)."""
        offsets: dict[cst.CSTNode, int] = {}
        lines = len(self.module.header)  # one EmptyLine per line
        for statement in self.module.body:
            offsets[statement] = lines
            lines += len(NEWLINE.findall(self.module.code_for_node(statement)))
        return offsets

    def _statement_positions(
        self, statement: cst.BaseStatement
    ) -> tuple[int, Mapping[cst.CSTNode, CodeRange]]:
        cached = self._position_cache.get(statement)
        if cached is None:
            alone = self.module.with_changes(body=[statement], header=[], footer=[])
            positions = MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider)
            cached = self._position_cache[statement] = (self._line_offsets[statement], positions)
        return cached

    def qualified(self, node: cst.BaseExpression) -> str | None:
        return self.imports.qualified(node)

    def code(self, node: cst.CSTNode) -> str:
        return self.module.code_for_node(node)

    def torch_name(self) -> tuple[cst.BaseExpression, bool]:
        """An expression for the `torch` module, and whether `import torch` must be added."""
        alias = self.imports.alias_for("torch")
        return cst.Name(alias or "torch"), alias is None

    def float32(self) -> tuple[cst.BaseExpression, bool]:
        torch, missing = self.torch_name()
        return cst.Attribute(value=torch, attr=cst.Name("float32")), missing
