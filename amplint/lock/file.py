"""`amplint.lock`: the dtype every op of each runtime target runs in, as a text file that reviews can
diff. Plain data and text, no torch: `amplint.lock.record` makes a record of a traced graph, this
module writes records and reads them back (errors name the line), `amplint.lock.diff` compares them.

A record holds, per module, the ops in the order they ran: each op's name, the dtype of each input
as the program produced it (and what autocast cast it to), its output dtype and the autocast policy
that decided it. Node ids, shapes and source lines are not part of it (lines are kept as comments,
for messages), so moving code or changing a sequence length leaves a record unchanged. A loop that
ran the same ops N times is one `repeat N` block; modules that differ only in a numeric index
(`model.layers.3.mlp`) and ran the same ops are one `model.layers.*.mlp` entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from amplint.source import replace_file

LOCK_NAME = "amplint.lock"
LOCK_FORMAT = 1
MORE = "..."  # an input that stands for more inputs like the one before it
# Settings of a target that decide its dtypes, in the order they are written.
SETTINGS = ("device", "dtype", "autocast", "param-dtype")


class LockfileError(Exception):
    """The lockfile cannot be read; `line` is where (1-based), 0 for the whole file."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


@dataclass(frozen=True)
class Op:
    op: str
    inputs: tuple[str, ...]  # each tensor input's dtype as its producer made it ("none": not a tensor)
    casts: tuple[str | None, ...]  # what autocast cast each input to; None where it did not
    dtype: str
    policy: str
    where: str | None = field(default=None, compare=False)  # "path:line", for messages only
    nodes: tuple[int, ...] = field(default=(), compare=False)  # ids in the traced graph, never written

    def signature(self) -> str:
        """`exp(bfloat16 as float32) -> float32`: the inputs, what autocast cast them to, the output."""
        inputs = ", ".join(
            value if cast is None else f"{value} as {cast}"
            for value, cast in zip(self.inputs, self.casts, strict=True)
        )
        return f"{self.op}({inputs}) -> {self.dtype}"

    def transitions(self) -> list[str]:
        """Where this op changes a floating value's dtype (`bfloat16>float32`): a cast, an autocast
        upcast, a type promotion; and `float32 matmul` for a product computed in float32."""
        found = [
            f"{old}>{self.dtype}"
            for old in dict.fromkeys(self.inputs)
            if old != self.dtype and _floating(old) and _floating(self.dtype)
        ]
        if self.op in MATMULS and self.dtype == "float32":
            found.append("float32 matmul")
        return found


@dataclass(frozen=True)
class Repeat:
    count: int
    body: tuple[Item, ...]


Item = Op | Repeat


@dataclass(frozen=True)
class Module:
    name: str  # "model.layers.*.self_attn" for a group of identical modules
    size: int  # how many modules of the traced model the entry stands for
    items: tuple[Item, ...]


@dataclass(frozen=True)
class Target:
    name: str  # as the configuration or the command line names it
    settings: dict[str, str]
    modules: tuple[Module, ...]
    line: int = field(default=0, compare=False)  # where the target starts in the lockfile it was read from


@dataclass(frozen=True)
class Lockfile:
    amplint: str
    torch: str
    targets: tuple[Target, ...]
    format: int = LOCK_FORMAT

    def target(self, name: str) -> Target | None:
        return next((target for target in self.targets if target.name == name), None)


# Products that autocast runs in the low-precision dtype: one in float32 is a speed regression.
MATMULS = frozenset(
    {
        "mm",
        "bmm",
        "addmm",
        "baddbmm",
        "addbmm",
        "matmul",
        "linear",
        "convolution",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_cudnn_attention",
    }
)


def _floating(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


_HEADER = """\
# amplint.lock: the dtype every op of each runtime target runs in under its autocast settings,
# recorded by `amplint lock`. `amplint lock --check` traces again and reports every difference
# (AMP110); `amplint lock --update` accepts them. After `#`: where each op ran, for messages only.
"""


def dumps(lock: Lockfile) -> str:
    lines = [_HEADER.rstrip("\n"), f"format {lock.format}", f"amplint {lock.amplint}", f"torch {lock.torch}"]
    for target in sorted(lock.targets, key=lambda item: item.name):
        lines += ["", f"target {target.name}"]
        lines += [f"  {key} {target.settings[key]}" for key in SETTINGS]
        for module in target.modules:
            size = f" ({module.size})" if module.size > 1 else ""
            lines.append(f"  module {module.name}{size}")
            lines += _item_lines(module.items, "    ")
    return "\n".join(lines) + "\n"


def _item_lines(items: Sequence[Item], indent: str) -> Iterator[str]:
    for item in items:
        if isinstance(item, Repeat):
            yield f"{indent}repeat {item.count}"
            yield from _item_lines(item.body, indent + "  ")
            continue
        where = f"  # {item.where}" if item.where else ""
        yield f"{indent}{item.signature()} {item.policy}{where}"


_OP = re.compile(
    r"^(?P<op>[\w.]+)\((?P<inputs>[^()]*)\) -> (?P<dtype>\w+) (?P<policy>\w+)(?:  # (?P<where>.+))?$"
)
_INPUT = re.compile(r"^(?P<value>\w+|\.\.\.)(?: as (?P<cast>\w+))?$")
_VERSION = re.compile(r"^[\w.+-]+$")


def loads(text: str) -> Lockfile:
    """The lockfile in `text`; a LockfileError naming the line that does not parse."""
    lines = [(number, line.rstrip()) for number, line in enumerate(text.splitlines(), 1)]
    lines = [(number, line) for number, line in lines if line.strip() and not line.lstrip().startswith("#")]
    header: dict[str, str] = {}
    position = 0
    for key in ("format", "amplint", "torch"):
        if position >= len(lines):
            raise LockfileError(f"the lockfile ends before its `{key}` line", len(text.splitlines()))
        number, line = lines[position]
        word, _, value = line.partition(" ")
        if word != key or not _VERSION.match(value):
            raise LockfileError(f"expected `{key} VERSION`, found {line.strip()!r}", number)
        header[key] = value
        position += 1
    if not header["format"].isdigit():
        raise LockfileError(f"the format must be a number, not {header['format']!r}", lines[0][0])
    version = int(header["format"])
    if version != LOCK_FORMAT:
        raise LockfileError(
            f"the lockfile is in format {version}, written by amplint {header['amplint']}; this amplint "
            f"reads format {LOCK_FORMAT}: "
            + ("upgrade amplint" if version > LOCK_FORMAT else "write it again with `amplint lock --update`"),
            lines[0][0],
        )
    parser = _Parser(lines[position:])
    targets = parser.targets()
    seen: set[str] = set()
    for target in targets:
        if target.name in seen:
            raise LockfileError(f"target {target.name} appears twice", target.line)
        seen.add(target.name)
    return Lockfile(header["amplint"], header["torch"], tuple(targets), version)


class _Parser:
    """Indentation-structured lines: `target` at 0, its settings and `module`s at 2, ops at 4 and
    below, each `repeat` block's body two more."""

    def __init__(self, lines: list[tuple[int, str]]) -> None:
        self.lines = lines
        self.position = 0

    def _peek(self) -> tuple[int, int, str] | None:
        if self.position >= len(self.lines):
            return None
        number, line = self.lines[self.position]
        indent = len(line) - len(line.lstrip(" "))
        return number, indent, line.strip()

    def targets(self) -> list[Target]:
        targets = []
        while (peeked := self._peek()) is not None:
            number, indent, text = peeked
            word, _, name = text.partition(" ")
            if indent != 0 or word != "target" or not name:
                raise LockfileError(f"expected `target NAME`, found {text!r}", number)
            self.position += 1
            settings = self._settings(number)
            modules = []
            while (peeked := self._peek()) is not None and peeked[1] > 0:
                modules.append(self._module())
            targets.append(Target(name, settings, tuple(modules), number))
        return targets

    def _settings(self, target_line: int) -> dict[str, str]:
        settings: dict[str, str] = {}
        for key in SETTINGS:
            peeked = self._peek()
            if peeked is None or peeked[1] != 2 or peeked[2].partition(" ")[0] != key:
                where = peeked[0] if peeked else target_line
                found = f", found {peeked[2]!r}" if peeked else ""
                raise LockfileError(f"expected the target's `{key}` setting{found}", where)
            settings[key] = peeked[2].partition(" ")[2]
            self.position += 1
        return settings

    def _module(self) -> Module:
        peeked = self._peek()
        assert peeked is not None
        number, indent, text = peeked
        match = re.fullmatch(r"module (\S+)(?: \((\d+)\))?", text)
        if indent != 2 or match is None:
            raise LockfileError(f"expected `module NAME`, found {text!r}", number)
        self.position += 1
        items = self._items(4)
        return Module(match.group(1), int(match.group(2) or 1), tuple(items))

    def _items(self, indent: int) -> list[Item]:
        items: list[Item] = []
        while (peeked := self._peek()) is not None and peeked[1] >= indent:
            number, found, text = peeked
            if found != indent:
                raise LockfileError(f"unexpected indentation ({found} spaces, expected {indent})", number)
            self.position += 1
            repeat = re.fullmatch(r"repeat (\d+)", text)
            if repeat is not None:
                body = self._items(indent + 2)
                if not body:
                    raise LockfileError("a `repeat` block needs at least one op", number)
                items.append(Repeat(int(repeat.group(1)), tuple(body)))
                continue
            items.append(_parse_op(text, number))
        return items


def _parse_op(text: str, number: int) -> Op:
    match = _OP.match(text)
    if match is None:
        raise LockfileError(f"expected `OP(INPUTS) -> DTYPE POLICY  # WHERE`, found {text!r}", number)
    inputs: list[str] = []
    casts: list[str | None] = []
    for part in filter(None, (part.strip() for part in match.group("inputs").split(","))):
        found = _INPUT.match(part)
        if found is None:
            raise LockfileError(f"expected `DTYPE` or `DTYPE as DTYPE` for an input, found {part!r}", number)
        inputs.append(found.group("value"))
        casts.append(found.group("cast"))
    return Op(
        match.group("op"),
        tuple(inputs),
        tuple(casts),
        match.group("dtype"),
        match.group("policy"),
        match.group("where"),
    )


def read(path: Path) -> Lockfile:
    """The lockfile at `path`; a LockfileError when it cannot be read or parsed."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise LockfileError(f"not UTF-8 text: {exc.reason}") from None
    except OSError as exc:
        raise LockfileError(exc.strerror or str(exc)) from None
    return loads(text)


def write(path: Path, lock: Lockfile, *, roots: Sequence[Path]) -> None:
    """Written beside it, then moved over it (`source.replace_file`): a reader never sees half a lock.
    A lock in one of `roots` whose real place lies outside them (a symbolic link) is left alone."""
    replace_file(path, dumps(lock).encode("utf-8"), roots=roots)
