"""`amplint check --explain FILE:LINE`: the dtype facts of every expression on one line, so a user
can see why a finding says a value is half precision there (or why none was reported)."""

from __future__ import annotations

from pathlib import Path

import libcst as cst

from amplint.source import SourceError, read_source
from amplint.static.context import FileContext
from amplint.static.facts import DTYPE, OFF
from amplint.static.profile import Profile

_WIDTH = 44


class ExplainError(Exception):
    """A FILE:LINE that cannot be explained: the message says why."""


def parse_target(target: str) -> tuple[Path, int]:
    path, sep, line = target.rpartition(":")
    if not sep or not line.isdigit() or int(line) < 1:
        raise ExplainError(f"--explain takes FILE:LINE (a line number from 1), not {target!r}")
    return Path(path), int(line)


def explain(target: str, profile: Profile) -> str:
    """The report for `FILE:LINE`: the line, then one row per expression with its dtypes and why."""
    path, line = parse_target(target)
    try:
        source = read_source(path)
    except SourceError as exc:
        raise ExplainError(f"{path}: {exc}") from exc
    lines = source.text.splitlines()
    if line > len(lines):
        raise ExplainError(f"{path} has {len(lines)} lines; there is no line {line}")
    try:
        module = cst.parse_module(source.text)
    except cst.ParserSyntaxError as exc:
        raise ExplainError(f"{path}:{exc.raw_line}: {exc.message}") from exc
    ctx = FileContext(path, module, text=source.text, profile=profile)
    rows = ctx.facts.explain_line(line)
    out = [f"{path}:{line}: {lines[line - 1].strip()}", f"  precision profile: {profile.describe()}"]
    if not rows:
        out.append("  no tensor or dtype expression starts on this line")
        return "\n".join(out)
    for code, fact in rows:
        shown = code if len(code) <= _WIDTH else code[: _WIDTH - 3] + "..."
        kind = " (a dtype)" if fact.kind == DTYPE else ""
        out.append(f"  {shown:<{_WIDTH}} {fact.explain()}{kind}")
    states = ctx.facts.autocast_at(ctx.facts.nodes_on(line)[0])
    described = sorted(
        "off"
        if s is OFF
        else f"{s.device} autocast {s.dtype}"
        + (f" (line {ctx.facts.line(s.where)})" if s.where else " (the caller's)")
        for s in states
    )
    out.append("  runs under: " + ", ".join(described))
    return "\n".join(out)
