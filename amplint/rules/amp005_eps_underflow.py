"""AMP005: stabilising constants that float16 cannot hold (cases 3 and 4)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import libcst as cst

from amplint.rule import Bad, Good, Rule, Verdict
from amplint.rules.amp004_mask_constant_overflow import dtype_cast, module_constants, numeric_value
from amplint.runtime.chains import half_precision_verdict
from amplint.static.context import FileContext, Finding
from amplint.static.flow import Flow, Policy, analyse
from amplint.static.patterns import argument, is_fp32_dtype, is_matmul, lineage, method_call
from amplint.static.precision import (
    autocast_region_of,
    holds_float32,
    may_run_in_half,
    under_cuda_autocast,
)
from amplint.static.scopes import Scope, scopes_holding, suite_body, walk

# Positive values at or below 2**-25 round to zero in float16 (its smallest subnormal is 2**-24,
# about 5.96e-8; its smallest normal number is 2**-14, about 6.1e-5).
FP16_FLUSH = 2.0**-25
_FINFO_SMALL = {
    ("torch.float32", "tiny"): 1.1754943508222875e-38,
    ("torch.float", "tiny"): 1.1754943508222875e-38,
    ("torch.float64", "tiny"): 2.2250738585072014e-308,
    ("torch.float64", "eps"): 2.220446049250313e-16,
    ("torch.double", "eps"): 2.220446049250313e-16,
    ("torch.double", "tiny"): 2.2250738585072014e-308,
    ("numpy.float32", "tiny"): 1.1754943508222875e-38,
    ("numpy.float64", "eps"): 2.220446049250313e-16,
    ("numpy.float64", "tiny"): 2.2250738585072014e-308,
    ("float", "eps"): 2.220446049250313e-16,
    ("float", "tiny"): 2.2250738585072014e-308,
}
_CLAMP_METHODS = frozenset({"clamp", "clamp_", "clip", "clip_", "clamp_min", "clamp_min_"})
_CLAMP_FUNCTIONS = frozenset({"torch.clamp", "torch.clip", "torch.clamp_min"})
# Functions that apply `eps` in their input's dtype, with the position of `eps` among the positional
# arguments; `normalize` and `cosine_similarity` run in float32 under CUDA autocast.
_EPS_FUNCTIONS = {
    "torch.nn.functional.normalize": 3,
    "torch.nn.functional.cosine_similarity": 3,
    "torch.cosine_similarity": 3,
    "torch.logit": 1,
    "torch.special.logit": 1,
}
_CANDIDATE_NAMES = _CLAMP_METHODS | frozenset(name.rsplit(".", 1)[-1] for name in _EPS_FUNCTIONS)
_AUTOCAST_FP32_EPS_FUNCTIONS = frozenset(
    {"torch.nn.functional.normalize", "torch.nn.functional.cosine_similarity", "torch.cosine_similarity"}
)
# Ops that CUDA autocast runs in float32: a value they produce is float32 under autocast.
_AUTOCAST_FP32_OPS = frozenset(
    {
        "exp",
        "log",
        "log1p",
        "log2",
        "log10",
        "pow",
        "rsqrt",
        "reciprocal",
        "sum",
        "prod",
        "cumsum",
        "cumprod",
        "norm",
        "softmax",
        "log_softmax",
        "layer_norm",
        "group_norm",
        "cdist",
        "dist",
    }
)
# Constructors that make float32 tensors unless told otherwise (the default dtype).
_DEFAULT_DTYPE_CONSTRUCTORS = frozenset(
    {
        "torch.tensor",
        "torch.as_tensor",
        "torch.arange",
        "torch.linspace",
        "torch.logspace",
        "torch.rand",
        "torch.randn",
        "torch.zeros",
        "torch.ones",
        "torch.empty",
        "torch.full",
        "torch.eye",
        "torch.stft",
    }
)
# Ops whose outputs are often zero, or underflow below 6e-8, in float16.
_UNDERFLOWING = frozenset(
    {
        "softmax",
        "sigmoid",
        "relu",
        "relu_",
        "uniform_",
        "rand",
        "rand_like",
        "bernoulli",
        "expit",
    }
)
_ZERO_NAME = re.compile(r"(mask|count|present|valid|^probs?$|_probs?$|^probs?_|probabilit)", re.IGNORECASE)
_MASK_NAME = re.compile(r"mask", re.IGNORECASE)
# Routing weights picked by top-k: their sum is at least the largest of them, never zero.
_TOP_K = re.compile(r"top_?k", re.IGNORECASE)
# Base classes that make a class a torch module (whose parameters and buffers `.half()` converts).
_MODULE_BASE = re.compile(r"(Module|Model|Mixin.*Model|Layer|Sequential|ModuleList|^nn\.)")
# Words that say float16 (not bfloat16, whose range is float32's) can be in play.
_FLOAT16_WORDS = frozenset(
    {"float16", "half", "fp16", "autocast", "GradScaler", "amp", "torch_dtype", "mixed_precision"}
)
_HELP = (
    "add the guard in float32 (`x.float() + 1e-12`, or upcast before the reduction), or use a value "
    "float16 can hold: at least 6.1e-5 to stay a normal number (1e-6 and 1e-7 survive as subnormals)"
)


@dataclass(frozen=True)
class _Site:
    node: cst.CSTNode
    kind: str  # "add", "clamp", "eps"
    value: cst.BaseExpression
    number: float
    tensor: cst.BaseExpression
    function: str = ""


if TYPE_CHECKING:
    from amplint.diagnostics import Diagnostic
    from amplint.runtime.graph import DtypeGraph, DtypeNode


class EpsUnderflow(Rule):
    """
    ## What it does
    Flags stabilising constants too small for float16 (at or below 2**-25, about 3e-8: `1e-8`,
    `1e-12`, `1e-20`, `torch.finfo(torch.float32).tiny`) in a module that can run in half precision,
    where they guard a value that is often zero, or below float16's smallest value, in practice: a
    probability or sigmoid output, a random sample, a ReLU output, a value zeroed by a mask, or a mask
    count. The guard is an epsilon added to a denominator or a `log` argument (`x / (n + 1e-12)`), a
    clamp floor (`clamp(min=1e-20)`, `clamp_min(1e-9)`), or the `eps=` of `F.normalize`,
    `F.cosine_similarity` and `torch.logit`; the tensor it guards must not be float32.

    ## Why is this bad?
    float16's smallest positive value is 2**-24 (about 5.96e-8); anything at or below half of it
    rounds to zero. `1e-8`, `1e-10`, `1e-12` and `1e-20` therefore vanish in float16: `n + 1e-12`
    is `n`, `clamp(min=1e-12)` clamps to 0, and the division, `log` or normalisation they guard
    returns inf or NaN for exactly the input they were written for: an all-padding row, an empty
    mask, a probability that underflowed, a uniform sample that rounded to 0 or 1. Not flagged:
    bfloat16 (it has float32's range and keeps these values); `nn.LayerNorm(eps=1e-12)`,
    `F.layer_norm`, `F.group_norm` and `F.batch_norm`, which apply `eps` inside kernels that
    accumulate in float32; guards on values that are float32 (upcast, built by `torch.tensor`/
    `torch.rand`, or NumPy); guards on the output of `sum`, `pow`, `norm`, `exp`, `log` or `softmax`
    under CUDA autocast, which run in float32 there; sums of top-k router weights, which are never
    zero; a non-module object's own state (a scheduler's `alphas_cumprod`); and norms, standard
    deviations and learned scales, which are zero only for degenerate inputs.

    ## Example
    ```python
    mask = attention_mask.unsqueeze(-1).to(hidden_states.dtype)
    pooled = (hidden_states * mask).sum(1) / mask.sum(1).clamp_min(1e-9)
    ```

    ## Fix
    Compute the guarded value in float32, or use an epsilon float16 can hold:
    ```python
    mask = attention_mask.unsqueeze(-1).float()
    pooled = ((hidden_states * mask).sum(1) / mask.sum(1).clamp_min(1e-9)).to(hidden_states.dtype)
    ```

    ## References
    - `torch.finfo(torch.float16)`: `tiny` 6.1e-5, `smallest_normal` 6.1e-5; subnormals down to 5.96e-8
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    """

    code = "AMP005"
    name = "eps-underflow"
    summary = (
        "eps/clamp floor below float16's smallest value (1e-8, 1e-12, 1e-20) guarding a half-precision tensor"
    )
    # The rule needs a module that says float16 can be in play (see `check`).
    triggers = _FLOAT16_WORDS
    # A tiny constant: a negative exponent, many zeros, `finfo(...).tiny`/`.eps`, an `eps` name.
    region_words = frozenset({"finfo", "tiny", "eps", "epsilon"})
    region_pattern = re.compile(r"\d\.?[eE]-\d|\.0{5}")

    bad = (
        Bad(
            """\
def pool(hidden_states, attention_mask):  # the model runs in float16
    expanded_mask = attention_mask.unsqueeze(-1).expand(hidden_states.shape).to(hidden_states.dtype)
    return (hidden_states * expanded_mask).sum(1) / expanded_mask.sum(1).clamp_min(1e-9)
"""
        ),
        Bad(
            """\
import torch
import torch.nn.functional as F


class LinearAttention(torch.nn.Module):
    def forward(self, query, key, value):  # float16 activations
        query, key = F.relu(query), F.relu(key)
        kv = torch.matmul(key.transpose(-2, -1), value)
        z = 1 / (key.sum(dim=-2, keepdim=True) @ query.transpose(-2, -1) + 1e-15)
        return torch.matmul(query, kv) * z.transpose(-2, -1)
"""
        ),
        Bad(
            """\
import torch


def gumbel_noise(logits, generator=None):  # logits in float16
    noise = torch.zeros_like(logits).uniform_(0, 1, generator=generator)
    return -torch.log((-torch.log(noise.clamp(1e-20))).clamp(1e-20))
"""
        ),
        Bad(
            """\
import torch


def mask_by_confidence(probs, temperature, gumbel):  # probs: float16 softmax output
    return torch.log(probs.clamp(1e-20)) + temperature * gumbel
"""
        ),
        Bad(
            """\
import torch


def unit_directions(noisy, present):  # float16 under .half()
    noisy = torch.where(present[..., None], noisy, 0.0)
    return noisy / torch.linalg.vector_norm(noisy, dim=-1, keepdim=True).clamp_min(1e-8)
"""
        ),
        Bad(
            """\
import torch.nn.functional as F


def embed(hidden, attention_mask):
    hidden = hidden.half() * attention_mask[..., None]
    return F.normalize(hidden, dim=-1, eps=1e-12)
"""
        ),
        Bad(
            """\
def masked_mean(x, mask, eps=1e-12):  # x and mask in float16
    return (x * mask).sum(-1) / (mask.sum(-1) + eps)
"""
        ),
    )
    good = (
        Good(
            """\
def normalize_layers(hidden_states):  # text-encoder states in float16
    h = hidden_states
    return (h - h.mean(dim=-1, keepdim=True)) / (h.std(dim=-1, keepdim=True) + 1e-8)
""",
            "a standard deviation or norm of activations is zero only for a constant vector: the "
            "guard is a precaution (Cosmos prompt normalisation, CFG renormalisation, camera rays, "
            "Vocos' window envelope)",
        ),
        Good(
            """\
import torch


class SnakeBeta(torch.nn.Module):  # float16 vocoder
    def forward(self, hidden_states):
        alpha = torch.exp(self.alpha.unsqueeze(0).unsqueeze(-1))
        beta = torch.exp(self.beta.unsqueeze(0).unsqueeze(-1))
        return hidden_states + (beta + 1e-9).reciprocal() * torch.sin(alpha * hidden_states).pow(2)
""",
            "a learned magnitude (kept in log space, or initialised at 1): zero only if training "
            "drives it there (Snake activations in DAC, BigVGAN and other audio codecs)",
        ),
        Good(
            """\
import torch
from torch import nn


class Embeddings(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=1e-12)  # model may run in float16
""",
            "layer/group/batch norm apply eps in a float32 accumulator (BERT's LayerNorm, eps=1e-12)",
        ),
        Good(
            """\
import torch


def rms_norm(hidden_states, weight, eps=1e-12):
    input_dtype = hidden_states.dtype  # float16 or bfloat16
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)
""",
            "the guard is added in float32 (transformers' RMSNorm)",
        ),
        Good(
            """\
import torch


def route(router_logits, top_k):
    scores = router_logits.sigmoid()  # float16 under .half()
    topk_weights, topk_idx = torch.topk(scores, k=top_k, dim=-1)
    denominator = topk_weights.sum(dim=-1, keepdim=True) + 1e-20
    return topk_weights / denominator, topk_idx
""",
            "a sum of top-k router weights is at least the largest of them, never zero (DeepSeek-V3 "
            "and the MoE routers that copy it)",
        ),
        Good(
            """\
import torch
import torch.nn.functional as F


def route(self, hidden_states):
    scores = self.score_fn(F.linear(hidden_states, self.weight))  # float16 under .half()
    indices = self.tid2eid[self.input_ids]
    weights = scores.gather(1, indices)
    weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return weights
""",
            "router weights gathered by expert index, divided by their sum (DeepSeek-V4 hash routing)",
        ),
        Good(
            """\
import torch


class DDPMScheduler(SchedulerMixin, ConfigMixin):
    def _get_variance(self, t, predicted_variance=None):  # used in float16 pipelines
        alpha_prod_t = self.alphas_cumprod[t]
        alpha_prod_t_prev = self.alphas_cumprod[t - 1] if t > 0 else self.one
        variance = (1 - alpha_prod_t_prev) / (1 - alpha_prod_t) * (1 - alpha_prod_t / alpha_prod_t_prev)
        return torch.log(torch.clamp(variance, min=1e-20))
""",
            "a scheduler's own float32 state: `.half()` on a pipeline's models does not reach it "
            "(diffusers' DDPM, UnCLIP schedulers)",
        ),
        Good(
            """\
import torch


def gumbel_noise(t, generator=None, dtype=torch.float16):
    noise = torch.rand(t.shape, generator=generator).to(t.device)
    return -torch.log((-torch.log(noise.clamp(1e-20))).clamp(1e-20))
""",
            "`torch.rand` makes float32; `.to(device)` is not a cast",
        ),
        Good(
            """\
import torch


def init_weights(module, dtype=torch.float16):
    param = torch.empty_like(module.recurrent_param).uniform_(0.9**2 + 1e-8, 0.999**2 + 1e-8)
    module.recurrent_param.copy_(param)
""",
            "arithmetic on Python numbers (recurrent_gemma's initialiser)",
        ),
        Good(
            """\
import torch


def train_step(model, x):
    with torch.autocast("cuda", dtype=torch.float16):
        h = model(x)
        n = h.pow(2).sum(dim=-1, keepdim=True) + 1e-12
        return h / n
""",
            "`pow` and `sum` run in float32 under CUDA autocast, so the guard is added in float32",
        ),
        Good(
            """\
import torch


def train_step(model, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h = model(x)
        return h / (h.abs().amax(dim=-1, keepdim=True) + 1e-12)
""",
            "bfloat16 has float32's range: 1e-12 is representable",
        ),
        Good(
            """\
import numpy as np
import torch


def log_sigmas(sigma, mel_spec, dtype=torch.float16):
    log_sigma = np.log(np.maximum(sigma, 1e-10))
    spec = torch.stft(mel_spec, n_fft=400, return_complex=True).abs() ** 2
    return log_sigma, torch.clamp(spec, min=1e-10).log10()
""",
            "numpy scalars and `torch.stft` output are float64/float32 (scheduler and feature-"
            "extraction code)",
        ),
        Good(
            """\
import torch


def standardize(values, mean, std, dtype=torch.float16):
    return (values - torch.tensor(mean)) / (torch.tensor(std) + 1e-08)
""",
            "`torch.tensor(...)` of Python floats is float32",
        ),
        Good(
            """\
import torch


def pool(token_embeddings, attention_mask, dtype=torch.float16):
    mask = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
    return (token_embeddings * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
""",
            "a float32 mask count (sentence-transformers mean pooling)",
        ),
    )

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        return half_precision_verdict(graph, nodes, "the guarded value is computed in half precision")

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if not may_run_in_half(ctx) or not ctx.words & _FLOAT16_WORDS:
            return
        tiny_parameters = _tiny_parameters(ctx)
        candidates = [node for node in _candidates(ctx) if _quick(ctx, node, tiny_parameters)]
        if not candidates:
            return
        nodes = set(candidates)
        for scope in scopes_holding(ctx, candidates):
            yield from _check_scope(ctx, scope, nodes)


# -- constants -------------------------------------------------------------------------------


def tiny_value(
    ctx: FileContext,
    node: cst.BaseExpression | None,
    flow: Flow | None = None,
    defaults: dict[str, float] | None = None,
) -> float | None:
    """The value of a positive constant that rounds to zero in float16, or None. `defaults`: the
    literal defaults of the enclosing function's parameters (used while a name is not rebound)."""
    if node is None:
        return None
    number = numeric_value(ctx, node, flow)
    if number is None and isinstance(node, cst.Attribute):
        number = _finfo_small(ctx, node)
    if number is None and isinstance(node, cst.Name) and defaults and flow is not None:
        number = None if flow.history.get(node.value) else defaults.get(node.value)
    if number is not None and 0.0 < number <= FP16_FLUSH:
        return number
    return None


def _finfo_small(ctx: FileContext, node: cst.Attribute) -> float | None:
    """`torch.finfo(torch.float32).tiny`, `np.finfo(float).eps`, `sys.float_info.epsilon`."""
    attr = node.attr.value
    if ctx.qualified(node) in {"sys.float_info.epsilon", "sys.float_info.min"}:
        return 2.220446049250313e-16 if attr == "epsilon" else 2.2250738585072014e-308
    if isinstance(node.value, cst.Call) and ctx.qualified(node.value.func) in {"torch.finfo", "numpy.finfo"}:
        finfo = node.value
        if finfo.args:
            dtype = finfo.args[0].value
            name = "float" if isinstance(dtype, cst.Name) and dtype.value == "float" else ctx.qualified(dtype)
            return _FINFO_SMALL.get((name or "", attr))
    return None


def _parameter_defaults(ctx: FileContext, function: cst.FunctionDef) -> dict[str, float]:
    params = function.params
    defaults: dict[str, float] = {}
    for param in (*params.posonly_params, *params.params, *params.kwonly_params):
        if param.default is not None:
            number = numeric_value(ctx, param.default)
            if number is not None:
                defaults[param.name.value] = number
    return defaults


def _tiny_parameters(ctx: FileContext) -> frozenset[str]:
    """Names of parameters, anywhere in the module, whose default rounds to zero in float16, and
    module-level constants that do."""
    names = {
        name
        for name, value in module_constants(ctx).items()
        if (number := numeric_value(ctx, value)) is not None and 0.0 < number <= FP16_FLUSH
    }
    for scope in ctx.scopes:
        if isinstance(scope.node, cst.FunctionDef):
            names.update(
                name
                for name, number in _parameter_defaults(ctx, scope.node).items()
                if 0.0 < number <= FP16_FLUSH
            )
    return frozenset(names)


# -- sites -----------------------------------------------------------------------------------


def _candidates(ctx: FileContext) -> Iterator[cst.CSTNode]:
    for node in ctx.index.top_of:
        if isinstance(node, cst.BinaryOperation):
            if isinstance(node.operator, cst.Add):
                yield node
        elif isinstance(node, cst.Call):
            func = node.func
            name = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
            if name in _CANDIDATE_NAMES and (
                name in _CLAMP_METHODS
                or ctx.qualified(func) in _EPS_FUNCTIONS
                or ctx.qualified(func) in _CLAMP_FUNCTIONS
            ):
                yield node


def _guard_values(ctx: FileContext, node: cst.CSTNode) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation):
        return [node.left, node.right]
    assert isinstance(node, cst.Call)
    qualified = ctx.qualified(node.func)
    if qualified in _EPS_FUNCTIONS:
        eps = argument(node, _EPS_FUNCTIONS[qualified], "eps")
        return [eps] if eps is not None else []
    low = argument(node, 1 if qualified in _CLAMP_FUNCTIONS else 0, "min")
    return [low] if low is not None else []


def _quick(ctx: FileContext, node: cst.CSTNode, tiny_names: frozenset[str]) -> bool:
    for value in _guard_values(ctx, node):
        if isinstance(value, cst.Name) and value.value in tiny_names:
            return True
        if tiny_value(ctx, value) is not None:
            return True
    return False


def _site(ctx: FileContext, node: cst.CSTNode, flow: Flow, defaults: dict[str, float]) -> _Site | None:
    tensor: cst.BaseExpression | None
    if isinstance(node, cst.BinaryOperation):
        for value, tensor in ((node.right, node.left), (node.left, node.right)):
            number = tiny_value(ctx, value, flow, defaults)
            if number is not None and not _constant_expression(ctx, tensor, flow):
                return _Site(node, "add", value, number, tensor)
        return None
    assert isinstance(node, cst.Call)
    qualified = ctx.qualified(node.func)
    values = _guard_values(ctx, node)
    number = tiny_value(ctx, values[0], flow, defaults) if values else None
    if number is None:
        return None
    if qualified in _EPS_FUNCTIONS:
        tensor = argument(node, 0, "input") or argument(node, 0, "x1")
        kind = "eps"
    elif qualified in _CLAMP_FUNCTIONS:
        tensor = argument(node, 0, "input")
        kind = "clamp"
    else:
        tensor = method_call(ctx, node, _CLAMP_METHODS)
        kind = "clamp"
    if tensor is None or numeric_value(ctx, tensor, flow) is not None:
        return None
    return _Site(node, kind, values[0], number, tensor, qualified or "")


# -- judging ---------------------------------------------------------------------------------


def _check_scope(ctx: FileContext, scope: Scope, nodes: set[cst.CSTNode]) -> Iterator[Finding]:
    function = scope.node if isinstance(scope.node, cst.FunctionDef) else None
    defaults = _parameter_defaults(ctx, function) if function is not None else {}
    stateful = function is not None and _plain_object_method(ctx, function)
    found: dict[cst.CSTNode, _Site] = {}
    numerators: dict[cst.CSTNode, cst.BaseExpression] = {}

    def seed(node: cst.BaseExpression, flow: Flow) -> bool:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Divide):
            numerators[node.right] = node.left
        if node in nodes and node not in found:
            site = _site(ctx, node, flow, defaults)
            if site is None or _safe(ctx, site, flow, function):
                return False
            numerator = numerators.get(node)
            if numerator is not None and _top_k_sum(ctx, numerator, flow):
                return False  # routing weights divided by their (never zero) sum
            if stateful and _state_only(ctx, site.tensor, flow):
                return False
            found[node] = site
        return False

    analyse(scope, Policy(seed=seed))
    for site in found.values():
        yield _finding(ctx, site)


def _plain_object_method(ctx: FileContext, function: cst.FunctionDef) -> bool:
    """A method of a class that is not a torch module (a scheduler, a processor): `.half()` does not
    reach its attributes."""
    bases = _class_bases(ctx).get(function)
    return bases is not None and not any(_MODULE_BASE.search(base) for base in bases)


def _class_bases(ctx: FileContext) -> dict[cst.FunctionDef, list[str]]:
    """The base class names of the class each method of a top-level class belongs to."""
    cached = ctx.memo.get("amp005_class_bases")
    if cached is None:
        table: dict[cst.FunctionDef, list[str]] = {}
        for statement in ctx.module.body:
            if isinstance(statement, cst.ClassDef):
                bases = [ctx.code(arg.value) for arg in statement.bases]
                for member in suite_body(statement.body):
                    if isinstance(member, cst.FunctionDef):
                        table[member] = bases
        ctx.memo["amp005_class_bases"] = cached = table
    return cached  # type: ignore[return-value]


def _state_only(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """The value derives from the object's own attributes and constants only (`self.alphas_cumprod[t]`),
    not from a parameter."""
    roots = 0
    for step in _steps(ctx, node, flow):
        if (
            isinstance(step, cst.Call)
            and isinstance(step.func, cst.Attribute)
            and isinstance(step.func.value, cst.Name)
            and step.func.value.value == "self"
        ):
            return False  # what a model or method of the object returns
        if isinstance(step, cst.Name):
            if step.value == "self":
                roots += 1
            elif step.value not in flow.history:
                return False  # a parameter, or a name from elsewhere
    return roots > 0


def _safe(ctx: FileContext, site: _Site, flow: Flow, function: cst.FunctionDef | None) -> bool:
    """Whether the guarded tensor is float32 (or bfloat16), or the guard cannot matter."""
    tensor = site.tensor
    if _python_or_numpy(ctx, tensor, flow):
        return True
    if holds_float32(ctx, tensor, flow, function) or _default_dtype(ctx, tensor, flow):
        return True
    region = autocast_region_of(ctx, site.node)
    if region is not None and region.enabled:
        if region.dtype == "bfloat16":
            return True
        if under_cuda_autocast(ctx, site.node):
            if site.kind == "eps" and site.function in _AUTOCAST_FP32_EPS_FUNCTIONS:
                return True
            if _autocast_fp32(ctx, tensor, flow):
                return True
    return _top_k_sum(ctx, tensor, flow) or not _can_be_zero(ctx, tensor, flow)


def _can_be_zero(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """Whether the guarded value is one that is often zero, or below 6e-8, in float16: a
    probability, an exponential or a random sample (small ones flush to zero), a ReLU output, a
    value zeroed by a mask (`where(m, x, 0.0)`, `masked_fill(m, 0)`, `x * mask`), or a mask count.
    A norm, standard deviation or variance of activations is zero only for an all-zero input, and
    the guard there is a precaution that float16 does not make worse in practice."""
    for step in _steps(ctx, node, flow):
        if isinstance(step, cst.Name) and _ZERO_NAME.search(step.value):
            return True
        if isinstance(step, cst.Attribute) and _ZERO_NAME.search(step.attr.value):
            return True
        if isinstance(step, cst.BinaryOperation) and isinstance(step.operator, cst.Multiply):
            for side in (step.left, step.right):
                if any(isinstance(n, cst.Name) and _MASK_NAME.search(n.value) for n in walk(side)):
                    return True
        if not isinstance(step, cst.Call):
            continue
        func = step.func
        qualified = ctx.qualified(func)
        name = (
            qualified.rsplit(".", 1)[-1]
            if qualified
            else (func.attr.value if isinstance(func, cst.Attribute) else "")
        )
        if name in _UNDERFLOWING:
            return True
        if name in {"where", "masked_fill", "masked_fill_"} and any(
            numeric_value(ctx, arg.value, flow) == 0.0 for arg in step.args
        ):
            return True
    return False


def _steps(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> Iterator[cst.CSTNode]:
    """The lineage of a value, and of the names and calls inside a compound expression."""
    stack: list[cst.CSTNode] = [node]
    seen = 0
    while stack and seen < 64:
        current = stack.pop()
        for step in lineage(ctx, current, flow):  # type: ignore[arg-type]
            seen += 1
            yield step
            if isinstance(step, cst.BinaryOperation):
                stack.extend((step.left, step.right))
            elif isinstance(step, cst.UnaryOperation):
                stack.append(step.expression)
            elif isinstance(step, cst.Call) and isinstance(step.func, cst.Name):
                stack.extend(arg.value for arg in step.args[1:])


def _constant_expression(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """Arithmetic on numbers only (`0.9**2`, `1 - 1e-3`)."""
    if numeric_value(ctx, node, flow) is not None:
        return True
    if isinstance(node, cst.BinaryOperation):
        return _constant_expression(ctx, node.left, flow) and _constant_expression(ctx, node.right, flow)
    return False


def _python_or_numpy(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """A Python or numpy number: numpy calls, `.item()`, `math.*`, builtins like `max`/`float`."""
    for step in _steps(ctx, node, flow):
        if isinstance(step, cst.Call):
            qualified = ctx.qualified(step.func) or ""
            if qualified.startswith(("numpy.", "math.")):
                return True
            func = step.func
            if isinstance(func, cst.Attribute) and func.attr.value in {"item", "tolist"}:
                return True
            if isinstance(func, cst.Name) and func.value in {
                "float",
                "int",
                "max",
                "min",
                "len",
                "abs",
                "sum",
            }:
                return qualified == ""
    return False


def _default_dtype(ctx: FileContext, node: cst.BaseExpression, flow: Flow, depth: int = 0) -> bool:
    """Made by a constructor in the default dtype (float32), or with `dtype=torch.float32`; through
    arithmetic, either operand being so (type promotion)."""
    for step in lineage(ctx, node, flow):
        if isinstance(step, cst.BinaryOperation):
            return depth < 4 and any(
                _default_dtype(ctx, side, flow, depth + 1) for side in (step.left, step.right)
            )
        if isinstance(step, cst.UnaryOperation):
            return depth < 4 and _default_dtype(ctx, step.expression, flow, depth + 1)
        if not isinstance(step, cst.Call):
            continue
        dtype = argument(step, None, "dtype")
        if dtype is not None:
            return is_fp32_dtype(ctx, dtype)
        qualified = ctx.qualified(step.func) or ""
        if qualified in _DEFAULT_DTYPE_CONSTRUCTORS or qualified.startswith("torch.fft."):
            return True
        if is_matmul(ctx, step) or dtype_cast(ctx, step):
            return False
    return False


def _autocast_fp32(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """Under CUDA autocast, the value comes out of an op autocast runs in float32 (`sum`, `pow`,
    `norm`, `exp`, ...) with no product or cast after it."""
    for step in _steps(ctx, node, flow):
        if isinstance(step, cst.BinaryOperation) and isinstance(step.operator, cst.Power):
            return True
        if not isinstance(step, cst.Call):
            continue
        func = step.func
        name = func.attr.value if isinstance(func, cst.Attribute) else ""
        if name in _AUTOCAST_FP32_OPS:
            return True
        if is_matmul(ctx, step) or (isinstance(step, cst.Call) and dtype_cast(ctx, step)):
            return False
    return False


def _top_k_sum(ctx: FileContext, node: cst.BaseExpression, flow: Flow) -> bool:
    """A sum of weights picked by top-k or gathered by expert index (a router's): at least the
    largest of them, never zero."""
    for step in _steps(ctx, node, flow):
        if isinstance(step, cst.Name) and _TOP_K.search(step.value):
            return True
        if isinstance(step, cst.Call):
            func = step.func
            name = func.attr.value if isinstance(func, cst.Attribute) else ""
            if name in {"topk", "gather"} or ctx.qualified(func) in {"torch.topk", "torch.gather"}:
                return True
    return False


def _finding(ctx: FileContext, site: _Site) -> Finding:
    shown = ctx.code(site.value)
    if shown != repr(site.number) and not shown.replace(".", "").replace("-", "").replace("e", "").isdigit():
        shown = f"{shown}` (= `{site.number:g}"
    if site.kind == "add":
        message = (
            f"`{shown}` added as a guard rounds to zero in float16 (smallest positive value 6e-8), so "
            "it guards nothing there: a zero denominator, variance or probability still gives inf or NaN"
        )
    elif site.kind == "clamp":
        message = (
            f"a clamp floor of `{shown}` rounds to zero in float16 (smallest positive value 6e-8), so the "
            "clamp lets zeros through: the division, log or rsqrt it guards gives inf or NaN"
        )
    else:
        function = site.function.rsplit(".", 1)[-1]
        outcome = "0 and 1 give -inf and inf" if function == "logit" else "an all-zero input gives NaN"
        message = (
            f"`eps={shown}` in `{function}` rounds to zero on float16 input (smallest positive value 6e-8): "
            f"{outcome}"
        )
    return Finding(site.node, message, help=_HELP)
