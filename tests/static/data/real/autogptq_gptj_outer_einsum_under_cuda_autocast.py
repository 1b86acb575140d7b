# ruff: noqa
# fmt: off
# Source: AutoGPTQ commit 9f7d37072917ab3a7545835f23e808294a542153 (GitHub AutoGPTQ/AutoGPTQ),
# auto_gptq/nn_modules/fused_gptj_attn.py, lines 3 and 12-20 (verbatim).
# Once taken for a false positive: `einsum("i , j -> i j", ...)`, an outer product of two float32
# vectors, runs as a broadcast multiply that CPU autocast leaves in float32. CUDA autocast has an
# einsum kernel and lowers the operands whatever the equation, so under the caller's CUDA autocast
# the angles are bf16/fp16 before the late `.float()`.
# expect-none: AMP001
import torch
def fixed_pos_embedding(x, seq_dim=1, seq_len=None):
    dim = x.shape[-1]
    if seq_len is None:
        seq_len = x.shape[seq_dim]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2) / dim))
    sinusoid_inp = (
        torch.einsum("i , j -> i j", torch.arange(seq_len, dtype=torch.float), inv_freq).to(x.device).float()  # expect: AMP017
    )
    return torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)
