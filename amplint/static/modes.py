"""Execution modes, project-wide: in which precision each file of a project runs, and why.

Whether a line is a hazard depends on the precision it runs in, and that is decided elsewhere in the
project: a training loop's autocast, a generation script's `.half()`, a trainer's `bf16=True`. This
pass reads the whole project once, before any file is checked. Every setting the precision scan of
`amplint.static.profile` finds is an entry point with a mode (autocast on a device in a dtype, or a
cast to a dtype); from the function (or script body) that holds it, the names it uses are followed to
their definitions across the project's imports, and from each definition reached to the names it
uses in turn (of a class without bases, only the methods its callers name; of one with bases, its
framework's hooks and the methods the project names anywhere; an autocast region in a method
reaches what that method does). A file's modes are those of its definitions that some entry
reaches, each with the entry and the chain of names as evidence. A file that no entry reaches runs
in float32 only, when the project sets a precision anywhere. A setting in a module's `__main__`
demo (a module other files import) counts as an example's, and one that only a flag the project
leaves off turns on as an option's (`amplint.static.gates`). The pass also lists, for the functions
of reached files that another file calls with a float32 value, every call of their name in the
project (`amplint.static.callers`), for the engine to read what each passes.

The index is text, not a parse (top-level `def`/`class` spans, imports, the words of a span): it
runs before the per-file checks on every file of the project, and a parse of each would cost more
than the checks themselves. Where it cannot resolve a name (a registry lookup, a model loaded by
name) the chain stops there, and the code it did not reach keeps what the other entries say.
"""

from __future__ import annotations

import bisect
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import PurePosixPath

from amplint.static.callers import call_lines, calls_of, float32_callees, framework_hook
from amplint.static.codetext import BRACKETS, code_words, indent_at, inside, string_spans
from amplint.static.gates import Blocks, Flag, flag_values, guards
from amplint.static.profile import (
    AUTOCAST,
    CAST,
    CAST_LOAD,
    CAST_TENSOR,
    DISABLED,
    FLOAT16,
    MODE_NAMES,
    SCALER,
    TOP_LINE,
    Mode,
    ModeWhy,
    Partial,
    partial_autocasts,
    settings_with_kinds,
)

__all__ = ["ProjectModes", "index_modes", "mode_named", "role_of"]

_MAX_VIA = 6  # names kept in a chain: enough to show the way, not every hop
_MOST_CALLS = 12  # calls of a function read in other files to settle its parameters' dtypes

_DEF = re.compile(rb"^(?:async[ \t]+def|def|class)[ \t]+(\w+)", re.MULTILINE)
_WORD = re.compile(rb"[A-Za-z_]\w*")
_MAIN = re.compile(rb"^if[ \t]+__name__[ \t]*==[ \t]*[\"']__main__[\"'][ \t]*:", re.MULTILINE)
_DEF_NAME = re.compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)
_FROM = re.compile(rb"^[ \t]*from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.MULTILINE)
_IMPORT = re.compile(rb"^[ \t]*import[ \t]+([^\n]+)", re.MULTILINE)


def mode_named(name: str) -> Mode:
    """The mode a `modes` setting names: "autocast-bf16", "autocast-fp16", "cast-bf16", "cast-fp16"
    (a device after a colon: "autocast-bf16:cpu")."""
    base, _, device = name.partition(":")
    if base not in MODE_NAMES:
        raise ValueError(f"unknown mode {name!r}: expected one of {', '.join(sorted(MODE_NAMES))}")
    kind, dtype = MODE_NAMES[base]
    if kind == CAST and device:
        raise ValueError(f"a cast mode has no device: {name!r}")
    return Mode(kind, dtype, device or "cuda") if kind == AUTOCAST else Mode(kind, dtype)


def role_of(display: str) -> str:
    """What an entry point is, from where it lives: "test", "benchmark", "example" or "code"."""
    path = PurePosixPath(display.replace("\\", "/"))
    parts = [part.lower() for part in path.parts[:-1]]
    name = path.name.lower()
    if name.startswith("test_") or name.endswith("_test.py") or name == "conftest.py":
        return "test"
    if any(part in ("tests", "test", "testing") for part in parts):
        return "test"
    if name.startswith("bench") or any(part.startswith("bench") for part in parts):
        return "benchmark"
    if any(part in _EXAMPLE_DIRS for part in parts):
        return "example"
    return "code"


_EXAMPLE_DIRS = {"examples", "example", "docs", "doc", "notebooks", "tutorials", "tutorial", "demo", "demos"}


def modes_of_setting(kind: str, dtypes: frozenset[str]) -> Iterator[Mode]:
    """The modes one precision setting makes (both dtypes where the scan could not tell which)."""
    if kind == CAST_TENSOR:
        return  # a tensor's cast is the engine's to follow, where the tensor goes
    for dtype in sorted(dtypes):
        if kind in (CAST, CAST_LOAD):
            yield Mode(CAST, dtype, loads=kind == CAST_LOAD)
        else:
            device = kind.partition(":")[2] or "cuda"
            yield Mode(AUTOCAST, dtype, "cpu" if device == "cpu" else "cuda")


@dataclass
class _File:
    """The text index of one file: its top-level definitions and what its imports bind."""

    display: str
    code: bytes
    spans: dict[str, tuple[int, int]]  # top-level name -> (start, end) offsets
    imports: dict[str, tuple[str, str | None]]  # local name -> (module, name in it; None: the module)
    star: list[str]  # modules whose names `from M import *` binds
    strings: list[tuple[int, int]]  # the triple-quoted strings' spans (`string_spans`)


@dataclass
class ProjectModes:
    """The modes of each file of a project (by display path), with their evidence; `entries` lists
    every setting found, `reached` how many definitions each mode reached."""

    files: dict[str, tuple[ModeWhy, ...]] = field(default_factory=dict)
    # Per file, the modes of each top-level definition reached.
    definitions: dict[str, dict[str, tuple[ModeWhy, ...]]] = field(default_factory=dict)
    entries: list[ModeWhy] = field(default_factory=list)
    configured: tuple[ModeWhy, ...] = ()
    # Per file, the functions it defines that other files call with a float32 value, and every line
    # of the project that calls each (`Calls`): the engine reads what they pass.
    elsewhere: dict[str, dict[str, Calls]] = field(default_factory=dict)

    @property
    def found(self) -> bool:
        """Whether the project sets a precision anywhere (else every file is the caller's)."""
        return bool(self.entries or self.configured)

    def of(self, display: str) -> tuple[ModeWhy, ...]:
        """The modes `display` runs in: the configured ones, else those some entry reaches."""
        return self.configured or self.files.get(display, ())


Loader = Callable[[], bytes]
# (file, line, a digest of the file's bytes: a cached check of the callee is redone when it changes)
Calls = tuple[tuple[str, int, str], ...]


def index_modes(
    files: Iterable[tuple[str, str, Loader]], texts: Callable[[], Iterable[tuple[str, bytes]]] | None = None
) -> ProjectModes:
    """The modes of every file of a project, from `files`: (display path, path from the project's
    root, a function that reads its bytes) for every file of the project, in any order. Each file is
    read once for its settings, again if a chain of names reaches it, and once more each for a
    project with a `__main__` demo holding a setting, one with a setting a flag guards, and one
    whose files call a function of another with a float32 value (to find who imports the demo, what
    the project says of the flags, and every call of those functions). `texts`: the project's other
    files (scripts, configs, docs), read only where a flag guards a setting."""
    project = _Project(texts)
    for display, relative, load in files:
        project.add(display, relative, load)
    return project.solve()


class _Project:
    def __init__(self, texts: Callable[[], Iterable[tuple[str, bytes]]] | None = None) -> None:
        self.texts = texts
        self.loaders: dict[str, Loader] = {}
        self.names: dict[str, str] = {}  # display -> dotted module name
        self.modules: dict[str, list[str]] = {}  # a dotted suffix -> the files it may name
        self.index: dict[str, _File] = {}
        self.entries: list[tuple[str, int, ModeWhy]] = []  # (display, offset, why)
        self.resolved: dict[tuple[str, str], str | None] = {}
        self.roles: dict[str, str] = {}
        # Per file, the names it binds to a partial of torch's autocast (`partial_autocasts`).
        self.partials: dict[str, dict[str, Partial]] = {}
        self.callees: dict[str, set[str]] = {}  # name -> the files that call it with a float32 value
        self._attributes: set[bytes] | None = None

    def add(self, display: str, relative: str, load: Loader) -> None:
        self.loaders[display] = load
        self.names[display] = dotted = _dotted(relative)
        self.roles[display] = role_of(relative)
        for suffix in _suffixes(dotted):
            self.modules.setdefault(suffix, []).append(display)
        code = load()
        if partials := partial_autocasts(code):
            self.partials[display] = partials
        for name in float32_callees(code):
            self.callees.setdefault(name, set()).add(display)
        self._scan(display, code)

    def _scan(self, display: str, code: bytes, bound: dict[str, Partial] | None = None) -> None:
        offset, at_line = 0, 1  # settings come in line order: each offset counts on from the last
        for line, what, dtypes, kind in settings_with_kinds(code, bound):
            offset, at_line = _line_offset(code, line, offset, at_line), line
            for mode in modes_of_setting(kind, dtypes):
                why = ModeWhy(mode, display, line, what, (), self.roles[display])
                self.entries.append((display, offset, why))

    def _bind_partials(self) -> None:
        """Scan again, with their device and dtype, the files that import a name another file binds
        to a partial of autocast (`from ._torch_compat import autocast`, then `with autocast(...)`)."""
        names = {name.encode() for partials in self.partials.values() for name in partials}
        for display, load in self.loaders.items():
            code = load()
            if display in self.partials or not any(name in code for name in names):
                continue
            bound: dict[str, Partial] = {}
            for local, (module, imported) in self.file(display).imports.items():
                target = self.resolve(display, module) if imported is not None else None
                if target is not None and imported in self.partials.get(target, {}):
                    bound[local] = self.partials[target][imported]
            if bound:
                kept = [entry for entry in self.entries if entry[0] != display]
                first = next((i for i, entry in enumerate(self.entries) if entry[0] == display), len(kept))
                self.entries = kept[:first]
                self._scan(display, code, bound)
                self.entries += kept[first:]

    # -- the index, built for a file the first time a chain reaches it -----------------------------
    def file(self, display: str) -> _File:
        found = self.index.get(display)
        if found is None:
            found = self.index[display] = _index(display, self.loaders[display]())
        return found

    def resolve(self, importer: str, module: str) -> str | None:
        """The file of the project that `module` (dotted; leading dots relative to `importer`) names."""
        key = (importer, module)
        if key not in self.resolved:
            self.resolved[key] = self._resolve(importer, module)
        return self.resolved[key]

    def _resolve(self, importer: str, module: str) -> str | None:
        dots = len(module) - len(module.lstrip("."))
        if dots:
            package = self.names[importer].split(".")
            if not importer.endswith("__init__.py"):
                package = package[:-1]
            if dots > 1:
                package = package[: -(dots - 1)] if dots - 1 <= len(package) else []
            rest = module.lstrip(".")
            module = ".".join([*package, *([rest] if rest else [])])
        candidates = self.modules.get(module)
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        # Several files end so (a `utils.py` in each package): the one nearest the importer.
        return max(candidates, key=lambda other: _shared(other, importer))

    def _own_bases(self, display: str, start: int, end: int) -> bool:
        """Whether the class at `start` derives only from `nn.Module`, an abstract base or classes
        of the project: no framework of its own (a Trainer, a LightningModule) calls its methods by
        names the project never writes."""
        index = self.file(display)
        header = index.code[start : _header_end(index.code, start, end)]
        opened = header.find(b"(")
        for base in header[opened + 1 : header.rfind(b")")].split(b",") if opened >= 0 else ():
            name = base.split(b"[")[0].strip()
            if not name or b"=" in name or name.rpartition(b".")[2] in _PLAIN_BASES:
                continue
            local = name.decode("ascii", "replace")
            if local in index.spans:
                continue
            imported = index.imports.get(local)
            if imported is None or self.resolve(display, imported[0]) is None:
                return False
        return True

    def attributes(self) -> set[bytes]:
        """Every name the project reads as an attribute (`.infer`), comment lines left out: a method
        of a class with bases runs only if one of them names it (or its framework calls it)."""
        if self._attributes is None:
            self._attributes = set()
            for load in self.loaders.values():
                self._attributes.update(_ATTRIBUTE.findall(load()))
            self._attributes.discard(b"")
        return self._attributes

    # -- following names ---------------------------------------------------------------------------
    def targets(self, display: str, words: set[bytes], code: bytes) -> Iterator[tuple[str, str]]:
        """(file, top-level name) for each name of `words` that `display` defines or imports from the
        project, and each `module.name` read through an imported module."""
        index = self.file(display)
        for word in sorted(words):  # in a fixed order: of equally short chains, the same one each run
            name = word.decode()
            if name in index.spans:
                yield display, name
            elif name in index.imports:
                module, imported = index.imports[name]
                yield from self._imported(display, module, imported, code, name)
        for module in index.star:
            target = self.resolve(display, module)
            if target is not None:
                defined = self.file(target).spans
                yield from ((target, w.decode()) for w in sorted(words) if w.decode() in defined)

    def _imported(
        self, display: str, module: str, name: str | None, code: bytes, local: str
    ) -> Iterator[tuple[str, str]]:
        if name is not None:
            submodule = self.resolve(display, f"{module}.{name}" if module.strip(".") else module + name)
            target = self.resolve(display, module)
            if target is not None and submodule is None:
                yield target, name
                return
            if submodule is None:
                return
            display_of_module = submodule
        else:
            found = self.resolve(display, module)
            if found is None:
                return
            display_of_module = found
        # A module bound to a name: the names read through it (`models.GPT(...)`).
        attributes = re.findall(rb"\b" + re.escape(local.encode()) + rb"\.(\w+)", code)
        defined = self.file(display_of_module).spans
        imports = self.file(display_of_module).imports
        for attribute in sorted({a.decode() for a in attributes}):
            if attribute in defined:
                yield display_of_module, attribute
            elif attribute in imports:
                yield from self._imported(display_of_module, *imports[attribute], b"", attribute)

    def solve(self) -> ProjectModes:
        if self.partials:
            self._bind_partials()
        self._demote_demos()
        self._demote_options()
        if any(
            why.mode == Mode(AUTOCAST, FLOAT16, "cuda")
            and why.role == "code"
            and not why.what.endswith(SCALER)
            for _, _, why in self.entries
        ):
            # A GradScaler says that CUDA float16 autocast runs somewhere; the regions of it in the
            # project's code say where (DeDoDe autocasts its encoder and decoder, not the keypoint sampling its
            # training script also calls), so the scaler is followed only where there are none.
            self.entries = [entry for entry in self.entries if not entry[2].what.endswith(SCALER)]
        result = ProjectModes(entries=[why for _, _, why in self.entries])
        seen: set[tuple[str, str, Mode, frozenset[bytes] | None]] = set()
        unrun: dict[tuple[str, str], set[bytes]] = {}  # the methods of reached classes none calls
        reached: dict[str, dict[Mode, ModeWhy]] = {}
        by_definition: dict[str, dict[str, dict[Mode, ModeWhy]]] = {}
        # (file, name, why, the words of the entry's scope and of the one that named it)
        queue: deque[tuple[str, str, ModeWhy, tuple[set[bytes], set[bytes]]]] = deque()
        # Many settings share a scope (a script's every `.half()`): its names are read once.
        scopes: dict[tuple[str, bytes], tuple[set[bytes], list[tuple[str, str]]]] = {}
        for display, offset, why in self.entries:
            owner, scope = _scope(self.file(display), offset, region=why.mode.kind == AUTOCAST)
            if (display, scope) not in scopes:
                # The function that holds the setting is the engine's to read (its own casts and
                # autocast regions are in the file): the mode is for the code it calls.
                words = code_words(scope)
                found = [t for t in self.targets(display, words, scope) if t != (display, owner)]
                scopes[display, scope] = (words, found)
            words, found = scopes[display, scope]
            queue.extend((*t, why, (words, words)) for t in found)
        while queue:
            display, name, why, named = queue.popleft()  # breadth first: each chain is a shortest one
            index = self.file(display)
            if name not in index.spans:
                if (display, name, why.mode, None) in seen:
                    continue
                seen.add((display, name, why.mode, None))
                if name in index.imports:  # a re-export (`from .model import GPT` in `__init__`)
                    module, imported = index.imports[name]
                    queue.extend(
                        (*t, why, named) for t in self._imported(display, module, imported, b"", name)
                    )
                for star in index.star:  # or one through `from .model import *`
                    exporter = self.resolve(display, star)
                    if exporter is not None and exporter != display:
                        queue.append((exporter, name, why, named))
                continue
            start, end = index.spans[name]
            if why.mode.kind == AUTOCAST and _forward_without_autocast(index, start, end):
                continue  # what the module runs, it runs outside the autocast that reached it
            methods = _plain_methods(index, start, end)
            called = None
            if methods is not None:
                called = frozenset(
                    m for m in methods if m.startswith(b"__") or m in named[0] or m in named[1]
                )
            elif index.code.startswith(b"class", start) and self._own_bases(display, start, end):
                # A module (or a subclass of the project's own classes): torch runs its hooks, and a
                # method the project names nowhere (`Text2SemanticDecoder.infer`, whose one call is
                # commented out) runs nowhere; the rest may run wherever an instance goes.
                methods = _methods(index, start, end)
                called = frozenset(m for m in methods if framework_hook(m.decode()) or m in self.attributes())
                unrun.setdefault((display, name), set(methods)).intersection_update(methods.keys() - called)
            if (display, name, why.mode, called) in seen:
                continue
            seen.add((display, name, why.mode, called))
            step = why.through(name, _MAX_VIA)
            for known in (
                reached.setdefault(display, {}),
                by_definition.setdefault(display, {}).setdefault(name, {}),
            ):
                if why.mode not in known or known[why.mode].rank() > step.rank():
                    known[why.mode] = step
            if methods is None or called is None:
                body = index.code[start:end]
            else:
                body = _class_scope(index.code, start, end, methods, called)
            words = code_words(body)
            for target in self.targets(display, words, body):
                if target != (display, name):
                    queue.append((*target, step, (named[0], words)))
        result.files = {display: _best_first(modes) for display, modes in reached.items()}
        result.definitions = {
            display: {name: _best_first(modes) for name, modes in names.items()}
            for display, names in by_definition.items()
        }
        for (display, name), idle in unrun.items():  # no mode reaches them: the caller's
            result.definitions[display].update((f"{name}.{m.decode()}", ()) for m in sorted(idle))
        result.elsewhere = self._elsewhere(reached.keys())
        return result

    def _demote_demos(self) -> None:
        """A setting in the `if __name__ == "__main__":` block of a module that another file of the
        project imports is the module's demo (transformers-stream-generator's bloom-560m load in
        float16): it says how its author tried the module, not how the project runs it, so it
        counts as an example's."""
        demos: dict[str, list[int]] = {}  # module name -> the indices of its entries in a demo
        for i, (display, offset, why) in enumerate(self.entries):
            index = self.file(display)  # indexed for every entry's file anyway, by `solve`
            if why.role != "code" or b"__main__" not in index.code:
                continue
            for main in _MAIN.finditer(index.code):
                if (
                    not inside(index.strings, main.start())
                    and main.start() <= offset < _block(index, main.start())[1]
                ):
                    demos.setdefault(self.names[display].rpartition(".")[2], []).append(i)
        if not demos:
            return
        names = b"|".join(re.escape(name.encode()) for name in demos)
        imports = re.compile(rb"^[ \t]*(?:from|import)[ \t][^\n]*\b(" + names + rb")\b", re.MULTILINE)
        for importer, load in self.loaders.items():
            for match in imports.finditer(load()):
                indices = demos.get(match[1].decode(), [])
                if any(self.entries[i][0] != importer for i in indices):  # not the module itself
                    for i in demos.pop(match[1].decode()):
                        display, offset, why = self.entries[i]
                        self.entries[i] = (display, offset, replace(why, role="example"))

    def _demote_options(self) -> None:
        """A setting that runs only under a flag the project leaves off by default (`if args.fp16:`
        with a `store_true` option nothing passes) is an option's: it says what a user may ask for,
        not how the project runs (`amplint.static.gates`)."""
        guarded: dict[int, list[Flag]] = {}
        blocks: dict[str, Blocks] = {}
        skipped: dict[str, Callable[[int], bool]] = {}  # in a string or a comment, per file
        for i, (display, offset, why) in enumerate(self.entries):
            if why.role == "code":
                text = self.file(display).code
                if display not in blocks:
                    skipped[display] = partial(inside, string_spans(text, comments=True))
                    blocks[display] = Blocks(text, skipped[display])
                flags = guards(text, offset, blocks[display])
                if flags:
                    guarded[i] = flags
        if not guarded:
            return
        # A test sets a flag for what it tests, not for how the project runs.
        code = (
            (display, code, skipped.get(display) or partial(inside, string_spans(code, comments=True)))
            for display, load in self.loaders.items()
            if self.roles[display] != "test" and (code := load())
        )
        texts = (text for text in (self.texts() if self.texts else ()) if role_of(text[0]) != "test")
        values = flag_values({flag.name for flags in guarded.values() for flag in flags}, code, texts)
        for i, flags in guarded.items():
            for flag in flags:
                where = values.is_off(flag)
                if where is not None:
                    display, offset, why = self.entries[i]
                    gate = f"`{flag.written}` ({where})"
                    self.entries[i] = (display, offset, replace(why, role="option", flag=gate))
                    break

    def _elsewhere(self, reached: Iterable[str]) -> dict[str, dict[str, Calls]]:
        """For each file some mode reaches, the functions it defines that another file calls with a
        float32 value, with every call of their name in the project; none where the file calls the
        name itself (the engine reads those calls, and a call it cannot place leaves it unknown)."""
        defined: dict[str, list[str]] = {}
        for display in reached:
            for name in sorted({m.decode() for m in _DEF_NAME.findall(self.file(display).code)}):
                if self.callees.get(name, {display}) - {display}:  # called so from another file
                    defined.setdefault(name, []).append(display)
        if not defined:
            return {}
        calls: dict[str, list[tuple[str, int, str]]] = {name: [] for name in defined}
        pattern = calls_of(defined)
        for display, load in self.loaders.items():
            code = load()
            if pattern.search(code) is None:
                continue
            strings = string_spans(code, comments=True)
            digest = f"{zlib.crc32(code):08x}"
            for name, line in call_lines(code, pattern, partial(inside, strings)):
                calls[name].append((display, line, digest))
            # A name called all over the project (`update`, `pad`) is too common to be this
            # function's alone, and its calls too many files to read: no longer looked for.
            common = {name for name in defined if len(calls[name]) > _MOST_CALLS}
            if common:
                defined = {name: displays for name, displays in defined.items() if name not in common}
                if not defined:
                    return {}
                pattern = calls_of(defined)
        found: dict[str, dict[str, Calls]] = {}
        for name, displays in defined.items():
            for display in displays:
                if calls[name] and all(caller != display for caller, _, _ in calls[name]):
                    found.setdefault(display, {})[name] = tuple(calls[name])
        return found


def _best_first(modes: dict[Mode, ModeWhy]) -> tuple[ModeWhy, ...]:
    return tuple(sorted(modes.values(), key=ModeWhy.rank))


def _index(display: str, code: bytes) -> _File:
    strings = string_spans(code)
    # A definition ends where the next statement at column 0 starts (a decorator belongs to the next).
    tops = [
        m.start() for m in TOP_LINE.finditer(code) if not inside(strings, m.start()) and code[m.start()] != 64
    ]
    spans: dict[str, tuple[int, int]] = {}
    for match in _DEF.finditer(code):
        start = match.start()
        if inside(strings, start):
            continue
        after = bisect.bisect_right(tops, start)
        spans.setdefault(match[1].decode(), (start, tops[after] if after < len(tops) else len(code)))
    imports: dict[str, tuple[str, str | None]] = {}
    star: list[str] = []
    for match in _FROM.finditer(code):
        if inside(strings, match.start()):
            continue
        module = (match[1] + match[2]).decode()
        names = match[3].decode().replace("(", " ").replace(")", " ").replace("\\", " ")
        for item in re.split(r"[,\n]", names.split("#")[0] if "(" not in names else _uncomment(names)):
            parts = item.split()
            if not parts:
                continue
            if parts[0] == "*":
                star.append(module)
                continue
            local = parts[2] if len(parts) == 3 and parts[1] == "as" else parts[0]
            if local.isidentifier():
                imports[local] = (module, parts[0])
    for match in _IMPORT.finditer(code):
        if inside(strings, match.start()):
            continue
        for item in match[1].decode().split("#")[0].split(","):
            parts = item.split()
            if not parts:
                continue
            if len(parts) == 3 and parts[1] == "as":
                imports[parts[2]] = (parts[0], None)
            elif "." not in parts[0]:
                imports[parts[0]] = (parts[0], None)
    return _File(display, code, spans, imports, star, strings)


def _uncomment(text: str) -> str:
    return "\n".join(line.split("#")[0] for line in text.splitlines())


def _scope(index: _File, offset: int, region: bool = False) -> tuple[str | None, bytes]:
    """The code an entry at `offset` (the start of its line) runs: its top-level definition (with
    its name), or, at module level, the module's statements outside every definition (a script).
    With `region` (an autocast setting), an autocast `with` block runs only what its body reaches:
    unlike a cast, which stays with the module it casts wherever it is used, the region ends with
    the block (a loss computed after it, on outputs cast to float32, runs outside); in a method of a
    class, with what the body calls through `self` (`_method_scope`). An autocast made into a name
    (`ctx = torch.autocast(...) if cuda else nullcontext()`) runs the `with ctx:` blocks that enter
    it, where there are any."""
    holder = _holder(index, offset)
    blocks = _region_blocks(index, offset, holder) if region else []
    owner = None if holder is None else holder[0]
    if blocks:
        return owner, b"\n".join(_block_scope(index, block) for block in blocks)
    if holder is not None:
        return owner, index.code[holder[1] : holder[2]]
    pieces, at = [], 0
    for start, end in sorted(index.spans.values()):
        pieces.append(index.code[at:start])
        at = end
    pieces.append(index.code[at:])
    return None, b"".join(pieces)


def _holder(index: _File, offset: int) -> tuple[str, int, int] | None:
    """The top-level definition that holds `offset`: its name and span; None at module level."""
    return next(((name, a, b) for name, (a, b) in index.spans.items() if a <= offset < b), None)


def _region_blocks(index: _File, offset: int, holder: tuple[str, int, int] | None) -> list[tuple[int, int]]:
    """The `with` blocks an autocast setting at `offset` runs: its own, or those that enter the
    name it is assigned to, after it in its definition `holder` (or module); none when it is
    entered otherwise (`ctx.__enter__()`, handed to another function)."""
    code = index.code
    if _WITH.match(code, offset):
        return [_block(index, offset)]
    assigned = _LOCAL_SET.match(code, offset)
    if assigned is None:
        return []
    end = len(code) if holder is None else holder[2]
    enters = re.compile(
        rb"^[ \t]*(?:async[ \t]+)?with\b[^\n]*?\b" + re.escape(assigned[1]) + rb"\b", re.MULTILINE
    )
    return [
        _block(index, m.start())
        for m in enters.finditer(code, offset, end)
        if not inside(index.strings, m.start())
    ]


def _block_scope(index: _File, block: tuple[int, int]) -> bytes:
    """The code the `with` block at `block` runs, with the definition (or module) that holds it."""
    holder = _holder(index, block[0])
    if holder is None:
        return _with_bindings(index.code, 0, block)
    _, start, end = holder
    scope = _method_scope(index, start, end, block) if _CLASS.match(index.code, start) else None
    return _with_bindings(index.code, start, block) if scope is None else scope


def _with_bindings(code: bytes, start: int, block: tuple[int, int]) -> bytes:
    """The block's body, with what the names it uses were bound to before it from `start` on."""
    body = code[_header_end(code, block[0], block[1]) : block[1]]
    return b"\n".join([body, *_bound_before(code, start, block[0], body)])


def _bound_before(code: bytes, start: int, end: int, body: bytes) -> list[bytes]:
    """What the names `body` uses were bound to in `code[start:end]` (`criterion =
    BarDistribution(borders)` above `with autocast(): loss = criterion(logits, ys)`)."""
    used = set(_WORD.findall(body))
    return [m[2] for m in _LOCAL_SET.finditer(code, start, end) if m[1] in used]


def _header_end(code: bytes, start: int, end: int) -> int:
    """Where the body of the `with` statement at `start` begins: after the colon that ends its
    header (the autocast's own arguments, `tr.amp_dtype`, run nothing)."""
    depth = 0
    for at in range(start, end):
        char = code[at]
        if char in BRACKETS[0]:
            depth += 1
        elif char in BRACKETS[1]:
            depth -= 1
        elif char == 58 and depth == 0:  # ":"
            return at + 1
    return start


def _block(index: _File, offset: int) -> tuple[int, int]:
    """The span of the `with` statement whose line starts at `offset`: up to the next line of code
    indented no deeper than it."""
    code = index.code
    indent = indent_at(code, offset)
    for line in _INDENTED.finditer(code, code.find(b"\n", offset) + 1 or len(code)):
        if len(line[1]) <= indent and not inside(index.strings, line.start()):
            return offset, line.start()
    return offset, len(code)


_CLASS = re.compile(rb"class[ \t]")
_WITH = re.compile(rb"[ \t]*(?:async[ \t]+)?with\b")
_PLAIN_CLASS = re.compile(rb"class[ \t]+\w+[ \t]*(?:\([ \t]*(?:object)?[ \t]*\))?[ \t]*:")
_METHOD = re.compile(rb"^([ \t]+)(?:async[ \t]+)?def[ \t]+(\w+)", re.MULTILINE)
# A line that starts a statement (not a comment, nor the closing bracket of a signature), its indentation.
_INDENTED = re.compile(rb"^([ \t]*)(?=[^\s#)\]}])", re.MULTILINE)
_SELF_CALL = re.compile(rb"\bself\.(\w+)[ \t]*\(")
_PLAIN_BASES = frozenset({b"Module", b"ABC", b"object", b"Generic", b"Protocol"})
# An attribute's name, or (matching nothing) a comment line: `# self.model.infer(...)` names nothing.
_ATTRIBUTE = re.compile(rb"^[ \t]*#[^\n]*|\.([A-Za-z_]\w*)", re.MULTILINE)
_SELF_READ = re.compile(rb"\bself\.(\w+)")
_SELF_SET = re.compile(rb"\bself\.(\w+)[ \t]*(?::[^=\n]*)?=(?!=)([^\n]*)")
_LOCAL_SET = re.compile(rb"^[ \t]*(\w+)[ \t]*(?::[^=\n]*)?=(?!=)([^\n]*)", re.MULTILINE)
_BARE_NAME = re.compile(rb"[ \t]*(\w+)[ \t\r]*(?:#.*)?\Z")
# `isinstance(vae, VitVQGanVAE)` or a parameter `vae: VitVQGanVAE`: (name, type, name).
_TYPED = re.compile(rb"\bisinstance\([ \t]*(\w+)[ \t]*,([^)\n]*)\)|[(,][ \t]*(\w+)[ \t]*:[ \t]*([\w.]+)")


def _methods(index: _File, start: int, end: int) -> dict[bytes, tuple[int, int]]:
    """The spans of the methods of the class at `index.code[start:end]` (those at its body's
    indentation, each up to the next line of code as far out as its `def`), by name."""
    code, strings = index.code, index.strings
    found = [m for m in _METHOD.finditer(code, start, end) if not inside(strings, m.start())]
    if not found:
        return {}
    indent = min(len(m[1]) for m in found)
    lines = [m.start() for m in _INDENTED.finditer(code, start, end) if len(m[1]) <= indent]
    lines = [line for line in lines if not inside(strings, line)]
    spans: dict[bytes, tuple[int, int]] = {}
    for method in (m for m in found if len(m[1]) == indent):
        after = bisect.bisect_right(lines, method.start())
        spans.setdefault(method[2], (method.start(), lines[after] if after < len(lines) else end))
    return spans


# A `forward` that turns autocast off for its whole body, by its first statement or a decorator:
# `with torch.autocast("cuda", enabled=False):`, `@custom_fwd(cast_inputs=torch.float32)`.
_AUTOCAST_OFF = re.compile(rb"[ \t]*with[ \t]+[\w.]*autocast[ \t]*\([^:]*" + DISABLED.pattern)
_FLOAT32_DECORATOR = re.compile(
    rb"@[\w.]*(?:autocast[ \t]*\([^\n]*"
    + DISABLED.pattern
    + rb"|custom_fwd[ \t]*\([^\n]*\bcast_inputs[ \t]*=[ \t]*(?:torch\.)?float32)"
)


def _forward_without_autocast(index: _File, start: int, end: int) -> bool:
    """Whether the class at `index.code[start:end]` has a `forward` that runs with autocast off
    whatever calls it (flashdrr's `VolumeRaycaster` renders in float32 so)."""
    if not index.code.startswith(b"class", start):
        return False
    span = _methods(index, start, end).get(b"forward")
    if span is None:
        return False
    code = index.code
    previous = code.rfind(b"\n", start, span[0])
    decorators = code[code.rfind(b"\n", start, previous) + 1 : span[0]] if previous > 0 else b""
    if _FLOAT32_DECORATOR.search(decorators):
        return True
    # The first statement of the body, docstring and comments aside.
    at = _header_end(code, span[0], span[1])
    for match in _INDENTED.finditer(code, at, span[1]):
        line_start = match.end()
        if inside(index.strings, line_start) or code.startswith((b'"""', b"'''", b"#"), line_start):
            continue
        return _AUTOCAST_OFF.match(code, match.start()) is not None
    return False


def _plain_methods(index: _File, start: int, end: int) -> dict[bytes, tuple[int, int]] | None:
    """The methods of the definition at `index.code[start:end]` when it is a class without bases: nothing
    but its callers (and Python's protocols, its `__dunder__` methods) runs them, unlike a module or
    a framework's hook a base may call. None for a function or a class with bases."""
    if not _PLAIN_CLASS.match(index.code, start):
        return None
    return _methods(index, start, end)


def _class_scope(
    code: bytes,
    start: int,
    end: int,
    methods: dict[bytes, tuple[int, int]],
    entries: Iterable[bytes],
    bases: bool = True,
    region: tuple[int, int] | None = None,
) -> bytes:
    """What runs of the class at `code[start:end]` when `entries` of its methods are called: those
    methods, the methods they call through `self` (and those they call), the first line of each
    assignment to an attribute they read (`self.model = GPT(config)` in `__init__`), and the class's
    own statements outside its methods (with `bases`, its header too: its bases' methods may run).
    With `region`, the one entry runs only that span of itself (an autocast block's body)."""
    wanted, frontier = set(entries), list(entries)
    spans = dict(methods)
    if region is not None:
        spans[frontier[0]] = region
    while frontier:
        a, b = spans[frontier.pop()]
        for called in set(_SELF_CALL.findall(code, a, b)) & methods.keys() - wanted:
            wanted.add(called)
            frontier.append(called)
    run = [code[a:b] for name, (a, b) in spans.items() if name in wanted]
    read = {attribute for piece in run for attribute in _SELF_READ.findall(piece)}
    header = code.find(b"\n", start, end)
    outside, at = [], start if bases or header < 0 else header
    for a, b in sorted(methods.values()):
        outside.append(code[at:a])
        at = b
    outside.append(code[at:end])
    bound = [m[2] for m in _SELF_SET.finditer(code, start, end) if m[1] in read]
    # `self.vae = vae`, a module passed in: its class is what `isinstance` or the parameter's
    # annotation names (`vae: VitVQGanVAE`, `assert isinstance(vae, VitVQGanVAE)`).
    passed = {m[1] for value in bound if (m := _BARE_NAME.match(value)) is not None}
    typed = [m[2] or m[4] for m in _TYPED.finditer(code, start, end) if (m[1] or m[3]) in passed]
    return b"\n".join([*outside, *run, *bound, *typed])


def _method_scope(index: _File, start: int, end: int, block: tuple[int, int]) -> bytes | None:
    """The code an autocast block in a method of the class at `index.code[start:end]` runs: the
    block, and what it reaches in the class (`_class_scope`, its bases left out: a test case's region
    does not run its framework's every method). The class's other methods run outside the region:
    an autocast in `predict_images` says nothing of `predict_text`. None when the block is in no
    method."""
    methods = _methods(index, start, end)
    entry = next((name for name, (a, b) in methods.items() if a <= block[0] < b), None)
    if entry is None:
        return None
    # The block's body (its header's arguments, `self.amp_dtype`, run nothing) is in the class
    # scope already; only its local bindings are added.
    body = (_header_end(index.code, *block), block[1])
    scope = _class_scope(index.code, start, end, methods, (entry,), bases=False, region=body)
    bound = _bound_before(index.code, methods[entry][0], block[0], index.code[body[0] : body[1]])
    return b"\n".join([scope, *bound])


def _line_offset(code: bytes, line: int, offset: int, at_line: int) -> int:
    """Where `line` starts, counted on from `offset`, where line `at_line` (not after it) starts."""
    for _ in range(line - at_line):
        offset = code.index(b"\n", offset) + 1
    return offset


def _dotted(relative: str) -> str:
    parts = list(PurePosixPath(relative.replace("\\", "/")).parts)
    if parts and parts[0] in ("/", "."):
        parts = parts[1:]
    if not parts:
        return ""
    last = parts.pop()
    stem = last.rsplit(".", 1)[0]
    if stem != "__init__":
        parts.append(stem)
    return ".".join(parts)


def _suffixes(dotted: str) -> Iterator[str]:
    parts = dotted.split(".") if dotted else []
    for start in range(len(parts)):
        yield ".".join(parts[start:])


def _shared(one: str, other: str) -> int:
    """How many leading folders two display paths share."""
    count = 0
    for a, b in zip(one.split("/"), other.split("/"), strict=False):
        if a != b:
            break
        count += 1
    return count
