# ruff: noqa
# fmt: off
# Source: transformers 4.46.3 (PyPI), transformers/models/llama/modeling_llama.py,
# lines 23, 26 and 60-77 (verbatim).
# Class (a): `hidden_states.to(torch.float32)` on the forward's input before the statistic; the
# canonical float32 RMSNorm that AMP006's fix produces must stay silent.
# expect-none: AMP006,AMP005
import torch
from torch import nn


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        """
        LlamaRMSNorm is equivalent to T5LayerNorm
        """
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)

    def extra_repr(self):
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"
