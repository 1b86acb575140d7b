"""AMP007: cumulative sums and products of log-decays and gates in half precision (case 1's sequel)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import UNSAFE
from amplint.rule import Rule, Verdict, dtype_keeping_fix
from amplint.runtime.chains import half_precision_verdict
from amplint.static.attention import is_softmax
from amplint.static.consumers import upcast_dtype
from amplint.static.context import FileContext, Finding, scopes_holding
from amplint.static.dtypes import DtypeFacts
from amplint.static.facts import SCALAR, why_half
from amplint.static.flow import Flow, Policy, analyse, value_children
from amplint.static.ops import HALF, autocast_policy
from amplint.static.patterns import (
    argument,
    callee_name,
    function_call,
    lineage,
    method_call,
    with_dtype,
    with_method,
)
from amplint.static.scopes import Scope, walk

_OPS = frozenset({"cumsum", "cumprod", "logcumsumexp"})
_FUNCTIONS = {f"torch.{op}": op for op in _OPS}
_EXP_FUNCTIONS = frozenset(
    f"torch.{name}" for name in ("exp", "exp2", "expm1", "special.exp2", "special.expm1")
)
_EXP_METHODS = frozenset({"exp", "exp2", "expm1", "exp_", "exp2_"})
# Ops whose output lives in log space (log-decays) or is a gate in (0, 1).
_LOG_SPACE_METHODS = frozenset({"log", "log1p", "log_softmax", "sigmoid"})
_LOG_SPACE = frozenset(f"torch.{name}" for name in (*_LOG_SPACE_METHODS, "special.expit")) | frozenset(
    f"torch.nn.functional.{name}" for name in ("logsigmoid", "softplus", "log_softmax", "sigmoid")
)
# Names that code in the RWKV/GLA/Mamba/xLSTM family gives to log-decays and gates.
_DECAY_NAME = re.compile(
    r"^(g|gk|gv|gi|gf|gs|log_?(w|g|gk|a|alpha|decays?|gates?|f|i)|\w+_log|\w*logsig\w*|\w*decay\w*|\w*gate\w*|"
    r"forget\w*)$",
    re.IGNORECASE,
)
# Ops that leave log space: what they return is a probability or a decay factor, or a magnitude
# (`|logp_a - logp_b|` summed into a prefix share is a weight), not a log-decay.
_LEAVE_LOG_SPACE = frozenset({"exp", "exp2", "softmax", "sigmoid_", "expm1", "abs"})
_HAZARDS = {
    "cumsum": "the running sum grows with the sequence while {bits}, so once it is {times} times a term "
    "each new term is rounded away and the decays taken from it come out wrong",
    "cumprod": "the product is rounded at every step, so its error compounds with the sequence length",
    "logcumsumexp": "the running log-sum is rounded at every step, and its error grows with the sequence length",
}
# The running sum of probabilities (a top-p filter's `cumsum(sorted_probs)`) nears 1, where the spacing
# of bf16 is 2**-8 and of fp16 2**-11.
_PROBABILITIES = (
    "the running sum nears 1, where {bits}, so the small probabilities after the first few are rounded "
    "away and the top-p cut-off lands on the wrong token"
)
_BITS = {"bf16": "bf16 keeps 8 mantissa bits", "fp16": "fp16 keeps 11 mantissa bits"}
_TIMES = {"bf16": "a few hundred", "fp16": "a few thousand"}


if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class HalfPrecisionAccumulation(Rule):
    """
    ## What it does
    Flags `cumsum`, `cumprod` and `logcumsumexp` over log-decays and gates (the value comes from
    `logsigmoid`, `log`, `softplus` or `sigmoid`, carries a decay or gate name such as `g`, `gk`,
    `log_decay`, `vecF_logsig`, or the cumulative sum feeds `exp`), and `cumsum` over the sorted
    probabilities of a softmax (a top-p filter's `cumsum(sorted_probs)`), that neither pass
    `dtype=torch.float32` nor upcast their input.

    ## Why is this bad?
    A cumulative sum of log-decays grows with the sequence: after a few hundred steps its magnitude
    is in the hundreds, where bfloat16's 8 mantissa bits leave a spacing of 1 or 2, so each new
    log-decay is rounded away and `exp(cumsum[t] - cumsum[s])`, the decay between two positions,
    comes out wrong or exactly 1. A cumulative product of gates is rounded at every step, so its
    error compounds with the sequence length. This is the precision hazard of chunked
    RWKV/Mamba/GLA/xLSTM reference code. CUDA autocast runs `cumsum` and `cumprod` in float32, but a
    model loaded in bfloat16/float16 and run without autocast (most inference) does not, and no
    autocast upcasts `logcumsumexp`. A top-p filter's cumulative sum of probabilities nears 1, where
    bfloat16's spacing is 0.004: the small probabilities of a large vocabulary are rounded away and
    the cut-off lands on the wrong token. Integer cumulative sums (positions from an attention mask)
    are exact and not flagged.

    ## Example
    ```python
    g = F.logsigmoid(self.gk_proj(x)) / 16
    g_cumsum = g.cumsum(dim=1)
    decay = torch.exp(g_cumsum[:, -1:] - g_cumsum)
    ```

    ## Fix
    Accumulate in float32 (this changes numerics on purpose):
    ```python
    g_cumsum = g.cumsum(dim=1, dtype=torch.float32)
    ```
    or upcast the input first (`torch.cumsum(g.float(), dim=1)`, as flash-linear-attention's
    layers do).
    The fix is safe where the engine proves that casting back keeps every consumer's dtype: the
    decays are taken in float32 from the float32 sums, and the result is cast back to the input's
    dtype where it leaves the function or meets a product or a module. For `cumsum` and `cumprod`,
    which CUDA autocast runs in float32 itself, the cast back is to the dtype the op gives there,
    `torch.exp(c[:, -1:] - c).to(g.new_empty(0).cumsum(0).dtype)`: float32 under CUDA autocast (a
    cast to `g.dtype` would round autocast's float32 result to bfloat16 and make it worse), `g`'s
    dtype elsewhere; the empty tensor costs nothing. Where the sums themselves leave (returned, passed
    to another function), the fix accumulates in float32 and casts back at once, and is unsafe:
    every consumer keeps its dtype, but the rounded sums feed any difference taken later. That
    still gains on a GPU, whose half-precision scans keep the running value in the half dtype:
    on an H100 (torch 2.11, 4,096 terms) the largest error of bf16 `cumsum`, `logcumsumexp` and
    `cumprod` fell from 0.50, 0.090 and 0.0125 to 0.125, 0.031 and 0.0019. CPU kernels keep the
    running value in float32 already (`python benchmarks/gpu_scans.py` measures both).

    Where the accumulated value comes from a `sigmoid`, `tanh` or `logsigmoid` that AMP001 flags,
    AMP001's fix upcasts at the start of the chain and covers this one: `--fix` writes that one
    edit (the `cumsum` then runs on a float32 input), not both fixes' casts.

    Where the dtype of the value it upcasts can be read from a tensor (`x`, not a module's output
    or a sum of two tensors), the fix upcasts to `torch.promote_types(x.dtype, torch.float32)`: float32
    for half values, while float64 code stays float64 (a plain float32 would lower its precision).

    ## References
    - flash-linear-attention `chunk_global_cumsum` and its layers' `torch.cumsum(g.float(), dim=1)`
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP007"
    name = "half-precision-accumulation"
    fix_applicability = UNSAFE  # the float32 sum reaches consumers that may want the half dtype
    summary = "cumsum/cumprod/logcumsumexp over log-decays or gates without dtype=torch.float32 or an upcast"
    rests_on_half = True
    triggers = frozenset(_OPS)
    region_words = triggers

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the accumulation runs in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        candidates = [call for call in ctx.index.calls if callee_name(call) in _OPS]
        for scope in scopes_holding(ctx, candidates) if candidates else ():
            yield from _scan(ctx, scope)


def _accumulation(ctx: FileContext, call: cst.Call) -> tuple[str, cst.BaseExpression] | None:
    """`(op, input)` of a cumulative sum or product that may run in half precision."""
    data: cst.BaseExpression | None = method_call(ctx, call, _OPS)
    if data is not None:
        dtype = argument(call, 1, "dtype")
    elif function_call(ctx, call, frozenset(_FUNCTIONS)):
        data, dtype = argument(call, 0, "input"), argument(call, 2, "dtype")
    else:
        return None
    if data is None or (dtype is not None and not ctx.facts.of(dtype).dtypes & HALF):
        return None  # an explicit dtype is the author's choice
    if method_call(ctx, data, frozenset({"new_empty"})) is not None:
        return None  # `g.new_empty(0).cumsum(0).dtype`: the dtype the op gives (this rule's cast back)
    return (callee_name(call), data) if _facts(ctx, callee_name(call)).of(call).may_be_half else None


def _facts(ctx: FileContext, op: str) -> DtypeFacts:
    """The facts the hazard is judged by: for an op that CUDA autocast runs in float32 (`cumsum`,
    `cumprod`), those of a caller without autocast (a model run in half weights), since under the
    caller's autocast the op is float32 whatever made its input half there."""
    return ctx.facts.without_caller_autocast() if autocast_policy(op, "cuda") == "fp32" else ctx.facts


def _scan(ctx: FileContext, scope: Scope) -> Iterator[Finding]:
    low: dict[cst.Call, tuple[str, cst.BaseExpression]] = {}
    why: dict[cst.CSTNode, str] = {}

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if isinstance(node, cst.Call) and node not in low and (found := _accumulation(ctx, node)):
            low[node] = found
            origin = _log_space_origin(ctx, found[1], flow)
            if origin is None and found[0] == "cumsum":
                origin = _probability_origin(ctx, found[1], flow)
            if origin is not None:
                why[node] = origin
        return node in low

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        exp = function_call(ctx, node, _EXP_FUNCTIONS) or method_call(ctx, node, _EXP_METHODS) is not None
        return "exp" if exp else None

    flow = analyse(scope, Policy(seed=seed, sink=sink))
    for hit in flow.hits.values():
        why.setdefault(hit.origin, "its cumulative sum feeds `exp`")
    function = scope.node
    if isinstance(function, cst.FunctionDef) and set(low) - set(why) and _called_under_exp(ctx, function):
        # `torch.exp(segment_sum(A))`: the function returns the cumulative sum into `exp`.
        nested = {
            id(n) for inner in walk(function.body) if isinstance(inner, cst.FunctionDef) for n in walk(inner)
        }
        for node in walk(function.body):
            if isinstance(node, cst.Return) and node.value is not None and id(node) not in nested:
                for origin in flow.taint(node.value):
                    why.setdefault(origin, f"`{function.name.value}` returns it into `exp`")
    for call, (op, data) in low.items():
        if call in why:
            yield _finding(ctx, call, op, data, why[call])


def _called_under_exp(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Whether this module calls `function` inside an `exp(...)`."""
    for call in ctx.index.calls:
        inside = argument(call, 0, "input") if function_call(ctx, call, _EXP_FUNCTIONS) else None
        for node in walk(inside or method_call(ctx, call, _EXP_METHODS) or cst.Name("_")):
            if isinstance(node, cst.Call) and callee_name(node) == function.name.value:
                return True
    return False


def _probability_origin(ctx: FileContext, data: cst.BaseExpression, flow: Flow) -> str | None:
    """Why the accumulated value is a probability, or None: it is a softmax's result, through names,
    sorting and indexing (`sorted_probs, _ = torch.sort(probs)`), not through arithmetic. Logits
    passed in as a parameter are the caller's business (a generation loop upcasts them first): the
    half dtype must come from something in the function (a model's output, a cast, autocast)."""
    why = _facts(ctx, "cumsum").of(data).why
    if all(isinstance(step.node, cst.Param) for step in why):
        return None
    for step in lineage(ctx, data, flow):
        if isinstance(step, cst.Call) and is_softmax(ctx, step) and "log" not in callee_name(step):
            return _SOFTMAX_ORIGIN
    return None


_SOFTMAX_ORIGIN = "they are probabilities from a softmax"


def _log_space_origin(ctx: FileContext, data: cst.BaseExpression, flow: Flow) -> str | None:
    """Why the accumulated value is a log-decay or a gate, or None. Follows what the value is computed
    from within its function: the expressions its names were bound to, through arithmetic and method
    chains (not into the arguments of other calls)."""
    stack: list[cst.CSTNode] = [data]
    seen: set[int] = set()
    used: dict[str, int] = {}
    while stack and len(seen) < 64:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, cst.Name):
            if _DECAY_NAME.match(node.value):
                return f"it is the log-decay or gate `{node.value}`"
            history, count = flow.history.get(node.value, []), used.get(node.value, 0)
            if count < len(history):
                used[node.value] = count + 1
                stack.append(history[-1 - count])
        elif isinstance(node, cst.AugAssign):
            stack.extend((node.target, node.value))
        elif isinstance(node, cst.Call):
            qualified = ctx.qualified(node.func)
            if qualified in _LOG_SPACE or method_call(ctx, node, _LOG_SPACE_METHODS) is not None:
                return f"it comes from `{callee_name(node)}`"
            if callee_name(node) in _LEAVE_LOG_SPACE:
                continue
            if isinstance(node.func, cst.Attribute) and qualified is None:
                stack.append(node.func.value)
            elif qualified == "torch.where":  # `torch.where(mask, g, 0)`: the values, not the condition
                stack.extend(arg.value for arg in node.args[1:3])
            else:
                stack.extend([arg.value for arg in node.args if arg.keyword is None and not arg.star][:1])
        elif isinstance(node, cst.BinaryOperation):
            # A product of two tensors (`-p * log_p`, an entropy term) has left log space; a log-decay
            # scaled by a number or divided by a normaliser (`logsigmoid(x) / 16`) has not.
            sides = (node.left, node.right)
            if not isinstance(node.operator, cst.Multiply) or any(
                ctx.facts.of(side).kind == SCALAR for side in sides
            ):
                stack.extend(sides)
        elif isinstance(node, (cst.UnaryOperation, cst.Subscript, cst.Attribute)):
            stack.extend(value_children(node))
        elif isinstance(node, (cst.ListComp, cst.GeneratorExp)):
            stack.append(node.elt)
    return None


def _finding(ctx: FileContext, call: cst.Call, op: str, data: cst.BaseExpression, origin: str) -> Finding:
    facts = _facts(ctx, op)
    fact, data_fact = facts.of(call), facts.of(data)
    shown = data_fact if data_fact.may_be_half else fact
    half = shown.half_names()
    autocast = (
        f"CUDA autocast would run `{op}` in float32, a model run in {half} without autocast does not"
        if autocast_policy(op, "cuda") == "fp32"
        else f"no autocast upcasts `{op}`"
    )
    dtype = why_half(shown, half)
    first = half.split("/")[0]  # bf16 when both may be
    probabilities = origin == _SOFTMAX_ORIGIN
    hazard = (_PROBABILITIES if probabilities else _HAZARDS[op]).format(
        bits=_BITS[first], times=_TIMES[first]
    )
    what = "probabilities" if probabilities else "a log-decay or gate"
    message = f"`{op}` accumulates {what} in half precision ({origin}): {autocast}; {hazard}; {dtype}"
    float32, missing_import = upcast_dtype(ctx, call, data)
    if op == "logcumsumexp":
        fixed = call.deep_replace(data, with_method(data, "to", float32))
        description = f"Upcast the input of `{op}` to float32"
    else:
        fixed, description = with_dtype(call, float32), f"Accumulate `{op}` in float32"
    plan = dtype_keeping_fix(
        ctx,
        call,
        fixed,
        data,
        description,
        missing_import,
        accumulates=True,
        autocast_op=op if autocast_policy(op, "cuda") == "fp32" else None,
    )
    # The help shows the edits the fix writes, the cast back included.
    edits = plan.replacements if plan is not None else ((call, fixed),)
    written = "; ".join(f"`{' '.join(ctx.code(new).split())}`" for _, new in edits)
    return Finding(
        call,
        message,
        fix=plan,
        help=f"accumulate in float32: {written}",
        evidence=shown.why,
        caller_only=shown.caller,
    )
