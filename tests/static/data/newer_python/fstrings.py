"""PEP 701 f-strings (Python 3.12): the same quotes inside, backslashes and comments in fields."""

import torch

names = ["a", "b"]
joined = f"{", ".join(names)}"
nested = f"{f"{f"{1 + 1}"}"}"
escaped = f"{"\n".join(names)}"
spread = f"{
    len(names)  # a comment inside a field
}"
deep = f"{'a' + f"{names[0]}"}"


def describe(x: torch.Tensor) -> str:
    return f"{x.dtype!r:>{len("dtype")}}"
