"""Shared recognisers for tensor expressions: calls by qualified name or method, dtypes, upcasts."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

from amplint.static.flow import Flow
from amplint.static.ops import einsum_contracts
from amplint.static.parsed import ParsedFile

MATMUL_FUNCTIONS = frozenset(
    {
        "torch.matmul",
        "torch.mm",
        "torch.bmm",
        "torch.baddbmm",
        "torch.einsum",
        "torch.nn.functional.linear",
        "torch.addmm",
        "torch.tensordot",
    }
)
MATMUL_METHODS = frozenset({"matmul", "mm", "bmm", "baddbmm", "addmm"})


def method_call(ctx: ParsedFile, node: cst.CSTNode, names: frozenset[str]) -> cst.BaseExpression | None:
    """The receiver of `<receiver>.name(...)` when `name` is in `names` and the receiver is a tensor
    value: not an imported module (`torch.exp(x)`) and not `self` (`self.softmax(x)` calls a submodule)."""
    if (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and node.func.attr.value in names
        and not _is_self(node.func.value)
        and ctx.qualified(node.func) is None
    ):
        return node.func.value
    return None


def _is_self(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "self"


def submodule_call(ctx: ParsedFile, node: cst.CSTNode) -> bool:
    """`self.proj(x)`: in a model almost always a Linear or another layer. A method the file defines
    itself (`self._to_blocks(q)`), or a private one, is a helper instead."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return False
    name = node.func.attr.value
    return _is_self(node.func.value) and not name.startswith("_") and name not in ctx.index.function_names


def function_call(ctx: ParsedFile, node: cst.CSTNode, qualified: frozenset[str]) -> bool:
    return isinstance(node, cst.Call) and ctx.qualified(node.func) in qualified


def argument(call: cst.Call, position: int | None, keyword: str) -> cst.BaseExpression | None:
    """The argument passed as `keyword=` or at `position` (counting positional arguments only)."""
    positional = 0
    for arg in call.args:
        if arg.keyword is not None:
            if arg.keyword.value == keyword:
                return arg.value
        elif arg.star:
            return None
        else:
            if positional == position:
                return arg.value
            positional += 1
    return None


def matmul_operands(ctx: ParsedFile, node: cst.CSTNode) -> list[cst.BaseExpression] | None:
    """The two factors of a product (`a @ b`, `torch.matmul(a, b)`, `baddbmm(c, a, b)`, `F.linear(x, w)`,
    `a.matmul(b)`), or None when `node` is not such a product."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        return [node.left, node.right]
    if not isinstance(node, cst.Call):
        return None
    positional = [arg.value for arg in node.args if arg.keyword is None and not arg.star]
    qualified = ctx.qualified(node.func)
    if qualified in MATMUL_FUNCTIONS:
        if qualified in {"torch.baddbmm", "torch.addmm"}:
            return positional[1:3]
        if qualified == "torch.einsum":
            equation = positional[0] if positional else None
            if isinstance(equation, cst.SimpleString) and not einsum_contracts(str(equation.evaluated_value)):
                return None  # an outer product (`i,j->ij`): a broadcast multiply, no matmul
            return positional[1:]
        return positional[:2]
    receiver = method_call(ctx, node, MATMUL_METHODS)
    if receiver is None or not isinstance(node.func, cst.Attribute):
        return None
    # `a.matmul(b)` multiplies the receiver; `c.baddbmm(a, b)` adds to it.
    return [receiver, *positional[:1]] if node.func.attr.value in {"matmul", "mm", "bmm"} else positional[:2]


def lineage(
    ctx: ParsedFile, node: cst.BaseExpression, flow: Flow | None, used: dict[str, int] | None = None
) -> Iterator[cst.CSTNode]:
    """`node`, then what its value derives from: the receiver of a method chain, the first argument
    of a function, the operand of a unary operator, and the expressions a name was bound to (most
    recent first, so that `q = q.view(...)` leads on to the `q` before it). `used` counts the
    bindings of each name the walk went back through, for a caller that goes on from there."""
    used = {} if used is None else used
    current: cst.CSTNode | None = node
    for _ in range(16):
        if current is None:
            return
        yield current
        if isinstance(current, cst.AugAssign):
            current = current.target
        elif isinstance(current, cst.Call):
            func = current.func
            is_method = (
                isinstance(func, cst.Attribute)
                and ctx.qualified(func) is None
                and not (isinstance(func.value, cst.Name) and func.value.value == "self")
            )
            if is_method:
                current = func.value  # type: ignore[attr-defined]
            else:
                current = next(
                    (arg.value for arg in current.args if arg.keyword is None and not arg.star), None
                )
        elif isinstance(current, (cst.Attribute, cst.Subscript)):
            current = current.value
        elif isinstance(current, cst.UnaryOperation):
            current = current.expression
        elif isinstance(current, cst.Name) and flow is not None:
            history = flow.history.get(current.value, [])
            seen = used.get(current.value, 0)
            if seen >= len(history):
                return
            used[current.value] = seen + 1
            current = history[-1 - seen]
        else:
            return


def is_matmul(ctx: ParsedFile, node: cst.CSTNode) -> bool:
    """A product that produces a new low-precision value: `@`, `torch.matmul` and friends, or a
    call such as `self.proj(x)`, which in a model is almost always a Linear."""
    return matmul_operands(ctx, node) is not None or submodule_call(ctx, node)


def needs_parentheses(node: cst.BaseExpression) -> bool:
    """Whether `node.attr` would bind wrongly without parentheses around `node`."""
    if node.lpar:
        return False
    return not isinstance(
        node,
        (
            cst.Name,
            cst.Attribute,
            cst.Call,
            cst.Subscript,
            cst.SimpleString,
            cst.ConcatenatedString,
            cst.List,
            cst.Tuple,
            cst.Dict,
            cst.Set,
            cst.ListComp,
            cst.SetComp,
            cst.DictComp,
            cst.GeneratorExp,
        ),
    )


def with_method(node: cst.BaseExpression, method: str, *args: cst.BaseExpression) -> cst.Call:
    """`node.method(*args)`, parenthesising `node` where needed."""
    if needs_parentheses(node):
        node = node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(
        func=cst.Attribute(value=node, attr=cst.Name(method)),
        args=[cst.Arg(value=arg) for arg in args],
    )


def callee_name(call: cst.Call) -> str:
    """The last name of what a call calls: `cumsum` for `x.cumsum(...)` and `torch.cumsum(...)`."""
    func = call.func
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return func.value if isinstance(func, cst.Name) else ""


def with_dtype(
    call: cst.Call, dtype: cst.BaseExpression, positional: cst.BaseExpression | None = None
) -> cst.Call:
    """`call` with `dtype=<dtype>` as its last argument, replacing a `dtype=` keyword and the
    `positional` dtype argument if given, laid out like the call's own arguments: on a line of its
    own in a call that puts one there."""
    args = [
        arg
        for arg in call.args
        if arg.value is not positional and not (arg.keyword is not None and arg.keyword.value == "dtype")
    ]
    keyword = cst.Arg(
        keyword=cst.Name("dtype"),
        value=dtype,
        equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
        ),
    )
    if not args:
        return call.with_changes(args=[keyword])
    if args[-1] is not call.args[-1]:
        # The old dtype came last: its ending (trailing comma, whitespace before `)`) moves up.
        ending = call.args[-1]
        args[-1] = args[-1].with_changes(comma=ending.comma, whitespace_after_arg=ending.whitespace_after_arg)
    last = args[-1]
    if isinstance(last.comma, cst.Comma):
        # A trailing comma: the new argument takes the last place, keeping the comma and the
        # whitespace before `)`; the old last argument gets the separator the others use.
        before = args[-2].comma if len(args) > 1 else None
        separator = before.whitespace_after if isinstance(before, cst.Comma) else call.whitespace_before_args
        args[-1] = last.with_changes(comma=last.comma.with_changes(whitespace_after=separator))
        return call.with_changes(args=[*args, keyword.with_changes(comma=last.comma)])
    # No trailing comma: whatever stood before `)` now follows the new argument.
    args[-1] = last.with_changes(
        comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
        whitespace_after_arg=cst.SimpleWhitespace(""),
    )
    return call.with_changes(
        args=[*args, keyword.with_changes(whitespace_after_arg=last.whitespace_after_arg)]
    )


def upcast_input(call: cst.Call, data: cst.BaseExpression, float32: cst.BaseExpression) -> cst.Call:
    """`call` with its tensor input `data` (the receiver of a method, or an argument) upcast:
    `x.sigmoid()` -> `x.to(torch.float32).sigmoid()`, `torch.tanh(x)` -> `torch.tanh(x.to(torch.float32))`."""
    upcast = with_method(data, "to", float32)
    if isinstance(call.func, cst.Attribute) and data is call.func.value:
        return call.with_changes(func=call.func.with_changes(value=upcast))
    return call.with_changes(
        args=[arg.with_changes(value=upcast) if arg.value is data else arg for arg in call.args]
    )
