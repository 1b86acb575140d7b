"""The values of the dtype-facts engine (`amplint.static.dtypes`): a `Fact` (the dtypes an
expression can have and the steps that gave them), how facts join and promote, and an autocast
state. Rules read these; the engine builds them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

import libcst as cst

from amplint.static import ops
from amplint.static.ops import BF16, F16, F32, F64, HALF
from amplint.static.profile import ModeWhy, Profile

# What kind of value an expression holds.
TENSOR, DTYPE, SCALAR, INTEGER, MODULE, OTHER, UNKNOWN = (
    "tensor",
    "dtype",
    "scalar",
    "integer",
    "module",
    "other",
    "unknown",
)
# How a finding says that its half dtype is only the caller's choice (`Fact.caller`); the finding
# marks it with `caller_only` too (`amplint.static.context.Finding`).
CALLER_CLAUSE = "this holds when the caller runs it in"
SHORT_NAMES = {F64: "float64", F32: "float32", BF16: "bf16", F16: "fp16"}


@dataclass(frozen=True)
class Step:
    """One piece of evidence: what happened at `node`."""

    node: cst.CSTNode
    text: str
    # The half dtypes that only this step's autocast mode gives (`linear` run in bf16 under bf16
    # autocast); empty where the step holds whatever the dtype.
    dtypes: frozenset[str] = frozenset()
    # The execution modes the step names rest on the project's tests, benchmarks or examples alone
    # (`Profile.only_in`): how a test runs the code, not how the project does.
    side: bool = False


@dataclass(frozen=True)
class Fact:
    """What an expression can hold. For a tensor (or a dtype object), `dtypes` are the floating
    dtypes it can have; empty when nothing is known. `caller` marks half dtypes that come only from
    the caller's choice (a parameter, a model's weights), not from this code. `number` is the value
    of a Python number when it is known; `items` the facts of a tuple's elements."""

    kind: str
    dtypes: frozenset[str] = frozenset()
    why: tuple[Step, ...] = ()
    caller: bool = False
    number: float | None = None
    items: tuple[Fact, ...] | None = None
    module: str | None = None  # the constructor of a submodule (`Linear`)
    # An autocast context object (`ctx = torch.autocast(...)`): the states inside `with ctx:`.
    context: frozenset[Autocast] | None = None
    # Made on the CPU here (a factory without `device=`, and what only such tensors make), where
    # CUDA autocast does not reach: a sin-cos position grid built before `.to(device)`.
    host: bool = False

    @property
    def may_be_half(self) -> bool:
        return self.kind == TENSOR and bool(self.dtypes & HALF)

    @property
    def may_be_fp16(self) -> bool:
        return self.kind == TENSOR and F16 in self.dtypes

    @property
    def is_wide(self) -> bool:
        """Known to be float32 or float64 whatever the caller does."""
        return bool(self.dtypes) and not self.dtypes & HALF

    def half_names(self) -> str:
        return "/".join(SHORT_NAMES[d] for d in (BF16, F16) if d in self.dtypes)

    def names(self) -> str:
        """`float32/bf16`: the dtypes it can have, or `unknown`."""
        return "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in self.dtypes) or "unknown"

    def for_dtype(self, dtype: str) -> Fact:
        """The same fact with the evidence of `dtype` only: a float16 hazard cites the float16
        mode's steps, not those of a bf16 autocast that the same value also runs under."""
        why = tuple(step for step in self.why if not step.dtypes or dtype in step.dtypes)
        return replace(self, why=why) if why else self

    def explain(self) -> str:
        """`bf16/fp16 here: ...` in one line, the evidence in source order."""
        steps = steps_text(self.why)
        return f"{self.names()} here" + (f": {steps}" if steps else "")


UNKNOWN_FACT = Fact(UNKNOWN)
SCALAR_FACT = Fact(SCALAR)
INTEGER_FACT = Fact(INTEGER)
OTHER_FACT = Fact(OTHER)
MAX_WHY = 4


def steps_text(why: Iterable[Step]) -> str:
    """The evidence steps for a message, each said once (two operands returned by the same helper
    give the same step)."""
    return "; ".join(dict.fromkeys(step.text for step in why))


def modes_text(profile: Profile, modes: tuple[ModeWhy, ...]) -> str:
    """`cast-bf16: `.half()` at gen.py:6 -> GPT`: execution modes as evidence, the best two."""
    shown = "; ".join(why.describe() for why in modes[:2])
    more = len(modes) - 2
    only = profile.only_in(modes)
    return (
        shown + (f" (+{more} more)" if more > 0 else "") + (f"; in the project's {only} only" if only else "")
    )


def on_host(facts: Iterable[Fact]) -> bool:
    """Whether every tensor among `facts` is one made on the CPU here (`Fact.host`), and one is."""
    tensors = [fact for fact in facts if fact.kind in (TENSOR, INTEGER, UNKNOWN)]
    return bool(tensors) and all(fact.host for fact in tensors)


def join(facts: Iterable[Fact]) -> Fact:
    """What a value holds when it may come from any of `facts` (branches, call sites)."""
    facts = list(facts)
    if any(fact.context is not None for fact in facts):
        # An autocast context on some paths (`autocast(...) if amp else nullcontext()`): entering
        # what the others hold leaves the autocast state as it was.
        states = (fact.context if fact.context is not None else {KEEP} for fact in facts)
        return Fact(OTHER, context=frozenset().union(*states))
    facts = [fact for fact in facts if fact.kind != UNKNOWN] or facts
    if not facts:
        return UNKNOWN_FACT
    first = facts[0]
    if len(facts) == 1 or all(fact == first for fact in facts):
        return first  # the same in every branch: `__class__` keeps its `module`
    kinds = {fact.kind for fact in facts}
    kind = first.kind if len(kinds) == 1 else TENSOR if TENSOR in kinds else UNKNOWN
    numbers = {fact.number for fact in facts}
    why: list[Step] = []
    for fact in facts:
        why.extend(step for step in fact.why if step.text not in {w.text for w in why})
    return Fact(
        kind,
        frozenset().union(*(fact.dtypes for fact in facts)),
        tuple(why[-MAX_WHY:]),
        all(fact.caller for fact in facts if fact.dtypes & HALF) and any(f.caller for f in facts),
        numbers.pop() if len(numbers) == 1 else None,
    )


def promote(facts: Iterable[Fact]) -> Fact:
    """PyTorch's type promotion of tensor operands: the widest floating dtype wins; Python numbers
    and integer tensors do not change a floating result."""
    tensors = [fact for fact in facts if fact.kind in (TENSOR, UNKNOWN)]
    known = [fact for fact in tensors if fact.kind == TENSOR and fact.dtypes]
    if not known:
        return tensors[0] if tensors else SCALAR_FACT
    if len(known) == 1:
        return known[0]
    # What some combination of the operands' possible dtypes promotes to, without enumerating the
    # combinations (exponential in the number of operands): float64 if any operand may be float64;
    # float32 if every operand may be at most float32 and one may be float32, or if all may be half
    # and two different operands may be bf16 and fp16; a half dtype if every operand may be it.
    sets = [fact.dtypes for fact in known]
    result: set[str] = {F64} if any(F64 in d for d in sets) else set()
    if all(d - {F64} for d in sets) and any(F32 in d for d in sets):
        result.add(F32)
    result.update(half for half in HALF if all(half in d for d in sets))
    bf16 = {i for i, d in enumerate(sets) if BF16 in d}
    fp16 = {i for i, d in enumerate(sets) if F16 in d}
    if all(d & HALF for d in sets) and bf16 and fp16 and len(bf16 | fp16) > 1:
        result.add(F32)
    why: list[Step] = []
    for fact in known:
        why.extend(step for step in fact.why if step not in why)
    caller = any(fact.caller for fact in known) and not any(
        fact.dtypes & HALF and not fact.caller for fact in known
    )
    return Fact(TENSOR, frozenset(result), tuple(why[-MAX_WHY:]), caller)


def agree(facts: Iterable[Fact], node: cst.CSTNode, op: str) -> Fact:
    """The operands of an op that raises on mixed dtypes (`matmul`, `linear`, `conv2d`): the code
    runs only where they share a dtype, so each holds only the dtypes the others may hold too
    (`k @ state` with `k` float32 and `state` float32 or the caller's: float32)."""
    facts = list(facts)
    known = [fact for fact in facts if fact.kind == TENSOR and fact.dtypes]
    common = frozenset.intersection(*(fact.dtypes for fact in known)) if len(known) > 1 else frozenset()
    promoted = promote(facts)
    if not common or common == promoted.dtypes:
        return promoted
    why = next((fact.why for fact in known if fact.dtypes == common), promoted.why)
    names = "/".join(SHORT_NAMES[d] for d in ops.FLOATS if d in common)
    step = Step(node, f"`{op}` raises on mixed dtypes, so its operands are {names} where it runs")
    caller = all(fact.caller for fact in known if fact.dtypes & common & HALF) and bool(common & HALF)
    return Fact(TENSOR, common, (*why[-(MAX_WHY - 1) :], step), caller)


@dataclass(frozen=True)
class Autocast:
    """One autocast state code can run under: `device` None means autocast is off."""

    device: str | None
    dtype: str | None = None
    where: cst.CSTNode | None = None
    # The execution mode (from elsewhere in the project) that enables it, where no region here does.
    mode: ModeWhy | None = None


OFF = Autocast(None)
# In a joined autocast context: the paths that enter another context manager, which keeps the state.
KEEP = Autocast(None, "unchanged")


@dataclass(frozen=True)
class Float16:
    """How code makes a model run in float16 (`DtypeFacts.float16_setting`): `spelled` for a
    message (`.half()`, `torch_dtype=dtype`, `torch.autocast("cuda")`); `autocast` for an autocast
    region rather than the weights; `surely` where float16 is what runs on a CUDA GPU, not one of
    the dtypes that a choice made at run time picks from (`torch.float16 if fp16 else
    torch.float32`, `autocast(enabled=amp)`); `why` the evidence; `node` the call or value that sets
    it."""

    node: cst.CSTNode
    spelled: str
    autocast: bool
    surely: bool
    why: tuple[Step, ...]


def why_half(fact: Fact, names: str | None = None) -> str:
    """Why a value is half there, for a message: the engine's evidence (of float16 alone where
    `names` is "fp16"), and whose choice it is."""
    if names == SHORT_NAMES[F16]:
        fact = fact.for_dtype(F16)
    if fact.caller:
        steps = steps_text(fact.why)
        return f"{CALLER_CLAUSE} {names or fact.half_names()}: {steps}"
    return fact.explain()


def shorten(code: str, limit: int = 60) -> str:
    """Code on one line for a message, cut to `limit` characters."""
    code = " ".join(code.split())
    return code if len(code) <= limit else code[: limit - 3] + "..."
