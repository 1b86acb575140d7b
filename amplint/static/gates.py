"""Precision settings that a flag, off by default, turns on.

`if args.fp16: model.half()`, `GradScaler(enabled=grad_scaler_enabled)` after
`grad_scaler_enabled = fp16`, `mixed_precision="fp16" if fp16 else "no"`: such a setting says what
the project does when a user asks for it, not what it does. Where a flag guarding it is off by
default (an argparse `store_true`, a parameter's `=False`, a config field's `= False`) and nothing
in the project (its code, scripts, configs or docs) turns it on, the setting's mode is an option's:
a finding resting on options alone is conditional, as one resting on tests or examples is.

Text, like the rest of the modes pass: `guards` reads the lines around a setting, `flag_values` the
declarations and uses of the flags' names across the project in one search per file.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from amplint.static.codetext import indent_at, is_code

__all__ = ["Blocks", "Flag", "FlagValues", "flag_values", "guards"]

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*\Z")
_COMPOUND = re.compile(
    rb"^([ \t]*)(?:if|elif|else|def|async|class|for|while|with|try|except|finally)\b", re.MULTILINE
)
_HEADER = re.compile(rb"[ \t]*(?:(el)?if[ \t]+(?P<test>[^\n]+?):|(?P<stop>else|def|async|class)\b)")
_IF_INLINE = re.compile(rb"[ \t]*if[ \t]+(?P<test>[^\n]+?):[ \t]*(?=\S)")
_TERNARY = re.compile(rb"\bif[ \t]+(?P<test>[\w.]+)[ \t]+else\b(?P<other>[^\n]*)")
_HALF = re.compile(rb"16|half")
_ENABLED = re.compile(rb"\benabled[ \t]*=[ \t]*(?P<test>[\w.]+)[ \t]*[,)]")
_SIGNATURE = re.compile(rb"[(,][ \t\n]*\**(?P<name>\w+)[ \t]*(?::[^=,)]*)?(?:=[ \t]*(?P<default>[\w.]+))?")
_TRUE, _FALSE = {b"True", b"1"}, {b"False", b"0"}


@dataclass(frozen=True)
class Flag:
    """A name a setting runs only when it is true: as written (`args.fp16`), its last name (what
    declarations and uses name) and, for a parameter of the function around, its default."""

    written: str
    name: str
    default: bool | None = None


class Blocks:
    """The header lines of a file's compound statements (`if`, `for`, `def`, ...), each with its
    indentation and the header whose block holds it: found once per file, so that each setting finds
    the blocks around it in as many steps as they are deep, not as many lines as precede it."""

    def __init__(self, code: bytes, hidden: Callable[[int], bool]) -> None:
        self.code = code
        self.starts: list[int] = []
        self.indents: list[int] = []
        self.parents: list[int] = []
        open_: list[int] = []  # the headers whose blocks the next line may be in, outermost first
        for match in _COMPOUND.finditer(code):
            if hidden(match.end(1)):
                continue
            width = len(match[1])
            while open_ and self.indents[open_[-1]] >= width:
                open_.pop()
            self.parents.append(open_[-1] if open_ else -1)
            self.starts.append(match.start())
            self.indents.append(width)
            open_.append(len(self.starts) - 1)

    def around(self, line_start: int) -> Iterator[int]:
        """The starts of the header lines whose blocks hold the line at `line_start`, innermost first
        (the nearest header above it with less indentation, then that one's, ...)."""
        indent = indent_at(self.code, line_start)
        at = bisect.bisect_left(self.starts, line_start) - 1
        while at >= 0:
            if self.indents[at] < indent:
                yield self.starts[at]
                indent = self.indents[at]
            at = self.parents[at]


def guards(code: bytes, offset: int, blocks: Blocks) -> list[Flag]:
    """The flags the setting at `offset` (in a statement of `code`) runs only under: an `enabled=`
    argument of its call, the test of a conditional expression whose other branch names no half
    dtype, and the tests of the `if` blocks around it in its function (`blocks`, the file's)."""
    line_start = code.rfind(b"\n", 0, offset) + 1
    line_end = _end(code, offset)
    tests: list[bytes] = []
    call = _ENABLED.search(code, offset, line_end)
    if call is not None and code.find(b"(", offset, call.start()) >= 0:
        tests.append(call["test"])
    ternary = _TERNARY.search(code, offset, line_end)
    # `"fp16" if fp16 else "no"`: the setting's own half dtype in the branch the test picks.
    if (
        ternary is not None
        and _HALF.search(code, offset, ternary.start())
        and not _HALF.search(ternary["other"])
    ):
        tests.append(ternary["test"])
    inline = _IF_INLINE.match(code, line_start)
    if inline is not None and inline.end() <= offset:
        tests.append(inline["test"])
    signature = b""
    for at in blocks.around(_statement_start(code, line_start)):
        header = _HEADER.match(code, at)
        if header is None:
            continue  # `for`, `with`, `try`: the body runs whatever the flag
        if header["stop"] is not None:
            if header["stop"] in (b"def", b"async"):
                signature = code[at : _end(code, at)]
            break  # an `else:` runs where the test is false; a definition ends the walk
        tests.append(header["test"])
    flags = []
    for test in tests:
        for part in test.decode("ascii", "replace").strip("() ").split(" and "):
            written = part.strip("() ")
            if _DOTTED.match(written):
                flags.append(_resolve(code, written, line_start, signature))
    return [flag for flag in flags if flag is not None]


def _statement_start(code: bytes, line_start: int) -> int:
    """Where the statement holding the line at `line_start` starts: a setting on a line of its own
    inside a call (`Accelerator(\n    mixed_precision="fp16",\n)`) belongs to the call's statement
    and its indentation. The nearest line above with less indentation is the block's header for a
    statement's first line, and for a later line of a statement (up to 30 lines on) its first line."""
    start, indent, at = line_start, indent_at(code, line_start), line_start
    for _ in range(30):
        if at == 0 or not indent:
            break
        at = code.rfind(b"\n", 0, at - 1) + 1
        width = indent_at(code, at)
        if width >= indent or code[at + width : at + width + 1] in (b"\n", b"\r", b"#", b")", b"]", b"}"):
            continue
        if _COMPOUND.match(code, at):
            break
        start, indent = at, width
    return start


def _resolve(code: bytes, written: str, before: int, signature: bytes, depth: int = 2) -> Flag | None:
    """What a test's name stands for: an attribute (`args.fp16`, `self.amp`) is the project's to
    say; a bare name bound in its function from another name (`enabled = args.amp`) stands for
    that one; a parameter carries its default; a module's global is the project's to say. None for
    a name bound otherwise (`fp16 &= pt or jit`, a tuple unpacked), which the code decides."""
    if "." in written:
        return Flag(written, written.rpartition(".")[2])
    name = re.escape(written.encode())
    if signature:
        start = max(code.rfind(signature, 0, before), 0) + len(signature)  # defaults bind nothing
        computed = re.compile(
            rb"^[ \t]+(?:" + name + rb"[ \t]*[-+&|^]=|[\w, \t]*,[ \t]*" + name + rb"\b[\w, \t]*=)", re.M
        )
        if computed.search(code, start, before):
            return None
        pattern = re.compile(rb"^[ \t]+" + name + rb"[ \t]*=(?!=)[ \t]*([^\n#]*\S)", re.M)
        bound = next(reversed(list(pattern.finditer(code, start, before))), None)  # the last binding
        if bound is not None:
            value = bound[1].decode("ascii", "replace")
            if value in ("True", "False"):
                return Flag(written, written, value == "True")
            if not _DOTTED.match(value) or not depth:
                return None
            return _resolve(code, value, bound.start(), signature, depth - 1)
        for parameter in _SIGNATURE.finditer(signature):
            if parameter["name"] == written.encode():
                default = parameter["default"]
                return Flag(written, written, None if default is None else _boolean(default))
    if re.search(rb"^" + name + rb"[ \t]*(?::[^=\n]*)?=(?!=)", code, re.M):
        return Flag(written, written)
    return None


@dataclass
class FlagValues:
    """What the project says of each flag name: where it is set off, and whether anything may turn
    it on."""

    # By name, lower-cased (a config spells `AMP` what the code reads as `amp`).
    off: dict[str, str] = field(default_factory=dict)  # name -> the first place that sets it off
    on: set[str] = field(default_factory=set)

    def is_off(self, flag: Flag) -> str | None:
        """Where the project leaves `flag` off, when nothing may turn it on; else None."""
        if flag.name.lower() in self.on or flag.default is True:
            return None
        if flag.default is False:
            return "a parameter that defaults to off"
        where = self.off.get(flag.name.lower())
        return f"off by default at {where}" if where is not None else None


def flag_values(
    names: Iterable[str],
    code: Iterable[tuple[str, bytes, Callable[[int], bool]]],
    text: Iterable[tuple[str, bytes]],
) -> FlagValues:
    """Where the project declares, sets or passes the flags `names`. `code`: each Python file (its
    display path, bytes, and whether an offset is in a docstring or comment), where an argparse
    option, a default, an assignment or a keyword says a value. `text`: every other file of the
    project (scripts, configs, docs), where a command line's `--fp16` or a config's `fp16: true`
    turns one on. A value that is not a literal may be on, unless it only passes the flag along
    (`fp16=fp16`, `self.amp = args.amp`)."""
    values = FlagValues()
    names = sorted(set(names))
    if not names:
        return values
    plain = b"|".join(re.escape(name.encode()) for name in names)
    either = plain + b"|" + b"|".join(re.escape(name.replace("_", "-").encode()) for name in names)
    option = re.compile(rb"--(?P<name>" + either + rb")\b")
    # `fp16=False`, `fp16: bool = False`, `fp16: bool = field(default=False)`, `self.fp16 = fp16`
    assigned = re.compile(
        rb"(?<![\w-])(?P<name>" + plain + rb")[ \t]*(?::[ \t]*[\w.\[\] |]+)?=(?!=)[ \t]*(?P<value>[^\n,;)#]*)"
    )
    # `"fp16": True` in a dict; in a config, `fp16: true`, `"fp16": false`, `FP16=1`
    keyed = re.compile(rb"[\"'](?P<name>" + plain + rb")[\"'][ \t]*:[ \t]*(?P<value>[^\n,}#]*)")
    config = re.compile(
        rb"(?<![\w-])[\"']?(?P<name>" + plain + rb")[\"']?[ \t]*[:=][ \t]*(?P<value>[^\n,}#]*)", re.I
    )
    for display, raw, hidden in code:
        for match in option.finditer(raw):
            if not hidden(match.start()):
                _option(values, match, display, raw)
        for pattern in (assigned, keyed):
            for match in pattern.finditer(raw):
                start = match.start()
                # `raise ValueError("set fp16 = True")` sets nothing; a dict's key is a string.
                line_start = raw.rfind(b"\n", 0, start) + 1
                if not hidden(start) and (pattern is keyed or is_code(raw, start, line_start, [])):
                    _record(values, match, display, raw)
    for display, raw in text:
        values.on.update(match["name"].decode().replace("-", "_").lower() for match in option.finditer(raw))
        for match in config.finditer(raw):
            _record(values, match, display, raw)
    return values


def _option(values: FlagValues, match: re.Match[bytes], display: str, raw: bytes) -> None:
    """An argparse option declares the flag's default; any other `--fp16` is a command line."""
    name = match["name"].decode().replace("-", "_").lower()
    declaration = raw.rfind(b"add_argument", max(match.start() - 300, 0), match.start())
    if declaration < 0 or b")" in raw[declaration : match.start()]:
        values.on.add(name)  # `["--fp16"]`, a command line the project runs
        return
    call = raw[declaration : _end(raw, declaration)]
    if b"store_false" in call or _DEFAULT_TRUE.search(call):
        values.on.add(name)
    elif b"store_true" in call or _DEFAULT_FALSE.search(call):
        values.off.setdefault(name, _where(display, raw, match.start()))
    else:
        values.on.add(name)  # a string or a number: what it holds is the user's


_DEFAULT_TRUE = re.compile(rb"\bdefault[ \t]*=[ \t]*True\b")
_DEFAULT_FALSE = re.compile(rb"\bdefault[ \t]*=[ \t]*(?:False|0)\b")
_ON = {b"true", b"1", b"yes", b"on"}
_OFF = {b"false", b"0", b"no", b"off"}  # not None: an option that names a file or a model is set to use it
_FIELD = re.compile(rb"field\([^)\n]*?\bdefault[ \t]*=[ \t]*(\w+)")


def _record(values: FlagValues, match: re.Match[bytes], display: str, raw: bytes) -> None:
    name, value = match["name"].decode().lower(), match["value"].strip()  # a config's `AMP: true`
    if (found := _FIELD.match(value)) is not None:
        value = found[1]
    if not value or value.lower() in _OFF:
        if value:
            values.off.setdefault(name, _where(display, raw, match.start()))
    elif value.lower() in _ON or not (value == match["name"] or value.endswith(b"." + match["name"])):
        values.on.add(name)  # a literal true, or a value the code computes


def _where(display: str, raw: bytes, offset: int) -> str:
    line = raw.count(b"\n", 0, offset) + 1
    return f"{display}:{line}"


def _boolean(value: bytes) -> bool | None:
    return True if value in _TRUE else False if value in _FALSE else None


def _end(code: bytes, start: int) -> int:
    """The end of the statement at `start`: its line, and the lines that continue it while a bracket
    stays open (at most 20)."""
    end = start
    depth = 0
    for _ in range(20):
        newline = code.find(b"\n", end)
        newline = len(code) if newline < 0 else newline
        piece = code[end:newline]
        depth += sum(piece.count(c) for c in (b"(", b"[", b"{")) - sum(
            piece.count(c) for c in (b")", b"]", b"}")
        )
        end = newline
        if depth <= 0 or end >= len(code):
            break
        end += 1
    return end
