"""AMP101: a value rounded to bf16/fp16 by ops autocast leaves alone, then upcast for a float32 op."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import CastPoint, GraphFinding, RuntimeRule
from amplint.runtime.chains import (
    HALF,
    LOSSY,
    LateUpcast,
    describe_error,
    late_upcasts,
    measured_error,
    step,
    where,
)

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class PrecisionLostBeforeUpcast(RuntimeRule):
    """
    ## What it does
    Runs on a traced dtype graph (`amplint check --confirm`, `amplint trace`). Finds a chain of ops
    that autocast leaves in the low-precision dtype (`sigmoid`, `tanh`, `mul`, `sub`, ... are on no
    autocast list, so they keep the bf16/fp16 of the matmul before them) whose result autocast
    later casts to float32 for an op on its float32 list (`exp`, `log`, `pow`, `softplus`, `cumsum`,
    `softmax`, norms). The finding names the whole chain with its source lines.

    ## Why is this bad?
    The float32 op gets a value that was already rounded to 8 (bf16) or 11 (fp16) significant bits:
    the upcast comes too late. This is the general form of case 1: RWKV7's log-decay
    `-exp(-0.5) * sigmoid(...)` was computed in bfloat16 and only `exp` upcast it, so the
    recurrence multiplied the rounding error over every step of a long context.

    ## Example
    ```python
    w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()  # sigmoid and mul run in bfloat16
    decay = w.exp()  # autocast upcasts here, after the rounding
    ```

    ## Fix
    Upcast at the start of the chain, after the last matmul: `self.w_lora(xw).to(torch.float32).sigmoid()`.
    When the chain starts with arithmetic on the product (`(x @ w * scale).sigmoid()`), the fix
    upcasts the product there: `((x @ w).to(torch.float32) * scale).sigmoid()`. Under autocast a later
    matmul still casts its inputs back down, so no product leaves low precision.

    ## References
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    - flash-linear-attention RWKV7 log-decay change (case 1 in the project's CASES.md)
    """

    code = "AMP101"
    name = "precision-lost-before-upcast"
    summary = "ops left in bf16/fp16 by autocast (sigmoid, tanh, mul) round a value that a float32 op reads"

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        # One finding per line where a chain starts; the casts it reaches (one per loop step of a
        # recurrence) are measured together.
        starts: dict[tuple[str, int], list[LateUpcast]] = {}
        for late in late_upcasts(graph):
            start = next((node for node in late.chain if node.op in LOSSY), None)
            if start is not None and start.source is not None:
                starts.setdefault((start.source.path, start.source.line), []).append(late)
        for found in starts.values():
            late = found[0]
            chain = late.chain
            start = next(node for node in chain if node.op in LOSSY)
            sink = late.sink
            steps = " -> ".join(f"`{node.op}` at {where(node)}" for node in chain)
            evidence = f"{steps} ran in {start.dtype}; `{sink.op}` at {where(sink)} ran in float32"
            extra: dict[str, object] = {"chain": [step(node) for node in (*chain, sink)]}
            measured = measured_error(graph, [item.cast for item in found])
            if measured is not None:
                evidence += "; " + describe_error(graph, measured)
                extra["measured"] = measured
            yield GraphFinding(
                start,
                f"`{start.op}` output stays in {start.dtype} through {len(chain)} op(s) until autocast "
                f"upcasts it for `{sink.op}` at {where(sink)}: the float32 op reads an already "
                "rounded value",
                evidence=evidence,
                help=f"upcast where the chain starts: `.to(torch.float32)` on the input of `{chain[0].op}`",
                extra=extra,
                upcast=_cast_points(graph, chain, start),
            )


def _cast_points(graph: DtypeGraph, chain: tuple[DtypeNode, ...], start: DtypeNode) -> tuple[CastPoint, ...]:
    """Where an upcast removes the loss, earliest first: the inputs of the chain's ops up to its
    first lossy one, in the file of the finding."""
    points: list[CastPoint] = []
    for node in chain[: chain.index(start) + 1]:
        source = node.source
        if source is None or start.source is None or source.path != start.source.path:
            continue
        operand = next((p.source for p in graph.producers(node) if p.dtype in HALF), None)
        points.append(
            CastPoint(
                node.op,
                source.path,
                source.line,
                source.column,
                None if operand is None else (operand.line, operand.column),
            )
        )
    return tuple(points)
