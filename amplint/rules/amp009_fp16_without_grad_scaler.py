"""AMP009: a float16 training step without gradient scaling (case 3)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import libcst as cst

from amplint.rule import Rule
from amplint.static.branches import Branches
from amplint.static.context import FileContext, Finding
from amplint.static.engine.interpret import FLOAT16_WORDS
from amplint.static.facts import Float16
from amplint.static.imports import dotted_name
from amplint.static.patterns import function_call, method_call
from amplint.static.scopes import walk

# Words that put a loss scaler in scope: torch's GradScaler and its FSDP variant, apex's
# `amp.scale_loss`, and the loss scalers of DeepSpeed, Megatron and fairseq.
_SCALER_WORDS = frozenset(
    {
        "GradScaler",
        "ShardedGradScaler",
        "scale_loss",
        "LossScaler",
        "DynamicLossScaler",
        "DynamicGradScaler",
        "loss_scaler",
        "grad_scaler",
        "unscale_",
    }
)
_OPTIMIZER = re.compile(r"optim|(^|_)opt($|_)", re.IGNORECASE)

_AUTOCAST_MESSAGE = (
    "`backward()` on a loss computed under float16 autocast with no GradScaler in scope: gradients "
    "below float16's smallest subnormal (6e-8) flush to zero, so updates are lost silently, and an "
    "overflowing step writes inf/NaN into the weights instead of being skipped"
)
_AUTOCAST_HELP = (
    'create `scaler = torch.amp.GradScaler("cuda")` and call `scaler.scale(loss).backward()`, '
    "`scaler.step(optimizer)`, `scaler.update()`; or autocast to `torch.bfloat16`, which needs no scaler"
)
_HALF_MESSAGE = (
    "`backward()` through a float16 model (`{}`) with no loss scaling: gradients below float16's "
    "smallest subnormal (6e-8) flush to zero and weight updates smaller than float16's resolution "
    "vanish, so training stalls or diverges"
)
_HALF_HELP = (
    'keep the weights in float32 and train under `torch.autocast("cuda", dtype=torch.float16)` with '
    '`torch.amp.GradScaler("cuda")` (it cannot unscale float16 gradients), or train in bfloat16'
)


class Fp16WithoutGradScaler(Rule):
    """
    ## What it does
    Flags a training step (a `loss.backward()` and an optimizer step in the same function) whose
    loss is computed under float16 autocast (`torch.autocast("cuda")` defaults to float16, as does
    `torch.cuda.amp.autocast()`) or by a model cast to float16 (`.half()`, `.to(torch.float16)`),
    when no GradScaler is in scope. A scaler anywhere in the module's code, not in a comment, counts
    (`GradScaler`, `scaler.scale(loss).backward()`, `scaler.unscale_(...)`, apex's `amp.scale_loss`,
    DeepSpeed's and Megatron's loss scalers), and so does a backward delegated to a framework that scales
    the loss itself (`accelerator.backward(loss)`, `fabric.backward(loss)`, `engine.backward(loss)`).
    bfloat16 autocast needs no scaler and is not flagged, nor is another format's autocast
    (TransformerEngine's `te.fp8_autocast`, which scales its FP8 tensors itself) or a wrapper of
    autocast that names no dtype (its dtype is set elsewhere).

    Off by default (opt-in) after review 34: of 21 first-contact reads (docs/measured.md), 8 real and
    1 worth a look; most others trained outside the cited float16 autocast, or in float32. Turn it
    on with `--extend-select AMP009` (or `extend-select` under `[tool.amplint]`).

    ## Why is this bad?
    float16 has 5 exponent bits: values below about 6e-8 flush to zero. Gradients of a loss are often
    that small, so without scaling they vanish in the float16 part of the backward pass and the
    weights stop learning without an error. A GradScaler multiplies the loss before `backward` and
    divides the gradients before the step, and it skips steps whose gradients overflowed instead of
    writing inf/NaN into the weights. A model cast to float16 as a whole has a second problem: an
    update smaller than float16's resolution relative to the weight is rounded away.

    ## Example
    ```python
    for batch in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
    ```

    ## Fix
    ```python
    scaler = torch.amp.GradScaler("cuda")
    for batch in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
    ```
    or autocast to `torch.bfloat16` where the GPU supports it. The edit touches several statements and
    adds state, so amplint does not make it.

    ## References
    - PyTorch automatic mixed precision recipe: https://pytorch.org/docs/stable/notes/amp_examples.html
    - `torch.amp.GradScaler`
    """

    code = "AMP009"
    name = "fp16-without-grad-scaler"
    default_on = False
    summary = "backward and optimizer step under float16 autocast or on a .half() model without a GradScaler"
    training_run = True
    triggers = frozenset({"backward"})
    also_triggers = (FLOAT16_WORDS, frozenset({"step", "optimizer_step"}))
    # The backward call; the optimizer step and the float16 setting are judged beside it.
    region_words = triggers

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        calls = ctx.index.calls
        if ctx.in_code(_SCALER_WORDS) or any(_scaled_backward(ctx, call) for call in calls):
            return
        backwards = {id(call): call for call in calls if _unscaled_backward(ctx, call)}
        if not backwards:
            return
        script = [
            node
            for statement in ctx.module.body
            if not isinstance(statement, (cst.FunctionDef, cst.ClassDef))
            for node in walk(statement)
            if ctx.scope_of(node) is ctx.module  # not in a function defined under an `if`
        ]
        # A model cast in the script is the model its functions train.
        script_cast = next(
            (f for n in script if (f := ctx.facts.float16_setting(n)) and not f.autocast), None
        )
        reported: set[int] = set()
        for scope in ctx.scopes:
            nodes = script if isinstance(scope.node, cst.Module) else list(walk(scope.node))
            mine = [backwards[id(n)] for n in nodes if id(n) in backwards and id(n) not in reported]
            if not mine or not any(_optimizer_step(ctx, n) for n in nodes):
                continue
            settings = [f for n in nodes if (f := ctx.facts.float16_setting(n)) is not None]
            branches = Branches(ctx, nodes)
            for call in mine:
                # A setting in another `if` arm, or a block the loss is not made in, trains another.
                near = [f for f in settings if branches.reaches(f.node, call, block=f.autocast)]
                float16 = next((f for f in near if f.autocast), None) or next(iter(near), script_cast)
                if float16 is not None:
                    reported.add(id(call))
                    yield _finding(ctx, call, float16)


def _finding(ctx: FileContext, call: cst.Call, float16: Float16) -> Finding:
    why = ctx.facts.describe(float16.why, call)
    if float16.autocast:
        message, help = _AUTOCAST_MESSAGE, _AUTOCAST_HELP
    else:
        message, help = _HALF_MESSAGE.format(float16.spelled), _HALF_HELP
    return Finding(call, message + (f"; float16 here: {why}" if why else ""), help=help, evidence=float16.why)


def _unscaled_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`loss.backward()` (keywords only) or `torch.autograd.backward(loss)`. A `backward` with a
    positional argument is a framework's (`accelerator.backward(loss)`, `engine.backward(loss)`) or
    a partial backward with an incoming gradient; a scaled loss (`scaler.scale(loss)`,
    `loss * loss_scale`) is already handled."""
    if function_call(ctx, call, frozenset({"torch.autograd.backward"})):
        return True
    receiver = method_call(ctx, call, frozenset({"backward"}))
    if receiver is None or any(arg.keyword is None for arg in call.args):
        return False
    if isinstance(receiver, cst.BinaryOperation) and isinstance(receiver.operator, cst.Multiply):
        return False
    return method_call(ctx, receiver, frozenset({"scale"})) is None


def _scaled_backward(ctx: FileContext, call: cst.Call) -> bool:
    """`<scaler>.scale(loss).backward()`: a scaler under another name (a parameter) is in scope."""
    receiver = method_call(ctx, call, frozenset({"backward"}))
    return receiver is not None and method_call(ctx, receiver, frozenset({"scale"})) is not None


def _optimizer_step(ctx: FileContext, node: cst.CSTNode) -> bool:
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Name):
        return func.value == "optimizer_step"
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value != "step":
        return func.attr.value == "optimizer_step"
    if not any(arg.keyword is None for arg in node.args):
        return True  # `optimizer.step()`; `env.step(action)` takes an argument
    name = dotted_name(func.value)
    return name is not None and bool(_OPTIMIZER.search(name.rsplit(".", 1)[-1]))
