"""`amplint check --confirm`: static findings joined to traced dtype graphs, and runtime-only rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import amplint_run, write

from amplint.diagnostics import Confidence, Diagnostic
from amplint.rules import all_rules

pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

UPCAST_EARLIER = """\
import math

import torch
from torch import nn


class Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)
        self.w0 = nn.Parameter(torch.zeros(64))

    def forward(self, x):
        xw = self.proj(x)
        xw = xw.to(self.w0.dtype)  # w0 is a float32 parameter: this is an upcast
        w = -math.exp(-0.5) * xw.sigmoid()
        return w.exp()


def unused(x):
    w = torch.sigmoid(x)
    return torch.exp(w)


def factory():
    return Decay(), (torch.randn(2, 64),)
"""

# A bf16 matmul output added to a float32 parameter: type promotion makes the sum float32.
PROMOTED = """\
import torch
from torch import nn


class Decay(nn.Module):
    def __init__(self):
        super().__init__()
        self.w0 = nn.Parameter(torch.zeros(64))
        self.w1 = nn.Parameter(torch.randn(64, 16))
        self.w2 = nn.Parameter(torch.randn(16, 64))

    def forward(self, x):
        w = -(self.w0 + torch.tanh(x @ self.w1) @ self.w2).sigmoid()
        return w.exp()


def factory():
    return Decay(), (torch.randn(2, 64),)
"""


def _json(done) -> list[dict]:
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["diagnostics"]


def _copy_fixture(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copy(FIXTURES / name, tmp_path / name))


def test_rwkv_sigmoid_confirmed_and_the_chain_found(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    done = amplint_run(
        tmp_path,
        "check",
        "rwkv7_time_mix.py",
        "--confirm",
        "--target",
        "rwkv7_time_mix.py:factory",
        "--format",
        "json",
    )
    found = _json(done)
    amp001 = [d for d in found if d["code"] == "AMP001"]
    assert len(amp001) == 1 and amp001[0]["line"] == 52
    assert amp001[0]["confidence"] == "confirmed"
    assert "`sigmoid` at rwkv7_time_mix.py:52 ran in bfloat16" in amp001[0]["evidence"]
    assert "reaches `exp` at rwkv7_time_mix.py:67" in amp001[0]["evidence"]
    assert amp001[0]["targets"] == [f"{tmp_path / 'rwkv7_time_mix.py'}:factory"]
    assert {(d["line"], d["cuda_dtype"], d["cpu_dtype"]) for d in found if d["code"] == "AMP103"} == {
        (67, "float32", "bfloat16"),  # exp of the bf16 log-decay
        (69, "float32", "bfloat16"),  # sum of the bf16 state
    }
    amp101 = [d for d in found if d["code"] == "AMP101"]
    assert len(amp101) == 1 and amp101[0]["line"] == 52 and amp101[0]["confidence"] == "confirmed"
    chain = amp101[0]["chain"]
    assert [step["op"] for step in chain] == ["sigmoid", "mul", "exp"]
    assert [step["line"] for step in chain] == [52, 52, 67]
    assert [step["dtype"] for step in chain] == ["bfloat16", "bfloat16", "float32"]
    # Measured on the factory's weights and inputs: two bf16 roundings (sigmoid, mul) before the
    # upcast, each at most 2^-8 of the value; the fix leaves float32 rounding only.
    for finding in (amp001[0], amp101[0]):
        measured = finding["measured"]
        assert 2.0**-9 < measured["max"] <= 2 * 2.0**-8
        assert 2.0**-12 < measured["mean"] < 2.0**-8
        assert measured["fixed_max"] < 2.0**-20
        assert "relative error max" in finding["evidence"]
    assert done.returncode == 1


def test_softplus_form_has_no_precision_chain(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix_softplus.py")
    target = "rwkv7_time_mix_softplus.py:factory"
    found = _json(amplint_run(tmp_path, "check", ".", "--confirm", "--target", target, "--format", "json"))
    # The log-decay is float32 from `softplus` on: no late upcast, and the recurrence computes the
    # same dtypes under CPU and CUDA autocast (the sigmoid form's `exp` and `sum` differ, below).
    assert [d["code"] for d in found] == []


@pytest.mark.parametrize(
    ("settings", "confidence", "evidence"),
    [
        ('autocast = false\nparam-dtype = "float16"', "confirmed", "formed the scores in float16"),
        ('dtype = "float16"', "confirmed", "formed the scores in float16"),
        ("", "refuted", "ran in bfloat16, whose range is float32's"),
        ("autocast = false", "refuted", "formed the scores in float32"),
    ],
)
def test_qwen2_eager_scores(tmp_path: Path, settings: str, confidence: str, evidence: str) -> None:
    _copy_fixture(tmp_path, "qwen2_eager_attention.py")
    write(
        tmp_path / "pyproject.toml",
        f'[tool.amplint.runtime]\ntargets = ["qwen2_eager_attention.py:factory"]\n{settings}\n',
    )
    found = _json(amplint_run(tmp_path, "check", ".", "--confirm", "--show-refuted", "--format", "json"))
    amp002 = [d for d in found if d["code"] == "AMP002"]
    assert len(amp002) == 1
    assert amp002[0]["confidence"] == confidence
    assert evidence in amp002[0]["evidence"]


@pytest.mark.parametrize("model", [UPCAST_EARLIER, PROMOTED], ids=["upcast-earlier", "type-promotion"])
def test_sigmoid_already_float32_is_refuted_and_hidden(tmp_path: Path, model: str) -> None:
    write(tmp_path / "model.py", model)
    static = _json(amplint_run(tmp_path, "check", "model.py", "--format", "json"))
    flagged = [d for d in static if d["code"] == "AMP001" and "sigmoid" in d["message"]]
    assert flagged, "the static pass flags the sigmoid"
    line = max(d["line"] for d in flagged if d["line"] < 20)
    args = ["check", "model.py", "--confirm", "--target", "model.py:factory", "--format", "json"]
    shown = _json(amplint_run(tmp_path, *args, "--show-refuted"))
    refuted = [d for d in shown if d["code"] == "AMP001" and d["line"] == line]
    assert refuted and refuted[0]["confidence"] == "refuted"
    assert "ran in float32" in refuted[0]["evidence"]
    hidden = _json(amplint_run(tmp_path, *args))
    assert not [d for d in hidden if d["code"] == "AMP001" and d["line"] == line]


def test_a_finding_no_traced_op_came_from_is_unreached(tmp_path: Path) -> None:
    write(tmp_path / "model.py", UPCAST_EARLIER)
    found = _json(
        amplint_run(
            tmp_path, "check", "model.py", "--confirm", "--target", "model.py:factory", "--format", "json"
        )
    )
    unused = [d for d in found if d["line"] == 21]  # `torch.sigmoid` in `unused`, never called
    assert [d["confidence"] for d in unused] == ["unreached"]


def test_a_target_that_fails_keeps_the_static_findings(tmp_path: Path) -> None:
    write(
        tmp_path / "model.py",
        UPCAST_EARLIER + "\n\ndef broken():\n    raise RuntimeError('no model today')\n",
    )
    done = amplint_run(
        tmp_path, "check", "model.py", "--confirm", "--target", "model.py:broken", "--format", "json"
    )
    assert done.returncode == 1
    assert "could not trace" in done.stderr and "no model today" in done.stderr
    found = json.loads(done.stdout)["diagnostics"]
    assert found and all(d["confidence"] == "static" for d in found)
    assert all("no model today" in d["confirmation"] for d in found)


def test_confirmation_shows_in_every_format(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    args = ["check", "rwkv7_time_mix.py", "--confirm", "--target", "rwkv7_time_mix.py:factory"]
    text = amplint_run(tmp_path, *args).stdout
    assert "= confirmed: `sigmoid` at rwkv7_time_mix.py:52 ran in bfloat16" in text
    github = amplint_run(tmp_path, *args, "--format", "github").stdout
    assert "%0Aconfirmed: `sigmoid` at rwkv7_time_mix.py:52 ran in bfloat16" in github
    sarif = json.loads(amplint_run(tmp_path, *args, "--format", "sarif").stdout)
    results = sarif["runs"][0]["results"]
    amp001 = next(r for r in results if r["ruleId"] == "AMP001")
    assert amp001["properties"]["confidence"] == "confirmed"
    assert "ran in bfloat16" in amp001["properties"]["amplint/evidence"]
    assert "[confirmed: " in amp001["message"]["text"]


def test_confirm_needs_a_target(tmp_path: Path) -> None:
    write(tmp_path / "model.py", PROMOTED)
    done = amplint_run(tmp_path, "check", "model.py", "--confirm")
    assert done.returncode == 2
    assert "--confirm needs a runtime target" in done.stderr


def test_bad_runtime_settings_are_named(tmp_path: Path) -> None:
    write(tmp_path / "model.py", PROMOTED)
    write(
        tmp_path / "pyproject.toml", '[tool.amplint.runtime]\ntargets = ["model.py:factory"]\ndtype = "fp8"\n'
    )
    done = amplint_run(tmp_path, "check", "model.py", "--confirm")
    assert done.returncode == 2
    assert "'dtype' must be one of 'bfloat16', 'float16', got 'fp8'" in done.stderr


RUNTIME_RULES = [rule for rule in all_rules() if rule.runtime_only]


@pytest.mark.parametrize(
    ("rule", "index", "bad"),
    [(rule, i, True) for rule in RUNTIME_RULES for i in range(len(rule.bad))]
    + [(rule, i, False) for rule in RUNTIME_RULES for i in range(len(rule.good))],
    ids=lambda value: getattr(value, "code", str(value)),
)
def test_runtime_rule_examples(tmp_path: Path, rule, index: int, bad: bool) -> None:
    from amplint.runtime.child import run_traced

    example = (rule.bad if bad else rule.good)[index]
    write(tmp_path / "example.py", example.code)
    spec = {
        "target": f"{tmp_path / 'example.py'}:factory",
        "device": "cuda",
        "dtype": "bfloat16",
        "autocast": True,
        "compare_cpu": True,  # as --confirm traces a target: AMP103 compares the two policies
        **rule.example_trace,
    }
    graph = run_traced(spec)
    findings = list(rule.check_graph(graph))
    assert bool(findings) == bad, [f.message for f in findings]


def test_fix_is_verified_by_tracing_again(tmp_path: Path) -> None:
    path = _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    done = amplint_run(tmp_path, "check", ".", "--confirm", "--fix", "--target", "rwkv7_time_mix.py:factory")
    assert done.returncode == 0, done.stderr
    # AMP001 and AMP101 at the sigmoid, and AMP103 at `exp` and `sum`, whose inputs are now float32.
    assert "fix rwkv7_time_mix.py: verified: 4 confirmed finding(s) gone, none new" in done.stderr
    assert "self.w_lora(xw).to(torch.float32).sigmoid()" in path.read_text(encoding="utf-8")


def _diagnostic(code: str, confidence: Confidence, path: str = "model.py") -> Diagnostic:
    return Diagnostic(code, "name", "message", path, 1, 1, 1, 2, confidence=confidence)


@pytest.mark.parametrize(
    ("before", "after", "kept", "detail"),
    [
        (["AMP001", "AMP101"], [], True, "verified: 2 confirmed finding(s) gone, none new"),
        (["AMP001"], ["AMP001"], False, "rolled back: AMP001 still confirmed after the fix"),
        (["AMP001"], ["AMP102"], False, "rolled back: the fixed code is confirmed to have AMP102"),
        ([], [], True, "kept, not verified: no finding in this file was confirmed by a trace"),
    ],
)
def test_a_fix_is_kept_only_when_the_trace_agrees(
    before: list[str], after: list[str], kept: bool, detail: str
) -> None:
    from amplint.verify import _judge

    was = [_diagnostic(code, Confidence.CONFIRMED) for code in before]
    was.append(_diagnostic("AMP003", Confidence.UNREACHED))
    was.append(_diagnostic("AMP001", Confidence.CONFIRMED, path="other.py"))
    now = [_diagnostic(code, Confidence.CONFIRMED) for code in after]
    outcome = _judge("model.py", was, now)
    assert (outcome.kept, outcome.detail) == (kept, detail)


def test_trace_reports_the_runtime_findings(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    done = amplint_run(tmp_path, "trace", "rwkv7_time_mix.py:factory", "--op", "sigmoid", "--format", "json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [(f["code"], f["path"], f["line"], f["confidence"]) for f in data["findings"]] == [
        ("AMP101", "rwkv7_time_mix.py", 52, "confirmed")
    ]
    text = amplint_run(tmp_path, "trace", "rwkv7_time_mix.py:factory", "--op", "sigmoid").stdout
    # The column of the call, as the static pass gives it (the live frame's position).
    assert "rwkv7_time_mix.py:52:31: AMP101 `sigmoid` output stays in bfloat16" in text


# The sigmoid and the log it feeds sit in two methods: no static rule sees the chain, the graph does.
GATE = """\
import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(64, 64)

    def gate(self, x):
        return self.proj(x).sigmoid()

    def forward(self, x):
        return (1 - self.gate(x)).log()


def factory():
    torch.manual_seed(0)
    return Gate(), (torch.randn(4, 64),)
"""


def test_the_graph_fixes_a_chain_the_static_pass_cannot_see(tmp_path: Path) -> None:
    path = write(tmp_path / "gate.py", GATE)
    args = ["check", "gate.py", "--confirm", "--target", "gate.py:factory"]
    found = _json(amplint_run(tmp_path, *args, "--format", "json"))
    assert not [d for d in found if d["code"] == "AMP001"]
    amp101 = next(d for d in found if d["code"] == "AMP101")
    assert amp101["line"] == 11 and amp101["fix"]["edits"][0]["content"] == (
        "self.proj(x).to(torch.float32).sigmoid()"
    )
    preview = amplint_run(tmp_path, *args, "--diff")
    assert "+        return self.proj(x).to(torch.float32).sigmoid()" in preview.stdout
    assert "+        return (-self.gate(x)).log1p()" in preview.stdout  # AMP014's static fix on top
    assert path.read_text(encoding="utf-8") == GATE
    done = amplint_run(tmp_path, *args, "--fix")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fix gate.py: verified:" in done.stderr
    assert "return self.proj(x).to(torch.float32).sigmoid()" in path.read_text(encoding="utf-8")


def test_a_static_fix_on_the_line_is_not_made_twice(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    args = ["check", "rwkv7_time_mix.py", "--confirm", "--target", "rwkv7_time_mix.py:factory"]
    found = _json(amplint_run(tmp_path, *args, "--format", "json"))
    assert next(d for d in found if d["code"] == "AMP001")["fix"] is not None
    assert next(d for d in found if d["code"] == "AMP101")["fix"] is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (GATE.replace("self.proj(x).sigmoid()", "torch.sigmoid(self.proj(x)).sigmoid()"), "exactly one"),
        (GATE.replace("self.proj(x).sigmoid()", "self.proj(x)"), "exactly one"),
        (GATE.replace("def gate(self, x):", "def gate(self, x:"), "does not parse"),
    ],
    ids=["two-calls", "call-gone", "broken"],
)
def test_no_graph_fix_where_the_line_no_longer_matches(tmp_path: Path, text: str, reason: str) -> None:
    from amplint.graph_fixes import upcast_fix
    from amplint.source import read_source

    source = read_source(write(tmp_path / "gate.py", text))
    fix, note = upcast_fix(source, 11, "sigmoid")
    assert fix is None and reason in note


def test_measurement_can_be_turned_off(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    write(
        tmp_path / "pyproject.toml",
        '[tool.amplint.runtime]\ntargets = [{ target = "rwkv7_time_mix.py:factory", measure = false }]\n',
    )
    found = _json(amplint_run(tmp_path, "check", ".", "--confirm", "--format", "json"))
    amp001 = next(d for d in found if d["code"] == "AMP001")
    assert amp001["confidence"] == "confirmed" and "measured" not in amp001
