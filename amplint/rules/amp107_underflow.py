"""AMP107: non-zero values flushed to zero by the dtype's range."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import where
from amplint.runtime.numbers import share
from amplint.runtime.value_walks import (
    VALUES_IN_FLOAT16,
    cast_from,
    per_line,
    producer_values,
    ranges,
    replayed,
)

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class Underflow(RuntimeRule):
    """
    ## What it does
    Runs on a values replay (`amplint trace --values`). Finds ops where at least a fraction
    (`underflow-fraction`, default 0.01) of the values that are non-zero in the float64 reference
    became zero because they fell below the dtype's normal range (float16: 6.1e-05, with subnormals
    down to 6e-08). Zeros from cancellation do not count.

    ## Why is this bad?
    A flushed value is not slightly wrong but gone: an eps guard of 1e-8 becomes 0 and the division
    it protects returns inf, a small probability becomes 0 and its log `-inf`, a small gradient or
    decay stops contributing at all.

    ## Example
    ```python
    scaled = self.proj(x) * 1e-9  # float16: every value flushes to zero
    ```

    ## Fix
    Keep the value in float32 (`.float()` before the op), use constants the dtype can hold
    (`torch.finfo(dtype).tiny`, `torch.finfo(dtype).eps`), or rescale so that the values stay in range.

    ## References
    - float16 range: https://en.wikipedia.org/wiki/Half-precision_floating-point_format
    """

    code = "AMP107"
    name = "underflow"
    summary = "non-zero values flushed to zero by the dtype's range on real inputs"
    example_trace = VALUES_IN_FLOAT16

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        if graph.values is None:
            return
        fraction = graph.values.limits.underflow_fraction
        flushed = [
            (node, found)
            for node, found in replayed(graph)
            if found.underflow >= fraction
            and found.underflow > max((v.underflow for v in producer_values(graph, node)), default=0.0)
        ]
        for node, found in per_line(flushed):
            yield GraphFinding(
                node,
                f"`{node.op}` flushed {share(found.underflow)} of its non-zero values to zero in "
                f"{node.dtype} (limit {share(fraction)}): they fall below the dtype's normal range",
                evidence=(
                    f"replayed on {graph.replayed_on}: `{node.op}` at {where(node)} "
                    f"read inputs in {ranges(graph, node)}; float64 keeps those values non-zero"
                ),
                help=_help(node),
                extra={"underflow": found.underflow},
            )


def _help(node: DtypeNode) -> str:
    wider = cast_from(node)
    if wider is not None:  # the values are this small before the cast: an upcast changes nothing
        return (
            f"the values reach this cast below {node.dtype}'s range: scale them up before it (and back "
            f"after), or keep them in {wider} past this point"
        )
    return (
        f"compute `{node.op}` in float32 (`.float()` on its input), or use constants the dtype "
        "can hold (`torch.finfo(dtype).tiny`)"
    )
