"""A traced `DtypeGraph` as the record `amplint.lock` holds for a target (`amplint.lock.file`): per
module, the ops in the order they ran, loops as `Repeat` blocks, alike modules as one entry."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path

from amplint.lock.file import MORE, SETTINGS, Item, Module, Op, Repeat, Target
from amplint.runtime.graph import DtypeGraph, DtypeNode

TOP = "(top)"  # the module of ops that ran outside any nn.Module
# A loop body longer than this is not looked for: it keeps recording linear in the number of ops.
_MAX_PERIOD = 256


def settings_of(spec: dict[str, object]) -> dict[str, str]:
    """A target's settings as the lockfile writes them, from a trace spec."""
    return {key: _word(spec.get(key.replace("-", "_"))) for key in SETTINGS}


def _word(value: object) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def record(name: str, settings: dict[str, str], graph: DtypeGraph, root: Path) -> Target:
    """The record of one traced target; source paths relative to `root` (the configuration's)."""
    per_module: dict[str, list[Item]] = {}
    for node in graph.nodes:
        if node.policy in {"input", "autocast_cast"}:
            continue  # autocast's casts are recorded on the op they feed
        per_module.setdefault(node.module or TOP, []).append(_op(graph, node, root))
    collapsed = {name: _collapse(items) for name, items in per_module.items()}
    return Target(name, settings, tuple(_grouped(collapsed)))


def _op(graph: DtypeGraph, node: DtypeNode, root: Path) -> Op:
    inputs: list[str] = []
    casts: list[str | None] = []
    for producer in graph.producers(node):
        if producer.policy == "autocast_cast":
            pair = (_word(producer.input_dtypes[0] if producer.input_dtypes else None), producer.dtype)
        else:
            pair = (_word(producer.dtype), None)
        # A run of identical inputs (`stack` of one tensor per step) is written once: its length
        # follows the shapes.
        if len(inputs) >= 2 and inputs[-1] == MORE and (inputs[-2], casts[-2]) == pair:
            continue
        if len(inputs) >= 2 and (inputs[-1], casts[-1]) == (inputs[-2], casts[-2]) == pair:
            inputs[-1], casts[-1] = MORE, None
            continue
        inputs.append(pair[0])
        casts.append(pair[1])
    where = None
    if node.source is not None:
        where = f"{_lock_path(node.source.path, root)}:{node.source.line}"
    return Op(node.op, tuple(inputs), tuple(casts), _word(node.dtype), node.policy, where, (node.id,))


@cache  # a trace has a few source files and many ops: resolve each path once
def _lock_path(path: str, root: Path) -> str:
    """A path that does not depend on the machine: below the root relative to it, in an installed
    package from the package on (`transformers/models/...`)."""
    resolved = Path(os.path.realpath(path))
    try:
        return resolved.relative_to(root.resolve()).as_posix()
    except ValueError:
        pass
    parts = resolved.parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    return resolved.as_posix()


def _key(item: Item) -> object:
    """What two items must share to be the same step of a loop or the same module: the identity of
    every op (names, dtypes, casts, policies) and the counts of nested loops."""
    if isinstance(item, Op):
        return (item.op, item.inputs, item.casts, item.dtype, item.policy)
    return (item.count, tuple(_key(inner) for inner in item.body))


def _collapse(items: list[Item]) -> tuple[Item, ...]:
    """Runs of identical blocks become `Repeat`s, innermost loops first."""
    current = list(items)
    while True:
        collapsed = _collapse_once(current)
        if len(collapsed) == len(current):
            return tuple(collapsed)
        current = collapsed


def _collapse_once(items: list[Item]) -> list[Item]:
    keys = [_key(item) for item in items]
    out: list[Item] = []
    i = 0
    while i < len(items):
        period = _period(keys, i)
        if period is None:
            out.append(items[i])
            i += 1
            continue
        count = 1
        while keys[i + count * period : i + (count + 1) * period] == keys[i : i + period]:
            count += 1
        blocks = [items[i + k * period : i + (k + 1) * period] for k in range(count)]
        out.append(Repeat(count, tuple(_merged(column) for column in zip(*blocks, strict=True))))
        i += count * period
    return out


def _period(keys: list[object], start: int) -> int | None:
    """The shortest block at `start` that the next block repeats."""
    limit = min(_MAX_PERIOD, (len(keys) - start) // 2)
    for period in range(1, limit + 1):
        if (
            keys[start + period] == keys[start]
            and keys[start : start + period] == keys[start + period : start + 2 * period]
        ):
            return period
    return None


def _merged(items: Sequence[Item]) -> Item:
    """One item for the same step of several loop iterations or modules: the nodes of them all."""
    first = items[0]
    if isinstance(first, Op):
        nodes = tuple(node for item in items if isinstance(item, Op) for node in item.nodes)
        return replace(first, nodes=nodes)
    bodies = [item.body for item in items if isinstance(item, Repeat)]
    return Repeat(first.count, tuple(_merged(column) for column in zip(*bodies, strict=True)))


_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def pattern(module: str) -> str:
    """`model.layers.3.mlp` -> `model.layers.*.mlp`."""
    return _INDEX.sub("*", module)


def _grouped(modules: dict[str, tuple[Item, ...]]) -> Iterator[Module]:
    """Modules whose paths differ only in indices and that ran the same ops become one entry; the
    most common sequence takes the `*` name, any module that differs keeps its own."""
    by_pattern: dict[str, list[str]] = {}
    for name in modules:
        by_pattern.setdefault(pattern(name), []).append(name)
    entries: list[tuple[int, Module]] = []
    order = {name: index for index, name in enumerate(modules)}
    for shared, names in by_pattern.items():
        classes: dict[object, list[str]] = {}
        for name in names:
            classes.setdefault(tuple(_key(item) for item in modules[name]), []).append(name)
        ranked = sorted(classes.values(), key=lambda members: (-len(members), order[members[0]]))
        for rank, members in enumerate(ranked):
            if rank == 0 and len(members) > 1:
                columns = zip(*(modules[name] for name in members), strict=True)
                items = tuple(_merged(column) for column in columns)
                entries.append((order[members[0]], Module(shared, len(members), items)))
            else:
                entries.extend((order[name], Module(name, 1, modules[name])) for name in members)
    for _, module in sorted(entries, key=lambda entry: entry[0]):
        yield module
