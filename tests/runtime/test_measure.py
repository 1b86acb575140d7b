"""The error of a late upcast, measured by replaying the traced graph on real tensors, checked
against what the number formats allow: one rounding to bfloat16 costs at most 2^-8 of the value,
one rounding to float16 at most 2^-11, and float32 about 2^-24 per op."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from amplint.runtime.chains import late_upcasts  # noqa: E402
from amplint.runtime.tracer import trace  # noqa: E402


class SigmoidDecay(nn.Module):
    """One op (sigmoid) between the last matmul and the op autocast upcasts for (exp)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).sigmoid().exp()


def _measured(dtype: torch.dtype) -> dict[str, float]:
    torch.manual_seed(0)
    graph = trace(SigmoidDecay(), (torch.randn(256, 64),), dtype=dtype, measure=True)
    assert graph.measure_note is None
    casts = [late.cast.id for late in late_upcasts(graph) if late.lossy]
    assert len(casts) == 1 and set(graph.measured) == set(casts)
    return graph.measured[casts[0]]


@pytest.mark.parametrize(("dtype", "bits"), [(torch.bfloat16, 8), (torch.float16, 11)])
def test_one_rounding_costs_what_the_format_allows(dtype: torch.dtype, bits: int) -> None:
    measured = _measured(dtype)
    unit = 2.0**-bits
    # 16,384 sigmoid values: the worst is close to the bound, the mean a fraction of it.
    assert unit / 2 < measured["max"] <= unit * (1 + 1e-6)
    assert unit / 8 < measured["mean"] < unit / 2
    # The fix computes the chain in float32 from the same input.
    assert measured["fixed_max"] < 2.0**-22
    assert measured["fixed_mean"] < 2.0**-24


def test_model_without_weights_is_not_measured() -> None:
    with torch.device("meta"):
        model = SigmoidDecay()
    graph = trace(model, (torch.randn(4, 64, device="meta"),), measure=True)
    assert graph.measured == {}
    assert graph.measure_note is not None and "meta device" in graph.measure_note


def test_measurements_survive_the_json_round_trip(tmp_path) -> None:
    from amplint.runtime.graph import DtypeGraph

    torch.manual_seed(0)
    graph = trace(SigmoidDecay(), (torch.randn(8, 64),), measure=True)
    graph.save(tmp_path / "graph.json")
    loaded = DtypeGraph.load(tmp_path / "graph.json")
    assert loaded.measured == graph.measured
    assert all(math.isfinite(value) for item in loaded.measured.values() for value in item.values())


class Probabilities(nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.softmax(-1)


def test_an_op_left_in_half_precision_is_measured_against_itself() -> None:
    torch.manual_seed(0)
    graph = trace(
        Probabilities(), (torch.randn(64, 128),), autocast=False, param_dtype=torch.bfloat16, measure=True
    )
    softmax = next(node for node in graph.nodes if node.op == "_softmax")
    assert softmax.dtype == "bfloat16"
    measured = graph.measured[softmax.id]
    # bfloat16's softmax computes in float32 and rounds its output once.
    assert 2.0**-10 < measured["max"] <= 2.0**-8 * (1 + 1e-6)
    assert measured["fixed_max"] < 2.0**-20


class Guarded(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (x.abs() + 1e-3)


def test_ops_at_the_lines_of_findings_are_measured() -> None:
    import inspect

    line = inspect.getsourcelines(Guarded.forward)[1] + 1
    where = {(inspect.getsourcefile(Guarded), line)}
    args = (torch.randn(64, 64),)
    plain = trace(Guarded(), args, autocast=False, param_dtype=torch.float16, measure=True)
    asked = trace(
        Guarded(), args, autocast=False, param_dtype=torch.float16, measure=True, measure_lines=where
    )
    ops = {node.id: node.op for node in asked.nodes}
    assert not plain.measured  # `abs`, `add` and `div` are not ops rules flag by themselves
    assert {ops[i] for i in asked.measured} == {"abs", "add", "div"}
    # Each op against itself from the same inputs: float16 rounds its result once (at most 2^-11);
    # `add` first rounds its Python constant 1e-3 to float16 too, a second rounding.
    measured = {ops[i]: item for i, item in asked.measured.items()}
    assert measured["div"]["max"] <= 2.0**-11 * (1 + 1e-6)
    assert 2.0**-11 < measured["add"]["max"] <= 2 * 2.0**-11
    assert measured["abs"]["max"] == 0.0  # exact in any format
