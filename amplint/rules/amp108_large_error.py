"""AMP108: the ops that contribute most to the error of the outputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import HALF, where
from amplint.runtime.value_walks import VALUES_IN_FLOAT16, per_line, replayed, upstream

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class LargeError(RuntimeRule):
    """
    ## What it does
    Runs on a values replay (`amplint trace --values`). When an output of the forward pass differs
    from the float64 reference by more than `error-threshold` (default 0.01, norm-wise relative
    error), ranks the ops that feed it by their local error and names the top `error-top` (default 3).
    An op's local error is its output's error when it runs in its traced dtypes on the reference's
    inputs rounded to those dtypes: its own rounding, plus how much it amplifies the rounding of its
    inputs (as a subtraction of nearly equal values does).

    ## Why is this bad?
    A model can be finite everywhere and still compute the wrong thing: catastrophic cancellation in
    half precision, a long accumulation, a large offset removed after the rounding. The output's
    error says that something is off; the ranking says where to put the upcast.

    ## Example
    ```python
    shifted = self.proj(x) + 1000.0  # float16 keeps 0.5 steps at 1000
    return shifted - 1000.0  # the cancellation shows the rounding
    ```

    ## Fix
    Compute the named op in float32 (upcast its input at its line), reorder the computation so that
    nearly equal values are not subtracted, or accumulate in float32.

    ## References
    - Higham, Accuracy and Stability of Numerical Algorithms, ch. 1 (cancellation)
    """

    code = "AMP108"
    name = "large-error"
    summary = "the ops that contribute most to the outputs' error against float64, ranked"
    example_trace = VALUES_IN_FLOAT16

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        values = graph.values
        if values is None:
            return
        limits = values.limits
        wrong = [
            graph.node(i)
            for i in values.outputs
            if i in values.nodes and values.nodes[i].error > limits.error_threshold
        ]
        if not wrong:
            return
        worst = max(values.nodes[node.id].error for node in wrong)
        feeding = upstream(graph, wrong)
        ranked = sorted(
            (
                (node, found)
                for node, found in replayed(graph)
                if node.id in feeding and found.local_error > 0
            ),
            key=lambda item: -item[1].local_error,
        )
        for rank, (node, found) in enumerate(per_line(ranked)[: limits.error_top], start=1):
            yield GraphFinding(
                node,
                f"`{node.op}` adds a relative error of {found.local_error:.1e} on its own in {node.dtype} "
                f"(rank {rank} of the ops feeding an output whose error against float64 is {worst:.1e}, "
                f"limit {limits.error_threshold:g})",
                evidence=(
                    f"replayed on the factory's inputs and weights: `{node.op}` at {where(node)} run in "
                    f"{node.dtype} from the float64 reference's inputs rounded to its dtypes is off by "
                    f"{found.local_error:.1e}; its value in the replay by {found.error:.1e}"
                ),
                help=_help(graph, node),
                extra={"local_error": found.local_error, "rank": rank, "output_error": worst},
            )


def _help(graph: DtypeGraph, node: DtypeNode) -> str:
    if node.dtype in HALF:
        return (
            f"compute `{node.op}` in float32 (`.float()` on its input), or reorder the computation so "
            "that nearly equal values are not subtracted"
        )
    # The op itself runs in float32: what it amplifies is the rounding of its half-precision inputs.
    rounded = [p for p in graph.producers(node) if p.dtype in HALF]
    if rounded:
        named = ", ".join(f"`{p.op}` at {where(p)}" for p in rounded)
        return f"its inputs were rounded to {rounded[0].dtype} before it ({named}): compute them in float32"
    return f"`{node.op}` runs in {node.dtype}: the error comes from the ops before it"
