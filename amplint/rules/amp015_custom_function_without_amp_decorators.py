"""AMP015: a custom autograd Function whose backward does not run in the autocast state of its forward."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import libcst as cst

from amplint.rule import Bad, Good, Rule
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.dtypes import Step
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.imports import dotted_name
from amplint.static.patterns import argument, lineage, matmul_operands
from amplint.static.precision import AUTOCAST
from amplint.static.scopes import Scope, walk

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


class _Text(cst.Name):
    """Source text as a node: the code a fix puts in place of a decorator's expression, when it adds
    a decorator on the line below (libcst has no node for "these lines")."""

    def _validate(self) -> None:
        pass


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
    the autocast state itself.

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
    The fix adds the missing decorator (for the CUDA device; it is a no-op outside CUDA autocast)
    right above `def`, below `@staticmethod`; with `custom_fwd` already present it reuses its
    device, and a wrapper's counterpart (`autocast_custom_bwd` next to `autocast_custom_fwd`)
    where the module has one. A `forward` that must run in float32 (a custom kernel) takes
    `custom_fwd(device_type="cuda", cast_inputs=torch.float32)` instead: decide which applies.

    ## References
    - PyTorch AMP examples, "Autocast and Custom Autograd Functions":
      https://pytorch.org/docs/stable/notes/amp_examples.html#autocast-and-custom-autograd-functions
    - `torch.amp.custom_fwd(fwd=None, *, device_type, cast_inputs=None)`,
      `torch.amp.custom_bwd(bwd=None, *, device_type)`
    """

    code = "AMP015"
    name = "custom-function-without-amp-decorators"
    summary = (
        "autograd.Function whose backward runs outside forward's autocast state (no custom_fwd/custom_bwd)"
    )
    triggers = frozenset({"autograd"})

    bad = (
        Bad(
            """\
import torch


class LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t())

    @staticmethod
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output.mm(weight), grad_output.t().mm(x)


def train_step(x, weight):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return LinearFunction.apply(x, weight).sum()
""",
            fixed="""\
import torch


class LinearFunction(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t())

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output.mm(weight), grad_output.t().mm(x)


def train_step(x, weight):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return LinearFunction.apply(x, weight).sum()
""",
        ),
        Bad(
            """\
import math

import torch


class YosoCumulation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, hash_code_len):
        expectation = (1 - torch.acos(torch.matmul(query, key.transpose(-1, -2))) / math.pi) ** hash_code_len
        ctx.save_for_backward(expectation, query, key, value)
        ctx.hash_code_len = hash_code_len
        return torch.matmul(expectation, value)

    @staticmethod
    def backward(ctx, grad):
        expectation, query, key, value = ctx.saved_tensors
        weighted_exp = torch.matmul(grad, value.transpose(-1, -2)) * expectation
        grad_query = torch.matmul(weighted_exp, (ctx.hash_code_len / 2) * key)
        grad_key = torch.matmul(weighted_exp.transpose(-1, -2), (ctx.hash_code_len / 2) * query)
        grad_value = torch.matmul(expectation.transpose(-1, -2), grad)
        return grad_query, grad_key, grad_value, None


def cumulation(query, key, value, config, fp16=False):
    return YosoCumulation.apply(query, key, value, config["hash_code_len"])
""",
            fixed="""\
import math

import torch


class YosoCumulation(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, query, key, value, hash_code_len):
        expectation = (1 - torch.acos(torch.matmul(query, key.transpose(-1, -2))) / math.pi) ** hash_code_len
        ctx.save_for_backward(expectation, query, key, value)
        ctx.hash_code_len = hash_code_len
        return torch.matmul(expectation, value)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        expectation, query, key, value = ctx.saved_tensors
        weighted_exp = torch.matmul(grad, value.transpose(-1, -2)) * expectation
        grad_query = torch.matmul(weighted_exp, (ctx.hash_code_len / 2) * key)
        grad_key = torch.matmul(weighted_exp.transpose(-1, -2), (ctx.hash_code_len / 2) * query)
        grad_value = torch.matmul(expectation.transpose(-1, -2), grad)
        return grad_query, grad_key, grad_value, None


def cumulation(query, key, value, config, fp16=False):
    return YosoCumulation.apply(query, key, value, config["hash_code_len"])
""",
        ),
        Bad(
            """\
from torch.autograd import Function

from fla.utils import autocast_custom_bwd, autocast_custom_fwd


class FusedLinearFunction(Function):
    @staticmethod
    @autocast_custom_fwd
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx, do):
        x, weight = ctx.saved_tensors
        return do @ weight, do.t() @ x
""",
            fixed="""\
from torch.autograd import Function

from fla.utils import autocast_custom_bwd, autocast_custom_fwd


class FusedLinearFunction(Function):
    @staticmethod
    @autocast_custom_fwd
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    @autocast_custom_bwd
    def backward(ctx, do):
        x, weight = ctx.saved_tensors
        return do @ weight, do.t() @ x
""",
        ),
        Bad(
            """\
import torch
from torch.amp import custom_bwd


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.clone()

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad * ctx.scale, None
""",
            fixed="""\
import torch
from torch.amp import custom_bwd


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.clone()

    @staticmethod
    @custom_bwd(device_type="cuda")
    def backward(ctx, grad):
        return grad * ctx.scale, None
""",
        ),
        Bad(
            """\
import torch
from torch.autograd.function import Function


class ReversibleBlock(Function):
    @staticmethod
    def forward(ctx, hidden, layers):
        ctx.layers = layers
        with torch.no_grad():
            for layer in layers:
                hidden = layer(hidden)
        ctx.save_for_backward(hidden.detach())
        return hidden

    @classmethod
    def backward(cls, ctx, grad_hidden):
        (hidden,) = ctx.saved_tensors
        with torch.enable_grad():
            hidden.requires_grad_(True)
            output = ctx.layers[-1](hidden)
            torch.autograd.backward(output, grad_hidden)
        return hidden.grad, None


def run(blocks, x, bf16):
    return ReversibleBlock.apply(x, blocks)
""",
        ),
    )
    good = (
        Good(
            """\
import torch


class LinearFunction(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cuda")
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x.mm(weight.t())

    @staticmethod
    @torch.amp.custom_bwd(device_type="cuda")
    def backward(ctx, grad_output):
        x, weight = ctx.saved_tensors
        return grad_output.mm(weight), grad_output.t().mm(x)


def step(x, w):
    with torch.autocast("cuda"):
        return LinearFunction.apply(x, w)
""",
            "both decorators",
        ),
        Good(
            """\
import torch

from fla.utils import autocast_custom_bwd, autocast_custom_fwd, input_guard


class ChunkGLAFunction(torch.autograd.Function):
    @staticmethod
    @input_guard
    @autocast_custom_fwd
    def forward(ctx, q, k, v, g, scale):
        o = q @ k.transpose(-1, -2) @ v
        ctx.save_for_backward(q, k, v, g)
        return o

    @staticmethod
    @input_guard
    @autocast_custom_bwd
    def backward(ctx, do):
        q, k, v, g = ctx.saved_tensors
        dq = do @ v.transpose(-1, -2) @ k
        return dq, None, None, None, None
""",
            "flash-linear-attention's own wrappers around custom_fwd/custom_bwd",
        ),
        Good(
            """\
import torch
from torch.cuda.amp import custom_fwd


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    @custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        return grad @ weight.t(), x.t() @ grad
""",
            "`cast_inputs` runs forward with autocast disabled, as backward runs without custom_bwd",
        ),
        Good(
            """\
import torch


class PhimoeMultiplier(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, multiplier, selected_experts, masked_gates, mask_for_one):
        ctx.save_for_backward(multiplier, selected_experts, masked_gates)
        return multiplier * mask_for_one

    @staticmethod
    def backward(ctx, grad_at_output):
        multiplier, selected_experts, masked_gates = ctx.saved_tensors
        grad_at_output = grad_at_output * multiplier
        grad_at_scores_expanded = masked_gates * grad_at_output.mul(-1)
        grad_at_scores_expanded.scatter_add_(dim=-1, index=selected_experts, src=grad_at_output)
        return grad_at_scores_expanded, None, None, None, None


def route(scores, torch_dtype=torch.bfloat16):
    return PhimoeMultiplier.apply(scores, scores, None, None, None)
""",
            "a backward of element-wise ops, which autocast does not touch (phimoe)",
        ),
        Good(
            """\
import torch


class CheckpointFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run_function, *args):
        ctx.run_function = run_function
        ctx.autocast_kwargs = {"enabled": torch.is_autocast_enabled(), "dtype": torch.get_autocast_gpu_dtype()}
        ctx.save_for_backward(*args)
        with torch.no_grad():
            return run_function(*args)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [x.detach().requires_grad_(True) for x in ctx.saved_tensors]
        with torch.enable_grad(), torch.autocast("cuda", **ctx.autocast_kwargs):
            outputs = ctx.run_function(*inputs)
        torch.autograd.backward(outputs, grads)
        return (None, *(x.grad for x in inputs))
""",
            "saves and restores the autocast state itself (torch.utils.checkpoint before custom_bwd)",
        ),
        Good(
            """\
import torch


class GatedProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x @ weight

    @staticmethod
    def backward(ctx, grad, bf16=True):
        x, weight = ctx.saved_tensors
        grad_x = grad @ weight.to(grad.dtype).t()
        grad_w = x.float().t() @ grad.float()
        return grad_x, grad_w
""",
            "the backward casts the operands of its products itself",
        ),
        Good(
            """\
import torch


class FP8LinearFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, weight, weight_scale_inv, block_size, bias):
        ctx.save_for_backward(weight, weight_scale_inv)
        ctx.block_size = block_size
        return fp8_linear(input, weight, weight_scale_inv, block_size, bias)

    @staticmethod
    def backward(ctx, grad_output):
        weight, weight_scale_inv = ctx.saved_tensors
        weight = _dequantize_fp8_weight(weight, weight_scale_inv, ctx.block_size, grad_output.dtype)
        return grad_output @ weight, None, None, None, None


class EetqLinearMMFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, scales):
        ctx.save_for_backward(x, weight, scales)
        return eetq_kernels_hub.w8_a16_gemm(x, weight, scales)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, scales = ctx.saved_tensors
        identity = torch.eye(weight.shape[0]).to(weight.device).to(input.dtype)
        weight = eetq_kernels_hub.w8_a16_gemm(identity, weight, scales)
        return grad_output.squeeze(0).matmul(weight.transpose(0, 1)).unsqueeze(0), None, None
""",
            "the backward dequantizes its weight to the gradient's dtype (transformers' fp8 and eetq "
            "integrations)",
        ),
        Good(
            """\
import torch


class _InputOnlyGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inputs, function):
        with torch.enable_grad():
            outputs = function(inputs)
        ctx.save_for_backward(inputs, outputs)
        return outputs.detach()

    @staticmethod
    def backward(ctx, grad_outputs, bf16=True):
        inputs, outputs = ctx.saved_tensors
        return torch.autograd.grad(outputs, inputs, grad_outputs)[0], None
""",
            "`autograd.grad` over the graph that forward recorded, with its dtypes (transformers' LSD loss)",
        ),
        Good(
            """\
import torch


class SparseProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, indices):
        ctx.save_for_backward(weight, indices)
        return torch.ops.sparse_kernels.gather_product(x, weight, indices)

    @staticmethod
    def backward(ctx, grad):
        weight, indices = ctx.saved_tensors
        return grad @ weight.t(), None, None
""",
            "a forward without products (its outputs keep their inputs' dtype) in a module that never "
            "mentions half or mixed precision",
        ),
        Good(
            """\
import torch


class Square(torch.autograd.Function):
    @staticmethod
    def forward(x, weight):
        return x @ weight

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad, fp16=True):
        x, weight = ctx.saved_tensors
        return grad @ weight.t(), x.t() @ grad
""",
            "forward without ctx (`setup_context`): custom_fwd cannot decorate it",
        ),
    )

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
    why = _half_outputs(ctx, name, forward)
    if not why:
        return None
    message = (
        f"`{name}.backward` runs without the autocast state of `forward` (neither has "
        f"`custom_fwd`/`custom_bwd`), so under autocast {op} meets half-precision gradients and "
        "float32 saved tensors: a dtype mismatch, or another precision than forward used; "
        f"forward's outputs are half precision where {ctx.facts.describe(why, backward.name)}"
    )
    torch, missing = ctx.torch_name()
    fwd_edit = _insert_below(ctx, indents, forward, fwd, _torch_decorator(torch, "custom_fwd", "cuda"))
    bwd_edit = _insert_below(ctx, indents, backward, bwd, _torch_decorator(torch, "custom_bwd", "cuda"))
    help = 'decorate `forward` with `@torch.amp.custom_fwd(device_type="cuda")` and `backward` with `@torch.amp.custom_bwd(device_type="cuda")`'
    fix = (
        FixPlan("Add `custom_fwd`/`custom_bwd`", (fwd_edit, bwd_edit), missing)
        if fwd_edit and bwd_edit
        else None
    )
    return Finding(backward.name, message, fix=fix, help=help, evidence=why)


def _half_outputs(ctx: FileContext, name: str, forward: cst.FunctionDef) -> tuple[Step, ...]:
    """Why the outputs of `forward`, hence the gradients `backward` gets, are half precision under
    autocast: a product of its own, or a module it is given (`layer(hidden)` for each `layer` in
    `layers`), runs where autocast can be on (the caller's, as the project's precision allows), or
    `Name.apply(...)` stands in an autocast region of this module. Empty when none of that holds."""
    node = _autocast_sensitive(ctx, forward, None, casts_count=False) or _given_module_call(forward)
    if node is not None and any(state.device for state in ctx.facts.autocast_at(node)):
        lowered = tuple(step for step in ctx.facts.of(node).why if step.node is node)
        if lowered:
            return lowered
        return (Step(node, f"{_describe(ctx, node)} runs under the caller's autocast"),)
    for call in ctx.index.calls:
        func = call.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value == "apply"
            and isinstance(func.value, cst.Name)
            and func.value.value == name
            and any(state.device and state.where is not None for state in ctx.facts.autocast_at(call))
        ):
            return (Step(call, f"`{name}.apply(...)` runs under autocast"),)
    return ()


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


def _torch_decorator(torch: cst.BaseExpression, kind: str, device: str) -> cst.Call:
    func = cst.Attribute(value=cst.Attribute(value=torch, attr=cst.Name("amp")), attr=cst.Name(kind))
    equal = cst.AssignEqual(
        whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
    )
    return cst.Call(
        func=func,
        args=[cst.Arg(keyword=cst.Name("device_type"), value=cst.SimpleString(f'"{device}"'), equal=equal)],
    )


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
    return innermost.decorator, _Text(f"{code}{ctx.module.default_newline}{indent}@{ctx.code(added)}")


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
