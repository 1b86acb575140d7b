"""Applying fixes: text edits to a fixpoint, a unified diff, and an atomic write that never leaves
a half-written or unparsable file."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from amplint.diagnostics import UNSAFE, Confidence, Diagnostic, Edit, Fix
from amplint.rule import Rule
from amplint.rules.runner import FileResult, invalid_code, lint_source
from amplint.source import LineIndex, SourceFile, replace_file
from amplint.static.profile import CALLER, Profile

# Fixes can overlap (two findings in one expression); each round applies those that do not, then
# re-lints. A handful of rounds reaches a fixpoint on real code.
MAX_ROUNDS = 10


class FixError(Exception):
    pass


def apply_edits(text: str, edits: Iterable[Edit]) -> tuple[str, int]:
    """Apply non-overlapping edits (later ones that overlap an earlier one are skipped).
    Returns the new text and how many edits were applied."""
    index = LineIndex(text)
    spans = sorted(
        {(index.offset(e.line, e.column), index.offset(e.end_line, e.end_column), e.content) for e in edits}
    )
    pieces: list[str] = []
    cursor = 0
    applied = 0
    for start, end, content in spans:
        if start < cursor:
            continue
        pieces.append(text[cursor:start])
        pieces.append(content)
        cursor = end
        applied += 1
    pieces.append(text[cursor:])
    return "".join(pieces), applied


def _fix_edits(
    diagnostics: Sequence[Diagnostic], unsafe: bool, conditional: bool
) -> list[tuple[Diagnostic, tuple[Edit, ...]]]:
    return [
        (d, d.fix.edits)
        for d in diagnostics
        if d.fix is not None
        and d.fix.applies(unsafe)
        and (conditional or d.confidence != Confidence.CONDITIONAL)
    ]


def _in_evaluation_order(
    candidates: list[tuple[Diagnostic, tuple[Edit, ...]]],
) -> list[tuple[Diagnostic, tuple[Edit, ...]]]:
    """The fixes in the order their findings' values are computed, which is where their code ends
    (an operand before its op, a statement before the next): of two overlapping fixes on one chain,
    the one computed first is written, and the other, found again or not on the fixed text, waits
    for the next round."""
    return sorted(candidates, key=lambda candidate: (candidate[0].end_line, candidate[0].end_column))


def _non_overlapping(
    candidates: list[tuple[Diagnostic, tuple[Edit, ...]]],
) -> tuple[list[Diagnostic], list[Edit]]:
    """Whole fixes whose replacements do not overlap one another (insertions such as
    `import torch` at the same spot are shared): the findings they fix, and their edits. A finding
    that another fix covers (`Fix.covers`: AMP007's `cumsum` in the chain whose start AMP001's fix
    upcasts) waits for that fix, and is tried only if it was not chosen: written together, their
    casts would stack."""
    covered = {span for diagnostic, _ in candidates if diagnostic.fix for span in diagnostic.fix.covers}
    fixes: list[Diagnostic] = []
    chosen: list[Edit] = []
    taken: list[tuple[tuple[int, int], tuple[int, int]]] = []
    for waiting in (False, True):
        for diagnostic, edits in candidates:
            if (diagnostic.span in covered) is not waiting or (waiting and _covering(fixes, diagnostic)):
                continue
            ranges = [((e.line, e.column), (e.end_line, e.end_column)) for e in edits if e not in chosen]
            if any(start < t_end and t_start < end for start, end in ranges for t_start, t_end in taken):
                continue
            fixes.append(diagnostic)
            chosen.extend(e for e in edits if e not in chosen)
            taken.extend(r for r in ranges if r[0] != r[1])
    return fixes, chosen


def _covering(fixes: Sequence[Diagnostic], diagnostic: Diagnostic) -> Fix | None:
    """The fix among `fixes` whose edits fix `diagnostic` too (`Fix.covers`), if any."""
    return next(
        (
            d.fix
            for d in fixes
            if d.fix is not None and d is not diagnostic and diagnostic.span in d.fix.covers
        ),
        None,
    )


@dataclass
class FixOutcome:
    result: FileResult
    new_text: str
    fixed: int = 0
    errors: list[str] = field(default_factory=list)
    applied: list[Diagnostic] = field(
        default_factory=list
    )  # the fixes written, each as reported in its round
    # For each fix in `applied`, the first and last line it edits in the text that was read (a
    # later round's lines traced back through the earlier rounds' edits); empty where not known.
    lines: list[tuple[int, int]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.result.source is not None and self.new_text != self.result.source.text

    def marks(self) -> list[tuple[int, int, str]]:
        """Each written fix as `(first line, last line, "<applicability> fix: <code>")` in the text
        that was read, for `unified_diff` to mark the hunks it falls in; none for a notebook, whose
        fixes count lines within cells and whose diff is of the .ipynb file."""
        if len(self.lines) != len(self.applied):
            return []
        return [
            (first, last, f"{d.fix.applicability} fix: {d.code}")
            for d, (first, last) in zip(self.applied, self.lines, strict=True)
            if d.fix is not None
        ]


def fix_source(
    source: SourceFile,
    rules: Sequence[type[Rule]],
    display: str,
    *,
    profile: Profile = CALLER,
    unsafe: bool = False,
    conditional: bool = False,
) -> FixOutcome:
    """Lint, apply every fix that applies cleanly (safe ones; unsafe ones too with `unsafe`), and
    repeat until nothing is left to fix. A conditional finding (not shown unless asked for) is not
    fixed unless `conditional`. `FixOutcome.applied` are the fixes written, in order."""
    text = source.text
    result = lint_source(source, rules, display, profile=profile)
    applied: list[Diagnostic] = []
    lines: list[tuple[int, int]] = []
    for _ in range(MAX_ROUNDS):
        candidates = _in_evaluation_order(_fix_edits(result.diagnostics, unsafe, conditional))
        if not candidates:
            break
        chosen, edits = _non_overlapping(candidates)
        new_text, _ = apply_edits(text, edits)
        if new_text == text:
            break
        original = _original_line(source.text, text)
        for diagnostic in chosen:
            assert diagnostic.fix is not None
            first = min(edit.line for edit in diagnostic.fix.edits)
            last = max(edit.end_line for edit in diagnostic.fix.edits)
            lines.append((original(first), original(last)))
        invalid = invalid_code(new_text, display, profile)
        if invalid is not None:
            outcome = FixOutcome(result, text, len(applied), applied=applied, lines=lines[: len(applied)])
            outcome.errors.append(f"{display}: a fix produced invalid code ({invalid}); file left unchanged")
            return outcome
        applied.extend(chosen)
        text = new_text
        before = result
        result = lint_source(
            SourceFile(source.path, text, source.encoding, source.bom, source.newline),
            rules,
            display,
            profile=profile,
        )
        for diagnostic, (first, last) in _fixed_along(chosen, before.diagnostics, result.diagnostics):
            applied.append(diagnostic)
            lines.append((original(first), original(last)))
    result.source = source
    return FixOutcome(result, text, len(applied), applied=applied, lines=lines)


def _fixed_along(
    chosen: list[Diagnostic], before: Sequence[Diagnostic], after: Sequence[Diagnostic]
) -> list[tuple[Diagnostic, tuple[int, int]]]:
    """The findings a written fix fixed with its own: each not written this round that the fix
    covers (`Fix.covers`) and gone once it is written (one fewer finding of its rule and message).
    Each comes with the covering fix in place of its own (the edit written) and that fix's first
    and last line."""
    left: Counter[tuple[str, str]] = Counter((d.code, d.message) for d in before)
    left.subtract((d.code, d.message) for d in after)
    found = []
    for diagnostic in before:
        key = (diagnostic.code, diagnostic.message)
        outer = _covering(chosen, diagnostic)
        if diagnostic in chosen or outer is None or left[key] <= 0:
            continue
        left[key] -= 1
        first = min(edit.line for edit in outer.edits)
        last = max(edit.end_line for edit in outer.edits)
        found.append((replace(diagnostic, fix=outer), (first, last)))
    return found


def _original_line(original: str, current: str) -> Callable[[int], int]:
    """Maps a line of `current` (`original` after earlier rounds of fixes) to the line of `original`
    it comes from: the same line where it is unchanged, else the first line of what it replaced."""
    if current == original:
        return lambda line: line
    old, new = original.splitlines(), current.splitlines()
    origin = [len(old) + 1] * (len(new) + 1)
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            origin[j] = i1 + (j - j1) + 1 if tag == "equal" else min(i1 + (j - j1), max(i1, i2 - 1)) + 1
    return lambda line: origin[min(line, len(new) + 1) - 1]


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? ")


def unified_diff(display: str, old: str, new: str, marks: Sequence[tuple[int, int, str]] = ()) -> str:
    """The diff from `old` to `new`. `marks` (`FixOutcome.marks`) name the fixes of each hunk after
    its `@@` range, where a section heading goes: `patch` and `git apply` read past it."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        f"a/{display.lstrip('/')}",
        f"b/{display.lstrip('/')}",
    )
    out = []
    for line in lines:
        hunk = _HUNK.match(line) if marks else None
        if hunk is not None:
            start, count = int(hunk[1]), int(hunk[2] or 1)
            end = max(start, start + count - 1)
            names = sorted(
                {mark for first, last, mark in marks if first <= end and last >= start}, key=_least_safe
            )
            line = f"{line.rstrip()} {'; '.join(names)}\n" if names else line
        out.append(line if line.endswith(("\n", "\r")) else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _least_safe(mark: str) -> tuple[int, str]:
    """Unsafe fixes first: the first mark of a hunk says what applying it does."""
    return (not mark.startswith(UNSAFE), mark)


def write_atomic(
    source: SourceFile, new_text: str, *, was: str | None = None, roots: Sequence[Path] | None
) -> None:
    """Replace the file with `new_text` (`source.replace_file`): mode, owner, group, hard links,
    encoding, BOM and line endings (already in `new_text`) are kept. With `was` (the text the fix
    was made from), only if the file still holds it and may be written; with `roots`, only if it
    really lies inside them (else WriteRefused)."""
    expected = source.encode(was) if was is not None else None
    replace_file(source.path, source.encode(new_text), expected=expected, roots=roots)
