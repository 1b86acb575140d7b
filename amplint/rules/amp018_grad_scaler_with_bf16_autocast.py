"""AMP018: a GradScaler scaling a loss that bfloat16 autocast computed."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.context import FileContext, Finding
from amplint.static.facts import Autocast, Step, shorten
from amplint.static.imports import dotted_name
from amplint.static.ops import BF16
from amplint.static.patterns import argument, method_call
from amplint.static.scopes import suite_body, walk

# A flag named for float16 (`enabled=args.fp16`, `enabled=use_half`): the scaler is on for it alone.
_FLOAT16_FLAG = re.compile(r"(?:^|_)(?:fp16|float16|half)(?:$|_)", re.IGNORECASE)
# torch's loss scalers, with the position of `enabled` in each signature.
_SCALERS = {
    "torch.amp.GradScaler": 5,
    "torch.amp.grad_scaler.GradScaler": 5,
    "torch.GradScaler": 5,
    "torch.cuda.amp.GradScaler": 4,
    "torch.cuda.amp.grad_scaler.GradScaler": 4,
    "torch.cpu.amp.GradScaler": 4,
    "torch.cpu.amp.grad_scaler.GradScaler": 4,
    "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler": 5,
    "torch.distributed.fsdp.ShardedGradScaler": 5,
}
_MESSAGE = (
    "`{scale}` scales a loss computed under bfloat16 autocast ({where}): bfloat16 has float32's "
    "exponent range, so its gradients do not underflow and loss scaling has nothing to do; the "
    "GradScaler (line {line}) still multiplies the loss, unscales and checks every gradient for "
    "inf/NaN each step, and skips a step whenever its growing scale overflows"
)
_HELP = (
    "drop the scaler for bfloat16 (`loss.backward()`, `optimizer.step()`), or create it enabled only "
    'for float16: `torch.amp.GradScaler("cuda", enabled=amp_dtype == torch.float16)`'
)

# Where a scaler lives: (the function or module, name) for a variable, (the class, name) for `self.<name>`.
_Key = tuple[cst.CSTNode, str]


class GradScalerWithBf16Autocast(Rule):
    """
    ## What it does
    Flags `scaler.scale(loss)` where `scaler` is a GradScaler (`torch.amp`, `torch.cuda.amp`,
    `ShardedGradScaler`) the file creates and the dtype-facts engine says every autocast region
    `loss` was computed under is bfloat16 (entered directly, or through a variable or a `self`
    attribute holding it). Not flagged: a region whose dtype is chosen at run time, or a scaler
    created with `enabled=False`, with an `enabled=` that follows the dtype or a float16 flag
    (`enabled=args.fp16`), or only in a branch on the dtype (`if amp_dtype == torch.float16:`).

    ## Why is this bad?
    Loss scaling exists for float16, whose 5 exponent bits flush gradients below 6e-8 to zero;
    bfloat16 has float32's 8, so its gradients do not underflow and a scaler protects nothing. It
    still multiplies, unscales and checks every gradient for inf/NaN each step, and its scale doubles
    every 2000 clean steps until the scaled gradients overflow and it silently skips a step. With
    bfloat16 parameters, `unscale_` raises (`..._unscale_cuda not implemented for 'BFloat16'`).

    ## Example
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```

    ## Fix
    ```python
    for x, y in loader:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```
    or, where the loop also runs in float16, `enabled=amp_dtype == torch.float16`. The edit spans
    the scaler's creation and every use, so amplint does not make it.

    ## References
    - "fix: remove the unused GradScaler from SAETrainer": https://github.com/decoderesearch/SAELens/pull/723
    - "do not scale gradient in bf16 mode": https://github.com/huggingface/accelerate/pull/1036,
      https://github.com/huggingface/transformers/pull/21428
    - PyTorch AMP docs, gradient scaling: https://pytorch.org/docs/stable/amp.html#gradient-scaling
    """

    code = "AMP018"
    name = "grad-scaler-with-bf16-autocast"
    summary = "GradScaler scaling a loss computed under bfloat16 autocast (bf16 needs no loss scaling)"
    triggers = frozenset({"GradScaler", "ShardedGradScaler"})
    # The scaler's creation, the autocast region (or the context object's creation) and `.scale(`.
    region_words = frozenset({"GradScaler", "ShardedGradScaler", "autocast", "scale"})

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        classes = _classes(ctx)
        scalers = _scalers(ctx, classes)
        if not scalers:
            return
        for_a_dtype = _created_for_a_dtype(ctx)
        for call in ctx.index.calls:
            receiver = method_call(ctx, call, frozenset({"scale"}))
            key = _key(ctx, classes, receiver, call) if receiver is not None else None
            built = scalers.get(key) if key is not None else None
            loss = argument(call, 0, "outputs")
            if built is None or loss is None or any(_may_be_off(ctx, s) or s in for_a_dtype for s in built):
                continue
            under = ctx.facts.computed_under(loss)
            regions = [s for s in under if s.device is not None and s.where is not None]
            if regions and all(state.dtype == BF16 for state in regions):
                yield _finding(ctx, call, built[0], regions)


def _classes(ctx: FileContext) -> dict[cst.FunctionDef, cst.ClassDef]:
    return {
        method: klass
        for klass in ctx.module.body
        if isinstance(klass, cst.ClassDef)
        for method in suite_body(klass.body)
        if isinstance(method, cst.FunctionDef)
    }


def _key(
    ctx: FileContext,
    classes: dict[cst.FunctionDef, cst.ClassDef],
    target: cst.BaseExpression,
    at: cst.CSTNode,
) -> _Key | None:
    scope = ctx.scope_of(at) or ctx.module
    function = scope if isinstance(scope, cst.FunctionDef) else None
    if isinstance(target, cst.Name):
        return (scope, target.value)
    name = dotted_name(target)  # `self.scaler`
    if name is not None and name.count(".") == 1 and name.startswith("self.") and function in classes:
        return (classes[function], name.removeprefix("self."))
    return None


def _scalers(ctx: FileContext, classes: dict[cst.FunctionDef, cst.ClassDef]) -> dict[_Key, list[cst.Call]]:
    """The GradScalers the file creates, by where they are bound (`scaler = GradScaler()`,
    `self.scaler = GradScaler() if amp else None`). A module-level scaler is also each function's."""
    found: dict[_Key, list[cst.Call]] = {}
    for node in walk(ctx.module):
        if isinstance(node, cst.Assign):
            targets, value = [target.target for target in node.targets], node.value
        elif isinstance(node, cst.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        built = [c for c in walk(value) if isinstance(c, cst.Call) and ctx.qualified(c.func) in _SCALERS]
        for target in targets if built else ():
            key = _key(ctx, classes, target, node)
            if key is not None:
                found.setdefault(key, []).extend(built)
    module_level = {name: built for (scope, name), built in found.items() if scope is ctx.module}
    for function in (scope.node for scope in ctx.scopes if isinstance(scope.node, cst.FunctionDef)):
        for name, built in module_level.items():
            found.setdefault((function, name), built)
    return found


def _created_for_a_dtype(ctx: FileContext) -> set[cst.Call]:
    """The scalers created only in a branch on the dtype (`if amp_dtype == torch.float16:`), so for
    float16 alone: psann 2.0.1's trainer, whose bfloat16 default makes none."""
    return {
        c
        for n in walk(ctx.module)
        if isinstance(n, cst.If)
        for c in walk(n)
        if isinstance(c, cst.Call) and ctx.qualified(c.func) in _SCALERS and ctx.facts.mentions_dtype(n.test)
    }


def _may_be_off(ctx: FileContext, scaler: cst.Call) -> bool:
    """A scaler that may be off: `enabled=False`, or following the dtype or a float16 flag, or `**kwargs`."""
    if any(arg.star == "**" for arg in scaler.args):
        return True
    enabled = argument(scaler, _SCALERS[ctx.qualified(scaler.func) or ""], "enabled")
    if enabled is None:
        return False
    names = [n.value for n in walk(enabled) if isinstance(n, cst.Name)]
    return names == ["False"] or ctx.facts.mentions_dtype(enabled) or any(map(_FLOAT16_FLAG.search, names))


def _finding(ctx: FileContext, call: cst.Call, scaler: cst.Call, regions: list[Autocast]) -> Finding:
    places = sorted({state.where for state in regions if state.where is not None}, key=ctx.facts.line)
    where = "line " + ", ".join(str(ctx.facts.line(place)) for place in places)
    message = _MESSAGE.format(scale=shorten(ctx.code(call)), where=where, line=ctx.facts.line(scaler))
    evidence = (
        *(Step(place, "bfloat16 autocast") for place in places),
        Step(scaler, "the GradScaler is created here"),
    )
    return Finding(call, message, help=_HELP, evidence=evidence)
