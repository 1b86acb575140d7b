"""Where a value that a fix computes in float32 meets code that expects the dtype it had before.

A fix that upcasts (`cumsum(..., dtype=torch.float32)`) changes the dtype of everything computed
from the result, up to wherever the value leaves the function or enters an op whose operands must
share one dtype: a product with a half weight raises on float32, and a returned float32 tensor
reaches callers that never asked for it. `cast_back` follows the upcast value through its function
(`amplint.static.flow`) and casts it back to the original dtype at each such place, so that every
consumer sees the dtype it saw before: elementwise ops in between (`exp`, `-`, indexing) run in
float32 and keep the precision the fix is for, and only the result is rounded back. The dtype to
cast back to is read from the one tensor the upcast input was computed from; a value mixed with
another tensor on the way could have been wider, so that is not proven and not done.

It gives up (None) where it cannot be sure: no name to read the original dtype from at those
places, the dtype there not provably the upcast input's, or a place it cannot rewrite; and where
the upcast value itself leaves at once (cast back there, the upcast would gain nothing). The fix is
then offered as unsafe (`amplint.rule.dtype_keeping_fix`).
"""

from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from amplint.static import ops
from amplint.static.context import FileContext
from amplint.static.facts import MODULE, OFF, TENSOR, UNKNOWN
from amplint.static.flow import Flow, Origins, Policy, analyse, value_children
from amplint.static.patterns import callee_name, with_method
from amplint.static.scopes import Scope, walk

Edit = tuple[cst.CSTNode, cst.CSTNode]
# Calls that keep a float32 operand float32 and mix it with others by promotion: they pass the
# upcast value on. Everything else that takes it (a product, a module, a function of the file or
# of another library) is a place where it must have its old dtype again.
_ELEMENTWISE = frozenset(
    {
        "exp", "exp2", "expm1", "log", "log1p", "log2", "neg", "abs", "sqrt", "rsqrt", "square", "pow",
        "sigmoid", "tanh", "softplus", "logsigmoid", "log_sigmoid", "clamp", "clamp_min", "clamp_max",
        "clip", "where", "masked_fill", "flip", "roll", "cumsum", "cumprod", "logcumsumexp", "sum",
        "mean", "amax", "amin", "max", "min", "logsumexp", "softmax", "log_softmax", "diff", "tril",
        "triu", "unsqueeze", "squeeze", "view", "reshape", "expand", "expand_as", "permute",
        "transpose", "contiguous", "flatten", "unflatten", "movedim", "narrow", "select", "gather",
        "index_select", "repeat", "repeat_interleave", "chunk", "split", "cat", "stack", "pad",
        "add", "sub", "mul", "div", "minimum", "maximum", "reciprocal", "sign", "detach", "clone",
        "nll_loss", "cross_entropy", "kl_div",
    }
)  # fmt: skip


def cast_back(
    ctx: FileContext,
    upcast: cst.BaseExpression,
    fixed: cst.BaseExpression,
    data: cst.BaseExpression,
    op: str | None = None,
    *,
    through_modules: bool = False,
    mixed: bool = False,
    source: cst.Attribute | None = None,
) -> tuple[Edit, ...] | None:
    """The edits that put `fixed` in place of `upcast` and cast what derives from it back to the
    dtype of `data` (the value the upcast read) wherever it leaves elementwise code, or, for an
    `op` that an autocast may run in float32 itself, to the dtype `op` gives there
    (`op_dtype`); None where that cannot be proven right.

    `through_modules`: the fix of a whole chain (`w = -0.6065 * self.w_lora(x).sigmoid()` into
    `self.out(x * torch.exp(w.cumsum(1)))`), which is unsafe: the dtype is read from the tensor a
    module read (`x`: without autocast a Linear's output has its input's dtype, but a module may
    change it), and the value may be mixed with that tensor on the way. Where the chain met a
    `cumsum` or `cumprod` and then leaves the function, it is cast back to the dtype that op gives
    there (under CUDA autocast, float32); at a module or a product (which autocast casts itself),
    to the tensor's dtype. The accumulations on the way (`cumsum`, `cumprod`, `logcumsumexp`) need
    no cast of their own: their input is float32.

    `mixed`: for an unsafe fix, a value mixed with another tensor on the way is cast back too (the
    result may have been wider before, so its numbers may change, but no consumer meets a float32
    value it did not meet before).

    `source`: the dtype to cast back to where the fix binds the upcast's input (`bind_input`)."""
    scope = _scope_of(ctx, upcast)
    if scope is not None and source is None:
        source = _dtype_source(ctx, scope, data, through_modules)
    if scope is None or source is None:
        return None
    dtype = source if op is None else op_dtype(source, op)
    read = source.value.value if isinstance(source.value, cst.Name) else None
    places: dict[cst.BaseExpression, bool] = {}  # each place, and whether the value leaves there
    unsure: list[cst.CSTNode] = []
    float32_ops: list[cst.Call] = []  # ops on the way that CUDA autocast runs in float32

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        return node is upcast

    def widens(operand: cst.BaseExpression, origins: Origins) -> bool:
        """A tensor the value is mixed with, whose dtype may be wider than the one read back."""
        if mixed or origins or ctx.facts.of(operand).kind != TENSOR:
            return False
        return not (through_modules and isinstance(operand, cst.Name) and operand.value == read)

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
            places.update((side, False) for side in (node.left, node.right) if flow.taint(side))
            return "product"
        operands = (
            [node.left, node.right]
            if isinstance(node, cst.BinaryOperation)
            else _data_operands(ctx, node)
            if isinstance(node, cst.Call) and _passes_on(ctx, node)
            else []
        )
        reached = [flow.taint(operand) for operand in operands]
        if (
            isinstance(node, cst.Call)
            and _passes_on(ctx, node)
            and ops.autocast_policy(callee_name(node), "cuda") == "fp32"
            and any(flow.taint(child) for child in value_children(node))
        ):
            float32_ops.append(node)
        if any(reached) and any(
            widens(operand, origins) for operand, origins in zip(operands, reached, strict=True)
        ):
            # Mixed with another tensor, the result takes the wider dtype of the two, which may not
            # be the one read back from the upcast input.
            unsure.append(node)
        if isinstance(node, cst.Yield) and isinstance(node.value, cst.BaseExpression):
            places[node.value] = True
            return "yield"
        if isinstance(node, cst.Call) and not _passes_on(ctx, node):
            tainted = [arg.value for arg in node.args if flow.taint(arg.value)]
            if any(arg.star for arg in node.args if arg.value in tainted):
                unsure.append(node)
            func = node.func
            if (
                isinstance(func, cst.Attribute)
                and ctx.qualified(func) is None
                and func.attr.value not in _CASTS
                and flow.taint(func.value)
            ):
                # `logits.topk(k)`: the method takes the value too (and its indices are no float).
                tainted.append(func.value)
            leaves = not (_is_module(ctx, node) or callee_name(node) in _PRODUCTS)
            places.update((value, leaves) for value in tainted)
            return "call" if tainted else None
        return None

    def leaves(node: cst.CSTNode, origins: Origins, flow: Flow) -> None:
        if isinstance(node, cst.Tuple):
            places.update((e.value, True) for e in node.elements if flow.taint(e.value))
        elif isinstance(node, cst.BaseExpression):
            places[node] = True
        else:
            unsure.append(node)

    flow = analyse(scope, Policy(seed=seed, sink=sink, leaves=leaves))
    if unsure or not places or any(flow.resolve(place) is upcast for place in places):
        return None  # cast back as soon as computed, the upcast would gain nothing
    if (
        through_modules
        and all(places.values())
        and not accumulations(ctx, upcast)
        and half_weight_consumer(ctx, upcast) is None
    ):
        return None  # a lone upcast whose value leaves: the rule's own fix stands
    # Under CUDA autocast a value that went through `exp`, `cumsum` or `pow` on the way was float32
    # before the fix, where it leaves: cast back to the dtype that op gives there. At a module or a
    # product, which autocast casts itself, the input's dtype does.
    through = _reached_by(scope, float32_ops, places) if op is None and float32_ops else {}
    dtypes = {
        place: op_dtype(source, callee_name(through[place])) if leaving and place in through else dtype
        for place, leaving in places.items()
    }
    return _edits(upcast, fixed, dtypes)


def _reached_by(
    scope: Scope, seeds: list[cst.Call], places: dict[cst.BaseExpression, bool]
) -> dict[cst.BaseExpression, cst.Call]:
    """For each of `places` that a value computed from one of `seeds` reaches, one such seed."""
    found: dict[cst.BaseExpression, cst.Call] = {}

    def note(node: cst.BaseExpression, origins: Origins) -> None:
        # The first in evaluation order (`cumsum` before the `exp` of it): the same every run.
        seed = min((o for o in origins if isinstance(o, cst.Call)), key=seeds.index, default=None)
        if node in places and seed is not None:
            found.setdefault(node, seed)

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        for child in value_children(node):
            if child in places:
                note(child, flow.taint(child))
        return None

    def leaves(node: cst.CSTNode, origins: Origins, flow: Flow) -> None:
        if isinstance(node, cst.Tuple):
            for element in node.elements:
                note(element.value, flow.taint(element.value))
        elif isinstance(node, cst.BaseExpression):
            note(node, origins)

    analyse(scope, Policy(seed=lambda node, flow: node in seeds, sink=sink, leaves=leaves))
    return found


_ACCUMULATIONS = frozenset({"cumsum", "cumprod", "logcumsumexp"})
# Methods that set the dtype themselves (a cast back already written): not a consumer of the old one.
_CASTS = frozenset({"to", "type", "float", "double", "half", "bfloat16"})


def accumulations(ctx: FileContext, upcast: cst.BaseExpression) -> list[cst.Call]:
    """The cumulative sums and products (`cumsum`, `cumprod`, `logcumsumexp`) in its function that
    take the value computed from `upcast`, elementwise: upcast, they accumulate in float32."""
    scope = _scope_of(ctx, upcast)
    if scope is None:
        return []
    found: list[cst.Call] = []

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        return node is upcast

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if (
            isinstance(node, cst.Call)
            and callee_name(node) in _ACCUMULATIONS
            and _passes_on(ctx, node)
            and node not in found
            and any(flow.taint(child) for child in value_children(node))
        ):
            found.append(node)
        return None

    analyse(scope, Policy(seed=seed, sink=sink))
    return found


# Calls whose operands must share one dtype with a weight or with each other: a float32 operand next
# to a half one raises (`mat1 and mat2 must have the same dtype`).
_PRODUCTS = frozenset({"matmul", "mm", "bmm", "baddbmm", "addmm", "einsum", "linear", "conv1d", "conv2d"})


def half_weight_consumer(
    ctx: FileContext, upcast: cst.BaseExpression, callers: int = 2
) -> cst.CSTNode | None:
    """The first place where the value computed from `upcast` meets a module (`self.out(...)`) or
    a product (`@`, `matmul`, `einsum`, `linear`) that may run without autocast: with the value
    float32 and the weights or the other operand half, it raises (under autocast the module or
    product casts its inputs). In its function, then, where the function returns the value, in
    the functions of the file that call it (`self.decay(x)`, `decay(x)`), up to `callers` calls
    away. None where it meets none."""
    scope = _scope_of(ctx, upcast)
    if scope is None:
        return None
    found: list[cst.CSTNode] = []
    returns = {
        id(n.value) for n in _statements(scope.body) if isinstance(n, cst.Return) and n.value is not None
    }
    returned: list[cst.CSTNode] = []

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        return node is upcast

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, cst.MatrixMultiply)
            and (flow.taint(node.left) or flow.taint(node.right))
        ):
            if OFF in ctx.facts.autocast_at(node):
                found.append(node)
            return "product"
        if isinstance(node, cst.Call) and not _passes_on(ctx, node):
            module = _is_module(ctx, node)
            if (module or callee_name(node) in _PRODUCTS) and any(flow.taint(arg.value) for arg in node.args):
                # Where the call runs only under autocast, the module or product casts its inputs.
                if OFF in ctx.facts.autocast_at(node):
                    found.append(node)
                return "call"
        return None

    def leaves(node: cst.CSTNode, origins: Origins, flow: Flow) -> None:
        if id(node) in returns:
            returned.append(node)

    analyse(scope, Policy(seed=seed, sink=sink, leaves=leaves))
    if found or not returned or not callers or not isinstance(scope.node, cst.FunctionDef):
        return found[0] if found else None
    for call in _calls_of(ctx, scope.node):
        consumer = half_weight_consumer(ctx, call, callers - 1)
        if consumer is not None:
            return consumer
    return None


def leaves_function(ctx: FileContext, upcast: cst.BaseExpression) -> bool:
    """Whether the value computed from `upcast` by elementwise code is returned, yielded or stored
    on an attribute: callers the file does not show (another module's half product) would meet it. A return does
    not count in a function that says it returns float32 (ParlAI's `_generation_activation(...)
    -> torch.float32`): its callers want float32."""
    scope = _scope_of(ctx, upcast)
    if scope is None:
        return False
    function = scope.node
    wants = (
        isinstance(function, cst.FunctionDef)
        and function.returns is not None
        and "float32" in ctx.code(function.returns.annotation)
    )
    returns = {
        id(n.value) for n in _statements(scope.body) if isinstance(n, cst.Return) and n.value is not None
    }
    left: list[cst.CSTNode] = []

    def leaves(node: cst.CSTNode, origins: Origins, flow: Flow) -> None:
        if not (wants and id(node) in returns):
            left.append(node)

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        """A module, a product or a function takes the value: its consumer there, not the caller's."""
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.MatrixMultiply):
            return "product"
        return "call" if isinstance(node, cst.Call) and not _passes_on(ctx, node) else None

    analyse(scope, Policy(seed=lambda node, flow: node is upcast, sink=sink, leaves=leaves))
    return bool(left)


def _calls_of(ctx: FileContext, function: cst.FunctionDef) -> list[cst.Call]:
    """The calls in this file, outside `function`, that may call it: `name(...)`, or
    `self.name(...)` for a method."""
    name = function.name.value
    inside = {id(node) for node in walk(function)}
    return [
        call
        for call in ctx.index.calls
        if id(call) not in inside
        and (
            (isinstance(call.func, cst.Name) and call.func.value == name)
            or (
                isinstance(call.func, cst.Attribute)
                and call.func.attr.value == name
                and isinstance(call.func.value, cst.Name)
                and call.func.value.value == "self"
            )
        )
    ]


# Operands that select or mask rather than take part in the arithmetic, so never widen the dtype:
# the keyword, and the position among the arguments of the function form (`torch.gather(x, 1, i)`).
_SELECTORS = {"gather": ("index", 2), "index_select": ("index", 2), "masked_fill": ("mask", 1)}


def _data_operands(ctx: FileContext, call: cst.Call) -> list[cst.BaseExpression]:
    """The arguments of an elementwise call whose dtype can reach its result."""
    selector = _SELECTORS.get(callee_name(call))
    if selector is None:
        return [arg.value for arg in call.args]
    keyword, position = selector
    # The method form (`x.gather(1, i)`) has the tensor before the dot, one argument fewer.
    method = isinstance(call.func, cst.Attribute) and ctx.qualified(call.func) is None
    positional = [arg for arg in call.args if arg.keyword is None]
    skipped = positional[position - 1] if method and 0 < position <= len(positional) else None
    if not method and position < len(positional):
        skipped = positional[position]
    return [
        arg.value
        for arg in call.args
        if arg is not skipped and not (arg.keyword is not None and arg.keyword.value == keyword)
    ]


def dtype_source(
    ctx: FileContext, upcast: cst.BaseExpression, data: cst.BaseExpression, through_modules: bool = False
) -> cst.BaseExpression | None:
    """`<name>.dtype` for the one tensor `data` (the value `upcast` reads) is computed from, where
    that is the dtype `upcast` had (`through_modules`: or the dtype of what a module read), read at
    the upcast itself (a cast back at once: the name may be bound again later, as
    `forget_gates = forget_gates.cumsum(-1)` does); None where it cannot be read."""
    scope = _scope_of(ctx, upcast)
    return _dtype_source(ctx, scope, data, through_modules, anywhere=False) if scope is not None else None


def op_dtype(dtype: cst.BaseExpression, op: str) -> cst.BaseExpression:
    """`x.new_empty(0).<op>(0).dtype` for `x.dtype` (`.<op>()` for an op without `dim`, or an op
    autocast treats alike, `_probe`): the dtype `op` gives a tensor of `x`'s dtype where the cast back
    runs. Under CUDA autocast, which runs `cumsum`, `cumprod` and `log` in float32, that is float32
    (the unfixed code's dtype there: casting back to `x.dtype` would round autocast's float32 result
    to half); elsewhere `x`'s dtype. An empty tensor: nothing is computed."""
    assert isinstance(dtype, cst.Attribute)
    empty = cst.Call(
        func=cst.Attribute(value=dtype.value, attr=cst.Name("new_empty")), args=[cst.Arg(cst.Integer("0"))]
    )
    probe, args = _probe(op)
    result = cst.Call(
        func=cst.Attribute(value=empty, attr=cst.Name(probe)), args=[cst.Arg(cst.Integer("0"))] * args
    )
    return cst.Attribute(value=result, attr=cst.Name("dtype"))


# Ops a tensor method with a dim (or an exponent) of 0 probes; ops whose method takes nothing.
_PROBE_DIM = frozenset({"cumsum", "cumprod", "softmax", "log_softmax", "logsumexp", "pow"})
_PROBE_BARE = frozenset(
    {
        "exp",
        "expm1",
        "log",
        "log10",
        "log2",
        "log1p",
        "reciprocal",
        "rsqrt",
        "sinh",
        "cosh",
        "tan",
        "sum",
        "prod",
    }
)


def _probe(op: str) -> tuple[str, int]:
    """The method, and how many `0` arguments it takes, that gives the dtype `op` gives where the
    probe runs: `op` itself where an empty tensor can take it; else an op autocast treats alike
    (`prod`, float32 under CPU autocast too, for a loss; `exp`, float32 under CUDA autocast only)."""
    if op in _PROBE_DIM:
        return op, 1
    if op in _PROBE_BARE:
        return op, 0
    return ("prod", 0) if ops.autocast_policy(op, "cpu") == "fp32" else ("exp", 0)


def upcast_dtype(
    ctx: FileContext,
    upcast: cst.BaseExpression,
    data: cst.BaseExpression,
    through_modules: bool = False,
    source: cst.Attribute | None = None,
) -> tuple[cst.BaseExpression, bool]:
    """The dtype to upcast `data` (read by `upcast`) to, and whether `import torch` must be added:
    `torch.promote_types(x.dtype, torch.float32)`, float32 for a half `x` and float64 kept (a plain
    float32 is a downcast for float64 code), where a tensor of `data`'s dtype can be named without
    computing anything twice (`data` itself, a name or attribute, or `dtype_source`, which with
    `through_modules` reads `x` for `self.w_lora(x)`), or `source`, the name `bind_input` binds the
    input to; else float32."""
    float32, missing = ctx.float32()
    if source is not None:
        dtype: cst.BaseExpression | None = source
    elif all(isinstance(n, (cst.Name, cst.Attribute)) for n in walk(data)):
        dtype = cst.Attribute(value=data.with_changes(lpar=[], rpar=[]), attr=cst.Name("dtype"))
    else:
        # Read at the upcast itself: the name may be bound again elsewhere in the function.
        scope = _scope_of(ctx, upcast)
        dtype = (
            _dtype_source(ctx, scope, data, through_modules, anywhere=False) if scope is not None else None
        )
    if dtype is None:
        return float32, missing
    torch, _ = ctx.torch_name()
    promote = cst.Attribute(value=torch, attr=cst.Name("promote_types"))
    return cst.Call(func=promote, args=[cst.Arg(dtype), cst.Arg(float32)]), missing


_SCOPES = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp)


def bind_input(
    ctx: FileContext, upcast: cst.BaseExpression, data: cst.BaseExpression, base: str
) -> tuple[cst.NamedExpr, cst.Attribute] | None:
    """`(base := data)` to write in place of the upcast's input, and `base.dtype`, where no name
    tells the input's dtype where the result is cast back (`frozen_to_logits(h)`, `self.w_lora(x)`,
    a name bound again later): the fix binds the input
    once, rather than computing it twice, to upcast it to `torch.promote_types(base.dtype,
    torch.float32)` (`upcast_dtype`) and cast the result back to `base.dtype` (`cast_back`).
    `base` takes a number where the function has that name already, or has such a call before. None where a name or
    `dtype_source` tells the dtype, or where an assignment expression cannot stand or would bind
    in another scope (outside a function, in a lambda or a comprehension)."""
    scope = _scope_of(ctx, upcast)
    if (
        scope is None
        or not isinstance(scope.node, cst.FunctionDef)
        or _dtype_source(ctx, scope, data) is not None
        or (
            isinstance(data, cst.Attribute)
            and all(isinstance(n, (cst.Name, cst.Attribute)) for n in walk(data))
        )
        or (isinstance(data, cst.Name) and not _bound_after(ctx, scope, data.value, data))
        or any(isinstance(n, _SCOPES) and any(m is upcast for m in walk(n)) for n in walk(scope.node.body))
    ):
        return None
    used = {n.value for n in walk(scope.node) if isinstance(n, cst.Name)}
    # The fixes of one round are made from one text: the n-th such call of the function takes the
    # n-th free name of `base`, `base1`, ..., so that two of them never bind one name.
    alike = [n for n in walk(scope.node) if isinstance(n, type(upcast)) and _same_op(n, upcast)]
    nth = next(i for i, n in enumerate(alike) if n is upcast)
    free = (f"{base}{i or ''}" for i in range(len(used) + len(alike) + 1))
    name = [candidate for candidate in free if candidate not in used][nth]
    named = cst.NamedExpr(
        target=cst.Name(name),
        value=data.with_changes(lpar=[], rpar=[]),
        lpar=[cst.LeftParen()],
        rpar=[cst.RightParen()],
    )
    return named, cst.Attribute(value=cst.Name(name), attr=cst.Name("dtype"))


def _same_op(node: cst.CSTNode, upcast: cst.CSTNode) -> bool:
    return not isinstance(upcast, cst.Call) or (
        isinstance(node, cst.Call) and callee_name(node) == callee_name(upcast)
    )


def _is_module(ctx: FileContext, call: cst.Call) -> bool:
    return ctx.facts.of(call.func).kind == MODULE or ctx.facts.of(call).kind == MODULE


def _scope_of(ctx: FileContext, node: cst.CSTNode) -> Scope | None:
    function = ctx.function_of(node) or ctx.module
    return next((s for s in ctx.scopes if s.node is function), None)


def _passes_on(ctx: FileContext, call: cst.Call) -> bool:
    """Whether a call takes the upcast value elementwise (or reshapes it), so that its result is
    the upcast value's continuation rather than a consumer that needs the old dtype."""
    name = callee_name(call)
    if ops.same_dtype(name) or name not in _ELEMENTWISE:
        return False
    func = call.func
    if isinstance(func, cst.Attribute) and ctx.qualified(func) is None:
        return ctx.facts.of(func.value).kind == TENSOR  # `x.exp()`, not `self.exp(x)`
    qualified = ctx.qualified(func) or ""
    return qualified.startswith("torch.") and ctx.facts.of(call).kind != MODULE


def _dtype_source(
    ctx: FileContext,
    scope: Scope,
    data: cst.BaseExpression,
    through_modules: bool = False,
    anywhere: bool = True,
) -> cst.Attribute | None:
    """`<name>.dtype` for the one tensor the upcast input is computed from by elementwise ops and
    numbers alone (`x`, `x - 1`, `-x[:, t]`: the same dtype as `x` whatever the caller picks, where a
    module, a product or a second tensor could change it; `through_modules`: calls of modules count
    as elementwise too). Read `anywhere` (where the value is cast back), the name must not be bound
    again from the upcast on; read at the upcast, any binding will do."""
    # The upcast's input itself, a bare name, is a tensor whatever the facts know of it (a loop
    # variable, an unannotated parameter): the op the fix upcasts takes a tensor there.
    bare = isinstance(data, cst.Name) and ctx.facts.of(data).kind in (TENSOR, UNKNOWN)
    tensors = {
        n.value for n in walk(data) if isinstance(n, cst.Name) and (bare or ctx.facts.of(n).kind == TENSOR)
    }
    mixes = any(
        (
            isinstance(n, cst.Call)
            and not _passes_on(ctx, n)
            and not (through_modules and ctx.facts.of(n.func).kind == MODULE)
        )
        or (isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.MatrixMultiply))
        for n in walk(data)
    )
    if len(tensors) != 1 or mixes or (anywhere and _bound_after(ctx, scope, next(iter(tensors)), data)):
        return None
    return cst.Attribute(value=cst.Name(next(iter(tensors))), attr=cst.Name("dtype"))


def _bound_after(ctx: FileContext, scope: Scope, name: str, data: cst.BaseExpression) -> bool:
    """Whether a statement of the function that ends after `data` begins binds `name` (one that
    holds `data`, `g = g.cumsum(-1)`, or a loop or `with` around it): then the name may mean
    another tensor where the result is cast back. Bindings before it (a parameter, `A = A * dt`)
    are the tensor the upcast read, at every place its result reaches."""
    start = ctx.position(data).start
    for node in _statements(scope.body):
        if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For, cst.With)):
            end = ctx.position(node).end
            if (end.line, end.column) > (start.line, start.column) and any(
                isinstance(n, cst.Name) and n.value == name for n in _targets(node)
            ):
                return True
    return False


def _statements(body: Iterable[cst.BaseStatement]) -> Iterable[cst.CSTNode]:
    for statement in body:
        for node in walk(statement):
            if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                continue
            yield node


def _targets(node: cst.CSTNode) -> Iterable[cst.CSTNode]:
    if isinstance(node, cst.Assign):
        targets: list[cst.CSTNode] = [t.target for t in node.targets]
    elif isinstance(node, (cst.AnnAssign, cst.AugAssign, cst.For)):
        targets = [node.target]
    elif isinstance(node, cst.With):
        targets = [item.asname.name for item in node.items if item.asname is not None]
    else:
        targets = []
    for target in targets:
        yield from walk(target)


def _edits(
    upcast: cst.BaseExpression,
    fixed: cst.BaseExpression,
    places: dict[cst.BaseExpression, cst.BaseExpression],
) -> tuple[Edit, ...] | None:
    """The upcast, and each place cast back to its dtype (one edit where a place holds the upcast)."""
    edits: list[Edit] = []
    inside = False
    for place, dtype in places.items():
        contains = any(node is upcast for node in walk(place))
        if any(any(node is place for node in walk(other)) for other in places if other is not place):
            return None  # nested places: one cast would hide the other
        if not contains and _cast_back_already(place):
            continue  # another fix's cast back (`kl_div(s, t).to(logits.dtype)`, then `t`'s fix)
        value = place.deep_replace(upcast, fixed) if contains else place
        inside |= contains
        # A place in parentheses keeps them: an edit replaces what lies between them.
        cast = with_method(value.with_changes(lpar=[], rpar=[]), "to", dtype)
        edits.append((place, cast.with_changes(lpar=place.lpar, rpar=place.rpar) if place.lpar else cast))
    return tuple(edits) if inside else ((upcast, fixed), *edits)


def _cast_back_already(place: cst.BaseExpression) -> bool:
    """`value.to(<x>.dtype)` (or to a probe's `.dtype`): a cast back to a dtype read from a tensor."""
    return (
        isinstance(place, cst.Call)
        and callee_name(place) == "to"
        and len(place.args) == 1
        and isinstance(place.args[0].value, cst.Attribute)
        and place.args[0].value.attr.value == "dtype"
    )
