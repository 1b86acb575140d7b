"""Meta kernels stricter than the CUDA kernels they stand for, relaxed while a trace runs.

FakeTensors compute output shapes and dtypes with meta kernels. Where a meta kernel rejects a call
that the CUDA build runs, a trace on fake CUDA tensors would fail on a model that works on a GPU:

- `aten::_grouped_mm` (MoE experts in transformers): the meta kernel accepts bfloat16 only; CUDA
  runs other dtypes on its fallback path (a loop of `mm` over the groups) since torch 2.10, with
  the output in `out_dtype` or the inputs' dtype. Under autocast with float32 weights, transformers
  calls it with float32 operands.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

__all__ = ["relaxed_meta"]


def _grouped_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    from torch._meta_registrations import meta_grouped_mm

    if mat_a.dtype == mat_b.dtype == torch.bfloat16:
        return meta_grouped_mm(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
    # The shape checks of the bf16 kernel, on bf16 stand-ins; the dtype of the fallback path.
    torch._check(
        mat_a.dtype == mat_b.dtype, lambda: f"expected one dtype, got {mat_a.dtype} and {mat_b.dtype}"
    )
    half = torch.bfloat16
    out = meta_grouped_mm(
        mat_a.to(half),
        mat_b.to(half),
        offs=offs,
        bias=None if bias is None else bias.to(half),
        out_dtype=half,
    )
    return out.to(out_dtype or mat_a.dtype)


@contextmanager
def relaxed_meta() -> Iterator[None]:
    """The meta kernels above, registered for the `with` block."""
    library = torch.library.Library("aten", "IMPL")
    try:
        # torch 2.10 and 2.11 register their Python meta kernel for it in the same table, and refuse
        # a second one unless told to override (later versions override by default).
        try:
            library.impl("_grouped_mm", _grouped_mm, "Meta", allow_override=True)
        except TypeError:  # before torch 2.10: no such argument, and nothing to override
            library.impl("_grouped_mm", _grouped_mm, "Meta")
        yield
    finally:
        library._destroy()
