"""The dtype-facts engine on small programs: each case names an expression by its source text and
line, and the dtypes PyTorch gives it there (established on torch 2.13 under CUDA autocast, see
DESIGN's emulation facts, and by PyTorch's type-promotion rules)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import libcst as cst
import pytest

from amplint.static.context import FileContext
from amplint.static.facts import Fact

CALLER = {"float32", "bfloat16", "float16"}


def facts_on(code: str) -> FileContext:
    text = textwrap.dedent(code)
    return FileContext(Path("model.py"), cst.parse_module(text), text=text)


def fact(code: str, line: int, expression: str) -> Fact:
    ctx = facts_on(code)
    found = dict(ctx.facts.explain_line(line))
    assert expression in found, f"{expression!r} not among {sorted(found)}"
    return found[expression]


RMSNORM = """\
import torch
EPS = 1e-8

class Norm(torch.nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.proj = torch.nn.Linear(d, d)

    def forward(self, x):
        y = self._norm(x.float())
        h = self.proj(x)
        return self.weight * y.type_as(x) + h / (h.norm() + EPS) + self.eps

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
"""

AUTOCAST = """\
import torch
import torch.nn.functional as F

def attend(q, k):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        scores = q @ k.transpose(-1, -2)
        probs = F.softmax(scores, dim=-1)
        gate = torch.sigmoid(scores)
    with torch.autocast("cuda", enabled=False):
        off = torch.exp(q)
    return probs, gate, off
"""

FLOW = """\
import torch

def pipeline(x, cuda):
    dtype = torch.float16 if cuda else torch.float32
    y = x.to(dtype)
    a, b = [t.float() for t in (x, y)]
    c = a * x.half()
    d = torch.zeros(4)
    e = torch.arange(4)
    f = torch.zeros_like(x, dtype=torch.float64)
    g = x.to(f.dtype)
    return helper(a), y, c, d, e, g

def helper(z):
    w = z.sigmoid()
    return w
"""

# fla-core 0.6.0, fla/ops/titans/naive.py:216-266 (shortened): the reference casts its inputs to
# float32 and keeps a float32 state, so the product that the statistic is taken of is float32.
AGREE = """\
import torch

def reference(q, k, state: torch.Tensor = None):
    q, k = map(lambda t: t.to(torch.float32), [q, k])
    if state is None:
        state = torch.zeros(4, 4).to(torch.float32)
    q_i, k_i, gate_i = [x[0] for x in [q, k, gate_of(q)]]
    km = k_i @ state
    return km, gate_i

def gate_of(x):
    return x.half()
"""


@pytest.mark.parametrize(
    ("code", "line", "expression", "dtypes"),
    [
        # An upcast at a helper's call site reaches its parameter; the result returns float32.
        (RMSNORM, 12, "y", {"float32"}),
        (RMSNORM, 17, "x.pow(2).mean(-1, keepdim=True)", {"float32"}),
        # `type_as` takes the caller's dtype back.
        (RMSNORM, 14, "y.type_as(x)", CALLER),
        # A Linear runs in the weights' dtype, or in the caller's autocast dtype.
        (RMSNORM, 13, "h", CALLER),
        # Under CUDA autocast: the product in bf16, softmax in float32, sigmoid keeps bf16.
        (AUTOCAST, 6, "scores", {"bfloat16"}),
        (AUTOCAST, 7, "probs", {"float32"}),
        (AUTOCAST, 8, "gate", {"bfloat16"}),
        # `enabled=False`: exp keeps the input's dtype.
        (AUTOCAST, 10, "off", CALLER),
        (FLOW, 5, "y", {"float16", "float32"}),
        (FLOW, 6, "a", {"float32"}),
        (FLOW, 6, "b", {"float32"}),
        # Type promotion: float32 times float16 is float32.
        (FLOW, 7, "c", {"float32"}),
        (FLOW, 8, "d", {"float32"}),
        (FLOW, 10, "f", {"float64"}),
        (FLOW, 11, "g", {"float64"}),
        # The helper is analysed with its call site's argument: float32 in, float32 out.
        (FLOW, 15, "w", {"float32"}),
        # A comprehension over a literal list keeps each element's own fact when unpacked.
        (AGREE, 7, "k_i", {"float32"}),
        (AGREE, 7, "gate_i", {"float16"}),
    ],
)
def test_dtypes(code: str, line: int, expression: str, dtypes: set[str]) -> None:
    assert fact(code, line, expression).dtypes == dtypes


def test_a_product_runs_only_on_operands_of_one_dtype() -> None:
    # `x` is in the caller's dtype, but `matmul` raises on mixed dtypes: outside autocast, where it
    # runs `x` is float16 like the weight, so the product is float16. A sum promotes instead.
    ctx = facts_on(
        """\
        import torch

        def project(x):
            w = torch.zeros(4, 4).half()
            return x @ w, x + w
        """
    )
    plain = dict(ctx.facts.without_caller_autocast().explain_line(5))
    assert plain["x @ w"].dtypes == {"float16"}
    assert (
        "`matmul` raises on mixed dtypes, so its operands are fp16 where it runs" in plain["x @ w"].explain()
    )
    assert plain["x + w"].dtypes == {"float32", "float16"}


def test_integer_results_are_not_floating() -> None:
    ctx = facts_on(FLOW)
    assert dict(ctx.facts.explain_line(9)).get("e") is None  # an integer tensor is not listed


def test_numbers_follow_constants_defaults_and_attributes() -> None:
    ctx = facts_on(RMSNORM)
    ctx.facts.explain_line(14)
    names = {ctx.code(node): node for node in ctx.facts._facts if isinstance(node, (cst.Name, cst.Attribute))}
    assert ctx.facts.number(names["EPS"]) == 1e-8  # a module constant
    assert ctx.facts.number(names["self.eps"]) == 1e-6  # set in __init__ from a parameter's default


def test_evidence_names_the_autocast_line_and_the_op() -> None:
    gate = fact(AUTOCAST, 8, "gate")
    assert gate.explain() == "bf16 here: `matmul` runs in bf16 under autocast at line 5"
    probs = fact(AUTOCAST, 7, "probs")
    assert "`softmax` runs in float32 under autocast at line 5" in probs.explain()


def test_caller_dtype_is_marked() -> None:
    x = fact(FLOW, 15, "z")
    assert x.dtypes == {"float32"} and not x.caller
    y = fact(RMSNORM, 13, "h")
    assert y.may_be_half and y.caller


# nnunet 1.7.1, nnunet/training/loss_functions/dice_loss.py, lines 155-177 (shortened): the loss
# calls the function it was handed (a softmax), which is no layer in the weights' dtype.
HANDED_CALLABLE = """\
import torch
class SoftDiceLoss(torch.nn.Module):
    def __init__(self, apply_nonlin=None, smooth=1.0):
        super().__init__()
        self.apply_nonlin = apply_nonlin
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, x):
        p = self.apply_nonlin(x.float())
        h = self.proj(x.float())
        return p, h
"""


def test_a_handed_callable_follows_its_input_and_a_layer_does_not() -> None:
    assert fact(HANDED_CALLABLE, 8, "p").dtypes == {"float32"}
    assert fact(HANDED_CALLABLE, 9, "h").dtypes == CALLER


# kornia 0.9.0, kornia/feature/affine_shape.py, lines 99-127 (shortened): the upcast runs in a
# dtype-guarded branch that has an `else:`; the else runs only when the input was not half.
GUARDED_WITH_ELSE = """\
import torch

def shape(patch, weighting):
    dtype = patch.dtype
    if dtype in (torch.float16, torch.bfloat16):
        patch = patch.float()
        weighting = weighting.float()
    else:
        weighting = weighting.to(dtype=patch.dtype)
    return patch.pow(2).mean(dim=2)
"""


def test_an_upcast_in_a_dtype_guard_with_an_else_holds_after_it() -> None:
    assert fact(GUARDED_WITH_ELSE, 10, "patch.pow(2).mean(dim=2)").dtypes == {"float32"}


def test_a_name_the_else_rebinds_keeps_both_branches() -> None:
    # `weighting` is float32 in the guarded branch and the input's dtype (half possible) in the else.
    code = GUARDED_WITH_ELSE.replace("return patch.pow(2).mean(dim=2)", "return weighting * 2")
    assert fact(code, 10, "weighting * 2").dtypes == CALLER


def test_number_literals_of_any_size_and_spelling() -> None:
    # Sympy's tests hold integer literals past float's range; a hex index is an index all the same.
    ctx = facts_on("import torch\n\ndef f(x):\n    y = x[0x1] * 1" + "0" * 400 + "\n    return y\n")
    assert dict(ctx.facts.explain_line(4))["y"].kind == "tensor"


# An autocast context held by a variable or a `self` attribute is entered by `with ctx:`; a context
# that may be another manager (`nullcontext()`) leaves the state as it was on that path.
CONTEXTS = """\
import contextlib
import torch

class Trainer:
    def __init__(self, cfg):
        if cfg.autocast:
            self.ctx = torch.autocast(device_type="cuda", dtype=torch.bfloat16)
        else:
            self.ctx = contextlib.nullcontext()

    def step(self, q, k):
        with self.ctx:
            scores = q @ k
        return scores

def script(q, k, amp):
    ctx = torch.autocast("cuda", dtype=torch.float16) if amp else contextlib.nullcontext()
    with ctx:
        scores = q @ k
    plain = torch.autocast("cuda", dtype=torch.bfloat16)
    with plain:
        out = torch.matmul(q, k)
    return scores, out
"""


_CALLER_STATES = {(None, None, False), ("cuda", "bfloat16", False), ("cuda", "float16", False)}


def _states(code: str, line: int) -> set[tuple[str | None, str | None, bool]]:
    ctx = facts_on(code)
    node = ctx.facts.nodes_on(line)[0]
    return {(s.device, s.dtype, s.where is not None) for s in ctx.facts.autocast_at(node)}


def test_an_autocast_context_in_a_variable_or_attribute_is_entered_by_with() -> None:
    # The attribute: bf16 where it holds the autocast, the caller's states where it holds nullcontext.
    assert _states(CONTEXTS, 13) == {("cuda", "bfloat16", True), *_CALLER_STATES}
    assert fact(CONTEXTS, 13, "scores").dtypes == CALLER
    # A conditional expression: fp16 autocast, or the caller's states.
    assert _states(CONTEXTS, 19) == {("cuda", "float16", True), *_CALLER_STATES}
    # A plain variable: only its region.
    assert _states(CONTEXTS, 22) == {("cuda", "bfloat16", True)}
    assert fact(CONTEXTS, 22, "out").dtypes == {"bfloat16"}


LOSS = """\
import torch

def train(model, x, optimizer, scaler, amp_dtype, args):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
    loss = out.loss
    plain = model(x).loss
    enabled = args.amp != "bf16"
    scaler_on = amp_dtype == torch.float16
    flag = args.amp
    return loss, plain, enabled, scaler_on, flag
"""


def _expression(ctx: FileContext, line: int, code: str) -> cst.BaseExpression:
    return next(node for node in ctx.facts.nodes_on(line) if ctx.code(node) == code)


def test_a_value_is_computed_under_the_regions_of_what_it_derives_from() -> None:
    ctx = facts_on(LOSS)
    loss = _expression(ctx, 11, "loss")
    # `loss` is bound outside the region, from `out`, which the region computed.
    assert {(s.dtype, s.where is not None) for s in ctx.facts.computed_under(loss)} >= {("bfloat16", True)}
    plain = _expression(ctx, 11, "plain")
    assert all(s.where is None for s in ctx.facts.computed_under(plain))


def test_a_value_that_follows_a_dtype_is_told_from_a_flag() -> None:
    ctx = facts_on(LOSS)
    assert ctx.facts.mentions_dtype(_expression(ctx, 11, "enabled"))  # compares with "bf16"
    assert ctx.facts.mentions_dtype(_expression(ctx, 11, "scaler_on"))  # compares with torch.float16
    assert not ctx.facts.mentions_dtype(_expression(ctx, 11, "flag"))


def test_an_autocast_to_float32_runs_its_lowered_ops_in_float32() -> None:
    # nemo's graph_transducer.py: a helper returns `autocast(dtype=torch.float32)` or nullcontext().
    code = """\
import contextlib
import torch

def force_float32_context():
    if torch.is_autocast_enabled():
        return torch.amp.autocast("cuda", dtype=torch.float32)
    return contextlib.nullcontext()

def loss(q, k):
    with force_float32_context():
        scores = q @ k
    with torch.autocast("cuda", dtype=torch.float32):
        plain = q @ k
    return scores, plain
"""
    assert _states(code, 11) == {("cuda", "float32", True), *_CALLER_STATES}
    assert fact(code, 13, "plain").dtypes == {"float32"}


# A model's parameters take the dtype its last conversion gave it: `.to(dtype)` and `.half()` on a
# module convert it in place (torch's `Module._apply`), a loader's `torch_dtype=` sets it, a
# constructor's `dtype=` too; `.to(device)` keeps it.
MODELS = """\
import torch
from torch import nn
from transformers import AutoModelForCausalLM

def train(model, device):
    model.to(device)
    model.to(torch.bfloat16)
    a = model.parameters()
    lm = AutoModelForCausalLM.from_pretrained("x", torch_dtype=torch.float16).cuda()
    b = [p for n, p in lm.named_parameters()]
    layer = nn.Linear(4, 4, dtype=torch.bfloat16)
    c = layer.parameters()
    head = nn.Linear(4, 4)
    head.cuda().half()
    d = head.parameters()
    e = model.parameters() if device else head.parameters()
"""


@pytest.mark.parametrize(
    ("line", "expression", "dtypes"),
    [
        (8, "a", {"bfloat16"}),
        (10, "b", {"float16"}),
        (12, "c", {"bfloat16"}),
        (15, "d", {"float16"}),
        (16, "e", {"bfloat16", "float16"}),
    ],
)
def test_a_model_converted_in_place_has_parameters_in_that_dtype(
    line: int, expression: str, dtypes: set[str]
) -> None:
    found = fact(MODELS, line, expression)
    assert found.dtypes == dtypes and not found.caller


def test_a_cast_whose_result_is_used_converts_no_name() -> None:
    # `x.half()` as an expression is a copy: `x` keeps the caller's dtype on the next line.
    assert fact("import torch\n\ndef f(x):\n    y = x.half()\n    z = x\n", 5, "z").dtypes == CALLER


# peft 0.21.2 (`get_peft_model`, `cast_adapter_dtype`) and diffusers 0.42.1
# (`training_utils.cast_training_params`): the parameters a LoRA setup trains are float32.
ADAPTERS = """\
import torch
from diffusers.training_utils import cast_training_params
from peft import get_peft_model
from transformers import AutoModelForCausalLM

def lora(unet, config):
    model = AutoModelForCausalLM.from_pretrained("x", torch_dtype=torch.bfloat16)
    a = get_peft_model(model, config).parameters()
    b = get_peft_model(model, config, autocast_adapter_dtype=False).parameters()
    unet.to("cuda", dtype=torch.float16)
    cast_training_params(unet, dtype=torch.float32)
    c = unet.parameters()
"""


def test_adapters_trained_in_float32_have_no_half_dtype() -> None:
    ctx = facts_on(ADAPTERS)
    facts = {line: dict(ctx.facts.explain_line(line)) for line in (8, 9, 12)}
    assert "a" not in facts[8]  # no dtype known: the frozen base is bf16, the adapters float32
    assert facts[9]["b"].dtypes == {"bfloat16"}
    assert "c" not in facts[12]


# An `int` parameter holds a number whatever the calls pass (transformers 5.24.0,
# models/gptj/modeling_gptj.py: `create_sinusoidal_positions(n, self.dim)` with `self.dim` from the
# config; here also `rebuilt(n, d)` with `d` the caller's).
CONFIGURED = """\
import torch
from torch import nn

def table(num_pos: int, dim: int):
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    return torch.arange(num_pos, dtype=torch.int64).float()[:, None] * inv_freq

class Embedding(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dim = config.rotary_dim or config.hidden_size
        self.register_buffer("pos", table(2048, self.dim), persistent=False)

    def forward(self, x):
        return x * self.dim

def rebuilt(n, d):
    return table(n, d)
"""


def test_sizes_from_a_configuration_are_no_tensors() -> None:
    inv_freq = dict(facts_on(CONFIGURED).facts.explain_line(5)).get("inv_freq")
    assert inv_freq is None or not inv_freq.may_be_half  # `dim` is a number, not the caller's tensor
    assert fact(
        CONFIGURED, 6, "torch.arange(num_pos, dtype=torch.int64).float()[:, None] * inv_freq"
    ).dtypes == {"float32"}
    assert fact(CONFIGURED, 15, "x * self.dim").dtypes == CALLER  # `self.dim` adds no dtype of its own


# A buffer follows the model's dtype (`model.half()` converts it), except while the module is built
# (torchtune 0.6.1, torchtune/modules/position_embeddings.py: `rope_init` and `build_rope_cache` run
# from `__init__`) and in a module that overrides `_apply` (timm 1.0.31, pos_embed_sincos.py).
BUFFERS = """\
import torch
from torch import nn

class Rope(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim
        self.rope_init()

    def rope_init(self):
        theta = 1.0 / (10000 ** (torch.arange(0, self.dim, 2).float() / self.dim))
        self.register_buffer("theta", theta, persistent=False)
        self.build(16)

    def build(self, n):
        seq = torch.arange(n, dtype=self.theta.dtype)
        return torch.outer(seq, self.theta)

    def forward(self, n):
        seq = torch.arange(n, dtype=self.theta.dtype)
        return seq

class Kept(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(0, dim, 2).float(), persistent=False)

    def _apply(self, fn, *args, **kwargs):
        return super()._apply(fn, *args, **kwargs)

    def forward(self, pos):
        angles = pos[:, None].float() * self.inv_freq
        return angles
"""


def test_buffers_follow_the_model_after_it_is_built() -> None:
    assert fact(BUFFERS, 17, "torch.outer(seq, self.theta)").dtypes == {"float32"}
    assert fact(BUFFERS, 20, "seq").dtypes == CALLER
    assert fact(BUFFERS, 32, "self.inv_freq").dtypes == {"float32"}


def test_autocast_to_float32_and_float64_operands_keep_products_wide() -> None:
    # diffusers 0.42.1, models/transformers/transformer_mochi.py: CUDA autocast to float32 computes
    # in float32; CPU autocast refuses float32 and turns itself off. Autocast leaves float64 alone.
    code = """\
import torch

def rope(freqs, pos, grid):
    with torch.autocast("cuda", torch.float32):
        a = torch.einsum("nd,dhf->nhf", pos, freqs.float())
    with torch.autocast("cpu", dtype=torch.float32):
        b = pos.float() @ freqs.float()
    c = grid.double() @ freqs.double()
"""
    assert fact(code, 5, "a").dtypes == {"float32"}
    assert fact(code, 7, "b").dtypes == {"float32"}
    assert fact(code, 8, "c").dtypes == {"float64"}


def test_a_device_parameter_moves_and_a_triton_kernel_holds_no_torch_tensors() -> None:
    code = """\
import torch
import triton

def move(x, device):
    y = x.float().to(device)
    return y

@triton.jit
def kernel(x_ptr, freqs, seq_pos):
    angles = seq_pos * freqs
"""
    assert fact(code, 6, "y").dtypes == {"float32"}
    ctx = facts_on(code)
    assert "angles" not in dict(ctx.facts.explain_line(10))


def test_an_attribute_built_from_itself_is_not_the_model_s() -> None:
    # megatron-core 0.16.1, rotary_pos_embedding.py: `self.inv_freq = self._apply_scaling(self.inv_freq)`.
    code = """\
import torch
from torch import nn

class Rope(nn.Module):
    def __init__(self, dim, scaling):
        super().__init__()
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
        if scaling:
            self.inv_freq = self._scale(self.inv_freq)

    def _scale(self, inv_freq):
        return inv_freq / 8

    def forward(self, n):
        return self.inv_freq
"""
    assert fact(code, 15, "self.inv_freq").dtypes == {"float32"}


# Dtype facts across calls and guards (issue 29): outer products, integer-named inputs, a model
# passed as a parameter, a float32 path chosen by a dtype test.
ACROSS = """\
import torch

class Attention(torch.nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.attend = torch.nn.Softmax(dim=-1)

    def forward(self, x, input_ids):
        scale = x / self.num_heads
        ids = input_ids + 1
        return self.attend(scale), ids

def angles(n, inv_freq):
    t = torch.arange(n, dtype=torch.float32)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        outer = torch.einsum("i,j->ij", t, inv_freq.float())
        product = torch.einsum("ij,jk->ik", t[:, None], inv_freq.float()[None])
        ger = torch.outer(t, inv_freq.float())
    return outer, product, ger

def generate(model, idx):
    logits = model(idx).logits
    return logits.softmax(-1)

def main(model, idx):
    return generate(model.half(), idx)

def upcast(x):
    y = x.float() if x.dtype != torch.float32 else x
    if x.dtype == torch.float16:
        x = x.float()
    return y, x

def cpu_angles(n, inv_freq):
    t = torch.arange(n, dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outer = torch.einsum("i,j->ij", t, inv_freq.float())
        product = torch.einsum("ij,jk->ik", t[:, None], inv_freq.float()[None])
    return outer, product
"""


@pytest.mark.parametrize(
    ("line", "expression", "dtypes"),
    [
        # `self.num_heads` holds an integer: dividing by it keeps the tensor's dtype.
        (10, "scale", CALLER),
        # CUDA autocast lowers an einsum whatever its equation (it has an einsum kernel), outer
        # products too; `torch.outer` runs as a broadcast `mul`, which it leaves in float32.
        (17, "outer", {"bfloat16"}),
        (18, "product", {"bfloat16"}),
        (19, "ger", {"float32"}),
        # A float32 path chosen by a dtype test: `x` is float32 in the `else` branch of the test
        # that upcasts it; after `if x.dtype == torch.float16: x = x.float()` bf16 stays bf16.
        (30, "y", {"float32"}),
        (33, "x", {"float32", "bfloat16"}),
        # CPU autocast has no einsum kernel: it sees the decomposition, a `mul` for an outer
        # product (float32 stays float32) and a `bmm` for a contraction (lowered).
        (38, "outer", {"float32"}),
        (39, "product", {"bfloat16"}),
    ],
)
def test_dtypes_across_calls_and_guards(line: int, expression: str, dtypes: set[str]) -> None:
    assert fact(ACROSS, line, expression).dtypes == dtypes


def test_token_ids_and_counts_are_integers() -> None:
    # `input_ids + 1` is an integer tensor, not a tensor in the caller's dtype, so it is not listed.
    assert "ids" not in dict(facts_on(ACROSS).facts.explain_line(11))
    assert "x" in dict(facts_on(ACROSS).facts.explain_line(10))


def test_a_called_model_parameter_says_so_and_nn_softmax_attributes_are_modules() -> None:
    # A model passed in and called: its output is in the weights' dtype, cast by the caller.
    logits = dict(facts_on(ACROSS).facts.without_caller_autocast().explain_line(23))["logits"]
    assert logits.dtypes == {"float16"}
    assert "`model(...)` runs the model, in its weights' dtype" in logits.explain()
    assert "`.half()` makes it fp16" in logits.explain()
    ctx = facts_on(ACROSS)
    call = next(
        n for n in ctx.facts.nodes_on(12) if isinstance(n, cst.Call) and ctx.code(n.func) == "self.attend"
    )
    assert ctx.facts.of(call.func).module == "Softmax"


def test_a_method_gets_the_arguments_of_its_own_class_only() -> None:
    # Two classes with a `_norm` each: the RMSNorm's is called with `x.float()`, the other's with a
    # Linear's output. Each `_norm` holds what its own class passes.
    code = """\
        import torch

        class RMSNorm(torch.nn.Module):
            def _norm(self, x):
                return x.pow(2).mean(-1, keepdim=True)

            def forward(self, x):
                return self._norm(x.float()).type_as(x)

        class Other(torch.nn.Module):
            def _norm(self, x):
                return x.pow(2).mean(-1, keepdim=True)

            def forward(self, x):
                return self._norm(self.proj(x))

        class Derived(RMSNorm):
            def forward(self, x):
                return self._norm(x.double())
        """
    ctx = facts_on(code)
    own = dict(ctx.facts.explain_line(5))["x.pow(2).mean(-1, keepdim=True)"]
    assert own.dtypes == {"float32", "float64"}  # its class's call and its subclass's
    other = dict(ctx.facts.explain_line(12))["x.pow(2).mean(-1, keepdim=True)"]
    assert other.may_be_half


def test_a_call_on_self_returns_what_its_class_method_returns() -> None:
    # Three classes define `_prep`: `self._prep(x)` is no layer of the model but the method of the
    # caller's class, or, from a base whose own is abstract, its subclasses' overrides.
    code = """\
        from abc import abstractmethod
        import torch

        class Base(torch.nn.Module):
            def forward(self, x):
                return self._prep(x)

            @abstractmethod
            def _prep(self, x):
                \"\"\"Made ready for the model.\"\"\"

        class Wide(Base):
            def _prep(self, x):
                return x.float()

            def run(self, x):
                return self._prep(x)

        class Other(torch.nn.Module):
            def _prep(self, x):
                return x.half()

            def run(self, x):
                return self._prep(x)
        """
    assert fact(code, 6, "self._prep(x)").dtypes == {"float32"}
    assert fact(code, 17, "self._prep(x)").dtypes == {"float32"}
    assert fact(code, 24, "self._prep(x)").dtypes == {"float16"}


def test_promote_types_with_float32_is_wide_whatever_the_other_dtype() -> None:
    # `dtype` is a parameter (the caller's, any dtype): promoted with float32 it is float32 still.
    code = """\
        import torch

        def rms(x, dtype):
            work = torch.promote_types(dtype, torch.float32)
            return x.to(work)

        def rms(x, scale):
            dtype = reduce(torch.promote_types, (x.dtype, scale.dtype, torch.float32))
            return x.to(dtype)
        """
    assert fact(code, 5, "x.to(work)").dtypes == {"float32"}
    # k-diffusion folds it over several dtypes with `functools.reduce`.
    assert fact("from functools import reduce\n" + textwrap.dedent(code), 10, "x.to(dtype)").dtypes == {
        "float32"
    }


def test_a_modules_settings_are_numbers_not_dtype_evidence() -> None:
    # `scale` and `config` are arguments of `__init__`: settings, which do not make `q * self.scale`
    # half or name themselves as its evidence; a tensor argument annotated as one stays a tensor.
    code = """\
        import torch

        class Head(torch.nn.Module):
            def __init__(self, config, scale, table: torch.Tensor):
                super().__init__()
                self.scale = scale
                self.width = config.hidden_size ** -0.5
                self.table = table

            def forward(self, q):
                return q * self.scale * self.width, self.table
        """
    scaled = fact(code, 11, "q * self.scale * self.width")
    assert scaled.dtypes == CALLER
    assert "scale" not in scaled.explain() and "config" not in scaled.explain()
    assert fact(code, 11, "self.table").may_be_half


def test_a_plain_class_is_built_from_tensors() -> None:
    # esm 2.0.0's `CategoricalMixture(param)` keeps the logits it is given: not a module's setting.
    code = """\
        class CategoricalMixture:
            def __init__(self, param):
                self.logits = param

            def log_prob(self):
                return self.logits.log_softmax(-1)
        """
    assert fact(code, 6, "self.logits.log_softmax(-1)").may_be_half


def test_a_method_gets_the_arguments_of_calls_on_objects_of_its_class() -> None:
    # ParlAI's agent passes float32 log-probabilities to its searches with `b.advance(...)`: the
    # method's parameter holds them. A name another class of the file defines too (`Other.advance`),
    # or one that objects of other libraries have (`forward`), may call something else: the
    # parameter stays the caller's.
    code = """\
        import torch
        import torch.nn.functional as F

        class Search(object):
            def advance(self, logprobs):
                return logprobs.softmax(-1)

            def forward(self, logprobs):
                return logprobs.softmax(-1)

        class Agent:
            def generate(self, scores):
                beams = [Search() for _ in range(4)]
                for b in beams:
                    b.advance(F.log_softmax(scores, dim=-1, dtype=torch.float32))
                    b.forward(F.log_softmax(scores, dim=-1, dtype=torch.float32))
        """
    assert fact(code, 6, "logprobs.softmax(-1)").dtypes == {"float32"}
    assert fact(code, 9, "logprobs.softmax(-1)").dtypes == CALLER
    other = textwrap.dedent(code).replace(
        "class Agent:", "class Other:\n    def advance(self, x):\n        return x\n\nclass Agent:"
    )
    assert fact(other, 6, "logprobs.softmax(-1)").dtypes == CALLER
    assert fact(other, 13, "x").dtypes == CALLER


def test_a_module_a_plain_object_keeps_follows_its_input() -> None:
    # No cast of a model reaches a module that a plain object keeps (ParlAI's n-gram blocker in its
    # searches): its output is in its input's dtype, not the model's. A module's submodule runs in
    # the model's dtype.
    code = """\
        import torch
        from blocking import NGramRepeatBlock

        class Search(object):
            def __init__(self):
                self.block = NGramRepeatBlock()

            def advance(self, logprobs):
                return self.block(logprobs.float())

        class Layer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.block = NGramRepeatBlock()

            def forward(self, logprobs):
                return self.block(logprobs.float())
        """
    # Outside autocast (under it, any module's products run in the half dtype).
    facts = facts_on(code).facts.without_caller_autocast()
    assert dict(facts.explain_line(9))["self.block(logprobs.float())"].dtypes == {"float32"}
    kept = "`self.block` runs in the model's dtype"
    assert kept not in fact(code, 9, "self.block(logprobs.float())").explain()
    assert kept in fact(code, 17, "self.block(logprobs.float())").explain()


def test_cuda_autocast_leaves_tensors_made_on_the_cpu_alone() -> None:
    # easydetect's sin-cos position grid: `arange` without a device makes CPU tensors, and CUDA
    # autocast dispatches on CUDA tensors only, so their matmul stays float32; CPU autocast, or a
    # grid made on the GPU or moved there, is lowered.
    code = """\
import torch

def grid(w, x):
    with torch.autocast("{device}", dtype=torch.bfloat16):
        g = torch.arange(int(w), dtype=torch.float32)
        omega = 1.0 / (10000.0 ** (torch.arange(16).float() / 16))
        out = g.flatten()[..., None] @ omega[None]
        moved = g.to(x.device)[..., None] @ omega.to(x.device)[None]
        made = torch.arange(int(w), device=x.device).float()[..., None] @ omega[None]
        kept = g.to(torch.float16)[..., None] @ omega.half()[None]
    return out, moved, made, kept
"""
    cuda = code.format(device="cuda")
    assert fact(cuda, 7, "out").dtypes == {"float32"}
    assert fact(cuda, 10, "kept").dtypes == {"float16"}  # a dtype cast keeps it on the CPU
    for line, name in ((8, "moved"), (9, "made")):
        assert fact(cuda, line, name).dtypes == {"bfloat16"}
    assert fact(code.format(device="cpu"), 7, "out").dtypes == {"bfloat16"}
