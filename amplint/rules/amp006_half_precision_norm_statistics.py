"""AMP006: hand-written RMSNorm/LayerNorm statistics computed in half precision."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.rule import Rule, Verdict
from amplint.runtime.chains import half_precision_verdict
from amplint.static.consumers import op_dtype, upcast_dtype
from amplint.static.context import FileContext, Finding, FixPlan, scopes_holding
from amplint.static.facts import SCALAR, TENSOR, Fact, why_half
from amplint.static.flow import Flow, Hit, Policy, analyse
from amplint.static.ops import BF16, F32, autocast_policy
from amplint.static.patterns import argument, callee_name, function_call, method_call, with_method
from amplint.static.scopes import Scope, walk

if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# `std` is left out on purpose: its square root keeps it in range, so a half-precision `std` is one
# rounding like any op (PyTorch accumulates in float32 inside), not an overflow waiting to happen.
_STATISTICS = frozenset({"mean", "var", "var_mean"})
_FUNCTIONS = frozenset({"torch.mean", "torch.var", "torch.var_mean"})
# Where a statistic normalises: a (reciprocal) square root, or a power of one half.
_ROOT_FUNCTIONS = frozenset({"torch.rsqrt", "torch.sqrt", "torch.reciprocal"})
_ROOT_METHODS = frozenset({"rsqrt", "sqrt", "reciprocal", "rsqrt_", "sqrt_"})
_MEASURES = frozenset({"log", "log10", "log2", "item", "tolist"})
_HALF_POWERS = frozenset({"0.5", "-0.5", ".5", "-.5", "-1"})
_TWO = frozenset({"2", "2.0", "2."})
_CASTS = frozenset({"float", "to", "type"})


@dataclass(frozen=True)
class Statistic:
    call: cst.Call
    kind: str  # "pow" (x.pow(2), x ** 2, x.square()), "mul" (x * x), "var" or "var_mean"
    data: cst.BaseExpression  # the tensor whose statistic it is
    square: cst.BaseExpression | None = None  # `x * x`, `x.pow(2)`: what the mean averages
    fact: Fact | None = None  # the engine's fact of the statistic's value


class HalfPrecisionNormStatistics(Rule):
    """
    ## What it does
    Flags hand-written RMSNorm and LayerNorm statistics (`x.pow(2).mean(-1, keepdim=True)`,
    `(x * x).mean(...)`, `x.square().mean(...)`, `x.var(...)`, `torch.var_mean(...)`) whose value
    the dtype-facts engine says may be bfloat16/float16 there (an input not upcast first, outside
    the CUDA autocast that runs `pow` in float32), when the statistic is taken per row (over some
    dims, not the whole tensor or dim 0) and rescales a tensor (through `rsqrt`, `sqrt`, a power of
    one half, or a division). An input cast to a dtype the author offers as a setting, float32 among
    the choices (`if self.force_fp32: x = x.float()`), is left alone.

    Off by default (opt-in), except in a project whose precision is float16 only (`precision =
    "fp16"`, or detected so): the hazard is float16's alone, and whether a row's values pass 256 is
    seldom visible in the code (a waveform or a normalised pixel never does). On public projects
    it was not written against, about two thirds of its findings were worth a look and none was a
    certain bug (docs/precision.md). Turn it on with `--extend-select AMP006` or
    `extend-select = ["AMP006"]` under `[tool.amplint]`.

    ## Why is this bad?
    Squares grow fast: in float16 any activation above 256 squares to more than 65504 and becomes
    `inf`, so the variance is `inf`, `rsqrt` gives 0 and the whole row is zeroed (the T5-in-fp16
    NaN); a `var` overflows the same way once the row's standard deviation passes 256, which the
    outlier features of large models reach. In bfloat16 nothing overflows, but the variance and
    its reciprocal root are each rounded to 8 mantissa bits before they scale every element. CUDA
    autocast runs `pow` (and `square`, which is `pow`) in float32, but not `*`, `mean` or `var`;
    and a model loaded with `torch_dtype=torch.bfloat16` or `.half()` weights and run without
    autocast, which is how most inference runs, computes all of it in half precision.

    ## Example
    ```python
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states
    ```

    ## Fix
    Upcast the input, normalise in float32, cast back (transformers' `LlamaRMSNorm`):
    ```python
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)
    ```
    Where the statistic feeds `rsqrt`/`sqrt` and nothing else, `--fix` makes the smaller change of
    computing the statistic and its root in float32 and casting the factor back to the input's
    dtype, so that every dtype downstream stays as it was. Under CUDA autocast, which runs `pow`
    and `rsqrt` in float32, the factor was float32 before the fix: the cast back is to the dtype
    the op gives there (`x.new_empty(0).pow(0).dtype`: float32 under CUDA autocast, `x`'s dtype
    elsewhere), so that the fix does not round autocast's float32 factor to half.

    Where the dtype of the value it upcasts can be read from a tensor (`x`, not a module's output
    or a sum of two tensors), the fix upcasts to `torch.promote_types(x.dtype, torch.float32)`: float32
    for half values, while float64 code stays float64 (a plain float32 would lower its precision).

    ## References
    - transformers `LlamaRMSNorm`, `T5LayerNorm` (the float32 variance was added for fp16 T5)
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP006"
    name = "half-precision-norm-statistics"
    summary = "hand-written RMSNorm/LayerNorm statistics (pow(2).mean, x * x, var) without a float32 upcast"
    default_on = False
    default_on_in = frozenset({"float16"})
    rests_on_half = True
    # A statistic that normalises nearly always meets a root (`rsqrt`, `sqrt`) or is a `var`; files
    # with a mean of squares and only `** -0.5` are rare enough not to parse every file with `mean`.
    triggers = frozenset({"rsqrt", "sqrt", "reciprocal", "var", "var_mean"})
    region_words = triggers

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the statistics are computed in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        candidates = [call for call in ctx.index.calls if callee_name(call) in _STATISTICS]
        for scope in scopes_holding(ctx, candidates) if candidates else ():
            low, hits = _scan(ctx, scope)
            scaling = _roots_that_scale(ctx, scope, {hit.sink for found in hits.values() for hit in found})
            for call, stat_hits in hits.items():
                if any(hit.label == "division" or hit.sink in scaling for hit in stat_hits):
                    yield _finding(ctx, scope, low[call], stat_hits)


def _scan(ctx: FileContext, scope: Scope) -> tuple[dict[cst.Call, Statistic], dict[cst.Call, list[Hit]]]:
    """The statistics of a scope that the engine says may be half, and where each one normalises
    (judged when the flow reaches each call, so that names mean what they mean at that line)."""
    low: dict[cst.Call, Statistic] = {}
    judged: set[cst.Call] = set()
    # Without the caller's autocast: code that casts its inputs to float32 means to compute in float32,
    # and the hazard it is judged by is a model run in half weights (autocast upcasts `pow`, `sum`).
    plain = ctx.facts.without_caller_autocast()

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if isinstance(node, cst.Call) and node not in judged:
            judged.add(node)
            stat = _statistic(ctx, node, flow)
            fact = plain.of(node)
            if stat is not None and fact.may_be_half and not _upcast_offered(ctx, stat.data, flow):
                low[node] = Statistic(stat.call, stat.kind, stat.data, stat.square, fact)
        return node in low

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        """A (reciprocal) root, a power of one half, or the tensor denominator of a division."""
        if _is_root(ctx, node):
            return "root"
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
            tensor = flow.taint(node.right) and ctx.facts.of(node.right).kind != SCALAR  # not numpy
            return "division" if tensor else None
        exponent = (
            node.right
            if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power)
            else argument(node, 0, "exponent")
            if isinstance(node, cst.Call) and method_call(ctx, node, frozenset({"pow"})) is not None
            else None
        )
        return "root" if exponent is not None and _code(ctx, exponent) in _HALF_POWERS else None

    hits: dict[cst.Call, list[Hit]] = {}
    for hit in analyse(scope, Policy(seed=seed, sink=sink)).hits.values():
        if isinstance(hit.origin, cst.Call) and hit.origin in low:
            hits.setdefault(hit.origin, []).append(hit)
    return low, hits


def _roots_that_scale(ctx: FileContext, scope: Scope, roots: set[cst.CSTNode]) -> set[cst.CSTNode]:
    """The roots whose value multiplies or divides a tensor: a normalisation, not a loss
    (`loss = torch.sqrt(mse)`) or a measurement (`20 * torch.log10(rms)`, `torch.sqrt(ms).item()`)."""

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Multiply, cst.Divide)):
            sides = (node.left, node.right)
            return "scales" if all(ctx.facts.of(side).kind != SCALAR for side in sides) else None
        return "scales" if method_call(ctx, node, frozenset({"mul", "div", "mul_", "div_"})) else None

    def blocks(node: cst.BaseExpression, flow: Flow) -> bool:
        return isinstance(node, cst.Call) and callee_name(node) in _MEASURES

    policy = Policy(seed=lambda node, flow: node in roots, sink=sink, blocks=blocks)
    return {hit.origin for hit in analyse(scope, policy).hits.values()}


def _statistic(ctx: FileContext, call: cst.Call, flow: Flow) -> Statistic | None:
    """The statistic a call computes per row: a mean of squares, a `var` or a `var_mean`. Over the
    whole tensor or dim 0 (the batch or time axis) it standardises data instead: audio in a feature
    extractor, a loss, an initialisation."""
    function = function_call(ctx, call, _FUNCTIONS)
    if not function and method_call(ctx, call, _STATISTICS) is None:
        return None
    data = argument(call, 0, "input") if function else cst.ensure_type(call.func, cst.Attribute).value
    dim = argument(call, 1 if function else 0, "dim") or argument(call, None, "axis")
    if data is None or dim is None or _code(ctx, dim) in {"None", "True", "False", "0"} or _has_zero(dim):
        return None
    kind = callee_name(call)
    if kind != "mean":
        return Statistic(call, kind, data)
    squared = flow.resolve(data)
    if isinstance(squared, cst.BinaryOperation):
        if isinstance(squared.operator, cst.Power) and _code(ctx, squared.right) in _TWO:
            return Statistic(call, "pow", squared.left, squared)
        if isinstance(squared.operator, cst.Multiply) and squared.left.deep_equals(squared.right):
            return Statistic(call, "mul", squared.left, squared)
        return None
    if not isinstance(squared, cst.Call):
        return None
    receiver = method_call(ctx, squared, frozenset({"pow", "square"}))
    if function_call(ctx, squared, frozenset({"torch.pow", "torch.square"})):
        receiver = argument(squared, 0, "input")
        exponent = argument(squared, 1, "exponent")
    else:
        exponent = argument(squared, 0, "exponent")
    if receiver is None or (callee_name(squared) == "pow" and _code(ctx, exponent) not in _TWO):
        return None
    return Statistic(call, "pow", receiver, squared)


def _upcast_offered(ctx: FileContext, data: cst.BaseExpression, flow: Flow) -> bool:
    """The author upcasts the input to float32 on some path but not all, a precision setting they
    offer: `if self.force_float32_reductions: x = x.float()`, or `x = x.to(compute_dtype)` with
    `compute_dtype = torch.float32 if self.force_fp32 else x.dtype`. The cast is one that the
    engine's evidence for the input names, on the input's own derivation (not another operand's)."""
    path = _derivation(ctx, data, flow)
    for step in ctx.facts.of(data).why:
        cast = step.node
        if isinstance(cast, cst.Call) and id(cast) in path and callee_name(cast) in _CASTS:
            dtype = cast.args[0].value if cast.args else None
            options = [step, *(ctx.facts.of(dtype).why if dtype is not None else ())]
            if any(ctx.facts.of(option.node).dtypes == {F32} for option in options):
                return True
    return False


def _derivation(ctx: FileContext, node: cst.CSTNode, flow: Flow) -> set[int]:
    """`node` and what its value derives from (ids): a method's receiver, a function's first
    argument, and every expression bound so far to a name on the way."""
    seen: set[int] = set()
    stack = [node]
    while stack and len(seen) < 64:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, cst.Name):
            stack.extend(flow.history.get(node.value, ()))
        elif (
            isinstance(node, cst.Call)
            and isinstance(node.func, cst.Attribute)
            and not ctx.qualified(node.func)
        ):
            stack.append(node.func.value)
        elif isinstance(node, cst.Call) and node.args:
            stack.append(node.args[0].value)
        elif isinstance(node, (cst.Attribute, cst.Subscript)):
            stack.append(node.value)
    return seen


def _is_root(ctx: FileContext, node: cst.CSTNode) -> bool:
    return function_call(ctx, node, _ROOT_FUNCTIONS) or method_call(ctx, node, _ROOT_METHODS) is not None


def _code(ctx: FileContext, node: cst.CSTNode | None) -> str:
    return "" if node is None else ctx.code(node).replace(" ", "")


def _message(stat: Statistic) -> str:
    fact = stat.fact
    assert fact is not None
    names = fact.half_names()
    big = "squares above 256 overflow" if stat.kind in ("pow", "mul") else "a std above 256 overflows"
    hazards = [f"{big} float16 to inf"] if fact.may_be_fp16 else []
    if BF16 in fact.dtypes:
        hazards.append("bfloat16 rounds the statistic to 8 mantissa bits")
    if stat.kind == "pow":
        what = f"the mean of squares that normalises this tensor may be computed in {names}"
    elif stat.kind == "mul":
        what = f"the mean of `x * x` that normalises this tensor may be computed in {names}, which autocast leaves"
    else:
        what = f"`{stat.kind}` may return a {names} statistic, which autocast leaves"
    why = why_half(fact, names)
    return f"{what}, where {' and '.join(hazards)}; {why}"


_HELP = (
    "upcast the input, normalise in float32 and cast back: `input_dtype = x.dtype; x = x.to(torch.float32); "
    "variance = x.pow(2).mean(-1, keepdim=True); x = x * torch.rsqrt(variance + eps); "
    "return weight * x.to(input_dtype)`"
)


def _finding(ctx: FileContext, scope: Scope, stat: Statistic, hits: list[Hit]) -> Finding:
    assert stat.fact is not None
    message, evidence = _message(stat), stat.fact.why
    roots = [hit.sink for hit in hits if _is_root(ctx, hit.sink)]
    data = stat.data.left if isinstance(stat.data, cst.BinaryOperation) else stat.data  # `x` of `x - mean`
    # The fix writes `<reference>.dtype`: only of a name the engine knows holds a tensor there.
    named = isinstance(data, (cst.Name, cst.Attribute)) and ctx.facts.of(data).kind == TENSOR
    reference = data.with_changes(lpar=[], rpar=[]) if named else None
    if (
        len(hits) != 1
        or len(roots) != 1
        or reference is None
        or not any(n is stat.data for n in walk(stat.call))
    ):
        # Several uses, no root to cast back, or a square computed on another line: no mechanical edit.
        return Finding(stat.call, message, help=_HELP, evidence=evidence, caller_only=stat.fact.caller)
    root = cst.ensure_type(roots[0], cst.Call)
    float32, missing_import = upcast_dtype(ctx, stat.call, stat.data)
    upcast = with_method(stat.data, "to", float32)
    if stat.kind == "mul" and isinstance(stat.square, cst.BinaryOperation):
        new_square = stat.square.with_changes(left=upcast, right=upcast)
        new_stat = cst.ensure_type(stat.call.deep_replace(stat.square, new_square), cst.Call)
    else:
        new_stat = cst.ensure_type(stat.call.deep_replace(stat.data, upcast), cst.Call)
    cast_back: cst.BaseExpression = cst.Attribute(value=reference, attr=cst.Name("dtype"))
    # Under CUDA autocast the squares (`pow`) or the root (`rsqrt`) ran in float32, and so did the
    # root's product with the input: cast back to the dtype that op gives there, not to half.
    float32_op = "pow" if stat.kind == "pow" else callee_name(root)
    if autocast_policy(float32_op, "cuda") == "fp32":
        cast_back = op_dtype(cast_back, float32_op)
    replacements: tuple[tuple[cst.CSTNode, cst.CSTNode], ...]
    if any(node is stat.call for node in walk(root)):
        inner = cst.ensure_type(root.deep_replace(stat.call, new_stat), cst.Call)
        replacements = ((root, with_method(inner, "to", cast_back)),)
    elif _only_feeds(scope, stat.call, root):
        replacements = ((stat.call, new_stat), (root, with_method(root, "to", cast_back)))
    else:
        return Finding(stat.call, message, help=_HELP, evidence=evidence, caller_only=stat.fact.caller)
    fix = FixPlan(
        "Compute the normalisation statistic in float32 and cast its root back", replacements, missing_import
    )
    shown = " and ".join(f"`{' '.join(ctx.code(new).split())}`" for _, new in replacements)
    help = f"compute the statistic in float32, cast its root back: {shown}"
    return Finding(stat.call, message, fix=fix, help=help, evidence=evidence, caller_only=stat.fact.caller)


def _only_feeds(scope: Scope, stat: cst.Call, root: cst.Call) -> bool:
    """The statistic is bound to a name (`variance = x.pow(2).mean(...)`, perhaps plus an epsilon)
    that is read once in the function, inside `root`: then casting the root back keeps every dtype
    downstream as it was."""
    for statement in scope.body:
        for node in walk(statement):
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)
                and any(inner is stat for inner in walk(node.value))
            ):
                name = node.targets[0].target.value
                reads = [n for n in walk(scope.node) if isinstance(n, cst.Name) and n.value == name]
                in_root = [n for n in walk(root) if isinstance(n, cst.Name) and n.value == name]
                value = node.value
                while value is not stat:  # the statistic, or it plus or minus an epsilon
                    if not isinstance(value, cst.BinaryOperation) or not isinstance(
                        value.operator, (cst.Add, cst.Subtract)
                    ):
                        return False
                    value = value.left if any(n is stat for n in walk(value.left)) else value.right
                return len(reads) == 2 and len(in_root) == 1
    return False


def _has_zero(dim: cst.BaseExpression) -> bool:
    """`dim=(0,)`, `dim=[0, 2, 3]`: statistics over the batch, as batch norms take them."""
    return isinstance(dim, (cst.Tuple, cst.List)) and any(
        isinstance(e.value, cst.Integer) and e.value.value == "0" for e in dim.elements
    )
