"""AMP102: a matmul, linear or convolution that runs in float32 inside a low-precision autocast run."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import HALF, where
from amplint.runtime.numbers import share as percent

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# The products autocast runs in low precision, and which input holds the reduced dimension.
_PRODUCTS = {"mm": 0, "bmm": 0, "addmm": 1, "baddbmm": 1, "convolution": 1}
# A float32 product is reported when it holds at least this share of the traced product FLOPs: a
# rotary-angle matmul kept in float32 on purpose costs nothing worth a line.
_SHARE = 0.01


class Fp32MatmulUnderAutocast(RuntimeRule):
    """
    ## What it does
    Runs on a traced dtype graph (`amplint check --confirm`, `amplint trace`). Finds matrix products
    (`matmul`, `linear`, `bmm`, convolutions) that run in float32 although the model runs under
    bf16/fp16 autocast, because autocast was switched off around them or their inputs were upcast,
    and reports the floating-point operations they cost in float32 (at least 1% of the traced
    products' FLOPs).

    ## Why is this bad?
    Tensor cores run bf16/fp16 products 2-16 times faster than float32, and the float32 operands take
    twice the memory. A product left in float32 by an upcast meant for a neighbouring op (a norm, a
    softmax) is a speed and memory regression that no test shows.

    ## Example
    ```python
    with torch.autocast("cuda", enabled=False):
        logits = self.lm_head(hidden_states.float())  # the largest matmul of the model, in float32
    ```

    ## Fix
    Keep the product under autocast and upcast only its output where the precision is needed:
    `self.lm_head(hidden_states).float()`.

    ## References
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP102"
    name = "fp32-matmul-under-autocast"
    summary = "a matmul/linear/conv that runs in float32 inside a bf16/fp16 autocast run (its FLOPs reported)"

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        if not graph.autocast or graph.dtype not in HALF:
            return
        costs = {node.id: _flops(graph, node) for node in graph.nodes if node.op in _PRODUCTS}
        total = sum(costs.values())
        reported: set[tuple[str, int]] = set()
        for node in graph.nodes:
            flops = costs.get(node.id, 0)
            if node.dtype != "float32" or not total or flops < _SHARE * total or node.source is None:
                continue
            key = (node.source.path, node.source.line)
            if key in reported:
                continue
            reported.add(key)
            share = flops / total
            yield GraphFinding(
                node,
                f"`{node.op}` runs in float32 inside a {graph.dtype} autocast run: {_amount(flops)} FLOPs, "
                f"{percent(share)} of the traced products, without tensor-core low precision",
                evidence=f"`{node.op}` at {where(node)} ran in float32 with inputs "
                f"{', '.join(d or '-' for d in node.input_dtypes)}",
                help="keep the product under autocast and upcast its output, or only the op that needs float32",
                extra={"flops": flops, "share": round(share, 4)},
            )


def _flops(graph: DtypeGraph, node: DtypeNode) -> int:
    """Multiply-adds times two: the output's elements times the length of the reduced dimension."""
    if node.shape is None or len(node.inputs) <= _PRODUCTS[node.op]:
        return 0
    operand = graph.node(node.inputs[_PRODUCTS[node.op]]).shape
    if not operand:
        return 0
    # A convolution's weight is (out, in / groups, *kernel); a product's left operand ends in k.
    reduced = math.prod(operand[1:]) if node.op == "convolution" else operand[-1]
    return 2 * math.prod(node.shape) * reduced


def _amount(flops: int) -> str:
    for unit, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if flops >= size:
            return f"{flops / size:.1f} {unit}"
    return str(flops)
