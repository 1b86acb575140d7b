"""Where an upcast value is cast back: the places a fix hands its result to code that expects the
dtype it had before, and the cases where that cannot be proven (the fix then stays unsafe)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.static.consumers import Edit, cast_back, half_weight_consumer, upcast_dtype
from amplint.static.context import FileContext
from amplint.static.patterns import upcast_input, with_dtype


def _applied(ctx: FileContext, edits: tuple[Edit, ...]) -> str:
    """The module's code with each node of `edits` replaced."""
    replaced = {id(old): new for old, new in edits}

    class Apply(cst.CSTTransformer):
        def on_leave(self, original: cst.CSTNode, updated: cst.CSTNode) -> cst.CSTNode:
            return replaced.get(id(original), updated)

    return ctx.module.visit(Apply()).code


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
    return _applied(ctx, edits)


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
    # The dtype the first op on the way (`exp`) gives `g` there: float32 under CUDA autocast, which
    # runs `exp` in float32 as the unfixed code did, `g`'s dtype elsewhere.
    assert "out = self.proj((w * 2.0).to(g.new_empty(0).exp().dtype))" in fixed
    assert "return w.to(g.dtype) @ v, out" in fixed


def test_cast_back_where_it_is_stored_on_the_module() -> None:
    fixed = fixed_code("import torch\n\ndef f(self, g):\n    self.state = g.cumsum(1).exp()\n")
    stored = "self.state = g.cumsum(1, dtype=torch.float32).exp().to(g.new_empty(0).exp().dtype)"
    assert fixed is not None and stored in fixed


@pytest.mark.parametrize(
    ("code", "why"),
    [
        ("def f(g):\n    return g.cumsum(1)\n", "returned at once: the upcast would gain nothing"),
        ("def f(g, h):\n    return (g.cumsum(1) * h).exp()\n", "mixed with another tensor of unknown dtype"),
        ("def f(self, x):\n    return self.lin(x).cumsum(1).exp()\n", "read from a module's output"),
    ],
)
def test_not_proven(code: str, why: str) -> None:
    assert fixed_code("import torch\n\n" + code) is None, why


def test_a_name_bound_twice_is_read_where_the_upcast_reads_it() -> None:
    # The cast back is in the upcast's own statement: `g` there is the binding the upcast read.
    fixed = fixed_code("import torch\n\ndef f(g):\n    g = g * 2\n    return g.cumsum(1).exp()\n")
    assert fixed is not None
    assert "return g.cumsum(1, dtype=torch.float32).exp().to(g.new_empty(0).exp().dtype)" in fixed


def chain_code(code: str) -> str | None:
    """The code with its one `sigmoid` upcast as the fix of a whole chain does it (the dtype read
    through the module that computed its input), and what derives from it cast back, or None."""
    text = textwrap.dedent(code)
    ctx = FileContext(Path("m.py"), cst.parse_module(text), text=text)
    call = next(
        c for c in ctx.index.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "sigmoid"
    )
    assert isinstance(call.func, cst.Attribute)
    data = call.func.value
    float32, _ = upcast_dtype(ctx, call, data, through_modules=True)
    edits = cast_back(ctx, call, upcast_input(call, data, float32), data, through_modules=True)
    if edits is None:
        return None
    return _applied(ctx, edits)


CHAIN = """\
import torch
from torch import nn

class TimeMix(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w_lora = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x, v):
        w = -0.6065 * self.w_lora(x).sigmoid()
        return {consumer}
"""


def test_a_chain_is_cast_back_to_the_dtype_of_what_the_module_read() -> None:
    fixed = chain_code(CHAIN.format(consumer="self.out(x * torch.exp(w.cumsum(1)))"))
    assert fixed is not None
    assert "w = -0.6065 * self.w_lora(x).to(torch.promote_types(x.dtype, torch.float32)).sigmoid()" in fixed
    assert "return self.out((x * torch.exp(w.cumsum(1))).to(x.dtype))" in fixed


def test_a_returned_chain_through_cumsum_is_cast_back_to_the_dtype_autocast_gives() -> None:
    fixed = chain_code(CHAIN.format(consumer="torch.exp(w.cumsum(1)), self.out(x * w)"))
    assert fixed is not None
    # Under CUDA autocast the unfixed exp (and cumsum) returned float32, which the probe of the first
    # op on the way (`exp`) gives there; at the Linear, the module's input dtype.
    assert (
        "return torch.exp(w.cumsum(1)).to(x.new_empty(0).exp().dtype), self.out((x * w).to(x.dtype))" in fixed
    )


@pytest.mark.parametrize(
    "consumer",
    [
        "self.out(v * torch.exp(w.cumsum(1)))",  # mixed with `v`, whose dtype may be wider
        "torch.exp(w)",  # a lone upcast that leaves: the rule's own fix stands
    ],
)
def test_no_chain_fix_where_the_dtype_is_not_known_or_nothing_is_gained(consumer: str) -> None:
    assert chain_code(CHAIN.format(consumer=consumer)) is None


CALLED = """\
import torch
from torch import nn

class TimeMix(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w_lora = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.wo = nn.Parameter(torch.randn(dim, dim))

    def decay(self, x):
        w = -0.6065 * self.w_lora(x).sigmoid()
        return torch.exp(w)

    def forward(self, x):
        {caller}
"""


@pytest.mark.parametrize(
    ("caller", "consumer"),
    [
        ("return self.out(x * self.decay(x))", "self.out(x * self.decay(x))"),
        ("d = self.decay(x)\n        return (x * d) @ self.wo", "(x * d) @ self.wo"),
        ("return x * self.decay(x)", None),  # returned on: nothing in the file meets it
        ("with torch.autocast('cuda'):\n            return self.out(x * self.decay(x))", None),
    ],
)
def test_a_half_consumer_is_found_in_the_functions_the_value_is_returned_to(
    caller: str, consumer: str | None
) -> None:
    text = CALLED.format(caller=caller)
    ctx = FileContext(Path("m.py"), cst.parse_module(text), text=text)
    sigmoid = next(
        c for c in ctx.index.calls if isinstance(c.func, cst.Attribute) and c.func.attr.value == "sigmoid"
    )
    found = half_weight_consumer(ctx, sigmoid)
    assert (None if found is None else ctx.code(found)) == consumer
