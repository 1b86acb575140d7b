"""Where an upcast value is cast back: the places a fix hands its result to code that expects the
dtype it had before, and the cases where that cannot be proven (the fix then stays unsafe)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.static.consumers import cast_back
from amplint.static.context import FileContext
from amplint.static.patterns import with_dtype


def fixed_code(code: str) -> str | None:
    """The code with its one `cumsum` accumulated in float32 and cast back, or None."""
    text = textwrap.dedent(code)
    ctx = FileContext(Path("m.py"), cst.parse_module(text), text=text)
    call = next(
        c for c in ctx.index.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "cumsum"
    )
    assert isinstance(call.func, cst.Attribute)
    float32 = cst.parse_expression("torch.float32")
    edits = cast_back(ctx, call, with_dtype(call, float32), call.func.value)
    if edits is None:
        return None
    replaced = {id(old): new for old, new in edits}

    class Apply(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            return replaced.get(id(original), updated)

    return ctx.module.visit(Apply()).code


def test_cast_back_before_a_product_and_at_the_return() -> None:
    fixed = fixed_code(
        """\
        import torch

        def decay(self, g, v):
            c = g.cumsum(1)
            w = torch.exp(c[:, -1:] - c)
            out = self.proj(w * 2.0)
            return w @ v, out
        """
    )
    assert fixed is not None
    assert "c = g.cumsum(1, dtype=torch.float32)" in fixed
    assert "out = self.proj((w * 2.0).to(g.dtype))" in fixed
    assert "return w.to(g.dtype) @ v, out" in fixed


def test_cast_back_where_it_is_stored_on_the_module() -> None:
    fixed = fixed_code("import torch\n\ndef f(self, g):\n    self.state = g.cumsum(1).exp()\n")
    assert fixed is not None and "self.state = g.cumsum(1, dtype=torch.float32).exp().to(g.dtype)" in fixed


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("def f(g):\n    return g.cumsum(1)\n", "returned at once: the upcast would gain nothing"),
        ("def f(g, h):\n    return (g.cumsum(1) * h).exp()\n", "mixed with another tensor of unknown dtype"),
        ("def f(self, x):\n    return self.lin(x).cumsum(1).exp()\n", "read from a module's output"),
        ("def f(g):\n    g = g * 2\n    return g.cumsum(1).exp()\n", "the name is bound twice"),
    ],
)
def test_not_proven(code: str, why: str) -> None:
    assert fixed_code("import torch\n\n" + code) is None, why
