"""AMP101: a value rounded to bf16/fp16 by ops autocast leaves alone, then upcast for a float32 op."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.context import FileContext, Finding
from amplint.rule import Bad, Good, GraphFinding, Rule
from amplint.runtime.chains import HALF, VIEWS, where

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# Ops whose low-precision output loses what a float32 op downstream needs: a squashing nonlinearity
# (its result crowds near 0 or 1, where `1 - x`, `log` and `exp` magnify the rounding) or `1 - x`.
_LOSSY = frozenset(
    {"sigmoid", "tanh", "log_sigmoid_forward", "erf", "silu", "gelu", "elu", "hardsigmoid", "rsub"}
)
# How far back from the upcast a chain is followed.
_DEPTH = 64


class PrecisionLostBeforeUpcast(Rule):
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

    ## References
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    - flash-linear-attention RWKV7 log-decay change (case 1 in the project's CASES.md)
    """

    code = "AMP101"
    name = "precision-lost-before-upcast"
    summary = "ops left in bf16/fp16 by autocast (sigmoid, tanh, mul) round a value that a float32 op reads"
    runtime_only = True

    bad = (
        Bad(
            """\
import math
import torch
from torch import nn


class Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x):
        w = -math.exp(-0.5) * self.proj(x).sigmoid()
        return w.exp()


def factory():
    return Decay(), (torch.randn(2, 64),)
"""
        ),
    )
    good = (
        Good(
            """\
import math
import torch
from torch import nn


class Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x):
        w = -math.exp(-0.5) * self.proj(x).to(torch.float32).sigmoid()
        return w.exp()


def factory():
    return Decay(), (torch.randn(2, 64),)
""",
            "upcast before the sigmoid: the chain runs in float32",
        ),
        Good(
            """\
import torch
from torch import nn


class Attention(nn.Module):
    def forward(self, q, k, mask):
        scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125 + mask
        return scores.softmax(-1)


def factory():
    return Attention(), (torch.randn(1, 4, 8, 16), torch.randn(1, 4, 8, 16), torch.zeros(8, 8))
""",
            "scaling and masking scores before a float32 softmax: no squashing op rounds them",
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        return iter(())

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        reported: set[tuple[str, int]] = set()
        for sink in graph.nodes:
            if sink.policy not in {"fp32", "fp32_set_opt_dtype"}:
                continue
            for cast in graph.producers(sink):
                if cast.policy != "autocast_cast" or cast.dtype != "float32":
                    continue
                chain = _chain(graph, cast)
                lossy = [node for node in chain if node.op in _LOSSY]
                if not lossy or lossy[0].source is None:
                    continue
                start = lossy[0]
                assert start.source is not None
                key = (start.source.path, start.source.line)
                if key in reported:
                    continue
                reported.add(key)
                steps = " -> ".join(f"`{node.op}` at {where(node)}" for node in chain)
                yield GraphFinding(
                    start,
                    f"`{start.op}` output stays in {start.dtype} through {len(chain)} op(s) until autocast "
                    f"upcasts it for `{sink.op}` at {where(sink)}: the float32 op reads an already "
                    "rounded value",
                    evidence=f"{steps} ran in {start.dtype}; `{sink.op}` at {where(sink)} ran in float32",
                    help=f"upcast before `{start.op}`: `.to(torch.float32)` on its input",
                    extra={"chain": [_step(node) for node in chain] + [_step(sink)]},
                )


def _chain(graph: DtypeGraph, cast: DtypeNode) -> list[DtypeNode]:
    """The computing ops that kept the upcast's input in low precision, earliest first: back from the
    cast through ops that inherited a half dtype, to the matmul, input or cast that produced it."""
    chain: list[DtypeNode] = []
    current = next(iter(graph.producers(cast)), None)
    for _ in range(_DEPTH):
        if current is None or current.dtype not in HALF or current.policy != "inherited":
            break
        if current.op not in VIEWS:
            chain.append(current)
        # Follow the low-precision operand (a scalar or float32 operand cannot carry the rounding).
        current = next((p for p in graph.producers(current) if p.dtype in HALF), None)
    return chain[::-1]


def _step(node: DtypeNode) -> dict[str, object]:
    source = node.source
    return {
        "op": node.op,
        "dtype": node.dtype,
        "path": source.path if source else None,
        "line": source.line if source else None,
    }
