"""amplint as a flake8 plugin, for teams whose checks run through flake8: `flake8 --select AMP`.

Registered under the `flake8.extension` entry point `AMP`. Every rule that is on by default runs, and
the opt-in rules named by `--amplint-extend-select` (or `amplint-extend-select` in flake8's
configuration); amplint's own configuration is not read. Each file is checked in the execution modes
the project around it gives it (read once per project and process), and findings that rest on no
mode (conditional) are not shown, as with `amplint check`. flake8's `--select`, `--ignore` and
`# noqa` decide what is shown. amplint
parses the source itself with libcst, from the lines flake8 read; flake8's `tree` is not used. Nothing
here imports torch.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from amplint import __version__
from amplint.config import Settings, validate_codes
from amplint.diagnostics import Confidence
from amplint.pipeline.precision import Precision, project_precision, project_root
from amplint.rules import rules_for
from amplint.rules.runner import lint_source
from amplint.source import SourceFile, display_path, dominant_newline

__all__ = ["Plugin"]


class Plugin:
    name = "amplint"
    version = __version__

    extend_select: tuple[str, ...] = ()

    @classmethod
    def add_options(cls, manager: Any) -> None:
        manager.add_option(
            "--amplint-extend-select",
            default="",
            parse_from_config=True,
            comma_separated_list=True,
            help="amplint's opt-in rules to run beside its default ones (codes, comma-separated)",
        )

    @classmethod
    def parse_options(cls, options: Any) -> None:
        cls.extend_select = validate_codes(list(options.amplint_extend_select), "--amplint-extend-select")

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
        # flake8 hands over one file at a time: its profile is the one `amplint check` gives it.
        profile = _precision(path).of(display_path(path))
        rules = rules_for(Settings(extend_select=self.extend_select), path, profile)
        result = lint_source(source, rules, self.filename, profile=profile)
        if result.internal_errors:
            raise RuntimeError("\n".join(result.internal_errors))  # flake8 reports a failing plugin
        for diagnostic in result.diagnostics:
            if diagnostic.confidence == Confidence.CONDITIONAL:
                continue
            yield (
                diagnostic.line,
                diagnostic.column - 1,
                f"{diagnostic.code} {diagnostic.message}",
                type(self),
            )


_PROJECTS: dict[Path, Precision] = {}


def _precision(path: Path) -> Precision:
    """The execution modes of the project around `path`, found once per project in this process."""
    root = project_root([path])
    if root not in _PROJECTS:
        _PROJECTS[root] = project_precision(Settings(root=root), [root])
    return _PROJECTS[root]
