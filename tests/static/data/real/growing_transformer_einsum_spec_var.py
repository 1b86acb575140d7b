# ruff: noqa
# fmt: off
# expect-none: AMP003
# (the half softmax feeds `@ v`; its kernel accumulates in float32, so it is not a hazard)
# Source: github.com/plonerma/growing-transformer, src/growing_transformer/scaledDotProductAttention.py
# @ 1718751a9935e4a9e1c6d9a62daaa139a3156320, lines 1-8 and 43-73 (trimmed: the grow/degrow
# machinery is left out; kept lines verbatim).
# Class (g): the einsum spec is a variable (`einsum_str = "qbhe,kbhe->bhqk"`), the product is
# divided by sqrt(d_head) afterwards and the softmax has no `dtype=torch.float32`.
from typing import Any, Iterable, Mapping, Optional

import torch

from .base import GrowingModule


class GrowingScaledDotProductAttention(GrowingModule):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.batch_first:
            x = x.transpose(1, 0)

        length, batch_size, _ = x.size()

        q = self.query_linear(x).view(length, batch_size, self.heads, -1)

        k = self.key_linear(x).view(length, batch_size, self.heads, -1)

        # Batch (b) and head (h) dimensions remain intact
        # Query dimension (q) remains in the same place
        # Embedding values (e) are used in actual dot product
        einsum_str = "qbhe,kbhe->bhqk"
        product: torch.Tensor = torch.einsum(einsum_str, q, k)  # expect: AMP002

        if self.new_neurons is not None:
            assert self._weight is not None and self._bias is not None

            q_novel = torch.nn.functional.linear(x, self._weight[0], self._bias[0])
            q_novel = q_novel.view(length, batch_size, self.heads, -1)
            q_novel = q_novel * self.new_neurons

            k_novel = torch.nn.functional.linear(x, self._weight[1], self._bias[1])
            k_novel = k_novel.view(length, batch_size, self.heads, -1)

            product = product + torch.einsum(einsum_str, q_novel, k_novel)  # expect: AMP002

        product = product / torch.sqrt(torch.tensor(self.d_head))

        return torch.softmax(product, dim=-1)
