"""Recognising attention-score products (`q @ k^T` in its many spellings), shared by the rules
about attention scores and softmax."""

from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from amplint.static.context import FileContext, scopes_holding
from amplint.static.facts import TENSOR
from amplint.static.flow import Flow, Policy, value_children
from amplint.static.imports import last_name
from amplint.static.patterns import (
    argument,
    callee_name,
    function_call,
    is_matmul,
    lineage,
    matmul_operands,
    method_call,
)
from amplint.static.scopes import named_params, suite_body, walk

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
# The bodies the rules about scores read: a softmax's, and a product's, which may be a helper that
# makes the scores (`self._scores(q, k)`) for a softmax in another method.
REGION_WORDS = frozenset(
    {"softmax", "log_softmax", "Softmax", "LogSoftmax", "matmul", "bmm", "baddbmm", "einsum"}
)
REGION_PATTERN = re.compile(r"[\w)\]] *@ *[\w(]")
_SCALE = re.compile(r"scal|sqrt|temperature|norm|inv|d_?k\b|head_dim|\*\* *-", re.IGNORECASE)
_SCALING_METHODS = frozenset({"mul", "div", "mul_", "div_"})
_TRANSPOSE_METHODS = frozenset({"transpose", "permute", "t", "swapaxes", "swapdims"})
_PRODUCT_FUNCTIONS = frozenset({"torch.matmul", "torch.bmm"})
_PRODUCT_METHODS = frozenset({"matmul", "bmm"})
_SOFTMAX_MODULES = frozenset({"Softmax", "LogSoftmax"})
_MULTINOMIAL = frozenset({"torch.multinomial"})
_MULTINOMIAL_METHODS = frozenset({"multinomial"})


def softmax_module_call(ctx: FileContext, node: cst.CSTNode) -> bool:
    """`self.softmax(scores)` or `self.attend(dots)` (an `nn.Softmax` or `nn.LogSoftmax` submodule,
    by its name or by what `__init__` assigns it) or `nn.Softmax(dim=-1)(scores)`."""
    if not isinstance(node, cst.Call):
        return False
    func = node.func
    if isinstance(func, cst.Call):
        return ctx.qualified(func.func) in {"torch.nn.Softmax", "torch.nn.LogSoftmax"}
    return (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Name)
        and func.value.value == "self"
        and ("softmax" in func.attr.value.lower() or submodule(ctx, node) in _SOFTMAX_MODULES)
    )


def submodule(ctx: FileContext, call: cst.Call) -> str | None:
    """The constructor of the submodule that `self.<name>(...)` calls (`Softmax` for
    `self.attend = nn.Softmax(dim=-1)`), as the dtype-facts engine read it from `__init__`."""
    return ctx.facts.of(call.func).module if isinstance(call.func, cst.Attribute) else None


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
    ctx: FileContext, node: cst.Call, flow: Flow | None
) -> tuple[cst.BaseExpression, cst.BaseExpression] | None:
    """The two operands of an einsum that contracts the last index of both (`...qd,...kd->...qk`),
    given as two arguments or as one list. The equation may be a literal, a name bound to one, or
    an f-string whose fields hold literals (`f"b h i d, {kv_eq} -> b h i j"`): every spelling it can
    take must contract so."""
    if not function_call(ctx, node, frozenset({"torch.einsum"})) or len(node.args) < 2:
        return None
    operands = [arg.value for arg in node.args[1:]]
    if len(operands) == 1 and isinstance(operands[0], (cst.List, cst.Tuple)):
        operands = [element.value for element in operands[0].elements]
    equations = _spellings(ctx, node.args[0].value, flow)
    if len(operands) != 2 or not equations or not all(map(_contracts_last, equations)):
        return None
    return operands[0], operands[1]


def _contracts_last(equation: str) -> bool:
    inputs, _, output = equation.replace(" ", "").partition("->")
    parts = inputs.split(",")
    if len(parts) != 2 or not all(parts) or not output:
        return False
    left, right = parts
    return left[-1] == right[-1] and left[-1] not in output


def _spellings(ctx: FileContext, node: cst.BaseExpression, flow: Flow | None, depth: int = 3) -> list[str]:
    """The strings an expression can hold (empty when any is unknown): a literal, a conditional,
    a name bound in the function or at module level, an f-string of those."""
    if isinstance(node, cst.Name):
        bound: list[cst.CSTNode] = list(flow.history.get(node.value, ())) if flow is not None else []
        if not bound:
            bound = list(_module_strings(ctx.module).get(node.value, ()))  # rare: computed on demand
        last = bound[-1] if bound else None
        return (
            _spellings(ctx, last, flow, depth - 1) if isinstance(last, cst.BaseExpression) and depth else []
        )
    if isinstance(node, cst.SimpleString) and isinstance(node.evaluated_value, str):
        return [node.evaluated_value]
    if isinstance(node, cst.IfExp):
        both = (_spellings(ctx, node.body, flow, depth), _spellings(ctx, node.orelse, flow, depth))
        return both[0] + both[1] if all(both) else []
    if isinstance(node, cst.FormattedString):
        found = [""]
        for part in node.parts:
            if isinstance(part, cst.FormattedStringText):
                found = [text + part.value for text in found]
                continue
            assert isinstance(part, cst.FormattedStringExpression)
            fields = _spellings(ctx, part.expression, flow, depth)
            if not fields or part.format_spec or part.conversion:
                return []
            found = [text + field for text in found for field in fields]
        return found
    return []


def _module_strings(module: cst.Module) -> dict[str, list[cst.BaseExpression]]:
    """Module-level `NAME = <expression>` bindings, for equations kept in constants."""
    found: dict[str, list[cst.BaseExpression]] = {}
    for statement in module.body:
        if isinstance(statement, cst.SimpleStatementLine):
            for small in statement.body:
                if isinstance(small, cst.Assign) and len(small.targets) == 1:
                    target = small.targets[0].target
                    if isinstance(target, cst.Name):
                        found.setdefault(target.value, []).append(small.value)
    return found


def score_operands(
    ctx: FileContext, node: cst.CSTNode, flow: Flow | None = None
) -> tuple[cst.BaseExpression, cst.BaseExpression, cst.Call | cst.BinaryOperation] | None:
    """`(queries, keys, product)` when `node` multiplies queries by transposed keys. Attention
    weights times values (`v @ probs.mT`) is no score product, however it is transposed."""
    found = _product_operands(ctx, node, flow)
    if found is None or any(holds_probabilities(ctx, operand, flow) for operand in found[:2]):
        return None
    return found


def _product_operands(
    ctx: FileContext, node: cst.CSTNode, flow: Flow | None
) -> tuple[cst.BaseExpression, cst.BaseExpression, cst.Call | cst.BinaryOperation] | None:
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
        operands = _einsum_operands(ctx, node, flow)
        return (*operands, node) if operands is not None else None
    if left is None or right is None or not _is_transposed(ctx, right, flow):
        return None
    return left, right, node


def holds_probabilities(ctx: FileContext, node: cst.BaseExpression, flow: Flow | None) -> bool:
    """Whether a value is a softmax's result, through names, reshapes, casts, dropout and masking,
    back to the last product before it."""
    stack: list[cst.CSTNode] = [node]
    seen: set[int] = set()
    while stack and len(seen) < 64:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if is_softmax(ctx, current):
            return True
        if isinstance(current, cst.Name):
            stack.extend(flow.history.get(current.value, ()) if flow is not None else ())
        elif matmul_operands(ctx, current) is None:
            stack.extend(value_children(current))
    return False


def local_callee(ctx: FileContext, call: cst.CSTNode) -> str | None:
    """The name of the file's own function or method that a call may call (`helper(x)`,
    `self.forward_attention(v, scores, mask)`), or None."""
    if not isinstance(call, cst.Call) or ctx.qualified(call.func) is not None:
        return None
    name = last_name(call.func)
    return name if name in ctx.index.function_names else None


def softmax_callees(ctx: FileContext, softmaxes: Iterable[cst.Call]) -> frozenset[str]:
    """The file's functions (by name) that hand one of their parameters to a softmax, as espnet's
    `forward_attention(self, value, scores, mask)` does for the scores its callers form."""
    sink = Policy(
        seed=lambda node, flow: False, sink=lambda node, flow: "softmax" if is_softmax(ctx, node) else None
    )
    names: set[str] = set()
    for scope in scopes_holding(ctx, softmaxes):
        function = scope.node
        if isinstance(function, cst.FunctionDef) and function.name.value not in names:
            flow = Flow(sink, env={p.name.value: frozenset({p}) for p in named_params(function)})
            flow.run(scope.body)
            if flow.hits:
                names.add(function.name.value)
    return frozenset(names)


def scores_returned_by(ctx: FileContext, call: cst.CSTNode) -> list[cst.CSTNode]:
    """The `q @ k^T` products of the file's other functions that a call returns: the engine follows
    the file's own functions and methods (`self._scores(q, k)`), and its evidence names them."""
    if local_callee(ctx, call) is None:
        return []  # not the file's own function: the engine follows no other
    here = ctx.function_of(call)
    return [
        step.node
        for step in ctx.facts.of(call).why
        if ctx.function_of(step.node) is not here and score_operands(ctx, step.node) is not None
    ]


def scaled_before(ctx: FileContext, node: cst.BaseExpression, flow: Flow | None) -> bool:
    """Whether a product's operand was scaled since its last product (`q * scale`, `q /= sqrt(d)`):
    multiplied or divided by a number, or by a tensor whose spelling names a scale; not by a gate or
    a mask (`q * self.new_neurons`)."""
    for step in lineage(ctx, node, flow):
        factors: tuple[cst.BaseExpression, ...] = ()
        if isinstance(step, cst.AugAssign) and isinstance(
            step.operator, (cst.MultiplyAssign, cst.DivideAssign)
        ):
            factors = (step.value,)
        elif isinstance(step, cst.BinaryOperation) and isinstance(step.operator, (cst.Multiply, cst.Divide)):
            factors = (step.right, step.left) if isinstance(step.operator, cst.Multiply) else (step.right,)
        elif isinstance(step, cst.Call) and method_call(ctx, step, _SCALING_METHODS) is not None:
            factors = tuple(arg.value for arg in step.args[:1])
        elif is_matmul(ctx, step):
            return False
        if factors:
            return any(
                ctx.facts.of(factor).kind != TENSOR or _SCALE.search(ctx.code(factor)) for factor in factors
            )
    return False


def normalized_before(
    ctx: FileContext, node: cst.BaseExpression, flow: Flow | None, function: cst.FunctionDef | None
) -> bool:
    """Whether a product's operand went through a norm since its last product (`self.q_norm(q)`,
    `F.normalize(k)`): QK-norm bounds every score by the head size times the norm's gain. An operand
    that is a parameter of `function` counts when every caller in the file binds what it passes
    through a norm somewhere (transformers' `eager_attention_forward`, called through
    `attention_interface` with the module's q_norm'd states)."""
    last: cst.CSTNode = node
    for step in lineage(ctx, node, flow):
        if _normed(step):
            return True  # before the product test: `self.q_norm(q)` is a submodule call too
        if is_matmul(ctx, step):
            return False
        last = step
    if function is None or not isinstance(last, cst.Name):
        return False
    passed = ctx.facts.arguments(function, last.value)
    return bool(passed) and all(
        isinstance(value, cst.Name)
        and any(
            any(_normed(n) for n in walk(bound)) for bound in _flow_of(scope).history.get(value.value, ())
        )
        for value, scope in passed or ()
    )


def _normed(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and "norm" in callee_name(node).lower()


def _flow_of(scope: cst.FunctionDef | cst.Module) -> Flow:
    """The bindings of a whole function."""
    flow = Flow(Policy(seed=lambda node, flow: False, sink=lambda node, flow: None))
    flow.run(suite_body(scope.body) if isinstance(scope, cst.FunctionDef) else scope.body)
    return flow


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
