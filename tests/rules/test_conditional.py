"""A finding is conditional (hidden unless `--show-conditional`) exactly when its message says that
its half dtype is the caller's choice: a rule marks the finding (`Finding.caller_only`) where it
writes `CALLER_CLAUSE`, and the runner reads the mark, not the wording."""

from __future__ import annotations

import inspect
import re
import sys

import pytest

from amplint.diagnostics import Confidence
from amplint.rule import Rule
from amplint.rules import all_rules
from amplint.rules.runner import lint_text
from amplint.static.facts import CALLER_CLAUSE

STATIC = [rule for rule in all_rules() if not rule.runtime_only]


def _source(rule: type[Rule]) -> str:
    return inspect.getsource(sys.modules[rule.__module__])


# The rules that can write the clause: through `why_half` or the constant itself.
WRITERS = [rule for rule in STATIC if re.search(r"\b(why_half|CALLER_CLAUSE)\b", _source(rule))]


@pytest.mark.parametrize("rule", WRITERS, ids=lambda rule: rule.code)
def test_a_finding_is_conditional_exactly_when_it_says_so(rule: type[Rule]) -> None:
    found = [d for example in rule.bad for d in lint_text(example.code, [rule]).diagnostics]
    assert found
    for diagnostic in found:
        says = CALLER_CLAUSE in diagnostic.message
        assert says == (diagnostic.confidence is Confidence.CONDITIONAL), diagnostic.message
    # Each of these rules documents at least one finding that rests on the caller's choice.
    assert any(d.confidence is Confidence.CONDITIONAL for d in found)


def test_the_writers_are_the_rules_that_reason_about_dtypes() -> None:
    assert {rule.code for rule in WRITERS} >= {"AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP007"}


def test_no_rule_spells_the_clause_out() -> None:
    for rule in STATIC:
        assert CALLER_CLAUSE not in _source(rule), rule.code


TRAINING_RUN = [rule for rule in STATIC if rule.training_run]


@pytest.mark.parametrize("rule", TRAINING_RUN, ids=lambda rule: rule.code)
def test_a_training_run_hazard_in_a_test_is_conditional(rule: type[Rule]) -> None:
    # A test runs a step or two: a GradScaler left out, optimizer state or a gradient reduction in
    # half costs nothing there (opacus' mixed-precision test casts its model on purpose; review 5).
    for example in rule.bad:
        in_code = lint_text(example.code, [rule], path="train.py").diagnostics
        in_test = lint_text(example.code, [rule], path="tests/test_train.py").diagnostics
        assert [d.line for d in in_code] == [d.line for d in in_test]
        assert all(d.confidence is Confidence.CONDITIONAL for d in in_test)
    shown = [d for ex in rule.bad for d in lint_text(ex.code, [rule], path="train.py").diagnostics]
    assert any(d.confidence is Confidence.STATIC for d in shown)


def test_the_training_run_rules() -> None:
    assert {rule.code for rule in TRAINING_RUN} == {"AMP009", "AMP016", "AMP020"}
