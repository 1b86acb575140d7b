# ruff: noqa
# fmt: off
# Source: fla-core 0.3.2 (PyPI), fla/ops/hgrn/naive.py, lines 3-5 and 34-63 (verbatim).
# Class (a): the inputs are upcast at the function's entry, through `map(lambda i: i.float(), ...)`,
# so the cumulative sum of the gate `g` and the `exp` of it run in float32.
# expect-none: AMP007,AMP001
from typing import Optional

import torch


def naive_chunk_hgrn(
    x: torch.Tensor,
    g: torch.Tensor,
    initial_state: Optional[torch.Tensor] = None,
    output_final_state: Optional[bool] = False,
    chunk_size: int = 64
) -> torch.Tensor:
    dtype = x.dtype
    x, g = map(lambda i: i.float(), (x, g))
    B, T, D = x.shape

    gc = g.view(B, chunk_size, D).cumsum(-2).view_as(g)
    h = torch.zeros(B, D, dtype=torch.float, device=x.device)
    o = torch.zeros_like(x)

    final_state = None
    if initial_state is not None:
        h += initial_state

    for i in range(0, T, chunk_size):
        hp = h
        h = torch.zeros(B, D, dtype=torch.float, device=x.device)
        for j in range(i, i + chunk_size):
            h = g[:, j].exp() * h + x[:, j]
            o[:, j] = hp * gc[:, j].exp() + h
        h = o[:, j].clone()

    if output_final_state:
        final_state = h
    return o.to(dtype), final_state
