# ruff: noqa
# fmt: off
# Source: diffusers 0.42.1 (PyPI), diffusers/models/transformers/transformer_stable_audio3.py,
# lines 19-20 and 92-108 (verbatim).
# Class (a): positions made in the dtype of a persistent `inv_freq` buffer, which a pipeline loaded
# with `torch_dtype=torch.bfloat16` converts: positions above 256 collide.
import torch
import torch.nn as nn



class StableAudio3RotaryEmbedding(nn.Module):
    """Shared rotary positional embedding. Stable Audio 3 applies the RoPE embeddings partially over only the first
    `2 * (dim // 2)` head channels).
    """

    def __init__(self, dim: int, base: int = 10000):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        # `persistent=True` so it appears in the state dict, matching the reference checkpoint key
        # `transformer.rotary_pos_emb.inv_freq`.
        self.register_buffer("inv_freq", inv_freq, persistent=True)

    def forward(self, seq_len: int, device: torch.device) -> torch.Tensor:
        t = torch.arange(seq_len, device=device, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)  # expect: AMP017
        return torch.cat((freqs, freqs), dim=-1)  # (seq_len, rot_dim)
