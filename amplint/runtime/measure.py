"""How much precision a late upcast, or an op left in half precision, costs, measured on real tensors.

The traced graph is replayed on CPU with the factory's own inputs and initialised weights, every op
in the dtype the trace recorded (autocast's casts are explicit nodes, so CUDA autocast's choices are
replayed as made). Along each chain that kept a value in low precision before autocast upcast it
(`chains.late_upcasts`), the same ops are also evaluated in float64 and in float32 from the same
input: the float64 value is the reference, the float32 one is what the fix (an upcast at the start
of the chain) would give. The relative errors at the upcast are stored in `DtypeGraph.measured`, by
the cast's id; so is the error of each flagged kind of op that ran in bf16/fp16 (a softmax, a norm
statistic, a cumulative sum), against the same op in float64 and float32 from the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from typing import Any

import torch

from amplint.runtime.chains import HALF, computing, late_upcasts
from amplint.runtime.compat import tree_leaves
from amplint.runtime.cpu_replay import Replay, first_tensor, relative_errors
from amplint.runtime.graph import DtypeGraph

# Ops that rules flag for computing in half precision (softmax, norm statistics, accumulations):
# each one that ran in bf16/fp16 is measured against itself in float64 and float32.
_SINGLE = frozenset(
    {
        "_softmax",
        "_log_softmax",
        "cumsum",
        "cumprod",
        "logcumsumexp",
        "mean",
        "var",
        "var_mean",
        "pow",
        "rsqrt",
        "sqrt",
    }
)


def measure(
    graph: DtypeGraph,
    graph_module: torch.fx.GraphModule,
    fx_nodes: Sequence[torch.fx.Node],
    inputs: Any,
    lines: Set[tuple[str, int]] = frozenset(),
) -> None:
    """Fill `graph.measured` for the late upcasts whose chain holds a lossy op, the ops rules flag
    for running in half precision, and every half-precision op at `lines` (absolute path, line);
    `fx_nodes[i]` is the node of `graph.nodes[i]`; `inputs` are the real tensors in the structure the
    graph was traced with. On failure `graph.measure_note` says why."""
    lates = [late for late in late_upcasts(graph) if late.lossy]
    singles = {
        fx_nodes[node.id]: node.id
        for node in computing(graph.nodes)
        if node.dtype in HALF
        and (
            node.op in _SINGLE or (node.source is not None and (node.source.path, node.source.line) in lines)
        )
    }
    if not lates and not singles:
        return
    shadowed = {fx_nodes[node.id] for late in lates for node in late.path}
    casts = {fx_nodes[late.cast.id]: late.cast.id for late in lates}
    replay = _Measure(graph_module, shadowed, casts, singles)
    try:
        with torch.no_grad():
            replay.run(*tree_leaves(inputs))
    except Exception as exc:  # an op without a CPU kernel, a model that needs its GPU
        graph.measure_note = f"the replay on CPU failed: {type(exc).__name__}: {str(exc)[:200]}"
        return
    graph.measured = replay.measured


class _Measure(Replay):
    """Runs the graph on CPU in the traced dtypes, with float64 and float32 shadows of the values on
    the chains, and measures the error at each upcast."""

    def __init__(
        self,
        module: torch.fx.GraphModule,
        shadowed: set[torch.fx.Node],
        casts: dict[torch.fx.Node, int],
        singles: dict[torch.fx.Node, int],
    ) -> None:
        super().__init__(module)
        self.shadowed = shadowed
        self.casts = casts
        self.singles = singles
        self.shadows: dict[torch.dtype, dict[torch.fx.Node, torch.Tensor]] = {
            torch.float64: {},
            torch.float32: {},
        }
        self.measured: dict[int, dict[str, float]] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op != "call_function":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        if n in self.shadowed:
            for dtype, shadows in self.shadows.items():
                shadows[n] = first_tensor(self.call(n, *self.converted(n, dtype, shadows)))
        if n in self.casts:
            source = n.all_input_nodes[0]
            reference = self.shadows[torch.float64].get(source)
            fixed = self.shadows[torch.float32].get(source)
            if reference is not None and fixed is not None:
                self.measured[self.casts[n]] = _errors(first_tensor(args[0]), reference, fixed)
        result = self.call(n, args, kwargs)
        if n in self.singles:
            # The op itself in float64 and in float32 from the same inputs, against what it gave.
            try:
                reference, fixed = (
                    first_tensor(self.call(n, *self.converted(n, dtype)))
                    for dtype in (torch.float64, torch.float32)
                )
                if bool(torch.isfinite(first_tensor(result)).all()):  # an overflow is a finding of its own
                    self.measured[self.singles[n]] = _errors(first_tensor(result), reference, fixed)
            except (RuntimeError, TypeError):  # an op whose float64 form takes other arguments
                pass
        return result


def _errors(traced: torch.Tensor, reference: torch.Tensor, fixed: torch.Tensor) -> dict[str, float]:
    largest, mean = relative_errors(traced, reference)
    fixed_largest, fixed_mean = relative_errors(fixed, reference)
    return {"max": largest, "mean": mean, "fixed_max": fixed_largest, "fixed_mean": fixed_mean}
