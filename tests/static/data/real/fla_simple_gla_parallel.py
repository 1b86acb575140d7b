# ruff: noqa
# fmt: off
# Source: fla-core 0.3.2 (PyPI), fla/ops/simple_gla/naive.py, lines 3-7 and 94-114 (verbatim).
# Class (a): `.to(torch.float32)` applied to every input at the function's entry (inside a
# `map(lambda ...)`), so `g.cumsum(-1)` and `q @ k^T` are float32.
# expect-none: AMP007,AMP002
from typing import Optional

import torch
import torch.nn.functional as F
from einops import rearrange


def naive_parallel_simple_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: Optional[float] = None
):
    q, k, v, g = map(lambda x: rearrange(x, 'b t h ... -> b h t ...').to(torch.float32), [q, k, v, g])
    if scale is None:
        scale = 1.0 / q.shape[-1] ** 0.5
    dtype = q.dtype
    A = (q @ k.transpose(-1, -2) * scale)
    if g is not None:
        g = g.cumsum(-1)
        D = (g.unsqueeze(-1) - g.unsqueeze(-2)).tril().exp().tril()
        A = A * D
    else:
        A = A.tril()
    o = A @ v
    o = o.transpose(1, 2)
    return o.to(dtype), A
