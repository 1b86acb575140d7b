"""Every rule's bad and good examples are its tests: bad ones are flagged and fixed exactly as the
rule documents, good ones are not flagged."""

from __future__ import annotations

import pytest

from amplint.diagnostics import SAFE
from amplint.fixing.edits import fix_source
from amplint.rule import Bad, Good, Rule
from amplint.rules import all_rules
from amplint.rules.runner import lint_text
from amplint.source import LineIndex, decode_source

# Runtime-only rules' examples are models to trace: tests/fixing/test_confirm.py runs them.
STATIC = [rule for rule in all_rules() if not rule.runtime_only]
CASES = [(rule, i, ex) for rule in STATIC for i, ex in enumerate(rule.bad)]
GOOD = [(rule, i, ex) for rule in STATIC for i, ex in enumerate(rule.good)]


def _id(case: tuple[type[Rule], int, Bad | Good]) -> str:
    return f"{case[0].code}-{case[1]}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_bad_example_is_flagged_and_fixed(case: tuple[type[Rule], int, Bad], tmp_path) -> None:
    rule, _, example = case
    result = lint_text(example.code, [rule])
    found = [d for d in result.diagnostics if d.code == rule.code]
    assert found, result.diagnostics
    assert not result.internal_errors
    # The example's data pins each finding's range and message.
    assert [(d.line, d.column, d.end_line, d.end_column, d.message) for d in found] == [
        (e.line, e.column, e.end_line, e.end_column, e.message) for e in example.expect
    ]
    if example.fixed is None:
        assert all(d.fix is None for d in result.diagnostics)
        return
    source = decode_source(example.code.encode(), tmp_path / "example.py")
    # An example runs in its caller's dtype (its findings are conditional): fixed as --show-conditional does.
    outcome = fix_source(source, [rule], "example.py", unsafe=True, conditional=True)
    assert outcome.new_text == example.fixed
    # `--fix` alone applies it only when its fixes are safe.
    safe_only = fix_source(source, [rule], "example.py", conditional=True)
    safe = all(d.fix.applicability == SAFE for d in found if d.fix is not None)
    assert (safe_only.new_text == example.fixed) == safe
    assert not [d for d in lint_text(outcome.new_text, [rule]).diagnostics if d.code == rule.code]


@pytest.mark.parametrize("case", [case for case in CASES if case[2].fixed is not None], ids=_id)
def test_no_fix_writes_text_as_it_stands(case: tuple[type[Rule], int, Bad]) -> None:
    """Every edit of every fix (as JSON output, `--diff` and editors' code actions carry them)
    changes the text it replaces: a fix says which other findings it fixes too by `Fix.covers`,
    not by rewriting them unchanged. All rules run, as `check` runs them."""
    _, _, example = case
    lines = LineIndex(example.code)
    for diagnostic in lint_text(example.code, STATIC).diagnostics:
        for edit in diagnostic.fix.edits if diagnostic.fix is not None else ():
            start, end = lines.offset(edit.line, edit.column), lines.offset(edit.end_line, edit.end_column)
            assert edit.content != example.code[start:end], (diagnostic.code, edit)


@pytest.mark.parametrize("case", GOOD, ids=_id)
def test_good_example_is_not_flagged(case: tuple[type[Rule], int, Good]) -> None:
    rule, _, example = case
    result = lint_text(example.code, [rule])
    assert [d for d in result.diagnostics if d.code == rule.code] == []
    assert not result.internal_errors


def test_every_rule_documents_itself() -> None:
    for rule in all_rules():
        docs = rule.docs()
        for section in ("## What it does", "## Why is this bad?", "## Example", "## Fix"):
            assert section in docs, (rule.code, section)
        assert rule.bad and rule.good, rule.code
        assert rule.name == rule.name.lower() and " " not in rule.name
