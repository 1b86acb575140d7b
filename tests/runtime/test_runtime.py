"""The runtime tracer: the dtype each op really runs in under CUDA autocast, emulated on a CPU-only
build, checked against the autocast op lists PyTorch documents."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from support import amplint_call  # noqa: E402

from amplint.runtime import DtypeGraph, trace  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
BF16, FP32 = "bfloat16", "float32"


def _x(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# (name, function, inputs, expected output dtype under CUDA autocast bf16, expected policy of the op)
UNARY_BF16 = _x(4, 8, dtype=torch.bfloat16)
CASES: list[tuple[str, Callable[..., torch.Tensor], tuple[torch.Tensor, ...], str, str | None]] = [
    # Ops that CUDA autocast runs in float32 (PyTorch docs: "CUDA Ops that can autocast to float32").
    ("exp", torch.exp, (UNARY_BF16,), FP32, "fp32"),
    ("log", torch.log, (UNARY_BF16,), FP32, "fp32"),
    ("log1p", torch.log1p, (UNARY_BF16,), FP32, "fp32"),
    ("expm1", torch.expm1, (UNARY_BF16,), FP32, "fp32"),
    ("pow", lambda x: torch.pow(x, 2), (UNARY_BF16,), FP32, "fp32"),
    ("rsqrt", torch.rsqrt, (UNARY_BF16,), FP32, "fp32"),
    ("reciprocal", torch.reciprocal, (UNARY_BF16,), FP32, "fp32"),
    ("softplus", F.softplus, (UNARY_BF16,), FP32, "fp32"),
    ("sinh", torch.sinh, (UNARY_BF16,), FP32, "fp32"),
    ("tan", torch.tan, (UNARY_BF16,), FP32, "fp32"),
    ("acos", torch.acos, (UNARY_BF16,), FP32, "fp32"),
    ("softmax", lambda x: torch.softmax(x, -1), (UNARY_BF16,), FP32, "fp32_set_opt_dtype"),
    ("log_softmax", lambda x: torch.log_softmax(x, -1), (UNARY_BF16,), FP32, "fp32_set_opt_dtype"),
    ("sum", lambda x: torch.sum(x, -1), (UNARY_BF16,), FP32, "fp32_set_opt_dtype"),
    ("cumsum", lambda x: torch.cumsum(x, -1), (UNARY_BF16,), FP32, "fp32_set_opt_dtype"),
    ("cumprod", lambda x: torch.cumprod(x, -1), (UNARY_BF16,), FP32, "fp32_set_opt_dtype"),
    ("prod", lambda x: torch.prod(x, -1), (UNARY_BF16,), FP32, "fp32_set_opt_dtype"),
    ("layer_norm", lambda x: F.layer_norm(x, (8,)), (UNARY_BF16,), FP32, "fp32"),
    ("group_norm", lambda x: F.group_norm(x.view(4, 8, 1), 2), (UNARY_BF16,), FP32, "fp32"),
    ("mse_loss", lambda x: F.mse_loss(x, x), (UNARY_BF16,), FP32, "fp32"),
    # Ops that CUDA autocast runs in the autocast dtype.
    ("mm", torch.mm, (_x(4, 8), _x(8, 4)), BF16, "lower_precision"),
    ("bmm", torch.bmm, (_x(2, 4, 8), _x(2, 8, 4)), BF16, "lower_precision"),
    ("matmul", torch.matmul, (_x(2, 4, 8), _x(8, 4)), BF16, "lower_precision"),
    ("linear", F.linear, (_x(4, 8), _x(6, 8)), BF16, "lower_precision"),
    ("addmm", torch.addmm, (_x(4, 4), _x(4, 8), _x(8, 4)), BF16, "lower_precision"),
    ("baddbmm", torch.baddbmm, (_x(2, 4, 4), _x(2, 4, 8), _x(2, 8, 4)), BF16, "lower_precision"),
    ("conv1d", F.conv1d, (_x(1, 3, 16), _x(4, 3, 3)), BF16, "lower_precision"),
    ("conv2d", F.conv2d, (_x(1, 3, 8, 8), _x(4, 3, 3, 3)), BF16, "lower_precision"),
    # A GPU runs this call on a fused kernel (flash attention), as the emulation does.
    ("sdpa", F.scaled_dot_product_attention, (_x(1, 2, 4, 8),) * 3, BF16, "lower_precision"),
    ("einsum", lambda a, b: torch.einsum("ij,jk->ik", a, b), (_x(4, 8), _x(8, 4)), BF16, "lower_precision"),
    # CUDA autocast lowers an einsum's operands whatever its equation: an outer product too.
    ("einsum outer", lambda a, b: torch.einsum("i,j->ij", a, b), (_x(4), _x(8)), BF16, None),
    # Ops on no autocast list keep their input's dtype.
    ("sigmoid", torch.sigmoid, (UNARY_BF16,), BF16, "inherited"),
    ("tanh", torch.tanh, (UNARY_BF16,), BF16, "inherited"),
    ("gelu", F.gelu, (UNARY_BF16,), BF16, "inherited"),
    ("silu", F.silu, (UNARY_BF16,), BF16, "inherited"),
    ("relu", F.relu, (UNARY_BF16,), BF16, "inherited"),
    ("mean", lambda x: x.mean(-1), (UNARY_BF16,), BF16, "inherited"),
    ("div", lambda x: x / 3.0, (UNARY_BF16,), BF16, "inherited"),
    ("mul", lambda x: x * x, (UNARY_BF16,), BF16, "inherited"),
    ("sub", lambda x: 1 - x, (UNARY_BF16,), BF16, "inherited"),
    ("neg", torch.neg, (UNARY_BF16,), BF16, "inherited"),
    ("abs", torch.abs, (UNARY_BF16,), BF16, "inherited"),
    ("sqrt", torch.sqrt, (UNARY_BF16,), BF16, "inherited"),
    ("amax", lambda x: x.amax(-1), (UNARY_BF16,), BF16, "inherited"),
]


# Ops that only reshape the result of the op under test (decompositions end with them).
_SHAPE_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "permute",
        "transpose",
        "squeeze",
        "unsqueeze",
        "getitem",
        "clone",
        "expand",
        "t",
    }
)


def _main_node(graph: DtypeGraph) -> tuple[str | None, str]:
    """The dtype of the traced function's result and the policy of the op that produced it."""
    ops = [n for n in graph.nodes if n.policy != "input"]
    last = ops[-1]
    while last.policy == "autocast_cast" or last.op in _SHAPE_OPS:
        last = graph.nodes[last.inputs[0]]
    return ops[-1].dtype, last.policy


@pytest.mark.parametrize(("name", "fn", "inputs", "dtype", "policy"), CASES, ids=[c[0] for c in CASES])
def test_cuda_autocast_policy_table(
    name: str,
    fn: Callable[..., torch.Tensor],
    inputs: tuple[torch.Tensor, ...],
    dtype: str,
    policy: str | None,
) -> None:
    graph = trace(fn, inputs, device="cuda", dtype=torch.bfloat16)
    assert graph.emulated == (not torch.cuda.is_available())
    result_dtype, result_policy = _main_node(graph)
    assert result_dtype == dtype
    if policy is not None:
        assert result_policy == policy


def test_policy_table_covers_forty_ops() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("name", "fn"), [("exp", torch.exp), ("softmax", lambda x: torch.softmax(x, -1))])
def test_cpu_policy_differs_from_cuda(name: str, fn: Callable[..., torch.Tensor]) -> None:
    # CPU autocast does not upcast exp or softmax: a test on CPU does not show GPU numerics.
    assert _main_node(trace(fn, (UNARY_BF16,), device="cpu"))[0] == BF16
    assert _main_node(trace(fn, (UNARY_BF16,), device="cuda"))[0] == FP32


def test_an_outer_einsum_is_lowered_by_cuda_autocast_only() -> None:
    # The static engine's table says the same (tests/static/test_dtypes.py, `angles`/`cpu_angles`).
    def outer(t: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
        return torch.einsum("i,j->ij", t, inv_freq)

    inputs = (torch.arange(8.0), torch.rand(4))
    assert _main_node(trace(outer, inputs, device="cpu"))[0] == FP32
    assert _main_node(trace(outer, inputs, device="cuda"))[0] == BF16


def test_float16_autocast_and_no_autocast_with_half_parameters() -> None:
    linear = torch.nn.Linear(8, 8)
    fp16 = trace(linear, (_x(2, 8),), dtype=torch.float16)
    assert [n.dtype for n in fp16.find("addmm")] == ["float16"]
    plain = trace(linear, (_x(2, 8, dtype=torch.float16),), autocast=False, param_dtype=torch.float16)
    assert [n.dtype for n in plain.find("addmm")] == ["float16"]
    assert all(n.policy in {"input", "inherited"} for n in plain.nodes)


def _fixture_line(name: str, needle: str) -> int:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if needle in line)


def _factory(name: str) -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    namespace: dict[str, object] = {"__name__": name.removesuffix(".py")}
    path = FIXTURES / name
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    return namespace["factory"]()  # type: ignore[operator,no-any-return]


def test_rwkv7_sigmoid_stays_bf16_and_exp_upcasts_too_late() -> None:
    model, args = _factory("rwkv7_time_mix.py")
    graph = trace(model, args)
    line = _fixture_line("rwkv7_time_mix.py", ".sigmoid()")
    [sigmoid] = graph.find("sigmoid", line=line, path="rwkv7_time_mix.py")
    assert sigmoid.dtype == BF16 and sigmoid.policy == "inherited"
    assert sigmoid.module == "RWKV7TimeMix"
    exps = graph.find("exp", line=_fixture_line("rwkv7_time_mix.py", "w[:, t].exp()"))
    assert exps, "the recurrence's exp is traced"
    for exp in exps:
        [cast] = graph.producers(exp)
        assert (cast.policy, cast.input_dtypes, cast.dtype) == ("autocast_cast", [BF16], FP32)
        assert exp.dtype == FP32


def test_autocast_disabled_inside_user_code_is_honoured() -> None:
    model, args = _factory("qwen2_eager_attention.py")
    graph = trace(model, args)
    rotary = graph.find(
        path="qwen2_eager_attention.py", line=_fixture_line("qwen2_eager_attention.py", "inv_freq.float() @")
    )
    products = [n for n in rotary if n.op in {"bmm", "mm", "matmul"}]
    # The block turns autocast off: the product runs in float32 and is not autocast's doing.
    assert products and all(n.dtype == FP32 and n.policy == "inherited" for n in products)
    scores = graph.find(
        line=_fixture_line("qwen2_eager_attention.py", "key_states.transpose(2, 3)) * self.scaling")
    )
    assert any(n.op in {"bmm", "mm"} and n.dtype == BF16 for n in scores)
    assert {n.module for n in graph.find("addmm")} >= {"q_proj", "k_proj", "v_proj"}


def test_graph_round_trips_through_json(tmp_path: Path) -> None:
    graph = trace(torch.nn.Linear(8, 8), (_x(2, 8),))
    graph.save(tmp_path / "graph.json")
    assert DtypeGraph.load(tmp_path / "graph.json") == graph
    data = json.loads((tmp_path / "graph.json").read_text())
    assert set(data["nodes"][0]) >= {
        "id",
        "op",
        "dtype",
        "input_dtypes",
        "shape",
        "policy",
        "source",
        "module",
        "inputs",
    }


def test_trace_command_json_in_a_child_process() -> None:
    done = amplint_call(
        None, "trace", str(FIXTURES / "rwkv7_time_mix.py") + ":factory", "--format", "json", "--op", "sigmoid"
    )
    data = json.loads(done.stdout)
    # Exit 1: the runtime rules found something (AMP101 at the bf16 sigmoid), as `check` would.
    assert done.returncode == 1 and data["findings"], done.stderr
    sigmoids = [n for n in data["nodes"] if n["op"] == "sigmoid"]
    assert [n["dtype"] for n in sigmoids] == [BF16]
    assert sigmoids[0]["source"]["line"] == _fixture_line("rwkv7_time_mix.py", ".sigmoid()")
    assert data["summary"]["autocast_casts"] > 0


def test_trace_command_text_table() -> None:
    done = amplint_call(None, "trace", str(FIXTURES / "vit_attention.py") + ":factory", "--changed-dtype")
    assert done.returncode == 0, done.stderr
    assert "autocast_cast" in done.stdout and "bfloat16 -> float32" in done.stdout
    assert re.search(r" casts \(\d+ inserted by autocast, \d+ explicit\)", done.stdout)


@pytest.mark.parametrize(
    ("source", "target", "message"),
    [
        ("def factory():\n    raise ValueError('boom')\n", "m.py:factory", "boom"),
        ("def factory():\n    return 3\n", "m.py:factory", "must return (model, args)"),
        ("def factory(:\n", "m.py:factory", "syntax error"),
        ("x = 1\n", "m.py:factory", "no callable 'factory'"),
        ("", "missing.py:factory", "does not exist"),
        ("", "no_colon", "is not FILE.py:FACTORY"),
    ],
)
def test_trace_bad_targets_exit_2(tmp_path: Path, source: str, target: str, message: str) -> None:
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    done = amplint_call(tmp_path, "trace", target)
    assert done.returncode == 2
    assert message in done.stderr


@pytest.mark.parametrize(("inputs", "branch"), [("torch.ones(3)", "exp"), ("-torch.ones(3)", "neg")])
def test_control_flow_on_values_takes_the_branch_a_cpu_run_takes(
    tmp_path: Path, inputs: str, branch: str
) -> None:
    (tmp_path / "m.py").write_text(
        "import torch\n\n\ndef f(x):\n    if x.sum() > 0:\n        return x.exp()\n    return -x\n\n\n"
        f"def factory():\n    return f, ({inputs},)\n",
        encoding="utf-8",
    )
    done = amplint_call(tmp_path, "trace", "m.py:factory", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    ops = [node["op"] for node in data["nodes"]]
    assert branch in ops and ({"exp", "neg"} - {branch}).isdisjoint(ops)
    assert any("(bool 1x) came from a run on the CPU" in note for note in data["notes"])


# --- transformers models from their configs (no weights, no hub) ------------------------------

SMALL = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 1024,
}


def _hf_trace(tmp_path: Path, model_type: str, *args: str) -> dict:
    pytest.importorskip("transformers")
    config = tmp_path / f"{model_type}.json"
    config.write_text(json.dumps({"model_type": model_type, **SMALL}), encoding="utf-8")
    done = amplint_call(
        None, "trace", "--hf-config", str(config), "--seq-len", "32", "--format", "json", *args
    )
    data = json.loads(done.stdout)
    assert done.returncode == (1 if data["findings"] else 0), done.stderr
    return data


def _line_text(node: dict) -> str:
    """The source line a node is attributed to, read from the file."""
    source = node["source"]
    assert source is not None, node
    return Path(source["path"]).read_text(encoding="utf-8").splitlines()[source["line"] - 1]


def _nodes(data: dict, op: str) -> list[dict]:
    return [n for n in data["nodes"] if n["op"] == op]


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_hf_eager_attention_under_autocast(tmp_path: Path, model_type: str, dtype: str) -> None:
    data = _hf_trace(tmp_path, model_type, "--attn-implementation", "eager", "--dtype", dtype)
    layers = {n["module"] for n in _nodes(data, "_softmax")}
    assert layers == {"model.layers.0.self_attn", "model.layers.1.self_attn"}
    # Scores and attention output: batched matmuls in the autocast dtype; softmax in float32
    # (transformers asks for it); the projections run as mm/addmm in the autocast dtype too.
    assert {n["dtype"] for n in _nodes(data, "bmm")} == {dtype}
    assert {n["dtype"] for n in _nodes(data, "_softmax")} == {"float32"}
    assert all("softmax" in _line_text(n) for n in _nodes(data, "_softmax"))
    assert {n["dtype"] for n in _nodes(data, "mm")} == {dtype}
    # RMSNorm upcasts explicitly: its statistics are float32.
    assert {n["dtype"] for n in _nodes(data, "rsqrt")} == {"float32"}


@pytest.mark.parametrize("model_type", ["qwen2", "llama"])
def test_hf_sdpa_attention_under_autocast(tmp_path: Path, model_type: str) -> None:
    data = _hf_trace(tmp_path, model_type, "--attn-implementation", "sdpa")
    lines = {_line_text(n) for n in data["nodes"] if n["module"] and n["module"].endswith("self_attn")}
    assert any("scaled_dot_product_attention" in line for line in lines)
    assert not any("torch.matmul(query" in line for line in lines)
    assert {n["dtype"] for n in _nodes(data, "mm")} == {"bfloat16"}


def test_hf_no_autocast_with_float16_parameters(tmp_path: Path) -> None:
    data = _hf_trace(tmp_path, "qwen2", "--no-autocast", "--param-dtype", "float16")
    assert data["autocast"] is False and data["param_dtype"] == "float16"
    assert {n["dtype"] for n in _nodes(data, "mm")} == {"float16"}
    assert {n["policy"] for n in data["nodes"]} <= {"input", "inherited", "explicit_cast"}
    assert any(n["policy"] == "explicit_cast" for n in data["nodes"])


def test_hf_config_that_transformers_cannot_read(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    bad = tmp_path / "bad.json"
    bad.write_text('{"model_type": "no-such-model"}', encoding="utf-8")
    done = amplint_call(None, "trace", "--hf-config", str(bad))
    assert done.returncode == 2 and "no-such-model" in done.stderr
    bad.write_text('{"model_type": ', encoding="utf-8")
    done = amplint_call(None, "trace", "--hf-config", str(bad))
    assert done.returncode == 2 and "not valid JSON" in done.stderr


def test_trace_module_filter() -> None:
    done = amplint_call(
        None,
        "trace",
        str(FIXTURES / "rwkv7_time_mix.py") + ":factory",
        "--module",
        "w_lora.*",
        "--format",
        "json",
    )
    assert done.returncode == 1, done.stderr  # the filter shows fewer ops; the findings are the model's
    modules = {n["module"] for n in json.loads(done.stdout)["nodes"] if n["policy"] != "input"}
    assert modules == {"w_lora.down", "w_lora.up"}


def test_trace_timeout(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(
        "import time\n\n\ndef factory():\n    time.sleep(60)\n", encoding="utf-8"
    )
    done = amplint_call(tmp_path, "trace", "slow.py:factory", "--timeout", "3")
    assert done.returncode == 2 and "did not finish within 3 s" in done.stderr


def test_trace_without_torch_says_how_to_install() -> None:
    code = "import sys; sys.modules['torch'] = None; from amplint.cli import main; sys.exit(main(['trace', 'm.py:f']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 2 and "pip install 'amplint[runtime]'" in done.stderr


def test_trace_abort_in_the_child_becomes_an_error(tmp_path: Path) -> None:
    # A C++ terminate inside torch kills the process; the child takes it, the command reports it.
    (tmp_path / "abort.py").write_text("import os\n\n\ndef factory():\n    os.abort()\n", encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "abort.py:factory")
    assert done.returncode == 2
    assert "aborted" in done.stderr and "--in-process" in done.stderr


def _gone(pid_file: Path) -> bool:
    """Whether the process whose id the file holds has ended (a zombie has: only its reaping is left).
    A SIGKILL ends a process soon after it is sent, not at once: it is given 60 s."""
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 60
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X") or time.monotonic() > deadline:
            return state in ("Z", "X")
        time.sleep(0.1)


_SPAWNS = (
    "import subprocess, sys, time\nfrom pathlib import Path\n\n\ndef factory():\n"
    "    child = subprocess.Popen(['sleep', '3600'], start_new_session=False)\n"
    "    Path('grandchild.pid').write_text(str(child.pid))\n"
)


def test_trace_sys_exit_in_the_target_is_its_error(tmp_path: Path) -> None:
    (tmp_path / "quits.py").write_text("import sys\n\n\ndef factory():\n    sys.exit(0)\n", encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "quits.py:factory")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "amplint: error: the target called sys.exit(0) instead of returning (model, args)"
    ]


def test_trace_caps_the_targets_memory(tmp_path: Path) -> None:
    (tmp_path / "hungry.py").write_text("def factory():\n    return bytearray(8 << 30)\n", encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "hungry.py:factory", "--memory-limit", "2")
    assert done.returncode == 2
    assert "the target ran out of memory" in done.stderr and "Traceback" not in done.stderr


def test_trace_names_torchs_own_allocation_failure_as_out_of_memory(tmp_path: Path) -> None:
    # torch's allocator raises a RuntimeError ("DefaultCPUAllocator: can't allocate memory"), not a
    # MemoryError: the cap is still what stopped the target.
    code = "import torch\n\n\ndef factory():\n    return torch.empty(8 << 30, dtype=torch.uint8)\n"
    (tmp_path / "hungry.py").write_text(code, encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "hungry.py:factory", "--memory-limit", "2")
    assert done.returncode == 2
    assert "the target ran out of memory" in done.stderr and "Traceback" not in done.stderr


def test_trace_memory_cap_counts_memory_not_mapped_files(tmp_path: Path) -> None:
    # A CUDA build of torch maps over 3 GB of libraries, address space that takes no memory; a
    # 4 GiB file mapped read-only stands in for them on any build, under a 2 GB cap.
    with (tmp_path / "big.bin").open("wb") as big:
        big.truncate(4 << 30)  # sparse: no disk taken
    (tmp_path / "maps.py").write_text(
        "import mmap\n\nimport torch\n\n_KEPT = []\n\n\n"
        "def factory():\n"
        "    with open('big.bin', 'rb') as big:\n"
        "        _KEPT.append(mmap.mmap(big.fileno(), 0, access=mmap.ACCESS_READ))\n"
        "    return torch.nn.Linear(2, 2), (torch.ones(1, 2),)\n",
        encoding="utf-8",
    )
    done = amplint_call(tmp_path, "trace", "maps.py:factory", "--memory-limit", "2")
    assert done.returncode == 0, done.stderr
    assert "traced Linear from maps.py:factory" in done.stdout


def test_trace_shows_only_the_end_of_a_failing_targets_output(tmp_path: Path) -> None:
    (tmp_path / "loud.py").write_text(
        "def factory():\n    print('x' * 20_000_000)\n    raise ValueError('the end')\n", encoding="utf-8"
    )
    done = amplint_call(tmp_path, "trace", "loud.py:factory")
    assert done.returncode == 2
    assert len(done.stderr) < 70_000 and "ValueError: the end" in done.stderr
    assert "bytes of the target's output left out; the last 65,536 follow" in done.stderr


def test_trace_leaves_no_process_the_target_started(tmp_path: Path) -> None:
    (tmp_path / "spawns.py").write_text(_SPAWNS + "    raise ValueError('no model')\n", encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "spawns.py:factory")
    assert done.returncode == 2 and "no model" in done.stderr
    assert _gone(tmp_path / "grandchild.pid")


def test_trace_timeout_ends_the_targets_whole_process_group(tmp_path: Path) -> None:
    # 30 s: a guard ten times above what importing torch and calling the factory take.
    (tmp_path / "hangs.py").write_text(_SPAWNS + "    time.sleep(3600)\n", encoding="utf-8")
    done = amplint_call(tmp_path, "trace", "hangs.py:factory", "--timeout", "30")
    assert done.returncode == 2 and "did not finish within 30 s" in done.stderr
    assert _gone(tmp_path / "grandchild.pid")
