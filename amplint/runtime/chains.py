"""Walks over a dtype graph that rules share: where a low-precision value is upcast, which ops kept
it in low precision before that, and how to name a node in a message. Plain data, no torch."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from amplint.diagnostics import Confidence
from amplint.rule import Verdict
from amplint.runtime.graph import DtypeGraph, DtypeNode, Source
from amplint.source import display_path

HALF = frozenset({"bfloat16", "float16"})
# Policies of ops that compute (as opposed to placeholders and casts).
_COMPUTING = frozenset({"lower_precision", "fp32", "fp32_set_opt_dtype", "promote", "inherited"})
# Ops that move or reshape values without rounding them.
VIEWS = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "expand",
        "permute",
        "transpose",
        "t",
        "unsqueeze",
        "squeeze",
        "select",
        "slice",
        "clone",
        "contiguous",
        "alias",
        "detach",
        "split",
        "split_with_sizes",
        "chunk",
        "getitem",
        "cat",
        "stack",
        "index",
        "constant_pad_nd",
        "lift_fresh_copy",
    }
)
# A chain may pass through this many ops between a node and the upcast it reaches.
_REACH = 64
# Ops whose low-precision output loses what a float32 op downstream needs: a squashing nonlinearity
# (its result crowds near 0 or 1, where `1 - x`, `log` and `exp` magnify the rounding) or `1 - x`.
LOSSY = frozenset(
    {"sigmoid", "tanh", "log_sigmoid_forward", "erf", "silu", "gelu", "elu", "hardsigmoid", "rsub"}
)


@dataclass(frozen=True)
class LateUpcast:
    """Autocast's cast to float32 in front of a float32-policy op (or the op itself, when autocast
    gave it `dtype=float32`), and the computing ops that kept the cast's input in low precision
    since the last product, earliest first."""

    cast: DtypeNode
    sink: DtypeNode
    path: tuple[DtypeNode, ...]  # every op from the product to the cast, views included

    @property
    def chain(self) -> tuple[DtypeNode, ...]:
        return tuple(node for node in self.path if node.op not in VIEWS)

    @property
    def lossy(self) -> bool:
        return any(node.op in LOSSY for node in self.path)


def late_upcasts(graph: DtypeGraph) -> Iterator[LateUpcast]:
    for sink in graph.nodes:
        if sink.policy not in {"fp32", "fp32_set_opt_dtype"}:
            continue
        for producer in graph.producers(sink):
            if producer.policy == "autocast_cast" and producer.dtype == "float32":
                yield LateUpcast(producer, sink, _path(graph, next(iter(graph.producers(producer)), None)))
            elif producer.dtype in HALF and sink.dtype == "float32":
                # Autocast passed `dtype=float32` to the op (`cumsum`, `sum`): it upcasts its input itself.
                yield LateUpcast(sink, sink, _path(graph, producer))


def _path(graph: DtypeGraph, current: DtypeNode | None) -> tuple[DtypeNode, ...]:
    """Back from the upcast value's producer through ops that inherited a half dtype, to the matmul,
    input or cast that produced the value; earliest first."""
    path: list[DtypeNode] = []
    for _ in range(_REACH):
        if current is None or current.dtype not in HALF or current.policy != "inherited":
            break
        path.append(current)
        # Follow the low-precision operand (a scalar or float32 operand cannot carry the rounding).
        current = next((p for p in graph.producers(current) if p.dtype in HALF), None)
    return tuple(path[::-1])


def where(node: DtypeNode) -> str:
    """`path:line` of a node's source, the path as reports show it (relative below the working directory)."""
    return at(node.source)


def at(source: Source | None) -> str:
    """`path:line` of a source location, as `where` shows it."""
    if source is None:
        return "an unknown line"
    return f"{display_path(Path(source.path))}:{source.line}"


def step(node: DtypeNode) -> dict[str, object]:
    """A node as one step of a chain in a finding's JSON."""
    source = node.source
    return {
        "op": node.op,
        "dtype": node.dtype,
        "path": source.path if source else None,
        "line": source.line if source else None,
    }


def computing(nodes: Iterable[DtypeNode]) -> list[DtypeNode]:
    return [node for node in nodes if node.policy in _COMPUTING and node.op not in VIEWS]


def upcast_reached(graph: DtypeGraph, node: DtypeNode) -> tuple[DtypeNode, DtypeNode] | None:
    """The first autocast upcast that `node`'s low-precision value reaches through ops that keep it
    in low precision, and the float32-policy op that cast feeds: `(cast, op)`; None if none."""
    seen = {node.id}
    frontier = [node]
    for _ in range(_REACH):
        following: list[DtypeNode] = []
        for current in frontier:
            for consumer in graph.consumers(current):
                if consumer.id in seen:
                    continue
                seen.add(consumer.id)
                if consumer.policy == "autocast_cast" and consumer.dtype == "float32":
                    user = next(iter(graph.consumers(consumer)), None)
                    if user is not None:
                        return consumer, user
                elif consumer.policy in {"fp32", "fp32_set_opt_dtype"} and consumer.dtype == "float32":
                    return consumer, consumer  # an op autocast gave `dtype=float32`
                elif consumer.dtype in HALF and consumer.policy in {"inherited", "promote"}:
                    following.append(consumer)
        if not following:
            return None
        frontier = following
    return None


# Where a value meets softmax: the hazards of attention scores and masks bite there.
SOFTMAX = frozenset({"_softmax", "softmax", "_safe_softmax", "_log_softmax", "scaled_dot_product_attention"})


@dataclass(frozen=True)
class Followed:
    """Where the values of some ops went: the first op on the way that holds them in one of the
    dtypes looked for (None if none did), and the first op where the hazard bites that they reached
    without (None if they reached none)."""

    turned: DtypeNode | None
    bite: DtypeNode | None


def follow(
    graph: DtypeGraph, nodes: Sequence[DtypeNode], bites: frozenset[str], dtypes: frozenset[str] = HALF
) -> Followed:
    """Follow the values `nodes` produced through every op that consumes them, up to the ops in
    `bites` (not past them), looking for one that holds them in `dtypes`: a mask built in float32
    and cast to the scores' float16 two lines later turns float16 at the cast."""
    seen = {node.id for node in nodes}
    frontier = list(nodes)
    bite: DtypeNode | None = None
    for _ in range(_REACH):
        following: list[DtypeNode] = []
        for current in frontier:
            for consumer in graph.consumers(current):
                if consumer.id in seen:
                    continue
                seen.add(consumer.id)
                if consumer.dtype in dtypes or (consumer.op in bites and set(consumer.input_dtypes) & dtypes):
                    return Followed(consumer, bite)
                if consumer.op in bites:
                    bite = bite or consumer
                else:
                    following.append(consumer)
        if not following:
            break
        frontier = following
    return Followed(None, bite)


def turned_by(node: DtypeNode) -> str:
    """How a followed value came to be half precision at `node`, in words."""
    if node.dtype in HALF:
        return f"then `{node.op}` at {where(node)} made it {node.dtype}"
    half = sorted(HALF & {dtype for dtype in node.input_dtypes if dtype is not None})
    return f"then `{node.op}` at {where(node)} took it in {'/'.join(half)}"


def traced_back(
    graph: DtypeGraph, node: DtypeNode, origins: frozenset[str], dtypes: frozenset[str] = HALF
) -> Followed:
    """Back from `node` through its producers to the op in `origins` that made its value (a
    sampler's softmax): the first op on the way in `dtypes` (`turned`), and that origin (`bite`)."""
    seen = {node.id}
    frontier = [node]
    for _ in range(_REACH):
        before: list[DtypeNode] = []
        for current in frontier:
            for producer in graph.producers(current):
                if producer.id in seen or producer.policy == "input":
                    continue
                seen.add(producer.id)
                if producer.dtype in dtypes:
                    return Followed(producer, None)
                if producer.op in origins:
                    return Followed(None, producer)
                before.append(producer)
        if not before:
            break
        frontier = before
    return Followed(None, None)


def half_precision_verdict(
    graph: DtypeGraph, nodes: Sequence[DtypeNode], what: str, bites: frozenset[str] = frozenset()
) -> Verdict | None:
    """The verdict of a rule whose hazard is `what` computed in half precision: confirmed when an op
    at the finding's lines ran in bfloat16/float16. Refuted when every one ran in float32 and, for a
    hazard that bites further on (`bites`: the ops where it does), their values were followed there
    and stayed float32; confirmed when they turned half on the way; else the trace cannot tell."""
    ops = computing(nodes)
    if not ops:
        return None
    half = [node for node in ops if node.dtype in HALF]
    if half:
        node = half[0]
        evidence = f"{what}: `{node.op}` at {where(node)} ran in {node.dtype}"
        measured = measured_error(graph, half)
        if measured is None:
            return Verdict(Confidence.CONFIRMED, evidence)
        described = describe_error(graph, measured, "computed in float32")
        return Verdict(Confidence.CONFIRMED, f"{evidence}; {described}", {"measured": measured})
    if not all(node.dtype in {"float32", "float64"} for node in ops):
        return None
    names = ", ".join(dict.fromkeys(f"`{node.op}`" for node in ops))
    if not bites:
        return Verdict(Confidence.REFUTED, f"{names} at {where(ops[0])} ran in float32")
    followed = follow(graph, ops, bites)
    if followed.turned is not None:
        return Verdict(
            Confidence.CONFIRMED,
            f"{what}: {names} at {where(ops[0])} ran in float32, {turned_by(followed.turned)}",
        )
    if followed.bite is not None:
        return Verdict(
            Confidence.REFUTED,
            f"{names} at {where(ops[0])} ran in float32 and the value stayed float32 up to "
            f"`{followed.bite.op}` at {where(followed.bite)}",
        )
    return None


def measured_error(graph: DtypeGraph, casts: Sequence[DtypeNode]) -> dict[str, float] | None:
    """The relative error measured at these upcasts (see `DtypeGraph.measured`), taken together:
    the largest maximum and the mean of the means, before and after the fix; None if not measured."""
    found = [graph.measured[cast.id] for cast in casts if cast.id in graph.measured]
    if not found:
        return None
    return {
        "max": max(item["max"] for item in found),
        "mean": sum(item["mean"] for item in found) / len(found),
        "fixed_max": max(item["fixed_max"] for item in found),
        "fixed_mean": sum(item["fixed_mean"] for item in found) / len(found),
    }


def describe_error(
    graph: DtypeGraph,
    measured: dict[str, float],
    fixed: str = "with the upcast moved to the start of the chain",
) -> str:
    return (
        f"measured against float64 on {graph.replayed_on}: relative error "
        f"max {measured['max']:.1e}, mean {measured['mean']:.1e}; {fixed}: "
        f"max {measured['fixed_max']:.1e}, mean {measured['fixed_mean']:.1e}"
    )


def upcast_help(graph: DtypeGraph, node: DtypeNode) -> str:
    """The change that computes `node`'s op in float32, checked against the trace: where autocast
    picked the op's dtype (a matmul under autocast), `.float()` on its inputs changes nothing, since
    autocast casts them down again; autocast must be off around the op. A float16 op may run in
    bfloat16 instead, which has float32's range."""
    if node.policy == "lower_precision":  # autocast runs it in its dtype, whatever it reads
        advice = (
            f"autocast runs `{node.op}` in {node.dtype} whatever its inputs are, so `.float()` on them "
            'changes nothing: turn autocast off around it (`with torch.autocast("cuda", enabled=False):`, '
            "inputs `.float()`)"
        )
    else:
        advice = f"compute `{node.op}` in float32 (`.float()` on its input)"
    if node.dtype == "float16":
        advice += "; or run in bfloat16 instead of float16 (float32's range, fewer bits)"
    return advice
