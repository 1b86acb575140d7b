"""The trace against a real run of the same model under autocast.

A trace must give every op the dtype that the same model run eagerly under `torch.autocast`, with
real weights, gives it. The real run is recorded by a dispatch mode that sees each aten op with
its real output, independent of make_fx and of amplint's graph building. On CPU autocast this runs
everywhere. For CUDA it needs a GPU: the emulated trace (fake `cuda:0` tensors, as on a CPU-only
build) is compared with real CUDA autocast; without a GPU those tests are skipped, and say so.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from torch.nn.attention import SDPBackend  # noqa: E402

from amplint.runtime import DtypeGraph, trace  # noqa: E402
from amplint.runtime.cuda_attention import sdpa_backend  # noqa: E402
from amplint.runtime.parity import compare, real_run  # noqa: E402

NEEDS_GPU = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU to compare the emulation with real autocast"
)
DEVICES = ["cpu", pytest.param("cuda", marks=NEEDS_GPU)]

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
_FUSED = {SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION}
# The fused kernels a GPU may pick; the emulation models flash and memory-efficient attention.


def _traced(
    model: Any, args: tuple, kwargs: dict, dtype: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch
) -> DtypeGraph:
    with monkeypatch.context() as patch:
        patch.setattr(torch.cuda, "is_available", lambda: False)  # trace as a CPU-only build does
        graph = trace(model, args, kwargs, device=device, dtype=dtype)
    assert graph.emulated == (device == "cuda")
    return graph


def _on(device: str, model: torch.nn.Module, args: tuple) -> tuple[torch.nn.Module, tuple]:
    torch.manual_seed(0)
    model = model.to(device)
    for parameter in model.parameters():
        torch.nn.init.normal_(parameter, std=0.02)
    return model.eval(), tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)


def _compare(
    model: Any, args: tuple, kwargs: dict, dtype: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch
) -> int:
    graph = _traced(model, args, kwargs, dtype, device, monkeypatch)
    parity = compare(graph, real_run(model, args, kwargs, dtype, device, skipped=[__file__]))
    assert not parity.one_sided, json.dumps({f"{p}:{line}": v for (p, line), v in parity.one_sided.items()})
    assert not parity.mismatched, json.dumps(
        {f"{p}:{line}": v for (p, line), v in parity.mismatched.items()}, indent=1
    )
    return parity.ops


def _fixture(name: str) -> Callable[[], tuple]:
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.factory


FIXTURE_NAMES = ["rwkv7_time_mix", "rwkv7_time_mix_softplus", "qwen2_eager_attention", "vit_attention"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fixture_dtypes_match_a_real_run(
    name: str, dtype: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, args = _on(device, *_fixture(name)())
    assert _compare(model, args, {}, dtype, device, monkeypatch) > 10


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_transformers_dtypes_match_a_real_run(
    model_type: str, attention: str, dtype: torch.dtype, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.AutoConfig.for_model(
        model_type,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=512,
    )
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation=attention)
    model, _ = _on(device, model, ())
    input_ids = torch.randint(0, 512, (1, 32), device=device)
    # A padded position makes the eager run build the attention mask as the trace always does
    # (transformers skips it in eager runs when it can prove it is all-causal).
    attention_mask = torch.ones(1, 32, dtype=torch.long, device=device)
    attention_mask[0, 0] = 0
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "use_cache": False}
    assert _compare(model, (), inputs, dtype, device, monkeypatch) > 100


ATTENTION_CALLS = [
    ((2, 4, 16, 64), (2, 4, 16, 64), {}),
    ((2, 4, 16, 64), (2, 4, 16, 64), {"is_causal": True}),
    ((2, 4, 1, 64), (2, 4, 16, 64), {"is_causal": True}),
    ((2, 4, 16, 64), (2, 4, 16, 64), {"mask": True}),
    ((2, 8, 16, 64), (2, 2, 16, 64), {"enable_gqa": True}),
    ((2, 4, 16, 260), (2, 4, 16, 260), {}),
    ((2, 4, 16, 264), (2, 4, 16, 264), {}),
    ((2, 4, 16, 60), (2, 4, 16, 60), {}),
]


@NEEDS_GPU
@pytest.mark.parametrize(("q_shape", "kv_shape", "options"), ATTENTION_CALLS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_attention_backend_matches_the_gpu(
    q_shape: tuple, kv_shape: tuple, options: dict, dtype: torch.dtype
) -> None:
    q = torch.randn(q_shape, device="cuda", dtype=dtype)
    k = torch.randn(kv_shape, device="cuda", dtype=dtype)
    mask = (
        torch.ones(q_shape[2], kv_shape[2], device="cuda", dtype=torch.bool) if options.get("mask") else None
    )
    kwargs = {k: v for k, v in options.items() if k != "mask"}
    real = SDPBackend(
        torch._fused_sdp_choice(
            q, k, k, mask, 0.0, kwargs.get("is_causal", False), enable_gqa=kwargs.get("enable_gqa", False)
        )
    )
    ours = sdpa_backend(q, k, k, mask, **kwargs, gpu=_this_gpu())
    # A GPU that prefers cuDNN attention picks it where flash would run; both keep the input dtype.
    assert (ours in _FUSED) == (real in _FUSED)
    if real in {SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION}:
        assert ours == real


def _this_gpu():  # type: ignore[no-untyped-def]
    """The emulated GPU with this device's compute capability (A100's rules for others)."""
    from amplint.runtime.gpu import GPUS

    capability = torch.cuda.get_device_capability()
    return next((gpu for gpu in GPUS.values() if gpu.capability == capability), GPUS["a100"])


PARITY_DATA = Path(__file__).resolve().parents[2] / "benchmarks" / "cuda_parity.json"


def _recorded_call(row: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
    """The query, key and mask of one recorded SDPA call (benchmarks/cuda_parity.py's grid: batch
    2, `shape` "q<query len> k<key len> h<query heads>/<key heads>"), as meta tensors: the choice
    reads shapes, strides and dtypes only."""
    match = re.fullmatch(r"q(\d+) k(\d+) h(\d+)/(\d+)", row["shape"])
    assert match, row["shape"]
    query_len, key_len, query_heads, key_heads = map(int, match.groups())
    dtype = getattr(torch, row["dtype"])
    query = torch.empty(2, query_heads, query_len, row["head"], dtype=dtype, device="meta")
    key = torch.empty(2, key_heads, key_len, row["head"], dtype=dtype, device="meta")
    mask_dtype = {"none": None, "bool": torch.bool, "float": dtype}[row["mask"]]
    mask = None if mask_dtype is None else torch.empty(query_len, key_len, dtype=mask_dtype, device="meta")
    return query, key, mask, query_heads != key_heads


def test_the_recorded_sdpa_calls_pick_the_kernel_the_gpu_picked() -> None:
    # Every call docs/cuda-parity.md counts, replayed through the emulation's choice on the GPU it
    # was recorded on: a change to the choice (or a torch that reorders its priorities) shows here.
    from amplint.runtime.cuda_attention import KERNEL_NAMES
    from amplint.runtime.gpu import GPUS

    data = json.loads(PARITY_DATA.read_text(encoding="utf-8"))
    gpu = next(gpu for gpu in GPUS.values() if list(gpu.capability) == data["capability"])
    calls = data["attention"]
    assert len(calls) == 324 and {row["real"] for row in calls} >= {"cudnn", "efficient", "math"}
    differing = []
    for row in calls:
        query, key, mask, gqa = _recorded_call(row)
        chosen = KERNEL_NAMES[
            sdpa_backend(query, key, key, mask, is_causal=row["causal"], enable_gqa=gqa, gpu=gpu)
        ]
        if chosen != row["real"]:
            differing.append({**row, "now": chosen})
    assert not differing, json.dumps(differing[:10], indent=1)
