"""Where code can run in half precision: the one notion the rules share.

A module *can run in half precision* when its text mentions a half dtype or mixed precision
(`float16`, `half`, `bfloat16`, `autocast`, `GradScaler`, `fp16`/`bf16` flags, `torch_dtype`):
library code that never says so still runs in half precision when a caller asks, but a rule that
needs the hint would otherwise flag every file. Inside a module, *autocast regions* are the bodies
of `with torch.autocast(...)` (and the deprecated `torch.cuda.amp.autocast(...)`) blocks and of
functions decorated with them, with the dtype and device they set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import libcst as cst

from amplint.static.flow import Flow, Policy, analyse
from amplint.static.patterns import argument, dtype_source, fp32_step, is_fp32_value, lineage
from amplint.static.scopes import walk

if TYPE_CHECKING:
    from amplint.static.context import FileContext

HALF_WORDS = frozenset(
    {
        "float16",
        "half",
        "bfloat16",
        "bf16",
        "fp16",
        "autocast",
        "GradScaler",
        "mixed_precision",
        "torch_dtype",
        "amp",
    }
)
AUTOCAST = frozenset(
    {
        "torch.autocast",
        "torch.amp.autocast",
        "torch.amp.autocast_mode.autocast",
        "torch.cuda.amp.autocast",
        "torch.cpu.amp.autocast",
    }
)
# The dtype each autocast defaults to when the call names none.
_DEFAULT_DTYPE = {"cuda": "float16", "cpu": "bfloat16"}
_HALF_DTYPES = {"float16": "float16", "half": "float16", "bfloat16": "bfloat16"}


@dataclass(frozen=True)
class AutocastRegion:
    node: cst.With | cst.FunctionDef
    call: cst.Call
    device: str | None  # "cuda", "cpu", or None when the call computes it
    dtype: str | None  # "float16", "bfloat16", or None when not known
    enabled: bool  # False only for a literal `enabled=False`
    members: frozenset[int]  # ids of the nodes inside the region


def may_run_in_half(ctx: FileContext) -> bool:
    """Whether the module mentions half precision or mixed precision anywhere."""
    return bool(ctx.words & HALF_WORDS)


def autocast_call(ctx: FileContext, node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and ctx.qualified(node.func) in AUTOCAST


def _literal(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        return node.evaluated_value if isinstance(node.evaluated_value, str) else None
    return None


def _region(ctx: FileContext, node: cst.With | cst.FunctionDef, call: cst.Call) -> AutocastRegion:
    device, dtype, enabled = autocast_settings(ctx, call)
    members = frozenset(id(n) for n in walk(node.body))
    return AutocastRegion(node, call, device, dtype, enabled, members)


def autocast_settings(ctx: FileContext, call: cst.Call) -> tuple[str | None, str | None, bool]:
    """`(device, dtype, enabled)` that an autocast call sets, wherever the call stands (a `with`
    item, a decorator, or `ctx = torch.autocast(...)` entered later); None where not literal."""
    qualified = ctx.qualified(call.func) or ""
    if qualified.startswith(("torch.cuda.", "torch.cpu.")):
        device: str | None = qualified.split(".")[1]
        dtype_arg = argument(call, 1, "dtype")
        enabled_arg = argument(call, 0, "enabled")
    else:
        device = _literal(argument(call, 0, "device_type"))
        dtype_arg = argument(call, 1, "dtype")
        enabled_arg = argument(call, 2, "enabled")
    if dtype_arg is None:
        dtype = _DEFAULT_DTYPE.get(device or "")
    else:
        name = dtype_arg.attr.value if isinstance(dtype_arg, cst.Attribute) else _literal(dtype_arg)
        dtype = _HALF_DTYPES.get(name or "")
    enabled = not (isinstance(enabled_arg, cst.Name) and enabled_arg.value == "False")
    return device, dtype, enabled


def autocast_regions(ctx: FileContext) -> list[AutocastRegion]:
    """Every autocast region of the module, outer regions before the regions they contain."""
    cached = ctx.memo.get("autocast_regions")
    if isinstance(cached, list):
        return cached
    regions: list[AutocastRegion] = []
    if ctx.words & {"autocast"}:
        for top in ctx.module.body:
            for node in walk(top):
                if isinstance(node, cst.With):
                    regions.extend(
                        _region(ctx, node, item.item)
                        for item in node.items
                        if isinstance(item.item, cst.Call) and autocast_call(ctx, item.item)
                    )
                elif isinstance(node, cst.FunctionDef):
                    regions.extend(
                        _region(ctx, node, d.decorator)
                        for d in node.decorators
                        if isinstance(d.decorator, cst.Call) and autocast_call(ctx, d.decorator)
                    )
    ctx.memo["autocast_regions"] = regions
    return regions


def autocast_region_of(ctx: FileContext, node: cst.CSTNode) -> AutocastRegion | None:
    """The innermost autocast region around `node`, enabled or not; None outside all of them."""
    inside = [region for region in autocast_regions(ctx) if id(node) in region.members]
    return inside[-1] if inside else None


def defines_modules(ctx: FileContext) -> bool:
    """Whether the module defines model code: a class deriving from `torch.nn.Module`, or from a
    class whose name says it is one (`LlamaPreTrainedModel`, `ModelMixin`, `GradientCheckpointingLayer`).
    Its tensors carry the weights' dtype, half precision included; a scheduler's or a data
    pipeline's arithmetic (`SchedulerMixin`, `DiffusionPipeline`) stays in float32."""
    cached = ctx.memo.get("defines_modules")
    if isinstance(cached, bool):
        return cached
    found = False
    for statement in ctx.module.body:
        if isinstance(statement, cst.ClassDef):
            for base in statement.bases:
                qualified = ctx.qualified(base.value) or ""
                last = (qualified or ctx.code(base.value)).rsplit(".", 1)[-1]
                if qualified == "torch.nn.Module" or any(
                    word in last for word in ("Module", "Model", "Layer")
                ):
                    found = True
    ctx.memo["defines_modules"] = found
    return found


def under_cuda_autocast(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether `node` runs inside an enabled autocast region that is, or may be, CUDA's (a device
    computed at run time counts): there `exp`, `log`, `pow`, `rsqrt`, `softmax`, `cumsum`, ... run in
    float32 whatever their input, while CPU autocast leaves them in bfloat16."""
    region = autocast_region_of(ctx, node)
    return region is not None and region.enabled and region.device in {"cuda", None}


# Per local function name, one entry per call in the module: which arguments (by position among
# the non-`self` parameters, or by keyword) are float32 there.
_CallArguments = dict[str, list[dict[int | str, bool]]]


def _float32_arguments(ctx: FileContext) -> _CallArguments:
    cached = ctx.memo.get("float32_arguments")
    if cached is not None:
        return cast(_CallArguments, cached)
    names = ctx.index.function_names
    table: _CallArguments = {}

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if not isinstance(node, cst.Call):
            return False
        func = node.func
        if isinstance(func, cst.Name) and func.value in names and ctx.qualified(func) is None:
            name = func.value
        elif isinstance(func, cst.Attribute) and func.attr.value in names:
            name = func.attr.value
            if not (isinstance(func.value, cst.Name) and func.value.value in {"self", "cls"}):
                table.setdefault(name, []).append({})  # another object's method: unknown
                return False
        else:
            return False
        seen: dict[int | str, bool] = {}
        position = 0
        for arg in node.args:
            if arg.star:
                break
            fp32 = holds_float32(ctx, arg.value, flow)
            if arg.keyword is None:
                seen[position] = fp32
                position += 1
            else:
                seen[arg.keyword.value] = fp32
        table.setdefault(name, []).append(seen)
        return False

    if names:
        policy = Policy(seed=seed)
        for scope in ctx.scopes:
            analyse(scope, policy)
    ctx.memo["float32_arguments"] = table
    return table


def float32_parameters(ctx: FileContext, function: cst.FunctionDef) -> frozenset[str]:
    """The parameters of a function of this module that every call of it in the module passes a
    float32 value: `_norm(self, x)` called only as `self._norm(x.float())` (the RMSNorm of Meta's
    llama and gemma), or `segment_sum(x)` called on upcast tensors. Empty when the module never
    calls the function, or calls it through another object."""
    calls = _float32_arguments(ctx).get(function.name.value)
    if not calls:
        return frozenset()
    params = [*function.params.posonly_params, *function.params.params]
    if params and params[0].name.value in {"self", "cls"}:
        params = params[1:]
    return frozenset(
        param.name.value
        for position, param in enumerate(params)
        if all(call.get(position, call.get(param.name.value, False)) for call in calls)
    )


def called_in_module(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """Whether the module calls a function of that name (`name(...)`, `self.name(...)`): a private
    method it never calls is a hook that a base class in another module calls."""
    return bool(_float32_arguments(ctx).get(function.name.value))


def holds_float32(
    ctx: FileContext,
    node: cst.BaseExpression,
    flow: Flow | None,
    function: cst.FunctionDef | None = None,
) -> bool:
    """`is_fp32_value`, and also a value that derives (with no cast or product in between) from a
    parameter that every caller passes in float32 (see `float32_parameters`), or from a
    comprehension over float32 values: `q, g = [x.to(torch.float32) for x in (q, g)]`, and then
    `q, g = (F.pad(x, (0, pad)) for x in (q, g))` keeps them float32; or a value created in float32
    (`torch.linspace(...)` with the default dtype, `x.sum(dtype=torch.float32)`)."""
    return is_fp32_value(ctx, node, flow) or _holds_float32(ctx, node, flow, function, 0, {})


# How far `holds_float32` follows operands, dtype sources and comprehensions into each other.
_DEPTH = 6


def _holds_float32(
    ctx: FileContext,
    node: cst.BaseExpression,
    flow: Flow | None,
    function: cst.FunctionDef | None,
    depth: int,
    used: dict[str, int],
) -> bool:
    """`holds_float32` with the bindings that the lineage already went back through (`used`), so
    that `x` in `x = x * dt` means the `x` before that line."""
    last: cst.CSTNode | None = None
    name: str | None = None  # the name whose binding the lineage went back to last
    for step in lineage(ctx, node, flow, used):
        if isinstance(step, cst.BinaryOperation):
            # Type promotion: one float32 operand makes the result float32; a product needs two.
            sides = [
                depth < _DEPTH and _holds_float32(ctx, side, flow, function, depth + 1, dict(used))
                for side in (step.left, step.right)
            ]
            return all(sides) if isinstance(step.operator, cst.MatrixMultiply) else any(sides)
        source = dtype_source(step)
        if source is not None:
            return depth < _DEPTH and _holds_float32(ctx, source, flow, function, depth + 1, dict(used))
        if (
            isinstance(step, cst.Call)
            and isinstance(step.func, cst.Name)
            and step.func.value in ctx.index.function_names
            and ctx.qualified(step.func) is None
        ):
            # A helper of the module (`reshape_into_chunks(x, pad)`): as its tensor argument is.
            first = next((arg.value for arg in step.args if arg.keyword is None and not arg.star), None)
            return (
                first is not None
                and depth < _DEPTH
                and _holds_float32(ctx, first, flow, function, depth + 1, dict(used))
            )
        decided = _created_dtype(ctx, step)
        if decided is None:
            decided = fp32_step(ctx, step, flow, 0)
        if decided is not None:
            return decided
        last = step
        name = step.value if isinstance(step, cst.Name) else name
    if isinstance(last, (cst.ListComp, cst.GeneratorExp)):
        return depth < _DEPTH and _comprehension_float32(ctx, last, name, flow, function, used, depth)
    if isinstance(last, cst.Name) and function is not None:
        # The lineage ends at a name only once its bindings in the function are used up: there it
        # stands for what the caller passed.
        return last.value in float32_parameters(ctx, function)
    return False


# Factories whose result has the default dtype, float32, unless told otherwise (`arange`, `randint`,
# `full` and `tensor` can give integers, which do not promote a half-precision operand).
_FLOAT_FACTORIES = frozenset(
    f"torch.{name}" for name in ("zeros", "ones", "empty", "rand", "randn", "linspace", "logspace", "eye")
)
_FLOAT32_DTYPES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})
_QUALIFIED_HALF_DTYPES = frozenset({"torch.float16", "torch.half", "torch.bfloat16"})


def _created_dtype(ctx: FileContext, step: cst.CSTNode) -> bool | None:
    """True for a call that creates its result in float32 (a float factory with the default dtype,
    any call with `dtype=torch.float32`), False for one with `dtype=torch.float16`/`torch.bfloat16`,
    None otherwise. Casts (`.to`, `.type`) are left to `is_fp32_value`."""
    if not isinstance(step, cst.Call):
        return None
    if isinstance(step.func, cst.Attribute) and step.func.attr.value in {"to", "type"}:
        return None
    dtype = argument(step, None, "dtype")
    if dtype is not None:
        qualified = ctx.qualified(dtype)
        if qualified in _FLOAT32_DTYPES:
            return True
        return False if qualified in _QUALIFIED_HALF_DTYPES else None
    return True if ctx.qualified(step.func) in _FLOAT_FACTORIES else None


def _comprehension_float32(
    ctx: FileContext,
    comprehension: cst.ListComp | cst.GeneratorExp,
    name: str | None,
    flow: Flow | None,
    function: cst.FunctionDef | None,
    used: dict[str, int],
    depth: int,
) -> bool:
    """Whether `name`, bound by `a, b = [f(x) for x in (a, b)]`, is float32: `f(x)` is an upcast,
    or is float32 with `x` standing for what `name` held before that line (for each element,
    where `name` is not one of them)."""
    if is_fp32_value(ctx, comprehension.elt, None):
        return True
    loop = comprehension.for_in
    if (
        flow is None
        or not isinstance(loop.target, cst.Name)
        or not isinstance(loop.iter, (cst.Tuple, cst.List))
    ):
        return False
    # What each name held before that line: the names it binds up to it, the names the lineage
    # went back through before their later bindings.
    before: dict[str, list[cst.CSTNode]] = {}
    skipped: dict[str, int] = {}
    for bound, values in flow.history.items():
        at = next((i for i in range(len(values) - 1, -1, -1) if values[i] is comprehension), None)
        if at is not None:
            before[bound], skipped[bound] = values[:at], 0
        else:
            before[bound], skipped[bound] = values, used.get(bound, 0)
    elements = [element.value for element in loop.iter.elements]
    same = [value for value in elements if isinstance(value, cst.Name) and value.value == name]
    for element in same or elements:
        scope = Flow(flow.policy, history={**before, loop.target.value: [element]})
        if not _holds_float32(ctx, comprehension.elt, scope, function, depth + 1, dict(skipped)):
            return False
    return True
