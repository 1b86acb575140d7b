"""The one place amplint relies on a private libcst name (`tests/test_architecture.py` checks it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast

import libcst as cst
from libcst._nodes.base import CSTNode
from libcst.metadata import CodeRange, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

__all__ = ["SourceText", "node_positions", "parse_module"]


class SourceText(cst.Name):
    """Source text as a node: what a fix puts in place of a node when it adds a line beside it (a
    decorator below another, a statement before another): libcst has no node for "these lines".
    It is a Name whose `_validate` (libcst's private check that a name is an identifier) accepts
    any text. Waits for: a libcst node for verbatim source, or a public way to add a line beside a
    node in a transform."""

    def _validate(self) -> None:
        pass


def parse_module(text: str) -> cst.Module:
    """libcst's parse of `text`, its nodes not checked one by one. libcst checks each node as it is
    built (`CSTNode.__post_init__` calls `_validate`, which only raises), and what its own parser
    builds from text it accepted passes: the checks were a sixth of the parse. The switch is
    process-wide while the parse runs; a node another thread builds meanwhile is only not checked.
    Waits for: a libcst parser option that skips the checks."""
    CSTNode.__post_init__ = _unchecked  # type: ignore[method-assign]
    try:
        return cst.parse_module(text)
    finally:
        CSTNode.__post_init__ = _checked  # type: ignore[method-assign]


_checked = CSTNode.__post_init__


def _unchecked(self: CSTNode) -> None:
    pass


def node_positions(node: cst.CSTNode, module: cst.Module) -> tuple[Mapping[cst.CSTNode, CodeRange], str]:
    """The position of every node under `node` rendered alone in `module`'s style, and its code,
    from one rendering: what libcst's `PositionProvider` computes, without the metadata wrapper,
    which walks the whole tree once more for providers of another kind even when none is asked for.
    Waits for: a public way to resolve one non-batchable provider alone."""
    provider = PositionProvider()
    state = PositionProvidingCodegenState(
        default_indent=module.default_indent, default_newline=module.default_newline, provider=provider
    )
    try:
        node._codegen(state)
    except KeyError as exc:
        # A recursion too deep for the rendering leaves libcst's position bookkeeping half done, and
        # the KeyErrors of its unwinding hide it: the depth is what failed.
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, RecursionError):
            cause = cause.__context__
        if cause is None:
            raise
        raise RecursionError("nesting too deep to place the finding") from None
    found = cast(Mapping[cst.CSTNode, CodeRange], provider._computed)  # every value a range
    return found, "".join(state.tokens)
