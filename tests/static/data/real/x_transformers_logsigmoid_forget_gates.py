# ruff: noqa
# fmt: off
# Source: x-transformers 1.42.24 (PyPI), x_transformers/x_transformers.py, lines 8-10, 20, 571
# and 574-615 (verbatim).
# Class (g): the log-decay is spelled `F.logsigmoid(...)` (a function, not a `.sigmoid()` method),
# scaled, and accumulated by a reverse `cumsum`, all in the input's dtype.
import torch
import torch.nn.functional as F
from torch import nn, einsum, Tensor
from einops.layers.torch import Rearrange


class PerRowDataDependentAlibi(Module):
    def __init__(
        self,
        dim,
        heads,
        causal = True,
        dim_head = 8,
        post_log_scale = 1.
    ):
        super().__init__()
        assert causal, 'bidirectional not supported yet'

        self.scale = dim_head ** -0.5

        linear = nn.Linear(dim, heads * dim_head * 2, bias = False)

        self.to_forget_gates = nn.Sequential(
            linear,
            Rearrange('b n (qk h d) -> qk b h n d', qk = 2, d = dim_head)
        )

        self.post_log_scale = post_log_scale

    def forward(self, x):
        q, k = self.to_forget_gates(x)
        forget_gates = einsum('... i d, ... j d -> ... i j', q, k) * self.scale

        forget_gates = F.logsigmoid(forget_gates) * self.post_log_scale  # expect: AMP001

        # mask out upper triangle + diagonal

        n = x.shape[-2]
        causal_mask = torch.ones((n, n), dtype = torch.bool, device = x.device).triu()

        forget_gates = forget_gates.masked_fill(causal_mask, 0.)

        # reverse cumsum

        forget_gates = forget_gates.flip(dims = (-1,))
        forget_gates = forget_gates.cumsum(dim = -1)  # expect: AMP007
        forget_gates = forget_gates.flip(dims = (-1,))

        return forget_gates
