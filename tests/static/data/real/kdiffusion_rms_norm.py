# ruff: noqa
# fmt: off
# Source: k-diffusion 0.1.1.post1 (PyPI), k_diffusion/models/image_transformer_v1.py,
# lines 6-7, 11, 82-86 and 94-104 (verbatim).
# Class (a): the statistic is computed in `torch.promote_types(x.dtype, torch.float32)`, which is
# float32 (or float64) for every input dtype: an upcast through a promoted dtype variable.
# expect-none: AMP006
import torch
from torch import nn

from . import flags


@flags.compile_wrap
def rms_norm(x, scale, eps):
    dtype = torch.promote_types(x.dtype, torch.float32)
    mean_sq = torch.mean(x.to(dtype)**2, dim=-1, keepdim=True)
    scale = scale.to(dtype) * torch.rsqrt(mean_sq + eps)
    return x * scale.to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, param_shape, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.ones(param_shape))

    def extra_repr(self):
        return f"shape={tuple(self.scale.shape)}, eps={self.eps}"

    def forward(self, x):
        return rms_norm(x, self.scale, self.eps)
