"""Walks over a values replay (`DtypeGraph.values`) that AMP105-AMP108 share: where an overflow
started and where it surfaced, how a node's values compare with its inputs', and which fix fits
the op. Plain data, no torch."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from amplint.runtime.chains import VIEWS, upcast_help, where
from amplint.runtime.graph import DtypeGraph, DtypeNode, NodeValues
from amplint.runtime.numbers import value_range

PRODUCTS = frozenset(
    {"mm", "bmm", "addmm", "baddbmm", "matmul", "linear", "convolution", "addmv", "mv", "dot"}
)
_SOFTMAX = frozenset({"_softmax", "softmax", "_log_softmax", "_safe_softmax"})
_MASKS = frozenset({"masked_fill", "masked_fill_", "fill", "fill_", "full", "full_like", "new_full", "where"})
_EXPONENTIALS = frozenset({"exp", "exp2", "expm1", "pow"})
_CASTS = frozenset({"explicit_cast", "autocast_cast"})
_SUMS = frozenset({"sum", "cumsum", "mean", "prod", "cumprod", "var", "var_mean", "logsumexp"})
# How the tests trace the value rules' examples: in float16, replayed.
VALUES_IN_FLOAT16: Mapping[str, object] = MappingProxyType({"dtype": "float16", "values": True})
# How far downstream a product's result is looked for a softmax (views, scale, mask, cast).
_SCORES_REACH = 8
# Ops whose output is bounded whatever their input.
_SATURATING = frozenset({"tanh", "hardtanh", "nan_to_num"})


def replayed(graph: DtypeGraph) -> Iterator[tuple[DtypeNode, NodeValues]]:
    """The computing nodes that were replayed, with their values, in graph order; views are left
    out (they show their producer's values again)."""
    if graph.values is None:
        return
    for node in graph.nodes:
        found = graph.values.nodes.get(node.id)
        if found is not None and node.policy != "input" and node.op not in VIEWS:
            yield node, found


def producer_values(graph: DtypeGraph, node: DtypeNode) -> list[NodeValues]:
    assert graph.values is not None
    return [graph.values.nodes[i] for i in node.inputs if i in graph.values.nodes]


def ranges(graph: DtypeGraph, node: DtypeNode) -> str:
    """The ranges of a node's replayed inputs, as `[low, high]` each (see `value_range`)."""
    return ", ".join(value_range(v) for v in producer_values(graph, node)) or "no tensor inputs"


def per_line(found: Iterable[tuple[DtypeNode, NodeValues]]) -> list[tuple[DtypeNode, NodeValues]]:
    """The first of each source line (a loop body runs its line many times)."""
    seen: set[tuple[str, int]] = set()
    kept = []
    for node, values in found:
        if node.source is None or (node.source.path, node.source.line) in seen:
            continue
        seen.add((node.source.path, node.source.line))
        kept.append((node, values))
    return kept


def downstream(graph: DtypeGraph, node: DtypeNode, keep: Iterable[int] | None = None) -> list[DtypeNode]:
    """Every node `node` feeds, in graph order; with `keep`, only through nodes whose id is in it."""
    allowed = None if keep is None else set(keep)
    seen: set[int] = set()
    frontier = [node]
    while frontier:
        following = []
        for current in frontier:
            for consumer in graph.consumers(current):
                if consumer.id not in seen and (allowed is None or consumer.id in allowed):
                    seen.add(consumer.id)
                    following.append(consumer)
        frontier = following
    return [graph.node(i) for i in sorted(seen)]


def upstream(graph: DtypeGraph, nodes: Iterable[DtypeNode]) -> set[int]:
    """The ids of every node that feeds `nodes`, and theirs."""
    seen: set[int] = set()
    stack = [n.id for n in nodes]
    while stack:
        current = stack.pop()
        if current not in seen:
            seen.add(current)
            stack.extend(graph.node(current).inputs)
    return seen


def attention_scores(graph: DtypeGraph, node: DtypeNode) -> bool:
    """A batched product (of two activations, as a linear layer is an `mm`) whose result a softmax
    reads within a few ops: attention scores."""
    return node.op in {"bmm", "baddbmm"} and softmax_reading(graph, node) is not None


def softmax_reading(
    graph: DtypeGraph, node: DtypeNode, bounds: list[DtypeNode] | None = None
) -> DtypeNode | None:
    """The softmax that reads `node`'s result within a few ops (scaling, masking, casts), if any,
    not past an op that bounds it (Gemma 2's soft-capping, `tanh(s / c) * c`: an overflow comes out
    finite); those ops are added to `bounds`."""
    frontier, seen = [node], {node.id}
    for _ in range(_SCORES_REACH):
        following = []
        for current in frontier:
            for consumer in graph.consumers(current):
                if consumer.op in _SOFTMAX:
                    return consumer
                if consumer.id not in seen:
                    seen.add(consumer.id)
                    if consumer.op in _SATURATING:
                        if bounds is not None:
                            bounds.append(consumer)
                    else:
                        following.append(consumer)
        frontier = following
    return None


def fix_for(graph: DtypeGraph, node: DtypeNode) -> str:
    """The fix that fits the op whose values leave (or nearly leave) the dtype's range."""
    if attention_scores(graph, node):
        return (
            "use `F.scaled_dot_product_attention` (its fused kernels keep the scores in float32), "
            "or scale the queries before the product (`(q * scaling) @ k.transpose(-1, -2)`; scaling "
            "after it is too late), or compute the scores in float32"
        )
    wider = cast_from(node)
    if wider is not None:
        return (
            f"the values reach this cast near or past {node.dtype}'s largest value: build them within its range "
            f"(a mask from `torch.finfo(torch.{node.dtype}).min`), or keep them in {wider} past this point"
        )
    if node.op in PRODUCTS and node.policy == "lower_precision":  # autocast casts `.float()` back down
        return f"{upcast_help(graph, node)}; or scale an input down before it"
    if node.op in PRODUCTS:
        return _either(
            "compute this product in float32 (upcast its inputs)",
            "scale an input down before it",
            *_bfloat16(node),
        )
    if node.op in _MASKS:
        return "build masks from `torch.finfo(dtype).min` rather than a hand-written constant"
    if node.op in _EXPONENTIALS:
        return "subtract the maximum before exponentiating, or compute it in float32"
    if node.op in _SUMS:
        return "accumulate in float32 (`dtype=torch.float32`, or upcast the input first)"
    if node.policy == "lower_precision":
        return upcast_help(graph, node)
    return _either(
        f"upcast to float32 before `{node.op}` (`.float()` on its input at {where(node)})", *_bfloat16(node)
    )


def cast_from(node: DtypeNode) -> str | None:
    """For a cast, the dtype its input already holds the values in (an upcast before the cast
    changes nothing); None for any other op."""
    if node.policy not in _CASTS:
        return None
    return ", ".join(dict.fromkeys(d for d in node.input_dtypes if d)) or "its input's dtype"


def _bfloat16(node: DtypeNode) -> list[str]:
    """bfloat16 as the way out of float16's range; an op already in bfloat16 (or float32) has none."""
    return ["run in bfloat16, whose range is float32's"] if node.dtype == "float16" else []


def _either(*fixes: str) -> str:
    """`a, b, or c`; `a or b`; `a`."""
    return fixes[0] if len(fixes) == 1 else f"{', '.join(fixes[:-1])}{',' * (len(fixes) > 2)} or {fixes[-1]}"
