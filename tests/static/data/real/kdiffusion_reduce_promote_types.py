# ruff: noqa
# fmt: off
# Source: k-diffusion commit 4601bf085320592473f681a62808ed873d17fad5 (GitHub crowsonkb/k-diffusion),
# k_diffusion/models/image_transformer_v2.py, lines 4, 9, 14 and 98-113 (verbatim).
# False positive (issue 29): the statistics run in `reduce(torch.promote_types, (x.dtype, ...,
# torch.float32))`, float32 at least (float64 stays float64), not in the input's half dtype.
# expect-none: AMP006,AMP005
from functools import lru_cache, reduce
import torch
from . import flags, flops
@flags.compile_wrap
def rms_norm(x, scale, eps):
    dtype = reduce(torch.promote_types, (x.dtype, scale.dtype, torch.float32))
    mean_sq = torch.mean(x.to(dtype)**2, dim=-1, keepdim=True)
    scale = scale.to(dtype) * torch.rsqrt(mean_sq + eps)
    return x * scale.to(x.dtype)


@flags.compile_wrap
def scale_for_cosine_sim(q, k, scale, eps):
    dtype = reduce(torch.promote_types, (q.dtype, k.dtype, scale.dtype, torch.float32))
    sum_sq_q = torch.sum(q.to(dtype)**2, dim=-1, keepdim=True)
    sum_sq_k = torch.sum(k.to(dtype)**2, dim=-1, keepdim=True)
    sqrt_scale = torch.sqrt(scale.to(dtype))
    scale_q = sqrt_scale * torch.rsqrt(sum_sq_q + eps)
    scale_k = sqrt_scale * torch.rsqrt(sum_sq_k + eps)
