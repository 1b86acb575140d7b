"""flash-linear-attention's first RWKV7 layer, sized as its own layer tests size it."""

from __future__ import annotations

from typing import Any

import torch
from fla.layers.rwkv7 import RWKV7Attention


def factory() -> tuple[Any, tuple[torch.Tensor]]:
    layer = RWKV7Attention(hidden_size=64, head_dim=16, layer_idx=0, num_hidden_layers=2).eval()
    return layer, (torch.randn(2, 32, 64),)
