"""AMP105: the first op whose values overflowed to inf or NaN, and where that surfaced."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.diagnostics import Severity
from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import step, where
from amplint.runtime.numbers import share
from amplint.runtime.value_walks import (
    VALUES_IN_FLOAT16,
    downstream,
    fix_for,
    per_line,
    producer_values,
    ranges,
    replayed,
)

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode, NodeValues, Values


class FirstOverflow(RuntimeRule):
    """
    ## What it does
    Runs on a values replay (`amplint trace --values`): the traced graph executed on CPU with real
    tensors in the traced dtypes and in float64 alongside. Names the first op that produced inf or
    NaN where the float64 reference is finite, with its source line, module and the ranges of its
    inputs, and follows the non-finite values downstream to where they surface (the softmax that
    turned inf into NaN, the output, or the op that raised on them).

    ## Why is this bad?
    float16 holds magnitudes up to 65504. Beyond that a product or a sum becomes inf, the next
    softmax or subtraction turns inf into NaN, and everything after it is NaN. The error surfaces far
    downstream (case 5: "probability tensor contains either inf, nan or element < 0" in
    `torch.multinomial`) and anomaly detectors report the module where NaN finally shows, not the op
    that overflowed. This is case 2: Qwen2's query and key projections carry large biases, and
    eager attention's `Q @ K^T` overflows float16 before the scale is applied.

    ## Example
    ```python
    scores = torch.matmul(q, k.transpose(-1, -2)) * self.scaling  # inf in float16
    weights = scores.softmax(-1)  # NaN
    ```

    ## Fix
    The finding suggests the fix that fits the op: `F.scaled_dot_product_attention` or queries scaled
    before the product, or scores computed in float32, for attention; a mask built from
    `torch.finfo(dtype).min`; otherwise an upcast to float32 before the op, or bfloat16, whose range
    is float32's.

    ## References
    - float16 range: https://en.wikipedia.org/wiki/Half-precision_floating-point_format
    - Qwen2 fp16 overflow with eager attention (case 2 in the project's CASES.md)
    """

    code = "AMP105"
    name = "first-overflow"
    summary = "the first op whose values overflowed to inf/NaN on real inputs, and where that surfaced"
    severity = Severity.ERROR
    example_trace = VALUES_IN_FLOAT16

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        values = graph.values
        if values is None:
            return
        overflowed = {i for i, found in values.nodes.items() if found.overflow}
        origins = [
            (node, found)
            for node, found in replayed(graph)
            if found.overflow and not any(v.overflow for v in producer_values(graph, node))
        ]
        outputs = set(values.outputs)
        for index, (node, found) in enumerate(per_line(origins)):
            chain = downstream(graph, node, overflowed)
            turns = _turns(values, found, chain, outputs)
            surfaced = _surfaced(graph, values, node, chain, turns, outputs)
            kind = _kind(found)
            yield GraphFinding(
                node,
                f"`{node.op}` produced {kind} in {share(found.overflow)} of its values ({node.dtype}; "
                f"inputs in {ranges(graph, node)}), "
                + ("the first overflow of the replay" if index == 0 else "an overflow no earlier one fed")
                + f"; {surfaced}",
                evidence=(
                    f"replayed on {graph.replayed_on}: `{node.op}` at {where(node)}"
                    + (f" in {node.module}" if node.module else "")
                    + f" gave {kind} where float64 stays finite"
                ),
                help=fix_for(graph, node),
                extra={
                    "overflow": found.overflow,
                    "input_ranges": [[v.low, v.high] for v in producer_values(graph, node)],
                    "chain": [_step(graph, n) for n in (node, *turns)],
                },
            )


def _kind(found: NodeValues) -> str:
    if found.inf and found.nan:
        return "inf and NaN"
    return "NaN" if found.nan else "inf"


def _turns(values: Values, found: NodeValues, chain: list[DtypeNode], outputs: set[int]) -> list[DtypeNode]:
    """The op that turned the inf into NaN (if the origin made only inf), then the outputs reached."""
    turns: list[DtypeNode] = []
    if not found.nan:
        nan = next((n for n in chain if values.nodes[n.id].nan), None)
        if nan is not None:
            turns.append(nan)
    turns += [n for n in chain if n.id in outputs and n not in turns]
    return turns


def _surfaced(
    graph: DtypeGraph,
    values: Values,
    origin: DtypeNode,
    chain: list[DtypeNode],
    turns: list[DtypeNode],
    outputs: set[int],
) -> str:
    parts = []
    for node in turns:
        if node.id in outputs:
            parts.append(f"the output (`{node.op}` at {where(node)}) is {_kind(values.nodes[node.id])}")
        else:
            parts.append(f"`{node.op}` at {where(node)} turned it into NaN")
    if values.stopped_at is not None:
        stopped = graph.node(values.stopped_at)
        reached = {origin.id, *(n.id for n in chain)}
        if any(p in reached for p in stopped.inputs):
            parts.append(f"`{stopped.op}` at {where(stopped)} raised on it: {values.stopped}")
    if not parts:
        return "the non-finite values do not reach the outputs (a later op dropped or absorbed them)"
    return "; ".join(parts)


def _step(graph: DtypeGraph, node: DtypeNode) -> dict[str, object]:
    assert graph.values is not None
    found = graph.values.nodes[node.id]
    return {**step(node), "module": node.module, "inf": found.inf, "nan": found.nan}
