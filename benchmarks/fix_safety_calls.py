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


def _generic(cls: type) -> Run:
    kwargs = {}
    for name, parameter in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or parameter.kind in _VARIADIC:
            continue
        if parameter.default is parameter.empty:
            raise TypeError(f"{cls.__name__}.__init__ needs {name!r}, which has no default")
        kwargs[name] = shrink(name, parameter.default)
    model = cls(**kwargs)
    config = dict(getattr(model, "config", None) or kwargs)
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
        elif name in ("hidden_states", "x") and "hidden_size" in config:
            inputs[name] = torch.randn(1, 16, config["hidden_size"])
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
        torch.manual_seed(0)
        if key in TINY:
            model, call, inputs = TINY[key](target)
        elif isinstance(target, type) and issubclass(target, torch.nn.Module):
            model, call, inputs = _generic(target)
        else:
            raise TypeError(f"{name} is a function with no tiny call here")
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
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
