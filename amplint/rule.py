"""What a rule is: its identity, its docs, its examples, its libcst check, and what it reads in a
traced dtype graph (confirming a static finding, or finding what only the graph shows)."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, ClassVar

from amplint.diagnostics import SAFE, UNSAFE, Confidence, Diagnostic, Severity

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    import libcst as cst

    from amplint.runtime.graph import DtypeGraph, DtypeNode
    from amplint.static.context import FileContext, Finding, FixPlan


@dataclass(frozen=True)
class Verdict:
    """What a trace says of a static finding: `confirmed` or `refuted`, and the evidence, in words."""

    confidence: Confidence
    evidence: str
    extra: Mapping[str, object] = field(default_factory=dict)  # e.g. `measured`, for JSON and SARIF


@dataclass(frozen=True)
class GraphFinding:
    """A finding of a runtime-only rule: the node it points at (its source line is the location)."""

    node: DtypeNode
    message: str
    evidence: str
    help: str | None = None
    extra: Mapping[str, object] = field(default_factory=dict)
    # The fix: upcast the low-precision input of the first of these ops the source still shows.
    upcast: tuple[CastPoint, ...] = ()


@dataclass(frozen=True)
class CastPoint:
    """Where a fix can upcast: the input of `op` at `path:line` (at `column`, 1-based, when the trace
    has it). `operand` is where that input was computed, `(line, column)`: it tells the two operands
    of a binary op apart."""

    op: str
    path: str
    line: int
    column: int | None = None
    operand: tuple[int, int | None] | None = None


@dataclass(frozen=True)
class Expected:
    """A finding a bad example must get: its range (1-based, end exclusive) and its message."""

    line: int
    column: int
    end_line: int
    end_column: int
    message: str


@dataclass(frozen=True)
class Bad:
    """An example the rule must flag; `fixed` is what `--fix` must turn it into (None: no fix);
    `expect`, the findings it gets, each pinned (empty for runtime rules, whose tests trace them)."""

    code: str
    fixed: str | None = None
    expect: tuple[Expected, ...] = ()
    # Python run after the code (and after the fixed code) that sets `out`: the example executes
    # in bfloat16, float16 and float32 under tests/rules/test_example_numerics.py.
    run: str | None = None


@dataclass(frozen=True)
class Good:
    """An example the rule must not flag, often a false positive found in real code."""

    code: str
    why: str = ""
    run: str | None = None


class _Examples:
    """`Rule.bad` and `Rule.good`, read from the rule's data file `amplint/rules/examples/CODE.toml`
    the first time they are asked for (checking files never needs them)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __get__(self, instance: object, owner: type[Rule]) -> tuple[Bad, ...] | tuple[Good, ...]:
        return _examples(owner.code)[self.kind]


@cache
def _examples(code: str) -> dict[str, tuple[Bad, ...] | tuple[Good, ...]]:
    data = tomllib.loads((resources.files("amplint.rules") / "examples" / f"{code}.toml").read_text("utf-8"))
    bad = tuple(
        Bad(
            item["code"],
            item.get("fixed"),
            tuple(_expected(expect["range"], expect["message"]) for expect in item.get("expect", ())),
            item.get("run"),
        )
        for item in data.get("bad", ())
    )
    good = tuple(Good(item["code"], item.get("why", ""), item.get("run")) for item in data.get("good", ()))
    return {"bad": bad, "good": good}


def _expected(where: str, message: str) -> Expected:
    start, end = where.split("-")
    line, column = start.split(":")
    end_line, end_column = end.split(":")
    return Expected(int(line), int(column), int(end_line), int(end_column), message)


class Rule:
    """Base class. A rule's docstring holds its docs as Markdown sections:
    `## What it does`, `## Why is this bad?`, `## Example`, `## Fix`, `## References`.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    summary: ClassVar[str]
    severity: ClassVar[Severity] = Severity.WARNING
    # The rule can only match a file whose text contains one of these words, so files
    # without any of them are never parsed for it.
    triggers: ClassVar[frozenset[str]] = frozenset()
    # And, where set, only a file whose text this matches (a site's constant has no word of its own).
    trigger_pattern: ClassVar[re.Pattern[str] | None] = None
    # And a word of each of these groups as well (`backward` with a float16 setting and an optimizer
    # step in the same file): checked before the file is parsed, not in `check`.
    also_triggers: ClassVar[tuple[frozenset[str], ...]] = ()
    # A function body with none of these words (and no match of `region_pattern`, for sites that
    # have no word of their own, such as `-65504`) holds no site of the rule, so the parser may skip
    # it (see `amplint.static.regions`). None: the rule reads every body of a file it is active on.
    region_words: ClassVar[frozenset[str] | None] = None
    region_pattern: ClassVar[re.Pattern[str] | None] = None
    # Its examples: data in `amplint/rules/examples/CODE.toml`, run by one generic test.
    bad: ClassVar[tuple[Bad, ...]] = _Examples("bad")  # type: ignore[assignment]
    good: ClassVar[tuple[Good, ...]] = _Examples("good")  # type: ignore[assignment]

    # False for a rule whose findings on real code were too often not worth acting on: it runs only
    # where `select` or `extend-select` names its code (docs/precision.md has the measurement).
    default_on: ClassVar[bool] = True
    # An opt-in rule that is on by default all the same where the project runs only in one of these
    # half dtypes (`precision` configured, or detected): its hazard is one of that dtype alone.
    default_on_in: ClassVar[frozenset[str]] = frozenset()
    # How far its fixes can be trusted (`amplint.diagnostics.SAFE`, `UNSAFE`, `DISPLAY_ONLY`): a fix
    # that changes the dtype a consumer sees is unsafe until the consumers are proven fine.
    fix_applicability: ClassVar[str] = SAFE
    # A rule that only a traced graph can check (AMP1xx): the static pass leaves it out.
    runtime_only: ClassVar[bool] = False
    # A hazard that costs accuracy over a training run (a missing GradScaler, optimizer state or
    # gradient reductions in half): in a test, which runs a step or two, its findings are conditional.
    training_run: ClassVar[bool] = False
    # Every finding is of a value held in half precision, conditional where only the caller holds it
    # so (`Finding.caller_only` is the value's `Fact.caller`). In a file where only a caller can make
    # a value half (`half_only_by_caller`) all its findings are conditional: a run that hides those
    # does not run it there.
    rests_on_half: ClassVar[bool] = False

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        raise NotImplementedError

    @classmethod
    def confirm(cls, diagnostic: Diagnostic, nodes: Sequence[DtypeNode], graph: DtypeGraph) -> Verdict | None:
        """What the traced ops at a finding's lines say about it; None when they cannot tell.
        Rules whose hazard is not a dtype of the forward pass (an API, a training loop) keep the
        default, and their findings stay `static`."""
        return None

    @classmethod
    def confirmable(cls) -> bool:
        return cls.confirm.__func__ is not Rule.confirm.__func__  # type: ignore[attr-defined]

    @classmethod
    def check_graph(cls, graph: DtypeGraph) -> Iterator[GraphFinding]:
        """The findings of a runtime-only rule on one traced graph."""
        return iter(())

    @classmethod
    def docs(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def fixable(cls) -> bool:
        return any(example.fixed is not None for example in cls.bad)


class RuntimeRule(Rule):
    """A rule that only a traced dtype graph can check (AMP1xx): it has no libcst check, and its
    bad and good examples are models (with a `factory()`) that the tests trace."""

    runtime_only = True
    # Its findings compare a trace with `amplint.lock` (`amplint lock --check`), not one graph: its
    # examples define `locked()`, the model the lock records, beside `factory()`.
    compares_lock: ClassVar[bool] = False
    # How the tests trace the examples, beyond CUDA autocast in bfloat16 (e.g. `dtype`, `values`).
    example_trace: ClassVar[Mapping[str, object]] = {}

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        return iter(())


def dtype_keeping_fix(
    ctx: FileContext,
    upcast: cst.BaseExpression,
    fixed: cst.BaseExpression,
    data: cst.BaseExpression,
    description: str,
    missing_import: bool,
    *,
    accumulates: bool = False,
    autocast_op: str | None = None,
    source: cst.Attribute | None = None,
) -> FixPlan | None:
    """The fix that puts `fixed` (which computes in float32) in place of `upcast`: safe where what
    derives from it is cast back to the dtype of `data` wherever it leaves elementwise code, so
    that every consumer sees the dtype it saw before. Otherwise unsafe: for an op that
    `accumulates` (a running sum keeps its float32 total inside the op, so rounding its result
    once still gains), cast back to the dtype of `data` at once where that dtype can be read;
    else cast back wherever it leaves elementwise code even where it was mixed with another tensor
    on the way (`consumers.cast_back` with `mixed`); else with no cast back where it never leaves
    the function, and no fix at all where the float32 value would meet a module or a product in
    its function (`consumers.half_weight_consumer`: with half weights that raises) or leaves it
    uncast (returned into callers the file does not show). `autocast_op`: the op, where an autocast runs it in float32 itself; the
    cast back is then to the dtype that op gives there (`amplint.static.consumers.op_dtype`), so that
    under CUDA autocast the fix does not round autocast's float32 result to half. `source`: the
    dtype of the input where the fix binds it to a name (`consumers.bind_input`)."""
    from amplint.static.consumers import (  # libcst: checking files only
        cast_back,
        dtype_source,
        half_weight_consumer,
        leaves_function,
        op_dtype,
    )
    from amplint.static.context import FixPlan
    from amplint.static.patterns import with_method

    # Under CUDA autocast an op it runs in float32 returned float32 before the fix: cast back to that.
    to = "the input's dtype" if autocast_op is None else f"the dtype `{autocast_op}` gives there"
    back = cast_back(ctx, upcast, fixed, data, autocast_op, source=source)
    if back is not None:
        where = "where the result leaves elementwise code"
        where += "" if autocast_op is None else f", to {to}"
        return FixPlan(f"{description}, cast back {where}", back, missing_import, SAFE)
    dtype = (source or dtype_source(ctx, upcast, data)) if accumulates else None
    if dtype is not None:
        dtype = dtype if autocast_op is None else op_dtype(dtype, autocast_op)
        edits = ((upcast, with_method(fixed, "to", dtype)),)
        return FixPlan(f"{description}, cast back to {to} at once", edits, missing_import, UNSAFE)
    if half_weight_consumer(ctx, upcast) is not None:
        return None  # unsafe changes the numbers, never raises: a half module or product would
    back = cast_back(ctx, upcast, fixed, data, autocast_op, mixed=True, source=source)
    if back is not None:
        where = f"where the result leaves elementwise code, to {to}"
        return FixPlan(f"{description}, cast back {where}", back, missing_import, UNSAFE)
    if leaves_function(ctx, upcast):
        return None  # a float32 value returned uncast reaches callers that never asked for it
    return FixPlan(description, ((upcast, fixed),), missing_import, UNSAFE)
