"""AMP900: a file amplint could not check. Emitted by the engine, not by a libcst check."""

from __future__ import annotations

from collections.abc import Iterator

from amplint.diagnostics import Severity
from amplint.rule import Rule
from amplint.static.context import FileContext, Finding


class UnparsableFile(Rule):
    """
    ## What it does
    Reports a file that amplint could not check: a syntax error (with the parser's message and
    position), bytes that do not decode in the file's encoding, a binary file, or a file that
    cannot be read. The other files are still checked.

    ## Why is this bad?
    A file that is not checked can hide every other finding; a linter that skips it silently would
    report a clean run that is not clean.

    ## Example
    ```python
    def forward(self, x:
        return x
    ```

    ## Fix
    Fix the syntax error, re-save the file as UTF-8 (or declare its encoding with a PEP 263
    comment), or exclude the file in `[tool.amplint]`.
    """

    code = "AMP900"
    name = "unparsable-file"
    summary = "the file could not be read or parsed, so it was not checked"
    severity = Severity.ERROR

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        return iter(())
