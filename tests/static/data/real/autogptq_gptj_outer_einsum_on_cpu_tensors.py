# ruff: noqa
# fmt: off
# Source: AutoGPTQ commit 9f7d37072917ab3a7545835f23e808294a542153 (GitHub AutoGPTQ/AutoGPTQ),
# auto_gptq/nn_modules/fused_gptj_attn.py, lines 3 and 12-20 (verbatim).
# The angles are made from `arange` tensors without a device, on the CPU, and moved to the GPU
# after: CUDA autocast, which lowers an einsum whatever its equation, dispatches on CUDA tensors only,
# and CPU autocast leaves this outer product (a broadcast multiply there) in float32. Once flagged.
# expect-none: AMP001, AMP017
import torch
def fixed_pos_embedding(x, seq_dim=1, seq_len=None):
    dim = x.shape[-1]
    if seq_len is None:
        seq_len = x.shape[seq_dim]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
    sinusoid_inp = (
        torch.einsum("i , j -> i j", torch.arange(seq_len, dtype=torch.float), inv_freq).to(x.device).float()
    )
    return torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)
