"""AMP015: a custom autograd Function whose backward does not run in the autocast state of its forward."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from amplint.diagnostics import UNSAFE
from amplint.rule import Rule
from amplint.static.autocast import AUTOCAST
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.cst_compat import SourceText
from amplint.static.facts import CALLER_CLAUSE, Step
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.imports import dotted_name
from amplint.static.patterns import argument, lineage, matmul_operands
from amplint.static.scopes import Scope, walk

# A forward that asks for the autocast state (and casts by it), or whose products are float8 scaled
# matmuls, which autocast does not touch (torchao's Float8Linear).
_HANDLES_AUTOCAST = re.compile(
    r"is_autocast_enabled|get_autocast_(gpu_)?dtype|float8|fp8|_scaled_mm", re.IGNORECASE
)
_FUNCTION_BASES = frozenset(
    {"torch.autograd.Function", "torch.autograd.function.Function", "torch.autograd.function.InplaceFunction"}
)
_CONVOLUTIONS = frozenset(
    {
        f"{module}.{name}"
        for module in ("torch", "torch.nn.functional")
        for name in ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d")
    }
)
# Re-running (part of) the forward in backward, with gradients on (a checkpoint, a reversible block).
# `torch.autograd.grad` alone is not: it differentiates the graph forward recorded, whose dtypes are fixed.
_RECOMPUTE = frozenset({"torch.enable_grad"})
_CASTS = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16"})
# Code that runs only on a CUDA device: a Triton kernel, a compiled extension, a custom op, CUDA calls.
_CUDA_ONLY = re.compile(r"triton|\btl\.|\.cuda\b|torch\.ops\.|_C\.|cupy", re.IGNORECASE)


@dataclass(frozen=True)
class _Decorators:
    """What the decorators of a `forward` or `backward` say about autocast."""

    fwd: cst.Decorator | None = None  # custom_fwd, or a wrapper named like it
    casts_inputs: bool = False  # custom_fwd(cast_inputs=...): forward runs with autocast disabled
    bwd: cst.Decorator | None = None
    autocast: bool = False  # @torch.autocast(...) on the method itself
    staticmethod: bool = False


class CustomFunctionWithoutAmpDecorators(Rule):
    """
    ## What it does
    Flags a `torch.autograd.Function` subclass whose `backward` computes products (`@`, `matmul`,
    `mm`, `bmm`, `einsum`, `linear`, convolutions) or re-runs the forward, while `forward` and
    `backward` lack `torch.amp.custom_fwd` and `torch.amp.custom_bwd`, where it can run under
    autocast: its `forward` computes products too (its outputs, hence its gradients, are then half
    precision under autocast), the module uses autocast or mixed precision, or applies the
    Function inside an autocast region. Also flags `custom_fwd` without `custom_bwd` in that case, and
    `custom_bwd` without `custom_fwd` anywhere. Decorators named like them (`autocast_custom_fwd`,
    the deprecated `torch.cuda.amp.custom_fwd`) count, as does a function that saves and restores
    the autocast state itself. Where neither the module nor an execution mode of the project
    enables autocast (the project casts its models, or sets no precision), the hazard is a caller's
    choice: the finding is conditional, shown by `--show-conditional`.

    ## Why is this bad?
    Autograd runs `backward` in its own thread, outside the autocast region that `forward` ran in.
    Under autocast, `forward`'s products ran in float16/bfloat16 and its outputs, hence the
    incoming gradients, are half precision, while the tensors saved for backward (weights, float32
    inputs) are not: `grad_output.mm(weight)` in `backward` then raises `expected scalar type
    BFloat16 but found Float` (or runs the backward in another precision than the forward).
    `custom_fwd` records the autocast state of `forward` and `custom_bwd` restores it for
    `backward`; `custom_bwd` alone raises `AttributeError`, because the state it restores was never
    recorded.

    ## Example
    ```python
    class LinearFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, weight):
            ctx.save_for_backward(x, weight)
            return x.mm(weight.t())

        @staticmethod
        def backward(ctx, grad_output):
            x, weight = ctx.saved_tensors
            return grad_output.mm(weight), grad_output.t().mm(x)
    ```

    ## Fix
    ```python
    class LinearFunction(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda")
        def forward(ctx, x, weight): ...

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad_output): ...
    ```
    The fix adds the missing decorator right above `def`, below `@staticmethod`; with `custom_fwd`
    already present it reuses its device, and a wrapper's counterpart (`autocast_custom_bwd` next
    to `autocast_custom_fwd`) where the module has one. A pair covers one device's autocast (two
    stacked pairs share the state they record, and the outer one restores the inner one's), so
    the fix names the device of the autocast regions the module applies the Function in
    (`device_type="cpu"` under `torch.autocast("cpu")`); where the caller chooses, a Function
    without Triton or other CUDA-only code gets `device_type="cuda" if torch.cuda.is_available()
    else "cpu"`, which covers CPU autocast on a machine without CUDA, and one with CUDA-only code
    `device_type="cuda"`. A `forward` that must run in float32 (a custom kernel) takes
    `custom_fwd(device_type="cuda", cast_inputs=torch.float32)` instead: decide which applies.

    ## References
    - PyTorch AMP examples, "Autocast and Custom Autograd Functions":
      https://pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions
    - `torch.amp.custom_fwd(fwd=None, *, device_type, cast_inputs=None)`,
      `torch.amp.custom_bwd(bwd=None, *, device_type)`
    """

    code = "AMP015"
    name = "custom-function-without-amp-decorators"
    fix_applicability = UNSAFE  # backward then runs under forward's autocast: other dtypes there
    summary = (
        "autograd.Function whose backward runs outside forward's autocast state (no custom_fwd/custom_bwd)"
    )
    triggers = frozenset({"autograd"})

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not ctx.words & {"Function", "InplaceFunction"}:
            return
        if not any(target.startswith("torch") for target in ctx.index.aliases.values()):
            return
        scopes = {scope.node: scope for scope in ctx.scopes if isinstance(scope.node, cst.FunctionDef)}
        for top in ctx.module.body:
            nested = dict(_nested(ctx, top, ""))
            for node in nested:
                if isinstance(node, cst.ClassDef) and any(
                    ctx.qualified(base.value) in _FUNCTION_BASES for base in node.bases
                ):
                    finding = _check_function(ctx, node, nested, scopes)
                    if finding is not None:
                        # Positions are then computed for this statement only, not the whole module.
                        for old in [
                            finding.node,
                            *(old for old, _ in (finding.fix.replacements if finding.fix else ())),
                        ]:
                            ctx.index.top_of.setdefault(old, top)
                        yield finding


def _nested(ctx: FileContext, statement: cst.CSTNode, indent: str) -> Iterator[tuple[cst.CSTNode, str]]:
    """`statement` and every statement nested in its blocks, with its indentation (from the indented
    blocks around it: positions would cost a metadata pass). Expressions are not walked: a class
    is always a statement."""
    yield statement, indent
    parts = [getattr(statement, name, None) for name in ("body", "orelse", "finalbody")]
    parts.extend(getattr(statement, "handlers", ()))
    for part in parts:
        if isinstance(part, (cst.If, cst.Else, cst.Finally, cst.ExceptHandler, cst.ExceptStarHandler)):
            yield from _nested(ctx, part, indent)  # `elif`, `else:`, `finally:`, `except:` at this level
        elif isinstance(part, cst.IndentedBlock):
            inner = indent + (part.indent if part.indent is not None else ctx.module.default_indent)
            for child in part.body:
                yield from _nested(ctx, child, inner)


def _decorators(ctx: FileContext, function: cst.FunctionDef) -> _Decorators:
    fwd = bwd = None
    casts = autocast = static = False
    for decorator in function.decorators:
        expr = decorator.decorator
        call = expr if isinstance(expr, cst.Call) else None
        name = dotted_name(call.func if call is not None else expr) or ""
        last = name.rpartition(".")[2]
        if "custom_fwd" in last:
            fwd = decorator
            casts = call is not None and any(
                arg.keyword is not None
                and arg.keyword.value == "cast_inputs"
                and not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
                for arg in call.args
            )
        elif "custom_bwd" in last:
            bwd = decorator
        elif "autocast" in last or (call is not None and ctx.qualified(call.func) in AUTOCAST):
            autocast = True
        elif name == "staticmethod":
            static = True
    # A method that saves, queries or sets the autocast state itself (`torch.is_autocast_enabled()`,
    # `with torch.autocast(**ctx.autocast_kwargs)`) counts as decorated.
    manages = any(isinstance(n, cst.Name) and "autocast" in n.value.lower() for n in walk(function.body))
    return _Decorators(fwd, casts, bwd, autocast or manages, static)


def _check_function(
    ctx: FileContext, cls: cst.ClassDef, indents: dict[cst.CSTNode, str], scopes: dict[cst.FunctionDef, Scope]
) -> Finding | None:
    body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
    methods = {item.name.value: item for item in body if isinstance(item, cst.FunctionDef)}
    forward, backward = methods.get("forward"), methods.get("backward")
    if forward is None or backward is None or "setup_context" in methods:
        return None
    fwd, bwd = _decorators(ctx, forward), _decorators(ctx, backward)
    if fwd.autocast or bwd.autocast:
        return None
    name = cls.name.value
    if bwd.bwd is not None:
        if fwd.fwd is not None:
            return None
        message = (
            f"`{name}.backward` has `custom_bwd`, which restores the autocast state that `custom_fwd` "
            "records in `forward`, but `forward` lacks `custom_fwd`: every backward raises "
            "AttributeError (`_fwd_used_autocast`)"
        )
        added = _counterpart(ctx, bwd.bwd, "custom_bwd", "custom_fwd")
        return _finding(ctx, indents, forward, fwd, added, message)
    if fwd.casts_inputs:
        return None  # forward runs with autocast disabled, and so does backward
    if _HANDLES_AUTOCAST.search(ctx.code(forward)):
        return None  # forward reads the autocast state itself, or computes in float8 (not autocast's)
    sensitive = _autocast_sensitive(ctx, backward, scopes.get(backward))
    if sensitive is None:
        return None
    op = _describe(ctx, sensitive)
    if fwd.fwd is not None:
        message = (
            f"`{name}.forward` has `custom_fwd` but `backward` lacks `custom_bwd`, so {op} runs without "
            "the autocast state of forward: half-precision gradients meet float32 saved tensors "
            "(a dtype mismatch) or the backward runs in another precision than forward"
        )
        added = _counterpart(ctx, fwd.fwd, "custom_fwd", "custom_bwd")
        return _finding(ctx, indents, backward, bwd, added, message)
    why, callers = _half_outputs(ctx, name, forward)
    if not why:
        return None
    message = (
        f"`{name}.backward` runs without the autocast state of `forward` (neither has "
        f"`custom_fwd`/`custom_bwd`), so under autocast {op} meets half-precision gradients and "
        "float32 saved tensors: a dtype mismatch, or another precision than forward used; "
        f"forward's outputs are half precision where {ctx.facts.describe(why, backward.name)}"
    )
    if callers:
        # No autocast region here and no execution mode of the project: the caller's autocast only.
        message += f"; {CALLER_CLAUSE} autocast"
    torch, missing = ctx.torch_name()
    device = _device(ctx, cls, torch)
    decorators = [_torch_decorator(torch, kind, device) for kind in ("custom_fwd", "custom_bwd")]
    fwd_edit = _insert_below(ctx, indents, forward, fwd, decorators[0])
    bwd_edit = _insert_below(ctx, indents, backward, bwd, decorators[1])
    help = f"decorate `forward` with `@{ctx.code(decorators[0])}` and `backward` with `@{ctx.code(decorators[1])}`"
    fix = (
        FixPlan("Add `custom_fwd`/`custom_bwd`", (fwd_edit, bwd_edit), missing)
        if fwd_edit and bwd_edit
        else None
    )
    return Finding(backward.name, message, fix=fix, help=help, evidence=why, caller_only=callers)


def _half_outputs(ctx: FileContext, name: str, forward: cst.FunctionDef) -> tuple[tuple[Step, ...], bool]:
    """Why the outputs of `forward`, hence the gradients `backward` gets, are half precision under
    autocast: a product of its own, or a module it is given (`layer(hidden)` for each `layer` in
    `layers`), runs where autocast can be on (the caller's, as the project's precision allows), or
    `Name.apply(...)` stands in an autocast region of this module. Empty when none of that holds.
    The flag: the autocast is only the one a caller may enable (no region, no execution mode)."""
    node = _autocast_sensitive(ctx, forward, None, casts_count=False) or _given_module_call(forward)
    states = [state for state in ctx.facts.autocast_at(node) if state.device] if node is not None else []
    if node is not None and states:
        callers = all(state.where is None and state.mode is None for state in states)
        lowered = tuple(step for step in ctx.facts.of(node).why if step.node is node)
        if lowered:
            return lowered, callers
        return (Step(node, f"{_describe(ctx, node)} runs under the caller's autocast"),), callers
    for call in ctx.index.calls:
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "apply"
            and isinstance(func.value, cst.Name)
            and func.value.value == name
            and any(state.device and state.where is not None for state in ctx.facts.autocast_at(call))
        ):
            return (Step(call, f"`{name}.apply(...)` runs under autocast"),), False
    return (), False


def _given_module_call(forward: cst.FunctionDef) -> cst.Call | None:
    """A call in `forward` of a callable it is given (a parameter, or each element of one)."""
    given = {param.name.value for param in forward.params.params[1:]}
    for node in walk(forward.body):
        if (
            isinstance(node, cst.For)
            and isinstance(node.target, cst.Name)
            and isinstance(node.iter, cst.Name)
            and node.iter.value in given
        ):
            given.add(node.target.value)
    return next(
        (
            n
            for n in walk(forward.body)
            if isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value in given
        ),
        None,
    )


def _finding(
    ctx: FileContext,
    indents: dict[cst.CSTNode, str],
    method: cst.FunctionDef,
    decorators: _Decorators,
    added: tuple[cst.BaseExpression, bool],
    message: str,
) -> Finding:
    decorator, missing = added
    edit = _insert_below(ctx, indents, method, decorators, decorator)
    fix = FixPlan(f"Add `@{ctx.code(decorator)}`", (edit,), missing) if edit is not None else None
    return Finding(
        method.name, message, fix=fix, help=f"decorate `{method.name.value}` with `@{ctx.code(decorator)}`"
    )


def _device(ctx: FileContext, cls: cst.ClassDef, torch: cst.BaseExpression) -> cst.BaseExpression:
    """The `device_type` of the decorators to add. One pair records and restores one device's
    autocast state (two stacked pairs share `ctx._dtype`, so the outer one restores the inner one's
    state): the device of the autocast regions the module applies the Function in, where they agree;
    else, for a Function that can run on CPU (no Triton or other CUDA-only code), the device this
    process computes on, so that CPU autocast is covered on a machine without CUDA; else CUDA."""
    name = cls.name.value
    devices = {
        state.device
        for call in ctx.index.calls
        if isinstance(call.func, cst.Attribute)
        and call.func.attr.value == "apply"
        and isinstance(call.func.value, cst.Name)
        and call.func.value.value == name
        for state in ctx.facts.autocast_at(call)
        if state.device and state.where is not None
    }
    if len(devices) == 1:
        return cst.SimpleString(f'"{devices.pop()}"')
    if _CUDA_ONLY.search(ctx.code(cls)):
        return cst.SimpleString('"cuda"')
    return cst.parse_expression(f'"cuda" if {ctx.code(torch)}.cuda.is_available() else "cpu"')


def _torch_decorator(torch: cst.BaseExpression, kind: str, device: cst.BaseExpression | str) -> cst.Call:
    func = cst.Attribute(value=cst.Attribute(value=torch, attr=cst.Name("amp")), attr=cst.Name(kind))
    equal = cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )
    value = cst.SimpleString(f'"{device}"') if isinstance(device, str) else device
    return cst.Call(func=func, args=[cst.Arg(keyword=cst.Name("device_type"), value=value, equal=equal)])


def _counterpart(
    ctx: FileContext, present: cst.Decorator, have: str, want: str
) -> tuple[cst.BaseExpression, bool]:
    """The decorator that pairs with `present`: the wrapper named like it where the module binds that
    name (`autocast_custom_bwd` for `autocast_custom_fwd`), else `torch.amp.<want>` with the same
    device (`"cuda"` where the present one does not name it)."""
    expr = present.decorator
    call = expr if isinstance(expr, cst.Call) else None
    name = dotted_name(call.func if call is not None else expr) or ""
    qualified = ctx.qualified(call.func if call is not None else expr) or ""
    if not qualified.startswith(("torch.amp.", "torch.cuda.amp.")):
        sibling = name.replace(have, want)
        root = sibling.partition(".")[0]
        if root in ctx.index.aliases and (sibling == root or ctx.qualified(cst.parse_expression(sibling))):
            if call is None:
                return cst.parse_expression(sibling), False
            if not any(arg.keyword is not None and arg.keyword.value == "cast_inputs" for arg in call.args):
                return call.with_changes(func=cst.parse_expression(sibling)), False
    device = "cuda"
    named = argument(call, None, "device_type") if call is not None else None
    if isinstance(named, cst.SimpleString) and isinstance(named.evaluated_value, str):
        device = named.evaluated_value
    torch, missing = ctx.torch_name()
    return _torch_decorator(torch, want, device), missing


def _insert_below(
    ctx: FileContext,
    indents: dict[cst.CSTNode, str],
    method: cst.FunctionDef,
    decorators: _Decorators,
    added: cst.BaseExpression,
) -> tuple[cst.CSTNode, cst.CSTNode] | None:
    """An edit that adds `@added` as the innermost decorator of a static method (below
    `@staticmethod` and any wrapper, so that it sees `ctx` first): the innermost decorator's
    expression is replaced by itself plus a new decorator line. None where that is not safe."""
    if not decorators.staticmethod or not method.decorators or not method.params.params:
        return None
    innermost = method.decorators[-1]
    code = ctx.code(innermost.decorator)
    indent = indents.get(method)
    if "\n" in code or "\r" in code or indent is None:
        return None
    return innermost.decorator, SourceText(f"{code}{ctx.module.default_newline}{indent}@{ctx.code(added)}")


def _autocast_sensitive(
    ctx: FileContext, method: cst.FunctionDef, scope: Scope | None, *, casts_count: bool = True
) -> cst.CSTNode | None:
    """What in `method` computes differently inside and outside autocast: a product, a
    convolution, or a re-run of the forward under `torch.enable_grad()`. In `backward`, which runs
    outside autocast, a product whose operands are cast explicitly computes in the dtype chosen
    (`casts_count`); in `forward` autocast overrides such casts."""
    flow: Flow | None = None
    if casts_count and scope is not None:
        flow = analyse(scope, Policy(seed=lambda node, flow: False))
    for node in walk(method.body):
        operands = matmul_operands(ctx, node)
        if operands is not None:
            if not (casts_count and any(_cast(ctx, operand, flow) for operand in operands)):
                return node
        elif isinstance(node, cst.Call) and ctx.qualified(node.func) in _CONVOLUTIONS | _RECOMPUTE:
            return node
    return None


def _describe(ctx: FileContext, node: cst.CSTNode) -> str:
    if isinstance(node, cst.Call) and ctx.qualified(node.func) in _RECOMPUTE:
        return "the forward it re-runs"
    code = " ".join(ctx.code(node).split())
    return f"`{code if len(code) <= 60 else code[:57] + '...'}`"


def _cast(ctx: FileContext, operand: cst.BaseExpression, flow: Flow | None) -> bool:
    """The operand's dtype is chosen explicitly: it comes from a cast (`.to(...)`, `.float()`,
    `.type_as(...)`) or from a call told a dtype (`dequantize(w, scale, grad.dtype)`), directly or
    through a name bound to one (`identity = torch.eye(n).to(x.dtype)`; `w = gemm(identity, q)`).
    A check of the code's shape (a cast written there), not of dtypes."""
    for step in lineage(ctx, operand, flow):
        if not isinstance(step, cst.Call):
            continue
        if _sets_dtype(ctx, step):
            return True
        for arg in step.args:
            if isinstance(arg.value, cst.Name) and flow is not None:
                bound = flow.history.get(arg.value.value)
                if bound and isinstance(bound[-1], cst.Call) and _sets_dtype(ctx, bound[-1]):
                    return True
    return False


def _sets_dtype(ctx: FileContext, call: cst.Call) -> bool:
    """A cast method, or a call passed a dtype (`dtype=...`, `x.dtype`), anywhere along a method chain."""
    node: cst.BaseExpression = call
    while isinstance(node, cst.Call):
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _CASTS and ctx.qualified(func) is None:
            return True
        for arg in node.args:
            if (arg.keyword is not None and arg.keyword.value == "dtype") or (
                isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "dtype"
            ):
                return True
        node = func.value if isinstance(func, cst.Attribute) else func
    return False
