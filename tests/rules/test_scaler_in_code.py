"""AMP009 looks for a loss scaler in the file's code, not in its comments or docstrings: a comment
that says "no GradScaler here" must not hide the missing scaler, and a scaler the code names keeps
the rule quiet wherever the file spells it."""

from __future__ import annotations

import pytest

from amplint.rules import all_rules
from amplint.rules.runner import lint_text

AMP009 = [rule for rule in all_rules() if rule.code == "AMP009"]

STEP = """
import torch


def train(model, loader, optimizer):
    {doc}
    {setup}
    for batch in loader:
        optimizer.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(**batch).loss
        {backward}
        optimizer.step()
"""


def _codes(doc: str = "pass", setup: str = "pass", backward: str = "loss.backward()") -> list[str]:
    text = STEP.format(doc=doc, setup=setup, backward=backward)
    return [d.code for d in lint_text(text, AMP009, "train.py").diagnostics]


@pytest.mark.parametrize(
    ("doc", "setup"),
    [
        ("pass", "pass  # TODO: add a GradScaler"),
        ('"""Train without a GradScaler: it is on the TODO list."""', "pass"),
        ("pass", "# grad_scaler = torch.amp.GradScaler('cuda')"),
    ],
    ids=["comment", "docstring", "commented-out"],
)
def test_a_scaler_named_only_in_prose_is_none(doc: str, setup: str) -> None:
    assert _codes(doc=doc, setup=setup) == ["AMP009"]


@pytest.mark.parametrize(
    ("setup", "backward"),
    [
        ('scaler = torch.amp.GradScaler("cuda")', "scaler.scale(loss).backward()"),
        ("from torch.amp import GradScaler", "loss.backward()"),
        ('scaler = getattr(model, "grad_scaler")', "loss.backward()"),
    ],
    ids=["call", "import", "string"],
)
def test_a_scaler_in_the_code_keeps_the_rule_quiet(setup: str, backward: str) -> None:
    assert _codes(setup=setup, backward=backward) == []
