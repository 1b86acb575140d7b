"""AMP021: `with A() and B():`, where `with` enters only one of the context managers."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from amplint.diagnostics import UNSAFE
from amplint.rule import Rule
from amplint.static.autocast import AUTOCAST
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.scopes import walk


class ContextManagersJoinedByAnd(Rule):
    """
    ## What it does
    Flags a `with` item that joins context managers with `and` (or `or`), where one of them is an
    autocast (`torch.autocast`, `torch.amp.autocast`, `torch.cuda.amp.autocast`,
    `torch.cpu.amp.autocast`): `with torch.cuda.amp.autocast() and torch.no_grad():`. Every operand
    must be a call; `with use_amp and torch.autocast("cuda") or nullcontext():` picks one on
    purpose and is not flagged, nor is `with make_ctx() or torch.autocast("cuda"):`, whose first
    call may return None to fall back.

    ## Why is this bad?
    `and` is not a list of context managers: it evaluates to one of its operands. An autocast
    object (like any object without `__bool__`) is true, so `A() and B()` is `B()`: `with` enters
    `B()` alone, and `A()` is built and dropped. `with torch.cuda.amp.autocast() and
    torch.no_grad():` runs the block without autocast, in float32, at full cost in time and
    memory, and no warning says so; `with torch.no_grad() and torch.autocast("cuda"):` records the
    autograd graph it meant to skip. `A() or B()` enters `A()` and never builds `B()`.

    ## Example
    ```python
    with torch.cuda.amp.autocast() and torch.no_grad():
        logits = model(x)
    ```

    ## Fix
    ```python
    with torch.cuda.amp.autocast(), torch.no_grad():
        logits = model(x)
    ```
    The fix enters every context manager, as the code meant. It is unsafe: the block then runs
    under the autocast it never had (half precision, outputs of another dtype) or without the
    gradients it used to record, which changes what it computes. `with (A() and B()):` becomes
    `with (A(), B()):`, which needs Python 3.9.

    ## References
    - The `with` statement with several items: https://docs.python.org/3/reference/compound_stmts.html#the-with-statement
    - Boolean operations return an operand: https://docs.python.org/3/reference/expressions.html#boolean-operations
    """

    code = "AMP021"
    name = "context-managers-joined-by-and"
    summary = "`with A() and B():` enters only one context manager, where one of them is an autocast"
    triggers = frozenset({"autocast"})
    region_words = frozenset({"autocast"})
    fix_applicability = UNSAFE  # entering the autocast changes the block's dtypes on purpose

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        for node in walk(ctx.module):
            if isinstance(node, cst.With):
                for item in node.items:
                    finding = _joined(ctx, item.item)
                    if finding is not None:
                        yield finding


def _operands(node: cst.BaseExpression, operator: type[cst.BaseBooleanOp]) -> list[cst.BaseExpression]:
    """`a and b and c` as `[a, b, c]` (unparenthesised operands joined by the same operator)."""
    if isinstance(node, cst.BooleanOperation) and isinstance(node.operator, operator) and not node.lpar:
        return [*_operands(node.left, operator), *_operands(node.right, operator)]
    return [node]


def _joined(ctx: FileContext, item: cst.BaseExpression) -> Finding | None:
    if not isinstance(item, cst.BooleanOperation):
        return None
    operator = type(item.operator)
    operands = _operands(item.with_changes(lpar=[], rpar=[]), operator)
    calls = [operand for operand in operands if isinstance(operand, cst.Call)]
    if len(calls) != len(operands):
        return None
    autocasts = [ctx.qualified(call.func) in AUTOCAST for call in calls]
    if operator is cst.And and any(autocasts):
        entered = operands[-1]
        why = "`and` returns its last operand when the others are true (objects are)"
        fate = "built and never entered"
    elif operator is cst.Or and autocasts[0]:
        entered = operands[0]
        why = "`or` returns its first operand when it is true (an autocast object is)"
        fate = "never even built"
    else:
        return None  # `f() or torch.autocast(...)`: `f()` may return None to fall back
    dropped = [f"`{ctx.code(operand)}`" for operand in operands if operand is not entered]
    verb = "is" if len(dropped) == 1 else "are"
    lost = "" if autocasts[operands.index(entered)] else "; the block runs without autocast"
    message = f"`with` enters only `{ctx.code(entered)}`: {why}, so {', '.join(dropped)} {verb} {fate}{lost}"
    comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    elements = [cst.Element(operand, comma=comma) for operand in operands[:-1]]
    fixed = cst.Tuple([*elements, cst.Element(operands[-1])], lpar=[], rpar=[])
    return Finding(
        item,
        message,
        fix=FixPlan("Enter each context manager", ((item, fixed),)),
        help=f"`{ctx.code(fixed)}`",
    )
