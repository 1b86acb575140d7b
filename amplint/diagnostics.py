"""The one data model for every finding, static or runtime."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

# The `extra` keys that place a finding in a Jupyter notebook (set by amplint/pipeline/notebook.py): the cell,
# numbered as ruff does (1-based, counting every cell of the notebook, markdown cells included), with
# `line` and `column` then counting inside that cell; and the line of the .ipynb file itself that holds
# the finding's first line, for the formats that can only point at lines of the file.
CELL = "cell"
IPYNB_LINE = "ipynb_line"


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Confidence(str, Enum):
    """How sure amplint is. The static pass only knows `static`; the runtime pass refines it."""

    STATIC = "static"
    # The half precision it needs rests on nothing in the project: only the caller's choice (a
    # library that never runs its code in bf16/fp16 itself). Hidden unless asked for.
    CONDITIONAL = "conditional"
    CONFIRMED = "confirmed"
    REFUTED = "refuted"
    UNREACHED = "unreached"


@dataclass(frozen=True, order=True)
class Edit:
    """Replace the text between two positions (1-based lines and columns, end exclusive)."""

    line: int
    column: int
    end_line: int
    end_column: int
    content: str


@dataclass(frozen=True, order=True)
class CellEdit(Edit):
    """An edit in a Jupyter notebook: its lines count within code cell `cell` (see `CELL`)."""

    cell: int


@dataclass(frozen=True, order=True)
class Span:
    """A stretch of text: 1-based lines and columns, end exclusive (a finding's range)."""

    line: int
    column: int
    end_line: int
    end_column: int


# How far a fix can be trusted, as in ruff: `--fix` applies safe fixes only, `--unsafe-fixes` also
# the unsafe ones (they may change what the code computes beyond the hazard, such as the dtype a
# consumer sees); display-only fixes are shown, never applied.
SAFE, UNSAFE, DISPLAY_ONLY = "safe", "unsafe", "display-only"
APPLICABILITIES = (SAFE, UNSAFE, DISPLAY_ONLY)


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]
    applicability: str = SAFE
    # The ranges of other findings that its edits fix too (the accumulation an upcast at the start
    # of its chain keeps in float32): a finding there needs no fix of its own once this one is
    # written, and counts as fixed by it.
    covers: tuple[Span, ...] = ()

    def applies(self, unsafe: bool) -> bool:
        """Whether `--fix` writes it (with `--unsafe-fixes` when `unsafe`)."""
        return self.applicability == SAFE or (unsafe and self.applicability == UNSAFE)


@dataclass(frozen=True)
class Diagnostic:
    """One finding. Lines and columns are 1-based; columns count characters (code points)."""

    code: str
    name: str
    message: str
    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    severity: Severity = Severity.WARNING
    confidence: Confidence = Confidence.STATIC
    fix: Fix | None = None
    help: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def span(self) -> Span:
        return Span(self.line, self.column, self.end_line, self.end_column)

    @property
    def sort_key(self) -> tuple[str, int, int, int, str]:
        return (self.path, self.cell or 0, self.line, self.column, self.code)

    @property
    def cell(self) -> int | None:
        """The notebook cell of the finding; None outside notebooks."""
        value = self.extra.get(CELL)
        return value if isinstance(value, int) else None

    @property
    def location(self) -> str:
        """The file as reports name it: `path`, or `path:cell N` in a notebook (as ruff prints it)."""
        return self.path if self.cell is None else cell_location(self.path, self.cell)

    @property
    def file_line(self) -> int:
        """The line of the file on disk: `line`, or in a notebook the line of the .ipynb that holds it."""
        value = self.extra.get(IPYNB_LINE)
        return value if isinstance(value, int) else self.line

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        data["confidence"] = self.confidence.value
        extra = data.pop("extra")
        data.update(extra)
        return data


def sort_diagnostics(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=lambda d: d.sort_key)


def cell_location(path: str, cell: int) -> str:
    return f"{path}:cell {cell}"
