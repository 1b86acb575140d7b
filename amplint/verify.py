"""`amplint check --confirm --fix`: apply the fixes, trace again, and keep a file's fixes only where
the new trace shows its confirmed findings gone and no new one confirmed; otherwise put the file back
as it was. A fix changes numerics on purpose, so it is judged by the dtypes it produces, not by its
text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import libcst as cst

from amplint.api import CheckRun, rules_for, run_check
from amplint.config import Settings
from amplint.confirm import Tracer, confirm, rule_is_runtime
from amplint.diagnostics import Confidence, Diagnostic
from amplint.fixes import apply_edits, fix_source, unified_diff, write_atomic
from amplint.source import SourceFile, read_source


@dataclass(frozen=True)
class FixOutcome:
    path: str
    kept: bool
    detail: str


def fix_and_verify(
    paths: Sequence[Path], settings: Settings, trace: Tracer, *, jobs: int | None
) -> tuple[CheckRun, list[FixOutcome]]:
    """Check, trace, fix, trace again and judge each fixed file; the run describes the files as they
    are left, with the confidence of the last trace."""
    before_run = run_check(paths, settings, jobs=jobs)
    before = confirm(before_run.diagnostics, trace(before_run.diagnostics))
    originals = _fixable_files(before)
    if not originals:
        before_run.diagnostics = before
        return before_run, []
    # The graph's fixes first, at the lines the trace named in the text it was computed on; then the
    # static fixes on top, to a fixpoint.
    from_graph = 0
    for path, original in originals.items():
        new_text, count = _with_graph_fixes(path, original, before)
        if count and read_source(Path(path)).text == original.text:
            write_atomic(original, new_text)
            from_graph += count
    run = run_check(paths, settings, fix=True, jobs=jobs)
    run.fixed += from_graph
    after = confirm(run.diagnostics, trace(run.diagnostics))
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
        run.fixed = sum(1 for d in before if d.fix is not None and d.path in kept)
        after = confirm(run.diagnostics, trace(run.diagnostics))
    run.diagnostics = after
    return run, outcomes


def preview(paths: Sequence[Path], settings: Settings, trace: Tracer, *, jobs: int | None) -> CheckRun:
    """`--confirm --diff`: the confirmed findings, and a diff per file of what `--fix` would write
    (the graph's fixes, then the static ones); nothing is written."""
    run = run_check(paths, settings, jobs=jobs)
    run.diagnostics = confirm(run.diagnostics, trace(run.diagnostics))
    for path, original in _fixable_files(run.diagnostics).items():
        new_text, from_graph = _with_graph_fixes(path, original, run.diagnostics)
        outcome = fix_source(replace(original, text=new_text), rules_for(settings, Path(path)), path)
        run.errors.extend(outcome.errors)
        if outcome.new_text != original.text:
            run.fixed += from_graph + outcome.fixed
            run.diffs.append(unified_diff(path, original.text, outcome.new_text))
    return run


def _fixable_files(diagnostics: Sequence[Diagnostic]) -> dict[str, SourceFile]:
    files: dict[str, SourceFile] = {}
    for diagnostic in diagnostics:
        if diagnostic.fix is not None and diagnostic.path not in files:
            files[diagnostic.path] = read_source(Path(diagnostic.path))
    return files


def _with_graph_fixes(path: str, source: SourceFile, diagnostics: Sequence[Diagnostic]) -> tuple[str, int]:
    """The text of the file at `path` with the fixes of its runtime-only findings applied (none if
    the result does not parse), and how many were applied."""
    edits = [
        edit
        for d in diagnostics
        if d.path == path and d.fix is not None and rule_is_runtime(d.code)
        for edit in d.fix.edits
    ]
    if not edits:
        return source.text, 0
    new_text, count = apply_edits(source.text, edits)
    try:
        cst.parse_module(new_text)
    except cst.ParserSyntaxError:
        return source.text, 0
    return new_text, count


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
