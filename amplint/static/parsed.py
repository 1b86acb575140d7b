"""What the engine and the pattern helpers read of a parsed file. `FileContext` is one; naming it
through this protocol keeps them below the context, which builds the engine."""

from __future__ import annotations

from typing import Protocol

import libcst as cst
from libcst.metadata import CodeRange

from amplint.static.imports import ImportMap
from amplint.static.profile import Profile
from amplint.static.scopes import ModuleIndex


class ParsedFile(Protocol):
    module: cst.Module
    profile: Profile

    @property
    def index(self) -> ModuleIndex: ...

    @property
    def imports(self) -> ImportMap: ...

    def qualified(self, node: cst.BaseExpression) -> str | None: ...

    def function_of(self, node: cst.CSTNode) -> cst.FunctionDef | None: ...

    def scope_of(self, node: cst.CSTNode) -> cst.FunctionDef | cst.Module | None: ...

    def code(self, node: cst.CSTNode) -> str: ...

    def position(self, node: cst.CSTNode) -> CodeRange: ...

    def elsewhere(self, display: str, digest: str) -> ParsedFile | None: ...
