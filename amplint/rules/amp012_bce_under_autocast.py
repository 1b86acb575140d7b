"""AMP012: binary cross-entropy on probabilities, which CUDA autocast refuses to run."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import libcst as cst

from amplint.diagnostics import Severity
from amplint.rule import Rule
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.facts import Step
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.patterns import argument, method_call
from amplint.static.scopes import Scope, walk

_FUNCTIONS = frozenset({"torch.nn.functional.binary_cross_entropy"})
_MODULES = frozenset({"torch.nn.BCELoss", "torch.nn.modules.BCELoss", "torch.nn.modules.loss.BCELoss"})
_SIGMOID_FUNCTIONS = frozenset({"torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"})
_SIGMOID_METHODS = frozenset({"sigmoid"})
_MESSAGE = (
    '{what} raises under CUDA autocast ("unsafe to autocast") whatever the dtype of its inputs, '
    "and on float16 probabilities it loses the saturated tail of the sigmoid: compute the loss from "
    "logits with {fused}, which fuses the sigmoid and is autocast-safe{otherwise}; {why}"
)
# Where no sigmoid is seen the input may be a model's probabilities, with no logits to pass on.
_OTHERWISE = ", or in float32 with autocast off where only probabilities exist"
_HELP = (
    "pass the logits (the input of the sigmoid) to {fused}; or, where only probabilities exist, compute "
    'this loss outside autocast: `with torch.autocast("cuda", enabled=False): '
    "loss = F.binary_cross_entropy(p.float(), y.float())`"
)


class BceUnderAutocast(Rule):
    """
    ## What it does
    Flags `torch.nn.functional.binary_cross_entropy` and `torch.nn.BCELoss` where the dtype-facts
    engine says CUDA autocast can be on: inside an enabled CUDA `autocast` region of the file (or
    in a function the file calls from one), or in code that may run under the caller's autocast
    (the project's precision profile has a half dtype) and feeds the loss tensors it made half
    itself (`labels.half()`). Regions that disable autocast and CPU autocast regions (where the
    loss simply runs in float32) are left alone, and so is a loss that only the caller's choice
    could put under autocast: nothing in the file shows that it runs in mixed precision.

    ## Why is this bad?
    CUDA autocast refuses binary cross-entropy outright: the call raises `RuntimeError:
    torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast`, even for
    float32 inputs, so a model whose loss uses it cannot be trained with `torch.autocast` (or with
    `Trainer(bf16=True)`/`fp16=True`). The reason is numeric: the loss takes `log(p)` and
    `log(1 - p)` of probabilities that a half-precision sigmoid has already rounded to exactly 0 or
    1 in the tails, which the loss then clamps. `binary_cross_entropy_with_logits` takes the logits
    and computes the same loss stably with the log-sum-exp trick.

    ## Example
    ```python
    probs = torch.sigmoid(logits)
    loss = F.binary_cross_entropy(probs, labels)
    ```

    ## Fix
    ```python
    loss = F.binary_cross_entropy_with_logits(logits, labels)
    ```
    The fix is offered where the input is provably a sigmoid of something (`torch.sigmoid(z)`,
    `z.sigmoid()`, or a name bound once to one, with `z` unchanged since): the sigmoid is dropped and
    the call becomes its `_with_logits` form (`nn.BCELoss()` becomes `nn.BCEWithLogitsLoss()` when
    every call of the loss module in its function is fed a sigmoid). The other arguments (`weight`,
    `reduction`) keep their meaning. Elsewhere the help says what to change.

    ## References
    - "precision=16 doesn't work with binary_cross_entropy":
      https://github.com/Lightning-AI/pytorch-lightning/issues/13871; YOLOX fp16 training,
      https://github.com/Megvii-BaseDetection/YOLOX/issues/336
    - PyTorch AMP docs, "Prefer binary_cross_entropy_with_logits over binary_cross_entropy":
      https://pytorch.org/docs/stable/amp.html#prefer-binary-cross-entropy-with-logits-over-binary-cross-entropy
    - `torch.nn.functional.binary_cross_entropy_with_logits`, `torch.nn.BCEWithLogitsLoss`
    """

    code = "AMP012"
    name = "bce-under-autocast"
    summary = "binary_cross_entropy/BCELoss where autocast can be active (CUDA autocast raises on it)"
    severity = Severity.WARNING
    triggers = frozenset({"binary_cross_entropy", "BCELoss"})

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        calls = [call for call in ctx.index.calls if ctx.qualified(call.func) in _FUNCTIONS | _MODULES]
        scans = [_scan(ctx, scope) for scope in ctx.scopes] if calls else []
        for call in calls:
            if ctx.qualified(call.func) in _FUNCTIONS:
                finding = _functional(ctx, call, scans)
            else:
                finding = _module(ctx, call, scans)
            if finding is not None:
                yield finding


@dataclass
class _ScopeScan:
    scope: Scope
    # The logits behind the first argument of each call in the scope: the input of the sigmoid
    # that produced it, judged where the call is; None where that cannot be proven.
    logits: dict[cst.Call, cst.BaseExpression | None] = field(default_factory=dict)
    modules: dict[cst.Call, str] = field(default_factory=dict)  # BCELoss() -> the name bound to it
    # For each BCELoss() bound to a name: the calls of that name while it holds this module.
    uses: dict[cst.Call, list[cst.Call]] = field(default_factory=dict)
    # How often each of those names is read, and how often as the function of a call: a name read
    # otherwise (passed on, stored, returned) is used where this scope cannot see.
    reads: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def escapes(self, name: str) -> bool:
        return self.reads.get(name, 0) > self.calls.get(name, 0)


def _sigmoid_input(ctx: FileContext, node: cst.BaseExpression) -> cst.BaseExpression | None:
    if not isinstance(node, cst.Call):
        return None
    receiver = method_call(ctx, node, _SIGMOID_METHODS)
    if receiver is not None and not node.args:
        return receiver
    if ctx.qualified(node.func) in _SIGMOID_FUNCTIONS and len(node.args) == 1 and not node.args[0].star:
        return node.args[0].value
    return None


def _scan(ctx: FileContext, scope: Scope) -> _ScopeScan:
    """Walk the scope's dataflow once: at each call, what its first argument is the sigmoid of.
    A name bound to a sigmoid counts only if bound once, and the sigmoid's input only if it is a
    plain name not rebound since (so that substituting it gives the same value)."""
    scan = _ScopeScan(scope)
    snapshots: dict[cst.Call, int] = {}  # sigmoid call -> bindings of its input name seen there

    def bindings(flow: Flow, name: str) -> int:
        return len(flow.history.get(name, ()))

    def logits_of(data: cst.BaseExpression, flow: Flow) -> cst.BaseExpression | None:
        inline = _sigmoid_input(ctx, data)
        if inline is not None:
            return inline
        if not isinstance(data, cst.Name):
            return None
        bound = flow.history.get(data.value, [])
        if len(bound) != 1 or not isinstance(bound[0], cst.Call):
            return None
        source = _sigmoid_input(ctx, bound[0])
        if not isinstance(source, cst.Name) or snapshots.get(bound[0]) != bindings(flow, source.value):
            return None
        return source

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if isinstance(node, cst.Name) and node.value in names:
            scan.reads[node.value] = scan.reads.get(node.value, 0) + 1
        if not isinstance(node, cst.Call):
            return False
        source = _sigmoid_input(ctx, node)
        if isinstance(source, cst.Name):
            snapshots.setdefault(node, bindings(flow, source.value))
        data = argument(node, 0, "input")
        if data is not None:
            found = logits_of(data, flow)
            if node in scan.logits and scan.logits[node] is not found:
                found = None  # a loop body seen twice: the second pass must agree
            scan.logits[node] = found
        if isinstance(node.func, cst.Name) and node.func.value in names:
            name = node.func.value
            scan.calls[name] = scan.calls.get(name, 0) + 1
            held = flow.history.get(name, [])
            if held and isinstance(held[-1], cst.Call) and held[-1] in scan.uses:
                scan.uses[held[-1]].append(node)
        return False

    # `loss_fct = nn.BCELoss(...)` in the scope's body or its blocks, not in the functions it defines.
    function = scope.node if isinstance(scope.node, cst.FunctionDef) else None
    for node in (node for statement in scope.body for node in walk(statement)):
        if (
            isinstance(node, cst.Assign)
            and isinstance(node.targets[0].target, cst.Name)
            and isinstance(node.value, cst.Call)
            and ctx.qualified(node.value.func) in _MODULES
            and ctx.function_of(node.value) is function
        ):
            scan.modules[node.value] = node.targets[0].target.value
            scan.uses[node.value] = []
    names = set(scan.modules.values())
    analyse(scope, Policy(seed=seed))
    return scan


def _autocast_refuses(ctx: FileContext, places: list[cst.Call]) -> tuple[str, tuple[Step, ...]] | None:
    """Why CUDA autocast can be on where the loss runs (`places`: its calls), with the evidence: an
    enabled CUDA region of this file, or the caller's autocast where the loss is fed tensors this
    code made half. None where autocast is off, runs on the CPU, or only the caller could enable it."""
    for place in places:
        states = [state for state in ctx.facts.autocast_at(place) if state.device == "cuda"]
        regions = sorted({state.where for state in states if state.where is not None}, key=ctx.facts.line)
        if regions:
            lines = ", ".join(str(ctx.facts.line(region)) for region in regions)
            why = tuple(Step(region, "CUDA autocast is enabled here") for region in regions)
            return f"it runs under CUDA autocast (line {lines})", why
        inputs = [ctx.facts.of(arg.value) for arg in place.args[:2] if not arg.star]
        half = next((fact for fact in inputs if fact.may_be_half and not fact.caller), None)
        if states and half is not None:
            return f"the caller may run it under CUDA autocast, and its input is {half.explain()}", half.why
    return None


def _message(what: str, fused: str, why: str, *, fixed: bool) -> str:
    """The finding's message; without a fix, it names the float32 way out too."""
    return _MESSAGE.format(what=what, fused=fused, why=why, otherwise="" if fixed else _OTHERWISE)


def _functional(ctx: FileContext, call: cst.Call, scans: list[_ScopeScan]) -> Finding | None:
    refused = _autocast_refuses(ctx, [call])
    if refused is None:
        return None
    fused = "`F.binary_cross_entropy_with_logits`"
    logits = _logits(call, scans)
    data = argument(call, 0, "input")
    if logits is None or data is None:
        message = _message("`binary_cross_entropy`", fused, refused[0], fixed=False)
        return Finding(call, message, help=_HELP.format(fused=fused), evidence=refused[1])
    message = _message("`binary_cross_entropy`", fused, refused[0], fixed=True)
    func, missing = _renamed(ctx, call.func, ("nn", "functional", "binary_cross_entropy_with_logits"))
    fixed = call.with_changes(func=func, args=_replace_input(call, data, logits))
    return Finding(
        call,
        message,
        fix=FixPlan("Use `binary_cross_entropy_with_logits` on the logits", ((call, fixed),), missing),
        help=f"`{' '.join(ctx.code(fixed).split())}`",
        evidence=refused[1],
    )


def _module(ctx: FileContext, constructor: cst.Call, scans: list[_ScopeScan]) -> Finding | None:
    uses, scan = _module_uses(constructor, scans)
    refused = _autocast_refuses(ctx, uses or _attribute_uses(ctx, constructor) or [constructor])
    if refused is None:
        return None
    fused = "`nn.BCEWithLogitsLoss`"
    unfixed = Finding(
        constructor,
        _message("`nn.BCELoss`", fused, refused[0], fixed=False),
        help=_HELP.format(fused=fused),
        evidence=refused[1],
    )
    name = scan.modules.get(constructor) if scan is not None else None
    if not uses or (scan is not None and name is not None and scan.escapes(name)):
        return unfixed
    inputs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = []
    for use in uses:
        data = argument(use, 0, "input")
        logits = _logits(use, scans)
        if data is None or logits is None:
            return unfixed
        inputs.append((data, logits))
    func, missing = _renamed(ctx, constructor.func, ("nn", "BCEWithLogitsLoss"))
    new_constructor = constructor.with_changes(func=func)
    plan: tuple[tuple[cst.CSTNode, cst.CSTNode], ...]
    if len(uses) == 1 and uses[0].func is constructor:
        # `nn.BCELoss()(probs, y)`: one replacement covers both.
        (data, logits), use = inputs[0], uses[0]
        shown = use.with_changes(func=new_constructor, args=_replace_input(use, data, logits))
        plan = ((use, shown),)
    else:
        plan = ((constructor, new_constructor), *((data, logits) for data, logits in inputs))
        shown = new_constructor
    return Finding(
        constructor,
        _message("`nn.BCELoss`", fused, refused[0], fixed=True),
        fix=FixPlan("Use `nn.BCEWithLogitsLoss` on the logits", plan, missing),
        help=f"`{' '.join(ctx.code(shown).split())}` fed the logits",
        evidence=refused[1],
    )


def _attribute_uses(ctx: FileContext, constructor: cst.Call) -> list[cst.Call]:
    """The calls of a loss module kept as `self.<name> = nn.BCELoss()`: `self.<name>(p, y)`."""
    top = ctx.index.top_of.get(constructor)
    for node in walk(top) if top is not None else ():
        if isinstance(node, cst.Assign) and node.value is constructor:
            target = node.targets[0].target
            if isinstance(target, cst.Attribute) and ctx.code(target.value) == "self":
                name = target.attr.value
                return [
                    call
                    for call in ctx.index.calls
                    if isinstance(call.func, cst.Attribute)
                    and call.func.attr.value == name
                    and ctx.code(call.func.value) == "self"
                ]
    return []


def _module_uses(constructor: cst.Call, scans: list[_ScopeScan]) -> tuple[list[cst.Call], _ScopeScan | None]:
    """The calls that feed the loss module its inputs: `nn.BCELoss()(p, y)`, or the calls of the
    name it is bound to in its function. Empty when the module is kept elsewhere (`self.loss = ...`)."""
    for scan in scans:
        for call in scan.logits:
            if call.func is constructor:
                return [call], scan
        if constructor in scan.uses:
            return list(dict.fromkeys(scan.uses[constructor])), scan
    return [], None


def _logits(call: cst.Call, scans: list[_ScopeScan]) -> cst.BaseExpression | None:
    for scan in scans:
        if call in scan.logits:
            return scan.logits[call]
    return None


def _replace_input(call: cst.Call, data: cst.BaseExpression, logits: cst.BaseExpression) -> list[cst.Arg]:
    return [
        arg.with_changes(value=logits.with_changes(lpar=[], rpar=[])) if arg.value is data else arg
        for arg in call.args
    ]


def _renamed(
    ctx: FileContext, func: cst.BaseExpression, path: tuple[str, ...]
) -> tuple[cst.BaseExpression, bool]:
    """`F.binary_cross_entropy` -> `F.<last of path>`; a bare imported name -> `torch.<path>`
    (and whether `import torch` must be added)."""
    if isinstance(func, cst.Attribute):
        return func.with_changes(attr=cst.Name(path[-1])), False
    expr, missing = ctx.torch_name()
    for part in path:
        expr = cst.Attribute(value=expr, attr=cst.Name(part))
    return expr, missing
