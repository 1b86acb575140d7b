"""What a rule sees of one file, and what it hands back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from amplint.imports import ImportMap
from amplint.scopes import Scope, collect_scopes


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

    @cached_property
    def imports(self) -> ImportMap:
        return ImportMap(self.module)

    @cached_property
    def scopes(self) -> list[Scope]:
        return collect_scopes(self.module)

    @cached_property
    def positions(self) -> Mapping[cst.CSTNode, CodeRange]:
        # Resolved only when something is reported: most files have no findings.
        wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
        return wrapper.resolve(PositionProvider)

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
