"""Runtime findings that a real run would justify: AMP109 gives way to measured headroom, AMP108
ranks by the error each op adds, hints that fit the trace (no `.float()` where autocast casts back
down), AMP103 only where a value differs, AMP111 only for a training run."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from amplint.rules import rule_by_code  # noqa: E402
from amplint.runtime import DtypeGraph, replay, trace  # noqa: E402
from amplint.runtime.graph import DtypeNode  # noqa: E402


def _findings(graph: DtypeGraph, code: str) -> list:
    rule = rule_by_code(code)
    assert rule is not None
    return list(rule.check_graph(graph))


class Scores(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(32, 32)
        self.k = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k = self.q(x), self.k(x)
        return torch.softmax(q @ k.transpose(-1, -2), dim=-1)


def _scores(scale: float, **options: object) -> DtypeGraph:
    torch.manual_seed(0)
    return replay(Scores(), (scale * torch.randn(2, 16, 32),), **options)  # type: ignore[arg-type]


def test_amp109_gives_way_to_the_headroom_measured() -> None:
    # Small activations: the float16 scores stay far below 65504, as --values measures.
    calm = _scores(0.1, autocast=False, param_dtype=torch.float16)
    assert calm.values is not None
    assert _findings(calm, "AMP109") == []
    # Large ones come within a few bits of it: the dtype's hazard stands.
    hot = _scores(300.0, autocast=False, param_dtype=torch.float16)
    assert len(_findings(hot, "AMP109")) == 1
    # Without a values replay the dtype alone speaks.
    torch.manual_seed(0)
    plain = trace(Scores(), (torch.randn(2, 16, 32),), autocast=False, param_dtype=torch.float16)
    assert len(_findings(plain, "AMP109")) == 1


def test_amp109_hint_fits_autocast() -> None:
    """Under float16 autocast the product runs in float16 whatever it reads: `.float()` on q and k
    is cast back down, so the hint says to turn autocast off around it; without autocast it does
    not."""
    torch.manual_seed(0)
    under = trace(Scores(), (torch.randn(2, 16, 32),), dtype=torch.float16)
    (finding,) = _findings(under, "AMP109")
    assert 'with torch.autocast("cuda", enabled=False)' in finding.help
    assert "bfloat16 instead of float16" in finding.help
    cast = trace(Scores(), (torch.randn(2, 16, 32),), autocast=False, param_dtype=torch.float16)
    (finding,) = _findings(cast, "AMP109")
    assert "enabled=False" not in finding.help
    assert "torch.matmul(q.float(), k.float().transpose(-1, -2))" in finding.help


class Cancellation(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shifted = x * 3.0 + 1000.0
        restored = shifted - 1000.0  # float16 keeps steps of 0.5 at 1000: the error jumps here
        return restored * 2.0


def test_amp108_ranks_by_the_error_each_op_adds() -> None:
    torch.manual_seed(0)
    graph = replay(Cancellation(), (torch.randn(256),), autocast=False, param_dtype=torch.float16)
    findings = _findings(graph, "AMP108")
    assert findings[0].node.op == "sub"
    jumps = [f.extra["jump"] for f in findings]
    assert jumps == sorted(jumps, reverse=True) and jumps[0] > 0.05
    assert graph.values is not None
    for finding in findings:  # the jump: the op's error less the largest error it received
        received = max(
            (graph.values.nodes[i].error for i in finding.node.inputs if i in graph.values.nodes), default=0.0
        )
        assert finding.extra["jump"] == pytest.approx(graph.values.nodes[finding.node.id].error - received)
    assert "raises the relative error from" in findings[0].message


def _node(node_id: int, op: str, dtype: str, policy: str, inputs: list[int]) -> DtypeNode:
    from amplint.runtime.graph import Source

    source = Source(path="/m.py", line=10 + node_id, column=1) if policy != "input" else None
    return DtypeNode(node_id, op, f"aten.{op}.default", dtype, [], [2, 2], policy, source, None, inputs)


def test_amp103_skips_shape_ops_and_values_nothing_computes_with() -> None:
    nodes = [
        _node(0, "input", "bfloat16", "input", []),
        _node(1, "exp", "float32", "fp32", [0]),  # CPU autocast keeps exp in bfloat16
        _node(2, "unsqueeze", "float32", "lower_precision", [1]),  # a shape op differing with it
        _node(3, "mul", "float32", "inherited", [2]),
    ]
    graph = DtypeGraph(nodes, "cuda", "bfloat16", True, None, "2.13")
    keys = graph.op_keys()
    graph.cpu_dtypes = {keys[1]: "bfloat16", keys[2]: "bfloat16", keys[3]: "bfloat16"}
    assert [f.node.op for f in _findings(graph, "AMP103")] == ["exp"]


class Gram(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        return h @ h.transpose(-1, -2)


def test_overflow_hint_fits_autocast() -> None:
    """A product that overflows under float16 autocast: `.float()` on its inputs is cast back down,
    so the hint is autocast off around it; without autocast, upcasting the inputs works."""
    torch.manual_seed(0)
    under = replay(Gram(), (300 * torch.randn(2, 8, 32),), dtype=torch.float16)
    (first,) = _findings(under, "AMP105")
    assert first.node.op == "bmm"
    assert 'with torch.autocast("cuda", enabled=False)' in first.help
    torch.manual_seed(0)
    cast = replay(Gram(), (300 * torch.randn(2, 8, 32),), autocast=False, param_dtype=torch.float16)
    (first,) = _findings(cast, "AMP105")
    assert "compute this product in float32 (upcast its inputs)" in first.help
