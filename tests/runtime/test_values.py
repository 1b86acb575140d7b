"""The values replay (`amplint trace --values`, `amplint.runtime.replay`): real tensors in the traced
dtypes against float64, and the rules that read it (AMP105-AMP108), on the cases and on small models
whose values are known."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from support import amplint_call, write  # noqa: E402
from torch import nn  # noqa: E402

from amplint.rules import rule_by_code  # noqa: E402
from amplint.runtime import DtypeGraph, ValueLimits, replay  # noqa: E402
from amplint.runtime.child import run_traced  # noqa: E402
from amplint.runtime.target import TargetError, target_specs  # noqa: E402
from amplint.runtime.values import ReplayError  # noqa: E402
from amplint.runtime.weights import WeightsError  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FP16 = {"device": "cuda", "dtype": "float16", "autocast": False, "param_dtype": "float16", "values": True}


def _line_of(name: str, text: str) -> int:
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def _findings(graph: DtypeGraph, code: str) -> list:
    rule = rule_by_code(code)
    assert rule is not None
    return list(rule.check_graph(graph))


def _traced(target: str) -> DtypeGraph:
    return run_traced({"target": f"{FIXTURES / target}", **FP16})


def test_case2_eager_attention_overflows_at_the_score_product() -> None:
    graph = _traced("qwen2_fp16_overflow.py:factory")
    [finding] = _findings(graph, "AMP105")
    scores = _line_of("qwen2_eager_attention.py", "attn_weights = torch.matmul(query_states, key_states")
    softmax = _line_of("qwen2_eager_attention.py", "nn.functional.softmax(attn_weights")
    assert finding.node.op == "bmm"
    assert finding.node.source.path.endswith("qwen2_eager_attention.py")
    assert finding.node.source.line == scores
    assert finding.node.module == "Qwen2Attention"
    assert f"`_softmax` at fixtures/qwen2_eager_attention.py:{softmax} turned it into NaN" in finding.message
    assert "the output (" in finding.message and ") is NaN" in finding.message
    assert "scaled_dot_product_attention" in (finding.help or "")
    chain = finding.extra["chain"]
    assert [step["op"] for step in chain][:2] == ["bmm", "_softmax"]
    assert chain[1]["line"] == softmax
    # The inputs that caused it: the biased projections reach 190 and more.
    assert max(high for _, high in finding.extra["input_ranges"]) > 180


@pytest.mark.parametrize("factory", ["factory_sdpa", "factory_scaled"])
def test_case2_sdpa_or_scaled_queries_do_not_overflow(factory: str) -> None:
    graph = _traced(f"qwen2_fp16_overflow.py:{factory}")
    assert graph.values is not None and graph.values.stopped is None
    assert _findings(graph, "AMP105") == []
    assert all(not found.overflow for found in graph.values.nodes.values())


def test_case5_names_the_product_that_overflowed_not_the_sampler() -> None:
    graph = _traced("sampling_overflow.py:factory")
    values = graph.values
    assert values is not None and values.stopped_at is not None
    assert graph.node(values.stopped_at).op == "multinomial"
    assert "probability tensor contains" in (values.stopped or "")
    [finding] = _findings(graph, "AMP105")
    assert finding.node.op == "mm" and finding.node.module == "lm.lm_head"
    assert finding.node.source.path.endswith("sampling_overflow.py")
    assert finding.node.source.line == _line_of("sampling_overflow.py", "logits=self.lm_head(hidden_states)")
    assert "`multinomial` at fixtures/sampling.py:" in finding.message


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def test_headroom_is_measured_in_bits() -> None:
    x = torch.linspace(-1.0, 1.0, 64)  # |x| <= 1 exactly: x * 2**14 reaches 16384 in float16
    graph = replay(Scale(2.0**14), (x,), autocast=False, param_dtype=torch.float16)
    mul = next(node for node in graph.nodes if node.op == "mul")
    assert graph.values is not None
    headroom = graph.values.nodes[mul.id].headroom
    assert headroom == pytest.approx(math.log2(65504 / 16384))  # just under 2 bits
    [finding] = _findings(graph, "AMP106")
    assert finding.node.id == mul.id and "2.0 bit(s) below its largest value" in finding.message
    graph.values.limits = ValueLimits(headroom_bits=1.5)
    assert _findings(graph, "AMP106") == []


class Epsilon(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = torch.full_like(x, 1e-8)  # float16's smallest subnormal is 6e-8
        return x / (x.abs() + eps)


def test_an_eps_that_float16_cannot_hold_underflows() -> None:
    graph = replay(Epsilon(), (torch.randn(32),), autocast=False, param_dtype=torch.float16)
    assert graph.values is not None
    full = next(node for node in graph.nodes if node.op == "full_like")
    assert graph.values.nodes[full.id].underflow == 1.0
    [finding] = _findings(graph, "AMP107")
    assert finding.node.id == full.id and "flushed 100%" in finding.message
    # In float32 the eps holds.
    graph = replay(Epsilon(), (torch.randn(32),), autocast=False, param_dtype=torch.float32)
    assert _findings(graph, "AMP107") == []


class Cancellation(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shifted = x + 1000.0
        restored = shifted - 1000.0  # float16 keeps steps of 0.5 at 1000: the cancellation shows them
        return restored * 2.0


def test_large_error_ranks_the_op_that_adds_it() -> None:
    torch.manual_seed(0)
    graph = replay(Cancellation(), (torch.randn(256),), autocast=False, param_dtype=torch.float16)
    findings = _findings(graph, "AMP108")
    assert findings[0].node.op == "sub"
    assert [f.extra["rank"] for f in findings] == list(range(1, len(findings) + 1))
    assert findings[0].extra["local_error"] > 0.05 > findings[-1].extra["local_error"]
    assert findings[0].extra["output_error"] > 0.05


class Log(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x - 10.0)  # negative: NaN in any precision


def test_nan_in_the_float64_reference_is_a_model_bug() -> None:
    graph = replay(Log(), (torch.rand(16),), autocast=False, param_dtype=torch.float16)
    assert graph.values is not None
    [note] = [n for n in graph.values.notes if "float64 reference" in n]
    assert "`log` at tests/runtime/test_values.py:" in note and "a bug in the model" in note
    assert _findings(graph, "AMP105") == []


class Projection(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_weights_from_a_file(tmp_path: Path, suffix: str) -> None:
    state = {"proj.weight": torch.full((8, 8), 3.0), "proj.bias": torch.zeros(8)}
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save({"state_dict": state, "step": 10}, path)  # a training checkpoint
    graph = replay(Projection(), (torch.ones(1, 8),), autocast=False, param_dtype=torch.float32, weights=path)
    assert graph.values is not None
    output = graph.node(graph.values.outputs[0])
    assert graph.values.nodes[output.id].high == 24.0  # 8 inputs of 1 times weights of 3


def test_a_transformers_config_replays_with_a_weights_file(tmp_path: Path) -> None:
    transformers = pytest.importorskip("transformers")
    from safetensors.torch import save_file

    shape = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1, "vocab_size": 128}
    heads = {"num_attention_heads": 4, "num_key_value_heads": 2}
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**shape, **heads))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(tmp_path / "w.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2", **shape, **heads}))
    spec = {"hf_config": str(tmp_path / "config.json"), "seq_len": 8, "batch_size": 1}
    spec |= {"attn_implementation": "eager", "device": "cuda", "dtype": "bfloat16", "autocast": True}
    graph = run_traced({**spec, "values": True, "weights": str(tmp_path / "w.safetensors")})
    assert graph.values_note is None and graph.values is not None and graph.values.stopped is None
    logits = graph.node(graph.values.outputs[0])
    assert 0 < graph.values.nodes[logits.id].error < 0.05  # bfloat16 against float64, nothing broken


def test_weights_that_do_not_fit_are_listed_and_nothing_runs(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"proj.weight": torch.zeros(4, 8), "extra.bias": torch.zeros(2)}, path)
    model = Projection()
    before = model.proj.weight.clone()
    with pytest.raises(WeightsError) as raised:
        replay(model, (torch.ones(1, 8),), weights=path)
    message = str(raised.value)
    assert "missing from the weights (1):\n  proj.bias" in message
    assert "not in the model (1):\n  extra.bias" in message
    assert "proj.weight: [4, 8] in the weights, [8, 8] in the model" in message
    assert torch.equal(model.proj.weight, before)


def test_a_replay_too_large_for_memory_is_refused_before_it_runs() -> None:
    with pytest.raises(ReplayError, match=r"needs about .* MB beyond the weights .*--max-memory"):
        replay(Projection(), (torch.ones(1024, 8),), max_memory=1024)


def test_values_survive_the_json_round_trip_and_versions_are_compared(tmp_path: Path) -> None:
    graph = replay(Cancellation(), (torch.randn(64),), autocast=False, param_dtype=torch.float16)
    graph.save(tmp_path / "graph.json")
    loaded = DtypeGraph.load(tmp_path / "graph.json")
    assert loaded.values == graph.values
    json.loads((tmp_path / "graph.json").read_text(encoding="utf-8"), parse_constant=pytest.fail)
    loaded.torch_version = "2.0.0"
    again = replay(Cancellation(), (torch.randn(64),), graph=loaded)
    assert again.param_dtype == "float16" and not again.autocast
    assert again.values is not None
    assert any("traced on torch 2.0.0" in note for note in again.values.notes)


def test_value_limits_come_from_the_configuration(tmp_path: Path) -> None:
    runtime = {"targets": ["m.py:factory"], "values": True, "headroom-bits": 4, "error-top": 5}
    [spec] = target_specs(runtime, None, tmp_path)
    assert spec["values"] and spec["limits"] == {"headroom_bits": 4.0, "error_top": 5}
    with pytest.raises(TargetError, match="'underflow-fraction' must be a number between 0 and 1"):
        target_specs({**runtime, "underflow-fraction": 2}, None, tmp_path)


def test_trace_values_cli_text_and_json(tmp_path: Path) -> None:
    target = f"{FIXTURES / 'qwen2_fp16_overflow.py'}:factory"
    args = ("trace", target, "--values", "--no-autocast", "--param-dtype", "float16")
    done = amplint_call(tmp_path, *args, "--format", "json")
    assert done.returncode == 1, done.stderr  # a trace that finds the first overflow exits 1
    data = json.loads(done.stdout)
    [finding] = [f for f in data["findings"] if f["code"] == "AMP105"]
    assert finding["path"].endswith("qwen2_eager_attention.py") and finding["line"] == _line_of(
        "qwen2_eager_attention.py", "attn_weights = torch.matmul(query_states, key_states"
    )
    assert finding["severity"] == "error" and finding["chain"][0]["op"] == "bmm"
    assert set(data["values"]) >= {"nodes", "outputs", "limits", "notes"}
    done = amplint_call(tmp_path, *args, "--op", "bmm", "--headroom-bits", "1")
    assert done.returncode == 1, done.stderr
    assert "absmax  headroom  inf/nan  underflow  error" in done.stdout
    assert "AMP105 `bmm` produced inf in 100% of its values" in done.stdout


def test_check_confirm_replays_targets_with_values_and_reports_in_sarif(tmp_path: Path) -> None:
    for name in ("qwen2_eager_attention.py", "qwen2_fp16_overflow.py"):
        write(tmp_path / name, (FIXTURES / name).read_text(encoding="utf-8"))
    target = '{ target = "qwen2_fp16_overflow.py:factory", autocast = false, param-dtype = "float16", values = true }'
    write(tmp_path / "pyproject.toml", f"[tool.amplint.runtime]\ntargets = [{target}]\n")
    done = amplint_call(tmp_path, "check", ".", "--confirm", "--format", "sarif")
    assert done.returncode == 1, done.stderr
    results = json.loads(done.stdout)["runs"][0]["results"]
    [overflow] = [r for r in results if r["ruleId"] == "AMP105"]
    location = overflow["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"].endswith("qwen2_eager_attention.py")
    assert location["region"]["startLine"] == _line_of(
        "qwen2_eager_attention.py", "attn_weights = torch.matmul(query_states, key_states"
    )
    assert overflow["level"] == "error" and "turned it into NaN" in overflow["message"]["text"]


def test_trace_values_cli_refuses_weights_that_do_not_fit(tmp_path: Path) -> None:
    path = tmp_path / "weights.pt"
    torch.save({"q_proj.weight": torch.zeros(2, 2)}, path)
    target = f"{FIXTURES / 'qwen2_fp16_overflow.py'}:factory"
    done = amplint_call(tmp_path, "trace", target, "--values", "--weights", str(path))
    assert done.returncode == 2
    assert "the weights do not match the model" in done.stderr
    assert "q_proj.weight: [2, 2] in the weights, [512, 512] in the model" in done.stderr


def test_cudnn_grid_sampler_traces_and_replays_as_the_grid_sample_it_stands_for() -> None:
    # A build with cuDNN runs `F.grid_sample(..., align_corners=True)` (bilinear, zeros) as
    # `cudnn_grid_sampler`, which has no meta kernel: the trace gives it one, and the replay runs
    # it, and its backward, as the CPU's grid sampler in those modes. Called here by name, so that
    # a CPU build checks them too.
    from amplint.runtime.cpu_replay import replay_outputs
    from amplint.runtime.cuda_kernels import relaxed_meta

    aten = torch.ops.aten
    torch.manual_seed(0)
    image = torch.randn(2, 3, 5, 6, requires_grad=True)
    grid = (torch.rand(2, 4, 7, 2) * 2 - 1).requires_grad_()
    sampled = torch.nn.functional.grid_sample(image, grid, align_corners=True)
    upstream = torch.randn_like(sampled)
    gradients = torch.autograd.grad(sampled, (image, grid), upstream)
    with relaxed_meta():
        out = aten.cudnn_grid_sampler(image.to("meta", torch.float16), grid.to("meta", torch.float16))
        back = aten.cudnn_grid_sampler_backward(image.to("meta"), grid.to("meta"), upstream.to("meta"))
    assert (out.shape, out.dtype) == (sampled.shape, torch.float16)
    assert [g.shape for g in back] == [image.shape, grid.shape]

    graph = torch.fx.Graph()
    a, b, c = (graph.placeholder(name) for name in "abc")
    forward = graph.call_function(aten.cudnn_grid_sampler.default, (a, b))
    backward = graph.call_function(aten.cudnn_grid_sampler_backward.default, (a, b, c))
    graph.output((forward, backward))
    replayed, (to_image, to_grid) = replay_outputs(torch.fx.GraphModule({}, graph), (image, grid, upstream))
    torch.testing.assert_close(replayed, sampled.detach())
    torch.testing.assert_close(to_image, gradients[0])
    torch.testing.assert_close(to_grid, gradients[1])
