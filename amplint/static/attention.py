"""Recognising attention-score products (`q @ k^T` in its many spellings), shared by the rules
about attention scores and softmax."""

from __future__ import annotations

import libcst as cst

from amplint.static.context import FileContext
from amplint.static.flow import Flow
from amplint.static.patterns import argument, function_call, method_call

SOFTMAX_FUNCTIONS = frozenset(
    {
        "torch.softmax",
        "torch.log_softmax",
        "torch.nn.functional.softmax",
        "torch.nn.functional.log_softmax",
        "torch.special.softmax",
        "torch.special.log_softmax",
    }
)
SOFTMAX_METHODS = frozenset({"softmax", "log_softmax"})
_TRANSPOSE_METHODS = frozenset({"transpose", "permute", "t", "swapaxes", "swapdims"})
_PRODUCT_FUNCTIONS = frozenset({"torch.matmul", "torch.bmm"})
_PRODUCT_METHODS = frozenset({"matmul", "bmm"})
_MULTINOMIAL = frozenset({"torch.multinomial"})
_MULTINOMIAL_METHODS = frozenset({"multinomial"})


def softmax_module_call(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`self.softmax(scores)` (an `nn.Softmax` submodule) or `nn.Softmax(dim=-1)(scores)`."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Call):
        return ctx.qualified(func.func) in {"torch.nn.Softmax", "torch.nn.LogSoftmax"}
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and "softmax" in func.attr.value.lower()
    )


def is_softmax(ctx: FileContext, node: cst.CSTNode) -> bool:
    return (
        function_call(ctx, node, SOFTMAX_FUNCTIONS)
        or method_call(ctx, node, SOFTMAX_METHODS) is not None
        or softmax_module_call(ctx, node)
    )


def _is_transposed(ctx: FileContext, node: cst.BaseExpression, flow: Flow | None) -> bool:
    node = flow.resolve(node) if flow is not None else node
    if isinstance(node, cst.Attribute) and node.attr.value in {"mT", "T", "mH"}:
        return True
    if method_call(ctx, node, _TRANSPOSE_METHODS) is not None:
        return True
    return function_call(ctx, node, frozenset({"torch.transpose", "torch.permute", "torch.swapaxes"}))


def _einsum_operands(
    ctx: FileContext, node: cst.Call
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The two operands of an einsum that contracts the last index of both (`...qd,...kd->...qk`),
    given as two arguments or as one list."""
    if not function_call(ctx, node, frozenset({"torch.einsum"})) or len(node.args) < 2:
        return None
    equation = node.args[0].value
    operands = [arg.value for arg in node.args[1:]]
    if len(operands) == 1 and isinstance(operands[0], (cst.List, cst.Tuple)):
        operands = [element.value for element in operands[0].elements]
    if not isinstance(equation, cst.SimpleString) or len(operands) != 2:
        return None
    inputs, _, output = str(equation.evaluated_value).replace(" ", "").partition("->")
    parts = inputs.split(",")
    if len(parts) != 2 or not all(parts) or not output:
        return None
    left, right = parts
    if left[-1] == right[-1] and left[-1] not in output:
        return operands[0], operands[1]
    return None


def score_operands(
    ctx: FileContext, node: cst.CSTNode, flow: Flow | None = None
) -> tuple[cst.BaseExpression, cst.BaseExpression, cst.Call | cst.BinaryOperation] | None:
    """`(queries, keys, product)` when `node` multiplies queries by transposed keys."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
        if _is_transposed(ctx, node.right, flow):
            return node.left, node.right, node
        return None
    if not isinstance(node, cst.Call):
        return None
    if function_call(ctx, node, _PRODUCT_FUNCTIONS):
        left = argument(node, 0, "input")
        right = argument(node, 1, "other") or argument(node, 1, "mat2")
    elif function_call(ctx, node, frozenset({"torch.baddbmm"})):
        left, right = argument(node, 1, "batch1"), argument(node, 2, "batch2")
    elif (receiver := method_call(ctx, node, _PRODUCT_METHODS)) is not None:
        left, right = receiver, argument(node, 0, "other") or argument(node, 0, "mat2")
    else:
        operands = _einsum_operands(ctx, node)
        return (*operands, node) if operands is not None else None
    if left is None or right is None or not _is_transposed(ctx, right, flow):
        return None
    return left, right, node


def scaled_inside(ctx: FileContext, node: cst.Call | cst.BinaryOperation) -> bool:
    """`baddbmm(..., alpha=scale)`: the scale is applied in the product's fp32 accumulator."""
    return (
        isinstance(node, cst.Call)
        and argument(node, 4, "alpha") is not None
        and function_call(ctx, node, frozenset({"torch.baddbmm"}))
    )


def softmax_input(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """The tensor a softmax call normalises."""
    receiver = method_call(ctx, call, SOFTMAX_METHODS)
    return receiver if receiver is not None else argument(call, 0, "input")


def softmax_dtype_argument(ctx: FileContext, call: cst.Call) -> cst.BaseExpression | None:
    """The `dtype` a softmax call passes, by keyword or position; None for `nn.Softmax` modules."""
    if softmax_module_call(ctx, call):
        return None
    if method_call(ctx, call, SOFTMAX_METHODS) is not None:
        return argument(call, 1, "dtype")
    if ctx.qualified(call.func) in {"torch.softmax", "torch.log_softmax"}:
        return argument(call, 2, "dtype")
    return argument(call, 3, "dtype")


def is_multinomial(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`torch.multinomial(probs, ...)` or `probs.multinomial(...)`: sampling from probabilities."""
    return function_call(ctx, node, _MULTINOMIAL) or method_call(ctx, node, _MULTINOMIAL_METHODS) is not None
