"""Static findings checked against traced dtype graphs (`amplint check --confirm`).

Each finding is joined to the traced nodes whose source lines fall in its span. The rule reads those
nodes (`Rule.confirm`) and says whether the trace confirms the hazard, refutes it (the dtypes show
none), or cannot tell; a finding no traced node came from is `unreached`. Runtime-only rules
(AMP1xx, `Rule.check_graph`) add findings that only the graph shows. This module reads the dtype
graph, plain data; it never imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from amplint.diagnostics import Confidence, Diagnostic, Fix, sort_diagnostics
from amplint.rule import CastPoint, GraphFinding, Rule, Verdict
from amplint.rules import all_rules, rule_by_code
from amplint.runtime.graph import DtypeGraph, DtypeNode
from amplint.source import SourceError, display_path, read_source

# The `extra` keys a confirmed or refuted finding carries.
EVIDENCE = "evidence"
TARGETS = "targets"
CONFIRMATION = "confirmation"  # why a finding stayed `static`: no target traced
FIX_NOTE = "fix_note"  # why a runtime finding that asks for a fix has none


@dataclass
class Traced:
    """One runtime target and its graph, or why it could not be traced."""

    target: str
    graph: DtypeGraph | None = None
    error: str | None = None


# Traces every runtime target; given the static findings, so that the ops at their lines are measured.
Tracer = Callable[[Sequence[Diagnostic]], list["Traced"]]


def finding_lines(diagnostics: Sequence[Diagnostic]) -> list[tuple[str, int]]:
    """The absolute path and line of every finding a trace can confirm, for the measuring replay."""
    lines: list[tuple[str, int]] = []
    for diagnostic in diagnostics:
        rule = rule_by_code(diagnostic.code)
        if rule is not None and rule.confirmable():
            path = os.path.abspath(diagnostic.path)
            lines.extend(
                (path, line) for line in range(diagnostic.line, max(diagnostic.end_line, diagnostic.line) + 1)
            )
    return lines


class _Lines:
    """The nodes of one graph by resolved source path and line."""

    def __init__(self, graph: DtypeGraph) -> None:
        self.by_line: dict[tuple[str, int], list[DtypeNode]] = {}
        for node in graph.nodes:
            if node.source is not None and node.policy != "input":
                key = (_resolved(node.source.path), node.source.line)
                self.by_line.setdefault(key, []).append(node)

    def between(self, path: str, first: int, last: int) -> list[DtypeNode]:
        resolved = _resolved(path)
        return [node for line in range(first, last + 1) for node in self.by_line.get((resolved, line), [])]


def _resolved(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


def confirm(diagnostics: Sequence[Diagnostic], traced: Sequence[Traced]) -> list[Diagnostic]:
    """`diagnostics` with the confidence the traces give them, followed by the runtime-only findings
    of every graph; sorted. Without any traced graph the findings stay `static`, with the reason."""
    graphs = [(item.target, item.graph) for item in traced if item.graph is not None]
    if not graphs:
        reason = "; ".join(f"{item.target}: {item.error}" for item in traced) or "no runtime target"
        return [_with(d, Confidence.STATIC, {CONFIRMATION: f"not confirmed: {reason}"}) for d in diagnostics]
    lines = [(target, graph, _Lines(graph)) for target, graph in graphs]
    out = [_judge(diagnostic, lines) for diagnostic in diagnostics]
    # A static fix already on a line (AMP001's upcast) is the edit a runtime finding there would make.
    fixed_lines = {(d.path, d.line) for d in out if d.fix is not None}
    for target, graph in graphs:
        for finding in graph_findings(graph, target):
            if finding.fix is not None and (finding.path, finding.line) in fixed_lines:
                finding = replace(finding, fix=None)
            out.append(finding)
    return sort_diagnostics(_deduplicated(out))


def _judge(diagnostic: Diagnostic, lines: list[tuple[str, DtypeGraph, _Lines]]) -> Diagnostic:
    rule = rule_by_code(diagnostic.code)
    if rule is None or not rule.confirmable():
        return diagnostic
    verdicts: list[tuple[str, Verdict]] = []
    reached = False
    start = (diagnostic.line, diagnostic.column)
    for target, graph, index in lines:
        nodes = index.between(diagnostic.path, diagnostic.line, max(diagnostic.end_line, diagnostic.line))
        if not nodes:
            continue
        reached = True
        # The ops of the flagged expression itself where the trace has columns (`tanh` inside a
        # flagged `(w0 + tanh(x) @ w2).sigmoid()` is not the sigmoid), else every op of its lines.
        own = [n for n in nodes if n.source is not None and (n.source.line, n.source.column) == start]
        verdict = rule.confirm(diagnostic, own or nodes, graph)
        if verdict is not None:
            verdicts.append((target, verdict))
    if not reached:
        return _with(diagnostic, Confidence.UNREACHED, {EVIDENCE: "no traced op came from these lines"})
    for wanted in (Confidence.CONFIRMED, Confidence.REFUTED):
        chosen = [(target, verdict) for target, verdict in verdicts if verdict.confidence is wanted]
        if chosen:
            evidence = "; ".join(dict.fromkeys(verdict.evidence for _, verdict in chosen))
            targets = [target for target, _ in chosen]
            extra = {key: value for _, verdict in chosen for key, value in verdict.extra.items()}
            return _with(diagnostic, wanted, {**extra, EVIDENCE: evidence, TARGETS: targets})
    return diagnostic


def graph_findings(graph: DtypeGraph, target: str, *, fixes: bool = True) -> list[Diagnostic]:
    """The findings of the runtime-only rules on one graph's forward pass (a backward traced with it
    is reported, not judged); with `fixes`, the edits that fix them (each reads and parses its
    source file)."""
    forward = graph.forward()
    found = (
        runtime_diagnostic(rule, finding, target, fixes=fixes)
        for rule in runtime_rules()
        for finding in rule.check_graph(forward)
    )
    return [diagnostic for diagnostic in found if diagnostic is not None]


def runtime_diagnostic(
    rule: type[Rule], finding: GraphFinding, target: str, *, fixes: bool = True
) -> Diagnostic | None:
    """A runtime rule's finding as a diagnostic at its node's source; None when the node has none."""
    source = finding.node.source
    if source is None:
        return None
    column = source.column or 1
    extra: dict[str, object] = {EVIDENCE: finding.evidence, TARGETS: [target], **finding.extra}
    fix = None
    if fixes and finding.upcast:
        fix, note = _upcast_fix(finding.upcast)
        if fix is None:
            extra[FIX_NOTE] = note
    return Diagnostic(
        code=rule.code,
        name=rule.name,
        message=finding.message,
        path=display_path(Path(source.path)),
        line=source.line,
        column=column,
        end_line=source.line,
        end_column=column,
        severity=rule.severity,
        confidence=Confidence.CONFIRMED,
        fix=fix,
        help=finding.help,
        extra=extra,
    )


def _upcast_fix(points: Sequence[CastPoint]) -> tuple[Fix | None, str]:
    from amplint.fixing.graph import upcast_fix  # libcst: only for findings that ask for a fix

    try:
        source = read_source(Path(points[0].path))
    except SourceError as exc:
        return None, f"the file cannot be read: {exc.message}"
    return upcast_fix(source, [point for point in points if point.path == points[0].path])


def runtime_rules() -> list[type[Rule]]:
    return [rule for rule in all_rules() if rule.runtime_only]


def _with(diagnostic: Diagnostic, confidence: Confidence, extra: dict[str, object]) -> Diagnostic:
    return replace(diagnostic, confidence=confidence, extra={**diagnostic.extra, **extra})


def _deduplicated(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    """One runtime finding per rule and line, whichever target found it first (targets merged)."""
    seen: dict[tuple[str, str, int, int], Diagnostic] = {}
    out: list[Diagnostic] = []
    for diagnostic in diagnostics:
        if diagnostic.confidence is Confidence.CONFIRMED and rule_is_runtime(diagnostic.code):
            key = (diagnostic.code, diagnostic.path, diagnostic.line, diagnostic.column)
            first = seen.get(key)
            if first is not None:
                merged = [*first.extra.get(TARGETS, []), *diagnostic.extra.get(TARGETS, [])]
                first.extra[TARGETS] = list(dict.fromkeys(merged))
                continue
            seen[key] = diagnostic
        out.append(diagnostic)
    return out


def rule_is_runtime(code: str) -> bool:
    rule = rule_by_code(code)
    return rule is not None and rule.runtime_only
