# ruff: noqa
# fmt: off
# Source: unsloth 2026.10.9 (PyPI sdist), unsloth/models/llama.py, lines 2771-2832 and 2861-2875
# (verbatim but for the class's `_PerDeviceRopeCache` base, dropped; `_set_cos_sin_cache`'s
# bookkeeping after line 2875 left out and its return added).
# The inverse frequencies are made in float32 on purpose (`.float()`, `dtype = torch.float32`). A
# model loaded with a half `dtype=`/`torch_dtype=` keeps them so (issue 29, review 3: buffers built
# in float32 taken as half); `.half()` or `.to(torch.bfloat16)` on the built model converts them.
# With no execution mode (this file alone), whoever runs it may convert it: flagged, conditional.
# tests/static/test_modes.py runs it under each kind of mode.
import math

import torch


class LongRopeRotaryEmbedding(torch.nn.Module):
    # For Phi 3.5 128K; see microsoft/Phi-3.5-mini-instruct modeling_phi3.py
    def __init__(
        self,
        dim = None,
        max_position_embeddings = 131072,
        original_max_position_embeddings = 4096,
        base = 10000,
        short_factor = None,
        long_factor = None,
        device = None,
        config = None,
    ):
        super().__init__()
        assert short_factor is not None
        assert long_factor is not None
        assert type(original_max_position_embeddings) is int

        if config is not None:
            base = _get_rope_theta(config, default = base)
            partial_rotary_factor = (
                config.partial_rotary_factor if hasattr(config, "partial_rotary_factor") else 1.0
            )
            dim = int((config.hidden_size // config.num_attention_heads))
            device = DEVICE_TYPE_TORCH
            max_position_embeddings = config.max_position_embeddings

        self.dim = dim
        self.max_position_embeddings = max_position_embeddings
        self.original_max_position_embeddings = original_max_position_embeddings
        self.base = base
        # Dynamic RoPE starts at a max of 4 * 8192 tokens and grows iteratively.
        self.current_rope_size = min(original_max_position_embeddings, self.max_position_embeddings)
        self.multi_gpu_short_cos_cached = [None] * DEVICE_COUNT
        self.multi_gpu_short_sin_cached = [None] * DEVICE_COUNT
        self.multi_gpu_long_cos_cached = [None] * DEVICE_COUNT
        self.multi_gpu_long_sin_cached = [None] * DEVICE_COUNT

        # Long RoPE is like RoPE except short sequences have one cos/sin and long sequences another.
        inv_freq_shape = (
            torch.arange(0, self.dim, 2, dtype = torch.int64, device = "cpu").float() / self.dim
        )
        short_factor = torch.tensor(short_factor, device = "cpu", dtype = torch.float32)
        long_factor = torch.tensor(long_factor, device = "cpu", dtype = torch.float32)
        short_inv_freq = 1.0 / (short_factor * self.base**inv_freq_shape)
        long_inv_freq = 1.0 / (long_factor * self.base**inv_freq_shape)

        # Phi-3 scale factor.
        scale = self.max_position_embeddings / self.original_max_position_embeddings
        if scale <= 1.0:
            scaling_factor = 1.0
        else:
            scaling_factor = math.sqrt(
                1 + math.log(scale) / math.log(self.original_max_position_embeddings)
            )
        self.scaling_factor = scaling_factor

        self.register_buffer("short_inv_freq", short_inv_freq, persistent = False)
        self.register_buffer("long_inv_freq", long_inv_freq, persistent = False)

        # The short-sequence cache is computed here, on CPU, and copied to a device on first use. Kept
        # off the buffers so a later load refilling short_inv_freq cannot reach it (#884).

    def _set_cos_sin_cache(self, seq_len, device, dtype):
        # The original Llama codebase creates these on the target device in FP32 and multiplies in FP32.
        self.current_rope_size = seq_len

        t = torch.arange(
            self.current_rope_size, device = self.long_inv_freq.device, dtype = torch.int64
        ).float()
        freqs = torch.outer(t, self.long_inv_freq)  # expect: AMP017
        emb = torch.cat((freqs, freqs), dim = -1)
        cos_cached = (emb.cos() * self.scaling_factor).to(
            dtype = dtype, device = device, non_blocking = True
        )
        sin_cached = (emb.sin() * self.scaling_factor).to(
            dtype = dtype, device = device, non_blocking = True
        )
        return cos_cached, sin_cached
