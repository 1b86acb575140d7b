"""Walks over a dtype graph that rules share: where a low-precision value is upcast, which ops kept
it in low precision before that, and how to name a node in a message. Plain data, no torch."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence

from amplint.diagnostics import Confidence
from amplint.rule import Verdict
from amplint.runtime.graph import DtypeGraph, DtypeNode

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


def where(node: DtypeNode) -> str:
    """`path:line` of a node's source, the path relative to the working directory where it can be."""
    if node.source is None:
        return "an unknown line"
    path = node.source.path
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(path)
        if not relative.startswith(".."):
            path = relative
    return f"{path}:{node.source.line}"


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
                elif consumer.dtype in HALF and consumer.policy in {"inherited", "promote"}:
                    following.append(consumer)
        if not following:
            return None
        frontier = following
    return None


def half_precision_verdict(nodes: Sequence[DtypeNode], what: str) -> Verdict | None:
    """The verdict of a rule whose hazard is `what` computed in half precision: confirmed when an op
    at the finding's lines ran in bfloat16/float16, refuted when every one ran in float32."""
    ops = computing(nodes)
    if not ops:
        return None
    half = [node for node in ops if node.dtype in HALF]
    if half:
        node = half[0]
        return Verdict(Confidence.CONFIRMED, f"{what}: `{node.op}` at {where(node)} ran in {node.dtype}")
    if all(node.dtype in {"float32", "float64"} for node in ops):
        names = ", ".join(dict.fromkeys(f"`{node.op}`" for node in ops))
        return Verdict(Confidence.REFUTED, f"{names} at {where(ops[0])} ran in float32")
    return None
