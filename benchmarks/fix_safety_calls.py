"""One run for `benchmarks/fix_safety.py` in a package other than transformers: build a tiny
instance of a class of a module that `amplint check --fix` changed (or take one of its functions),
run it in every mode of `amplint.runtime.modes` (float64, float32, bfloat16 and float16 casts, CPU
autocast, the emulated CUDA autocast) with the same weights and inputs, save the first floating
output of each run to OUTPUT, and print its dtype, shape and finiteness per mode as JSON.

    python benchmarks/fix_safety_calls.py MODULE NAME LINES OUTPUT

LINES are the lines of MODULE's file that the fix changed (comma-separated); the JSON says whether
the run went through any of them (`reached`). A class is built from its `__init__` defaults shrunk
(`shrink`) with inputs made from the names of its forward arguments; `TINY` holds the classes that
this cannot build, run, or run through the fixed lines (a tiny config, inputs and the method to
call, sized after the package's own tests), and the functions, which run only from there. The
parent runs this once in the original copy and once in the fixed one, with the same seed.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import re
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from amplint.runtime.modes import in_every_mode, save

# A run: the module to cast to the dtype (None for a function), what to call, its arguments.
Run = tuple[torch.nn.Module | None, Callable[..., Any], dict[str, Any]]


def _sana_wm(cls: type) -> Run:
    # tests/models/transformers/test_models_transformer_sana_wm.py (diffusers): 2 layers with
    # softmax_every_n=2 run both camera attentions, the GDN one and the softmax one.
    frames, height, width = 4, 8, 8
    model = cls(
        in_channels=4,
        num_layers=2,
        hidden_size=32,
        num_attention_heads=2,
        patch_size=(1, 1, 1),
        softmax_every_n=2,
        linear_head_dim=16,
        t_kernel_size=3,
        conv_kernel_size=4,
        caption_channels=8,
        mlp_ratio=2.0,
        chunk_plucker_channels=8,
        chunk_plucker_post_attn_blocks=2,
    )
    # A camera moving forward, pinhole intrinsics centred on the latent grid: (1, frames, 16 + 4).
    c2w = torch.eye(4).repeat(1, frames, 1, 1)
    c2w[..., 2, 3] = torch.arange(frames, dtype=torch.float32) * 0.1
    intrinsics = torch.tensor([float(width), float(height), width / 2, height / 2]).expand(1, frames, 4)
    inputs = {
        "hidden_states": torch.randn(1, 4, frames, height, width),
        "timestep": torch.randint(0, 1000, (1, 1, frames)).float(),
        "encoder_hidden_states": torch.randn(1, 1, 16, 8),
        "encoder_attention_mask": torch.ones(1, 16, dtype=torch.long),
        "camera_conditions": torch.cat([c2w.flatten(start_dim=-2), intrinsics], dim=-1),
        "chunk_plucker": torch.randn(1, 8, frames, height, width),
    }
    return model, model, inputs


def _rms_downscale(fn: Callable[..., Any]) -> Run:
    # (batch, heads, head width, tokens), the transformed tensor twice the reference's size
    reference = torch.randn(1, 2, 16, 32)
    return None, fn, {"reference": reference, "transformed": 2 * reference + torch.randn(1, 2, 16, 32)}


def _text_decoder(cls: type) -> Run:
    # tests/pipelines/unidiffuser/test_unidiffuser.py (diffusers), 2 layers; the fixed line is in
    # its beam search, which `generate_captions` runs (the forward pass does not).
    model = cls(
        prefix_length=4,
        prefix_inner_dim=32,
        prefix_hidden_dim=32,
        vocab_size=1000,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_inner=37,
        activation_function="gelu",
    )
    return (
        model,
        model.generate_captions,
        {"features": torch.randn(1, 4, 32), "eos_token_id": 2, "device": "cpu"},
    )


def _ltx2_connectors(cls: type) -> Run:
    # tests/pipelines/ltx2 (diffusers) sizes; the fixed per-token RMS norm runs only with the
    # LTX-2.3 per-modality projections.
    model = cls(
        caption_channels=16,
        text_proj_in_factor=3,
        video_connector_num_attention_heads=4,
        video_connector_attention_head_dim=8,
        video_connector_num_layers=1,
        video_connector_num_learnable_registers=None,
        audio_connector_num_attention_heads=4,
        audio_connector_attention_head_dim=8,
        audio_connector_num_layers=1,
        audio_connector_num_learnable_registers=None,
        connector_rope_base_seq_len=32,
        rope_double_precision=False,
        rope_type="split",
        per_modality_projections=True,
        video_hidden_dim=32,
        audio_hidden_dim=32,
    )
    inputs = {"text_encoder_hidden_states": torch.randn(1, 8, 16, 3), "attention_mask": torch.ones(1, 8)}
    return model, model, inputs


def _shap_e_renderer(cls: type) -> Run:
    # tests/pipelines/shap_e/test_shap_e.py (diffusers): renderer width 8, latent width 16; an
    # 8-pixel image, one batch of its rays, 8 coarse and 8 fine samples along each.
    model = cls(
        param_shapes=((8, 93), (8, 8), (8, 8), (8, 8)),
        d_latent=16,
        d_hidden=8,
        n_output=12,
        background=(0.1, 0.1, 0.1),
    )
    inputs = {
        "latents": torch.randn(1, 32, 16),
        "device": "cpu",
        "size": 8,
        "ray_batch_size": 20 * 8 * 8,
        "n_coarse_samples": 8,
        "n_fine_samples": 8,
    }
    return model, model.decode_to_image, inputs


def _fla_attn_decoding(fn: Callable[..., Any]) -> Run:
    # two sequences of 6 and 10 keys, 4 query heads over 2 key heads, a window of 4 keys
    inputs = {
        "q": torch.randn(1, 2, 4, 16),
        "k": torch.randn(1, 16, 2, 16),
        "v": torch.randn(1, 16, 2, 16),
        "cu_seqlens": torch.tensor([0, 6, 16]),
        "window_size": 4,
    }
    return None, fn, inputs


def _fla_dsa(fn: Callable[..., Any]) -> Run:
    inputs = {
        "q": torch.randn(1, 16, 4, 16),
        "k": torch.randn(1, 16, 2, 16),
        "v": torch.randn(1, 16, 2, 16),
        "q_idx": torch.randn(1, 16, 2, 8),
        "k_idx": torch.randn(1, 16, 8),
        "topk": 4,
    }
    return None, fn, inputs


def _fla_log_linear(fn: Callable[..., Any]) -> Run:
    # 16 steps have 5 levels of the Fenwick-tree hierarchy (log2(16) + 1)
    inputs = {
        "q": torch.randn(1, 16, 2, 8),
        "k": torch.randn(1, 16, 2, 8),
        "v": torch.randn(1, 16, 2, 8),
        "g": -torch.rand(1, 16, 2),
        "level_scales": torch.rand(1, 16, 2, 5),
    }
    return None, fn, inputs


def _fla_stickbreaking(fn: Callable[..., Any]) -> Run:
    return (
        None,
        fn,
        {"q": torch.randn(1, 16, 4, 16), "k": torch.randn(1, 16, 2, 16), "v": torch.randn(1, 16, 2, 16)},
    )


def _fla_titans(fn: Callable[..., Any]) -> Run:
    # theta, alpha, eta are rates in (0, 1): (batch, heads, steps, 1)
    rates = {name: torch.rand(1, 2, 16, 1) * 0.5 + 0.25 for name in ("theta", "alpha", "eta")}
    return None, fn, {**rates, "seq_len": 16}


def _fla_grpo(fn: Callable[..., Any]) -> Run:
    inputs = {
        "logits": torch.randn(2, 9, 64),
        "ref_logp": -torch.rand(2, 8),
        "input_ids": torch.randint(0, 64, (2, 8)),
        "advantages": torch.randn(2),
    }
    return None, fn, inputs


def _fsp(cls: type) -> Run:
    # the Laplace CDF and its inverse are the activations the fixes change: 4 codebook dimensions
    model = cls(levels=[8, 5, 5, 5], act_name="laplace", need_inv_act=True)
    return model, model, {"z": torch.randn(1, 16, 4)}


def _laplace_act(fn: Callable[..., Any]) -> Run:
    return None, fn, {"z": torch.randn(2, 16) * 3}


def _laplace_inv_act(fn: Callable[..., Any]) -> Run:
    # probabilities in (0, 1), some close to either end, where the log is steep
    return None, fn, {"p": torch.rand(2, 16) * 0.998 + 0.001}


def _heinsen_scan(fn: Callable[..., Any]) -> Run:
    # minGRU's scan: log gates (negative) and log values over 64 steps
    gates = -torch.nn.functional.softplus(torch.randn(1, 64, 8))
    return None, fn, {"log_coeffs": gates, "log_values": torch.randn(1, 64, 8)}


def _loha(
    base: Callable[[], torch.nn.Module], shape: tuple[int, ...], **options: Any
) -> Callable[[type], Run]:
    # peft's LoHa adapter on a tiny base layer, with random factors (its default init leaves the
    # product zero) so that the Hadamard product the fix decorates adds something
    def build(cls: type) -> Run:
        from peft import LoHaConfig

        config = LoHaConfig(r=2, alpha=2, init_weights=False, **options)
        model = cls(base(), "default", config=config, r=2, alpha=2)  # built after the seed is set
        return model, model, {"x": torch.randn(*shape)}

    return build


def _hada_weight(cls: type) -> Run:
    factors = {
        "w1a": torch.randn(8, 2),
        "w1b": torch.randn(2, 8),
        "w2a": torch.randn(8, 2),
        "w2b": torch.randn(2, 8),
    }
    return None, lambda **f: cls.apply(f["w1a"], f["w1b"], f["w2a"], f["w2b"]), factors


def _hada_weight_cp(cls: type) -> Run:
    factors = {
        "t1": torch.randn(2, 2, 3, 3),
        "w1a": torch.randn(2, 8),
        "w1b": torch.randn(2, 4),
        "t2": torch.randn(2, 2, 3, 3),
        "w2a": torch.randn(2, 8),
        "w2b": torch.randn(2, 4),
    }
    return (
        None,
        lambda **f: cls.apply(*(f[name] for name in ("t1", "w1a", "w1b", "t2", "w2a", "w2b"))),
        factors,
    )


def _block_circular(cls: type) -> Run:
    # C3A's block-circular product: 16 features in 4 blocks of 4
    return None, lambda **f: cls.apply(f["x"], f["w"]), {"x": torch.randn(2, 16), "w": torch.randn(4, 4, 4)}


def _x_transformer(cls: type) -> Run:
    # x-transformers' language model with the options whose code the fixes change: CoPE positions
    # and the data-dependent (forgetting-transformer) ALiBi in attention, sigsoftmax logits
    from x_transformers import Decoder

    decoder = Decoder(dim=32, depth=2, heads=2, attn_use_cope=True, attn_data_dependent_alibi=True)
    model = cls(num_tokens=256, max_seq_len=64, attn_layers=decoder, sigsoftmax_logits=True)
    return model, model, {"x": torch.randint(0, 256, (1, 16))}


def _fla_layer(**options: Any) -> Callable[[type], Run]:
    # an fla layer from its shrunk defaults, with the options that keep it off the kernels that have
    # no PyTorch reference in the package (`KERNELS`)
    return lambda cls: _generic(cls, **options)


def _no_varlen(cu_seqlens: Any) -> None:
    if cu_seqlens is not None:
        raise NotImplementedError("fla's reference runs sequences of equal length only")


def _gsa_recurrent(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    s: torch.Tensor,
    g: torch.Tensor | None = None,
    scale: float | None = None,
    initial_state: Any = None,
    output_final_state: bool = False,
    cu_seqlens: Any = None,
) -> Any:
    from fla.ops.gsa.naive import naive_recurrent_gsa

    _no_varlen(cu_seqlens)
    return naive_recurrent_gsa(q, k, v, s, g, scale, initial_state, output_final_state)


def _rms_norm_linear(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    norm_bias: torch.Tensor | None,
    linear_weight: torch.Tensor,
    linear_bias: torch.Tensor | None,
    eps: float = 1e-5,
) -> torch.Tensor:
    # fla's `rms_norm_ref` in float32, then the linear layer as `rms_norm_linear`'s own torch code
    # (LayerNormLinearFunction.forward) runs it: in the norm's output dtype, or CUDA autocast's dtype
    from fla.modules.norm.layernorm import rms_norm_ref

    y = rms_norm_ref(x, norm_weight, norm_bias, eps=eps, upcast=True)
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else y.dtype
    bias = linear_bias.to(dtype) if linear_bias is not None else None
    return torch.nn.functional.linear(y.to(dtype), linear_weight.to(dtype), bias)


def _token_shift(
    x: torch.Tensor, cu_seqlens: Any = None, cache: Any = None, output_cache: bool = False
) -> Any:
    from fla.modules.token_shift import token_shift_ref

    if cache is not None:
        raise NotImplementedError("fla's reference takes no cache")
    delta = token_shift_ref(x, cu_seqlens)
    return (delta, None) if output_cache else delta


def _addcmul_rwkv7(*args: Any) -> Any:
    from fla.ops.rwkv7.fused_addcmul import torch_addcmul_rwkv7

    return torch_addcmul_rwkv7(*args)


def _k_update(k: torch.Tensor, a: torch.Tensor, ka: torch.Tensor, cu_seqlens: Any = None) -> torch.Tensor:
    from fla.ops.rwkv7.fused_k_update import k_update_ref

    return k_update_ref(k, a, ka)


def _rwkv7_recurrent(
    r: torch.Tensor,
    w: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kk: torch.Tensor,
    a: torch.Tensor,
    scale: float = 1.0,
    initial_state: Any = None,
    output_final_state: bool = False,
    cu_seqlens: Any = None,
) -> Any:
    # The kernel's recurrence S = exp(w) S + (kk * a)(-kk^T S) + k v^T, o = S^T (r * scale) is the
    # generalized delta rule's with alpha = -kk, beta = kk * a, gk = w; its reference takes
    # (batch, heads, steps, width), scales r by width ** -0.5 itself, which r undoes here, and
    # loads all but alpha in float32, as the kernel loads every input (a float64 alpha would not
    # meet its float32 state)
    from fla.ops.generalized_delta_rule.dplr.naive import dplr_recurrence

    _no_varlen(cu_seqlens)
    q = r * (scale * r.shape[-1] ** 0.5)
    heads_first = [x.transpose(1, 2) for x in (q, k, v, -kk.float(), kk * a, w)]
    o, state = dplr_recurrence(*heads_first, initial_state, output_final_state)
    return o.transpose(1, 2), state


def _gate_output_correction(*args: Any) -> torch.Tensor:
    from fla.ops.rwkv7.gate_output_correction import gate_output_correction_ref

    return gate_output_correction_ref(*args)


_NO_REFERENCE = "has no PyTorch reference in the package"
# fla's layers run their recurrences, norms and fused elementwise ops in triton kernels, which need a
# GPU. For a run on CPU, each kernel that a fixed layer calls is replaced, in the layer's module, by
# fla's own PyTorch reference of the same op (the one fla's tests check the kernel against), in the
# original copy and in the fixed one alike; the fixed lines run as written. A kernel with no
# reference in the package raises instead (None here), so its layer is not compared.
KERNELS: dict[str, tuple[Callable[..., Any] | None, str]] = {
    "fla.layers.gsa:fused_recurrent_gsa": (_gsa_recurrent, "fla.ops.gsa.naive.naive_recurrent_gsa"),
    "fla.layers.gsa:rms_norm_linear": (
        _rms_norm_linear,
        "fla.modules.norm.layernorm.rms_norm_ref, then the linear layer as rms_norm_linear runs it",
    ),
    "fla.layers.raven:fused_recurrent_gsa": (_gsa_recurrent, "fla.ops.gsa.naive.naive_recurrent_gsa"),
    "fla.layers.hgrn:swiglu": (None, f"fla's swiglu kernel {_NO_REFERENCE}"),
    "fla.layers.hgrn2:swish": (None, f"fla's swish kernel {_NO_REFERENCE}"),
    "fla.layers.rwkv7:token_shift": (_token_shift, "fla.modules.token_shift.token_shift_ref"),
    "fla.layers.rwkv7:fused_addcmul_rwkv7": (
        _addcmul_rwkv7,
        "fla.ops.rwkv7.fused_addcmul.torch_addcmul_rwkv7",
    ),
    "fla.layers.rwkv7:fused_k_rwkv7": (_k_update, "fla.ops.rwkv7.fused_k_update.k_update_ref"),
    "fla.layers.rwkv7:fused_mul_recurrent_rwkv7": (
        _rwkv7_recurrent,
        "fla.ops.generalized_delta_rule.dplr.naive.dplr_recurrence (alpha = -kk, beta = kk * a)",
    ),
    "fla.layers.rwkv7:gate_output_correction": (
        _gate_output_correction,
        "fla.ops.rwkv7.gate_output_correction.gate_output_correction_ref",
    ),
}


def _replace_kernels(module: Any) -> list[str]:
    """Replace, in `module`, the kernels `KERNELS` names for it; what was replaced, in words."""
    replaced = []
    for key, (reference, why) in KERNELS.items():
        module_name, _, name = key.partition(":")
        if module_name != module.__name__:
            continue
        replaced.append(f"{name} by {why}" if reference else f"{name}: not replaced ({why})")
        setattr(module, name, reference or _raising(why))
    return replaced


def _raising(why: str) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(why)

    return kernel


# Tiny instances by "module:name", the package left out of the module's name.
TINY: dict[str, Callable[[Any], Run]] = {
    "models.transformers.transformer_sana_wm:SanaWMTransformer3DModel": _sana_wm,
    "models.transformers.transformer_sana_wm:_downscale_to_reference_rms": _rms_downscale,
    "pipelines.deprecated.unidiffuser.modeling_text_decoder:UniDiffuserTextDecoder": _text_decoder,
    "pipelines.ltx2.connectors:LTX2TextConnectors": _ltx2_connectors,
    "pipelines.shap_e.renderer:ShapERenderer": _shap_e_renderer,
    "ops.attn.naive:naive_attn_decoding": _fla_attn_decoding,
    "ops.dsa.naive:naive_dsa": _fla_dsa,
    "ops.log_linear_attn.naive:naive_log_linear_attn": _fla_log_linear,
    "ops.stickbreaking_attn.naive:naive_stickbreaking_attn": _fla_stickbreaking,
    "ops.titans.log_impl:combine_params_log": _fla_titans,
    "modules.grpo.ops:grpo_loss_torch": _fla_grpo,
    # fla's layers, built off the swish kernel where an option allows (its relu runs in torch)
    "layers.gsa:GatedSlotAttention": _fla_layer(feature_map="relu"),
    "layers.raven:Raven": _fla_layer(feature_map="relu", gate_fn="relu", fuse_norm=False),
    "layers.hgrn2:HGRN2Attention": _fla_layer(expand_ratio=32),  # 2 heads of 32 at width 64
    # the first of two layers (it makes its own v_first; the init spreads its decays over the layers)
    "layers.rwkv7:RWKV7Attention": _fla_layer(layer_idx=0, num_hidden_layers=2),
    "finite_scalar_perturbation:FSP": _fsp,
    "finite_scalar_perturbation:laplace_act": _laplace_act,
    "finite_scalar_perturbation:laplace_inv_act": _laplace_inv_act,
    "minGRU:heinsen_associative_scan_log": _heinsen_scan,
    "x_transformers:TransformerWrapper": _x_transformer,
    "tuners.loha.layer:Linear": _loha(lambda: torch.nn.Linear(16, 16), (1, 4, 16)),
    "tuners.loha.layer:Conv1d": _loha(lambda: torch.nn.Conv1d(4, 8, 3), (1, 4, 16)),
    "tuners.loha.layer:Conv2d": _loha(
        lambda: torch.nn.Conv2d(4, 8, 3), (1, 4, 8, 8), use_effective_conv2d=True
    ),
    "tuners.loha.layer:HadaWeight": _hada_weight,
    "tuners.loha.layer:HadaWeightCP": _hada_weight_cp,
    "tuners.c3a.utils:BlockCircularConvolution": _block_circular,
}

_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
_LAYERS = re.compile(r"layers|blocks|depth")
_HEADS = re.compile(r"heads$")
_WIDTH = re.compile(r"channels|dim|hidden|embd|inner|width|d_model")


def shrink(name: str, value: Any) -> Any:
    """A default `__init__` argument made tiny: layer and block counts to 1, head counts to 2,
    widths that 16 divides divided by 16 (so sums and products of widths stay divisible)."""
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        return value
    if isinstance(value, (tuple, list)):
        return type(value)(shrink(name, item) for item in value)
    if _LAYERS.search(name):
        return min(value, 1)
    if _HEADS.search(name):
        return min(value, 2)
    if _WIDTH.search(name) and value >= 64 and value % 16 == 0:
        return value // 16
    return value


def _required(name: str) -> int | None:
    """A tiny value for a required `__init__` argument that names a size (a width, a head or layer
    count, a vocabulary), else None."""
    if _LAYERS.search(name):
        return 1
    if _HEADS.search(name):
        return 2
    if name in ("num_tokens", "vocab_size", "codebook_size"):
        return 256
    if name == "dim" or _WIDTH.search(name):
        return 32
    return None


def _arguments(function: Callable[..., Any]) -> dict[str, Any]:
    """Tiny arguments for `function` (an `__init__`): defaults shrunk, required sizes made tiny, and
    a required argument annotated with a dataclass (a config) built the same way from its fields."""
    try:
        parameters = inspect.signature(function, eval_str=True).parameters
    except (NameError, TypeError):  # an annotation that does not evaluate
        parameters = inspect.signature(function).parameters
    kwargs = {}
    for name, parameter in parameters.items():
        if name == "self" or parameter.kind in _VARIADIC:
            continue
        if parameter.default is not parameter.empty:
            kwargs[name] = shrink(name, parameter.default)
        elif (size := _required(name)) is not None:
            kwargs[name] = size
        elif dataclasses.is_dataclass(parameter.annotation) and isinstance(parameter.annotation, type):
            kwargs[name] = parameter.annotation(**_arguments(parameter.annotation.__init__))
        else:
            raise TypeError(f"{function.__qualname__} needs {name!r}, which has no default")
    return kwargs


def _generic(cls: type, **options: Any) -> Run:
    kwargs = {**_arguments(cls.__init__), **options}
    model = cls(**kwargs)
    found = getattr(model, "config", None)
    config = dict(kwargs)
    for value in (found, *kwargs.values()):  # a config's sizes: a dataclass, or diffusers' dict
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            config.update(dataclasses.asdict(value))
        elif isinstance(value, dict):
            config.update(value)
    width = config.get("hidden_size") or config.get("dim") or config.get("d_model")
    first = next((m for m in model.modules() if isinstance(m, (torch.nn.Conv3d, torch.nn.Conv2d))), None)
    channels = config.get("in_channels") or getattr(first, "in_channels", None)
    inputs: dict[str, Any] = {}
    for name, parameter in inspect.signature(model.forward).parameters.items():
        optional = parameter.default is not parameter.empty or parameter.kind in _VARIADIC
        if optional and name not in ("timestep", "encoder_hidden_states"):
            continue
        if name in ("sample", "hidden_states", "x") and channels:
            frames = (9,) if isinstance(first, torch.nn.Conv3d) else ()
            inputs[name] = torch.randn(1, channels, *frames, 64, 64)
        elif name in ("hidden_states", "x") and "num_tokens" in config:
            inputs[name] = torch.randint(0, config["num_tokens"], (1, 16))
        elif name in ("hidden_states", "x") and width:
            inputs[name] = torch.randn(1, 16, width)
        elif name == "timestep":
            inputs[name] = torch.tensor([500.0])
        elif name == "encoder_hidden_states" and "cross_attention_dim" in config:
            inputs[name] = torch.randn(1, 8, config["cross_attention_dim"])
        elif parameter.default is parameter.empty:
            raise TypeError(f"no input made for {cls.__name__}.forward's {name!r}")
    return model, model, inputs


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _first(output: Any) -> torch.Tensor | None:
    """The first floating tensor of an output (a tensor, a tuple, a dict or a BaseOutput), else the
    first tensor."""
    tensors: list[torch.Tensor] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            tensors.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (tuple, list)):
            for item in value:
                walk(item)

    walk(output)
    return next((t for t in tensors if t.is_floating_point()), tensors[0] if tensors else None)


def main(argv: list[str]) -> None:
    module_name, name, lines = argv[0], argv[1], {int(n) for n in argv[2].split(",") if n}
    saved = argv[3]
    out: dict[str, Any] = {}
    try:
        module = importlib.import_module(module_name)
        target = getattr(module, name)
        key = f"{module_name.partition('.')[2]}:{name}"
        replaced = _replace_kernels(module)
        torch.manual_seed(0)
        if key in TINY:
            model, call, inputs = TINY[key](target)
        elif isinstance(target, type) and issubclass(target, torch.nn.Module):
            model, call, inputs = _generic(target)
        else:
            raise TypeError(f"{name} is not a module and has no tiny call here")
    except Exception as exc:
        print(json.dumps({"build": _why(exc)}))
        return
    path, reached = module.__file__, set()

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and frame.f_lineno in lines:
            reached.add(frame.f_lineno)
        return line

    def call_(frame: FrameType, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename == path else None

    if model is not None:
        model.eval()

    def first(**inputs: Any) -> torch.Tensor:
        found = _first(call(**inputs))
        if found is None:
            raise TypeError("the output holds no tensor")
        return found

    sys.settrace(call_)
    try:
        runs = in_every_mode(model, first, inputs)
    finally:
        sys.settrace(None)
    out.update(save(runs, saved))
    out["reached"] = bool(reached)
    if replaced:
        out["replaced"] = replaced
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
