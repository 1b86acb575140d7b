"""AMP104: bfloat16 and float16 values meeting in one op."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from amplint.rule import Bad, Good, GraphFinding, RuntimeRule
from amplint.runtime.chains import where

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph


# Ops that refuse operands of two dtypes on a real device (a trace on fake tensors lets them through).
_PRODUCTS = frozenset({"mm", "bmm", "addmm", "baddbmm", "convolution", "index_put", "index_put_"})


class AutocastDtypeMixing(RuntimeRule):
    """
    ## What it does
    Runs on a traced dtype graph (`amplint check --confirm`, `amplint trace`). Finds ops that read
    both bfloat16 and float16 tensors: a model cast with `.half()` fed by code that still produces
    bfloat16 (a cached rotary table, a buffer, a `torch_dtype` given to one part only), or two
    autocast regions with different dtypes whose results meet.

    ## Why is this bad?
    Neither dtype holds the other: type promotion turns the pair into float32, silently, in pointwise
    ops, and a matmul, `bmm`, `index_put_` or a fused kernel given the pair raises "expected both
    inputs to have the same dtype" at run time, on the GPU, far from where the second dtype came in.

    ## Example
    ```python
    model = model.half()
    cos = self.cos_cached.to(torch.bfloat16)  # a bf16 table in an fp16 model
    q = q * cos  # bf16 x fp16: promoted to float32
    ```

    ## Fix
    Cast to the dtype of the tensor you combine with: `self.cos_cached.to(q.dtype)`.

    ## References
    - PyTorch type promotion: https://pytorch.org/docs/stable/tensor_attributes.html#type-promotion-doc
    """

    code = "AMP104"
    name = "autocast-dtype-mixing"
    summary = "bfloat16 and float16 tensors meeting in one op (promoted to float32, or raising in a matmul)"

    bad = (
        Bad(
            """\
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.register_buffer("cos", torch.randn(64))

    def forward(self, x):
        q = self.proj(x)
        return q * self.cos.to(torch.float16)  # q is bfloat16 under autocast


def factory():
    return Rotary(), (torch.randn(2, 64),)
"""
        ),
        Bad(
            """\
import torch
from torch import nn


class Mix(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.register_buffer("table", torch.randn(64, 64))

    def forward(self, x):
        hidden = self.proj(x)  # bfloat16 under autocast
        with torch.autocast("cuda", enabled=False):
            return hidden @ self.table.half()  # no autocast to reconcile them: raises on a GPU


def factory():
    return Mix(), (torch.randn(2, 64),)
"""
        ),
    )
    good = (
        Good(
            """\
import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.register_buffer("cos", torch.randn(64))

    def forward(self, x):
        q = self.proj(x)
        return q * self.cos.to(q.dtype)


def factory():
    return Rotary(), (torch.randn(2, 64),)
""",
            "the table is cast to the dtype of the tensor it multiplies",
        ),
    )

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        reported: set[tuple[str, int]] = set()
        for node in graph.nodes:
            dtypes = set(node.input_dtypes)
            if not {"bfloat16", "float16"} <= dtypes or node.source is None:
                continue
            key = (node.source.path, node.source.line)
            if key in reported:
                continue
            reported.add(key)
            producers = [graph.node(i) for i in node.inputs]
            origins = "; ".join(
                f"{p.dtype} from `{p.op}` at {where(p)}"
                for p in producers
                if p.dtype in {"bfloat16", "float16"}
            )
            outcome = (
                "a product given the pair raises at run time (both operands must have one dtype)"
                if node.op in _PRODUCTS
                else "type promotion makes it float32, silently"
            )
            yield GraphFinding(
                node,
                f"`{node.op}` reads both bfloat16 and float16 ({origins}): {outcome}",
                evidence=f"`{node.op}` at {where(node)} read {', '.join(d or '-' for d in node.input_dtypes)}",
                help="cast one side to the other's dtype (`x.to(y.dtype)`)",
            )
