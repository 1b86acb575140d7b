"""What checking one file produces. Kept free of libcst so that a run answered from the cache, and
the process that hands work to a pool, never import the parser."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from amplint.diagnostics import Diagnostic, Severity
from amplint.source import SourceError, SourceFile, too_large_message

# AMP900 (`amplint/rules/amp900_unparsable_file.py`), spelled out here so that this module does not
# import the rule (and libcst with it); tests/pipeline/test_cache.py checks that the two agree.
UNPARSABLE = "AMP900"
UNPARSABLE_NAME = "unparsable-file"
UNPARSABLE_SEVERITY = Severity.ERROR


@dataclass
class FileResult:
    path: Path
    display: str
    source: SourceFile | None
    diagnostics: list[Diagnostic] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    # The file is fine but was not checked (amplint's parser cannot read what Python accepts).
    warnings: list[str] = field(default_factory=list)
    # Where libcst gave up on text Python accepts, as an AMP900 a caller may report (a notebook
    # reports the cell and checks the others); a plain file reports only the warning.
    libcst_rejected: Diagnostic | None = None
    # Rules that rest on half values (`Rule.rests_on_half`) were not run: only a caller could make
    # the file's values half, and the run hides the findings that holds for (`conditional`).
    unchecked: bool = False


def unparsable_diagnostic(
    display: str, message: str, line: int = 1, column: int = 1, help: str | None = None
) -> Diagnostic:
    return Diagnostic(
        code=UNPARSABLE,
        name=UNPARSABLE_NAME,
        message=message,
        path=display,
        line=line,
        column=column,
        end_line=line,
        end_column=column,
        severity=UNPARSABLE_SEVERITY,
        help=help,
    )


def unreadable(path: Path, display: str, error: SourceError) -> FileResult:
    """The result for a file that could not be read or decoded: one AMP900 saying why."""
    return FileResult(
        path, display, None, [unparsable_diagnostic(display, error.message, error.line, error.column)]
    )


def too_large(path: Path, display: str, size: int, limit: int) -> FileResult:
    """The result for a file over `max-file-size`: one AMP900, nothing parsed."""
    return FileResult(path, display, None, [unparsable_diagnostic(display, too_large_message(size, limit))])
