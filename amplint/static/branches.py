"""Where a statement sits among a function's branches and blocks, by position: whether two nodes are
in different arms of one `if`, and whether a value reaching a call was computed in a `with` block
(AMP009: is the loss a backward propagates the one an autocast block computed)."""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst
from libcst.metadata import CodePosition, CodeRange

from amplint.static.context import FileContext
from amplint.static.scopes import walk


class Branches:
    """One scope's `if` arms, `with` blocks and assignments by name, found once and asked for each
    pair of a float16 setting and a backward call."""

    def __init__(self, ctx: FileContext, nodes: Sequence[cst.CSTNode]) -> None:
        self._ctx = ctx
        self._arms = [
            (ctx.position(n.body), ctx.position(n.orelse))
            for n in nodes
            if isinstance(n, cst.If) and n.orelse is not None
        ]
        self._blocks = [ctx.position(n) for n in nodes if isinstance(n, cst.With)]
        # name -> (where, assigned value) for each plain assignment to it
        self._assigned: dict[str, list[tuple[CodePosition, cst.BaseExpression | None]]] = {}
        for node in nodes:
            for name in _targets(node):
                value = getattr(node, "value", None)
                self._assigned.setdefault(name, []).append((ctx.position(node).start, value))

    def reaches(self, setting: cst.CSTNode, call: cst.Call, block: bool) -> bool:
        """Whether a setting at `setting` (a `with` block's, with `block`) can have made the value
        that `call` works on: it is not in another arm of an `if`, and a block's computed the value."""
        return not self.apart(setting, call) and (not block or self.computed_under(setting, call))

    def apart(self, one: cst.CSTNode, other: cst.CSTNode) -> bool:
        """Whether `one` and `other` are in different arms of one `if` (its body and its `else`/`elif`)."""
        here, there = self._ctx.position(one).start, self._ctx.position(other).start
        return any(
            (_within(here, first) and _within(there, second))
            or (_within(there, first) and _within(here, second))
            for first, second in self._arms
        )

    def computed_under(self, autocast: cst.CSTNode, call: cst.Call) -> bool:
        """Whether the loss `call` backpropagates comes from the `with` block that `autocast` opens:
        the call is in the block, or the value it is called on is assigned there or from names that
        are (`out = model(x)` in the block, `loss = criterion(out, y)` after it). An autocast that
        opens no block here (a decorator, one entered through a name) is taken to."""
        at = self._ctx.position(autocast).start
        blocks = [span for span in self._blocks if _within(at, span)]
        if not blocks:
            return True
        block = max(blocks, key=lambda span: (span.start.line, span.start.column))  # the innermost
        where = self._ctx.position(call).start
        receiver = call.func.value if isinstance(call.func, cst.Attribute) else None
        if _within(where, block) or not isinstance(receiver, cst.Name):
            return True
        return self._from_block(receiver.value, (where.line, where.column), block, 3)

    def _from_block(self, name: str, before: tuple[int, int], block: CodeRange, depth: int) -> bool:
        """Whether an assignment to `name` before `before` is in `block`, or reads a name (up to
        `depth` assignments back) assigned there: on one branch, the loss comes from the block."""
        found = [(at, value) for at, value in self._assigned.get(name, ()) if (at.line, at.column) < before]
        if any(_within(at, block) for at, _ in found):
            return True
        if depth == 0:
            return False
        for at, value in found:
            read = {n.value for n in walk(value) if isinstance(n, cst.Name)} if value is not None else set()
            here = (at.line, at.column)
            if any(self._from_block(other, here, block, depth - 1) for other in sorted(read - {name})):
                return True
        return False


def _targets(node: cst.CSTNode) -> list[str]:
    """The plain names an assignment statement binds (`a = b = ...`, `a += ...`, `a: T = ...`)."""
    if isinstance(node, cst.Assign):
        return [t.target.value for t in node.targets if isinstance(t.target, cst.Name)]
    if isinstance(node, (cst.AugAssign, cst.AnnAssign)) and isinstance(node.target, cst.Name):
        return [node.target.value]
    return []


def _within(at: CodePosition, span: CodeRange) -> bool:
    return (span.start.line, span.start.column) <= (at.line, at.column) <= (span.end.line, span.end.column)
