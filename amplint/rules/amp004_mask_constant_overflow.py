"""AMP004: attention masks built from hand-written constants (case 4)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.rule import Bad, Good, Rule, Verdict
from amplint.runtime.chains import half_precision_verdict
from amplint.static.attention import is_softmax
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.patterns import (
    argument,
    function_call,
    is_fp32_dtype,
    is_upcast,
    lineage,
    method_call,
)
from amplint.static.precision import autocast_region_of, holds_float32
from amplint.static.scopes import Scope, scopes_holding, walk

FP16_MAX = 65504.0
# Magnitudes from here on round to inf in float16 (65504 plus half a unit in the last place).
FP16_OVERFLOW = 65520.0
BF16_MAX = 3.3895313892515355e38
# Below FP16_MAX, but a score of -16 or less added to it rounds to -inf in float16.
FP16_EDGE = 60000.0
_FINFO_MIN = {
    "torch.float16": -FP16_MAX,
    "torch.half": -FP16_MAX,
    "torch.bfloat16": -BF16_MAX,
    "torch.float32": -3.4028234663852886e38,
    "torch.float": -3.4028234663852886e38,
    "torch.float64": -1.7976931348623157e308,
    "torch.double": -1.7976931348623157e308,
    "numpy.float16": -FP16_MAX,
    "numpy.float32": -3.4028234663852886e38,
    "numpy.float64": -1.7976931348623157e308,
}
_INF_NAMES = frozenset({"math.inf", "torch.inf", "numpy.inf", "numpy.Inf", "numpy.PINF"})
_TENSOR_OF_SCALAR = frozenset({"torch.tensor", "torch.scalar_tensor", "torch.as_tensor"})
_MASKED_FILL = frozenset({"masked_fill", "masked_fill_"})
_FULL_FUNCTIONS = frozenset({"torch.full", "torch.full_like"})
_DTYPE_NAMES = frozenset({"float16", "half", "bfloat16", "float32", "float", "float64", "double"})
# A mask built from positions (causal, sliding-window, chunked, block-diagonal) keeps the diagonal,
# so no row is ever masked whole; a padding mask can mask a whole row.
_STRUCTURAL = re.compile(
    r"(causal|future|triu|tril|upper|lower|diag|look_?ahead|subsequent|autoregressive|strict|^ltr$|"
    r"segsum|window|chunk|band)",
    re.IGNORECASE,
)
_PADDING = re.compile(r"(pad|attention_mask|attn_mask|key_mask|valid|length|lens$|token_mask)", re.IGNORECASE)
_LENGTHS = re.compile(r"(length|lens$)", re.IGNORECASE)
# Words with which a module shows that its masks can cover whole rows (it computes or repairs them).
_FULL_ROW_WORDS = frozenset(
    {"all_masked_rows", "fully_masked", "fully_masked_rows", "_unmask_unattended", "unmask_unattended"}
)
_POSITIONS = re.compile(r"(arange|position|^pos|idx|index|^i$|^j$)", re.IGNORECASE)
_DTYPE_TEST = re.compile(r"(dtype|float16|half|bfloat16|fp16|bf16|is_fp)")
_MASK_NAME = re.compile(r"(mask|pad|bias)", re.IGNORECASE)
_ATTENTION_KEYWORDS = frozenset({"attn_mask", "attention_mask", "attn_bias", "mask"})
# A mask computed relative to a row's maximum or top-k keeps at least that entry.
_KEEPS_ONE = frozenset({"max", "amax", "topk", "argmax", "kthvalue", "sort"})


@dataclass(frozen=True)
class _Site:
    """A mask value written into a tensor: `node` is the call or product, `value` the constant's
    expression, `tensor` the tensor it masks (None when only constants are involved)."""

    node: cst.CSTNode
    kind: str  # "masked_fill", "where", "product", "full"
    value: cst.BaseExpression
    number: float
    tensor: cst.BaseExpression | None
    mask: cst.BaseExpression | None


if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class MaskConstantOverflow(Rule):
    """
    ## What it does
    Flags attention masks built from hand-written constants that do not survive half precision:
    `masked_fill`, `torch.where`, `torch.full` and additive masks (`(1 - mask) * -1e9`) with values
    beyond the float16 range (`-1e9`, `-1e10`, `-1e30`, `torch.finfo(torch.float32).min`), float16's
    own minimum in an additive mask (`-65504`), and `-inf` in a mask that can cover a whole row before
    a softmax. Left alone: masks of float32 (or bfloat16) tensors, constants chosen per dtype, `-1e4`
    and `-10000`, additive masks that stay float32, and `-inf` in causal, windowed or top-k masks
    (they keep every row's diagonal or maximum), in key-padding masks (`mask[:, None, None, :]`, masks
    from lengths: a whole row only for an empty input), in a mask the caller passes in (flagged only
    where the module shows that rows can be masked whole), or when the NaN is masked away after
    the softmax.

    ## Why is this bad?
    float16's largest finite value is 65504. `scores.masked_fill(mask, -1e9)` on float16 scores
    raises "value cannot be converted to type c10::Half without overflow"; `torch.where`, `torch.full`,
    arithmetic and casts turn the same constant into `-inf` without a word. `torch.finfo(torch.float32).min`
    overflows bfloat16 as well (its largest value is 3.39e38, float32's 3.40e38). A row whose every
    entry is `-inf` has no finite maximum, and softmax returns NaN for it: the finite constant the
    author chose to keep fully masked rows finite (padded query rows, left padding under a causal
    mask) is gone, and the NaN spreads through the next layer's values. A `-inf` padding mask does
    the same in every dtype. Adding `-65504` fits, but adding it to a score of -16 or less rounds to
    `-inf` in float16.

    ## Example
    ```python
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(attention_mask == 0, -1e9)
    probs = scores.softmax(dim=-1)
    ```

    ## Fix
    Use the most negative value of the scores' own dtype:
    ```python
    scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
    ```
    Build additive masks in the dtype they are added in, from `torch.finfo(dtype).min`, as
    transformers does.

    ## References
    - `torch.finfo`: https://pytorch.org/docs/stable/type_info.html
    - transformers' masks: `torch.finfo(dtype).min` instead of `-1e9` / `-10000.0`
    """

    code = "AMP004"
    name = "mask-constant-overflow"
    summary = (
        "attention mask built from -1e9, finfo(float32).min, -65504 or a padding -inf that overflows or NaNs"
    )
    triggers = frozenset(
        # -65504 has no word of its own; code that writes it says float16 somewhere.
        {"inf", "Inf", "finfo", "masked_fill", "masked_fill_", "float16", "half", "fp16"}
        | {f"{e}{n}" for e in "eE" for n in range(5, 100)}
        | {f"{e}{n:02d}" for e in "eE" for n in range(5, 10)}
    )
    # A hazardous constant: `-inf`, `finfo`, a number of five digits or with an exponent.
    region_words = frozenset({"inf", "Inf", "finfo", "masked_fill", "masked_fill_"})
    region_pattern = re.compile(r"\d{5}|\d\.?[eE]\+?\d")

    bad = (
        Bad(
            """\
import math
import torch


def attend(q, k, v, attention_mask):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(attention_mask == 0, -1e9)
    return scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype) @ v
""",
            fixed="""\
import math
import torch


def attend(q, k, v, attention_mask):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype) @ v
""",
        ),
        Bad(
            """\
import torch
import torch.nn.functional as F


def attend(scores, padding_mask):
    pair_mask = padding_mask[:, :, None] & padding_mask[:, None, :]
    scores = scores.masked_fill(~pair_mask[:, None], float("-inf"))
    return F.softmax(scores, dim=-1)
""",
            fixed="""\
import torch
import torch.nn.functional as F


def attend(scores, padding_mask):
    pair_mask = padding_mask[:, :, None] & padding_mask[:, None, :]
    scores = scores.masked_fill(~pair_mask[:, None], torch.finfo(scores.dtype).min)
    return F.softmax(scores, dim=-1)
""",
        ),
        Bad(
            """\
from torch import nn


def attend(self, attn_weights, mask):
    attn_weights.masked_fill_(mask, -1e10)
    return nn.functional.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
""",
            fixed="""\
import torch
from torch import nn


def attend(self, attn_weights, mask):
    attn_weights.masked_fill_(mask, torch.finfo(attn_weights.dtype).min)
    return nn.functional.softmax(attn_weights.float(), dim=-1).type_as(attn_weights)
""",
        ),
        Bad(
            """\
import torch


def attend(scores, mask):
    scores = torch.where(mask, scores, torch.finfo(torch.float32).min)
    return torch.softmax(scores.float(), dim=-1)
""",
            fixed="""\
import torch


def attend(scores, mask):
    scores = torch.where(mask, scores, torch.finfo(scores.dtype).min)
    return torch.softmax(scores.float(), dim=-1)
""",
        ),
        Bad(
            """\
import torch


def extend_mask(encoder_attention_mask, encoder_hidden_states):
    return torch.where(encoder_attention_mask > 0, 0, -1e10).to(encoder_hidden_states.dtype)
"""
        ),
        Bad(
            """\
import torch


def local_attention(scores, position_bias, mask):
    mask = torch.where(mask > 0, 0.0, -1e10)
    position_bias = position_bias + mask.transpose(1, 2)
    scores += position_bias
    return torch.softmax(scores.float(), dim=-1).type_as(scores)
"""
        ),
        Bad(
            """\
import torch


def extended_mask(attention_mask, dtype=torch.float16):
    attention_mask = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - attention_mask) * -65504.0
"""
        ),
        Bad(
            """\
import torch


def additive(attention_mask):
    return (1 - attention_mask.float()) * float("-inf")
"""
        ),
    )
    good = (
        Good(
            """\
import torch


def attend(scores, attention_mask):
    scores = scores.masked_fill(attention_mask == 0, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1, dtype=torch.float32)
""",
            "the dtype's own minimum: finite in every dtype",
        ),
        Good(
            """\
import torch


def attend(sim, mask):
    sim = sim.masked_fill((1 - mask).bool(), -1e4)
    return sim.softmax(dim=-1)
""",
            "-1e4 fits float16 (evolla, pp_doclayout); transformers' old `-10000.0` masks likewise",
        ),
        Good(
            """\
import torch


def extended_mask(attention_mask, hidden_states):
    return (1 - attention_mask.to(hidden_states.dtype)) * -10000.0
""",
            "an additive -10000 mask fits float16 (diffusers' UNets and transformers)",
        ),
        Good(
            """\
import torch


def attend(q, k, v):
    n = q.size(-2)
    scores = q @ k.transpose(-2, -1)
    causal = torch.triu(torch.ones(n, n, dtype=torch.bool, device=q.device), diagonal=1)
    scores = scores.masked_fill(causal, float("-inf"))
    return scores.softmax(dim=-1) @ v
""",
            "a causal mask keeps the diagonal, so no row is all -inf",
        ),
        Good(
            """\
import torch


def route(self, router_logits):
    scores_for_choice = router_logits.sigmoid()
    group_mask = self.group_mask(scores_for_choice)
    score_mask = group_mask.unsqueeze(-1).expand(-1, -1, 8).reshape(scores_for_choice.shape[0], -1)
    scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
    return torch.topk(scores_for_choice, k=8, dim=-1, sorted=False)[1]
""",
            "-inf before `topk`, `max` or `exp`, not softmax (MoE group routing, Mamba2 segsum, "
            "gated-delta decays)",
        ),
        Good(
            """\
import torch


def attend(self, score, attention_mask):
    score = torch.masked_fill(score, attention_mask == torch.tensor(False), float("-inf"))
    score = self.softmax(score)
    score = torch.masked_fill(score, attention_mask == torch.tensor(False), 0.0)
    return score
""",
            "the NaN of fully masked rows is masked back to zero after the softmax (cpmant)",
        ),
        Good(
            """\
import torch


def attend(attn_weights, text_attention_mask, num_heads):
    mask = text_attention_mask[:, None, None, :].repeat(1, num_heads, 1, 1).flatten(0, 1)
    attn_weights.masked_fill_(mask, float("-inf"))
    return attn_weights.softmax(dim=-1)
""",
            "a key-padding mask (`[:, None, None, :]`) masks a whole row only for an input that is all "
            "padding (grounding-dino, esmfold)",
        ),
        Good(
            """\
import torch
import torch.nn.functional as F


def pool(self, attention, lengths, seq_length):
    mask = self._length_to_mask(lengths * seq_length, max_len=seq_length).unsqueeze(1)
    attention = attention.masked_fill(mask == 0, float("-inf"))
    return F.softmax(attention, dim=2)
""",
            "a mask from per-sequence lengths masks keys only (qwen2.5-omni's ECAPA pooling)",
        ),
        Good(
            """\
import torch
from torch import nn


def attend(attn_weights, attention_mask):
    if attention_mask.dtype == torch.bool:
        attention_mask = torch.zeros_like(attention_mask, dtype=attn_weights.dtype).masked_fill_(
            attention_mask, -torch.inf
        )
    attn_weights = attn_weights + attention_mask
    return nn.functional.softmax(attn_weights, dim=-1)
""",
            "a boolean mask from the caller made additive with -inf, PyTorch's own convention "
            "(nn.MultiheadAttention): whether it masks whole rows is the caller's to say "
            "(table-transformer, ChatGLM); flagged only in a module that computes fully masked rows",
        ),
        Good(
            """\
import torch


def sparsemixer(scores, jitter_eps):
    threshold, max_ind = scores.max(dim=-1, keepdim=True)
    factor = scores.abs().clamp(min=threshold)
    mask = ((threshold - scores) / factor) > (2 * jitter_eps)
    masked_gates = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(masked_gates, dim=-1)
""",
            "a mask relative to the row maximum keeps the maximum (phimoe's sparsemixer router)",
        ),
        Good(
            """\
import torch


def bias(query, token_valid_mask):
    query = query.float()
    if query.dtype == torch.float32:
        query = query.bfloat16()
    return torch.where(
        token_valid_mask,
        torch.zeros((), dtype=query.dtype),
        torch.full((), -1e9, dtype=query.dtype),
    )
""",
            "-1e9 fits bfloat16 (the Sana world-model refiner casts to bf16 first)",
        ),
        Good(
            """\
import torch


def attend(attn_score, attn_mask):
    if attn_mask.dtype == torch.float16:
        attn_score = attn_score - 65500 * attn_mask
    else:
        attn_score = attn_score - 1e30 * attn_mask
    return torch.softmax(attn_score, dim=-1)
""",
            "a constant chosen per dtype (xlnet, flaubert, reformer)",
        ),
        Good(
            """\
import torch


def mask(self, attention_mask):
    attention_mask = attention_mask.float().masked_fill(~attention_mask, -1e9)
    return self.layer(attention_mask)
""",
            "masking a float32 tensor: -1e9 fits (eomt)",
        ),
        Good(
            """\
import torch


def init_state(key):
    return torch.zeros_like(key[:, 0], dtype=torch.float32) - 1e38
""",
            "a float32 running maximum, not a mask (rwkv)",
        ),
    )

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the mask is applied in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        candidates = [node for node in _candidate_nodes(ctx) if _quick_value(ctx, node)]
        if not candidates:
            return
        nodes = set(candidates)
        for scope in scopes_holding(ctx, candidates):
            yield from _check_scope(ctx, scope, nodes)


# -- constants -------------------------------------------------------------------------------


def numeric_value(
    ctx: FileContext, node: cst.BaseExpression | None, flow: Flow | None = None, depth: int = 0
) -> float | None:
    """The number a constant expression stands for: a literal, `-x`, `float("-inf")`, `math.inf`,
    `torch.finfo(torch.float32).min`, `torch.tensor(c)`, or a name bound to one of these (in the
    function, or at module level). None for anything that is not a constant."""
    if node is None or depth > 4:
        return None
    if isinstance(node, (cst.Integer, cst.Float)):
        return float(node.evaluated_value)
    if isinstance(node, cst.UnaryOperation):
        inner = numeric_value(ctx, node.expression, flow, depth + 1)
        if inner is None:
            return None
        if isinstance(node.operator, cst.Minus):
            return -inner
        return inner if isinstance(node.operator, cst.Plus) else None
    if isinstance(node, cst.Call):
        return _call_value(ctx, node, flow, depth)
    if isinstance(node, cst.Attribute):
        return _attribute_value(ctx, node)
    if isinstance(node, cst.Name):
        bound: cst.CSTNode | None = None
        if flow is not None and flow.history.get(node.value):
            bound = flow.history[node.value][-1]
        elif flow is None or node.value not in flow.env:
            bound = module_constants(ctx).get(node.value)
        if isinstance(bound, cst.BaseExpression) and bound is not node:
            return numeric_value(ctx, bound, flow, depth + 1)
    return None


def _attribute_value(ctx: FileContext, node: cst.Attribute) -> float | None:
    if ctx.qualified(node) in _INF_NAMES:
        return math.inf
    if node.attr.value in {"min", "max"} and isinstance(node.value, cst.Call):
        finfo = node.value
        if ctx.qualified(finfo.func) in {"torch.finfo", "numpy.finfo"} and finfo.args:
            low = _FINFO_MIN.get(ctx.qualified(finfo.args[0].value) or "")
            if low is not None:
                return low if node.attr.value == "min" else -low
    return None


def _call_value(ctx: FileContext, node: cst.Call, flow: Flow | None, depth: int) -> float | None:
    if isinstance(node.func, cst.Name) and node.func.value == "float" and len(node.args) == 1:
        text = node.args[0].value
        if isinstance(text, cst.SimpleString) and isinstance(text.evaluated_value, str):
            try:
                return float(text.evaluated_value)
            except ValueError:
                return None
        return None
    if function_call(ctx, node, _TENSOR_OF_SCALAR) or (
        isinstance(node.func, cst.Attribute) and node.func.attr.value == "new_tensor"
    ):
        return numeric_value(ctx, argument(node, 0, "data"), flow, depth + 1)
    return None


def module_constants(ctx: FileContext) -> dict[str, cst.BaseExpression]:
    """`NAME = <expression>` at the top level of the module."""
    cached = ctx.memo.get("module_constants")
    if cached is None:
        constants: dict[str, cst.BaseExpression] = {}
        for statement in ctx.module.body:
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if (
                        isinstance(small, cst.Assign)
                        and len(small.targets) == 1
                        and isinstance(small.targets[0].target, cst.Name)
                    ):
                        constants[small.targets[0].target.value] = small.value
        ctx.memo["module_constants"] = cached = constants
    return cached  # type: ignore[return-value]


def _hazard(number: float) -> str | None:
    """How a mask value fares in half precision: "inf", "bf16" (overflows bfloat16 too),
    "fp16" (overflows float16), "edge" (float16's own minimum), or None (fits)."""
    magnitude = abs(number)
    if math.isinf(magnitude):
        return "inf"
    if magnitude > BF16_MAX:
        return "bf16"
    if magnitude >= FP16_OVERFLOW:
        return "fp16"
    if magnitude >= FP16_EDGE:
        return "edge"
    return None


# -- sites -----------------------------------------------------------------------------------


def _candidate_nodes(ctx: FileContext) -> Iterator[cst.CSTNode]:
    for node in ctx.index.top_of:
        if isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else None
            if name in _MASKED_FILL or name in {"where", "full", "full_like", "new_full"}:
                yield node
        elif isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            yield node


def _negated_products(ctx: FileContext) -> set[cst.CSTNode]:
    """Products subtracted from something (`scores - 1e9 * mask`): their constant masks negatively."""
    return {
        node.right
        for node in ctx.index.top_of
        if isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, cst.Subtract)
        and isinstance(node.right, cst.BinaryOperation)
        and isinstance(node.right.operator, cst.Multiply)
    }


def _quick_value(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether a call or product could write a hazardous constant, judged without dataflow."""
    for value in _values(node):
        number = numeric_value(ctx, value)
        if number is not None and _hazard(number) is not None:
            return True
        if isinstance(value, cst.Name) and isinstance(node, cst.Call):
            return True  # maybe bound to a constant inside the function
    return False


def _values(node: cst.CSTNode) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation):
        return [node.left, node.right]
    assert isinstance(node, cst.Call)
    name = node.func.attr.value if isinstance(node.func, cst.Attribute) else ""
    positional = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
    if name in _MASKED_FILL:
        value = argument(node, 1, "value")
        return [value] if value is not None else positional[2:3]
    if name == "where":
        return positional[1:3]
    value = argument(node, 1, "fill_value")
    return [value] if value is not None else []


def _site(ctx: FileContext, node: cst.CSTNode, flow: Flow, negated: bool) -> _Site | None:
    value: cst.BaseExpression | None
    other: cst.BaseExpression | None
    if isinstance(node, cst.BinaryOperation):
        for value, other in ((node.left, node.right), (node.right, node.left)):
            number = numeric_value(ctx, value, flow)
            if (
                number is not None
                and other is not None
                and numeric_value(ctx, other, flow) is None
                and _mask_like(other)
            ):
                return _Site(node, "product", value, -number if negated else number, other, other)
        return None
    assert isinstance(node, cst.Call)
    func = node.func
    name = func.attr.value if isinstance(func, cst.Attribute) else ""
    qualified = ctx.qualified(func)
    tensor: cst.BaseExpression | None
    if name in _MASKED_FILL:
        receiver = method_call(ctx, node, _MASKED_FILL)
        if qualified == "torch.masked_fill":
            tensor, mask, value = (
                argument(node, 0, "input"),
                argument(node, 1, "mask"),
                argument(node, 2, "value"),
            )
        elif receiver is not None:
            tensor, mask, value = receiver, argument(node, 0, "mask"), argument(node, 1, "value")
        else:
            return None
        number = numeric_value(ctx, value, flow)
        if number is None or value is None:
            return None
        return _Site(node, "masked_fill", value, number, tensor, mask)
    if name == "where":
        first: cst.BaseExpression | None
        if qualified == "torch.where":
            condition = argument(node, 0, "condition")
            first, second = argument(node, 1, "input"), argument(node, 2, "other")
        elif (receiver := method_call(ctx, node, frozenset({"where"}))) is not None:
            condition, first, second = argument(node, 0, "condition"), receiver, argument(node, 1, "other")
        else:
            return None
        for value, other in ((second, first), (first, second)):
            number = numeric_value(ctx, value, flow)
            if number is not None and value is not None and _hazard(number) is not None:
                tensor = None if numeric_value(ctx, other, flow) is not None else other
                return _Site(node, "where", value, number, tensor, condition)
        return None
    if qualified in _FULL_FUNCTIONS or name == "new_full":
        value = argument(node, 1, "fill_value")
        number = numeric_value(ctx, value, flow)
        if number is None or value is None:
            return None
        tensor = argument(node, 0, "input") if qualified == "torch.full_like" else None
        if name == "new_full" and isinstance(func, cst.Attribute):
            tensor = func.value
        return _Site(node, "full", value, number, tensor, None)
    return None


def _mask_like(node: cst.BaseExpression) -> bool:
    """An operand that holds a 0/1 mask: named so, or `1 - x`."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
        return isinstance(node.left, (cst.Integer, cst.Float))
    for child in walk(node):
        if isinstance(child, cst.Name) and _MASK_NAME.search(child.value):
            return True
        if isinstance(child, cst.Attribute) and _MASK_NAME.search(child.attr.value):
            return True
    return False


# -- scopes ----------------------------------------------------------------------------------


def _dtype_dispatched(scope: Scope) -> set[int]:
    """Nodes inside an `if` that tests a dtype: a constant chosen per dtype on purpose."""
    inside: set[int] = set()
    for statement in scope.body:
        for node in walk(statement):
            if isinstance(node, cst.If) and _DTYPE_TEST.search(_words(node.test)):
                inside.update(id(child) for child in walk(node))
    return inside


def _words(node: cst.CSTNode) -> str:
    return " ".join(
        child.value if isinstance(child, cst.Name) else child.attr.value
        for child in walk(node)
        if isinstance(child, (cst.Name, cst.Attribute))
    )


# -- judging ---------------------------------------------------------------------------------


def _check_scope(ctx: FileContext, scope: Scope, nodes: set[cst.CSTNode]) -> Iterator[Finding]:
    negated = _negated_products(ctx) & nodes
    sites: dict[cst.CSTNode, _Site] = {}
    facts: dict[cst.CSTNode, set[str]] = {}
    armed: dict[str, cst.CSTNode] = {}
    origin_site: dict[cst.CSTNode, cst.CSTNode] = {}

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if node in nodes and node not in sites:
            site = _site(ctx, node, flow, node in negated)
            if site is not None and _hazard(site.number) is not None:
                sites[node] = site
                facts[node] = _facts(ctx, scope, site, flow)
                origin_site[node] = node
                if (
                    isinstance(node, cst.Call)
                    and isinstance(node.func, cst.Attribute)
                    and node.func.attr.value == "masked_fill_"
                    and isinstance(site.tensor, cst.Name)
                ):
                    armed[site.tensor.value] = node
                return True
        if isinstance(node, cst.Name) and node.value in armed:
            origin_site[node] = armed[node.value]
            return True
        return False

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if is_softmax(ctx, node):
            return "softmax"
        if not isinstance(node, cst.Call):
            return None
        if any(arg.keyword is not None and arg.keyword.value in _ATTENTION_KEYWORDS for arg in node.args):
            return "softmax"
        if dtype_cast(ctx, node) and not is_upcast(ctx, node) and not _bf16_cast(ctx, node):
            return "cast"
        return None

    def added_in_place(name: str, value: cst.CSTNode) -> bool:
        return isinstance(value, cst.AugAssign) and isinstance(
            value.operator, (cst.AddAssign, cst.SubtractAssign)
        )

    flow = analyse(scope, Policy(seed=seed, sink=sink, name_sink=added_in_place))
    for hit in flow.hits.values():
        site_node = origin_site.get(hit.origin)
        if site_node is not None:
            facts[site_node].add(hit.label if hit.kind == "call" else "in_place")
    dispatched: set[int] | None = None
    for node, site in sites.items():
        hazard = _hazard(site.number)
        if hazard == "inf":
            finding = _infinite(ctx, scope, site, facts[node])
        else:
            if site.number > 0 or "fp32" in facts[node]:
                continue
            if hazard != "bf16" and ("bf16" in facts[node] or _bf16_autocast(ctx, node)):
                continue
            if dispatched is None:
                dispatched = _dtype_dispatched(scope)
            if id(node) in dispatched:
                continue
            finding = _finite(ctx, scope, site, hazard, facts[node])
        if finding is not None:
            yield finding


def _parameters(function: cst.FunctionDef) -> frozenset[str]:
    params = function.params
    every = [*params.posonly_params, *params.params, *params.kwonly_params]
    for star in (params.star_arg, params.star_kwarg):
        if isinstance(star, cst.Param):
            every.append(star)
    return frozenset(param.name.value for param in every)


def _facts(ctx: FileContext, scope: Scope, site: _Site, flow: Flow) -> set[str]:
    """What the code says about a site where it stands (names mean what they mean at that line)."""
    facts: set[str] = set()
    tensor = site.tensor
    if site.kind == "full":
        dtype = argument(site.node, None, "dtype") if isinstance(site.node, cst.Call) else None
        if dtype is not None:
            if is_fp32_dtype(ctx, dtype):
                facts.add("fp32")
            elif _is_bf16_dtype(ctx, dtype, flow):
                facts.add("bf16")
            else:
                facts.add("cast")
        elif tensor is None:
            facts.add("fp32")  # `torch.full` without a dtype: the default dtype, float32
    function = scope.node if isinstance(scope.node, cst.FunctionDef) else None
    if tensor is not None:
        if holds_float32(ctx, tensor, flow, function):
            facts.add("fp32")
        elif _is_bf16_value(ctx, tensor, flow):
            facts.add("bf16")
        elif site.kind in {"product", "full"} and _cast_to_model_dtype(ctx, tensor, flow):
            facts.add("cast")
    if site.mask is not None:
        if _structural(ctx, site.mask, flow):
            facts.add("structural")
        if _key_only(site.mask, flow):
            facts.add("key_only")
        if isinstance(scope.node, cst.FunctionDef) and _from_caller(site.mask, flow, _parameters(scope.node)):
            facts.add("from_caller")
    return facts


def _lineages(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> Iterator[list[cst.CSTNode]]:
    """The lineage of every name and call in an expression (`1.0 - mask` follows `mask`)."""
    for child in walk(node):
        if isinstance(child, (cst.Name, cst.Call)):
            yield list(lineage(ctx, child, flow))


def _cast_to_model_dtype(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """The value was cast to a dtype other than float32 (`mask.to(dtype)`, `.half()`, `.type_as(x)`)."""
    for steps in _lineages(ctx, node, flow):
        for step in steps:
            if is_upcast(ctx, step):
                break
            if isinstance(step, cst.Call) and dtype_cast(ctx, step):
                return True
    return False


def dtype_cast(ctx: FileContext, node: cst.Call) -> bool:
    """`.half()`, `.type_as(x)`, `.to(dtype)`, `.to(x.dtype)`, `.to(torch.float16)`; not `.to(device)`."""
    func = node.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value in {"half", "bfloat16", "type_as"}:
        return True
    if func.attr.value not in {"to", "type"}:
        return False
    for arg in node.args:
        if arg.keyword is not None:
            if arg.keyword.value == "dtype":
                return True
            continue
        value = arg.value
        qualified = ctx.qualified(value) or ""
        if qualified.startswith("torch.") and qualified.split(".")[-1] in _DTYPE_NAMES:
            return True
        if isinstance(value, cst.Attribute) and value.attr.value == "dtype":
            return True
        if isinstance(value, cst.Name) and "dtype" in value.value:
            return True
        if isinstance(value, cst.Name) and ctx.qualified(value) is None and value.value not in {"device"}:
            # another tensor: `.to(other)` takes its dtype
            return "device" not in value.value
    return False


def _is_bf16_dtype(ctx: FileContext, dtype: cst.BaseExpression, flow: Flow) -> bool:
    if ctx.qualified(dtype) == "torch.bfloat16":
        return True
    return (
        isinstance(dtype, cst.Attribute)
        and dtype.attr.value == "dtype"
        and _is_bf16_value(ctx, dtype.value, flow)
    )


def _bf16_cast(ctx: FileContext, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    if node.func.attr.value == "bfloat16":
        return True
    return node.func.attr.value in {"to", "type"} and any(
        ctx.qualified(arg.value) == "torch.bfloat16" for arg in node.args
    )


def _is_bf16_value(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """The value was last cast to bfloat16 (`q = q.bfloat16()`), where -1e9 fits."""
    for step in lineage(ctx, node, flow):
        if _bf16_cast(ctx, step):
            return True
        if isinstance(step, cst.Call) and (dtype_cast(ctx, step) or is_upcast(ctx, step)):
            return False
    return False


def _bf16_autocast(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Inside `torch.autocast(..., dtype=torch.bfloat16)`, where -1e9 fits."""
    region = autocast_region_of(ctx, node)
    return region is not None and region.enabled and region.dtype == "bfloat16"


def _structural(ctx: FileContext, mask: cst.BaseExpression, flow: Flow, depth: int = 0) -> bool:
    """Whether a mask keeps at least one entry of every row: built from positions only (causal,
    windowed, chunked), or relative to the row's maximum or top-k. A mask that mentions padding or
    attention masks can cover a whole row."""
    found = False
    for node in walk(mask):
        if isinstance(node, (cst.Name, cst.Attribute)):
            word = node.value if isinstance(node, cst.Name) else node.attr.value
            if _PADDING.search(word):
                return False
            if _STRUCTURAL.search(word):
                found = True
            elif isinstance(node, cst.Name) and depth < 3:
                for bound in flow.history.get(node.value, [])[-3:]:
                    if isinstance(bound, cst.BaseExpression) and bound is not mask:
                        if _padding_in(bound):
                            return False
                        found = found or _structural(ctx, bound, flow, depth + 1)
        elif (isinstance(node, cst.Comparison) and _positional_comparison(node)) or (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and node.func.attr.value in _KEEPS_ONE
        ):
            found = True
    return found


def _key_only(mask: cst.BaseExpression, flow: Flow, depth: int = 0) -> bool:
    """A padding mask broadcast over keys only (`mask[:, None, None, :]`, `.view(b, 1, 1, k)`):
    it masks a whole row only for an input that is all padding."""
    inserted = 0
    for node in walk(mask):
        if isinstance(node, cst.Subscript):
            inserted = max(
                inserted,
                sum(
                    isinstance(e.slice, cst.Index)
                    and isinstance(e.slice.value, cst.Name)
                    and e.slice.value.value == "None"
                    for e in node.slice
                ),
            )
        elif isinstance(node, cst.Call) and _LENGTHS.search(_callee(node)):
            return True  # a mask from per-sequence lengths masks keys only
        elif isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
            method = node.func.attr.value
            if method in {"view", "reshape", "expand"}:
                ones = sum(isinstance(arg.value, cst.Integer) and arg.value.value == "1" for arg in node.args)
                inserted = max(inserted, ones)
            elif method == "unsqueeze" and isinstance(node.func.value, cst.Call):
                inner = node.func.value.func
                if isinstance(inner, cst.Attribute) and inner.attr.value == "unsqueeze":
                    inserted = max(inserted, 2)
        elif isinstance(node, cst.Name) and depth < 2:
            for bound in flow.history.get(node.value, [])[-2:]:
                if (
                    isinstance(bound, cst.BaseExpression)
                    and bound is not mask
                    and _key_only(bound, flow, depth + 1)
                ):
                    return True
    return inserted >= 2


def _callee(node: cst.Call) -> str:
    func = node.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def _from_caller(mask: cst.BaseExpression, flow: Flow, parameters: frozenset[str], depth: int = 0) -> bool:
    """Whether a mask is the caller's (a parameter, compared, negated, indexed or cast), so that its
    shape, and whether it masks query rows, is decided outside this function. A default built
    from constructors (`torch.ones(...).tril_()`) when the caller passes none counts as the caller's;
    masks combined here (`pad[:, :, None] & pad[:, None, :]`) do not."""
    for node in walk(mask):
        if isinstance(node, (cst.BinaryOperation, cst.BooleanOperation)) and not any(
            isinstance(side, (cst.Integer, cst.Float)) for side in (node.left, node.right)
        ):
            return False
        if not isinstance(node, cst.Name) or node.value in parameters or node.value in {"self", "torch"}:
            continue
        bindings = flow.history.get(node.value)
        if not bindings:
            continue
        if depth >= 2:
            return False
        for bound in bindings:
            if (
                isinstance(bound, cst.BaseExpression)
                and bound is not mask
                and not _from_caller(bound, flow, parameters, depth + 1)
            ):
                return False
    return True


def _padding_in(node: cst.BaseExpression) -> bool:
    return any(
        isinstance(child, cst.Name) and _PADDING.search(child.value) is not None for child in walk(node)
    )


def _positional_comparison(node: cst.Comparison) -> bool:
    sides = [node.left, *(target.comparator for target in node.comparisons)]
    return len(sides) == 2 and all(
        any(isinstance(n, cst.Name) and _POSITIONS.search(n.value) for n in walk(side))
        or any(isinstance(n, cst.Attribute) and _POSITIONS.search(n.attr.value) for n in walk(side))
        for side in sides
    )


def _cleaned_up(ctx: FileContext, scope: Scope, site: _Site) -> bool:
    """The NaN of fully masked rows is removed after the softmax: `nan_to_num`, or the same mask
    applied again with 0."""
    mask_code = ctx.code(site.mask) if site.mask is not None else None
    for statement in scope.body:
        for node in walk(statement):
            if not isinstance(node, cst.Call) or node is site.node:
                continue
            name = node.func.attr.value if isinstance(node.func, cst.Attribute) else ""
            if name in {"nan_to_num", "nan_to_num_"}:
                return True
            if name in _MASKED_FILL and mask_code is not None:
                is_function = ctx.qualified(node.func) == "torch.masked_fill"
                mask = argument(node, 1 if is_function else 0, "mask")
                value = argument(node, 2 if is_function else 1, "value")
                number = numeric_value(ctx, value)
                if mask is not None and ctx.code(mask) == mask_code and number == 0.0:
                    return True
    return False


_NAN_ROWS = "a fully masked row of -inf gives NaN in softmax"


def _infinite(ctx: FileContext, scope: Scope, site: _Site, facts: set[str]) -> Finding | None:
    if site.kind == "product":
        return Finding(
            site.node,
            "multiplying a 0/1 mask by infinity gives NaN wherever the mask is 0 (`0 * inf` is NaN), in "
            "every dtype",
            help="build the mask with `torch.where(mask, 0.0, torch.finfo(dtype).min)` or "
            "`masked_fill` instead of a product",
        )
    if site.number > 0 or site.kind == "full" or "softmax" not in facts:
        return None
    if facts & {"structural", "key_only"} or _cleaned_up(ctx, scope, site):
        return None
    if "from_caller" in facts and not ctx.words & _FULL_ROW_WORDS:
        # Whether the caller's mask covers query rows (padding on both axes, left padding under a
        # causal mask) or keys only cannot be seen here; flag it where the module shows it does.
        return None
    return _with_fix(
        ctx,
        site,
        "a `-inf` padding mask before softmax turns every row it masks whole (a padded query row, left "
        "padding under a causal mask) into NaN, in every dtype",
    )


def _finite(
    ctx: FileContext, scope: Scope, site: _Site, hazard: str | None, facts: set[str]
) -> Finding | None:
    shown = ctx.code(site.value)
    beyond = (
        "beyond the float16 and bfloat16 range (largest finite values 65504 and 3.39e38)"
        if hazard == "bf16"
        else "beyond the float16 range (largest finite value 65504)"
    )
    if site.kind == "masked_fill":
        if hazard == "edge":
            return None
        return _with_fix(
            ctx,
            site,
            f"`masked_fill` with `{shown}`, {beyond}: on a float16 tensor it raises 'value cannot be "
            "converted to type c10::Half without overflow'",
        )
    if site.kind == "where" and site.tensor is not None:
        if hazard == "edge" or facts & {"structural", "key_only"} or _cleaned_up(ctx, scope, site):
            return None
        return _with_fix(
            ctx, site, f"`torch.where` with `{shown}`, {beyond}, gives -inf in float16: {_NAN_ROWS}"
        )
    if not facts & {"cast", "in_place"}:
        return None  # built in float32 and never cast: it stays finite
    if hazard == "edge":
        return Finding(
            site.node,
            f"an additive mask of `{shown}` (about float16's minimum) rounds to -inf when a score of -16 or "
            f"less is added to it in float16: {_NAN_ROWS}",
            help="build the mask from `torch.finfo(dtype).min` and add it in float32, or use a value "
            "with headroom such as -1e4",
        )
    return Finding(
        site.node,
        f"a mask value of `{shown}`, {beyond}, becomes -inf once the mask is float16 (cast, built in that "
        f"dtype, or added in place to float16 scores): {_NAN_ROWS}",
        help="build the mask in the dtype it is added in, from `torch.finfo(dtype).min`",
    )


def _with_fix(ctx: FileContext, site: _Site, message: str) -> Finding:
    """A finding whose fix puts `torch.finfo(<tensor>.dtype).min` in place of the constant, when the
    masked tensor is a plain name or attribute (cheap to name twice)."""
    tensor = site.tensor
    plain = isinstance(tensor, (cst.Name, cst.Attribute)) and not tensor.lpar
    replaced = None
    if plain and isinstance(site.node, cst.Call):
        torch, missing = ctx.torch_name()
        dtype = cst.Attribute(value=tensor.with_changes(lpar=[], rpar=[]), attr=cst.Name("dtype"))  # type: ignore[union-attr]
        replacement = cst.Attribute(
            value=cst.Call(
                func=cst.Attribute(value=torch, attr=cst.Name("finfo")), args=[cst.Arg(value=dtype)]
            ),
            attr=cst.Name("min"),
        )
        args = [
            arg.with_changes(value=replacement) if arg.value is site.value else arg for arg in site.node.args
        ]
        if any(arg.value is replacement for arg in args):
            replaced = site.node.with_changes(args=args)
    if replaced is None:
        return Finding(site.node, message, help="use `torch.finfo(<scores>.dtype).min`")
    shown = ctx.code(replacement)
    return Finding(
        site.node,
        message,
        fix=FixPlan(f"Mask with `{shown}`", ((site.node, replaced),), missing),
        help=f"mask with `{shown}`",
    )
