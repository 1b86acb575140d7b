"""Which attention kernel the emulation runs `scaled_dot_product_attention` on, and that the trace
shows the dtypes of that kernel rather than of the math fallback.

The expected backends follow the constraints in PyTorch's `sdp_utils.cpp`, for an A100 unless a
test names another GPU (`PER_GPU`): flash
attention takes half inputs without a mask and with equal head sizes up to 256, and causal only
for square attention; memory-efficient attention takes masks and float32 when head sizes are
multiples of the GEMM alignment (8 for half, 4 for float32); everything else runs on the math path.
`test_cuda_parity.py` checks the same choices against a real GPU.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

from amplint.runtime import trace  # noqa: E402
from amplint.runtime.cuda_attention import sdpa_backend  # noqa: E402

FLASH, EFFICIENT, MATH = SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH
BF16 = torch.bfloat16


def _qkv(
    heads: int = 4,
    kv_heads: int = 4,
    q_len: int = 16,
    kv_len: int = 16,
    head: int = 64,
    dtype: torch.dtype = BF16,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.empty(2, heads, q_len, head, dtype=dtype),
        torch.empty(2, kv_heads, kv_len, head, dtype=dtype),
        torch.empty(2, kv_heads, kv_len, head, dtype=dtype),
    )


BOOL_MASK = torch.ones(16, 16, dtype=torch.bool)

CHOICES = [
    ("half without mask: flash", _qkv(), {}, None, FLASH),
    ("float16 causal: flash", _qkv(dtype=torch.float16), {"is_causal": True}, None, FLASH),
    ("odd head size is fine for flash", _qkv(head=60), {}, None, FLASH),
    ("boolean mask: efficient", _qkv(), {"attn_mask": BOOL_MASK}, None, EFFICIENT),
    ("causal, fewer queries than keys: efficient", _qkv(q_len=1), {"is_causal": True}, None, EFFICIENT),
    ("float32 without autocast: efficient", _qkv(dtype=torch.float32), {}, None, EFFICIENT),
    ("float32 under bf16 autocast: flash", _qkv(dtype=torch.float32), {}, BF16, FLASH),
    ("head size 260 unaligned: math", _qkv(head=260), {}, None, MATH),
    ("head size 264 too large for flash: efficient", _qkv(head=264), {}, None, EFFICIENT),
    ("float32 head size 6: math", _qkv(head=6, dtype=torch.float32), {}, None, MATH),
    ("grouped-query attention: flash", _qkv(kv_heads=2), {"enable_gqa": True}, None, FLASH),
    ("different head counts without enable_gqa: math", _qkv(kv_heads=2), {}, None, MATH),
    ("float64: math", _qkv(dtype=torch.float64), {}, None, MATH),
]


@pytest.mark.parametrize(
    ("name", "qkv", "kwargs", "autocast", "expected"), CHOICES, ids=[c[0] for c in CHOICES]
)
def test_backend_choice(
    name: str, qkv: tuple[torch.Tensor, ...], kwargs: dict, autocast: torch.dtype | None, expected: SDPBackend
) -> None:
    assert sdpa_backend(*qkv, **kwargs, autocast_dtype=autocast) == expected


def test_sdpa_kernel_context_is_honoured() -> None:
    with sdpa_kernel([SDPBackend.MATH]):
        assert sdpa_backend(*_qkv()) == MATH
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        assert sdpa_backend(*_qkv()) == EFFICIENT
    assert sdpa_backend(*_qkv()) == FLASH


def _ops(graph: object) -> list[tuple[str, str | None]]:
    return [(n.op, n.dtype) for n in graph.nodes if n.policy != "input"]  # type: ignore[attr-defined]


def test_trace_runs_the_fused_kernel_in_the_autocast_dtype() -> None:
    graph = trace(F.scaled_dot_product_attention, _qkv(dtype=torch.float32), {"is_causal": True})
    ops = _ops(graph)
    assert ("_scaled_dot_product_flash_attention", "bfloat16") in ops
    # No float32 math path: the only float32 values are the inputs.
    assert all(dtype != "float32" for op, dtype in ops if op != "_to_copy")
    attention = graph.find("_scaled_dot_product_flash_attention")[0]
    assert attention.policy == "lower_precision"
    assert [graph.node(i).policy for i in attention.inputs] == ["autocast_cast"] * 3


def test_trace_with_a_boolean_mask_runs_efficient_attention_on_an_additive_bias() -> None:
    q, k, v = _qkv(dtype=torch.float32)
    graph = trace(F.scaled_dot_product_attention, (q, k, v, BOOL_MASK))
    attention = graph.find("_scaled_dot_product_efficient_attention")[0]
    assert attention.dtype == "bfloat16"
    assert attention.input_dtypes == ["bfloat16"] * 4


def test_trace_keeps_the_math_path_where_the_gpu_takes_it() -> None:
    graph = trace(F.scaled_dot_product_attention, _qkv(head=260, dtype=torch.float32))
    ops = {op for op, _ in _ops(graph)}
    assert "bmm" in ops and not any(op.startswith("_scaled_dot_product") for op in ops)


def test_cpu_autocast_is_not_rerouted() -> None:
    graph = trace(F.scaled_dot_product_attention, _qkv(dtype=torch.float32), device="cpu")
    assert graph.find("_scaled_dot_product_flash_attention_for_cpu")
    assert not graph.find("_scaled_dot_product_flash_attention")


CUDNN = SDPBackend.CUDNN_ATTENTION
F16, F32 = torch.float16, torch.float32
PER_GPU = [
    # (gpu, qkv, kwargs, autocast dtype, expected): what sdp_utils.cpp allows on each compute capability.
    ("a100", _qkv(head=128), {"is_causal": True}, None, FLASH),
    ("h100", _qkv(head=128), {"is_causal": True}, None, CUDNN),  # cuDNN first on sm90
    # Measured on an H100 (docs/cuda-parity.md): cuDNN takes head sizes up to 256 there ...
    ("h100", _qkv(head=256), {}, None, CUDNN),
    ("h100", _qkv(head=264), {}, None, EFFICIENT),
    ("a100", _qkv(head=256, dtype=F16), {"attn_mask": BOOL_MASK}, None, EFFICIENT),
    ("h100", _qkv(head=60), {}, None, FLASH),  # ... in multiples of 8
    # ... and memory-efficient attention takes no grouped-query call: float32 GQA runs math.
    ("h100", _qkv(heads=8, kv_heads=2, dtype=F32), {"enable_gqa": True}, None, MATH),
    ("h100", _qkv(heads=8, kv_heads=2, dtype=F32), {"enable_gqa": True}, BF16, CUDNN),
    ("h100", _qkv(), {"attn_mask": BOOL_MASK}, None, CUDNN),  # a mask that broadcasts is fine
    ("v100", _qkv(dtype=F16), {}, None, EFFICIENT),  # no flash before sm80
    ("v100", _qkv(), {}, None, MATH),  # bf16 is not native: no fused kernel takes it
    ("t4", _qkv(dtype=F32), {}, BF16, MATH),  # bf16 autocast on a T4: math
    ("t4", _qkv(dtype=F32), {}, F16, EFFICIENT),
    ("t4", _qkv(head=6, dtype=F32), {}, None, EFFICIENT),  # float32 alignment is 1 before sm80
    ("a100", _qkv(head=6, dtype=F32), {}, None, MATH),  # ... and 4 from sm80
]


@pytest.mark.parametrize(("gpu", "qkv", "kwargs", "autocast", "expected"), PER_GPU)
def test_backend_choice_per_gpu(
    gpu: str, qkv: tuple[torch.Tensor, ...], kwargs: dict, autocast: torch.dtype | None, expected: SDPBackend
) -> None:
    from amplint.runtime.gpu import GPUS

    assert sdpa_backend(*qkv, **kwargs, autocast_dtype=autocast, gpu=GPUS[gpu]) == expected
