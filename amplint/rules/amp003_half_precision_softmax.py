"""AMP003: softmax over attention scores or logits in half precision (cases 2 and 4)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import Diagnostic
from amplint.rule import Bad, Good, Rule, Verdict
from amplint.runtime.chains import half_precision_verdict
from amplint.static.attention import (
    REGION_PATTERN,
    REGION_WORDS,
    is_multinomial,
    is_softmax,
    score_operands,
    scores_returned_by,
    softmax_dtype_argument,
    softmax_input,
    softmax_module_call,
    why_half,
)
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.dtypes import DTYPE, DtypeFacts, Fact
from amplint.static.flow import Policy, analyse, value_children
from amplint.static.ops import HALF
from amplint.static.patterns import with_dtype, with_method
from amplint.static.scopes import Scope, scopes_holding

_MESSAGE = (
    "softmax over attention scores or logits returns float16/bfloat16 probabilities when the model runs "
    "in half precision without CUDA autocast: small probabilities flush or lose precision and masked "
    "rows can turn into NaN"
)
# Names under which code holds attention scores or logits.
_SCORE_NAME = re.compile(
    r"(score|logit|attn|attention|energ|similarit|^sim$|^sims$|^qk$|^dots?$|^lm_head$)", re.IGNORECASE
)


if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class HalfPrecisionSoftmax(Rule):
    """
    ## What it does
    Flags `softmax` and `log_softmax` over attention scores or logits that are not asked to compute
    in float32 (`dtype=torch.float32`) and whose input is not upcast.

    ## Why is this bad?
    A softmax in float16 or bfloat16 exponentiates and sums in the low-precision dtype: fully
    masked rows become NaN, large logits overflow, and the normalisation loses the small
    probabilities that sampling and attention depend on. Autocast upcasts softmax on CUDA, but a
    model run with `.half()`/`torch_dtype=torch.float16` weights and no autocast, or on CPU autocast,
    does not. The eager attention path of many models shows NaN in fine-tuning for this reason
    while fused kernels stay stable.

    ## Example
    ```python
    probs = F.softmax(attn_weights, dim=-1)
    out = probs @ v
    ```

    ## Fix
    Compute the softmax in float32 and cast back where the result feeds a low-precision product:
    ```python
    probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(attn_weights.dtype)
    out = probs @ v
    ```

    ## References
    - transformers' eager attention: `softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)`
    - `torch.nn.functional.softmax(input, dim, dtype=...)`
    """

    code = "AMP003"
    name = "half-precision-softmax"
    summary = "softmax/log_softmax over attention scores or logits without dtype=torch.float32"
    triggers = frozenset({"softmax", "log_softmax", "Softmax", "LogSoftmax"})
    region_words = REGION_WORDS
    region_pattern = REGION_PATTERN

    bad = (
        Bad(
            """\
import torch
import torch.nn.functional as F


def attend(attn_weights, v):
    probs = F.softmax(attn_weights, dim=-1)
    return probs @ v
""",
            fixed="""\
import torch
import torch.nn.functional as F


def attend(attn_weights, v):
    probs = F.softmax(attn_weights, dim=-1, dtype=torch.float32).to(attn_weights.dtype)
    return probs @ v
""",
        ),
        Bad(
            """\
import torch


def sample(logits, temperature):
    probs = torch.softmax(logits / temperature, dim=-1)
    return torch.multinomial(probs, num_samples=1)
""",
            fixed="""\
import torch


def sample(logits, temperature):
    probs = torch.softmax(logits / temperature, dim=-1, dtype=torch.float32)
    return torch.multinomial(probs, num_samples=1)
""",
        ),
        Bad(
            """\
import torch as th


def attention(q, k, v):
    w = (q @ k.transpose(-2, -1)).log_softmax(-1)
    return w
""",
            fixed="""\
import torch as th


def attention(q, k, v):
    w = (q @ k.transpose(-2, -1)).log_softmax(-1, dtype=th.float32).to(q.dtype)
    return w
""",
        ),
        Bad(
            """\
from torch.nn import functional as F


def router(self, hidden):
    router_logits = self.gate(hidden)
    return F.softmax(router_logits, dim=1)
""",
            fixed="""\
import torch
from torch.nn import functional as F


def router(self, hidden):
    router_logits = self.gate(hidden)
    return F.softmax(router_logits, dim=1, dtype=torch.float32).to(router_logits.dtype)
""",
        ),
        Bad(
            """\
import torch


def attend(scores, v):
    p = torch.softmax(scores, dim=-1, dtype=torch.float16)
    return torch.matmul(p, v)
""",
            fixed="""\
import torch


def attend(scores, v):
    p = torch.softmax(scores, dim=-1, dtype=torch.float32).to(scores.dtype)
    return torch.matmul(p, v)
""",
        ),
        Bad(
            """\
import math
import torch
from torch import nn


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, query, key, value):
        score = torch.matmul(query, key.transpose(-1, -2)) / math.sqrt(query.size(-1))
        return torch.matmul(self.softmax(score), value)
"""
        ),
    )
    good = (
        Good(
            """\
import torch
from torch import nn


def attend(attn_weights, query, value):
    attn_weights = nn.functional.softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)
    return torch.matmul(attn_weights, value)
""",
            "transformers' eager attention: float32 softmax, cast back",
        ),
        Good(
            """\
import torch.nn.functional as F


def attend(scores, v):
    return F.softmax(scores.float(), dim=-1).type_as(scores) @ v
""",
            "the input is upcast",
        ),
        Good(
            """\
import torch.nn.functional as F


def mix(self):
    return F.softmax(self.layer_weights, dim=0)
""",
            "a softmax over learned mixing weights, not scores or logits",
        ),
        Good(
            """\
import torch


def attend(scores, dtype):
    return torch.softmax(scores, dim=-1, dtype=dtype)
""",
            "an explicit dtype chosen by the caller",
        ),
        Good(
            """\
import torch
import torch.nn.functional as F


def route(hidden_states, weight, top_k):
    router_logits = F.linear(hidden_states, weight).float()
    top_k_logits, top_k_index = router_logits.topk(top_k, dim=-1)
    top_k_weights = torch.softmax(top_k_logits, dim=-1).type_as(hidden_states)
    return top_k_weights, top_k_index
""",
            "float32 logits unpacked from `topk` (granitemoe, jetmoe)",
        ),
        Good(
            """\
import torch
from torch import nn


def attn(query, key, value, scale):
    query = query.to(torch.float32)
    key = key.to(torch.float32)
    attn_weights = torch.matmul(query, key.transpose(-1, -2)) / scale
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    return torch.matmul(attn_weights.to(value.dtype), value)
""",
            "a product of float32 operands (GPT-2's upcast attention, GPT-J)",
        ),
        Good(
            """\
import torch


def pool(gate_scores, ape, valid):
    logits = gate_scores.float() + ape.float()
    logits = logits.masked_fill(~valid, float("-inf"))
    return torch.nan_to_num(logits.softmax(dim=-1))
""",
            "arithmetic with float32 operands is float32",
        ),
        Good(
            """\
import torch
from torch import nn


def sample_step(outputs, input_ids, logits_processor):
    next_token_logits = outputs.logits[:, -1, :].to(dtype=torch.float32)
    next_token_scores = logits_processor(input_ids, next_token_logits)
    probs = nn.functional.softmax(next_token_scores, dim=-1)
    return torch.multinomial(probs, num_samples=1)
""",
            "float32 logits passed through a logits processor (generation utilities)",
        ),
    )

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        softmaxes = [node for node in nodes if node.op in {"_softmax", "_log_softmax"}]
        return half_precision_verdict(graph, softmaxes, "the softmax runs in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = ctx.facts.without_caller_autocast()
        softmaxes = [call for call in ctx.index.calls if is_softmax(ctx, call)]
        policy = Policy(
            seed=lambda node, flow: (
                score_operands(ctx, node, flow) is not None or bool(scores_returned_by(ctx, node))
            ),
            sink=lambda node, flow: "softmax" if is_softmax(ctx, node) else None,
        )
        for scope in scopes_holding(ctx, softmaxes):
            fed_by_scores = {hit.sink for hit in analyse(scope, policy).hits.values()}
            for call in (c for c in softmaxes if (ctx.function_of(c) or ctx.module) is scope.node):
                data = softmax_input(ctx, call)
                if data is None or not (call in fed_by_scores or _looks_like_scores(data)):
                    continue
                fact = _half_result(ctx, facts, call)
                if fact is not None:
                    yield _finding(ctx, scope, call, data, fact)


def _half_result(ctx: FileContext, facts: DtypeFacts, call: cst.Call) -> Fact | None:
    """The fact of a half softmax result (without the caller's autocast, which runs softmax in float32
    on CUDA), or of the half `dtype=` it is given; None when it computes in float32 or in a dtype
    that the caller passes."""
    dtype = softmax_dtype_argument(ctx, call)
    fact = facts.of(dtype if dtype is not None else call)
    if dtype is not None and fact.kind != DTYPE:
        return None
    return fact if fact.dtypes & HALF else None


def _looks_like_scores(data: cst.BaseExpression) -> bool:
    """A name or attribute in the input's value says it holds scores or logits."""
    stack: list[cst.CSTNode] = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, cst.Name) and _SCORE_NAME.search(node.value):
            return True
        if isinstance(node, cst.Attribute) and _SCORE_NAME.search(node.attr.value):
            return True
        stack.extend(value_children(node))
    return False


def _finding(ctx: FileContext, scope: Scope, call: cst.Call, data: cst.BaseExpression, fact: Fact) -> Finding:
    why = why_half(fact)
    if softmax_module_call(ctx, call):
        return Finding(
            call,
            f"{_MESSAGE}; an `nn.Softmax` module cannot take a dtype; {why}",
            help="call `torch.softmax(x, dim=..., dtype=torch.float32)` instead of the `nn.Softmax` module",
            evidence=fact.why,
        )
    float32, missing_import = ctx.float32()
    fixed: cst.BaseExpression = with_dtype(call, float32, softmax_dtype_argument(ctx, call))
    description = "Compute the softmax in float32"
    # Cast back so that everything downstream sees the dtype it saw before (a float32 result
    # reaching a bf16 Linear or scatter would raise); sampling is the exception: float32
    # probabilities are what `multinomial` should get (case 5).
    if not _sampled(ctx, scope, call):
        reference = _dtype_reference(data)
        if reference is None:
            message = f"{_MESSAGE}: pass `dtype=torch.float32` and cast the result back; {why}"
            return Finding(call, message, evidence=fact.why)
        fixed = with_method(fixed, "to", cst.Attribute(value=reference, attr=cst.Name("dtype")))
        description += " and cast back"
    return Finding(
        call,
        f"{_MESSAGE}: pass `dtype=torch.float32`; {why}",
        fix=FixPlan(description, ((call, fixed),), missing_import),
        help=f"`{' '.join(ctx.code(fixed).split())}`",
        evidence=fact.why,
    )


def _dtype_reference(data: cst.BaseExpression) -> cst.BaseExpression | None:
    """A tensor whose dtype is the softmax input's: the input itself when it is a name or an
    attribute, else the tensor it is computed from (`logits` in `logits / temperature`)."""
    node: cst.BaseExpression = data
    for _ in range(8):
        if isinstance(node, (cst.Name, cst.Attribute)):
            return node.with_changes(lpar=[], rpar=[])
        if isinstance(node, cst.BinaryOperation):
            node = node.right if isinstance(node.left, (cst.Integer, cst.Float)) else node.left
        elif isinstance(node, cst.UnaryOperation):
            node = node.expression
        elif isinstance(node, cst.Subscript):
            node = node.value
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            node = node.func.value
        else:
            return None
    return None


def _sampled(ctx: FileContext, scope: Scope, call: cst.Call) -> bool:
    """Whether the softmax result is sampled from in its function (`torch.multinomial`)."""
    policy = Policy(
        seed=lambda node, flow: node is call,
        sink=lambda node, flow: "multinomial" if is_multinomial(ctx, node) else None,
    )
    return bool(analyse(scope, policy).hits)
