"""A finding is conditional (hidden unless `--show-conditional`) exactly when its message says that
its half dtype is the caller's choice: a rule marks the finding (`Finding.caller_only`) where it
writes `CALLER_CLAUSE`, and the runner reads the mark, not the wording."""

from __future__ import annotations

import ast
import inspect
import re
import sys
from pathlib import Path

import pytest

from amplint.diagnostics import Confidence
from amplint.rule import Rule
from amplint.rules import all_rules, rule_by_code
from amplint.rules.runner import lint_text
from amplint.source import WORD
from amplint.static.engine.interpret import HALF_SPELLINGS, half_only_by_caller
from amplint.static.facts import CALLER_CLAUSE
from amplint.static.profile import BOTH, CALLER, Mode, ModeWhy, Profile

MODE = ModeWhy(Mode("autocast", "bfloat16"), "train.py", 3, "torch.autocast(...)", (), "code")

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


RESTING_ON_HALF = [rule for rule in STATIC if rule.rests_on_half]
REAL_CODE = sorted((Path(__file__).parents[1] / "static" / "data" / "real").glob("*.py"))


def test_rules_resting_on_half_find_only_conditional_findings_in_caller_only_files() -> None:
    """The claim that lets a run hiding conditional findings skip these rules: in a file that no mode
    reaches and that spells no half dtype, cast or autocast (or spells them only where they make no
    value half), each of their findings rests on the caller. Tried on every example of theirs and on
    the real-code excerpts."""
    codes = [example.code for rule in RESTING_ON_HALF for example in (*rule.bad, *rule.good)]
    codes += [path.read_text(encoding="utf-8") for path in REAL_CODE]
    tried: dict[str, int] = {}
    for code in codes:
        if not half_only_by_caller(frozenset(WORD.findall(code)), code, CALLER, ast.parse(code)):
            continue
        for diagnostic in lint_text(code, RESTING_ON_HALF).diagnostics:
            assert diagnostic.confidence is Confidence.CONDITIONAL, (diagnostic.code, code)
            tried[diagnostic.code] = tried.get(diagnostic.code, 0) + 1
    assert len(tried) >= 5, tried  # not a claim tried on nothing


def test_the_rules_resting_on_half() -> None:
    assert {rule.code for rule in RESTING_ON_HALF} == {
        "AMP001", "AMP002", "AMP003", "AMP005", "AMP006", "AMP007", "AMP013", "AMP017"
    }  # fmt: skip
    assert set(RESTING_ON_HALF) <= set(WRITERS)


DECAY = "import torch\n\n\ndef decay(w):\n    return torch.log(torch.sigmoid(w)).cumsum(-1)\n"


@pytest.mark.parametrize(
    ("code", "profile", "runs"),
    [
        (DECAY, CALLER, False),
        (DECAY + "\n\ndef load(model):\n    return model.half()\n", CALLER, True),
        (
            DECAY + "\n\ndef is_half(x):\n    return x.dtype in (torch.float16, torch.bfloat16)\n",
            CALLER,
            False,
        ),
        (
            DECAY + "\n\ndef step(model, x):\n    with torch.autocast('cuda'):\n        return x\n",
            CALLER,
            True,
        ),
        (DECAY, Profile(BOTH, "configured"), True),
        (DECAY, Profile(frozenset({"bfloat16"}), "detected", modes=(MODE,)), True),
    ],
    ids=["caller only", "a cast", "a comparison", "autocast", "configured", "a mode"],
)
def test_a_run_hiding_conditional_findings_skips_rules_resting_on_half(
    code: str, profile: Profile, runs: bool
) -> None:
    rules = [rule_by_code("AMP001"), rule_by_code("AMP007"), rule_by_code("AMP008")]
    hidden = lint_text(code, rules, profile=profile, conditional=False)
    shown = lint_text(code, rules, profile=profile)
    assert shown.diagnostics  # the log-decay: AMP001, AMP007 or both
    assert hidden.unchecked is not runs
    if runs:
        assert hidden.diagnostics == shown.diagnostics
    else:
        assert hidden.diagnostics == []
        assert all(d.confidence is Confidence.CONDITIONAL for d in shown.diagnostics)


@pytest.mark.parametrize(
    ("code", "makes_half"),
    [
        ("if x.dtype == torch.float16:\n    x = x.float()\n", False),
        ("ok = x.dtype not in [torch.half, torch.bfloat16]\n", False),
        ("big = torch.finfo(torch.float16).max\n", False),
        ('def f(x):\n    """Runs in float16 or "bf16"."""\n', False),
        ("ok = precision == 'fp16'\n", False),
        ("y = x.half()\n", True),
        ("y = x.to(torch.bfloat16)\n", True),
        ("def f(x, dtype=torch.float16):\n    pass\n", True),
        ("dtypes = (torch.float16, torch.bfloat16)\n", True),
        ("y = torch.zeros(3, dtype='bf16')\n", True),
        ("from torch import float16\n", True),
        ("@cast(torch.float16)\ndef f(x):\n    return x\n", True),  # a decorator is above `def`'s line
        ("class A:\n    def f(self, x):\n        y = 1\n        return x.bfloat16()\n", True),
        ("import torch\rdef f(x):\r    return x.half()\r", True),  # lines that `\r` alone ends
        ("dtype = torch.float16 if x.dtype == torch.float16 else torch.float32\n", True),
    ],
)
def test_which_half_spellings_can_make_a_value_half(code: str, makes_half: bool) -> None:
    words = frozenset(WORD.findall(code))
    assert not words.isdisjoint(HALF_SPELLINGS)
    assert half_only_by_caller(words, code, CALLER, ast.parse(code)) is not makes_half
    assert not half_only_by_caller(words, code, CALLER)  # without the tree, any spelling counts
