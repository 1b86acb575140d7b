"""Where a statement sits among a function's branches and blocks, by position: whether two nodes are
in different arms of one `if`, and whether a value reaching a call was computed in a `with` block
(AMP009: is the loss a backward propagates the one an autocast block computed)."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from amplint.static.context import FileContext
from amplint.static.scopes import walk


def reaches(
    ctx: FileContext, nodes: list[cst.CSTNode], setting: cst.CSTNode, call: cst.Call, block: bool
) -> bool:
    """Whether a setting at `setting` (a `with` block's, with `block`) can have made the value that
    `call` works on: it is not in another arm of an `if`, and a block's computed the value."""
    arms = [(n.body, n.orelse) for n in nodes if isinstance(n, cst.If) and n.orelse is not None]
    return not apart(ctx, arms, setting, call) and (not block or computed_under(ctx, nodes, setting, call))


def apart(
    ctx: FileContext, arms: Sequence[tuple[cst.CSTNode, cst.CSTNode]], one: cst.CSTNode, other: cst.CSTNode
) -> bool:
    """Whether `one` and `other` are in different arms of one `if` (its body and its `else`/`elif`)."""
    here, there = ctx.position(one).start, ctx.position(other).start
    for body, orelse in arms:
        first, second = ctx.position(body), ctx.position(orelse)
        if (_within(here, first) and _within(there, second)) or (
            _within(there, first) and _within(here, second)
        ):
            return True
    return False


def computed_under(ctx: FileContext, nodes: list[cst.CSTNode], autocast: cst.CSTNode, call: cst.Call) -> bool:
    """Whether the loss `call` backpropagates comes from the `with` block that `autocast` opens: the
    call is in the block, or the value it is called on is assigned there or from names that are
    (`out = model(x)` in the block, `loss = criterion(out, y)` after it). An autocast that opens no
    block here (a decorator, one entered through a name) is taken to."""
    at = ctx.position(autocast).start
    blocks = [ctx.position(n) for n in nodes if isinstance(n, cst.With) and _within(at, ctx.position(n))]
    if not blocks:
        return True
    block = max(blocks, key=lambda span: (span.start.line, span.start.column))  # the innermost
    where = ctx.position(call).start
    receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
    if _within(where, block) or not isinstance(receiver, cst.Name):
        return True
    return _from_block(ctx, nodes, receiver.value, (where.line, where.column), block, 3)


def _from_block(
    ctx: FileContext,
    nodes: list[cst.CSTNode],
    name: str,
    before: tuple[int, int],
    block: CodeRange,
    depth: int,
) -> bool:
    """Whether an assignment to `name` before `before` is in `block`, or reads a name (up to `depth`
    assignments back) assigned there: on one branch, the loss comes from the block."""
    found = [
        (start, node)
        for node in nodes
        if _assigns(node, name)
        and (start := ctx.position(node).start)
        and (start.line, start.column) < before
    ]
    if any(_within(start, block) for start, _ in found):
        return True
    if depth == 0:
        return False
    for start, node in found:
        value = getattr(node, "value", None)
        read = {n.value for n in walk(value) if isinstance(n, cst.Name)} if value is not None else set()
        here = (start.line, start.column)
        if any(_from_block(ctx, nodes, other, here, block, depth - 1) for other in sorted(read - {name})):
            return True
    return False


def _assigns(node: cst.CSTNode, name: str) -> bool:
    if isinstance(node, cst.Assign):
        return any(isinstance(t.target, cst.Name) and t.target.value == name for t in node.targets)
    if isinstance(node, (cst.AugAssign, cst.AnnAssign)):
        return isinstance(node.target, cst.Name) and node.target.value == name
    return False


def _within(at: CodePosition, span: CodeRange) -> bool:
    return (span.start.line, span.start.column) <= (at.line, at.column) <= (span.end.line, span.end.column)
