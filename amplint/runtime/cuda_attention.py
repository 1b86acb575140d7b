"""Scaled dot-product attention on fake CUDA tensors, as a GPU runs it.

On a GPU, ``scaled_dot_product_attention`` runs a fused kernel (flash or memory-efficient
attention) that reads and writes the input dtype, and falls back to the math path, which upcasts
half inputs to float32, only when no fused kernel accepts the call. The CUDA kernel chooser is not
compiled into a CPU-only build, so there fake CUDA tensors always take the math path and a trace
would show float32 attention that no GPU runs. :class:`CudaAttentionMode` makes the choice that
``sdp_utils.cpp`` makes on an sm80-or-newer GPU (A100, H100) and calls the chosen kernel, whose
meta function gives the output dtypes. cuDNN attention, which some GPUs prefer, reads and writes
the same dtypes as flash attention and is not modelled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend
from torch.overrides import TorchFunctionMode

__all__ = ["CudaAttentionMode", "sdpa_backend"]

aten = torch.ops.aten

_HALF = (torch.float16, torch.bfloat16)


def _enabled(backend: SDPBackend) -> bool:
    return {
        SDPBackend.FLASH_ATTENTION: torch.backends.cuda.flash_sdp_enabled,
        SDPBackend.EFFICIENT_ATTENTION: torch.backends.cuda.mem_efficient_sdp_enabled,
        SDPBackend.MATH: torch.backends.cuda.math_sdp_enabled,
    }.get(backend, lambda: False)()


def _heads_ok(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, enable_gqa: bool) -> bool:
    # Batch sizes must match; head counts too, unless grouped-query attention divides them evenly.
    if not (query.shape[0] == key.shape[0] == value.shape[0]):
        return False
    q_heads, k_heads, v_heads = query.shape[1], key.shape[1], value.shape[1]
    if q_heads == k_heads == v_heads:
        return True
    return enable_gqa and k_heads == v_heads and k_heads > 0 and q_heads % k_heads == 0


def _dense_ok(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, enable_gqa: bool) -> bool:
    tensors = (query, key, value)
    return (
        all(t.dim() == 4 for t in tensors)
        and all(t.shape[2] > 0 and t.shape[0] > 0 and t.shape[1] > 0 for t in tensors)
        and all(t.stride(-1) == 1 or t.shape[-1] == 1 for t in tensors)
        and _heads_ok(query, key, value, enable_gqa)
    )


def _flash_ok(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    dtype: torch.dtype,
) -> bool:
    head = query.shape[-1]
    return (
        attn_mask is None
        and dtype in _HALF
        and key.shape[-1] == head == value.shape[-1]
        and head <= 256
        and not (is_causal and query.shape[-2] != key.shape[-2])
    )


def _efficient_ok(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, dtype: torch.dtype) -> bool:
    if dtype not in (*_HALF, torch.float32):
        return False
    # The minimum GEMM alignment on sm80+: 8 elements for half inputs, 4 for float32.
    alignment = 8 if dtype in _HALF else 4
    head, value_head = query.shape[-1], value.shape[-1]
    return key.shape[-1] == head and head % alignment == 0 and value_head % alignment == 0


def _autocast_dtype(tensor: torch.Tensor, autocast_dtype: torch.dtype | None) -> torch.dtype:
    """The dtype CUDA autocast gives an argument of a lower-precision op."""
    if autocast_dtype is not None and tensor.is_floating_point() and tensor.dtype != torch.float64:
        return autocast_dtype
    return tensor.dtype


def sdpa_backend(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    enable_gqa: bool = False,
    *,
    autocast_dtype: torch.dtype | None = None,
) -> SDPBackend:
    """The kernel an sm80+ GPU picks among flash, memory-efficient and math attention, in torch's
    priority order and honouring `sdpa_kernel`; `autocast_dtype` when CUDA autocast is on."""
    if not _dense_ok(query, key, value, enable_gqa):
        return SDPBackend.MATH
    dtypes = {_autocast_dtype(t, autocast_dtype) for t in (query, key, value)}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    for code in torch._C._get_sdp_priority_order():
        backend = SDPBackend(code)
        if not _enabled(backend):
            continue
        if backend == SDPBackend.MATH:
            return backend
        if dtype is None:
            continue
        if backend == SDPBackend.FLASH_ATTENTION and _flash_ok(
            query, key, value, attn_mask, is_causal, dtype
        ):
            return backend
        if backend == SDPBackend.EFFICIENT_ATTENTION and _efficient_ok(query, key, value, dtype):
            return backend
    return SDPBackend.MATH


def _fused(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor | None:
    """The fused kernel's output, or None when the GPU would take the math path."""
    autocast_dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
    backend = sdpa_backend(query, key, value, attn_mask, is_causal, enable_gqa, autocast_dtype=autocast_dtype)
    if backend == SDPBackend.MATH:
        return None

    def cast(tensor: torch.Tensor) -> torch.Tensor:  # as autocast casts a lower-precision op's inputs
        dtype = _autocast_dtype(tensor, autocast_dtype)
        return tensor if tensor.dtype == dtype else aten._to_copy.default(tensor, dtype=dtype)

    query, key, value = cast(query), cast(key), cast(value)
    if backend == SDPBackend.FLASH_ATTENTION:
        return aten._scaled_dot_product_flash_attention.default(
            query, key, value, dropout_p, is_causal, scale=scale
        )[0]
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # The kernel takes an additive bias in the query dtype, as sdpa's own conversion makes it.
        zeros = aten.zeros_like.default(attn_mask, dtype=query.dtype)
        attn_mask = aten.masked_fill.Scalar(zeros, aten.logical_not.default(attn_mask), float("-inf"))
    elif attn_mask is not None:
        attn_mask = cast(attn_mask)
    return aten._scaled_dot_product_efficient_attention.default(
        query, key, value, attn_mask, False, dropout_p, is_causal, scale=scale
    )[0]


class CudaAttentionMode(TorchFunctionMode):
    """Run ``F.scaled_dot_product_attention`` on fake CUDA tensors through the fused kernel a GPU
    would choose; calls a GPU would run on the math path keep torch's own decomposition."""

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention and args and args[0].device.type == "cuda":
            output = _fused(*args, **kwargs)
            if output is not None:
                return output
        return func(*args, **kwargs)
