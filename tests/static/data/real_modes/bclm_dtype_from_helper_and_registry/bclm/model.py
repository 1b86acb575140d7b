# bclm-pytorch 1.0.7, bclm/model.py (Apache-2.0), trimmed to the oscillator mixer.
from __future__ import annotations

from typing import Optional

import torch
import torch.nn as nn


@torch.jit.script
def _build_osc_kernel(
    t: torch.Tensor,
    log_alpha: torch.Tensor,
    log_omega: torch.Tensor,
    phi: torch.Tensor,
    log_amp: torch.Tensor,
    clamp_min: float,
) -> torch.Tensor:
    """Build the causal impulse-response kernel from oscillator parameters."""
    alpha = torch.exp(log_alpha).clamp_min(clamp_min)
    omega = torch.exp(log_omega)
    amp = torch.exp(log_amp)

    at = alpha.unsqueeze(-1) * t
    phase = omega.unsqueeze(-1) * t + phi.unsqueeze(-1)
    k_osc = (amp.unsqueeze(-1) * torch.exp(-at) * torch.cos(phase)).sum(1)
    return k_osc


class CausalOscillatorFilter(nn.Module):
    """Learnable causal filter via damped oscillators."""

    def __init__(self, dim: int, n_pairs: int, clamp_min_decay: float, max_len: int) -> None:
        super().__init__()
        self.clamp_min_decay = float(clamp_min_decay)

        self.register_buffer(
            "_t",
            torch.arange(max_len, dtype=torch.float32),
            persistent=False,
        )

        self.log_alpha = nn.Parameter(torch.randn(dim, n_pairs) * 0.1 - 2.0)
        self.log_omega = nn.Parameter(torch.randn(dim, n_pairs) * 0.1 - 1.0)
        self.phi = nn.Parameter(torch.randn(dim, n_pairs) * 0.5)
        self.log_amp = nn.Parameter(torch.randn(dim, n_pairs) * 0.1 - 1.0)

        self._cached_k_f: Optional[torch.Tensor] = None

    def _get_time(self, seqlen: int, device: torch.device) -> torch.Tensor:
        if seqlen <= self._t.size(0):
            return self._t[:seqlen]
        return torch.arange(seqlen, device=device, dtype=torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seqlen = x.size(1)
        x_dtype = x.dtype

        x_ct = x.transpose(1, 2).contiguous().float()
        n_fft = 2 * seqlen

        t = self._get_time(seqlen, x.device)
        k = _build_osc_kernel(
            t,
            self.log_alpha, self.log_omega, self.phi, self.log_amp,
            self.clamp_min_decay,
        )
        k_f = torch.fft.rfft(k.float(), n=n_fft)

        y = torch.fft.irfft(
            torch.fft.rfft(x_ct, n=n_fft) * k_f.unsqueeze(0),
            n=n_fft,
        )[:, :, :seqlen]

        return y.transpose(1, 2).to(dtype=x_dtype)


class HarmonicMixerBlock(nn.Module):
    """Gated mixer that uses the oscillator filter for sequence mixing."""

    def __init__(self, dim: int, config) -> None:
        super().__init__()
        self.in_proj = nn.Linear(dim, 2 * dim, bias=False)
        self.osc = CausalOscillatorFilter(
            dim=dim,
            n_pairs=config.osc_n_pairs,
            clamp_min_decay=config.osc_clamp_min_decay,
            max_len=config.max_seq_len,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u, z = self.in_proj(x).chunk(2, dim=-1)
        u = self.osc(u)
        return u * z


class BCLM1Model(nn.Module):
    """Hybrid language model: oscillator-based sequence mixing."""

    def __init__(self, config) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            [HarmonicMixerBlock(config.embed_dim, config) for _ in range(config.n_layers)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
