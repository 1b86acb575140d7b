# bclm-pytorch 1.0.7, bclm/hf_loader.py (Apache-2.0), trimmed to the dtype, the model and the cast.
from typing import Any, Dict, Optional, Union

import torch

from .registry import get_architecture


def _resolve_dtype(
    dtype: Optional[torch.dtype],
    device: torch.device,
) -> torch.dtype:
    """
    Determine the working dtype.

    Default: bfloat16 on CUDA (matching training precision), float32
    on CPU (bfloat16 math is slow on most CPUs).
    """
    if dtype is not None:
        return dtype
    if device.type == "cuda":
        return torch.bfloat16
    return torch.float32


def _resolve_device(device: Optional[Union[str, torch.device]]) -> torch.device:
    """Resolve device string / None to a ``torch.device``."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def load_model(
    architecture_name: str,
    model_config: Any,
    state_dict: Dict[str, torch.Tensor],
    *,
    device: Optional[Union[str, torch.device]] = None,
    dtype: Optional[torch.dtype] = None,
) -> torch.nn.Module:
    """Load a BCLM model: build it on the CPU, load its weights, move and cast it."""
    resolved_device = _resolve_device(device)
    resolved_dtype = _resolve_dtype(dtype, resolved_device)

    entry = get_architecture(architecture_name)

    # Build on CPU first to avoid fragmented GPU allocation
    raw_model = entry.model_class(model_config)
    raw_model.load_state_dict(state_dict, strict=True)

    raw_model = raw_model.to(device=resolved_device, dtype=resolved_dtype)
    raw_model.eval()
    return raw_model
