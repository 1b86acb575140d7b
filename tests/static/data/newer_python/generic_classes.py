"""PEP 695 type parameters on classes, functions and methods (Python 3.12)."""

from collections.abc import Callable, Sequence

import torch


class Buffer[T: torch.Tensor]:
    def __init__(self, items: Sequence[T]) -> None:
        self.items = list(items)

    def mapped[U](self, fn: Callable[[T], U]) -> list[U]:
        return [fn(item) for item in self.items]


class Registry[*Shapes, **Params]:
    def call(self, fn: Callable[Params, torch.Tensor], *args: Params.args, **kwargs: Params.kwargs) -> torch.Tensor:
        return fn(*args, **kwargs)


def first[T: (int, float)](values: Sequence[T]) -> T:
    return values[0]


def norm(x: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        return torch.nn.functional.layer_norm(x, x.shape[-1:])
