"""What a rule is: its identity, its docs, its examples, and its libcst check."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from amplint.diagnostics import Severity

if TYPE_CHECKING:
    from amplint.context import FileContext, Finding


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
    # it (see `amplint.regions`). None: the rule reads every body of a file it is active on.
    region_words: ClassVar[frozenset[str] | None] = None
    region_pattern: ClassVar[re.Pattern[str] | None] = None
    bad: ClassVar[tuple[Bad, ...]] = ()
    good: ClassVar[tuple[Good, ...]] = ()

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        raise NotImplementedError

    @classmethod
    def docs(cls) -> str:
        return inspect.cleandoc(cls.__doc__ or "")

    @classmethod
    def fixable(cls) -> bool:
        return any(example.fixed is not None for example in cls.bad)
