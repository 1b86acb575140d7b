"""`amplint trace --backward`: the backward pass traced after the forward under the same autocast
emulation, each parameter's gradient, what float16 makes of the gradients (`--values`), and the
weight-update rule AMP111, on small models whose answers are known."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from support import amplint_call, write  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from amplint.rules import rule_by_code  # noqa: E402
from amplint.runtime import DtypeGraph, trace  # noqa: E402
from amplint.runtime.backward import loss_of  # noqa: E402
from amplint.runtime.formats import grad_scaler, loss_scale, lost_updates  # noqa: E402
from amplint.runtime.report import render_text, select  # noqa: E402
from amplint.runtime.values import magnitudes  # noqa: E402


class TwoLayers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.a(x))
        return self.b(hidden)


def _line(text: str) -> int:
    lines = Path(__file__).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, start=1) if text in line)


def _two_layers() -> DtypeGraph:
    torch.manual_seed(0)
    return trace(TwoLayers(), (torch.randn(4, 8),), backward=True)


def test_linear_gradients_under_bf16_autocast() -> None:
    graph = _two_layers()
    assert set(graph.gradients) == {"a.weight", "a.bias", "b.weight", "b.bias"}
    for name, node_id in graph.gradients.items():
        gradient = graph.node(node_id)
        # A float32 parameter's gradient is float32: the cast back from the bf16 product that read it.
        assert (gradient.dtype, gradient.policy, gradient.phase) == ("float32", "autograd_cast", "backward")
        assert graph.producers(gradient)[0].dtype == "bfloat16", name
    backward = [n for n in graph.nodes if n.phase == "backward"]
    # Autocast is off in the backward; each product reads bf16 saved values and bf16 gradients.
    assert {n.dtype for n in backward if n.op == "mm"} == {"bfloat16"}
    assert [n.dtype for n in backward if n.op == "threshold_backward"] == ["bfloat16"]  # relu's
    # Each backward op has the line and module of the forward op it differentiates.
    products = {(n.source.line, n.module) for n in backward if n.op == "mm" and n.source}
    assert products == {(_line("hidden = torch.relu(self.a(x))"), "a"), (_line("return self.b(hidden)"), "b")}


class RescaledInEval(nn.Module):
    """Halves its weight in place under no_grad on its first call, as RWKV rescales its layers in eval."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.proj.weight.div_(2)
        return self.proj(x)


def test_an_in_place_change_of_a_parameter_under_no_grad_has_no_gradient_and_traces() -> None:
    graph = trace(RescaledInEval(), (torch.randn(4, 8),), backward=True)
    assert set(graph.gradients) == {"proj.weight", "proj.bias"}
    assert [n.phase for n in graph.nodes if n.op == "div_"] == ["forward"]


def test_the_forward_is_the_forward_only_trace() -> None:
    torch.manual_seed(0)
    alone = trace(TwoLayers(), (torch.randn(4, 8),))
    joint = _two_layers().forward()
    assert alone.loss is None and all(n.phase == "forward" for n in alone.nodes)

    def ops(graph: DtypeGraph) -> list[tuple[str, str | None, str]]:
        # Saving values for the backward adds `detach` views; multi-output ops' unread outputs differ.
        return [(n.op, n.dtype, n.policy) for n in graph.nodes if n.op not in {"detach", "getitem"}]

    assert ops(joint) == ops(alone)
    assert joint.parameters == alone.parameters == {"a.weight": 0, "a.bias": 1, "b.weight": 2, "b.bias": 3}
    # Its report keeps the forward-only columns and has no gradient table.
    report = render_text(alone, select(alone), target="m.py:factory", ops=True)
    assert report.splitlines()[2].split() == ["id", "op", "dtypes", "policy", "source", "module"]
    assert "gradients of" not in report and "backward ops" not in report


class Mixed(nn.Module):
    """Ops with different autocast policies and derivatives: products, gelu, softmax, a norm, exp."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.a(x))
        mixed = torch.softmax(h @ h.transpose(-1, -2), -1) @ h
        return self.norm(self.b(mixed)).exp()


class _Recorder(TorchDispatchMode):
    """Every aten op of a real backward pass, with its first output's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[tuple[str, str | None]] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) else out
        dtype = str(first.dtype).removeprefix("torch.") if isinstance(first, torch.Tensor) else None
        self.ops[(func.overloadpacket.__name__, dtype)] += 1
        return out


def test_backward_matches_a_real_cpu_autocast_run() -> None:
    # The same model, loss and autocast, run for real: forward under `torch.autocast`, the
    # backward after leaving it, every op recorded by a dispatch mode, apart from make_fx.
    torch.manual_seed(0)
    model, x = Mixed(), torch.randn(2, 4, 8)
    graph = trace(model, (x,), device="cpu", backward=True)
    traced = Counter((n.op, n.dtype) for n in graph.nodes if n.phase == "backward" and n.op != "getitem")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = loss_of(model(x), None)
    with _Recorder() as recorder:
        grads = torch.autograd.grad(loss, list(model.parameters()))
    assert traced == recorder.ops
    assert [graph.node(graph.gradients[name]).dtype for name, _ in model.named_parameters()] == [
        str(g.dtype).removeprefix("torch.") for g in grads
    ]


class Attention(nn.Module):
    def __init__(self, masked: bool) -> None:
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)
        self.masked = masked

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(1, 8, 2, 16).transpose(1, 2)

        mask = torch.ones(8, 8, dtype=torch.bool, device=x.device).tril() if self.masked else None
        out = F.scaled_dot_product_attention(
            heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), attn_mask=mask, is_causal=not self.masked
        )
        return out.transpose(1, 2).reshape(1, 8, 32)


@pytest.mark.parametrize(
    ("gpu", "masked", "kernel"),
    [("a100", False, "flash"), ("a100", True, "efficient"), ("h100", False, "cudnn")],
)
def test_fused_attention_gradients_replay_as_autograd_computes_them(
    gpu: str, masked: bool, kernel: str
) -> None:
    # The replay runs a fused kernel's backward as the math it computes; its gradients must be the
    # model's: compared with a float64 autograd run of the same model, loss and inputs.
    torch.manual_seed(0)
    model, x = Attention(masked), torch.randn(1, 8, 32)
    graph = trace(model, (x,), backward=True, values=True, gpu=gpu)
    assert graph.values is not None and graph.values.stopped is None
    assert {n.attention for n in graph.nodes if n.attention} == {kernel}
    wide = model.double()
    loss, _ = loss_of(wide(x.double()), None)
    exact = dict(
        zip(dict(wide.named_parameters()), torch.autograd.grad(loss, list(wide.parameters())), strict=True)
    )
    for name in ("q.weight", "k.weight", "v.weight"):
        replayed = graph.values.nodes[graph.gradients[name]]
        # The bfloat16 products round to 2^-8; the range of the gradient must agree to that.
        assert replayed.low == pytest.approx(float(exact[name].min()), rel=2**-5), name
        assert replayed.high == pytest.approx(float(exact[name].max()), rel=2**-5), name


class Scale(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w * x


def test_gradient_underflow_of_a_constructed_case() -> None:
    # The loss is sum(+-w * x) (alternating signs), so the gradient of `w` is +-x exactly: 600
    # elements of 2^-30, 300 of 2^-20, 100 of 1 and 24 zeros. float16 flushes what lies below 2^-24
    # (600 of the 1000 non-zero) and keeps below its normal range (2^-14) 900 of them. A loss scale
    # lifts every element by its exponent: 2^6 lifts 2^-30 to 2^-24 (none left flushed); 1 * 2^15
    # is the largest that stays finite.
    x = torch.cat(
        [torch.full((600,), 2.0**-30), torch.full((300,), 2.0**-20), torch.ones(100), torch.zeros(24)]
    )
    graph = trace(Scale(1024), (x,), backward=True, values=True)
    assert graph.values is not None
    counts = graph.values.gradients[graph.gradients["w"]]
    assert (counts.exponents, counts.zeros, counts.nonfinite) == ({-30: 600, -20: 300, 0: 100}, 24, 0)
    scale = loss_scale(counts)
    assert (scale.flushed, scale.subnormal, scale.lowest, scale.highest) == (0.6, 0.9, 6, 15)
    assert scale.flushed_at(5) == 0.6 and scale.flushed_at(6) == 0.0
    # GradScaler starts at 2^16, past 2^15: one step skipped on inf, then 2^15.
    assert "2^16 overflows" in grad_scaler(scale) and "1 skipped step(s) before 2^15" in grad_scaler(scale)
    report = render_text(graph, select(graph), target="m.py:factory")
    row = next(line for line in report.splitlines() if line.startswith("w "))
    assert row.split() == [
        "w",
        "float32",
        "1024",
        "float32",
        "mul",
        "(float32)",
        "2%",
        "60%",
        "90%",
        "2^6..2^15",
    ]


def test_too_wide_a_range_for_one_loss_scale() -> None:
    # 2^-40 and 2^10: flushing nothing needs 2^16, keeping 2^10 finite allows 2^5 at most.
    x = torch.cat([torch.full((100,), 2.0**-40), torch.full((100,), 2.0**10)])
    graph = trace(Scale(200), (x,), backward=True, values=True)
    assert graph.values is not None
    scale = loss_scale(graph.values.gradients[graph.gradients["w"]])
    assert (scale.lowest, scale.highest) == (16, 5)
    assert "no single loss scale does both" in grad_scaler(scale)
    assert scale.flushed_at(5) == 0.5


@pytest.mark.parametrize(
    ("dtype", "binades", "zeros"),
    [
        # float16: 2^-24 and 2^-20 are subnormal, 2^-140 rounds to zero.
        (torch.float16, {-24: 1, -20: 1, 0: 1, 1: 1, 15: 1}, 3),
        # bfloat16: 2^-140 is below its smallest subnormal (2^-133); 65504 rounds to 2^16.
        (torch.bfloat16, {-24: 1, -20: 1, 0: 1, 1: 1, 16: 1}, 3),
        # float32 holds 2^-140 as a subnormal.
        (torch.float32, {-140: 1, -24: 1, -20: 1, 0: 1, 1: 1, 15: 1}, 2),
        (torch.float64, {-140: 1, -24: 1, -20: 1, 0: 1, 1: 1, 15: 1}, 2),
    ],
)
def test_magnitudes_count_binades(dtype: torch.dtype, binades: dict[int, int], zeros: int) -> None:
    values = [0.0, -0.0, 2.0**-140, 2.0**-24, 2.0**-20, 1.5, -3.0, -65504.0, float("inf"), float("nan")]
    found = magnitudes(torch.tensor(values, dtype=torch.float64).to(dtype))
    assert (found.exponents, found.zeros, found.nonfinite) == (binades, zeros, 2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("lr", [1e-5, 1e-4, 3e-3])
def test_lost_updates_are_what_rounding_loses(dtype: torch.dtype, lr: float) -> None:
    # Weights over 25 binades (float16 subnormals among them), and zeros.
    generator = torch.Generator().manual_seed(0)
    spread = 2.0 ** torch.randint(-22, 3, (8192,), generator=generator).float()
    weights = (torch.randn(8192, generator=generator) * spread).to(dtype)
    weights[:100] = 0
    # An optimizer step on a bf16/fp16 parameter computes `w + update` and rounds it to the dtype;
    # away from zero the step meets the ulp of |w|'s own binade.
    stepped = (weights.float() + lr * weights.float().sign()).to(dtype)
    lost = int(((stepped == weights) & (weights != 0)).sum())
    assert lost_updates(magnitudes(weights), str(dtype).removeprefix("torch."), lr) == lost
    assert 0 < lost < 8092


BLOCK = """\
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        h = self.proj(x)
        return self.norm(h)


def factory():
    torch.manual_seed(0)
    return Block().to(torch.bfloat16), (torch.randn(8, 64, dtype=torch.bfloat16),)
"""


def test_amp111_counts_what_an_optimizer_step_loses(tmp_path: Path) -> None:
    from amplint.runtime.child import run_traced
    from amplint.runtime.target import load_factory

    path = write(tmp_path / "block.py", BLOCK)
    spec = {
        "target": f"{path}:factory",
        "device": "cuda",
        "dtype": "bfloat16",
        "autocast": True,
        "values": True,
    }
    rule = rule_by_code("AMP111")
    assert rule is not None
    # An inference run (no backward traced, no learning rate asked for) has no updates to lose.
    assert list(rule.check_graph(run_traced(spec))) == []
    graph = run_traced({**spec, "limits": {"lr": 1e-4}})
    findings = {f.node.source.line: f for f in rule.check_graph(graph) if f.node.source}
    assert sorted(findings) == [12, 13]
    model, _ = load_factory(f"{path}:factory")()
    for line, module in ((12, model.proj), (13, model.norm)):
        weights = torch.cat([module.weight.reshape(-1), module.bias]).detach()
        away = torch.where(weights >= 0, 1e-4, -1e-4)  # a zero moves either way
        kept = (weights.float() + away).to(torch.bfloat16) != weights
        assert findings[line].extra["lost_updates"] == round(1 - int(kept.sum()) / weights.numel(), 4)
    # LayerNorm's weights of 1.0 lose every update; its zero biases keep theirs.
    assert "`norm.weight` loses 100% of its updates" in findings[13].evidence


def test_trace_backward_cli_json_and_text(tmp_path: Path) -> None:
    write(
        tmp_path / "block.py", BLOCK.replace(".to(torch.bfloat16)", "").replace(", dtype=torch.bfloat16", "")
    )
    done = amplint_call(tmp_path, "trace", "block.py:factory", "--backward", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {n["phase"] for n in data["nodes"]} == {"forward", "backward"}
    assert (
        set(data["gradients"])
        == set(data["parameters"])
        == {"proj.weight", "proj.bias", "norm.weight", "norm.bias"}
    )
    assert data["loss"].startswith("the sum of the outputs with alternating signs")
    assert data["summary"]["backward_ops"] == sum(n["phase"] == "backward" for n in data["nodes"])
    graph = DtypeGraph.from_dict(data)
    assert graph.node(graph.gradients["proj.weight"]).phase == "backward"
    text = amplint_call(tmp_path, "trace", "block.py:factory", "--backward", "--ops").stdout
    header = next(line for line in text.splitlines() if line.startswith("id "))
    assert header.split()[:5] == ["id", "op", "dtypes", "policy", "phase"]
    row = next(line for line in text.splitlines() if line.startswith("proj.weight "))
    assert row.split() == ["proj.weight", "float32", "64x64", "float32", "mm", "(bfloat16)"]


def test_learning_rate_and_limit_flags(tmp_path: Path) -> None:
    write(tmp_path / "block.py", BLOCK)

    def amp111(*flags: str) -> list[int]:
        done = amplint_call(tmp_path, "trace", "block.py:factory", "--values", "--format", "json", *flags)
        return [f["line"] for f in json.loads(done.stdout)["findings"] if f["code"] == "AMP111"]

    # At the default 1e-4 both lines lose updates (test_amp111_counts_what_an_optimizer_step_loses);
    # at 1e-2 only weights from 2^2 up lose their updates in bfloat16: none here.
    assert amp111("--lr", "1e-2") == []
    # The projection loses about 74% of its updates, the norm 50%.
    assert amp111("--lost-update-fraction", "0.6") == [12]
    done = amplint_call(tmp_path, "trace", "block.py:factory", "--values", "--lr", "0")
    assert done.returncode == 2 and "'lr' must be a number at least 1e-12" in done.stderr


def test_backward_needs_trainable_parameters(tmp_path: Path) -> None:
    frozen = BLOCK.replace("return Block().to(torch.bfloat16)", "return Block().requires_grad_(False)")
    write(tmp_path / "block.py", frozen)
    done = amplint_call(tmp_path, "trace", "block.py:factory", "--backward")
    assert done.returncode == 2
    assert "--backward needs a model with trainable floating-point parameters" in done.stderr


def test_a_language_model_is_differentiated_through_cross_entropy(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 256,
        "max_position_embeddings": 128,
    }
    path = write(tmp_path / "config.json", json.dumps(config))
    done = amplint_call(
        tmp_path, "trace", "--hf-config", str(path), "--backward", "--seq-len", "16", "--format", "json"
    )
    data = json.loads(done.stdout)
    assert done.returncode in (0, 1), done.stderr
    assert (
        data["loss"]
        == "cross-entropy of the logits against random labels over 256 classes, mean over 16 positions"
    )
    assert set(data["gradients"]) == set(data["parameters"])
    assert "lm_head.weight" in data["gradients"]
    backward = [n for n in data["nodes"] if n["phase"] == "backward" and n["source"]]
    assert any(n["source"]["path"].endswith("modeling_llama.py") for n in backward)
