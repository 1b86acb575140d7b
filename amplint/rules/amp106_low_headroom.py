"""AMP106: values within a few bits of the dtype's largest finite value."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import where
from amplint.runtime.formats import largest
from amplint.runtime.value_walks import (
    VALUES_IN_FLOAT16,
    fix_for,
    per_line,
    producer_values,
    ranges,
    replayed,
)

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph


class LowHeadroom(RuntimeRule):
    """
    ## What it does
    Runs on a values replay (`amplint trace --values`). Finds ops whose largest value on the
    factory's inputs and weights is within a few bits (`headroom-bits`, default 2) of the largest
    finite value of their dtype (`log2(finfo.max / absmax)`), even though nothing overflowed on this
    input. Only the op that brought the values close is named, not the views and copies after it.

    ## Why is this bad?
    One bit of headroom is a factor of two: a longer sequence, another prompt or a fine-tuned weight
    away from inf. float16 tops out at 65504; attention scores, squared norms and sums over long
    sequences grow with the input, so an op that is close on a short test input overflows in
    production (case 2 overflowed only on long inputs).

    ## Example
    ```python
    energy = torch.tanh(self.proj(x)) * 30000  # float16: at most 1.1 bits from 65504
    ```

    ## Fix
    Keep the values smaller (scale before the product, normalise), compute the op in float32, or run
    in bfloat16, whose range is float32's; the finding suggests the fix that fits the op.

    ## References
    - float16 range: https://en.wikipedia.org/wiki/Half-precision_floating-point_format
    """

    code = "AMP106"
    name = "low-headroom"
    summary = "values within a few bits of the dtype's largest finite value on real inputs"
    example_trace = VALUES_IN_FLOAT16

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        if graph.values is None:
            return
        bits = graph.values.limits.headroom_bits
        close = []
        for node, found in replayed(graph):
            if found.headroom is None or found.headroom >= bits or found.overflow or found.inf or found.nan:
                continue
            inputs = [v.headroom for v in producer_values(graph, node) if v.headroom is not None]
            if all(found.headroom < headroom for headroom in inputs):  # this op brought them close
                close.append((node, found))
        for node, found in per_line(close):
            assert found.headroom is not None
            # The magnitude the headroom was measured from: a mask's `finfo.min` is left out of both.
            top = largest(node.dtype or "")
            reached = found.absmax if top is None else top / 2**found.headroom
            yield GraphFinding(
                node,
                f"`{node.op}` reaches {reached:.4g} in {node.dtype}, {found.headroom:.1f} bit(s) "
                f"below its largest value (limit {bits:g}): an input {2**found.headroom:.1f}x larger "
                "overflows",
                evidence=(
                    f"replayed on {graph.replayed_on}: `{node.op}` at {where(node)} gave "
                    f"[{found.low:.4g}, {found.high:.4g}] from inputs in {ranges(graph, node)}"
                ),
                help=fix_for(graph, node),
                extra={"headroom_bits": found.headroom, "absmax": reached},
            )
