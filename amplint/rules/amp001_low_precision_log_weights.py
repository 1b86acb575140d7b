"""AMP001: the RWKV7 regression (case 1)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst

from amplint.diagnostics import SAFE, UNSAFE, Confidence, Diagnostic
from amplint.rule import Rule, Verdict, dtype_keeping_fix
from amplint.runtime.chains import HALF, describe_error, measured_error, upcast_reached, where
from amplint.static.consumers import accumulations, bind_input, cast_back, upcast_dtype
from amplint.static.context import FileContext, Finding, FixPlan, scopes_holding
from amplint.static.facts import why_half
from amplint.static.flow import Flow, Hit, Policy, analyse, names_read
from amplint.static.patterns import argument, callee_name, function_call, is_matmul, method_call, upcast_input
from amplint.static.scopes import walk

_METHODS = frozenset({"sigmoid", "tanh"})
_FUNCTIONS = {f"torch.{op}": op for op in _METHODS} | {f"torch.nn.functional.{op}": op for op in _METHODS}
_FUNCTIONS |= {"torch.special.expit": "sigmoid", "torch.nn.functional.logsigmoid": "logsigmoid"}
_SINK_METHODS = frozenset({"exp", "exp2", "expm1", "cumsum", "cumprod", "logcumsumexp"})
_SINK_FUNCTIONS = {f"torch.{name}": name for name in _SINK_METHODS}
# Names that code in the RWKV/GLA/Mamba family gives to log-space decays and gates.
_LOG_DECAY_NAME = re.compile(
    r"^(log_?w|w_?log|gk|log_?gk|log_?g|g_?log|log_?gates?|log_?alpha|alpha_?log|.*decay.*)$",
    re.IGNORECASE,
)


if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

# The aten op each flagged call becomes in a trace.
_TRACED_OPS = {"sigmoid": "sigmoid", "expit": "sigmoid", "tanh": "tanh", "logsigmoid": "log_sigmoid_forward"}


class LowPrecisionLogWeights(Rule):
    """
    ## What it does
    Flags `sigmoid`, `tanh` and `logsigmoid` whose output becomes a log-space weight or decay (it
    flows into `exp`, `cumsum`/`cumprod` or a multiplicative recurrence, or is bound to a log-decay
    name such as `w`, `log_w`, `decay` or `gk`) while their input is not upcast to float32.

    On by default. Its hazard needs half precision, so it is reported where the project runs the
    code in bf16/fp16 (an execution mode found in its scripts, tests or configuration, named in
    the message); where nothing in the project does, the finding is conditional and shown only
    with `--show-conditional` (docs/usage.md#execution-modes).

    ## Why is this bad?
    CUDA autocast runs `exp`, `softplus`, `cumsum` and friends in float32, but `sigmoid`, `tanh` and
    `logsigmoid` are on no cast list: they keep their input's dtype, which after a Linear layer is
    bfloat16 (8 mantissa bits) or float16. The log-space weight is then rounded before anything
    upcasts it, and in a recurrence the decay is multiplied over thousands of steps, so the error
    compounds with context length. This is how RWKV7's log-decay silently moved from float32 to
    bfloat16 when `-softplus(...) - 0.5` was rewritten as `-exp(-0.5) * sigmoid(...)`.

    ## Example
    ```python
    w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()
    ```

    ## Fix
    Upcast the input before the op that does not upcast by itself, and cast the result back where
    it leaves the function:
    ```python
    w = (
        -math.exp(-0.5)
        * (sigmoid_input := self.w_lora(xw)).to(torch.promote_types(sigmoid_input.dtype, torch.float32)).sigmoid()
    )
    return w.to(sigmoid_input.dtype)
    ```
    Where the weight's uses are elementwise and end in a return, a product or a module, the fix
    casts the result back at those places and is safe; where it is mixed with another tensor on the
    way, it is cast back all the same and the fix is unsafe (the result may have been wider). A
    float32 weight returned uncast would reach callers the file does not show (another module's half
    product raises on it): where the fix cannot cast it back there, it is not offered. Where no name
    tells the input's dtype (a module's output, a sum of two tensors, a name bound again later), the
    fix binds the input once (`sigmoid_input := ...`) rather than computing it twice. Under CUDA
    autocast, a value that went through `exp`, `cumsum` or another op autocast runs in float32 was
    float32 before the fix: where it leaves, the cast back is to the dtype that op gives there
    (`x.new_empty(0).exp().dtype`: float32 under CUDA autocast, `x`'s dtype elsewhere).

    Where the weight starts a chain that meets a module or a product (a float32 value there would
    raise against half weights), in its function or in one of the file that it is returned to
    (`self.out(x * self.decay(x))`), or accumulates and leaves the function, the fix is one edit for
    the chain, RWKV7's form: upcast at the start, keep float32 through the accumulation, cast back once
    where the chain meets its consumer. With AMP007 on the `cumsum`, that is the fix of both:
    ```python
    w = -0.6065 * self.w_lora(x).to(torch.promote_types(x.dtype, torch.float32)).sigmoid()
    return self.out((x * torch.exp(w.cumsum(1))).to(x.dtype))
    ```
    It is unsafe: the dtype cast back to is the one of the tensor the module read (a Linear
    returns its input's dtype, another module may not). Where the chain returns what it
    accumulated, the cast back is to the dtype `cumsum` gives there (float32 under CUDA autocast,
    as before the fix). Where the value is mixed with another tensor on the way, the dtype to cast
    back to is not known: where it meets a module or a product, no fix is offered.

    The fix upcasts to `torch.promote_types(x.dtype, torch.float32)`: float32 for half values, while
    float64 code stays float64 (a plain float32 would lower its precision).

    ## References
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    - flash-linear-attention RWKV7 time-mix, log-decay `w`
    """

    code = "AMP001"
    name = "low-precision-log-weights"
    fix_applicability = UNSAFE  # the upcast value reaches consumers in float32
    summary = "sigmoid/tanh/logsigmoid output used as a log-space weight or decay without a float32 upcast"
    rests_on_half = True
    triggers = frozenset({"sigmoid", "tanh", "logsigmoid", "expit"})
    region_words = triggers

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        squashing = [node for node in nodes if node.op == diagnostic.extra.get("op")]
        if not squashing:
            return None
        half = [node for node in squashing if node.dtype in HALF]
        if not half:
            node = squashing[0]
            return Verdict(
                Confidence.REFUTED,
                f"`{node.op}` at {where(node)} ran in {node.dtype}: its input was already {node.input_dtypes[0]}",
            )
        node = half[0]
        evidence = f"`{node.op}` at {where(node)} ran in {node.dtype}"
        reached = upcast_reached(graph, node)
        extra: dict[str, object] = {}
        if reached is not None:
            cast, op = reached
            evidence += f"; its result reaches `{op.op}` at {where(op)}, which autocast upcast to float32"
            measured = measured_error(graph, [cast])
            if measured is not None:
                evidence += "; " + describe_error(graph, measured)
                extra["measured"] = measured
        return Verdict(Confidence.CONFIRMED, evidence, extra)

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        def seed(node: cst.BaseExpression, flow: Flow) -> bool:
            return _input(ctx, node) is not None and ctx.facts.of(node).may_be_half

        def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
            if isinstance(node, cst.Call):
                qualified = ctx.qualified(node.func)
                if qualified in _SINK_FUNCTIONS:
                    return _SINK_FUNCTIONS[qualified]
                if method_call(ctx, node, _SINK_METHODS) is not None:
                    return node.func.attr.value  # type: ignore[attr-defined]
            return None

        policy = Policy(
            seed=seed,
            sink=sink,
            blocks=lambda node, flow: is_matmul(ctx, node),
            name_sink=_is_log_decay_binding,
            recurrence=True,
        )
        reported: set[cst.CSTNode] = set()
        # A finding starts at a sigmoid/tanh: only the functions that call one need the dataflow.
        seeds = [call for call in ctx.index.calls if _input(ctx, call) is not None]
        for scope in scopes_holding(ctx, seeds):
            for hit in analyse(scope, policy).hits.values():
                if hit.origin not in reported and _possible(scope.node, hit):
                    reported.add(hit.origin)
                    assert isinstance(hit.origin, cst.Call)
                    yield _finding(ctx, hit.origin, hit.kind, hit.label)


def _possible(root: cst.CSTNode, hit: Hit) -> bool:
    """Whether the value can really get there: not when the seed and the sink sit in the two arms of
    one `if` outside any loop (the dataflow joins branches), nor for a recurrence whose factor is
    computed from the loop's carried state: the update gate of a GRU or LSTM cell interpolates
    activations, while the decay of a linear recurrence (RWKV, Mamba, GLA) depends on the input only."""
    loops = [node for node in walk(root) if isinstance(node, (cst.For, cst.While))]
    if hit.kind == "recurrence":
        loop = [loop for loop in loops if any(node is hit.sink for node in walk(loop.body))][-1]
        return not _from_carried_state(loop, hit.origin)
    looped = {id(node) for loop in loops for node in walk(loop.body)}
    ends = {id(hit.origin), id(hit.sink)}
    for node in walk(root):
        if isinstance(node, cst.If) and node.orelse is not None and id(node) not in looped:
            body, orelse = ({id(inner) for inner in walk(arm)} for arm in (node.body, node.orelse))
            if len(ends & body) == 1 and len(ends & orelse) == 1:
                return False
    return True


def _from_carried_state(loop: cst.For | cst.While, origin: cst.CSTNode) -> bool:
    """Whether `origin` is computed from a name that `loop` carries from one step to the next (one
    read in the loop before its first assignment there)."""
    carried: set[str] = set()
    seen: set[str] = set()
    inputs: dict[str, set[str]] = {}
    for node in walk(loop.body):
        if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign)) and node.value is not None:
            targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
            read = names_read(node.value) | (
                names_read(node.target) if isinstance(node, cst.AugAssign) else set()
            )
            seen |= read
            for name in {n for t in targets if not isinstance(t, cst.Attribute) for n in names_read(t)}:
                if name not in inputs and name in seen:
                    carried.add(name)
                inputs.setdefault(name, set()).update(read)
        elif isinstance(node, (cst.Expr, cst.If, cst.While)):
            seen |= names_read(node.value if isinstance(node, cst.Expr) else node.test)
    reached: set[str] = set()
    frontier = list(names_read(origin))
    while frontier:
        name = frontier.pop()
        if name not in reached:
            reached.add(name)
            frontier.extend(inputs.get(name, ()))
    return bool(reached & carried)


def _is_log_decay_binding(name: str, value: cst.CSTNode) -> bool:
    """A log-decay name. `w` alone is also a weight, a window, a soft-capped logit: it counts only when
    the arithmetic that forms the value negates it, as log-decays are (`w = -exp(-0.5) * sigmoid(x)`;
    not a minus inside call arguments such as `dim=-1`)."""
    if _LOG_DECAY_NAME.match(name):
        return True
    stack = [value] if name.lower() == "w" else []
    while stack:
        node = stack.pop()
        if isinstance(node, cst.UnaryOperation):
            if isinstance(node.operator, cst.Minus):
                return True
            stack.append(node.expression)
        elif isinstance(node, cst.BinaryOperation):
            stack.extend((node.left, node.right))
    return False


def _input(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    """The tensor a sigmoid/tanh/logsigmoid call reads, or None if `node` is not such a call."""
    if not isinstance(node, cst.Call):
        return None
    if function_call(ctx, node, frozenset(_FUNCTIONS)):
        return argument(node, 0, "input")
    receiver = method_call(ctx, node, _METHODS)
    if receiver is not None and not any(arg.keyword is None for arg in node.args):
        return receiver
    return None


def _finding(ctx: FileContext, call: cst.Call, kind: str, label: str) -> Finding:
    op = _FUNCTIONS.get(ctx.qualified(call.func) or "") or callee_name(call)
    if kind == "call":
        how = f"flows into `{label}`"
    elif kind == "name":
        how = f"becomes the log-space weight `{label}`"
    else:
        how = f"decays the state `{label}` inside a loop, so rounding errors compound with every step"
    fact = ctx.facts.of(call)
    half = fact.half_names()
    why = why_half(fact, half)
    message = (
        f"`{op}` output {how} while still in the input's low-precision dtype: autocast does not "
        f"upcast `{op}`, so the value is rounded to {half} before anything upcasts it; {why}"
    )
    source = _input(ctx, call)
    assert source is not None
    float32, missing_import = upcast_dtype(ctx, call, source)
    fixed = upcast_input(call, source, float32)
    description = f"Upcast the input of `{op}` to float32"
    plan = dtype_keeping_fix(ctx, call, fixed, source, description, missing_import)
    chain = _chain_fix(ctx, call, source, description)
    if chain is not None and (plan is None or plan.applicability != SAFE):
        plan = chain
    binding = bind_input(ctx, call, source, f"{op}_input") if plan is None else None
    if binding is not None:
        # `self.w_lora(xw).sigmoid()` returned: the input is bound once to read the dtype to cast back to.
        named, dtype = binding
        float32, missing_import = upcast_dtype(ctx, call, source, source=dtype)
        fixed = cst.ensure_type(upcast_input(call, source, float32).deep_replace(source, named), cst.Call)
        plan = dtype_keeping_fix(ctx, call, fixed, source, description, missing_import, source=dtype)
    if plan is not None:
        plan = _covering_accumulations(ctx, call, plan)
    # The help shows the edits the fix writes, the cast back included.
    edits = list(plan.replacements) if plan is not None else [(call, fixed)]
    shown = "; ".join(f"`{_shortened(' '.join(ctx.code(new).split()))}`" for _, new in edits)
    return Finding(
        call,
        message,
        fix=plan,
        help=f"upcast first: {shown}",
        extra={"op": _TRACED_OPS.get(op, op)},
        evidence=fact.why,
        caller_only=fact.caller,
    )


def _chain_fix(
    ctx: FileContext, call: cst.Call, source: cst.BaseExpression, description: str
) -> FixPlan | None:
    """The fix of the whole chain the weight starts, RWKV7's form: upcast at the start, keep float32
    through the accumulation, cast back once where the chain meets a module, a product or leaves
    the function (`consumers.cast_back` with `through_modules`). It fixes the `cumsum` of AMP007 on
    the way, whose input is then float32, with no cast of its own. Unsafe: the dtype cast back to is
    the one of the tensor the module read."""
    float32, missing_import = upcast_dtype(ctx, call, source, through_modules=True)
    edits = cast_back(ctx, call, upcast_input(call, source, float32), source, through_modules=True)
    if edits is None:
        return None
    where = "where it meets a module or a product or leaves the function"
    return FixPlan(
        f"{description}, keep its chain in float32, cast back once {where}", edits, missing_import, UNSAFE
    )


def _covering_accumulations(ctx: FileContext, call: cst.Call, plan: FixPlan) -> FixPlan:
    """`plan` covering each accumulation its upcast value reaches (AMP007's `cumsum`, which it keeps
    in float32): `amplint.fixing.edits` then writes this fix alone and counts a finding there as
    fixed by it, rather than writing both, whose casts would stack (`dtype=` on a float32 sum, a
    cast back to it)."""
    return replace(plan, covers=plan.covers + tuple(accumulations(ctx, call)))


def _shortened(code: str) -> str:
    return code if len(code) <= 80 else code[:77] + "..."
