"""Fixes that the dtype graph asks for, rendered as libcst edits of the source.

A chain of ops left in low precision (AMP101) is fixed where it starts, right after the last
low-precision product: the input of its first op is upcast, RWKV7-style,
`self.w_lora(xw).sigmoid()` -> `self.w_lora(xw).to(torch.float32).sigmoid()`, or, when the chain
starts with arithmetic on the product, `(x @ w * scale).sigmoid()` -> `(x @ w).to(torch.float32) * scale`;
an input whose dtype a name tells goes to `torch.promote_types(h.dtype, torch.float32)`, which keeps
float64 code in float64 (`amplint.static.consumers.upcast_dtype`).
The graph knows each op, its line and column; the expression is found there in the file as it is
now, so a file edited since the trace gets a fix for its current text, or none when the line no
longer holds the expression. The rule gives the points earliest first; the first one found wins.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from amplint.diagnostics import Fix
from amplint.rule import CastPoint
from amplint.rules.runner import render_fix
from amplint.source import LineIndex, SourceFile
from amplint.static.consumers import upcast_dtype
from amplint.static.context import FileContext, FixPlan
from amplint.static.patterns import argument, callee_name, method_call, upcast_input, with_method
from amplint.static.scopes import walk

# The Python calls each traced op comes from.
_CALLS = {
    "sigmoid": frozenset({"sigmoid", "expit"}),
    "tanh": frozenset({"tanh"}),
    "log_sigmoid_forward": frozenset({"logsigmoid"}),
    "silu": frozenset({"silu"}),
    "gelu": frozenset({"gelu"}),
    "erf": frozenset({"erf"}),
    "elu": frozenset({"elu"}),
    "hardsigmoid": frozenset({"hardsigmoid"}),
}
# The operators each traced arithmetic op comes from (`1 - x` is `rsub`).
_OPERATORS: dict[str, type[cst.BaseBinaryOp]] = {
    "add": cst.Add,
    "sub": cst.Subtract,
    "rsub": cst.Subtract,
    "mul": cst.Multiply,
    "div": cst.Divide,
}


def upcast_fix(source: SourceFile, points: Sequence[CastPoint]) -> tuple[Fix | None, str]:
    """The fix that upcasts the input at the first of `points` found in `source`, with its
    description; or None and why there is none."""
    try:
        module = cst.parse_module(source.text)
    except cst.ParserSyntaxError:
        return None, "the file does not parse any more"
    ctx = FileContext(source.path, module, text=source.text)
    reasons: list[str] = []
    for point in points:
        found = _expression(ctx, point)
        if isinstance(found, str):
            reasons.append(found)
            continue
        node, replacement, description = found
        float32, missing_import = upcast_dtype(ctx, replacement.node, replacement.data)
        plan = FixPlan(description, ((node, replacement(float32)),), missing_import)
        fix = render_fix(ctx, plan, LineIndex(source.text))
        if fix is not None:
            return fix, description
        reasons.append(f"the fix at line {point.line} could not be laid out in the file")
    return None, "; ".join(reasons)


_Found = tuple[cst.CSTNode, "_Replacement", str]


class _Replacement:
    """The edited expression, given the dtype expression to upcast to."""

    def __init__(self, node: cst.BaseExpression, data: cst.BaseExpression) -> None:
        self.node, self.data = node, data

    def __call__(self, float32: cst.BaseExpression) -> cst.CSTNode:
        if isinstance(self.node, cst.Call):
            return upcast_input(self.node, self.data, float32)
        assert isinstance(self.node, cst.BinaryOperation)
        upcast = with_method(self.data, "to", float32)
        side = "left" if self.data is self.node.left else "right"
        return self.node.with_changes(**{side: upcast})


def _expression(ctx: FileContext, point: CastPoint) -> _Found | str:
    """The expression of `point`'s op, how to upcast its input, and the fix's description; or why
    it is not there."""
    if point.op in _CALLS:
        names = _CALLS[point.op]
        calls = [
            call
            for call in ctx.index.calls
            if callee_name(call) in names and _at(ctx, call, point.line, point.column)
        ]
        if len(calls) != 1:
            return f"line {point.line} no longer holds exactly one `{point.op}` call"
        call = calls[0]
        data = method_call(ctx, call, names) or argument(call, 0, "input")
        if data is None:
            return f"the `{point.op}` call on line {point.line} has no input to upcast"
        return call, _Replacement(call, data), f"Upcast the input of `{callee_name(call)}` to float32"
    operator = _OPERATORS.get(point.op)
    if operator is None:
        return f"no upcast fix is known for `{point.op}`"
    operations = [
        node
        for node in walk(ctx.module)
        if isinstance(node, cst.BinaryOperation)
        and isinstance(node.operator, operator)
        and _at(ctx, node, point.line, point.column)
    ]
    if len(operations) != 1:
        return f"line {point.line} no longer holds exactly one such `{point.op}`"
    operation = operations[0]
    data = _operand(ctx, operation, point.operand)
    if data is None:
        return f"which operand of the `{point.op}` on line {point.line} is low precision is not clear"
    symbol = cst.Module([]).code_for_node(operation.operator).strip()
    return (
        operation,
        _Replacement(operation, data),
        f"Upcast the low-precision operand of `{symbol}` to float32",
    )


def _at(ctx: FileContext, node: cst.CSTNode, line: int, column: int | None) -> bool:
    start = ctx.position(node).start
    return start.line == line and (column is None or start.column == column - 1)


def _operand(
    ctx: FileContext, operation: cst.BinaryOperation, where: tuple[int, int | None] | None
) -> cst.BaseExpression | None:
    """The operand computed at `where`: the expression that starts there, or a name assigned on
    that line."""
    if where is None:
        return None
    line, column = where
    operands = (operation.left, operation.right)
    if column is not None:
        starting = [node for node in operands if _at(ctx, node, line, column)]
        if len(starting) == 1:
            return starting[0]
    assigned = {
        name
        for statement in walk(ctx.module)
        if isinstance(statement, (cst.Assign, cst.AnnAssign, cst.AugAssign))
        and ctx.position(statement).start.line == line
        for name in _target_names(statement)
    }
    names = [node for node in operands if isinstance(node, cst.Name) and node.value in assigned]
    return names[0] if len(names) == 1 else None


def _target_names(statement: cst.Assign | cst.AnnAssign | cst.AugAssign) -> list[str]:
    targets = (
        [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
    )
    return [target.value for target in targets if isinstance(target, cst.Name)]
