"""PEP 696 type parameter defaults (Python 3.13)."""

import torch


class Cache[K = str, V = torch.Tensor]:
    def __init__(self) -> None:
        self.store: dict[K, V] = {}


type Batch[T = torch.Tensor] = list[T]


def stack[T = torch.Tensor](items: Batch[T]) -> torch.Tensor:
    return torch.stack(items)
