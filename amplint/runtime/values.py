"""The values replay: every op of a traced graph run on real tensors, in the dtypes it was traced in
and in float64 alongside, to find where inf or NaN first appears, which values come close to the
dtype's largest, which flush to zero, and which ops add the most error.

Each node is computed three times from real tensors (the factory's inputs, the model's weights):
as traced; in float64 from the float64 values of its inputs (the reference, every floating-point
value and dtype argument in float64, so a cast to half becomes a cast to float64); and in its traced
dtypes from the reference's inputs rounded to the dtypes it reads (its local error: the error the op
shows when everything before it was exact up to its own dtypes, which is its own rounding plus how
much it amplifies the rounding of its inputs, as `1 - x` does near 1). The statistics are stored on
the graph as `amplint.runtime.graph.Values`; the rules AMP105-AMP108 read them. Each value is freed
after its last use, so memory holds the weights and the activations still to be read. The binades of
half-precision parameters (AMP111) and, for a traced backward, of each parameter's float64 gradient
(what float16 loss scaling must hold) are counted too.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Sequence
from typing import Any

import torch

from amplint.runtime.chains import VIEWS, at, where
from amplint.runtime.compat import tree_leaves, tree_map
from amplint.runtime.cpu_replay import Replay, first_tensor, relative_errors
from amplint.runtime.graph import (
    DtypeGraph,
    Magnitudes,
    NodeValues,
    TraceError,
    ValueLimits,
    Values,
    source_of,
)

__all__ = ["ReplayError", "replay_values"]

_GB = 1024**3
# Views that keep every element (reordered, reshaped or repeated): their statistics are their input's.
_REORDERS = frozenset(
    {"t", "transpose", "permute", "view", "_unsafe_view", "reshape", "expand", "unsqueeze", "squeeze"}
    | {"clone", "alias", "detach", "contiguous", "lift_fresh_copy"}
)


class ReplayError(TraceError):
    """The values replay cannot run (not enough memory); the message says why and what to do."""


def replay_values(
    graph: DtypeGraph,
    graph_module: torch.fx.GraphModule,
    fx_nodes: Sequence[torch.fx.Node],
    inputs: Any,
    limits: ValueLimits | None = None,
    max_memory: int | None = None,
) -> None:
    """Fill `graph.values` from a replay of `graph_module` on `inputs` (real tensors in the structure
    the graph was traced with); `fx_nodes[i]` is the node of `graph.nodes[i]`. Raises `ReplayError`
    when the estimated memory exceeds `max_memory` (default: what the system has available)."""
    ids = {fx_node: i for i, fx_node in enumerate(fx_nodes)}
    needed, biggest = _estimate(graph_module)
    allowed = _available() if max_memory is None else max_memory
    if allowed is not None and needed > allowed:
        where_ = f" (the largest value: `{biggest[0]}` at {biggest[1]})" if biggest else ""
        raise ReplayError(
            f"the values replay needs about {_size(needed)} beyond the weights{where_}, and "
            f"{_size(allowed)} are available: shorten the inputs (sequence length, batch), "
            "or allow more (--max-memory GB; `max_memory` in bytes from Python)"
        )
    replayer = _ValuesReplay(graph_module, ids, graph)
    values = Values(outputs=_outputs(graph_module, ids), limits=limits or ValueLimits())
    with torch.no_grad():
        try:
            replayer.run(*tree_leaves(inputs))
        except _Stopped as stop:
            values.stopped_at = ids.get(stop.node)
            values.stopped = f"{type(stop.error).__name__}: {str(stop.error).strip()[:300]}"
    values.nodes = replayer.stats
    values.notes = replayer.notes
    values.weights = replayer.weights
    values.gradients = replayer.gradients
    values.peak_bytes = _peak_rss()
    graph.values = values


class _Stopped(Exception):
    """An op raised on the traced values (torch.multinomial on NaN probabilities): the replay ends."""

    def __init__(self, node: torch.fx.Node, error: Exception) -> None:
        super().__init__(str(error))
        self.node, self.error = node, error


class _ValuesReplay(Replay):
    def __init__(
        self, module: torch.fx.GraphModule, ids: dict[torch.fx.Node, int], graph: DtypeGraph
    ) -> None:
        super().__init__(module)
        self.ids = ids
        self.dtype_graph = graph
        self.reference: dict[torch.fx.Node, Any] = {}  # float64 values, freed with the traced ones
        self.stats: dict[int, NodeValues] = {}
        self.notes: list[str] = []
        self._reference_nan: set[torch.fx.Node] = set()  # nodes whose reference holds a NaN
        self._model_nan = False
        self._parameters = set(graph.parameters.values())
        self._gradients = set(graph.gradients.values())
        self.weights: dict[int, Magnitudes] = {}
        self.gradients: dict[int, Magnitudes] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.op == "placeholder":
            result = super().run_node(n)
            value = first_tensor(result)
            if n in self.ids and _floating(value):
                stats = self.stats[self.ids[n]] = _input_stats(value)
                if stats.nan:
                    self._reference_nan.add(n)
                if self.ids[n] in self._parameters and value.dtype in _HALF:  # for AMP111
                    self.weights[self.ids[n]] = magnitudes(value)
            return result
        if n.op != "call_function":
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        seeded = _seeded(n)
        rng = torch.get_rng_state() if seeded else None
        try:
            result = self.call(n, args, kwargs)
        except Exception as exc:
            raise _Stopped(n, exc) from exc
        if rng is not None:  # the reference draws the same random numbers
            torch.set_rng_state(rng)
        try:
            reference = self.call(n, *self.converted(n, torch.float64, self.reference))
        except (RuntimeError, TypeError, NotImplementedError) as exc:  # no float64 kernel
            reference = tree_map(_to_float64, result)
            self.notes.append(
                f"{self._name(n)} has no float64 form ({type(exc).__name__}): its reference is its own value"
            )
        self.reference[n] = reference
        traced, ref = first_tensor(result), first_tensor(reference)
        if n in self.ids and _floating(traced) and isinstance(ref, torch.Tensor):
            source = n.all_input_nodes[0] if _op(n) in _REORDERS and n.all_input_nodes else None
            if source is not None and source in self.ids and self.ids[source] in self.stats:
                # The same elements in another order or shape (a transposed weight): the same values.
                stats = self.stats[self.ids[source]]
            else:
                stats = _stats(traced, ref, traced if _exact(n) else self._local(n, rng))
            self.stats[self.ids[n]] = stats
            self._check_reference(n, stats)
            if self.ids[n] in self._gradients:
                self.gradients[self.ids[n]] = magnitudes(ref)
        for done in self.user_to_last_uses.get(n, ()):
            self.reference.pop(done, None)
        return result

    def _local(self, n: torch.fx.Node, rng: torch.Tensor | None) -> torch.Tensor | None:
        """The op in its traced dtypes from the reference's inputs rounded to those dtypes."""
        if rng is not None:
            torch.set_rng_state(rng)
        try:
            return first_tensor(self.call(n, *self.converted(n, None, self.reference)))
        except (RuntimeError, TypeError, NotImplementedError):
            return None

    def _check_reference(self, n: torch.fx.Node, stats: NodeValues) -> None:
        """A NaN that float64 produces from inputs without one is the model's own, not rounding."""
        if not stats.reference_nan:
            return
        if not any(p in self._reference_nan for p in n.all_input_nodes) and not self._model_nan:
            self._model_nan = True
            self.notes.append(
                f"the float64 reference produced NaN at {self._name(n)}: the model computes NaN without "
                "any rounding, a bug in the model or its inputs rather than a precision hazard"
            )
        self._reference_nan.add(n)

    def _name(self, n: torch.fx.Node) -> str:
        node = self.dtype_graph.nodes[self.ids[n]] if n in self.ids else None
        if node is None:
            return f"`{n.name}`"
        return f"`{node.op}` at {where(node)}" + (f" (in {node.module})" if node.module else "")


_HALF = (torch.bfloat16, torch.float16)
# Elements counted at a time: a copy of a whole embedding matrix would be gigabytes.
_CHUNK = 1 << 24
# Each format's bits, read as integers: the integer type of its width, its mantissa's bits, the
# largest exponent field (inf and NaN) and the exponent bias.
_LAYOUTS = {
    torch.float16: (torch.int16, 10, 0x1F, 15),
    torch.bfloat16: (torch.int16, 7, 0xFF, 127),
    torch.float32: (torch.int32, 23, 0xFF, 127),
    torch.float64: (torch.int64, 52, 0x7FF, 1023),
}


def magnitudes(value: torch.Tensor) -> Magnitudes:
    """How many elements of `value` lie in each binade (see `Magnitudes`), from the exponent field
    of each element's bits: one pass over a weight, where `frexp` would take several."""
    kind, mantissa, top, bias = _LAYOUTS[value.dtype]
    counts = torch.zeros(top + 1, dtype=torch.int64)
    subnormal: list[torch.Tensor] = []
    for chunk in value.detach().reshape(-1).split(_CHUNK):
        field = (chunk.contiguous().view(kind) >> mantissa) & top
        here = torch.bincount(field.to(torch.uint8 if top <= 0xFF else torch.int32), minlength=top + 1)
        counts += here
        if here[0]:  # zeros, or values below the normal range, whose binade is their leading bit's
            tiny = chunk[(field == 0) & (chunk != 0)]
            subnormal.append(torch.frexp(tiny.to(torch.float64)).exponent - 1)
    found = {e - bias: n for e, n in enumerate(counts.tolist()) if n and 0 < e < top}
    for binade in torch.cat(subnormal).tolist() if subnormal else ():
        found[binade] = found.get(binade, 0) + 1
    zeros = int(counts[0]) - sum(t.numel() for t in subnormal)
    return Magnitudes(exponents=dict(sorted(found.items())), zeros=zeros, nonfinite=int(counts[top]))


def _floating(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 0


def _to_float64(value: Any) -> Any:
    return value.to(torch.float64) if isinstance(value, torch.Tensor) and value.is_floating_point() else value


def _seeded(n: torch.fx.Node) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())


def _op(n: torch.fx.Node) -> str:
    return str(getattr(getattr(n.target, "overloadpacket", None), "__name__", ""))


def _exact(n: torch.fx.Node) -> bool:
    """Ops that move values without computing: their local error is nil."""
    return n.target is operator.getitem or _op(n) in VIEWS


def _input_stats(value: torch.Tensor) -> NodeValues:
    """A placeholder (an input, a weight): its range; it is its own reference. One pass over a
    weight when it is finite, as weights are."""
    low, high = (float(v) for v in torch.aminmax(value))
    inf = nan = 0.0
    if not (math.isfinite(low) and math.isfinite(high)):
        count = value.numel()
        inf, nan = int(value.isinf().sum()) / count, int(value.isnan().sum()) / count
        low, high = _range(value[value.isfinite()])
    return NodeValues(
        low=low,
        high=high,
        inf=inf,
        nan=nan,
        overflow=0.0,
        reference_nan=nan,
        underflow=0.0,
        error=0.0,
        error_max=0.0,
        local_error=0.0,
        headroom=_headroom(value.dtype, max(abs(low), abs(high))),
    )


def _stats(traced: torch.Tensor, reference: torch.Tensor, local: torch.Tensor | None) -> NodeValues:
    count = traced.numel()
    reference = reference.to(torch.float64)
    if reference.shape != traced.shape:  # an op whose float64 form broadcasts differently
        reference = traced.to(torch.float64)
    finite, ref_finite = traced.isfinite(), reference.isfinite()
    info = torch.finfo(traced.dtype)
    # The range is that of every finite value; but positions the reference itself puts at or past
    # the dtype's largest value (a mask built from `finfo.min`) are there by design: they do not
    # count against the headroom.
    absolute = reference.abs()
    low, high = _range(traced[finite])
    within = _range(traced[finite & ~(absolute >= info.max)])
    # A flushed value counts where it is within the dtype's precision of the largest one: smaller
    # ones vanish next to it in any sum anyway (a softmax's far tail).
    magnitude = absolute.where(ref_finite, 0.0)
    significant = magnitude >= info.eps * float(magnitude.max())
    nonzero = significant & (magnitude != 0)
    flushed = nonzero & (traced == 0) & (magnitude < info.tiny)
    both = finite & ref_finite
    value64 = traced[both].to(torch.float64)
    ref_both = reference[both]
    return NodeValues(
        low=low,
        high=high,
        inf=int(traced.isinf().sum()) / count,
        nan=int(traced.isnan().sum()) / count,
        overflow=int((~finite & ref_finite).sum()) / count,
        reference_nan=int(reference.isnan().sum()) / count,
        underflow=int(flushed.sum()) / max(int(nonzero.sum()), 1),
        error=_normwise(value64, ref_both),
        error_max=relative_errors(value64, ref_both)[0],
        local_error=0.0 if local is None or local is traced else _local_error(local, reference),
        headroom=_headroom(traced.dtype, max(abs(within[0]), abs(within[1]))),
    )


def _range(values: torch.Tensor) -> tuple[float, float]:
    """The smallest and largest of `values`; (0, 0) when there are none (the counts of inf and NaN
    say what the tensor held instead)."""
    return (float(values.min()), float(values.max())) if values.numel() else (0.0, 0.0)


def _local_error(local: torch.Tensor, reference: torch.Tensor) -> float:
    if local.shape != reference.shape:
        return 0.0
    both = local.isfinite() & reference.isfinite()
    return _normwise(local[both].to(torch.float64), reference[both])


def _normwise(value: torch.Tensor, reference: torch.Tensor) -> float:
    """|value - reference| / |reference| in the 2-norm: the error of the tensor as a whole, which
    elements near zero cannot blow up."""
    difference = float(torch.linalg.vector_norm(value - reference))
    if difference == 0.0:
        return 0.0
    scale = float(torch.linalg.vector_norm(reference))
    return min(difference / scale, 1e300) if scale > 0 else 1.0


def _headroom(dtype: torch.dtype, absmax: float) -> float | None:
    if absmax == 0.0:
        return None
    return math.log2(torch.finfo(dtype).max / absmax)


def _outputs(graph_module: torch.fx.GraphModule, ids: dict[torch.fx.Node, int]) -> list[int]:
    found: list[int] = []
    for node in graph_module.graph.nodes:
        if node.op == "output":
            for value in tree_leaves(node.args[0]):
                if isinstance(value, torch.fx.Node) and value in ids:
                    found.append(ids[value])
    return found


def _estimate(graph_module: torch.fx.GraphModule) -> tuple[int, tuple[str, str] | None]:
    """Bytes the replay holds beyond the inputs and weights at its peak, from the traced shapes, and
    where the largest value is made. Held: each value still to be read, as traced (nothing for a
    view, which shares its input's memory) and in float64; while an op runs, also the float64
    copies of the weights and inputs it reads and, for an op that computes, about three more
    float64 outputs (its local error and the statistics' temporaries)."""
    last_use: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph_module.graph.nodes:
        for producer in node.all_input_nodes:
            last_use[producer] = node
    freed_after: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    for producer, user in last_use.items():
        freed_after.setdefault(user, []).append(producer)
    live = peak = 0
    held: dict[torch.fx.Node, int] = {}
    biggest: tuple[int, torch.fx.Node | None] = (0, None)
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        tensors = _tensors(node.meta.get("val"))
        reference = sum(value.numel() * 8 for value in tensors)
        view = _exact(node)  # views and reorders cost only their float64 reference
        held[node] = reference + (0 if view else sum(v.numel() * v.element_size() for v in tensors))
        live += held[node]
        inputs = [p for p in node.all_input_nodes if p.op == "placeholder"]
        copies = sum(value.numel() * 8 for p in inputs for value in _tensors(p.meta.get("val")))
        peak = max(peak, live + copies + (0 if view else 3 * reference))
        if held[node] > biggest[0]:
            biggest = (held[node], node)
        for producer in freed_after.get(node, ()):
            live -= held.pop(producer, 0)
    node = biggest[1]
    if node is None:
        return peak, None
    return peak, (_op(node) or str(node.target), at(source_of(node.meta.get("stack_trace"))))


def _tensors(value: Any) -> list[torch.Tensor]:
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _size(count: int) -> str:
    return f"{count / _GB:.1f} GB" if count >= _GB // 10 else f"{count / 1024**2:.1f} MB"


def _available() -> int | None:
    """Memory the system can give without swapping (Linux's MemAvailable); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _peak_rss() -> int | None:
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if os.uname().sysname == "Darwin" else peak * 1024
