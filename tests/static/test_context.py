"""Where a node is and which function holds it, for every node of real files: the shortcuts of
`FileContext` (positions from one statement or one function rendered alone, Python's parse reused
for the statements' lines, one map from node to statement) agree with libcst's position metadata for
the whole module and with the tree's own nesting."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper, PositionProvider

from amplint.source import python_ast
from amplint.static.context import FileContext
from amplint.static.scopes import walk

REAL = sorted((Path(__file__).parent / "data" / "real").glob("*.py"))[:12]


def _innermost(module: cst.Module) -> dict[cst.CSTNode, cst.FunctionDef | cst.Module]:
    """For each node, the innermost function whose body holds it (else the module), by descent."""
    found: dict[cst.CSTNode, cst.FunctionDef | cst.Module] = {}

    def descend(node: cst.CSTNode, scope: cst.FunctionDef | cst.Module) -> None:
        found[node] = scope
        for child in node.children:
            inner = node if isinstance(node, cst.FunctionDef) and child is node.body else scope
            descend(child, inner)

    for top in module.body:
        descend(top, module)
    return found


@pytest.mark.parametrize("path", REAL, ids=lambda path: path.stem)
@pytest.mark.parametrize("given_tree", [True, False], ids=["tree given", "tree parsed"])
def test_every_node_is_where_the_whole_module_says(path: Path, given_tree: bool) -> None:
    text = path.read_text("utf-8")
    module = cst.parse_module(text)
    ctx = FileContext(path, module, text=text, tree=python_ast(text) if given_tree else None)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    innermost = _innermost(module)
    nodes = [node for top in module.body for node in walk(top)]
    assert len(nodes) > 20
    for node in nodes:
        assert ctx.position(node) == whole[node], (path.name, ctx.code(node)[:60])
        assert ctx.scope_of(node) is innermost[node], (path.name, ctx.code(node)[:60])
