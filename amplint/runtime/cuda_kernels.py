"""Meta kernels stricter than the CUDA kernels they stand for, relaxed while a trace runs.

FakeTensors compute output shapes and dtypes with meta kernels. Where a meta kernel rejects a call
that the CUDA build runs, a trace on fake CUDA tensors would fail on a model that works on a GPU:

- `aten::_grouped_mm` (MoE experts in transformers): the meta kernel accepts bfloat16 only; CUDA
  runs other dtypes on its fallback path (a loop of `mm` over the groups) since torch 2.10, with
  the output in `out_dtype` or the inputs' dtype. Under autocast with float32 weights, transformers
  calls it with float32 operands.
- `aten::_thnn_fused_gru_cell` and `aten::_thnn_fused_lstm_cell` (`nn.GRUCell` and `nn.LSTMCell` on
  CUDA): no meta kernel at all, so a fake tensor would fall back to running the CUDA kernel. Their
  outputs take the gates' dtype: the new state (and cell state) of the hidden size, and a workspace
  of 5 (GRU) or 4 (LSTM) hidden sizes per row.
- `aten::cudnn_grid_sampler` and its backward: `F.grid_sample` (bilinear, zeros padding,
  `align_corners=True`, 4-d) runs cuDNN's kernel on a build with cuDNN, and it has no meta kernel.
  Its output is the input's channels at the grid's points, in the input's dtype; its gradients are
  shaped as the input and the grid.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from amplint.runtime.compat import check, destroy_library, meta_grouped_mm

__all__ = ["relaxed_meta"]


def _grouped_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    if mat_a.dtype == mat_b.dtype == torch.bfloat16:
        return meta_grouped_mm(mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)
    # The shape checks of the bf16 kernel, on bf16 stand-ins; the dtype of the fallback path.
    check(mat_a.dtype == mat_b.dtype, lambda: f"expected one dtype, got {mat_a.dtype} and {mat_b.dtype}")
    half = torch.bfloat16
    out = meta_grouped_mm(
        mat_a.to(half),
        mat_b.to(half),
        offs=offs,
        bias=None if bias is None else bias.to(half),
        out_dtype=half,
    )
    return out.to(out_dtype or mat_a.dtype)


def _gru_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    hx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    rows, hidden = hx.shape
    return input_gates.new_empty((rows, hidden)), input_gates.new_empty((rows, 5 * hidden))


def _lstm_cell(
    input_gates: torch.Tensor,
    hidden_gates: torch.Tensor,
    cx: torch.Tensor,
    input_bias: torch.Tensor | None = None,
    hidden_bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, hidden = cx.shape
    new = input_gates.new_empty
    return new((rows, hidden)), new((rows, hidden)), new((rows, 4 * hidden))


def _cudnn_grid_sampler(image: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
    return image.new_empty((image.shape[0], image.shape[1], grid.shape[1], grid.shape[2]))


def _cudnn_grid_sampler_backward(
    image: torch.Tensor, grid: torch.Tensor, grad_output: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return image.new_empty(image.shape), grid.new_empty(grid.shape)


@contextmanager
def relaxed_meta() -> Iterator[None]:
    """The meta kernels above, registered for the `with` block."""
    library = torch.library.Library("aten", "IMPL")
    try:
        # Some torch versions register their own Python meta kernel for it in the same table, and
        # refuse a second one unless told to override.
        library.impl("_grouped_mm", _grouped_mm, "Meta", allow_override=True)
        library.impl("_thnn_fused_gru_cell", _gru_cell, "Meta")
        library.impl("_thnn_fused_lstm_cell", _lstm_cell, "Meta")
        library.impl("cudnn_grid_sampler", _cudnn_grid_sampler, "Meta")
        library.impl("cudnn_grid_sampler_backward", _cudnn_grid_sampler_backward, "Meta")
        yield
    finally:
        destroy_library(library)
