"""The project's precision profile: which half dtypes the checked code may run in.

A hazard of float16 (overflow past 65504) is not one of bfloat16 (8 bits of mantissa) and the other
way round, and whether a file runs in either is seldom written in the file itself: a training script
sets it once (`torch.autocast(dtype=...)`, `Trainer(precision="bf16-mixed")`, `fp16=True`) for the
model code it imports. So the profile is decided once per run for the whole project: from
`precision = ...` in `[tool.amplint]`, or detected by a cheap text scan of the checked files for code
that sets precision. A project where nothing sets it is library code, run in whatever dtype its caller
picks: both.

The scan is regular expressions over text, not a parse: it has to cost little next to the lint of a
million-line tree, and it runs before any file is parsed (the cache key depends on it). It imports
nothing from amplint, so a run answered from the cache loads no parser for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Literal

from amplint.static.codetext import is_code, string_spans

__all__ = [
    "ANY_TORCH",
    "BFLOAT16",
    "BOTH",
    "CALLER",
    "FLOAT16",
    "PRECISIONS",
    "Evidence",
    "Origin",
    "Profile",
    "TorchRange",
    "configured",
    "detect",
    "settings_in",
]

BFLOAT16, FLOAT16 = "bfloat16", "float16"
BOTH: frozenset[str] = frozenset({BFLOAT16, FLOAT16})
Origin = Literal["configured", "detected", "caller"]
Evidence = tuple[str, int, str]  # (display path, line, what was seen)
# The values of `precision` in `[tool.amplint]` and of `--precision`; "auto" detects.
PRECISIONS: tuple[str, ...] = ("auto", "bf16", "fp16", "fp32")

# The kinds of setting: the code runs under autocast (on a device), or its tensors are cast.
AUTOCAST, CAST = "autocast", "cast"
AUTOCAST_CUDA = f"{AUTOCAST}:cuda"
# A cast of one tensor: that value is half, the code it flows into does not run in a mode for it.
CAST_TENSOR = "cast:tensor"
# A model built or loaded in a half dtype (`Mode.loads`).
CAST_LOAD = "cast:load"
# How a GradScaler setting is written (`ModeWhy.what`): it says float16 autocast runs, not where.
SCALER = "GradScaler(...)"

_HANDFUL = 5  # evidence kept per dtype: enough to show where, not a list of every cast
_ALIASES = {
    "bfloat16": BFLOAT16,
    "bf16": BFLOAT16,
    "float16": FLOAT16,
    "fp16": FLOAT16,
    "half": FLOAT16,
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}


Version = tuple[int, int]  # (major, minor)
_CLAUSE = re.compile(
    r"^\s*(?P<op>~=|==|>=|<=|!=|>|<)\s*v?(?P<major>\d+)(?:\.(?P<minor>\d+))?(?:\.(?P<patch>\d+))?"
)


@dataclass(frozen=True)
class TorchRange:
    """The torch versions a project supports, from its requirement (`torch>=1.13,<2.5`): `low` the
    oldest (inclusive), `high` the first it does not (exclusive); None where it sets no bound."""

    low: Version | None = None
    high: Version | None = None

    @classmethod
    def parse(cls, requirement: str) -> TorchRange:
        """`>=1.13,<2.5`, `==2.1.0`, `~=2.1`, or `torch>=2.0` as written in a dependency list; ""
        for any. ValueError for a clause it cannot read."""
        spec = re.sub(r"^\s*torch\b\s*(\[[^\]]*\])?", "", requirement.split(";")[0]).strip()
        spec = spec.removeprefix("(").removesuffix(")")  # `torch (>=1.10)`, as older metadata writes it
        low: Version | None = None
        high: Version | None = None
        for clause in filter(None, (part.strip() for part in spec.split(","))):
            match = _CLAUSE.match(clause)
            if match is None:
                raise ValueError(f"not a version requirement: {clause!r}")
            op, major, minor = match["op"], int(match["major"]), int(match["minor"] or 0)
            exact = match["patch"] is None or int(match["patch"]) == 0
            version = (major, minor)
            if op in (">=", ">", "==", "~="):
                low = max(low or version, version)
            if op == "==" or (op == "~=" and match["patch"] is not None):
                high = min(high or (major, minor + 1), (major, minor + 1))
            elif op == "~=":
                high = min(high or (major + 1, 0), (major + 1, 0))
            elif op == "<" or op == "<=":
                # `<2.4` stops before 2.4; `<2.4.1` and `<=2.4` still take some 2.4 release.
                bound = version if op == "<" and exact else (major, minor + 1)
                high = min(high or bound, bound)
        return cls(low, high)

    def always(self, version: Version) -> bool:
        """Every supported torch is at least `version`."""
        return self.low is not None and self.low >= version

    def ever(self, version: Version) -> bool:
        """Some supported torch is at least `version`."""
        return self.high is None or self.high > version

    def describe(self) -> str:
        parts = [f">={_show(self.low)}" if self.low else "", f"<{_show(self.high)}" if self.high else ""]
        return ",".join(part for part in parts if part) or "any"


def _show(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


ANY_TORCH = TorchRange()
# The newest Python whose grammar libcst, amplint's parser, knows (max of its
# KNOWN_PYTHON_VERSION_STRINGS, which tests/static/test_parse_parity.py compares): the grammar a
# project that declares no Python is checked in. Spelled out so that a run the cache answers never
# imports libcst.
NEWEST_PYTHON = (3, 15)


_SHORT = {BFLOAT16: "bf16", FLOAT16: "fp16"}
_ROLES = ("configured", "code", "config", "option", "example", "benchmark", "test")
_ROLE_PLURAL = {"option": "opt-in flags"}


@dataclass(frozen=True)
class Mode:
    """One way code runs in half precision: under autocast on `device` in `dtype` (the weights stay
    float32, autocast picks each op's dtype), or cast to `dtype` (weights and activations half)."""

    kind: str  # AUTOCAST or CAST
    dtype: str  # BFLOAT16 or FLOAT16
    device: str = ""  # autocast's device type: "cuda" or "cpu"
    # A cast that builds or loads the model in `dtype` (`torch_dtype=`, `set_default_dtype`) rather
    # than converting it once built (`.half()`): tensors made in float32 on purpose stay float32.
    loads: bool = False

    @property
    def name(self) -> str:
        """`autocast-bf16`, `cast-fp16`, `autocast-bf16:cpu`: as the `modes` setting writes it."""
        base = f"{self.kind}-{_SHORT[self.dtype]}"
        return f"{base}:cpu" if self.device == "cpu" else base


# The names the `modes` setting takes: (kind, dtype) of each.
MODE_NAMES = {
    f"{kind}-{short}": (kind, dtype) for kind in ("autocast", "cast") for dtype, short in _SHORT.items()
}


@dataclass(frozen=True)
class ModeWhy:
    """A mode and its evidence: the setting that makes it (`path:line`, what was seen, the kind of
    file it is in: "code", "test", "benchmark", "example", "config", "configured"; "option" for a
    setting only a flag off by default runs) and the names followed from it to the code at hand."""

    mode: Mode
    path: str
    line: int
    what: str
    via: tuple[str, ...] = ()
    role: str = "code"
    # For an option's setting: the flag it runs under and where the project leaves it off,
    # "`args.fp16` (False by default at train.py:12)".
    flag: str = ""

    def through(self, name: str, most: int) -> ModeWhy:
        """The same evidence, one name further (at most `most` names kept: the first and the last)."""
        via = (*self.via, name)
        if len(via) > most:
            via = (*via[: most // 2], "...", *via[-(most - most // 2 - 1) :])
        return replace(self, via=via)

    @property
    def converts(self) -> bool:
        """Whether the mode converts a built module's float32 parameters and buffers (`.half()`,
        `.to(dtype)`, Lightning's "bf16-true", a configured cast), rather than building or loading
        the model in the half dtype (a loader's `torch_dtype=`, `set_default_dtype`): that leaves a
        tensor made in float32 on purpose (`.float()`, `dtype=torch.float32`) as it is."""
        return self.mode.kind == CAST and not self.mode.loads

    def rank(self) -> tuple[int, int]:
        """Which evidence to show first: real code before tests and examples, short chains first."""
        return (_ROLES.index(self.role) if self.role in _ROLES else len(_ROLES), len(self.via))

    def describe(self) -> str:
        """`cast-bf16: `model.half()` at scripts/generate.py:41 -> GPT -> Block` (and "in tests only"
        where the role says so)."""
        if self.role == "configured":
            return f"{self.mode.name}: `modes` in the configuration"
        where = f"{self.mode.name}: `{self.what}` at {self.path}:{self.line}"
        if self.flag:
            where += f", only with {self.flag}"
        chain = " -> ".join(self.via)
        return where + (f" -> {chain}" if chain else "")


@dataclass(frozen=True)
class Profile:
    """The half dtypes the checked code may run in (empty: float32 only), where that came from, and,
    when detected, a few of the places that set it."""

    half: frozenset[str]
    origin: Origin
    evidence: tuple[Evidence, ...] = ()
    # The torch versions the project supports (`torch-version`, or its declared dependency): which
    # replacement APIs exist for it, and whether a deprecation reaches it.
    torch: TorchRange = ANY_TORCH
    # The execution modes of one file, with their evidence (`amplint.static.modes`), best first;
    # empty where none is known (then `half` alone says what the caller may pick).
    modes: tuple[ModeWhy, ...] = ()
    # The modes of each top-level definition some entry reaches (and no modes for the methods of a
    # reached class that nothing runs, `Class.method`); where set, one it does not reach runs in
    # float32 (module-level code keeps the file's `modes`).
    definitions: tuple[tuple[str, tuple[ModeWhy, ...]], ...] = ()
    # The functions of the file that other files call with a float32 value, with every call of
    # their name in the project: (name, ((file, line, digest of the file), ...)).
    elsewhere: tuple[tuple[str, tuple[tuple[str, int, str], ...]], ...] = ()
    # The Python whose grammar the code follows (`target-version`, or the lower bound of
    # `requires-python`): AMP900 is where that Python would refuse the file.
    python: tuple[int, int] = NEWEST_PYTHON

    def __post_init__(self) -> None:
        # Rules compare against these names: a typo here would silently turn a rule off.
        if not self.half <= BOTH:
            raise ValueError(f"half dtypes must be among {sorted(BOTH)}, got {sorted(self.half)}")
        if self.origin not in ("configured", "detected", "caller"):
            raise ValueError(f"unknown profile origin {self.origin!r}")

    def may_be(self, dtype: str) -> bool:
        """Whether the code may run in `dtype` ("bfloat16", "float16", "float32"; "torch." prefixes
        and the short names "bf16", "fp16", "half", "fp32" too). float32 always: autocast keeps
        some ops in it whatever the half dtype."""
        name = _ALIASES.get(dtype.removeprefix("torch."))
        if name is None:
            raise ValueError(f"not a floating-point dtype amplint knows: {dtype!r}")
        return name == "float32" or name in self.half

    def describe(self) -> str:
        """One line for messages and `--show-settings`, e.g. "bfloat16 only (detected)"."""
        if not self.half:
            dtypes = "float32 only"
        elif len(self.half) == 1:
            dtypes = f"{next(iter(self.half))} only"
        else:
            dtypes = "bfloat16 or float16"
        why = {
            "configured": "configured",
            "detected": "detected",
            "caller": "nothing in the project sets it: whatever dtype the caller picks",
        }[self.origin]
        return f"{dtypes} ({why})"

    def key(self) -> str:
        """What the result cache keys on: the dtypes, the origin and the Python, and a file's modes
        with their evidence (its messages name them), not the project's evidence, so a new cast of an
        already known dtype re-lints only the files it reaches."""
        # With each mode's role: a module's demo is an example's, though its path is the code's.
        modes = "|".join(f"{why.describe()}({why.role})" for why in self.modes)
        modes += "|".join(
            f"{name}={','.join(f'{w.describe()}({w.role})' for w in whys)}" for name, whys in self.definitions
        )
        modes += "|".join(f"{name}@{calls}" for name, calls in self.elsewhere)
        key = f"{self.origin}:{'+'.join(sorted(self.half)) or 'float32'}:torch{self.torch.describe()}"
        key += f":py{self.python[0]}.{self.python[1]}"
        return f"{key}:{modes}" if modes else key

    def modes_of(self, definition: str | None) -> tuple[ModeWhy, ...]:
        """The modes of the top-level `definition` (None: module-level code), or of a method
        (`Class.method`): its class's, unless no mode runs it."""
        if definition is None or not self.definitions:
            return self.modes
        if definition not in self._by_definition:
            definition = definition.partition(".")[0]
        return self._by_definition.get(definition, ())

    def idle(self, definition: str | None) -> bool:
        """Whether `definition` is a method of a reached class that no mode runs (`Class.method`)."""
        return definition is not None and "." in definition and self._by_definition.get(definition) == ()

    @cached_property
    def _by_definition(self) -> dict[str, tuple[ModeWhy, ...]]:
        return dict(self.definitions)

    def calls_of(self, function: str) -> tuple[tuple[str, int, str], ...]:
        """Every call in the project of a function of this file that other files call with a float32
        value (empty for any other function)."""
        return next((calls for name, calls in self.elsewhere if name == function), ())

    def only_in(self, modes: tuple[ModeWhy, ...] | None = None) -> str | None:
        """ "tests", "benchmarks", "examples" ("opt-in flags": settings that a flag the project
        leaves off guards) when every mode rests on such alone, else None."""
        roles = {why.role for why in (self.modes if modes is None else modes)}
        if not roles or not roles <= {"test", "benchmark", "example", "option"}:
            return None
        return " and ".join(_ROLE_PLURAL.get(role, f"{role}s") for role in sorted(roles))


CALLER = Profile(BOTH, "caller")


def configured(value: str) -> Profile | None:
    """The profile `precision = value` sets; None for "auto" (detect it)."""
    if value == "auto":
        return None
    half = {"bf16": {BFLOAT16}, "fp16": {FLOAT16}, "fp32": set()}.get(value)
    if half is None:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {value!r}")
    return Profile(frozenset(half), "configured")


def detect(texts: Iterable[tuple[str, bytes | str]]) -> Profile:
    """The profile that the code in `texts` ((display path, bytes or text) pairs) sets: "detected"
    with every half dtype some line sets, or `CALLER` when none does. Stops reading `texts` once both
    dtypes have a handful of evidence, since nothing further can change the result."""
    kept: list[Evidence] = []
    counts = dict.fromkeys(sorted(BOTH), 0)
    for display, text in texts:
        for line, what, dtypes in settings_in(text):
            wanted = [d for d in dtypes if counts[d] < _HANDFUL]
            if wanted:
                kept.append((display, line, what))
            for dtype in dtypes:
                counts[dtype] += 1
        if all(count >= _HANDFUL for count in counts.values()):
            break
    half = frozenset(dtype for dtype, count in counts.items() if count)
    return Profile(half, "detected", tuple(kept)) if half else CALLER


# --- the scan ------------------------------------------------------------------------------------

# A file none of these words occurs in sets no precision: most files are ruled out by a few substring
# searches, which run at memory speed.
_WORDS = ("float16", "bf16", "fp16", "half", "autocast", "GradScaler", "precision")
_WORD_BYTES = tuple(word.encode() for word in _WORDS)


def may_set_precision(raw: bytes) -> bool:
    """Whether a file's bytes hold a word the scan looks for: the others need no decoding for it."""
    return any(word in raw for word in _WORD_BYTES)


# What hides code from the scan (`amplint.static.codetext`): docstrings (any triple-quoted string),
# then, on the line of a match only, comments and strings (a message that mentions `.half()` sets
# nothing). Tokenizing every string of every file would cost more than the rest of the scan.

_HALF_NAME = {"float16": FLOAT16, "half": FLOAT16, "bfloat16": BFLOAT16, "fp16": FLOAT16, "bf16": BFLOAT16}
_TORCH_HALF = rb"torch\.(?P<dtype>float16|bfloat16|half)\b"
_STRING_HALF = rb"(?P<q>[\"'])(?P<name>float16|bfloat16|fp16|bf16|half)(?P=q)"

_AUTOCAST = re.compile(rb"autocast[ \t]*\(")
_GRAD_SCALER = re.compile(rb"GradScaler[ \t]*\(")
_CAST_METHOD = re.compile(rb"\.(?P<dtype>half|bfloat16)\([ \t]*\)")
_TO = re.compile(rb"\.(?:to|type)\((?P<args>[^()]*)\)")
_TO_DTYPE = re.compile(rb"(?<![\w.])" + _TORCH_HALF)
_DTYPE_ARG = re.compile(rb"dtype[ \t]*=(?!=)[ \t]*(?:" + _TORCH_HALF + b"|" + _STRING_HALF + b")")
_ANY_TORCH_HALF = re.compile(rb"torch\.(float16|bfloat16|half)\b")
_DEFAULT_DTYPE = re.compile(rb"set_default_dtype[ \t]*\([ \t]*" + _TORCH_HALF)
_LIGHTNING = re.compile(rb"precision[ \t]*=(?!=)[ \t]*(?:(?P<q>[\"'])(?P<name>[\w-]+)(?P=q)|(?P<int>\d+)\b)")
_ACCELERATE = re.compile(rb"mixed_precision[ \t]*=(?!=)[ \t]*(?P<q>[\"'])(?P<name>fp16|bf16)(?P=q)")
# Two patterns: one that starts with a literal is searched for at memory speed, an alternation is not.
_HF_FLAGS = tuple(
    re.compile(rb"(?P<name>" + name + rb")(?:_full_eval)?[ \t]*=(?!=)[ \t]*True\b")
    for name in (b"bf16", b"fp16")
)

_QUALIFIER = re.compile(rb"[\w.]*\Z")
_AUTOCAST_MODULES = {"torch", "amp", "cuda", "cpu", "xpu", "mps", "hpu", "autocast_mode"}
_DEVICE = re.compile(rb"(?:\A|device_type[ \t]*=)[ \t]*(?P<q>[\"'])(?P<device>\w+)(?P=q)")
_AUTOCAST_DTYPE = re.compile(rb"\bdtype[ \t]*=[ \t]*(?P<value>[\w.]+)")
# `enabled=False` turns autocast (or a GradScaler) off; the modes index spells it inside its own patterns.
DISABLED = re.compile(rb"\benabled[ \t]*=[ \t]*False\b")
# Autocast's own default dtype per device type (torch.get_autocast_dtype).
_DEVICE_DEFAULT = {"cuda": FLOAT16, "mps": FLOAT16, "cpu": BFLOAT16, "xpu": BFLOAT16, "hpu": BFLOAT16}
_LIGHTNING_HALF = {
    "16": FLOAT16,
    "16-mixed": FLOAT16,
    "16-true": FLOAT16,
    "bf16": BFLOAT16,
    "bf16-mixed": BFLOAT16,
    "bf16-true": BFLOAT16,
}


def settings_in(text: bytes | str) -> Iterator[tuple[int, str, frozenset[str]]]:
    """(line, what was seen, half dtypes it sets) for each setting in `text`, in line order (one per
    line and set of dtypes: `.to(dtype=torch.half)` is one cast, not two); in comments, docstrings
    and strings they do not count. The scan reads bytes (a file's, undecoded: every word it looks
    for is ASCII); text is encoded first."""
    for line, what, dtypes, _ in settings_with_kinds(text):
        yield line, what, dtypes


def settings_with_kinds(
    text: bytes | str, bound: Mapping[str, Partial] | None = None
) -> Iterator[tuple[int, str, frozenset[str], str]]:
    """`settings_in` with each setting's kind: `CAST`, or `AUTOCAST` and its device ("autocast:cpu").
    `bound`: the autocast partials (`partial_autocasts`) another file binds to names this one
    imports; the file's own are read from it."""
    code = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if not bound and not may_set_precision(code):
        return
    docstrings: list[tuple[int, int]] | None = None  # found once there is a match to check
    # The first (offset, what, kind) per line and dtypes.
    found: dict[tuple[int, frozenset[str]], tuple[int, str, str]] = {}
    own = partial_autocasts(code)
    own_lines = {partial.line_start for partial in own.values()}
    for start, what, dtypes, kind in _settings(code, {**own, **(bound or {})}):
        line_start = code.rfind(b"\n", 0, start) + 1
        # A partial's `dtype=` is the autocast's, read where the partial is called.
        if (line_start, dtypes) in found or _in_def(code, line_start) or line_start in own_lines:
            continue
        if docstrings is None:
            docstrings = string_spans(code)
        if is_code(code, start, line_start, docstrings):
            found[line_start, dtypes] = (start, what, kind)
    for (_, dtypes), (start, what, kind) in sorted(found.items(), key=lambda item: item[1][0]):
        yield code.count(b"\n", 0, start) + 1, what, dtypes, kind


def _in_def(code: bytes, line_start: int) -> bool:
    """A default in a `def` line declares a parameter, it sets nothing."""
    line = code[line_start : line_start + 200].lstrip()
    return line.startswith((b"def ", b"async def "))


def _text(code: bytes) -> str:
    """A piece of the scanned bytes as text, for a report (the file's encoding is not known here)."""
    return code.decode("utf-8", "replace")


def _snippet(code: bytes, start: int, end: int) -> str:
    text = " ".join(_text(code[start:end]).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _settings(code: bytes, partials: Mapping[str, Partial]) -> Iterator[tuple[int, str, frozenset[str], str]]:
    """(offset, what, dtypes, kind) for each match of each kind of setting, kind by kind. The kind
    says how the code runs there: `AUTOCAST` on a device ("autocast:cuda"), or `CAST` (the tensors and
    weights themselves are half)."""
    yield from _autocasts(code, partials)
    for match in _DEFAULT_DTYPE.finditer(code):
        what = _snippet(code, match.start(), match.end()) + ")"
        yield match.start(), what, _dtypes(match["dtype"]), CAST_LOAD
    for match in _CAST_METHOD.finditer(code):
        what = _qualified(code, match.start()) + _text(match.group())
        yield match.start(), what, _dtypes(match["dtype"]), _cast_kind(code, match.start())
    for match in _TO.finditer(code):
        cast = _TO_DTYPE.search(match["args"])
        if cast is not None:
            what = _qualified(code, match.start()) + _snippet(code, match.start(), match.end())
            yield match.start(), what, _dtypes(cast["dtype"]), _cast_kind(code, match.start())
            continue
        # A model cast to a dtype a variable holds (`model.to(device, dtype=resolved_dtype)`): the
        # half dtypes its assignments in this file name. Most `.to(...)` calls take a device alone.
        named = _DTYPE_NAME_ARG.search(match["args"])
        if named is None or _cast_kind(code, match.start()) != CAST:
            continue
        assigned = _assigned_dtypes(code, named["value"] or named["positional"])
        if assigned is not None and assigned[0]:
            what = _qualified(code, match.start()) + _snippet(code, match.start(), match.end())
            yield match.start(), f"{what} ({assigned[1]})", assigned[0], CAST
    for match in _DTYPE_ARG.finditer(code):
        start = match.start() - (6 if code.endswith(b"torch_", 0, match.start()) else 0)
        if _keyword(code, start):
            dtypes, end = _dtypes(match["dtype"] or match["name"]), match.end()
            rest = code[end : _line_end(code, end)]
            if b" else " in rest:  # `dtype=torch.bfloat16 if bf16 else torch.float16`
                for other in _ANY_TORCH_HALF.finditer(rest):
                    dtypes, end = dtypes | _dtypes(other[1]), match.end() + other.end()
            # `torch_dtype=` loads a model; `dtype=` makes a tensor, unless a model loader takes it.
            line = code[code.rfind(b"\n", 0, start) + 1 : start]
            module = code.startswith(b"torch_", start) or _LOADER.search(line) is not None
            yield start, _snippet(code, start, end), dtypes, CAST_LOAD if module else CAST_TENSOR
    for match in _GRAD_SCALER.finditer(code):
        if not _defines(code, match.start()) and not DISABLED.search(_arguments(code, match.end())):
            what = _qualified(code, match.start()) + SCALER
            yield match.start(), what, frozenset({FLOAT16}), AUTOCAST_CUDA
    for match in _LIGHTNING.finditer(code):
        value = _text(match["name"] or match["int"])
        line_start = code.rfind(b"\n", 0, match.start()) + 1
        if (
            _keyword(code, match.start())
            and value in _LIGHTNING_HALF
            and b"printoptions" not in code[line_start : match.start()]  # print precision, in digits
        ):
            # "bf16-true" casts the model; "bf16-mixed" (and the bare "bf16", "16") is autocast.
            kind = CAST if value.endswith("-true") else AUTOCAST_CUDA
            yield match.start(), _text(match.group()), frozenset({_LIGHTNING_HALF[value]}), kind
    for match in _ACCELERATE.finditer(code):
        if _keyword(code, match.start()):
            yield match.start(), _text(match.group()), _dtypes(match["name"]), AUTOCAST_CUDA
    for flag in _HF_FLAGS:
        for match in flag.finditer(code):
            if _keyword(code, match.start()):
                yield match.start(), _text(match.group()), _dtypes(match["name"]), AUTOCAST_CUDA


# What a cast is called on decides what it casts: a model (its weights, hence how its code runs) or
# a tensor (that value alone, which the engine follows where it is used). A model is built there
# (`GPT().half()`), is `self` in a module, or is named as one (`model`, `self.unet`, `text_encoder`),
# unless the name ends in a word for a value the module made (`encoder_kv`, `model_out`).
_CONSTRUCTED = re.compile(rb"\b[A-Z]\w*\((?:[^()]|\([^()]*\))*\)\Z")
# Capitalised, yet a tensor: `torch.Tensor([...]).half()`, `nn.Parameter(w).half()`.
_TENSOR_CONSTRUCTOR = re.compile(rb"(?:\w*Tensor|Parameter|Buffer)\(")
_MODULE_NAME = re.compile(
    rb"(?:\A|[._])(?:self|model|models|net|network|module|encoder|decoder|transformer|backbone|unet|vae|"
    rb"pipe|pipeline|policy|actor|critic|generator|discriminator|tower|lm|llm|classifier|denoiser|"
    rb"teacher|student|ema|engine|wrapper)"
    rb"(?:\Z|_(?!(?:\w+_)?(?:kv|out|outputs?|hidden|states?|feats?|features?|embeds?|embeddings?|logits|"
    rb"inputs?|mask|rep|repr|tokens|ids|scores|x|h)\Z))",
    re.IGNORECASE,
)
_LOADER = re.compile(rb"from_pretrained|from_config|load_model|from_single_file")


def _cast_kind(code: bytes, start: int) -> str:
    """`CAST` for a cast of a model at `start` (the `.` of `.half()` or `.to(...)`), `CAST_TENSOR`
    for a cast of a tensor."""
    before = code[max(start - 200, 0) : start]
    constructed = _CONSTRUCTED.search(before)
    if constructed is not None:
        return CAST_TENSOR if _TENSOR_CONSTRUCTOR.match(constructed.group()) else CAST
    receiver = _QUALIFIER.search(before)
    name = receiver.group().lower() if receiver is not None else b""
    return CAST if name and _MODULE_NAME.search(name) is not None else CAST_TENSOR


_DTYPE_NAMED = re.compile(rb"torch\.(float16|bfloat16|half|float32|float)\b")
# The variable a cast takes its dtype from: by keyword (`dtype=resolved_dtype`), or in place by a name
# that says it is one (`.to(self.device, self.dtype)`, `.to(weight_dtype)`), as torch's `to` takes it.
_DTYPE_NAME_ARG = re.compile(
    rb"\bdtype[ \t]*=[ \t]*(?P<value>[A-Za-z_][\w.]*)"
    rb"|(?:\A|,)[ \t]*(?P<positional>(?:[A-Za-z_]\w*\.)*(?:\w+_)?dtype)[ \t]*(?:,|\Z)"
)
TOP_LINE = re.compile(rb"^(?=[^\s#)\]}])", re.MULTILINE)  # a line that starts at column 0 with code
_HELPER_CALL = re.compile(rb"[ \t]*(?P<name>[A-Za-z_]\w*)[ \t]*\(")


def _assigned_dtypes(code: bytes, name: bytes) -> tuple[frozenset[str], str] | None:
    """The half dtypes a variable an autocast's `dtype=` names is assigned in this file, and where
    (`self.amp_dtype = torch.bfloat16 if amp else torch.float32`: bfloat16 only); None when one of its
    assignments names no dtype (`dtype = cfg.dtype`) or the file assigns it nowhere."""
    pattern = re.compile(
        rb"^[ \t]*" + re.escape(name) + rb"[ \t]*(?::[^=\n]+)?=(?!=)[ \t]*(?P<value>[^\n]+)", re.M
    )
    half: set[str] = set()
    lines = []
    for match in pattern.finditer(code):
        value = _statement(code, match)
        line = str(code.count(b"\n", 0, match.start()) + 1)
        helper = _HELPER_CALL.match(value)
        if helper is not None:  # `dtype = _resolve_dtype(dtype, device)`: what the helper returns
            value = _returned(code, helper["name"])
            line += f" by `{_text(helper['name'])}`"
        named = [_text(found[1]) for found in _DTYPE_NAMED.finditer(value)]
        if not named:
            return None
        half |= {_HALF_NAME[dtype] for dtype in named if dtype in _HALF_NAME}
        lines.append(line)
    if not lines:
        return None
    return frozenset(half), f"`{_text(name)}` assigned on line {', '.join(lines)}"


def _returned(code: bytes, function: bytes) -> bytes:
    """The `return` lines of a function this file defines at the top level (empty when it defines
    none): the dtypes a helper that resolves one may give."""
    definition = re.search(rb"^def[ \t]+" + re.escape(function) + rb"\b", code, re.MULTILINE)
    if definition is None:
        return b""
    end = TOP_LINE.search(code, _line_end(code, definition.end()) + 1)
    body = code[definition.end() : end.start() if end is not None else len(code)]
    return b"\n".join(re.findall(rb"^[ \t]+return\b[^\n]*", body, re.MULTILINE))


def _statement(code: bytes, match: re.Match[bytes]) -> bytes:
    """The assigned value a match's first line starts, with the lines that continue it while a
    bracket stays open (`self.amp_dtype = (torch.bfloat16 if bf16 \n else torch.float16)`)."""
    value, end = match["value"], match.end()
    while value.count(b"(") + value.count(b"[") > value.count(b")") + value.count(b"]") and end < len(code):
        following = _line_end(code, end + 1)
        value, end = value + code[end:following], following
    return value


def _line_end(code: bytes, start: int) -> int:
    end = code.find(b"\n", start)
    return len(code) if end < 0 else end


def _dtypes(name: bytes) -> frozenset[str]:
    return frozenset({_HALF_NAME[_text(name)]})


def _keyword(code: bytes, start: int) -> bool:
    """Whether the match at `start` begins a name of its own (a keyword argument or a variable), not
    the tail of another name or an attribute (`self.precision`, `mixed_precision`)."""
    return start == 0 or not (code[start - 1 : start].isalnum() or code[start - 1] in b"_.")


def _qualified(code: bytes, start: int) -> str:
    """The dotted prefix written before a name (`torch.cuda.amp.` before `autocast`)."""
    match = _QUALIFIER.search(code, max(start - 60, 0), start)
    return _text(match.group()) if match is not None else ""


def _defines(code: bytes, start: int) -> bool:
    line = code[code.rfind(b"\n", 0, start) + 1 : start].lstrip()
    return line.startswith((b"def ", b"async def ", b"class "))


def _arguments(code: bytes, start: int) -> bytes:
    """The bytes from just after an opening parenthesis to its closing one (at most 400)."""
    depth = 1
    end = min(len(code), start + 400)
    for index in range(start, end):
        char = code[index]
        if char in b"([{":
            depth += 1
        elif char in b")]}":
            depth -= 1
            if depth == 0:
                return code[start:index]
    return code[start:end]


@dataclass(frozen=True)
class Partial:
    """`name = partial(torch.amp.autocast, device_type="cuda")`: the autocast it binds, as written
    (`torch.amp.autocast`, or the name torch's was imported as), and the arguments it fixes."""

    func: str
    arguments: bytes
    line_start: int  # where the line that binds it starts, in its own file


_PARTIAL = re.compile(
    rb"^[ \t]*(?P<name>\w+)[ \t]*=[ \t]*(?:functools\.)?partial[ \t]*\([ \t]*(?P<func>[\w.]+)[ \t]*(?P<end>[,)])",
    re.MULTILINE,
)


def partial_autocasts(code: bytes) -> dict[str, Partial]:
    """The names a file binds to a `functools.partial` of torch's autocast (tabpfn's `autocast =
    partial(_amp_autocast, device_type="cuda")` after `from torch.amp import autocast as
    _amp_autocast`): a call of such a name is that autocast with the partial's arguments first."""
    if b"partial" not in code or b"autocast" not in code:
        return {}
    found: dict[str, Partial] = {}
    for match in _PARTIAL.finditer(code):
        func = match["func"]
        *modules, last = func.split(b".")
        torch_autocast = (
            all(module.decode() in _AUTOCAST_MODULES for module in modules)
            if modules
            else last == b"autocast"
            or re.search(rb"\bautocast[ \t]+as[ \t]+" + last + rb"\b", code) is not None
        )
        if b"autocast" in last and torch_autocast:
            arguments = _arguments(code, match.end()) if match["end"] == b"," else b""
            line_start = code.rfind(b"\n", 0, match.start()) + 1
            found[match["name"].decode()] = Partial(_text(func), arguments, line_start)
    return found


def _calls(code: bytes, partials: Mapping[str, Partial]) -> Iterator[tuple[int, int, Partial | None]]:
    """(start, end of the opening parenthesis, the partial called) for each call of an autocast
    (the partial None) or of a name bound to a partial of one, in order."""
    names = [re.escape(name.encode()) for name in partials]
    calls: list[tuple[int, int, Partial | None]] = [
        (m.start(), m.end(), None) for m in _AUTOCAST.finditer(code)
    ]
    if names:
        bound = re.compile(rb"(?<![\w.])(?:" + b"|".join(names) + rb")[ \t]*\(")
        for match in bound.finditer(code):
            name = match.group().rstrip(b"( \t").decode()
            calls = [call for call in calls if call[0] != match.start()]
            calls.append((match.start(), match.end(), partials[name]))
    return iter(sorted(calls, key=lambda call: call[0]))


def _autocasts(
    code: bytes, partials: Mapping[str, Partial]
) -> Iterator[tuple[int, str, frozenset[str], str]]:
    """torch's autocast calls (and those of a partial of one, with its arguments first), with the
    dtype they give or their device's default. A dtype or device that only a variable holds could be
    either dtype; `enabled=False` sets none (it turns autocast off for a region)."""
    for start, end, partial in _calls(code, partials):
        qualifier = _qualified(code, start)
        if partial is not None:
            qualifier = partial.func.rpartition(".")[0] + "." if "." in partial.func else ""
        modules = qualifier.rstrip(".").split(".") if qualifier else []
        if not all(module in _AUTOCAST_MODULES for module in modules) or _defines(code, start):
            continue  # `accelerator.autocast()`, `maybe_autocast(`, `def autocast(`
        arguments = _arguments(code, end)
        call = f"{qualifier}autocast({' '.join(_text(arguments).split())})"
        if partial is not None:
            name = _text(code[start:end]).rstrip("( \t")
            fixed = " ".join(_text(partial.arguments).split())
            call = f"{name}({' '.join(_text(arguments).split())}), a partial({partial.func}, {fixed})"
            arguments = partial.arguments + (b", " + arguments if arguments.strip() else b"")
        if DISABLED.search(arguments):
            continue
        if len(call) > 80:
            call = call[:76] + "...)"
        given = _AUTOCAST_DTYPE.search(arguments)
        device = _DEVICE.search(arguments.lstrip())
        if device is not None:
            kind = _text(device["device"])
        elif "cuda" in modules or "cpu" in modules:
            kind = "cuda" if "cuda" in modules else "cpu"
        elif b"cuda.amp import" in code:
            kind = "cuda"  # `from torch.cuda.amp import autocast`, then `autocast()`
        elif b"cpu.amp import" in code:
            kind = "cpu"
        else:
            kind = ""
        # A device only a variable names is taken as CUDA's: the policy amplint checks against.
        mode = f"{AUTOCAST}:{kind if kind in _DEVICE_DEFAULT else 'cuda'}"
        if given is not None and given["value"] != b"None":
            name = _text(given["value"]).removeprefix("torch.")
            if name in _HALF_NAME:
                yield start, call, _dtypes(name.encode()), mode
            elif "float32" not in name and name != "float":
                assigned = _assigned_dtypes(code, given["value"])
                if assigned is None:
                    yield start, f"{call} (dtype not known statically)", BOTH, mode
                elif assigned[0]:
                    yield start, f"{call} ({assigned[1]})", assigned[0], mode
            continue
        if not kind:
            yield start, f"{call} (device not known statically)", BOTH, mode
            continue
        default = _DEVICE_DEFAULT.get(kind)
        if default is not None:
            yield start, f"{call} ({default} by default)", frozenset({default}), mode
