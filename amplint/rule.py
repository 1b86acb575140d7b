"""What a rule is: its identity, its docs, its examples, its libcst check, and what it reads in a
traced dtype graph (confirming a static finding, or finding what only the graph shows)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from amplint.diagnostics import Confidence, Diagnostic, Severity

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph, DtypeNode
    from amplint.static.context import FileContext, Finding


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
class Bad:
    """An example the rule must flag; `fixed` is what `--fix` must turn it into (None: no fix)."""

    code: str
    fixed: str | None = None


@dataclass(frozen=True)
class Good:
    """An example the rule must not flag, often a false positive found in real code."""

    code: str
    why: str = ""


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
    # A function body with none of these words (and no match of `region_pattern`, for sites that
    # have no word of their own, such as `-65504`) holds no site of the rule, so the parser may skip
    # it (see `amplint.static.regions`). None: the rule reads every body of a file it is active on.
    region_words: ClassVar[frozenset[str] | None] = None
    region_pattern: ClassVar[re.Pattern[str] | None] = None
    bad: ClassVar[tuple[Bad, ...]] = ()
    good: ClassVar[tuple[Good, ...]] = ()

    # A rule that only a traced graph can check (AMP1xx): the static pass leaves it out.
    runtime_only: ClassVar[bool] = False

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
