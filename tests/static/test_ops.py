"""The engine's autocast policy tables against the dispatcher of the installed torch: every op the
tables say autocast casts has an Autocast kernel for that device, and the ops the tables leave alone
(the RWKV7 case: sigmoid and tanh keep their input's dtype) have none."""

from __future__ import annotations

import pytest

from amplint.static import ops

torch = pytest.importorskip("torch")

# Tables name the op; the dispatcher knows overloads (`softmax.int`, `pow.Tensor_Scalar`, ...).
_OVERLOADS = {
    "softmax": ["softmax.int"],
    "log_softmax": ["log_softmax.int"],
    "pow": ["pow.Tensor_Scalar", "pow.Tensor_Tensor"],
    "norm": ["norm.Scalar", "norm.ScalarOpt_dim"],
    "conv_transpose2d": ["conv_transpose2d.input"],
    "conv_transpose3d": ["conv_transpose3d.input"],
    "multi_dot": ["linalg_multi_dot"],
    "sum": ["sum", "sum.dim_IntList"],
    "prod": ["prod", "prod.dim_int"],
    "cumsum": ["cumsum"],
    "cumprod": ["cumprod"],
    "huber_loss": ["huber_loss"],
    "binary_cross_entropy": ["binary_cross_entropy"],
}


def _has_kernel(op: str, key: str) -> bool:
    for name in _OVERLOADS.get(op, [op]):
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{name}", key):
                return True
        except RuntimeError:
            continue
    return False


@pytest.mark.parametrize(
    ("device", "key", "table"),
    [
        ("cuda", "AutocastCUDA", ops.CUDA_LOWER | ops.CUDA_FP32 | ops.PROMOTE),
        ("cpu", "AutocastCPU", ops.CPU_LOWER | ops.CPU_FP32),
    ],
)
def test_listed_ops_have_an_autocast_kernel(device: str, key: str, table: frozenset[str]) -> None:
    missing = sorted(op for op in table if not _has_kernel(op, key))
    assert not missing, f"listed for {device} autocast but without a {key} kernel: {missing}"


@pytest.mark.parametrize("op", ["sigmoid", "tanh", "gelu", "silu", "mean", "var"])
def test_unlisted_ops_keep_their_input_dtype(op: str) -> None:
    assert not _has_kernel(op, "AutocastCUDA")
    assert ops.autocast_policy(op, "cuda") is None


def test_cuda_and_cpu_differ_where_design_says() -> None:
    for op in ("exp", "log", "pow", "softmax", "layer_norm", "rms_norm", "sum", "cumsum"):
        assert ops.autocast_policy(op, "cuda") == "fp32"
        assert ops.autocast_policy(op, "cpu") is None


@pytest.mark.parametrize(
    ("equation", "contracts"),
    [("i,j->ij", False), ("bi,j->bij", False), ("...i,j->...ij", False), ("ij,jk->ik", True), ("i,i", True)],
)
def test_an_einsum_without_a_contraction_is_no_cpu_autocast_matmul(equation: str, contracts: bool) -> None:
    # CPU autocast has no einsum kernel: an outer product runs as a broadcast `mul`, which it leaves
    # in float32; one that sums over an index runs as `bmm`, which it lowers. (CUDA autocast lowers
    # the einsum itself: `einsum` is in CUDA_LOWER, checked against its kernel above.)
    assert ops.einsum_contracts(equation) == contracts
    assert ops.einsum_runs_as(equation) == ("bmm" if contracts else "mul")
    operands = {
        "i,j->ij": (torch.ones(3), torch.ones(4)),
        "bi,j->bij": (torch.ones(2, 3), torch.ones(4)),
        "...i,j->...ij": (torch.ones(2, 3), torch.ones(4)),
        "ij,jk->ik": (torch.ones(2, 3), torch.ones(3, 4)),
        "i,i": (torch.ones(3), torch.ones(3)),
    }[equation]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        result = torch.einsum(equation, *operands)
    assert (result.dtype == torch.bfloat16) == contracts
