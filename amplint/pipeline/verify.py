"""`amplint check --confirm --fix`: apply the fixes, trace again, and keep each fix only where the
new trace shows its finding gone and no new finding confirmed; a fix that fails is rolled back and
reported. A fix changes numerics on purpose, so it is judged by the dtypes it produces, not by its
text.

All fixes are applied and judged with one trace first; only a file where some fix fails is put back
and its fixes tried again one at a time, each traced on top of the ones kept, so the failing fix is
the one rolled back.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import libcst as cst

from amplint.config import Settings
from amplint.diagnostics import Confidence, Diagnostic, Edit
from amplint.fixing.confirm import Tracer, confirm, rule_is_runtime
from amplint.fixing.edits import apply_edits, fix_source, unified_diff, write_atomic
from amplint.pipeline.check import CheckRun, rules_for, run_check
from amplint.source import SourceFile, WriteRefused, read_source

if TYPE_CHECKING:
    from amplint.runtime.graph import DtypeGraph


@dataclass(frozen=True)
class FixOutcome:
    """What became of one finding's fix."""

    path: str
    line: int
    code: str
    kept: bool
    detail: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} {self.code}: {self.detail}"


def fix_and_verify(
    paths: Sequence[Path], settings: Settings, trace: Tracer, *, jobs: int | None
) -> tuple[CheckRun, list[FixOutcome]]:
    """Check, trace, fix, trace again and judge each fix; the run describes the files as they are
    left, with the confidence of the last trace."""
    first = _traced(paths, settings, trace, jobs)
    before_run, before, untraced = first.run, first.diagnostics, first.failed
    originals = _fixable_files(before)
    if not originals:
        before_run.diagnostics = before
        return before_run, []
    # The graph's fixes first, at the lines the trace named in the text it was computed on; then the
    # static fixes on top, to a fixpoint.
    from_graph = 0
    for path, original in originals.items():
        new_text, count = _with_graph_fixes(path, original, before)
        if count:
            try:
                write_atomic(original, new_text, was=original.text, roots=before_run.roots)
            except WriteRefused:
                continue  # the check that applies the static fixes next reports why
            from_graph += count
    fixed = _traced(paths, settings, trace, jobs, fix=True)
    run, after, failed_trace = fixed.run, fixed.diagnostics, fixed.failed
    changed = _changed_outputs(first.outputs, fixed.outputs)
    run.fixed += from_graph
    if untraced is not None:  # nothing traced before the fixes either: they stay, unverified
        failed_trace = None
    outcomes: list[FixOutcome] = []
    failed: dict[str, SourceFile] = {}
    for path, original in originals.items():
        text = read_source(Path(path)).text
        if text == original.text:
            continue  # no fix applied (the file changed meanwhile, or a fix did not re-parse)
        lines = _line_map(original.text, text)
        judged = [
            _judge(fix, before, after, lines, failed_trace, changed=changed) for fix in _fixes(before, path)
        ]
        if all(outcome.kept for outcome in judged):
            outcomes.extend(_in_file(judged, lines))
        else:
            write_atomic(original, original.text, roots=before_run.roots)
            failed[path] = original
    if not failed:
        run.diagnostics = after
        return run, outcomes
    one_by_one, run = _one_at_a_time(failed, before, paths, settings, trace, jobs, first.outputs)
    outcomes.extend(one_by_one)
    run.fixed = sum(1 for outcome in outcomes if outcome.kept)
    return run, outcomes


def _one_at_a_time(
    files: dict[str, SourceFile],
    before: Sequence[Diagnostic],
    paths: Sequence[Path],
    settings: Settings,
    trace: Tracer,
    jobs: int | None,
    outputs: dict[str, list[str]],
) -> tuple[list[FixOutcome], CheckRun]:
    """Each fix of `files` (put back as they were) applied on top of the ones kept so far, traced,
    and kept or rolled back on its own; and the check of the files as they are left, with its
    trace. Every fix's edits are positions in the original text, so a set of fixes is always
    applied to that text together."""
    outcomes: list[FixOutcome] = []
    start = _traced(paths, settings, trace, jobs)
    state, current = start.run, start.diagnostics
    for path, original in files.items():
        kept: list[Edit] = []
        text = original.text
        judged: list[FixOutcome] = []
        written: list[Diagnostic] = []
        for fix in _covered_last(_fixes(before, path)):
            if original.path.suffix == ".ipynb":  # cell edits are not positions in the file's text
                judged.append(_outcome(fix, False, "rolled back with the other fixes of this notebook"))
                continue
            if fix.confidence is Confidence.REFUTED:
                judged.append(_refuted(fix))
                continue
            assert fix.fix is not None
            covering = next((w for w in written if w.fix is not None and fix.span in w.fix.covers), None)
            if covering is not None:
                judged.append(_outcome(fix, True, f"fixed by the {covering.code} fix kept before it"))
                continue
            candidate, _ = apply_edits(original.text, [*kept, *fix.fix.edits])
            try:
                cst.parse_module(candidate)
            except cst.ParserSyntaxError:
                judged.append(
                    _outcome(fix, False, "rolled back: it does not parse with the fixes kept before it")
                )
                continue
            write_atomic(original, candidate, roots=state.roots)
            again = _traced(paths, settings, trace, jobs)
            run, now, failed_trace = again.run, again.diagnostics, again.failed
            # The fix's own finding is looked up in original coordinates; new ones against the last
            # state kept.
            lines = _line_map(original.text, candidate)
            previous = (current, _line_map(text, candidate))
            changed = _changed_outputs(outputs, again.outputs)
            outcome = _judge(fix, before, now, lines, failed_trace, previous, changed=changed)
            judged.append(outcome)
            if outcome.kept:
                kept.extend(fix.fix.edits)
                written.append(fix)
                text, current, state = candidate, now, run
            else:
                write_atomic(original, text, roots=state.roots)
        outcomes.extend(_in_file(judged, _line_map(original.text, text)))
    state.diagnostics = current
    return outcomes, state


@dataclass
class _Trace:
    """A check joined to a trace: its findings, why no target could be traced (if none could), and
    the dtypes each target's forward pass hands back to its caller."""

    run: CheckRun
    diagnostics: list[Diagnostic]
    failed: str | None
    outputs: dict[str, list[str]]


def _traced(
    paths: Sequence[Path], settings: Settings, trace: Tracer, jobs: int | None, *, fix: bool = False
) -> _Trace:
    """A check of `paths` (fixing them with `fix`) and a new trace of the runtime targets."""
    # Every fix, unsafe ones included: the trace after it decides whether it stays.
    run = run_check(paths, settings, fix=fix, unsafe_fixes=fix, jobs=jobs)
    traced = trace(run.diagnostics)
    failed = (
        None
        if any(item.graph is not None for item in traced)
        else "; ".join(f"{item.target}: {item.error}" for item in traced)
    )
    outputs = {item.target: _output_dtypes(item.graph) for item in traced if item.graph is not None}
    return _Trace(run, confirm(run.diagnostics, traced), failed, outputs)


def _output_dtypes(graph: DtypeGraph) -> list[str]:
    """The dtypes of the tensors nothing in the traced forward pass consumes: what it returns. An
    empty tensor is none: the dtype probes fixes write (`x.new_empty(0).pow(0).dtype`) are read for
    their dtype alone."""
    return sorted(
        node.dtype
        for node in graph.nodes
        if node.dtype is not None and not graph.consumers(node) and not (node.shape and 0 in node.shape)
    )


def _changed_outputs(before: dict[str, list[str]], after: dict[str, list[str]]) -> str | None:
    """How the fixes changed the dtypes the traced models return, or None."""
    for target, dtypes in after.items():
        old = before.get(target)
        if old is not None and old != dtypes:
            shown = target.replace(os.sep, "/").rsplit("/", 1)[-1]  # `block.py:factory`
            return f"{shown} returned {', '.join(old)}, now {', '.join(dtypes)}"
    return None


def preview(paths: Sequence[Path], settings: Settings, trace: Tracer, *, jobs: int | None) -> CheckRun:
    """`--confirm --diff`: the confirmed findings, and a diff per file of what `--fix` would write
    (the graph's fixes, then the static ones); nothing is written."""
    run = run_check(paths, settings, jobs=jobs)
    run.diagnostics = confirm(run.diagnostics, trace(run.diagnostics))
    for path, original in _fixable_files(run.diagnostics).items():
        new_text, from_graph = _with_graph_fixes(path, original, run.diagnostics)
        profile = run.precision.of(path)
        rules = rules_for(settings, Path(path), profile)
        outcome = fix_source(
            replace(original, text=new_text),
            rules,
            path,
            profile=profile,
            unsafe=True,
            conditional=settings.show_conditional,
        )
        run.errors.extend(outcome.errors)
        if outcome.new_text != original.text:
            run.fixed += from_graph + outcome.fixed
            run.diffs.append(unified_diff(path, original.text, outcome.new_text))
    return run


def _fixes(diagnostics: Sequence[Diagnostic], path: str) -> list[Diagnostic]:
    return [d for d in diagnostics if d.path == path and d.fix is not None]


def _covered_last(fixes: list[Diagnostic]) -> list[Diagnostic]:
    """`fixes` with those that another one covers (`Fix.covers`) after it: kept, that one fixes them."""
    covered = {span for d in fixes if d.fix is not None for span in d.fix.covers}
    return sorted(fixes, key=lambda d: d.span in covered)


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
        for d in _fixes(diagnostics, path)
        if d.fix is not None and rule_is_runtime(d.code)
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


def _line_map(old: str, new: str) -> dict[int, int]:
    """Where each line of `old` is in `new` (1-based), for lines kept or replaced one for one."""
    mapping: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(None, old.splitlines(), new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            mapping.update({i1 + k + 1: j1 + k + 1 for k in range(i2 - i1)})
    return mapping


def _confirmed(diagnostics: Sequence[Diagnostic], path: str) -> set[tuple[str, int]]:
    return {(d.code, d.line) for d in diagnostics if d.path == path and d.confidence is Confidence.CONFIRMED}


def _judge(
    fix: Diagnostic,
    before: Sequence[Diagnostic],
    after: Sequence[Diagnostic],
    lines: dict[int, int],
    failed_trace: str | None,
    previous: tuple[Sequence[Diagnostic], dict[int, int]] | None = None,
    *,
    changed: str | None = None,
) -> FixOutcome:
    """Judge `fix` by the trace after it: its finding (confirmed in `before`, lines mapped by `lines`)
    must be gone, no finding confirmed that the state before the fix (`previous`: its findings and
    the map of its lines; default `before`) did not have, and the traced models must return what
    they returned before (`changed` says how they do not): a caller of the model consumes that."""
    if fix.confidence is Confidence.REFUTED:
        return _refuted(fix)
    if failed_trace is not None:
        return _outcome(fix, False, f"rolled back: the fixed code could not be traced ({failed_trace})")
    if changed is not None:
        return _outcome(fix, False, f"rolled back: it changes the dtypes the model returns ({changed})")
    now = _confirmed(after, fix.path)
    if fix.confidence is Confidence.CONFIRMED and (fix.code, lines.get(fix.line)) in now:
        return _outcome(fix, False, f"rolled back: {fix.code} is still confirmed after the fix")
    earlier, mapping = (before, lines) if previous is None else previous
    was = _confirmed(earlier, fix.path)
    new = sorted(now - {(code, mapping[line]) for code, line in was if line in mapping})
    if new:
        found = ", ".join(f"{code} at line {line}" for code, line in new)
        return _outcome(fix, False, f"rolled back: the fixed code is confirmed to have {found}")
    if fix.confidence is not Confidence.CONFIRMED:
        return _outcome(
            fix, True, f"kept, not verified: the trace did not confirm the finding ({fix.confidence.value})"
        )
    return _outcome(fix, True, "verified: the finding is gone and no new one appeared")


def _outcome(fix: Diagnostic, kept: bool, detail: str) -> FixOutcome:
    return FixOutcome(fix.path, fix.line, fix.code, kept, detail)


def _refuted(fix: Diagnostic) -> FixOutcome:
    """A fix for a hazard the trace shows absent changes numerics for nothing: it is not applied."""
    return _outcome(fix, False, "dropped: the trace refuted its finding")


def _in_file(outcomes: list[FixOutcome], lines: dict[int, int]) -> list[FixOutcome]:
    """`outcomes` with their lines moved to where they are in the file as left (`lines`: original to
    final, for the lines kept or replaced one for one; a line in a block replaced by one of another
    length moves with the nearest mapped line above it)."""
    moved = []
    for outcome in outcomes:
        above = max((line for line in lines if line <= outcome.line), default=None)
        line = outcome.line if above is None else lines[above] + outcome.line - above
        moved.append(replace(outcome, line=line))
    return moved
