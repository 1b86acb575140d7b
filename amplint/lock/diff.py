"""Compare two records of a target (`amplint.lock.file`): which ops changed dtype, and where dtypes
change in code that was rewritten. Plain data, no torch.

Ops are matched per module by aligning the two sequences of op names (difflib), loop blocks with
loop blocks, so that an inserted op or a reordered branch does not shift every op after it. A
matched op whose dtypes differ is an `OpChange`. Ops that did not match form `Region`s (rewritten
code); there only the places where a value changes dtype count (a cast, an autocast upcast, a
promotion, a float32 matmul), and those are compared as a multiset over the whole target, so code
that moved, even into another module, cancels out and what is left is a real change.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from amplint.lock.file import Item, Module, Op, Repeat, Target
from amplint.lock.record import pattern


@dataclass(frozen=True)
class OpChange:
    module: str
    old: Op
    new: Op


@dataclass
class Region:
    """Ops of one module that did not match: `old` from the lock, `new` from the trace."""

    module: str
    old: tuple[Op, ...]
    new: tuple[Op, ...]
    # The ops whose dtype transitions the other side has no counterpart for.
    lost: list[Op] = field(default_factory=list)
    gained: list[Op] = field(default_factory=list)
    # A new op next to the region, to point at when the region has no new ops of its own.
    anchor: Op | None = None


@dataclass
class TargetDiff:
    changes: list[OpChange] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)

    @property
    def changed_regions(self) -> list[Region]:
        return [region for region in self.regions if region.lost or region.gained]


def settings_changes(old: Target, new: Target) -> list[str]:
    """`dtype: bfloat16 -> float16` for every setting that differs."""
    return [
        f"{key}: {old.settings.get(key)} -> {value}"
        for key, value in new.settings.items()
        if old.settings.get(key) != value
    ]


def diff(old: Target, new: Target) -> TargetDiff:
    """What changed from `old` (the lock) to `new` (a fresh trace) of one target."""
    out = TargetDiff()
    old_modules = {module.name: module for module in old.modules}
    old_by_pattern: dict[str, Module] = {}
    for module in old.modules:
        old_by_pattern.setdefault(pattern(module.name), module)
    used: set[str] = set()
    for module in new.modules:
        counterpart = (
            old_modules.get(module.name)
            or old_modules.get(pattern(module.name))
            # modules the lock names one by one (there was one, or they differed) now alike
            or old_by_pattern.get(module.name)
        )
        if counterpart is None:
            out.regions.append(Region(module.name, (), tuple(_flat(module.items))))
            continue
        used.add(counterpart.name)
        _align(counterpart.items, module.items, module.name, out)
    new_modules = {module.name: module for module in new.modules}
    for module in old.modules:
        if module.name in used:
            continue
        # A module the lock names on its own (it differed from its siblings) whose siblings now share
        # one entry: compare it with that entry.
        grouped = pattern(module.name)
        shared = new_modules.get(grouped) if grouped != module.name else None
        if shared is not None and module.name not in new_modules:
            _align(module.items, shared.items, module.name, out)
        else:
            out.regions.append(Region(module.name, tuple(_flat(module.items)), ()))
    _cancel(out.regions)
    return out


def _token(item: Item) -> str:
    return "repeat" if isinstance(item, Repeat) else item.op


def _align(old: Sequence[Item], new: Sequence[Item], module: str, out: TargetDiff) -> None:
    matcher = SequenceMatcher(None, [_token(i) for i in old], [_token(i) for i in new], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            for before, after in zip(old[i1:i2], new[j1:j2], strict=True):
                if isinstance(before, Repeat) and isinstance(after, Repeat):
                    _align(before.body, after.body, module, out)  # the count follows the shapes
                elif isinstance(before, Op) and isinstance(after, Op) and before != after:
                    out.changes.append(OpChange(module, before, after))
            continue
        anchor = next(_flat([*new[j2 : j2 + 1], *new[max(j1 - 1, 0) : j1]]), None)
        out.regions.append(Region(module, tuple(_flat(old[i1:i2])), tuple(_flat(new[j1:j2])), anchor=anchor))


def _flat(items: Sequence[Item]) -> Iterator[Op]:
    """The ops of items, a loop's body once (its count follows the shapes)."""
    for item in items:
        if isinstance(item, Repeat):
            yield from _flat(item.body)
        else:
            yield item


def _cancel(regions: list[Region]) -> None:
    """Mark the transitions one side has and the other has not, over every region of a target."""
    old = Counter(t for region in regions for op in region.old for t in op.transitions())
    new = Counter(t for region in regions for op in region.new for t in op.transitions())
    lost, gained = old - new, new - old
    for region in regions:
        for op in region.old:
            if _take(lost, op):
                region.lost.append(op)
        for op in region.new:
            if _take(gained, op):
                region.gained.append(op)


def _take(left: Counter[str], op: Op) -> bool:
    taken = False
    for transition in op.transitions():
        if left[transition] > 0:
            left[transition] -= 1
            taken = True
    return taken
