"""The one data model for every finding, static or runtime."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Confidence(str, Enum):
    """How sure amplint is. The static pass only knows `static`; the runtime pass refines it."""

    STATIC = "static"
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


@dataclass(frozen=True)
class Fix:
    description: str
    edits: tuple[Edit, ...]


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
    def sort_key(self) -> tuple[str, int, int, str]:
        return (self.path, self.line, self.column, self.code)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        data["confidence"] = self.confidence.value
        extra = data.pop("extra")
        data.update(extra)
        return data


def sort_diagnostics(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return sorted(diagnostics, key=lambda d: d.sort_key)
