# ruff: noqa
# fmt: off
# Source: easydetect 0.7.10 (PyPI sdist), easydetect/nn/encoder.py, lines 422-438 (verbatim; the
# method dedented to a function), with its `import torch`.
# The grid and the frequencies are `arange` tensors made without a device, on the CPU; the caller
# moves the embedding to the GPU after. CUDA autocast dispatches on CUDA tensors only, so the
# matmuls run in float32 there. Once flagged (review 15).
# expect-none: AMP017
import torch
def build_2d_sincos_position_embedding(w, h, embed_dim=256, temperature=10000.0):
    """ """
    grid_w = torch.arange(int(w), dtype=torch.float32)
    grid_h = torch.arange(int(h), dtype=torch.float32)
    grid_w, grid_h = torch.meshgrid(grid_w, grid_h, indexing="ij")
    assert (
        embed_dim % 4 == 0
    ), "Embed dimension must be divisible by 4 for 2D sin-cos position embedding"
    pos_dim = embed_dim // 4
    omega = torch.arange(pos_dim, dtype=torch.float32) / pos_dim
    omega = 1.0 / (temperature**omega)

    out_w = grid_w.flatten()[..., None] @ omega[None]
    out_h = grid_h.flatten()[..., None] @ omega[None]

    return torch.concat([out_w.sin(), out_w.cos(), out_h.sin(), out_h.cos()], dim=1)[None, :, :]
