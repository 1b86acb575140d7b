"""`amplint check --confirm --fix`: apply the fixes, trace again, and keep a file's fixes only where
the new trace shows its confirmed findings gone and no new one confirmed; otherwise put the file back
as it was. A fix changes numerics on purpose, so it is judged by the dtypes it produces, not by its
text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcst as cst

from amplint.api import CheckRun, run_check
from amplint.config import Settings
from amplint.confirm import Traced, confirm, rule_is_runtime
from amplint.diagnostics import Confidence, Diagnostic, Edit
from amplint.fixes import apply_edits, write_atomic
from amplint.source import SourceFile, read_source


@dataclass(frozen=True)
class FixOutcome:
    path: str
    kept: bool
    detail: str


def fix_and_verify(
    paths: Sequence[Path], settings: Settings, trace: Callable[[], list[Traced]], *, jobs: int | None
) -> tuple[CheckRun, list[FixOutcome]]:
    """Check, trace, fix, trace again and judge each fixed file; the run describes the files as they
    are left, with the confidence of the last trace."""
    before_run = run_check(paths, settings, jobs=jobs)
    before = confirm(before_run.diagnostics, trace())
    originals: dict[str, SourceFile] = {}
    for diagnostic in before:
        if diagnostic.fix is not None and diagnostic.path not in originals:
            originals[diagnostic.path] = read_source(Path(diagnostic.path))
    if not originals:
        before_run.diagnostics = before
        return before_run, []
    # The static fixes first; then the fixes the new trace asks for (AMP101's upcasts), computed on
    # the files as the static fixes left them.
    run = run_check(paths, settings, fix=True, jobs=jobs)
    after = confirm(run.diagnostics, trace())
    from_graph = _apply_graph_fixes(after)
    if from_graph:
        fixed = run.fixed + from_graph
        run = run_check(paths, settings, jobs=jobs)
        run.fixed = fixed
        after = confirm(run.diagnostics, trace())
    outcomes: list[FixOutcome] = []
    for path, original in originals.items():
        if read_source(Path(path)).text == original.text:
            continue  # no fix applied (the file changed meanwhile, or a fix did not re-parse)
        outcome = _judge(path, before, after)
        if not outcome.kept:
            write_atomic(original, original.text)
        outcomes.append(outcome)
    if any(not outcome.kept for outcome in outcomes):
        kept = {outcome.path for outcome in outcomes if outcome.kept}
        run = run_check(paths, settings, jobs=jobs)
        run.fixed = sum(1 for d in before_run.diagnostics if d.fix is not None and d.path in kept)
        after = confirm(run.diagnostics, trace())
    run.diagnostics = after
    return run, outcomes


def _confirmed(diagnostics: Sequence[Diagnostic], path: str) -> Counter[str]:
    return Counter(d.code for d in diagnostics if d.path == path and d.confidence is Confidence.CONFIRMED)


def _judge(path: str, before: Sequence[Diagnostic], after: Sequence[Diagnostic]) -> FixOutcome:
    was, now = _confirmed(before, path), _confirmed(after, path)
    new = now - was
    gone = sum((was - now).values())
    if new:
        codes = ", ".join(sorted(new))
        return FixOutcome(path, False, f"rolled back: the fixed code is confirmed to have {codes}")
    if was and not gone:
        codes = ", ".join(sorted(was))
        return FixOutcome(path, False, f"rolled back: {codes} still confirmed after the fix")
    if not was:
        return FixOutcome(path, True, "kept, not verified: no finding in this file was confirmed by a trace")
    return FixOutcome(path, True, f"verified: {gone} confirmed finding(s) gone, none new")


def _apply_graph_fixes(diagnostics: Sequence[Diagnostic]) -> int:
    """Apply the fixes of runtime-only findings, file by file; a result that does not parse is not
    written. Returns how many were applied."""
    edits: dict[str, list[Edit]] = {}
    for diagnostic in diagnostics:
        if diagnostic.fix is not None and rule_is_runtime(diagnostic.code):
            edits.setdefault(diagnostic.path, []).extend(diagnostic.fix.edits)
    applied = 0
    for path, file_edits in edits.items():
        source = read_source(Path(path))
        new_text, count = apply_edits(source.text, file_edits)
        try:
            cst.parse_module(new_text)
        except cst.ParserSyntaxError:
            continue
        write_atomic(source, new_text)
        applied += count
    return applied
