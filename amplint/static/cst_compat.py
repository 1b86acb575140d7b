"""The one place amplint relies on a private libcst name (`tests/test_architecture.py` checks it)."""

from __future__ import annotations

import libcst as cst

__all__ = ["SourceText"]


class SourceText(cst.Name):
    """Source text as a node: what a fix puts in place of a node when it adds a line beside it (a
    decorator below another, a statement before another): libcst has no node for "these lines".
    It is a Name whose `_validate` (libcst's private check that a name is an identifier) accepts
    any text. Waits for: a libcst node for verbatim source, or a public way to add a line beside a
    node in a transform."""

    def _validate(self) -> None:
        pass
