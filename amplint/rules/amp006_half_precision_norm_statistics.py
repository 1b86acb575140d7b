"""AMP006: hand-written RMSNorm/LayerNorm statistics computed in half precision."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.rule import Bad, Good, Rule, Verdict
from amplint.runtime.chains import half_precision_verdict
from amplint.static.context import FileContext, Finding, FixPlan
from amplint.static.flow import Flow, Hit, Policy, analyse
from amplint.static.patterns import argument, function_call, is_fp32_dtype, lineage, method_call, with_method
from amplint.static.precision import called_in_module, holds_float32, under_cuda_autocast
from amplint.static.scopes import Scope, scopes_holding, walk

_MEAN_FUNCTIONS = frozenset({"torch.mean"})
# `std` is left out on purpose: its square root keeps it in range, so a half-precision `std` is one
# rounding like any op (PyTorch accumulates in float32 inside), not an overflow waiting to happen.
_VAR_FUNCTIONS = {"torch.var": "var", "torch.var_mean": "var_mean"}
_VAR_METHODS = frozenset({"var"})
_STATISTIC_NAMES = frozenset({"mean", "var", "var_mean"})
# Where a statistic normalises: a (reciprocal) square root, or a power of one half.
_ROOT_FUNCTIONS = frozenset({"torch.rsqrt", "torch.sqrt", "torch.reciprocal"})
_ROOT_METHODS = frozenset({"rsqrt", "sqrt", "reciprocal", "rsqrt_", "sqrt_"})
_MEASURES = frozenset({"log", "log10", "log2", "item", "tolist"})
_HALF_POWERS = frozenset({"0.5", "-0.5", ".5", "-.5", "-1"})


@dataclass(frozen=True)
class Statistic:
    call: cst.Call
    kind: str  # "pow" (x.pow(2), x ** 2, x.square()), "mul" (x * x), "var" or "var_mean"
    data: cst.BaseExpression  # the tensor whose statistic it is
    square: cst.BaseExpression | None = None  # `x * x`, `x.pow(2)`: what the mean averages


if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class HalfPrecisionNormStatistics(Rule):
    """
    ## What it does
    Flags hand-written RMSNorm and LayerNorm statistics (`x.pow(2).mean(-1, keepdim=True)`,
    `(x * x).mean(...)`, `x.square().mean(...)`, `x.var(...)`, `torch.var_mean(...)`) whose input
    is not upcast to float32, when the statistic is taken per row (over some dims, not the whole
    tensor or dim 0) and rescales a tensor (through `rsqrt`, `sqrt`, a power of one half, or a
    division).

    ## Why is this bad?
    Squares grow fast: in float16 any activation above 256 squares to more than 65504 and becomes
    `inf`, so the variance is `inf`, `rsqrt` gives 0 and the whole row is zeroed (the T5-in-fp16
    NaN); a `var` overflows the same way once the row's standard deviation passes 256, which the
    outlier features of large models reach. In bfloat16 nothing overflows, but the variance and
    its reciprocal root are each rounded to 8 mantissa bits before they scale every element. CUDA
    autocast runs `pow` (and `square`, which is `pow`) in float32, but not `*`, `mean` or `var`;
    and a model loaded with
    `torch_dtype=torch.bfloat16` or `.half()` weights and run without autocast, which is how most
    inference runs, computes all of it in half precision.

    ## Example
    ```python
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states
    ```

    ## Fix
    Upcast the input, normalise in float32, cast back (transformers' `LlamaRMSNorm`):
    ```python
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states.to(input_dtype)
    ```
    Where the statistic feeds `rsqrt`/`sqrt` and nothing else, `--fix` makes the smaller change of
    computing the statistic and its root in float32 and casting the factor back to the input's
    dtype, so that every dtype downstream stays as it was.

    ## References
    - transformers `LlamaRMSNorm`, `T5LayerNorm` (the float32 variance was added for fp16 T5)
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP006"
    name = "half-precision-norm-statistics"
    summary = "hand-written RMSNorm/LayerNorm statistics (pow(2).mean, x * x, var) without a float32 upcast"
    # A statistic that normalises nearly always meets a root (`rsqrt`, `sqrt`) or is a `var`; files
    # with a mean of squares and only `** -0.5` are rare enough not to parse every file with `mean`.
    triggers = frozenset({"rsqrt", "sqrt", "reciprocal", "var", "var_mean"})
    region_words = triggers

    bad = (
        Bad(
            """\
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, hidden_states):
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states
""",
            fixed="""\
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, hidden_states):
        variance = hidden_states.to(torch.float32).pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon).to(hidden_states.dtype)
        return self.weight * hidden_states
""",
        ),
        Bad(
            """\
import torch


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
""",
            fixed="""\
import torch


def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.to(torch.float32).pow(2).mean(-1, keepdim=True) + eps).to(x.dtype))
""",
        ),
        Bad(
            """\
import torch
from torch import nn


class LayerNorm(nn.Module):
    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight * x + self.bias
""",
            fixed="""\
import torch
from torch import nn


class LayerNorm(nn.Module):
    def forward(self, x):
        u = x.mean(-1, keepdim=True)
        s = (x - u).to(torch.float32).pow(2).mean(-1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps).to(x.dtype)
        return self.weight * x + self.bias
""",
        ),
        Bad(
            """\
import torch


def layer_norm(hidden_states, eps):
    mean = hidden_states.mean(-1, keepdim=True)
    variance = hidden_states.var(-1, unbiased=False, keepdim=True)
    return (hidden_states - mean) / torch.sqrt(variance + eps)
""",
            fixed="""\
import torch


def layer_norm(hidden_states, eps):
    mean = hidden_states.mean(-1, keepdim=True)
    variance = hidden_states.to(torch.float32).var(-1, unbiased=False, keepdim=True)
    return (hidden_states - mean) / torch.sqrt(variance + eps).to(hidden_states.dtype)
""",
        ),
        Bad(
            """\
import torch


def qk_norm(q, eps):
    ms = (q * q).mean(dim=-1, keepdim=True)
    return q * torch.rsqrt(ms + eps)
""",
            fixed="""\
import torch


def qk_norm(q, eps):
    ms = (q.to(torch.float32) * q.to(torch.float32)).mean(dim=-1, keepdim=True)
    return q * torch.rsqrt(ms + eps).to(q.dtype)
""",
        ),
        Bad(
            """\
import torch


def norm(x, eps=1e-5):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / (var + eps).sqrt()
"""
        ),
    )
    good = (
        Good(
            """\
def rescale_noise_cfg(noise_cfg, noise_pred_text, guidance_rescale):
    std_text = noise_pred_text.std(dim=list(range(1, noise_pred_text.ndim)), keepdim=True)
    std_cfg = noise_cfg.std(dim=list(range(1, noise_cfg.ndim)), keepdim=True)
    return noise_cfg * (std_text / std_cfg)
""",
            "a standard deviation stays in range (PyTorch accumulates it in float32 and rounds once): "
            "diffusers' guidance rescale",
        ),
        Good(
            """\
import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
""",
            "transformers' RMSNorm: the input is upcast before the statistic",
        ),
        Good(
            """\
import torch
from torch import nn


class GemmaRMSNorm(nn.Module):
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
""",
            "a helper that every caller in the file passes an upcast tensor (Meta's llama, gemma)",
        ),
        Good(
            """\
import torch


def rms_norm(x, eps):
    return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
""",
            "the statistic is computed from an upcast input and the factor is cast back",
        ),
        Good(
            """\
import torch


def norm(x, eps):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + eps)
""",
            "CUDA autocast runs `pow` in float32, so the mean of the squares is float32",
        ),
        Good(
            """\
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        compute_dtype = torch.float32 if self.force_fp32 else input_dtype
        hidden_states = hidden_states.to(compute_dtype)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.eps)
        return hidden_states.to(input_dtype)
""",
            "the precision is a setting the author offers, with float32 as one choice (stable_audio3)",
        ),
        Good(
            """\
def mse(pred, target):
    return (pred - target).pow(2).mean()
""",
            "a loss, not a normalisation statistic",
        ),
        Good(
            """\
import torch


def z_loss(logits, loss):
    return logits.logsumexp(dim=-1).to(dtype=loss.dtype).pow(2).mean()
""",
            "a squared mean that normalises nothing",
        ),
        Good(
            """\
import torch


def silog_loss(pred, target, lambd):
    diff_log = torch.log(target) - torch.log(pred)
    return torch.sqrt(torch.pow(diff_log, 2).mean(-1) - lambd * torch.pow(diff_log.mean(-1), 2))
""",
            "the root of a mean of squares is the loss itself and scales nothing (glpn)",
        ),
        Good(
            """\
import torch


def normalize_features(features):
    return (features - features.mean(0)) / torch.sqrt(features.var(0, unbiased=True) + 1e-7)
""",
            "standardising data over dim 0 (the time axis of audio features), not a normalisation layer",
        ),
        Good(
            """\
import torch


def init_positions(q_len, d_model):
    position_enc = torch.randn(q_len, d_model)
    position_enc = position_enc - position_enc.mean()
    return position_enc / (position_enc.std() * 10)
""",
            "a statistic of the whole tensor (an initialisation, a feature extractor), not per row",
        ),
        Good(
            """\
import numpy as np


def zero_mean_unit_var_norm(vector, length):
    return (vector - vector[:length].mean(-1)) / np.sqrt(vector[:length].var(-1) + 1e-7)
""",
            "numpy arrays in a feature extractor, not tensors",
        ),
        Good(
            """\
import torch
from .modeling_base import BaseRMSNorm


class GroupedRMSNorm(BaseRMSNorm):
    def _norm(self, x):
        x = x.reshape(*x.shape[:-1], -1, self.group_size)
        out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.flatten(-2)
""",
            "an override of a helper that the base class in another module calls, there on an upcast "
            "tensor (transformers' modular files)",
        ),
        Good(
            """\
import torch


def loud_frames(waveform, frame_length, floor_db):
    frames = waveform.reshape(-1, frame_length)
    frame_rms = frames.square().mean(-1).sqrt()
    frame_db = 20 * torch.log10(frame_rms + 1e-12)
    return frame_db > frame_db.max() - floor_db
""",
            "an RMS that measures loudness, not one that rescales the tensor (pocket_tts)",
        ),
    )

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the statistics are computed in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        candidates = [call for call in ctx.index.calls if _maybe_statistic(call)]
        if not candidates:
            return
        for scope in scopes_holding(ctx, candidates):
            low, hits = _scan(ctx, scope)
            if not hits:
                continue
            scaling = _roots_that_scale(ctx, scope, {hit.sink for found in hits.values() for hit in found})
            for call, stat_hits in hits.items():
                if any(hit.label == "division" or hit.sink in scaling for hit in stat_hits):
                    yield _finding(ctx, scope, low[call], stat_hits)


def _scan(ctx: FileContext, scope: Scope) -> tuple[dict[cst.Call, Statistic], dict[cst.Call, list[Hit]]]:
    """The low-precision statistics of a scope, and where each one normalises (judged when the
    flow reaches each call, so that names mean what they mean at that line)."""
    function = scope.node if isinstance(scope.node, cst.FunctionDef) else None
    low: dict[cst.Call, Statistic] = {}
    judged: set[cst.Call] = set()

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if not isinstance(node, cst.Call):
            return False
        if node not in judged:
            judged.add(node)
            stat = _statistic(ctx, node, flow)
            if stat is not None and _low_precision(ctx, stat, flow, function):
                low[node] = stat
        return node in low

    policy = Policy(seed=seed, sink=lambda node, flow: _normalises(ctx, node, flow))
    hits: dict[cst.Call, list[Hit]] = {}
    for hit in analyse(scope, policy).hits.values():
        if isinstance(hit.origin, cst.Call) and hit.origin in low:
            hits.setdefault(hit.origin, []).append(hit)
    return low, hits


def _roots_that_scale(ctx: FileContext, scope: Scope, roots: set[cst.CSTNode]) -> set[cst.CSTNode]:
    """The roots whose value multiplies or divides a tensor: a normalisation, not a loss
    (`loss = torch.sqrt(mse)`) or a number (`energy = torch.sqrt(ms).item()`)."""

    def sink(node: cst.BaseExpression, flow: Flow) -> str | None:
        if (
            isinstance(node, cst.BinaryOperation)
            and isinstance(node.operator, (cst.Multiply, cst.Divide))
            and not any(_is_number(side) for side in (node.left, node.right))
        ):
            return "scales"
        if method_call(ctx, node, frozenset({"mul", "div", "mul_", "div_"})) is not None:
            return "scales"
        return None

    def blocks(node: cst.BaseExpression, flow: Flow) -> bool:
        # `20 * torch.log10(rms)` measures loudness; it normalises nothing.
        func = node.func if isinstance(node, cst.Call) else None
        name = func.attr.value if isinstance(func, cst.Attribute) else ""
        return name in _MEASURES

    policy = Policy(seed=lambda node, flow: node in roots, sink=sink, blocks=blocks)
    return {hit.origin for hit in analyse(scope, policy).hits.values()}


def _is_number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    return isinstance(node, (cst.Integer, cst.Float))


def _maybe_statistic(call: cst.Call) -> bool:
    """A cheap look at the call's name: `mean`, `var`, `var_mean`."""
    func = call.func
    name = (
        func.attr.value
        if isinstance(func, cst.Attribute)
        else func.value
        if isinstance(func, cst.Name)
        else ""
    )
    return name in _STATISTIC_NAMES


def _square_of(ctx: FileContext, node: cst.BaseExpression) -> tuple[str, cst.BaseExpression] | None:
    """(kind, x) for `x.pow(2)`, `torch.pow(x, 2)`, `x ** 2`, `x.square()`, `torch.square(x)`, `x * x`."""
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Power) and _is_two(node.right):
            return "pow", node.left
        if isinstance(node.operator, cst.Multiply) and node.left.deep_equals(node.right):
            return "mul", node.left
        return None
    if not isinstance(node, cst.Call):
        return None
    receiver = method_call(ctx, node, frozenset({"pow", "square"}))
    if receiver is not None:
        assert isinstance(node.func, cst.Attribute)
        if node.func.attr.value == "square" or _is_two(argument(node, 0, "exponent")):
            return "pow", receiver
        return None
    qualified = ctx.qualified(node.func)
    if qualified == "torch.square":
        data = argument(node, 0, "input")
        return ("pow", data) if data is not None else None
    if qualified == "torch.pow" and _is_two(argument(node, 1, "exponent")):
        data = argument(node, 0, "input")
        return ("pow", data) if data is not None else None
    return None


def _is_two(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and node.value in {"2", "2.0", "2."}


def _statistic(ctx: FileContext, call: cst.Call, flow: Flow | None) -> Statistic | None:
    """The statistic a call computes: a mean of squares, or a variance or standard deviation."""
    if not _reduces_some_dims(ctx, call):
        return None
    receiver = method_call(ctx, call, frozenset({"mean"}))
    if receiver is None and function_call(ctx, call, _MEAN_FUNCTIONS):
        receiver = argument(call, 0, "input")
    if receiver is not None:
        squared = flow.resolve(receiver) if flow is not None else receiver
        square = _square_of(ctx, squared)
        return Statistic(call, square[0], square[1], squared) if square is not None else None
    receiver = method_call(ctx, call, _VAR_METHODS)
    if receiver is not None:
        assert isinstance(call.func, cst.Attribute)
        return Statistic(call, call.func.attr.value, receiver)
    qualified = ctx.qualified(call.func)
    if qualified in _VAR_FUNCTIONS:
        data = argument(call, 0, "input")
        return Statistic(call, _VAR_FUNCTIONS[qualified], data) if data is not None else None
    return None


def _cast_to_chosen_dtype(ctx: FileContext, step: cst.CSTNode, flow: Flow) -> bool:
    """`x.to(compute_dtype)` with `compute_dtype = torch.float32 if self.force_fp32 else x.dtype`:
    the precision is a setting the author offers, float32 included."""
    if not (
        isinstance(step, cst.Call) and isinstance(step.func, cst.Attribute) and step.func.attr.value == "to"
    ):
        return False
    for arg in step.args:
        value = flow.resolve(arg.value)
        if isinstance(value, cst.IfExp) and (
            is_fp32_dtype(ctx, value.body) or is_fp32_dtype(ctx, value.orelse)
        ):
            return True
    return False


def _hook_parameter(ctx: FileContext, function: cst.FunctionDef, root: cst.CSTNode) -> bool:
    """`root` is a parameter of a private method that this module never calls: an override of a
    helper that the base class, in another module, calls (a modular file's `_norm(self, x)` that
    the inherited `forward` calls as `self._norm(x.float())`). Its callers are out of sight."""
    params = [*function.params.posonly_params, *function.params.params]
    return (
        isinstance(root, cst.Name)
        and function.name.value.startswith("_")
        and not function.name.value.startswith("__")
        and bool(params)
        and params[0].name.value == "self"
        and any(param.name.value == root.value for param in params[1:])
        and not called_in_module(ctx, function)
    )


def _reduces_some_dims(ctx: FileContext, call: cst.Call) -> bool:
    """A normalisation layer reduces over each row's features (`dim=-1`, `1`, `(2, 3)`). A statistic
    of the whole tensor, or over dim 0 (the batch or the time axis), standardises data instead:
    audio in a feature extractor, a loss, an initialisation."""
    position = 0 if isinstance(call.func, cst.Attribute) and ctx.qualified(call.func) is None else 1
    dim = argument(call, position, "dim") or argument(call, None, "axis")
    if dim is None or (isinstance(dim, cst.Name) and dim.value in {"None", "True", "False"}):
        return False
    return not (isinstance(dim, cst.Integer) and dim.value == "0")


def _numpy(ctx: FileContext, node: cst.CSTNode) -> bool:
    """Whether an expression calls numpy (`np.sqrt(x.var() + eps)`): numpy arrays, not tensors."""
    return any(
        isinstance(inner, cst.Call) and (ctx.qualified(inner.func) or "").startswith("numpy.")
        for inner in walk(node)
    )


def _low_precision(ctx: FileContext, stat: Statistic, flow: Flow, function: cst.FunctionDef | None) -> bool:
    if holds_float32(ctx, stat.data, flow, function):
        return False
    steps = list(lineage(ctx, stat.data, flow))
    if any(
        isinstance(step, cst.Call) and (ctx.qualified(step.func) or "").startswith("numpy.") for step in steps
    ):
        return False
    if function is not None and _hook_parameter(ctx, function, steps[-1]):
        return False
    if any(_cast_to_chosen_dtype(ctx, step, flow) for step in steps):
        return False
    # CUDA autocast runs `pow` in float32 (`square` is `pow`); `*` and `var` it leaves alone.
    return not (stat.kind == "pow" and under_cuda_autocast(ctx, stat.call))


def _normalises(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> str | None:
    """Whether a value reaching `node` normalises something: a (reciprocal) root, a power of one
    half, or the denominator of a division."""
    if function_call(ctx, node, _ROOT_FUNCTIONS) or method_call(ctx, node, _ROOT_METHODS) is not None:
        return "root"
    if isinstance(node, cst.BinaryOperation):
        if isinstance(node.operator, cst.Power) and ctx.code(node.right).replace(" ", "") in _HALF_POWERS:
            return "root"
        if isinstance(node.operator, cst.Divide) and flow.taint(node.right) and not _numpy(ctx, node.right):
            return "division"
    if method_call(ctx, node, frozenset({"pow"})) is not None:
        exponent = argument(node, 0, "exponent")  # type: ignore[arg-type]
        if exponent is not None and ctx.code(exponent).replace(" ", "") in _HALF_POWERS:
            return "root"
    return None


_OVERFLOW = "squares above 256 overflow float16 to inf, and bfloat16 rounds the statistic to 8 mantissa bits"


def _message(stat: Statistic) -> str:
    if stat.kind == "pow":
        return (
            "the mean of squares that normalises this tensor is computed in its own dtype: CUDA autocast "
            "would run `pow` in float32, but a model run in float16/bfloat16 without autocast (most "
            f"inference) squares and averages in half precision, where {_OVERFLOW}"
        )
    if stat.kind == "mul":
        return (
            "the mean of `x * x` that normalises this tensor is computed in its own dtype, and not even "
            f"CUDA autocast upcasts `*` or `mean`: in float16/bfloat16 {_OVERFLOW}"
        )
    return (
        f"`{stat.kind}` of a float16/bfloat16 input returns a float16/bfloat16 statistic (autocast does "
        "not upcast it): it is rounded to 8 mantissa bits in bfloat16, and overflows float16 once the "
        "standard deviation passes 256"
    )


_HELP = (
    "upcast the input, normalise in float32 and cast back: `input_dtype = x.dtype; x = x.to(torch.float32); "
    "variance = x.pow(2).mean(-1, keepdim=True); x = x * torch.rsqrt(variance + eps); "
    "return weight * x.to(input_dtype)`"
)


def _finding(ctx: FileContext, scope: Scope, stat: Statistic, hits: list[Hit]) -> Finding:
    message = _message(stat)
    roots = [hit.sink for hit in hits if _is_root_call(ctx, hit.sink)]
    reference = _dtype_reference(stat.data)
    inside = {id(node) for node in walk(stat.call)}
    if len(hits) != 1 or len(roots) != 1 or reference is None or id(stat.data) not in inside:
        # Several uses, no root to cast back, or a square computed on another line: no mechanical edit.
        return Finding(stat.call, message, help=_HELP)
    root = roots[0]
    assert isinstance(root, cst.Call)
    float32, missing_import = ctx.float32()
    upcast = with_method(stat.data, "to", float32)
    if stat.kind == "mul" and isinstance(stat.square, cst.BinaryOperation):
        new_square = stat.square.with_changes(left=upcast, right=upcast)
        new_stat = cst.ensure_type(stat.call.deep_replace(stat.square, new_square), cst.Call)
    else:
        new_stat = cst.ensure_type(stat.call.deep_replace(stat.data, upcast), cst.Call)
    cast_back = cst.Attribute(value=reference, attr=cst.Name("dtype"))
    if any(node is stat.call for node in walk(root)):
        new_root = with_method(
            cst.ensure_type(root.deep_replace(stat.call, new_stat), cst.Call), "to", cast_back
        )
        replacements: tuple[tuple[cst.CSTNode, cst.CSTNode], ...] = ((root, new_root),)
    elif _only_feeds(scope, stat.call, root):
        replacements = ((stat.call, new_stat), (root, with_method(root, "to", cast_back)))
    else:
        return Finding(stat.call, message, help=_HELP)
    fix = FixPlan(
        "Compute the normalisation statistic in float32 and cast its root back", replacements, missing_import
    )
    shown = " and ".join(f"`{' '.join(ctx.code(new).split())}`" for _, new in replacements)
    return Finding(
        stat.call, message, fix=fix, help=f"compute the statistic in float32, cast its root back: {shown}"
    )


def _is_root_call(ctx: FileContext, node: cst.CSTNode) -> bool:
    return function_call(ctx, node, _ROOT_FUNCTIONS) or method_call(ctx, node, _ROOT_METHODS) is not None


def _dtype_reference(data: cst.BaseExpression) -> cst.BaseExpression | None:
    """A tensor with the statistic input's dtype: the input, or the tensor in `x - mean`."""
    if isinstance(data, cst.BinaryOperation):
        data = data.left
    if isinstance(data, (cst.Name, cst.Attribute)):
        return data.with_changes(lpar=[], rpar=[])
    return None


def _only_feeds(scope: Scope, stat: cst.Call, root: cst.Call) -> bool:
    """The statistic is bound to a name (`variance = x.pow(2).mean(...)`, perhaps plus an epsilon)
    that is read once in the function, inside `root`: then casting the root back keeps every dtype
    downstream as it was."""
    for statement in scope.body:
        for node in walk(statement):
            if (
                isinstance(node, cst.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0].target, cst.Name)
                and any(inner is stat for inner in walk(node.value))
            ):
                name = node.targets[0].target.value
                reads = [n for n in walk(scope.node) if isinstance(n, cst.Name) and n.value == name]
                in_root = [n for n in walk(root) if isinstance(n, cst.Name) and n.value == name]
                return len(reads) == 2 and len(in_root) == 1 and _no_arithmetic_inside(node.value, stat)
    return False


def _no_arithmetic_inside(value: cst.BaseExpression, stat: cst.Call) -> bool:
    """`value` is the statistic, or the statistic plus or minus something (an epsilon)."""
    while value is not stat:
        if isinstance(value, cst.BinaryOperation) and isinstance(value.operator, (cst.Add, cst.Subtract)):
            value = value.left if any(n is stat for n in walk(value.left)) else value.right
        else:
            return False
    return True
