"""AMP003: log-probabilities taken in half precision: `log_softmax`, or `log` of a softmax."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import UNSAFE, Diagnostic
from amplint.rule import Rule, Verdict, dtype_keeping_fix
from amplint.runtime.chains import half_precision_verdict
from amplint.static.attention import (
    REGION_PATTERN,
    REGION_WORDS,
    is_softmax,
    softmax_dtype_argument,
    softmax_module_call,
    submodule,
)
from amplint.static.consumers import bind_input, upcast_dtype
from amplint.static.context import FileContext, Finding, scopes_holding
from amplint.static.dtypes import DtypeFacts
from amplint.static.facts import DTYPE, Fact, why_half
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.ops import F16, HALF
from amplint.static.patterns import argument, callee_name, function_call, lineage, method_call, with_dtype

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

_MESSAGE = "log-probabilities in half precision"
_LOGS = frozenset({"torch.log", "torch.log2", "torch.log10", "torch.special.log_softmax"})
_LOG_METHODS = frozenset({"log", "log2", "log10", "log_"})


class HalfPrecisionSoftmax(Rule):
    """
    ## What it does
    Flags `log_softmax` whose result is float16 or bfloat16, and `log` taken of a half-precision
    softmax, where the file runs them in half precision (a `.half()` model, half weights, CPU
    autocast). Under CUDA autocast both run in float32 and nothing is flagged.

    Off by default (opt-in) after review 14: on public projects it was not written against it was
    read 24 times (precision reviews 4 to 14, docs/measured.md) and none was real: most were
    log-probabilities that only pick an argmax or rank beams, where half precision changes nothing,
    or log-softmax already run in float32 under autocast. Turn it on with `--extend-select AMP003`
    or `extend-select = ["AMP003"]` under `[tool.amplint]`. Its hazard needs half precision, so it
    is reported where the project runs the code in bf16/fp16 (an execution mode found in its
    scripts, tests or configuration, named in the message); where nothing in the project does, the
    finding is conditional and shown only with `--show-conditional` (docs/usage.md#execution-modes).

    ## Why is this bad?
    A half softmax is not the hazard by itself: its kernel accumulates in float32, and
    `softmax(x)` in bf16 equals `softmax(x, dtype=torch.float32).to(torch.bfloat16)` bit for bit, so
    attention probabilities that feed `probs @ v` are fine. Log-probabilities are where the low
    dtype bites: bf16 keeps 8 bits of mantissa, so a log-probability of -12.3 is stored with a step
    of 0.06 and a loss or a KL term built from it is off by that much per token; in fp16 a softmax
    probability under 6e-8 flushes to zero and its `log` is `-inf`, which turns a loss into NaN.

    ## Example
    ```python
    log_probs = F.log_softmax(logits, dim=-1)
    loss = F.nll_loss(log_probs, target)
    ```

    ## Fix
    Ask for float32 log-probabilities (`dtype=torch.float32`), or take `log_softmax` instead of
    `log(softmax(...))`:
    ```python
    log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32)
    loss = F.nll_loss(log_probs, target)
    ```
    When the log-probabilities only meet elementwise code and reductions (`nll_loss`, `kl_div`) of
    their own, the result is cast back to the logits' dtype where it leaves that code and the fix is
    safe; where they meet another tensor on the way (the targets of `nll_loss`), the result is cast
    back all the same and the fix is unsafe (it may have been wider). Under CUDA autocast, which runs
    `nll_loss` and `kl_div` in float32, the cast back is to the dtype such an op gives there
    (`logits.new_empty(0).prod().dtype`). Log-probabilities returned as they are would reach callers
    in float32 that never asked for it: no fix is offered there, unless the function says it
    returns float32 (`-> torch.float32`).

    The fix upcasts to `torch.promote_types(logits.dtype, torch.float32)`: float32 for half values,
    while float64 code stays float64 (a plain float32 would lower its precision). Where no name
    tells the logits' dtype (`frozen_to_logits(h)`, a module's output), the fix binds them once,
    `F.log_softmax((logits := frozen_to_logits(h)), dim=-1, dtype=torch.promote_types(logits.dtype,
    torch.float32))`, rather than computing them twice.

    ## References
    - `torch.nn.functional.log_softmax(input, dim, dtype=...)`
    - CUDA autocast runs `softmax`, `log_softmax` and `log` in float32
    """

    code = "AMP003"
    name = "half-precision-softmax"
    default_on = False
    fix_applicability = UNSAFE  # the log-probabilities stay float32 for their consumers
    summary = "log_softmax, or log of a softmax, computed in float16/bfloat16"
    rests_on_half = True
    triggers = frozenset({"log_softmax", "LogSoftmax", "log", "log2", "log10"})
    region_words = REGION_WORDS
    region_pattern = REGION_PATTERN

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        ops = [node for node in nodes if node.op in {"_log_softmax", "log", "log2", "log10"}]
        return half_precision_verdict(graph, ops, "the log-probabilities are computed in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        facts = ctx.facts.without_caller_autocast()
        plain: list[cst.Call] = []
        for call in (c for c in ctx.index.calls if is_softmax(ctx, c)):
            if not _is_log_softmax(ctx, call):
                plain.append(call)
            elif (fact := _half_result(ctx, facts, call)) is not None:
                yield _log_softmax_finding(ctx, call, fact)
        policy = Policy(
            seed=lambda node, flow: node in plain,
            sink=lambda node, flow: "log" if _log_of_softmax(ctx, node, flow) else None,
        )
        for scope in scopes_holding(ctx, plain):
            for log in dict.fromkeys(hit.sink for hit in analyse(scope, policy).hits.values()):
                fact = facts.of(log)
                if F16 in fact.dtypes:
                    yield Finding(
                        log,
                        f"{_MESSAGE}: `log` of a half-precision softmax; fp16 probabilities under 6e-8 "
                        f"are 0 and their log is -inf; {why_half(fact)}",
                        help="use `log_softmax(x, dim=..., dtype=torch.float32)` on the softmax's input",
                        evidence=fact.why,
                        caller_only=fact.caller,
                    )


def _log_of_softmax(ctx: FileContext, node: cst.CSTNode, flow: Flow) -> bool:
    """`torch.log(p)` / `p.log()` where `p` is a softmax's result itself: through names, views,
    indexing and method chains, not through arithmetic (`log(1 - p)` is another quantity)."""
    if not isinstance(node, cst.Call) or not (
        function_call(ctx, node, _LOGS) or method_call(ctx, node, _LOG_METHODS) is not None
    ):
        return False
    data = (
        node.func.value
        if isinstance(node.func, cst.Attribute) and not node.args
        else argument(node, 0, "input")
    )
    return data is not None and any(
        is_softmax(ctx, step) and not _is_log_softmax(ctx, step)
        for step in lineage(ctx, data, flow)
        if isinstance(step, cst.Call)
    )


def _is_log_softmax(ctx: FileContext, call: cst.Call) -> bool:
    func = call.func
    if isinstance(func, cst.Call):  # `nn.LogSoftmax(dim=-1)(x)`
        return ctx.qualified(func.func) == "torch.nn.LogSoftmax"
    return "log" in callee_name(call).lower() or submodule(ctx, call) == "LogSoftmax"


def _half_result(ctx: FileContext, facts: DtypeFacts, call: cst.Call) -> Fact | None:
    """The fact of a half result (without the caller's autocast, which runs log_softmax in float32 on
    CUDA), or of the half `dtype=` it is given; None when it computes in float32 or in a dtype that
    the caller passes."""
    dtype = softmax_dtype_argument(ctx, call)
    fact = facts.of(dtype if dtype is not None else call)
    if dtype is not None and fact.kind != DTYPE:
        return None
    return fact if fact.dtypes & HALF else None


def _log_softmax_finding(ctx: FileContext, call: cst.Call, fact: Fact) -> Finding:
    why = why_half(fact)
    if softmax_module_call(ctx, call) or isinstance(call.func, cst.Call):
        return Finding(
            call,
            f"{_MESSAGE}: an `nn.LogSoftmax` module cannot take a dtype; {why}",
            help="call `torch.log_softmax(x, dim=..., dtype=torch.float32)` instead of the module",
            evidence=fact.why,
            caller_only=fact.caller,
        )
    data = method_call(ctx, call, frozenset({"log_softmax"})) or argument(call, 0, "input") or call
    # `log_softmax(frozen_to_logits(h), ...)`: the logits are bound once to read their dtype.
    binding = bind_input(ctx, call, data, "logits") if data is not call else None
    source = binding[1] if binding is not None else None
    float32, missing_import = upcast_dtype(ctx, call, data, source=source)
    written = cst.ensure_type(call.deep_replace(data, binding[0]), cst.Call) if binding is not None else call
    fixed = with_dtype(written, float32, softmax_dtype_argument(ctx, call))
    return Finding(
        call,
        f"{_MESSAGE}: `log_softmax` rounds each log-probability to the half dtype; pass "
        f"`dtype=torch.float32`; {why}",
        fix=dtype_keeping_fix(
            ctx, call, fixed, data, "Compute the log-probabilities in float32", missing_import, source=source
        ),
        help=f"`{' '.join(ctx.code(fixed).split())}`",
        evidence=fact.why,
        caller_only=fact.caller,
    )
