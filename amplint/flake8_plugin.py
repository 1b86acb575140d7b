"""amplint as a flake8 plugin, for teams whose checks run through flake8: `flake8 --select AMP`.

Registered under the `flake8.extension` entry point `AMP`. Every rule runs (amplint's own
configuration is not read); flake8's `--select`, `--ignore` and `# noqa` decide what is shown. amplint
parses the source itself with libcst, from the lines flake8 read; flake8's `tree` is not used. Nothing
here imports torch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from amplint import __version__
from amplint.api import rules_for
from amplint.config import Settings
from amplint.runner import lint_source
from amplint.source import SourceFile, dominant_newline

__all__ = ["Plugin"]


class Plugin:
    name = "amplint"
    version = __version__

    # flake8 tells plugin kinds apart by their parameters: `tree` makes this a whole-file plugin.
    def __init__(self, tree: ast.AST, filename: str, lines: list[str]) -> None:
        self.filename = filename
        self.lines = lines

    def run(self) -> Iterator[tuple[int, int, str, type[Plugin]]]:
        """(line, column, "CODE message", plugin): lines 1-based, columns 0-based in characters, as
        flake8 expects."""
        text = "".join(self.lines)
        path = Path(self.filename)
        source = SourceFile(path, text, "utf-8", False, dominant_newline(text))
        result = lint_source(source, rules_for(Settings(), path), self.filename)
        if result.internal_errors:
            raise RuntimeError("\n".join(result.internal_errors))  # flake8 reports a failing plugin
        for diagnostic in result.diagnostics:
            yield (
                diagnostic.line,
                diagnostic.column - 1,
                f"{diagnostic.code} {diagnostic.message}",
                type(self),
            )
