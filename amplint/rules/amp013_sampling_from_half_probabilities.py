"""AMP013: sampling from probabilities computed in half precision (case 5)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import Confidence
from amplint.rule import Rule, Verdict
from amplint.runtime.chains import SOFTMAX, half_precision_verdict, traced_back, where
from amplint.static.attention import (
    SOFTMAX_METHODS,
    is_multinomial,
    is_softmax,
    softmax_dtype_argument,
)
from amplint.static.context import FileContext, Finding, scopes_holding
from amplint.static.dtypes import DtypeFacts
from amplint.static.facts import DTYPE, Fact, why_half
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.ops import F16
from amplint.static.patterns import argument, function_call, method_call
from amplint.static.scopes import Scope

_CATEGORICAL = frozenset(
    {
        "torch.distributions.Categorical",
        "torch.distributions.categorical.Categorical",
        "torch.distributions.OneHotCategorical",
        "torch.distributions.one_hot_categorical.OneHotCategorical",
    }
)
_GUMBEL = frozenset({"torch.nn.functional.gumbel_softmax"})
# Ops whose result is indices or integers, not probabilities: a token chosen from one
# distribution does not carry that distribution's precision into the next.
_INDEX_METHODS = frozenset({"argmax", "argmin", "argsort", "long", "int", "nonzero", "bool"})
_INDEX_FUNCTIONS = frozenset({"torch.argmax", "torch.argmin", "torch.argsort", "torch.nonzero"})


if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class SamplingFromHalfProbabilities(Rule):
    """
    ## What it does
    Flags `torch.multinomial` (and `Categorical(probs=...)`) sampling from probabilities that a
    `softmax` computed from logits that were never upcast to float32, and `gumbel_softmax` over
    such logits. It looks where the logits come from inside the function: model or head outputs,
    products, or explicit half casts; logits passed in as a parameter are the caller's business.

    On by default. Its hazard is float16's, so it is reported where the project runs the code in
    fp16 (an execution mode found in its scripts, tests or configuration, named in the message);
    where nothing in the project does, the finding is conditional and shown only with
    `--show-conditional` (docs/usage.md#execution-modes). Sampling from bfloat16 probabilities is
    not flagged: bfloat16 has float32's range, so nothing overflows and no tail probability flushes
    to zero; each keeps 8 significant bits, a relative change of at most 0.4% to what is sampled.
    `gumbel_softmax` is flagged in both half dtypes: its noise, rounded to bfloat16, changes which
    code a hard sample picks.

    ## Why is this bad?
    Sampling is where half precision fails loudly, far from its cause: a temperature division or a
    repetition penalty that overflows float16, or a row masked entirely to `-inf`, gives `inf`/NaN
    probabilities and `multinomial` raises "probability tensor contains either `inf`, `nan` or
    element < 0" (Qwen2.5 GPTQ in fp16). When it does not crash, float16 flushes probabilities
    below 6e-8 to zero and keeps fewer bits below 6e-5, so the tail the sampler draws from is
    distorted.
    Casting the probabilities to float32 after the softmax is too late: the rounding has happened.
    `transformers`' `generate` upcasts the logits before any processing for this reason.

    This rule reports the sampler; AMP003 reports the softmax itself (and fixes it) where its input
    looks like scores or logits. Both point at the same remedy: an upcast before the softmax.

    ## Example
    ```python
    logits = model(input_ids).logits[:, -1, :]
    probs = torch.softmax(logits / temperature, dim=-1)
    next_token = torch.multinomial(probs, num_samples=1)
    ```

    ## Fix
    Upcast the logits before temperature, filtering and the softmax:
    ```python
    logits = model(input_ids).logits[:, -1, :].float()
    probs = torch.softmax(logits / temperature, dim=-1)
    next_token = torch.multinomial(probs, num_samples=1)
    ```
    or at least compute the softmax in float32 (`torch.softmax(x, dim=-1, dtype=torch.float32)`).

    ## References
    - "probability tensor contains either inf, nan or element < 0" with an INT4 Qwen-VL on a V100
      (float16): https://github.com/QwenLM/Qwen-VL/issues/364; with a float16 GPTQ CUDA kernel:
      https://github.com/qwopqwop200/GPTQ-for-LLaMa/issues/36
    - transformers `GenerationMixin._sample`: `outputs.logits[:, -1, :].to(dtype=torch.float32)`
    - `torch.nn.functional.gumbel_softmax` in wav2vec2's quantizer is called on `hidden_states.float()`
    """

    code = "AMP013"
    name = "sampling-from-half-probabilities"
    summary = "multinomial/gumbel sampling from a softmax of logits that were not upcast to float32"
    rests_on_half = True
    triggers = frozenset({"multinomial", "gumbel_softmax", "Categorical", "OneHotCategorical"})
    # The softmax is followed within the sampler's function, into the helpers it calls and back to
    # its callers, which the skipped-body rules keep (`amplint.static.regions`).
    region_words = triggers

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        samplers = [node for node in nodes if node.op == "multinomial"]
        if not samplers:
            return half_precision_verdict(graph, nodes, "the probabilities are computed in half precision")
        # The hazard is where the probabilities were made: followed back to their softmax.
        sampler = samplers[0]
        back = traced_back(graph, sampler, SOFTMAX)
        if back.turned is not None and back.turned.dtype == "bfloat16":
            return Verdict(
                Confidence.REFUTED,
                f"the probabilities `multinomial` at {where(sampler)} samples were held in bfloat16 by "
                f"`{back.turned.op}` at {where(back.turned)}, whose range is float32's: nothing overflows",
            )
        if back.turned is not None:
            return Verdict(
                Confidence.CONFIRMED,
                f"`multinomial` at {where(sampler)} samples probabilities that `{back.turned.op}` at "
                f"{where(back.turned)} held in {back.turned.dtype}",
            )
        if back.bite is None:
            return None
        return Verdict(
            Confidence.REFUTED,
            f"the probabilities `multinomial` at {where(sampler)} samples stayed float32 from "
            f"`{back.bite.op}` at {where(back.bite)} on",
        )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        samplers = [call for call in ctx.index.calls if _sampler(ctx, call) is not None]
        facts = ctx.facts.without_caller_autocast()  # CUDA autocast runs softmax in float32
        for scope in scopes_holding(ctx, samplers):
            gumbels = [
                c
                for c in samplers
                if _sampler(ctx, c) == "gumbel_softmax" and (ctx.function_of(c) or ctx.module) is scope.node
            ]
            yield from _check_scope(ctx, facts, scope, gumbels)


def _sampler(ctx: FileContext, call: cst.Call) -> str | None:
    """What kind of sampler `call` is: `multinomial`, `Categorical`, `gumbel_softmax`, or None."""
    if is_multinomial(ctx, call):
        return "multinomial"
    if function_call(ctx, call, _CATEGORICAL) and argument(call, 0, "probs") is not None:
        return "Categorical"
    if function_call(ctx, call, _GUMBEL):
        return "gumbel_softmax"
    return None


def _check_scope(
    ctx: FileContext, facts: DtypeFacts, scope: Scope, gumbels: list[cst.Call]
) -> Iterator[Finding]:
    half: dict[cst.Call, Fact] = {}  # a softmax computing in half precision: its fact

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if isinstance(node, cst.Call) and node not in half and is_softmax(ctx, node):
            dtype = softmax_dtype_argument(ctx, node)
            fact = facts.of(node)
            if (dtype is None or facts.of(dtype).kind == DTYPE) and _half_here(fact, F16):
                half[node] = fact
        return node in half

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        kind = _sampler(ctx, node) if isinstance(node, cst.Call) else None
        return kind if kind in {"multinomial", "Categorical"} else None

    def blocks(node: cst.BaseExpression, flow: Flow) -> bool:
        return (
            function_call(ctx, node, _INDEX_FUNCTIONS) or method_call(ctx, node, _INDEX_METHODS) is not None
        )

    reported: set[cst.CSTNode] = set()
    for hit in analyse(scope, Policy(seed=seed, sink=sink, blocks=blocks)).hits.values():
        if hit.sink not in reported and isinstance(hit.origin, cst.Call):
            reported.add(hit.sink)
            yield _sampling_finding(ctx, hit.sink, hit.origin, hit.label, half[hit.origin])
    for call in gumbels:
        logits = argument(call, 0, "logits")
        fact = facts.of(logits) if logits is not None else None
        if fact is not None and _half_here(fact):
            yield _gumbel_finding(call, fact)


def _half_here(fact: Fact, dtype: str | None = None) -> bool:
    """Half (float16 where `dtype` says so, on that mode's evidence), and not only because the
    function's own inputs may be: logits passed in as a parameter are the caller's business (AMP003
    still reports a softmax over them), while a head, a weight, an op under autocast or a cast in
    this function makes them the function's."""
    if not (fact.may_be_fp16 if dtype == F16 else fact.may_be_half):
        return False
    why = fact.for_dtype(dtype).why if dtype is not None else fact.why
    return not all(isinstance(step.node, cst.Param) for step in why)


def _sampling_finding(
    ctx: FileContext, sampler: cst.CSTNode, softmax: cst.Call, kind: str, fact: Fact
) -> Finding:
    qualified = ctx.qualified(softmax.func)
    if qualified is not None:
        name = qualified.rsplit(".", 1)[-1]
    elif method_call(ctx, softmax, SOFTMAX_METHODS) is not None and isinstance(softmax.func, cst.Attribute):
        name = softmax.func.attr.value
    else:
        name = "softmax"
    line = ctx.position(softmax).start.line
    message = (
        f"`{kind}` samples from probabilities that the `{name}` on line {line} computed in fp16 "
        "from logits never upcast to float32: an overflowed or fully masked row becomes inf/NaN "
        '("probability tensor contains either inf, nan or element < 0") and the distribution\'s tail '
        f"is flushed to zero; {why_half(fact, 'fp16')}"
    )
    return Finding(
        sampler,
        message,
        help=(
            f"upcast the logits before temperature, filtering and the softmax (`logits.float()`), or "
            f"pass `dtype=torch.float32` to the `{name}` on line {line}"
        ),
        evidence=fact.for_dtype(F16).why,
        caller_only=fact.caller,
    )


def _gumbel_finding(call: cst.Call, fact: Fact) -> Finding:
    return Finding(
        call,
        f"`gumbel_softmax` samples in the logits' {fact.half_names()} dtype: its Gumbel noise, the "
        "temperature division and the softmax all run in half precision, where small temperatures "
        f"overflow and the noise is rounded; {why_half(fact)}",
        help="upcast the logits first: `gumbel_softmax(logits.float(), ...)` and cast the result back",
        evidence=fact.why,
        caller_only=fact.caller,
    )
