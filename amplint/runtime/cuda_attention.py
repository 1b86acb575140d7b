"""Scaled dot-product attention on fake CUDA tensors, as a GPU runs it.

On a GPU, ``scaled_dot_product_attention`` runs a fused kernel (flash, memory-efficient or cuDNN
attention) that reads and writes the input dtype, and falls back to the math path, which upcasts
half inputs to float32, only when no fused kernel accepts the call. The CUDA kernel chooser is not
compiled into a CPU-only build, so there fake CUDA tensors always take the math path and a trace
would show float32 attention that no GPU runs. :class:`CudaAttentionMode` makes the choice that
``sdp_utils.cpp`` makes on the emulated GPU (its compute capability decides which kernels exist
and whether they take bf16) and calls the chosen kernel, whose meta function gives the output
dtypes. Every node of the call is annotated with the kernel's name (``amplint_attention``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch.nn.attention import SDPBackend
from torch.overrides import TorchFunctionMode

from amplint.runtime import compat
from amplint.runtime.gpu import DEFAULT_GPU, GPUS, Gpu

__all__ = ["KERNEL_NAMES", "CudaAttentionMode", "sdpa_backend"]

aten = torch.ops.aten

_HALF = (torch.float16, torch.bfloat16)
KERNEL_NAMES = {
    SDPBackend.FLASH_ATTENTION: "flash",
    SDPBackend.EFFICIENT_ATTENTION: "efficient",
    SDPBackend.CUDNN_ATTENTION: "cudnn",
    SDPBackend.MATH: "math",
}


def _enabled(backend: SDPBackend) -> bool:
    return {
        SDPBackend.FLASH_ATTENTION: torch.backends.cuda.flash_sdp_enabled,
        SDPBackend.EFFICIENT_ATTENTION: torch.backends.cuda.mem_efficient_sdp_enabled,
        SDPBackend.CUDNN_ATTENTION: torch.backends.cuda.cudnn_sdp_enabled,
        SDPBackend.MATH: torch.backends.cuda.math_sdp_enabled,
    }.get(backend, lambda: False)()


@dataclass(frozen=True)
class _Call:
    """One `scaled_dot_product_attention` call as the kernel chooser sees it; `dtype` is the one
    dtype its inputs have (after autocast)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None
    is_causal: bool
    enable_gqa: bool
    dtype: torch.dtype

    def heads_ok(self, same_kv: bool = True) -> bool:
        # Batch sizes must match; head counts too, unless grouped-query attention divides them
        # evenly (cuDNN lets the key and value head counts differ as well).
        if not (self.query.shape[0] == self.key.shape[0] == self.value.shape[0]):
            return False
        q_heads, k_heads, v_heads = self.query.shape[1], self.key.shape[1], self.value.shape[1]
        if q_heads == k_heads == v_heads:
            return True
        if not self.enable_gqa or k_heads <= 0 or v_heads <= 0:
            return False
        return q_heads % k_heads == 0 and q_heads % v_heads == 0 and (k_heads == v_heads or not same_kv)

    def dense_ok(self, unit_head_exempt: bool) -> bool:
        """What every fused kernel needs: 4-d inputs, non-empty sequences, a last dim of stride 1
        (a head size of 1 is exempt for flash and cuDNN, by the query's) and a mask's too."""
        tensors = (self.query, self.key, self.value)
        strides_ok = all(t.stride(-1) == 1 for t in tensors) or (
            unit_head_exempt and self.query.shape[-1] == 1
        )
        mask = self.mask
        return (
            all(t.dim() == 4 for t in tensors)
            and self.query.shape[2] > 0
            and self.key.shape[2] > 0
            and strides_ok
            and (mask is None or mask.stride(-1) == 1 or mask.shape[-1] == 1)
        )

    def low_precision_ok(self, gpu: Gpu) -> bool:
        return self.dtype == torch.float16 or (self.dtype == torch.bfloat16 and gpu.native_bf16)


def _flash_ok(call: _Call, gpu: Gpu) -> bool:
    head = call.query.shape[-1]
    return (
        gpu.capability >= (8, 0)
        and call.mask is None
        and call.low_precision_ok(gpu)
        and call.key.shape[-1] == head == call.value.shape[-1]
        and head <= 256
        and not (call.is_causal and call.query.shape[-2] != call.key.shape[-2])
        and call.dense_ok(unit_head_exempt=True)
        and call.heads_ok()
    )


def _efficient_ok(call: _Call, gpu: Gpu) -> bool:
    if not (call.dtype == torch.float32 or call.low_precision_ok(gpu)):
        return False
    # The minimum GEMM alignment: 8 elements for half inputs; for float32, 4 where tensor cores
    # take it (sm80+) and 1 before.
    alignment = 8 if call.dtype in _HALF else 4 if gpu.capability >= (8, 0) else 1
    head, value_head = call.query.shape[-1], call.value.shape[-1]
    return (
        gpu.capability >= (5, 0)
        and call.key.shape[-1] == head
        and head % alignment == 0
        and value_head % alignment == 0
        and call.dense_ok(unit_head_exempt=False)
        # No grouped-query attention: an H100 with torch 2.11 runs GQA calls the kernel would
        # otherwise take (float32, head sizes over 256) on the math path (docs/cuda-parity.md).
        and call.heads_ok()
        and call.query.shape[1] == call.key.shape[1] == call.value.shape[1]
    )


def _cudnn_mask_ok(call: _Call) -> bool:
    mask, query, key = call.mask, call.query, call.key
    if mask is None:
        return True
    if mask.dim() == 2:
        return mask.shape[0] in (1, query.shape[2]) and mask.shape[1] in (1, key.shape[2])
    if mask.dim() != 4:
        return False
    wanted = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    return all(size in (1, want) for size, want in zip(mask.shape, wanted, strict=True))


def _cudnn_ok(call: _Call, gpu: Gpu) -> bool:
    heads = (call.query.shape[-1], call.key.shape[-1], call.value.shape[-1])
    # Head sizes up to 256 on sm90 (measured on an H100, docs/cuda-parity.md), 128 elsewhere.
    largest = 256 if gpu.capability == (9, 0) else 128
    return (
        gpu.capability >= (8, 0)
        and call.low_precision_ok(gpu)
        and all(h <= largest and h % 8 == 0 for h in heads)
        and call.key.shape[2] != 1
        and call.query.shape[0] <= 65535
        and call.query.shape[1] <= 65535
        and _cudnn_mask_ok(call)
        and not torch.are_deterministic_algorithms_enabled()
        and call.dense_ok(unit_head_exempt=True)
        and call.heads_ok(same_kv=False)
    )


_CHECKS = {
    SDPBackend.FLASH_ATTENTION: _flash_ok,
    SDPBackend.EFFICIENT_ATTENTION: _efficient_ok,
    SDPBackend.CUDNN_ATTENTION: _cudnn_ok,
}


def _priority(gpu: Gpu) -> list[SDPBackend]:
    """torch's order (flash, efficient, math, cuDNN unless `sdpa_kernel` set another); sm90 GPUs
    put cuDNN first, as torch does with the cuDNN (9.15.1 or newer) its CUDA wheels ship."""
    order = [SDPBackend(code) for code in compat.sdp_priority_order()]
    if gpu.capability[0] == 9 and SDPBackend.CUDNN_ATTENTION in order:
        order.remove(SDPBackend.CUDNN_ATTENTION)
        order.insert(0, SDPBackend.CUDNN_ATTENTION)
    return order


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
    gpu: Gpu = GPUS[DEFAULT_GPU],
) -> SDPBackend:
    """The kernel `gpu` picks among flash, memory-efficient, cuDNN and math attention, in torch's
    priority order and honouring `sdpa_kernel`; `autocast_dtype` when CUDA autocast is on."""
    dtypes = {_autocast_dtype(t, autocast_dtype) for t in (query, key, value)}
    dtype = dtypes.pop() if len(dtypes) == 1 else None
    for backend in _priority(gpu):
        if not _enabled(backend):
            continue
        if backend == SDPBackend.MATH:
            return backend
        check = _CHECKS.get(backend)
        if dtype is None or check is None:
            continue
        if check(_Call(query, key, value, attn_mask, is_causal, enable_gqa, dtype), gpu):
            return backend
    return SDPBackend.MATH


def _fused(
    backend: SDPBackend,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """The output of the fused kernel `backend`."""
    autocast_dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None

    def cast(tensor: torch.Tensor) -> torch.Tensor:  # as autocast casts a lower-precision op's inputs
        dtype = _autocast_dtype(tensor, autocast_dtype)
        return tensor if tensor.dtype == dtype else aten._to_copy.default(tensor, dtype=dtype)

    query, key, value = cast(query), cast(key), cast(value)
    if backend == SDPBackend.FLASH_ATTENTION:
        return aten._scaled_dot_product_flash_attention.default(
            query, key, value, dropout_p, is_causal, scale=scale
        )[0]
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # The kernels take an additive bias in the query dtype, as sdpa's own conversion makes it.
        zeros = aten.zeros_like.default(attn_mask, dtype=query.dtype)
        attn_mask = aten.masked_fill.Scalar(zeros, aten.logical_not.default(attn_mask), float("-inf"))
    elif attn_mask is not None:
        attn_mask = cast(attn_mask)
    if backend == SDPBackend.CUDNN_ATTENTION:
        return aten._scaled_dot_product_cudnn_attention.default(
            query, key, value, attn_mask, False, dropout_p, is_causal, False, scale=scale
        )[0]
    return aten._scaled_dot_product_efficient_attention.default(
        query, key, value, attn_mask, False, dropout_p, is_causal, scale=scale
    )[0]


# How `scaled_dot_product_attention`'s arguments bind, read off `_fused` (which takes them after the
# backend): the chooser needs them by name whatever way the call passed them.
_SIGNATURE = inspect.signature(_fused)


class CudaAttentionMode(TorchFunctionMode):
    """Run ``F.scaled_dot_product_attention`` on fake CUDA tensors through the kernel `gpu` would
    choose; calls it would run on the math path keep torch's own decomposition."""

    def __init__(self, gpu: Gpu = GPUS[DEFAULT_GPU]) -> None:
        super().__init__()
        self.gpu = gpu

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Sequence[type],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention or not args or args[0].device.type != "cuda":
            return func(*args, **kwargs)
        bound = _SIGNATURE.bind(None, *args, **kwargs)
        bound.apply_defaults()
        call = bound.arguments
        query, key, value, attn_mask = call["query"], call["key"], call["value"], call["attn_mask"]
        is_causal, enable_gqa = call["is_causal"], call["enable_gqa"]
        autocast_dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else None
        backend = sdpa_backend(
            query, key, value, attn_mask, is_causal, enable_gqa, autocast_dtype=autocast_dtype, gpu=self.gpu
        )
        with fx_traceback.annotate({"amplint_attention": KERNEL_NAMES[backend]}):
            if backend == SDPBackend.MATH:
                return func(*args, **kwargs)
            return _fused(backend, *args, **kwargs)
