"""AMP108: the ops that contribute most to the error of the outputs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import HALF, upcast_help, where
from amplint.runtime.value_walks import VALUES_IN_FLOAT16, per_line, producer_values, replayed, upstream

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode, NodeValues


class LargeError(RuntimeRule):
    """
    ## What it does
    Runs on a values replay (`amplint trace --values`). When an output of the forward pass differs
    from the float64 reference by more than `error-threshold` (default 0.01, norm-wise relative
    error), ranks the ops that feed it by how much each raises the error it receives (the jump from
    the largest error among its inputs to its own, both against the reference) and names the top
    `error-top` (default 3): the softmax where 2e-3 becomes 0.88 ranks above three matmuls that each
    round by 3e-3. Each finding also gives the op's local error: its output's error when it runs in
    its traced dtypes on the reference's inputs rounded to those dtypes.

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
        # Ranked by what each op adds to the error it received (the jump from its inputs' error to
        # its own): three matmuls that each round a little rank below the softmax where 2e-3 turns
        # into 0.88.
        ranked = sorted(
            (
                (node, found, jump)
                for node, found in replayed(graph)
                if node.id in feeding and found.local_error > 0 and (jump := _jump(graph, node, found)) > 0
            ),
            key=lambda item: -item[2],
        )
        jumps = {node.id: jump for node, _, jump in ranked}
        kept = per_line((node, found) for node, found, _ in ranked)
        for rank, (node, found) in enumerate(kept[: limits.error_top], start=1):
            received = found.error - jumps[node.id]
            yield GraphFinding(
                node,
                f"`{node.op}` in {node.dtype} raises the relative error from {received:.1e} to {found.error:.1e} "
                f"(rank {rank} of the ops feeding an output whose error against float64 is {worst:.1e}, "
                f"limit {limits.error_threshold:g})",
                evidence=(
                    f"replayed on {graph.replayed_on}: `{node.op}` at {where(node)} receives "
                    f"inputs off by {received:.1e} and is off by {found.error:.1e}; run in {node.dtype} from "
                    f"the float64 reference's inputs rounded to its dtypes, it is off by {found.local_error:.1e}"
                ),
                help=_help(graph, node),
                extra={
                    "local_error": found.local_error,
                    "jump": jumps[node.id],
                    "rank": rank,
                    "output_error": worst,
                },
            )


def _jump(graph: DtypeGraph, node: DtypeNode, found: NodeValues) -> float:
    """How much an op adds to the error of the values it reads: its error less the largest of its
    inputs'."""
    received = max((values.error for values in producer_values(graph, node)), default=0.0)
    return found.error - received


def _help(graph: DtypeGraph, node: DtypeNode) -> str:
    if node.dtype in HALF:
        return (
            upcast_help(graph, node)
            + ", or reorder the computation so that nearly equal values are not subtracted"
        )
    # The op itself runs in float32: what it amplifies is the rounding of its half-precision inputs.
    rounded = [p for p in graph.producers(node) if p.dtype in HALF]
    if rounded:
        named = ", ".join(f"`{p.op}` at {where(p)}" for p in rounded)
        return f"its inputs were rounded to {rounded[0].dtype} before it ({named}): compute them in float32"
    return f"`{node.op}` runs in {node.dtype}: the error comes from the ops before it"
