"""A transformers causal LM built from a config JSON alone: no weights, no hub access."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amplint.runtime.target import TargetError


def causal_lm(
    config_path: str, *, seq_len: int, batch_size: int, attn_implementation: str
) -> tuple[Any, tuple[()], dict[str, Any]]:
    """The model class for the config's `model_type`, on the meta device, and `input_ids` for it."""
    try:
        import transformers
    except ImportError:
        raise TargetError("--hf-config needs transformers: pip install 'amplint[hf]'") from None
    import torch

    try:
        data = json.loads(Path(config_path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TargetError(f"cannot read {config_path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise TargetError(f"{config_path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise TargetError(f'{config_path}: a transformers config needs a "model_type" key')
    model_type = data.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(
                config, attn_implementation=attn_implementation
            )
    except (ValueError, KeyError, TypeError) as exc:
        raise TargetError(f"{config_path}: transformers cannot build a causal LM from it: {exc}") from None
    input_ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
    return model, (), {"input_ids": input_ids, "use_cache": False}


def materialize_buffers(model: Any) -> None:
    """Give the buffers a config computes (rotary `inv_freq`, not in a checkpoint) real values on
    the CPU, for a model built on the meta device whose weights were loaded: each module holding
    such a buffer is built again from the model's config (one that cannot be stays on meta, and the
    values replay says that the model has no weights)."""
    import torch

    for module in model.modules():
        if not any(buffer.is_meta for buffer in module.buffers(recurse=False)):
            continue
        try:
            with torch.device("cpu"):
                fresh = type(module)(config=model.config)
        except TypeError:  # not built from the config alone
            continue
        for key, buffer in fresh.named_buffers(recurse=False):
            module.register_buffer(key, buffer, persistent=key not in module._non_persistent_buffers_set)
        for key, value in vars(fresh).items():  # scalars computed with the buffers (attention_scaling)
            if not key.startswith("_") and not isinstance(value, torch.Tensor):
                setattr(module, key, value)
