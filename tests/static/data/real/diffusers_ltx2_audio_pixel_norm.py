# ruff: noqa
# fmt: off
# Source: diffusers 0.42.1 (PyPI), diffusers/models/autoencoders/autoencoder_kl_ltx2_audio.py,
# lines 17-19 and 82-95 (verbatim).
# A per-pixel RMS norm after a convolution: `x**2` and its mean in the input's dtype. CUDA autocast
# runs `pow` in float32, so there the root and `x / rms` were float32 before any fix.
import torch
import torch.nn as nn
import torch.nn.functional as F


class LTX2AudioPixelNorm(nn.Module):
    """
    Per-pixel (per-location) RMS normalization layer.
    """

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean_sq = torch.mean(x**2, dim=self.dim, keepdim=True)  # expect: AMP006
        rms = torch.sqrt(mean_sq + self.eps)
        return x / rms
