"""Which autocast policy decided a traced op's dtype, from what torch itself says about the op."""

from __future__ import annotations

import torch

from amplint.runtime.compat import OpOverload, has_kernel_for

# Post-dispatch graphs show the implementation (`_softmax`) of a composite op that autocast lists
# under its public name (`softmax.int`).
_AUTOCAST_NAME = {
    "_softmax": "aten::softmax.int",
    "_log_softmax": "aten::log_softmax.int",
    "native_layer_norm": "aten::layer_norm",
    "native_group_norm": "aten::group_norm",
    "_fused_rms_norm": "aten::rms_norm",
    "_scaled_dot_product_flash_attention": "aten::scaled_dot_product_attention",
    "_scaled_dot_product_efficient_attention": "aten::scaled_dot_product_attention",
    "_scaled_dot_product_cudnn_attention": "aten::scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu": "aten::scaled_dot_product_attention",
}
# Listed ops that run in float32 unless the call passes a dtype (autocast's fp32_set_opt_dtype).
FP32_SET_OPT_DTYPE = frozenset(
    {
        "_softmax",
        "softmax",
        "_log_softmax",
        "log_softmax",
        "prod",
        "cumprod",
        "cumsum",
        "linalg_vector_norm",
        "sum",
    }
)
# Listed ops that run in the widest input dtype (autocast's promote list).
PROMOTE = frozenset(
    {
        "addcdiv",
        "addcmul",
        "atan2",
        "bilinear",
        "cross",
        "dot",
        "grid_sampler",
        "index_put",
        "scatter_add",
        "tensordot",
        "cat",
        "stack",
    }
)


def autocast_key(device: str) -> str:
    return "AutocastCUDA" if device == "cuda" else "AutocastCPU"


def is_listed(op: OpOverload, device: str) -> bool:
    """Whether autocast on `device` has a kernel for the op (or the composite it implements)."""
    name = _AUTOCAST_NAME.get(op.overloadpacket.__name__, op.name())
    try:
        return has_kernel_for(name, autocast_key(device))
    except RuntimeError:  # an operator name this torch does not know
        return False


def classify(
    op: OpOverload,
    dtype: torch.dtype | None,
    cast_inputs: list[torch.dtype],
    *,
    device: str,
    autocast_dtype: torch.dtype,
    autocast: bool,
) -> str:
    """The policy of a non-cast op. `cast_inputs` are the dtypes autocast cast this op's inputs to."""
    if not autocast:
        return "inherited"
    name = op.overloadpacket.__name__
    listed = bool(cast_inputs) or is_listed(op, device)
    if not listed:
        return "inherited"
    if name in PROMOTE:
        return "promote"
    if dtype == autocast_dtype and (not cast_inputs or all(d == autocast_dtype for d in cast_inputs)):
        return "lower_precision"
    if name in FP32_SET_OPT_DTYPE:
        return "fp32_set_opt_dtype"
    return "fp32"
