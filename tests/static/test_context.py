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


@pytest.mark.parametrize(
    "text",
    [
        # A docstring's lines and a string's own lines stay where they are when the method is
        # rendered alone; the code around them moves with the indentation.
        'class A:\n    def f(self, x):\n        """Doc.\n\n        More.\n        """\n'
        '        y = """a\n    b""".join(x) + g(x)\n        return y\n',
        # A form feed inside a string splits a line for `splitlines`, not for libcst: the lines
        # cannot be paired, and the whole class is rendered.
        'class A:\n    def f(self, x):\n        y = "a\x0cb" + g(x)\n        return y\n',
    ],
    ids=["multi-line strings", "form feed"],
)
def test_a_method_is_placed_from_its_own_rendering(text: str) -> None:
    module = cst.parse_module(text)
    ctx = FileContext(Path("a.py"), module, text=text)
    whole = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    method = next(node for node in walk(module) if isinstance(node, cst.FunctionDef))
    own = ctx._function_positions(method) is not None  # else the fallback to the whole class
    assert own == ("\x0c" not in text)
    for node in walk(method.body):
        assert ctx.position(node) == whole[node], ctx.code(node)
