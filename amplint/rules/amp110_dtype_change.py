"""AMP110: an op runs in another dtype than `amplint.lock` records (`amplint lock --check`)."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from amplint.lock.diff import OpChange, Region, TargetDiff
from amplint.lock.file import MATMULS, Op
from amplint.rule import GraphFinding, RuntimeRule
from amplint.runtime.chains import HALF, LOSSY, VIEWS, where

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode

_UPCAST = frozenset({"fp32", "fp32_set_opt_dtype"})
_LISTED = _UPCAST | {"lower_precision", "promote"}
# How many changes a finding's evidence lists before it counts the rest.
_LISTED_CHANGES = 6
# The `extra` key of an AMP110 finding that says what differs: `dtype` (an op's), or, for a whole
# target, what `amplint.lock` names (a target added or removed, its settings changed).
DIFFERENCE = "difference"


class DtypeChange(RuntimeRule):
    """
    ## What it does
    Runs with `amplint lock --check`: traces the runtime targets again and compares the dtype every
    op runs in with `amplint.lock`, the record `amplint lock` wrote. Each difference is one finding,
    at the line that now produces it: an op whose input or output dtype changed (named with the
    op that caused it, and the op it replaced), a cast autocast inserts or no longer inserts, a
    matmul that moved to float32. Ops are matched per module by aligning their sequences, so an
    inserted op, a renamed variable, a reordered branch or another sequence length is not a change.

    ## Why is this bad?
    Code review cannot see dtypes. Case 1 was not written as a bug: a refactor replaced
    `-softplus(...) - 0.5` by an equivalent-looking `-exp(-0.5) * sigmoid(...)`, and because the two
    ops have different autocast policies the log-decay moved from float32 to bfloat16. No test
    failed; the model got worse on long contexts. The lockfile makes that change visible in the pull
    request that makes it.

    ## Example
    ```python
    # amplint.lock recorded `exp(float32) -> float32` for the log-decay; the refactor:
    w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()  # sigmoid keeps bfloat16
    ```

    ## Fix
    If the change is not wanted, restore the precision (`self.w_lora(xw).to(torch.float32).sigmoid()`)
    and the check passes again. If it is, accept it with `amplint lock --update` and commit the
    lockfile, so that the review sees the change.

    ## References
    - PyTorch autocast op reference: https://pytorch.org/docs/stable/amp.html#autocast-op-reference
    - flash-linear-attention RWKV7 log-decay change (case 1 in the project's CASES.md)
    """

    code = "AMP110"
    name = "dtype-change"
    summary = "an op runs in another dtype than `amplint.lock` records (`amplint lock --check`)"
    compares_lock = True

    @classmethod
    def check_lock(cls, diff: TargetDiff, graph: DtypeGraph) -> Iterator[GraphFinding]:
        """One finding per change and what follows from it, at the new line that causes it."""
        for cluster in _clusters(diff, graph):
            finding = _finding(cluster, graph)
            if finding is not None:
                yield finding


@dataclass
class _Cluster:
    changes: list[OpChange] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    nodes: set[int] = field(default_factory=set)  # the changed or unmatched nodes it spans


def _clusters(diff: TargetDiff, graph: DtypeGraph) -> list[_Cluster]:
    """Changes joined by data flow in the new graph: a changed op fed, through changed or rewritten
    ops, by another change belongs to the same finding."""
    parent: dict[int, int] = {}

    def find(node: int) -> int:
        while parent[node] != node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    def union(a: int, b: int) -> None:
        parent[find(a)] = find(b)

    owner: dict[int, OpChange | Region] = {}
    for change in diff.changes:
        for node in change.new.nodes:
            owner[node] = change
    for region in diff.regions:
        for op in region.new:
            for node in op.nodes:
                owner.setdefault(node, region)
    for node in owner:
        parent[node] = node
    for items in [[n for op in region.new for n in op.nodes] for region in diff.regions]:
        for node in items[1:]:
            union(node, items[0])  # rewritten code is one change
    for change in diff.changes:
        for node in change.new.nodes[1:]:
            union(node, change.new.nodes[0])  # the same op in every loop step or layer
    for node in list(owner):
        for producer in _sources(graph, graph.node(node), owner):
            union(node, producer.id)
    clusters: dict[int, _Cluster] = {}
    changed = {id(region) for region in diff.changed_regions}
    for node, item in owner.items():
        cluster = clusters.setdefault(find(node), _Cluster())
        cluster.nodes.add(node)
        if isinstance(item, Region):
            if id(item) in changed and all(item is not region for region in cluster.regions):
                cluster.regions.append(item)
        elif all(item is not change for change in cluster.changes):
            cluster.changes.append(item)
    found = sorted(
        (cluster for cluster in clusters.values() if cluster.changes or cluster.regions),
        key=lambda cluster: min(cluster.nodes),
    )
    # Removed code has no new ops: it goes with the change beside it, else with the first change
    # (a removed module's casts are part of the rewrite that removed it), else stands alone.
    placed = {id(region) for cluster in found for region in cluster.regions}
    for region in diff.changed_regions:
        if id(region) in placed:
            continue
        anchor = region.anchor.nodes[0] if region.anchor and region.anchor.nodes else None
        home = next((c for c in found if anchor in c.nodes), found[0] if found else None)
        if home is None:
            found.append(_Cluster(regions=[region]))
        else:
            home.regions.append(region)
    return found


def _sources(graph: DtypeGraph, node: DtypeNode, within: Collection[int]) -> Iterator[DtypeNode]:
    """The nodes of `within` that feed `node`, directly or through views (a view passes a value on
    unchanged, so it cannot be the cause of a change, only its carrier)."""
    frontier = _producers(graph, node)
    seen: set[int] = set()
    while frontier:
        producer = frontier.pop()
        if producer.id in seen:
            continue
        seen.add(producer.id)
        if producer.id in within:
            yield producer
        elif producer.op in VIEWS:
            frontier.extend(_producers(graph, producer))


def _producers(graph: DtypeGraph, node: DtypeNode) -> list[DtypeNode]:
    """The ops a node reads, seeing through the casts autocast inserted."""
    return [
        graph.node(p.inputs[0]) if p.policy == "autocast_cast" and p.inputs else p
        for p in graph.producers(node)
    ]


def _finding(cluster: _Cluster, graph: DtypeGraph) -> GraphFinding | None:
    described = [_describe_change(c) for c in cluster.changes] + _describe_regions(cluster)
    evidence = "; ".join(_listed(list(dict.fromkeys(described))))
    extra: dict[str, object] = {DIFFERENCE: "dtype", "changes": [_change_dict(c) for c in cluster.changes]}
    if cluster.regions:
        extra["rewritten"] = [_region_dict(region) for region in cluster.regions]
    if cluster.changes:
        effect = _effect(cluster.changes)
        message, culprit = _explain(effect, cluster, graph)
        node = culprit or graph.node(effect.new.nodes[0])
        slower = [_transition_words(op) for r in cluster.regions for op in r.gained if op.op in MATMULS]
        if slower:
            message += "; " + ", ".join(slower)
        others = len({c.new.op for c in cluster.changes if c.new.op not in VIEWS} - {effect.new.op})
        if others:
            message += f"; {others} other op(s) that follow from it changed too"
        return GraphFinding(node, f"`{effect.module}`: {message}", evidence=evidence, help=_HELP, extra=extra)
    region = cluster.regions[0]
    anchor = next(iter([*region.gained, *region.new]), region.anchor)
    node_id = anchor.nodes[0] if anchor is not None and anchor.nodes else _first_sourced(graph)
    if node_id is None:
        return None
    message = f"`{region.module}`: " + _region_message(cluster.regions)
    return GraphFinding(graph.node(node_id), message, evidence=evidence, help=_HELP, extra=extra)


_HELP = (
    "restore the recorded dtypes, or accept the change with `amplint lock --update` and commit the lockfile"
)


def _effect(changes: Sequence[OpChange]) -> OpChange:
    """The change that matters most: an op autocast decides (exp, softmax, a matmul), else the first."""
    ordered = sorted(changes, key=lambda change: min(change.new.nodes))
    listed = [
        c
        for c in ordered
        if c.new.op not in VIEWS and ({c.old.policy, c.new.policy} & _LISTED or c.new.op in MATMULS)
    ]
    computing = [c for c in ordered if c.new.op not in VIEWS]
    return (listed or computing or ordered)[0]


def _explain(effect: OpChange, cluster: _Cluster, graph: DtypeGraph) -> tuple[str, DtypeNode | None]:
    old, new = effect.old, effect.new
    if old.dtype != new.dtype and new.op in MATMULS:
        slower = ": a float32 product under autocast is slower" if new.dtype == "float32" else ""
        return f"`{new.op}` ran in {old.dtype} and now runs in {new.dtype}{slower}", None
    changed = [i for i, (a, b) in enumerate(zip(old.inputs, new.inputs, strict=False)) if a != b]
    if changed or len(old.inputs) != len(new.inputs):
        index = changed[0] if changed else 0
        before = old.inputs[index] if index < len(old.inputs) else "none"
        after = new.inputs[index] if index < len(new.inputs) else "none"
        what = "the input" if len(new.inputs) == 1 else f"input {index + 1}"
        message = f"{what} of `{new.op}` was {before} and is now {after}"
        node = graph.node(new.nodes[0])
        producers = _producers(graph, node)
        start = producers[index] if index < len(producers) else None
        cause, culprit = _cause(start, after, cluster, graph)
        return message + cause, culprit
    if old.dtype != new.dtype:  # with the same inputs: the op itself (its arguments) changed
        return f"`{new.op}` ran in {old.dtype} and now runs in {new.dtype}", graph.node(new.nodes[0])
    casts = [f"{a or 'none'} -> {b or 'none'}" for a, b in zip(old.casts, new.casts, strict=False) if a != b]
    return f"autocast's casts of the inputs of `{new.op}` changed ({', '.join(casts)})", None


def _cause(
    start: DtypeNode | None, dtype: str, cluster: _Cluster, graph: DtypeGraph
) -> tuple[str, DtypeNode | None]:
    """`; produced by `sigmoid` at f.py:52, which autocast does not upcast (it replaced `softplus`,
    which autocast runs in float32)`, and the node: the op that now decides `dtype`."""
    chain = _chain(start, dtype, cluster, graph)
    if dtype in HALF:
        culprit = next((n for n in chain if n.op in LOSSY), None) or next(
            (n for n in chain if n.op not in VIEWS), None
        )
    else:
        culprit = next((n for n in chain if n.policy in _UPCAST | {"explicit_cast"}), None) or (
            chain[-1] if chain else None
        )
    if culprit is None:
        # Nothing new produces it: the code that made the old dtype is gone (a removed cast).
        gone = next((op for region in cluster.regions for op in region.lost), None)
        if gone is None:
            return "", None
        words = _policy_words(gone.op, gone.policy, gone.dtype, past=True)
        return f"; `{gone.op}` at {gone.where} in the lock, {words}, is gone", None
    text = f"; produced by `{culprit.op}` at {where(culprit)}, {_policy_words(culprit.op, culprit.policy, culprit.dtype)}"
    replaced = _replaced(culprit, dtype, cluster)
    if replaced is not None:
        text += f" (it replaced `{replaced.op}`, {_policy_words(replaced.op, replaced.policy, replaced.dtype, past=True)})"
    return text, culprit


def _chain(start: DtypeNode | None, dtype: str, cluster: _Cluster, graph: DtypeGraph) -> list[DtypeNode]:
    """Back from `start` through the changed or rewritten ops that carry `dtype`, nearest first."""
    chain: list[DtypeNode] = []
    frontier = [start] if start is not None else []
    seen: set[int] = set()
    while frontier:
        node = frontier.pop(0)
        carried = node.id in cluster.nodes or node.op in VIEWS
        if node.id in seen or not carried or node.dtype != dtype:
            continue
        seen.add(node.id)
        chain.append(node)
        frontier.extend(_producers(graph, node))
    return chain


def _replaced(culprit: DtypeNode, dtype: str, cluster: _Cluster) -> Op | None:
    """The op of the lock, in the rewritten code, whose policy gave the value its old dtype."""
    own = [r for r in cluster.regions if any(culprit.id in op.nodes for op in r.new)]
    for region in [*own, *cluster.regions]:
        for op in region.old:
            if dtype in HALF and op.policy in _UPCAST | {"explicit_cast"} and op.dtype == "float32":
                return op
            if dtype not in HALF and op.dtype in HALF and op.op not in VIEWS and op.policy == "inherited":
                return op
    return None


def _policy_words(op: str, policy: str, dtype: str | None, *, past: bool = False) -> str:
    does, runs = ("did", "ran") if past else ("does", "runs")
    if op in MATMULS and dtype == "float32":
        return f"a product that {runs} in float32, slower than in the autocast dtype"
    if policy in _UPCAST:
        return f"which autocast {runs} in float32"
    if policy == "explicit_cast":
        return f"a cast to {dtype}"
    if policy == "lower_precision":
        return f"which autocast {runs} in {dtype}"
    if dtype in HALF:
        return f"which autocast {does} not upcast"
    return f"which {runs} in {dtype}"


def _region_message(regions: Sequence[Region]) -> str:
    """What rewritten code computes now and did before, and where values change dtype that did not."""
    new = [op for region in regions for op in region.new if op.op not in VIEWS]
    old = [op for region in regions for op in region.old if op.op not in VIEWS]
    if new:
        text = f"the rewritten code runs {_path(new)}"
        text += f" where {_path(old)} ran" if old else " (new code)"
    else:
        text = f"the code that ran {_path(old)} is gone"
    gained = [_transition_words(op) for region in regions for op in region.gained]
    lost = [_transition_words(op) for region in regions for op in region.lost]
    if gained:
        text += "; new dtype changes: " + ", ".join(gained)
    if lost:
        text += "; dtype changes no longer made: " + ", ".join(lost)
    return text


def _path(ops: Sequence[Op]) -> str:
    """`bmm` bfloat16 -> `_softmax` float32 (at f.py:155)."""
    shown = " -> ".join(f"`{op.op}` {op.dtype}" for op in ops[:_LISTED_CHANGES])
    more = f" -> {len(ops) - _LISTED_CHANGES} more" if len(ops) > _LISTED_CHANGES else ""
    at = f" (at {ops[0].where})" if ops[0].where else ""
    return shown + more + at


def _transition_words(op: Op) -> str:
    at = f" ({op.where})" if op.where else ""
    words = []
    for transition in op.transitions():
        if transition == "float32 matmul":
            words.append(f"`{op.op}` in float32{at}, slower than in the autocast dtype")
        else:
            before, after = transition.split(">")
            words.append(f"{before} to {after} at `{op.op}`{at}")
    return ", ".join(words)


def _describe_change(change: OpChange) -> str:
    old, new = change.old, change.new
    return f"{change.module}: {old.signature()} became {new.signature()} at {new.where or 'an unknown line'}"


def _describe_regions(cluster: _Cluster) -> list[str]:
    return [f"{region.module}: {_region_message([region])}" for region in cluster.regions]


def _listed(items: list[str]) -> list[str]:
    if len(items) <= _LISTED_CHANGES:
        return items
    return [*items[:_LISTED_CHANGES], f"{len(items) - _LISTED_CHANGES} more"]


def _change_dict(change: OpChange) -> dict[str, object]:
    return {
        "module": change.module,
        "op": change.new.op,
        "old": change.old.signature(),
        "new": change.new.signature(),
        "old_where": change.old.where,
        "where": change.new.where,
    }


def _region_dict(region: Region) -> dict[str, object]:
    return {
        "module": region.module,
        "old": [op.signature() for op in region.old],
        "new": [op.signature() for op in region.new],
        "lost": [op.transitions() for op in region.lost],
        "gained": [op.transitions() for op in region.gained],
    }


def _first_sourced(graph: DtypeGraph) -> int | None:
    return next((n.id for n in graph.nodes if n.source is not None), None)
