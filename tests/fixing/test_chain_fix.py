"""Overlapping findings on one chain get one fix for the chain, not stacked casts.

On the RWKV decay `w = -0.6065 * self.w_lora(x).sigmoid()` that reaches a half consumer through
`torch.exp(w.cumsum(1))`, AMP001 flags the sigmoid and AMP007 the cumsum. The fix written is one
edit in RWKV7's form: upcast at the start, float32 through the accumulation, cast back once where
the chain meets its consumer (a Linear, a product with a half weight, the function's return).
Those three chains are AMP001's examples, which tests/rules/test_example_numerics.py runs before
and after the fix in every mode; here both rules run on them, through `fix_source` and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import amplint_run, write

from amplint.fixing.edits import fix_source
from amplint.rules import rule_by_code
from amplint.rules.runner import lint_text
from amplint.source import decode_source

AMP001, AMP007 = rule_by_code("AMP001"), rule_by_code("AMP007")
# AMP001's examples whose chain AMP007 flags too (at its `cumsum`).
CHAINS = [
    (i, example)
    for i, example in enumerate(AMP001.bad)
    if example.fixed is not None
    and any(d.code == "AMP007" for d in lint_text(example.code, [AMP007]).diagnostics)
]


def _fix(code: str, *, unsafe: bool = True):  # type: ignore[no-untyped-def]
    source = decode_source(code.encode(), Path("example.py"))
    return fix_source(source, [AMP001, AMP007], "example.py", unsafe=unsafe, conditional=True)


def test_the_chains_meet_each_consumer() -> None:
    """A Linear (`self.out`), the function's return and `@` with a weight in the model's dtype."""
    fixed = [example.fixed or "" for _, example in CHAINS]
    for consumer in (
        "return self.out((x * torch.exp(w.cumsum(1))).to(x.dtype))",
        "return torch.exp(w.cumsum(1)).to(x.new_empty(0).exp().dtype)",
        "return h.to(x.dtype) @ self.wo",
    ):
        assert sum(consumer in text for text in fixed) == 1, consumer


@pytest.mark.parametrize("case", CHAINS, ids=[f"AMP001-{i}" for i, _ in CHAINS])
def test_both_findings_get_the_one_fix_of_their_chain(case) -> None:  # type: ignore[no-untyped-def]
    _, example = case
    outcome = _fix(example.code)
    # The fix of AMP001 alone, which the example harness runs in every mode.
    assert outcome.new_text == example.fixed
    # An upcast and at most one cast back: no `dtype=` on the accumulation, no cast that does nothing.
    assert 1 <= outcome.new_text.count(".to(") - example.code.count(".to(") <= 2
    assert "dtype=" not in outcome.new_text
    assert [d.code for d in outcome.applied] == ["AMP001", "AMP007"]
    assert outcome.applied[0].fix == outcome.applied[1].fix
    assert outcome.result.diagnostics == []


ONE_LINE = """\
import torch
from torch import nn


class TimeMix(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w_lora = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        return self.out(x * torch.exp((-0.6065 * self.w_lora(x).sigmoid()).cumsum(1)))
"""


def test_the_chain_is_fixed_whole_when_its_accumulation_is_found_first() -> None:
    """On one line AMP007's `(...).cumsum(1)` starts before AMP001's sigmoid, and its finding comes
    first; the sigmoid is computed first, so its fix is, and AMP007's finding, gone with it,
    counts as fixed by it."""
    found = lint_text(ONE_LINE, [AMP001, AMP007]).diagnostics
    assert [d.code for d in found] == ["AMP007", "AMP001"]
    outcome = _fix(ONE_LINE)
    assert outcome.new_text == ONE_LINE.replace(
        "self.out(x * torch.exp((-0.6065 * self.w_lora(x).sigmoid()).cumsum(1)))",
        "self.out((x * torch.exp((-0.6065 * self.w_lora(x).to(torch.promote_types(x.dtype, torch.float32))"
        ".sigmoid()).cumsum(1))).to(x.dtype))",
    )
    assert [d.code for d in outcome.applied] == ["AMP001", "AMP007"]
    assert outcome.result.diagnostics == []


def test_the_one_line_chain_is_right_in_every_mode() -> None:
    torch = pytest.importorskip("torch")
    from amplint.runtime.modes import MODES, error, in_every_mode, judge

    def runs(code: str):  # type: ignore[no-untyped-def]
        namespace: dict[str, object] = {}
        exec(compile(code, "<chain>", "exec"), namespace)
        torch.manual_seed(0)
        mix = namespace["TimeMix"](16)  # type: ignore[operator]
        torch.nn.init.constant_(mix.w_lora.bias, -6.0)  # small decays that add up over the sequence
        x = torch.randn(2, 512, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        return in_every_mode(mix.double(), mix, {"x": x})

    before, after = runs(ONE_LINE), runs(_fix(ONE_LINE).new_text)
    reference = before["float64"].out
    assert reference is not None
    for mode in MODES:
        assert before[mode.name].raised is None and after[mode.name].raised is None, mode.name
        assert judge(mode, before[mode.name], after[mode.name], reference, safe=False) is None, mode.name
    assert after["float64"].out is not None and after["float64"].out[0].dtype == torch.float64
    bf16_before, bf16_after = before["bfloat16"].out, after["bfloat16"].out
    assert bf16_before is not None and bf16_after is not None
    assert error(bf16_after, reference) < error(bf16_before, reference)


# The case: the chain meets a bf16 `nn.Linear`, run without autocast and under it.
RWKV = next(example for _, example in CHAINS if "self.out(x * torch.exp(w.cumsum(1)))" in example.code)
MIXED = RWKV.code.replace("def forward(self, x):", "def forward(self, x, v):").replace(
    "self.out(x * torch", "self.out(v * torch"
)


def test_a_chain_mixed_with_another_tensor_keeps_the_accumulation_fix_alone() -> None:
    """`v * decay` has `v`'s dtype or wider: the dtype to cast back to is not known, so AMP001
    offers no fix, and AMP007's cast at once is written alone (no stacked casts either)."""
    found = {d.code: d for d in lint_text(MIXED, [AMP001, AMP007]).diagnostics}
    assert found["AMP001"].fix is None
    outcome = _fix(MIXED)
    assert [d.code for d in outcome.applied] == ["AMP007"]
    assert outcome.new_text.count(".to(") == 1


def test_diff_shows_one_hunk_and_fix_writes_the_composed_edit(tmp_path: Path) -> None:
    example = RWKV
    assert example.fixed is not None
    path = write(tmp_path / "time_mix.py", example.code.lstrip("\n"))
    select = ("--select", "AMP001,AMP007", "--precision", "bf16")
    diff = amplint_run(tmp_path, "check", *select, "--diff", "--unsafe-fixes", "time_mix.py")
    hunks = [line for line in diff.stdout.splitlines() if line.startswith("@@")]
    assert hunks == ["@@ -9,5 +9,5 @@ unsafe fix: AMP001; unsafe fix: AMP007"], diff.stdout + diff.stderr
    changed = [
        line for line in diff.stdout.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")
    ]
    assert changed == [
        "-        w = -0.6065 * self.w_lora(x).sigmoid()",
        "-        return self.out(x * torch.exp(w.cumsum(1)))",
        "+        w = -0.6065 * self.w_lora(x).to(torch.promote_types(x.dtype, torch.float32)).sigmoid()",
        "+        return self.out((x * torch.exp(w.cumsum(1))).to(x.dtype))",
    ]
    assert path.read_text(encoding="utf-8") == example.code.lstrip("\n")  # --diff writes nothing
    fixed = amplint_run(tmp_path, "check", *select, "--fix", "--unsafe-fixes", "--show-fixes", "time_mix.py")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "Fixed 2 findings, 0 remaining." in fixed.stdout
    assert path.read_bytes() == example.fixed.lstrip("\n").encode()
    assert [line.split(" (")[0] for line in fixed.stderr.splitlines()] == [
        "amplint: fixed time_mix.py:12:23 AMP001",
        "amplint: fixed time_mix.py:13:39 AMP007",
    ]


def test_json_carries_the_covered_finding_and_no_edit_that_writes_text_as_it_stands(tmp_path: Path) -> None:
    """AMP001's fix says that it fixes the `cumsum` AMP007 flags by `covers`, AMP007's range, and
    none of its edits rewrites the `cumsum` unchanged."""
    code = RWKV.code.lstrip("\n")
    write(tmp_path / "time_mix.py", code)
    select = ("--select", "AMP001,AMP007", "--precision", "bf16", "--no-cache")
    proc = amplint_run(tmp_path, "check", *select, "--format", "json", "time_mix.py")
    found = {d["code"]: d for d in json.loads(proc.stdout)["diagnostics"]}
    chain, accumulation = found["AMP001"]["fix"], found["AMP007"]
    span = {key: accumulation[key] for key in ("line", "column", "end_line", "end_column")}
    assert chain["covers"] == [span]
    lines = code.splitlines()
    for edit in chain["edits"]:
        assert edit["line"] == edit["end_line"]
        assert edit["content"] != lines[edit["line"] - 1][edit["column"] - 1 : edit["end_column"] - 1]
    assert accumulation["fix"]["covers"] == []
