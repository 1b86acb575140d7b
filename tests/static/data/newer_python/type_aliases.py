"""PEP 695 type aliases (Python 3.12)."""

import torch

type Tensor = torch.Tensor
type Pair[T] = tuple[T, T]
type Nested[K, V] = dict[K, list[Pair[V]]]


def scaled(x: Tensor) -> Tensor:
    scaler = torch.cuda.amp.GradScaler()
    return scaler.scale(x)
