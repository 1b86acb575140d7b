"""AMP019: gradient clipping on gradients that a GradScaler still holds scaled."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import libcst as cst

from amplint.diagnostics import UNSAFE
from amplint.rule import Rule
from amplint.source import LineIndex
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.cst_compat import SourceText
from amplint.static.facts import Step, shorten
from amplint.static.patterns import argument, method_call
from amplint.static.scopes import suite_body, walk

_CLIPS = {
    f"torch.nn.utils{module}.{name}": name.rstrip("_")
    for module in ("", ".clip_grad")
    for name in ("clip_grad_norm_", "clip_grad_norm", "clip_grad_value_")
}
_MESSAGE = (
    "`{clip}` clips gradients that `{backward}` (line {line}) left multiplied by the loss scale "
    "(65536 at the start), before `{scaler}.unscale_(...)`: the threshold applies to the scaled "
    "gradients, so once the scaler unscales them {effect}"
)
_EFFECT = {
    "clip_grad_norm": "almost every step's gradient norm is cut to max_norm / scale, a near-zero update",
    "clip_grad_value": "every gradient is clamped to ±clip_value / scale, a near-zero update",
}
_HELP = "call `{scaler}.unscale_({optimizer})` before clipping, so that the threshold applies to the true gradients"


class ClipScaledGradients(Rule):
    """
    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_` and `clip_grad_value_` called after
    `scaler.scale(loss).backward()` and before `scaler.step(optimizer)` of the same scaler in one
    function, with no `scaler.unscale_(optimizer)` between the backward and the clip. Branches that
    exclude each other (`if amp: scaler.scale(loss).backward()` / `else: loss.backward(); clip`) are
    told apart. Clipping through a framework that unscales first (`accelerator.clip_grad_norm_`,
    Lightning's `gradient_clip_val`) is not flagged, nor is a clip at infinity
    (`clip_grad_norm_(params, float("inf"))`), which only measures the norm.

    ## Why is this bad?
    `scaler.scale(loss).backward()` leaves every gradient multiplied by the scale, 65536 at the
    start and often far more later; `scaler.step` divides it out only afterwards. A clip in between
    compares the scaled gradients with a threshold meant for the true ones: `clip_grad_norm_(p, 1.0)`
    then shrinks nearly every step to a norm of 1 / 65536 of what was intended, and
    `clip_grad_value_(p, 0.1)` clamps every gradient to ±0.1 / 65536, so training crawls or stalls,
    and the norm it returns (often logged) is the scaled one.

    ## Example
    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
    ```

    ## Fix
    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    scaler.step(optimizer)
    scaler.update()
    ```
    The fix inserts the `unscale_` where the clip and `scaler.step` stand in the same block, so that
    it runs exactly once per step (`unscale_` raises when called twice before `update()`). It is
    unsafe (`--unsafe-fixes`): it makes the clip threshold bite on the true gradients, which changes
    training, and it unscales only the optimizer `scaler.step` is given.

    ## References
    - PyTorch AMP examples, "Gradient clipping":
      https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping
    - "add scaler.unscale_(optimizer) before clip_grad_norm_":
      https://github.com/pytorch/examples/issues/1196; "Gradients are clipped before the
      unscaling": https://github.com/milesial/Pytorch-UNet/issues/468
    """

    code = "AMP019"
    name = "clip-scaled-gradients"
    summary = "clip_grad_norm_/clip_grad_value_ between scaler.scale(loss).backward() and scaler.step() without unscale_"
    triggers = frozenset({"clip_grad_norm_", "clip_grad_norm", "clip_grad_value_"})
    region_words = triggers
    fix_applicability = UNSAFE

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for scope in ctx.scopes:
            events = list(_events(ctx, scope.body, (), scope.node))
            for i, clip in enumerate(events):
                if clip.kind == "clip":
                    finding = _check_clip(ctx, events, i)
                    if finding is not None:
                        yield finding


@dataclass(frozen=True)
class _Event:
    """A call the rule orders: `backward` (`<scaler>.scale(loss).backward()`), `unscale`, `step`
    (of `scaler`) or `clip`. `arms` are the branches it sits in, as (the `if`, which arm); `block`
    the statement list holding its statement."""

    kind: str
    call: cst.Call
    scaler: str
    arms: tuple[tuple[cst.If, int], ...]
    block: cst.CSTNode
    statement: cst.BaseStatement


def _events(
    ctx: FileContext,
    body: Sequence[cst.BaseStatement],
    arms: tuple[tuple[cst.If, int], ...],
    block: cst.CSTNode,
) -> Iterator[_Event]:
    """The scope's events in source order, not descending into the functions and classes it defines."""
    for statement in body:
        if isinstance(statement, (cst.FunctionDef, cst.ClassDef)):
            continue
        if isinstance(statement, cst.If):
            yield from _calls(ctx, statement.test, arms, block, statement)
            yield from _events(ctx, suite_body(statement.body), (*arms, (statement, 0)), statement.body)
            orelse = statement.orelse
            if isinstance(orelse, cst.If):
                yield from _events(ctx, (orelse,), (*arms, (statement, 1)), block)
            elif orelse is not None:
                yield from _events(ctx, suite_body(orelse.body), (*arms, (statement, 1)), orelse.body)
        elif isinstance(statement, cst.SimpleStatementLine):
            yield from _calls(ctx, statement, arms, block, statement)
        else:  # loops, `with`, `try`: their blocks run in order with what surrounds them
            header = [getattr(statement, name, None) for name in ("iter", "test")]
            header += [item.item for item in getattr(statement, "items", ())]
            for expr in header:
                if expr is not None:
                    yield from _calls(ctx, expr, arms, block, statement)
            blocks = [getattr(statement, name, None) for name in ("body", "orelse", "finalbody")]
            blocks += [handler.body for handler in getattr(statement, "handlers", ())]
            for inner in blocks:
                inner = inner.body if isinstance(inner, (cst.Else, cst.Finally)) else inner
                if isinstance(inner, cst.BaseSuite):
                    yield from _events(ctx, suite_body(inner), arms, inner)


def _calls(
    ctx: FileContext,
    node: cst.CSTNode,
    arms: tuple[tuple[cst.If, int], ...],
    block: cst.CSTNode,
    statement: cst.BaseStatement,
) -> Iterator[_Event]:
    for call in (n for n in walk(node) if isinstance(n, cst.Call)):
        if ctx.qualified(call.func) in _CLIPS:
            if not _unbounded(ctx, call):
                yield _Event("clip", call, "", arms, block, statement)
            continue
        receiver = method_call(ctx, call, frozenset({"backward", "unscale_", "step"}))
        if receiver is None or not isinstance(call.func, cst.Attribute):
            continue
        method = call.func.attr.value
        if method == "backward":
            scaled = method_call(ctx, receiver, frozenset({"scale"}))
            if scaled is not None:
                yield _Event("backward", call, ctx.code(scaled), arms, block, statement)
        else:
            yield _Event(method.rstrip("_"), call, ctx.code(receiver), arms, block, statement)


def _unbounded(ctx: FileContext, call: cst.Call) -> bool:
    """A clip at infinity (`clip_grad_norm_(params, float("inf"))`): it measures the norm, it cuts nothing."""
    limit = argument(call, 1, "max_norm") or argument(call, 1, "clip_value")
    number = ctx.facts.number(limit) if limit is not None else None
    return number is not None and math.isinf(number)


def _together(a: _Event, b: _Event) -> bool:
    """Whether two events can run in one pass: no `if` puts them in different arms."""
    arms = dict(a.arms)
    return all(arms.get(branch, arm) == arm for branch, arm in b.arms)


def _check_clip(ctx: FileContext, events: list[_Event], at: int) -> Finding | None:
    clip = events[at]
    before = [e for e in events[:at] if _together(e, clip)]
    after = [e for e in events[at + 1 :] if _together(e, clip)]
    for backward in reversed([e for e in before if e.kind == "backward"]):
        scaler = backward.scaler
        steps = [e for e in after if e.kind == "step" and e.scaler == scaler]
        since = before[before.index(backward) :]
        if not steps or any(e.kind == "unscale" and e.scaler == scaler for e in since):
            continue
        name = (ctx.qualified(clip.call.func) or "").rsplit(".", 1)[-1]
        message = _MESSAGE.format(
            clip=name,
            backward=shorten(ctx.code(backward.call)),
            line=ctx.facts.line(backward.call),
            scaler=scaler,
            effect=_EFFECT[_CLIPS[ctx.qualified(clip.call.func) or ""]],
        )
        step = steps[0]
        optimizer = ctx.code(step.call.args[0].value) if len(step.call.args) == 1 else "optimizer"
        evidence = (
            Step(backward.call, "the gradients are scaled here"),
            Step(step.call, "and unscaled here"),
        )
        return Finding(
            clip.call,
            message,
            fix=_fix(ctx, clip, step, after, scaler),
            help=_HELP.format(scaler=scaler, optimizer=optimizer),
            evidence=evidence,
        )
    return None


def _fix(ctx: FileContext, clip: _Event, step: _Event, after: list[_Event], scaler: str) -> FixPlan | None:
    """`<scaler>.unscale_(<optimizer>)` on a line of its own before the clip, where the clip and the
    scaler's only step after it stand in one block and nothing unscales between them: the unscale
    then runs once per step. None elsewhere."""
    steps = [e for e in after if e.kind == "step" and e.scaler == scaler]
    between = after[: after.index(step)]
    statement = clip.statement
    if (
        len(steps) != 1
        or step.block is not clip.block
        or len(step.call.args) != 1
        or step.call.args[0].keyword is not None
        or any(e.kind == "unscale" and e.scaler == scaler for e in between)
        or not isinstance(statement, cst.SimpleStatementLine)
        or len(statement.body) != 1
    ):
        return None
    small = statement.body[0]
    value = small.value if isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) else None
    code = ctx.code(small)
    where = ctx.position(small).start
    indent = LineIndex(ctx.text if ctx.text is not None else ctx.module.code).line_text(where.line)[
        : where.column
    ]
    if value is not clip.call or "\n" in code or "\r" in code or indent.strip():
        return None
    unscale = f"{scaler}.unscale_({ctx.code(step.call.args[0].value)})"
    text = SourceText(f"{unscale}{ctx.module.default_newline}{indent}{code}")
    return FixPlan(f"Call `{unscale}` before clipping", ((small, text),), applicability=UNSAFE)
