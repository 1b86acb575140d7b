"""AMP002: the Qwen2 fp16 eager-attention overflow (case 2)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import Confidence, Diagnostic
from amplint.rule import Rule, Verdict
from amplint.runtime.chains import (
    SOFTMAX,
    describe_error,
    follow,
    measured_error,
    turned_by,
    where,
)
from amplint.runtime.value_walks import softmax_reading
from amplint.static.attention import (
    REGION_PATTERN,
    REGION_WORDS,
    is_softmax,
    local_callee,
    normalized_before,
    scaled_before,
    scaled_inside,
    score_operands,
    scores_returned_by,
    softmax_callees,
)
from amplint.static.context import FileContext, Finding, scopes_holding
from amplint.static.facts import why_half
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.ops import F16
from amplint.static.patterns import function_call, method_call
from amplint.static.scopes import walk

# Clipping or soft-capping (`tanh(s / c) * c`) after the product maps inf back to a finite value
# before softmax sees it.
_CLIP_FUNCTIONS = frozenset({"torch.clamp", "torch.clip", "torch.nan_to_num", "torch.tanh"})
# A layer's weight named as such (`weight`, `lm_weight`, `self.lm_head`, `embed_tokens`).
_WEIGHT = re.compile(r"(?:\w+_)?weights?|lm_head|embed_tokens|wte")
_TRANSPOSES = frozenset({"t", "T", "mT", "transpose", "permute", "contiguous"})
_CLIP_METHODS = frozenset({"clamp", "clip", "clamp_", "clip_", "nan_to_num", "nan_to_num_", "tanh"})


if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# The aten ops a score product becomes in a trace.
_TRACED_PRODUCTS = frozenset({"bmm", "mm", "baddbmm", "addmm", "matmul", "einsum"})


class HalfPrecisionAttentionScores(Rule):
    """
    ## What it does
    Flags attention scores formed as a product of queries and transposed keys (`q @ k.transpose(-2, -1)`,
    `torch.matmul`, `torch.bmm`, `baddbmm`, `einsum`, `.mT`) that feed a softmax, when the scale is
    applied after the product (or not at all) and the product may run in float16: the dtype-facts
    engine decides (an upcast, a bfloat16 autocast region or a bfloat16-only project clears it).
    Scores made by a helper of the same file (`self._scores(q, k)`) count where they are made. A
    product with a layer's weight (`hidden @ weight.t()`, `h @ self.lm_head.weight.T`) is a
    projection, such as the vocabulary logits of a language-model head, not scores: not flagged.

    Off by default (opt-in): whether the scores reach 65504 depends on the magnitudes of the
    activations, which no static pass sees. On public projects it was not written against it was
    read 25 times (precision reviews 4 to 8, docs/measured.md) and none was real: most were scores of
    normalised heads far below the limit. Turn it on with `--extend-select AMP002` or
    `extend-select = ["AMP002"]` under `[tool.amplint]`; `--deep` traces its candidates. Its hazard
    needs float16: it is reported where the project runs the code in fp16 (an execution mode found in
    its scripts, tests or configuration, named in the message); where nothing in the project does,
    the finding is conditional and shown only with `--show-conditional`
    (docs/usage.md#execution-modes).

    ## Why is this bad?
    In float16 the largest finite value is 65504. A dot product over a 128-wide head of activations
    from a bf16-trained model easily exceeds it on long inputs; the product becomes `inf`, softmax
    turns `inf - inf` into NaN, and generation degenerates (Qwen2 in fp16 with eager attention
    emits endless "!"). Multiplying by `1/sqrt(d)` after the product does not help: the overflow has
    already happened. Fused kernels (SDPA, flash-attention) scale inside the kernel and do not overflow.

    ## Example
    ```python
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(d)
    probs = scores.softmax(dim=-1)
    ```

    ## Fix
    Use `torch.nn.functional.scaled_dot_product_attention(q, k, v)`, or scale the queries before the
    product (`(q * d**-0.5) @ k.transpose(-2, -1)`), or compute the scores in float32.

    ## References
    - Qwen2 fp16 eager attention producing "!!!!": https://github.com/huggingface/transformers/issues/30568
    - `torch.nn.functional.scaled_dot_product_attention`
    """

    code = "AMP002"
    name = "half-precision-attention-scores"
    summary = "q @ k^T attention scores computed in half precision with the scale applied after the product"
    rests_on_half = True
    triggers = frozenset({"softmax", "log_softmax", "Softmax", "LogSoftmax"})
    region_words = REGION_WORDS
    region_pattern = REGION_PATTERN
    default_on = False

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        products = [node for node in nodes if node.op in _TRACED_PRODUCTS]
        if not products:
            return None
        overflowing = [node for node in products if node.dtype == "float16"]
        if overflowing:
            node = overflowing[0]
            bounds: list[DtypeNode] = []
            if all(softmax_reading(graph, n, bounds) is None for n in overflowing) and bounds:
                # Soft-capping: an overflow reaches the softmax as a finite value.
                return Verdict(
                    Confidence.REFUTED,
                    f"`{node.op}` at {where(node)} formed the scores in float16, but `{bounds[0].op}` at "
                    f"{where(bounds[0])} bounds them before the softmax, so an overflow cannot become NaN",
                )
            evidence = (
                f"`{node.op}` at {where(node)} formed the scores in float16 (largest finite value 65504)"
            )
            measured = measured_error(graph, overflowing)
            if measured is None:
                return Verdict(Confidence.CONFIRMED, evidence)
            described = describe_error(graph, measured, "computed in float32")
            return Verdict(Confidence.CONFIRMED, f"{evidence}; {described}", {"measured": measured})
        # Scores formed in bfloat16 or float32 overflow only if they become float16 before the
        # softmax: followed there.
        node = products[0]
        followed = follow(graph, products, SOFTMAX, frozenset({"float16"}))
        if followed.turned is not None:
            return Verdict(
                Confidence.CONFIRMED,
                f"`{node.op}` at {where(node)} formed the scores in {node.dtype}, {turned_by(followed.turned)}",
            )
        if followed.bite is None:
            return None
        kept = "bfloat16, whose range is float32's" if node.dtype == "bfloat16" else node.dtype
        return Verdict(
            Confidence.REFUTED,
            f"`{node.op}` at {where(node)} formed the scores in {kept}, and no float16 came before "
            f"`{followed.bite.op}` at {where(followed.bite)}",
        )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = ctx.facts.without_caller_autocast()
        judged: dict[cst.CSTNode, bool] = {}  # score product: whether its scale comes only after it

        def seed(node: cst.BaseExpression, flow: Flow) -> bool:
            operands = score_operands(ctx, node, flow)
            if operands is None:  # `self._scores(q, k)`: judged where the product is, unless scaled here
                return (
                    isinstance(node, cst.Call)
                    and bool(scores_returned_by(ctx, node))
                    and not any(scaled_before(ctx, arg.value, flow) for arg in node.args)
                )
            queries, keys, product = operands
            judged[node] = not (
                _weights(ctx, keys)
                or scaled_inside(ctx, product)
                or any(
                    scaled_before(ctx, side, flow)
                    or normalized_before(ctx, side, flow, ctx.function_of(node))
                    for side in (queries, keys)
                )
            )
            return judged[node]

        def clips(node: cst.BaseExpression, flow: Flow) -> bool:
            return (
                function_call(ctx, node, _CLIP_FUNCTIONS) or method_call(ctx, node, _CLIP_METHODS) is not None
            )

        softmaxes = [call for call in ctx.index.calls if is_softmax(ctx, call)]
        feeding = softmax_callees(ctx, softmaxes)  # `self.forward_attention(v, scores, mask)`
        handing = {call for call in ctx.index.calls if local_callee(ctx, call) in feeding}

        def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
            return "softmax" if is_softmax(ctx, node) or node in handing else None

        policy = Policy(seed=seed, sink=sink, blocks=clips)
        products: dict[cst.CSTNode, None] = {}  # reaching a softmax, in order
        unit: set[str] | None = None  # computed once a product is a candidate
        for scope in scopes_holding(ctx, [*softmaxes, *handing]):
            for hit in analyse(scope, policy).hits.values():
                products.update(dict.fromkeys(scores_returned_by(ctx, hit.origin) or [hit.origin]))
        for product in products:
            if product not in judged:  # made in a helper: judged with that function's own flow
                function = ctx.function_of(product)
                analyse(next(s for s in ctx.scopes if s.node is (function or ctx.module)), policy)
            fact = facts.of(product)
            if not judged.get(product) or not fact.may_be_fp16:
                continue
            unit = _unit_keywords(ctx) if unit is None else unit
            if _scaled_by_one(ctx, product, unit):
                continue
            fact = fact.for_dtype(F16)  # a float16 hazard: the float16 mode's evidence
            yield Finding(
                product,
                "attention scores `q @ k^T` are formed in half precision and scaled only after the "
                "product, so large logits overflow float16 (max 65504) to inf before softmax turns "
                f"them into NaN; {why_half(fact, 'fp16')}",
                help="use `torch.nn.functional.scaled_dot_product_attention`, scale the queries before "
                "the product, or compute the scores in float32",
                evidence=fact.why,
                caller_only=fact.caller,
            )


def _weights(ctx: FileContext, keys: cst.BaseExpression) -> bool:
    """Whether the transposed side is a layer's weight (`hidden @ weight.t()`,
    `matmul(h, lm_weight.t())`, `self.lm_head.weight.T`): a projection, such as the vocabulary
    logits a log-softmax reads, not query-key scores."""
    path = re.split(r"[(\[]", ctx.code(keys), maxsplit=1)[0]
    return any(_WEIGHT.fullmatch(part) for part in path.split(".") if part not in _TRANSPOSES)


def _scaled_by_one(ctx: FileContext, product: cst.CSTNode, unit: set[str]) -> bool:
    """Whether the product's function scales by 1: by a name the engine knows is 1, or a parameter
    that every call of the file's own code passes as 1 (`attention_interface(..., scaling=1.0)`).
    The callers scaled the queries themselves (Whisper, OPT, BART)."""
    function = ctx.function_of(product)
    return function is not None and any(
        isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, (cst.Multiply, cst.Divide))
        and any(
            isinstance(side, cst.Name) and (side.value in unit or ctx.facts.number(side) == 1)
            for side in (node.left, node.right)
        )
        for node in walk(function.body)
    )


def _unit_keywords(ctx: FileContext) -> set[str]:
    """Keywords that every call of the file's own code (not torch's: `F.pad(..., value=1)`) passes
    as a literal 1."""
    unit: dict[str, bool] = {}
    for call in ctx.index.calls:
        if ctx.qualified(call.func) is None:
            for arg in call.args:
                if arg.keyword is not None:
                    name = arg.keyword.value
                    value = arg.value
                    one = isinstance(value, (cst.Integer, cst.Float)) and float(value.evaluated_value) == 1
                    unit[name] = unit.get(name, True) and one
    return {name for name, always in unit.items() if always}
