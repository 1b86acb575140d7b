# ruff: noqa
# fmt: off
# expect-none: AMP003
# (the half softmax feeds `@ v`; its kernel accumulates in float32, so it is not a hazard)
# Source: denoising-diffusion-pytorch 2.1.1 (PyPI), denoising_diffusion_pytorch/attend.py,
# lines 5-7, 17-21, 38 and 95-124 (verbatim).
# Class (g): the score product is an `einsum` whose spec is an f-string (no placeholders), scaled
# after the product and fed to a softmax without `dtype=torch.float32`; the same code with a
# plain string literal is flagged today (audiolm-pytorch, muse-maskgit-pytorch).
import torch
from torch import nn, einsum
import torch.nn.functional as F

def exists(val):
    return val is not None

def default(val, d):
    return val if exists(val) else d

class Attend(nn.Module):
    def forward(self, q, k, v):
        """
        einstein notation
        b - batch
        h - heads
        n, i, j - sequence length (base sequence length, source, target)
        d - feature dimension
        """

        q_len, k_len, device = q.shape[-2], k.shape[-2], q.device

        if self.flash:
            return self.flash_attn(q, k, v)

        scale = default(self.scale, q.shape[-1] ** -0.5)

        # similarity

        sim = einsum(f"b h i d, b h j d -> b h i j", q, k) * scale  # expect: AMP002

        # attention

        attn = sim.softmax(dim = -1)
        attn = self.attn_dropout(attn)

        # aggregate values

        out = einsum(f"b h i j, b h j d -> b h i d", attn, v)

        return out
