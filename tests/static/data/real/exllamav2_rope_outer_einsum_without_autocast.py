# ruff: noqa
# fmt: off
# Source: exllamav2 commit b9c025b4b1ee78c0d34e700f2e474a02dfb13c90 (GitHub turboderp/exllamav2),
# exllamav2/device.py, lines 3-5, 11-14, 34-62 and 116-150 (verbatim).
# `einsum("i,j->ij", t, inv_freq)`, an outer product of float32 positions and frequencies (the
# sin/cos tables are cast to half after it), runs in float32 unless CUDA autocast is on, which has
# an einsum kernel and lowers it whatever the equation (CPU autocast runs it as a float32 `mul`).
# Read alone, the file is library code its caller may autocast: flagged here. exllamav2 casts its
# model to float16 and never autocasts, and in a project that does so it is not flagged
# (tests/static/test_modes.py checks that).
# expect-none: AMP001
def _torch_device(idx):
    if idx == -1: return "cpu"
    return f"cuda:{idx}"
from exllamav2.architecture import RopeStyle
from exllamav2 import rope

import torch
class ExLlamaV2DeviceContext:

    model: ExLlamaV2
    device_idx: int
    ready: bool

    scratch_bytes: int
    scratch_idx: int

    sin: torch.Tensor | None
    cos: torch.Tensor | None

    scratch: torch.Tensor | None

    stream: torch.cuda.Stream

    def __init__(
        self,
        model: ExLlamaV2,
        device_idx: int,
        scratch_bytes: int,
        archparams = None
    ):
        self.model = model
        self.device_idx = device_idx
        self.ready = False
        self.scratch = None
        self.scratch_bytes = scratch_bytes
        self.scratch_idx = 0
    def prepare_sincos(self):

        device = _torch_device(self.device_idx)

        cfg = self.model.config
        if self.archparams.rope_style == RopeStyle.NONE:
            self.sin = torch.zeros((1,), device = device, dtype = torch.half)
            self.cos = self.sin
            return

        # RoPE params

        inv_freq, scaling_factor = rope.get_rope_params(device, cfg)

        # Common

        scale = cfg.scale_pos_emb or 1.0
        t = torch.arange(cfg.max_seq_len, device = device, dtype = torch.float32)
        if scale != 1.0: t /= scale

        freqs = torch.einsum("i,j->ij", t, inv_freq)  # expect: AMP017
        if self.archparams.rope_style == RopeStyle.NEOX:
            emb = torch.cat((freqs, freqs), dim=-1)
        elif self.archparams.rope_style == RopeStyle.GPTJ:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
        else:
            raise ValueError()

        self.sin = emb.sin()[None, None, :, :]
        self.cos = emb.cos()[None, None, :, :]
        if scaling_factor != 1.0:
            self.sin *= scaling_factor
            self.cos *= scaling_factor
        self.sin = self.sin.half()
        self.cos = self.cos.half()
