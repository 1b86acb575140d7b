"""`amplint check --confirm`: static findings joined to traced dtype graphs, and runtime-only rules."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import amplint_call, write

from amplint.diagnostics import Confidence, Diagnostic, Edit, Fix
from amplint.rule import CastPoint, RuntimeRule
from amplint.rules import all_rules, rule_by_code

pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"

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


# AMP001 is opt-in: these tests turn it on as a user would.
# The modules here run in their caller's dtype: their findings are conditional, asked for.
OPT_IN_AMP001 = "[tool.amplint]\nshow-conditional = true\n"


def _json(done) -> list[dict]:
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["diagnostics"]


def _copy_fixture(tmp_path: Path, name: str) -> Path:
    return Path(shutil.copy(FIXTURES / name, tmp_path / name))


def test_rwkv_sigmoid_confirmed_and_the_chain_found(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    done = amplint_call(
        tmp_path,
        "check",
        "rwkv7_time_mix.py",
        "--confirm",
        "--target",
        "rwkv7_time_mix.py:factory",
        "--extend-select",
        "AMP001",
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
    args = ["check", ".", "--confirm", "--target", target, "--show-conditional", "--format", "json"]
    found = _json(amplint_call(tmp_path, *args))
    # Neither AMP001 nor AMP101: the log-decay is float32 from `softplus` on, no late upcast. CPU
    # autocast keeps `softplus`, and so the recurrence's `exp` and `sum`, in bfloat16: what a CPU
    # test computes differs (AMP103).
    assert [(d["code"], d["line"]) for d in found] == [("AMP103", 52), ("AMP103", 67), ("AMP103", 69)]


@pytest.mark.parametrize(
    ("settings", "confidence", "evidence"),
    [
        ('autocast = false\nparam-dtype = "float16"', "confirmed", "formed the scores in float16"),
        ('dtype = "float16"', "confirmed", "formed the scores in float16"),
        ("", "refuted", "formed the scores in bfloat16, whose range is float32's"),
        ("autocast = false", "refuted", "formed the scores in float32"),
    ],
)
def test_qwen2_eager_scores(tmp_path: Path, settings: str, confidence: str, evidence: str) -> None:
    _copy_fixture(tmp_path, "qwen2_eager_attention.py")
    write(
        tmp_path / "pyproject.toml",
        "[tool.amplint]\nshow-conditional = true\n\n"
        f'[tool.amplint.runtime]\ntargets = ["qwen2_eager_attention.py:factory"]\n{settings}\n',
    )
    found = _json(amplint_call(tmp_path, "check", ".", "--confirm", "--show-refuted", "--format", "json"))
    amp002 = [d for d in found if d["code"] == "AMP002"]
    assert len(amp002) == 1
    assert amp002[0]["confidence"] == confidence
    assert evidence in amp002[0]["evidence"]


@pytest.mark.parametrize("model", [UPCAST_EARLIER, PROMOTED], ids=["upcast-earlier", "type-promotion"])
def test_sigmoid_already_float32_is_refuted_and_hidden(tmp_path: Path, model: str) -> None:
    write(tmp_path / "model.py", model)
    write(tmp_path / "pyproject.toml", OPT_IN_AMP001)
    static = _json(amplint_call(tmp_path, "check", "model.py", "--format", "json"))
    flagged = [d for d in static if d["code"] == "AMP001" and "sigmoid" in d["message"]]
    assert flagged, "the static pass flags the sigmoid"
    line = max(d["line"] for d in flagged if d["line"] < 20)
    args = ["check", "model.py", "--confirm", "--target", "model.py:factory", "--format", "json"]
    shown = _json(amplint_call(tmp_path, *args, "--show-refuted"))
    refuted = [d for d in shown if d["code"] == "AMP001" and d["line"] == line]
    assert refuted and refuted[0]["confidence"] == "refuted"
    assert "ran in float32" in refuted[0]["evidence"]
    hidden = _json(amplint_call(tmp_path, *args))
    assert not [d for d in hidden if d["code"] == "AMP001" and d["line"] == line]


def test_a_fix_whose_finding_the_trace_refutes_is_dropped(tmp_path: Path) -> None:
    """The sigmoid ran in float32: its upcast would change nothing for the better, so `--fix` leaves
    the line as it is and says why; the log names each fix at its line in the file as left."""
    path = write(tmp_path / "model.py", UPCAST_EARLIER)
    write(tmp_path / "pyproject.toml", OPT_IN_AMP001)
    args = ["check", "model.py", "--confirm", "--target", "model.py:factory"]
    done = amplint_call(tmp_path, *args, "--fix", "--unsafe-fixes")
    assert done.returncode in (0, 1), done.stderr
    log = [line for line in done.stderr.splitlines() if line.startswith("amplint: fix ")]
    assert "amplint: fix model.py:16 AMP001: dropped: the trace refuted its finding" in log
    text = path.read_text(encoding="utf-8")
    assert "    w = -math.exp(-0.5) * xw.sigmoid()\n" in text
    lines = text.splitlines()
    for entry in log:
        where = entry.split()[2]  # model.py:LINE
        assert 1 <= int(where.split(":")[1]) <= len(lines), entry


def test_a_finding_no_traced_op_came_from_is_unreached(tmp_path: Path) -> None:
    write(tmp_path / "model.py", UPCAST_EARLIER)
    write(tmp_path / "pyproject.toml", OPT_IN_AMP001)
    found = _json(
        amplint_call(
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
    write(tmp_path / "pyproject.toml", OPT_IN_AMP001)
    done = amplint_call(
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
    args += ["--show-conditional", "--modes", "autocast-bf16"]  # where AMP001 offers its upcast
    text = amplint_call(tmp_path, *args).stdout
    assert "= confirmed: `sigmoid` at rwkv7_time_mix.py:52 ran in bfloat16" in text
    github = amplint_call(tmp_path, *args, "--format", "github").stdout
    assert "%0Aconfirmed: `sigmoid` at rwkv7_time_mix.py:52 ran in bfloat16" in github
    sarif = json.loads(amplint_call(tmp_path, *args, "--format", "sarif").stdout)
    results = sarif["runs"][0]["results"]
    amp001 = next(r for r in results if r["ruleId"] == "AMP001")
    assert amp001["properties"]["confidence"] == "confirmed"
    assert "ran in bfloat16" in amp001["properties"]["amplint/evidence"]
    assert "[confirmed: " in amp001["message"]["text"]


def test_confirm_needs_a_target(tmp_path: Path) -> None:
    write(tmp_path / "model.py", PROMOTED)
    done = amplint_call(tmp_path, "check", "model.py", "--confirm")
    assert done.returncode == 2
    assert "--confirm needs a runtime target" in done.stderr


def test_bad_runtime_settings_are_named(tmp_path: Path) -> None:
    write(tmp_path / "model.py", PROMOTED)
    write(
        tmp_path / "pyproject.toml", '[tool.amplint.runtime]\ntargets = ["model.py:factory"]\ndtype = "fp8"\n'
    )
    done = amplint_call(tmp_path, "check", "model.py", "--confirm")
    assert done.returncode == 2
    assert "'dtype' must be one of 'bfloat16', 'float16', got 'fp8'" in done.stderr


# A rule that compares a trace with amplint.lock has pairs of models as examples: tests/lock/test_lock.py.
RUNTIME_RULES = [rule for rule in all_rules() if issubclass(rule, RuntimeRule) and not rule.compares_lock]


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
    # Run under bf16 autocast, as the fixture's training script runs it: there the `o_proj` Linear
    # casts the float32 decay's output itself, so AMP001 offers its upcast (without autocast it
    # would raise there, and AMP001 offers none).
    args = ["check", ".", "--confirm", "--target", "rwkv7_time_mix.py:factory", "--show-conditional"]
    args += ["--modes", "autocast-bf16"]
    done = amplint_call(tmp_path, *args, "--fix")
    assert done.returncode == 0, done.stderr
    # One fix (AMP001's; AMP101 at the same sigmoid asks for the same edit), reported on its own.
    assert done.stderr.splitlines() == [
        "amplint: fix rwkv7_time_mix.py:52 AMP001: verified: the finding is gone and no new one appeared"
    ]
    assert "self.w_lora(xw).to(torch.float32).sigmoid()" in path.read_text(encoding="utf-8")
    # AMP001 and AMP101 at the sigmoid, and AMP103 at `exp` and `sum`, whose inputs are now float32.
    assert _json(amplint_call(tmp_path, *args, "--format", "json")) == []


# A model cast to bfloat16 and run without autocast: the softmax fix keeps its `.to(scores.dtype)`;
# a sigmoid upcast would leave a float32 value that reaches the bf16 `out` projection, which raises.
PURE_BF16 = """\
import math

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(32, 32)
        self.k = nn.Linear(32, 32)
        self.w_lora = nn.Linear(32, 32)
        self.out = nn.Linear(32, 32)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-1, -2) * 0.17
        logp = torch.log_softmax(scores, dim=-1)
        w = -math.exp(-0.5) * self.w_lora(x).sigmoid()
        return self.out(x * w.exp()) + logp.mean()


def factory():
    torch.manual_seed(0)
    return Block(), (torch.randn(2, 8, 32),)
"""


def test_each_fix_is_judged_and_no_fix_that_would_raise_is_offered(tmp_path: Path) -> None:
    path = write(tmp_path / "block.py", PURE_BF16)
    write(
        tmp_path / "pyproject.toml",
        '[tool.amplint]\nshow-conditional = true\nextend-select = ["AMP003"]\n\n'
        '[tool.amplint.runtime]\ntargets = [{ target = "block.py:factory", dtype = "bfloat16", '
        'autocast = false, param-dtype = "bfloat16" }]\n',
    )
    found = _json(amplint_call(tmp_path, "check", ".", "--confirm", "--format", "json"))
    assert [(d["code"], d["line"], d["confidence"]) for d in found] == [
        ("AMP003", 17, "confirmed"),
        ("AMP001", 18, "confirmed"),
    ]
    done = amplint_call(tmp_path, "check", ".", "--confirm", "--fix")
    assert done.returncode == 0, done.stdout + done.stderr
    # A float32 weight would reach the `out` Linear, which runs here without autocast in bfloat16
    # and would raise: AMP001's fix is the chain's, cast back where the chain meets the Linear, and
    # the trace of the fixed model verifies it.
    assert done.stderr.splitlines() == [
        "amplint: fix block.py:17 AMP003: verified: the finding is gone and no new one appeared",
        "amplint: fix block.py:18 AMP001: verified: the finding is gone and no new one appeared",
    ]
    text = path.read_text(encoding="utf-8")
    assert "torch.log_softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))" in text
    assert "self.w_lora(x).to(torch.promote_types(x.dtype, torch.float32)).sigmoid()" in text
    # The log-probabilities meet the Linear's output in the sum returned: cast back there, so that the
    # block still returns bfloat16.
    assert "return (self.out((x * w.exp()).to(x.dtype)) + logp.mean()).to(scores.dtype)" in text
    assert "Fixed 2 findings, 0 remaining." in done.stdout


def _diagnostic(code: str, confidence: Confidence, line: int = 1, path: str = "model.py") -> Diagnostic:
    fix = Fix("upcast", (Edit(line, 1, line, 2, "x"),))
    return Diagnostic(code, "name", "message", path, line, 1, line, 2, confidence=confidence, fix=fix)


@pytest.mark.parametrize(
    ("after", "failed", "kept", "detail"),
    [
        ([], None, True, "verified: the finding is gone and no new one appeared"),
        ([("AMP003", 5)], None, True, "verified: the finding is gone and no new one appeared"),
        ([("AMP001", 3)], None, False, "rolled back: AMP001 is still confirmed after the fix"),
        ([("AMP102", 7)], None, False, "rolled back: the fixed code is confirmed to have AMP102 at line 7"),
        ([("AMP003", 4)], None, False, "rolled back: the fixed code is confirmed to have AMP003 at line 4"),
        ([], "model.py:factory: RuntimeError", False, "rolled back: the fixed code could not be traced"),
    ],
)
def test_a_fix_is_kept_only_when_the_trace_agrees(
    after: list[tuple[str, int]], failed: str | None, kept: bool, detail: str
) -> None:
    from amplint.pipeline.verify import _judge

    fix = _diagnostic("AMP001", Confidence.CONFIRMED, line=2)
    before = [
        fix,
        _diagnostic("AMP003", Confidence.CONFIRMED, line=4),
        _diagnostic("AMP001", Confidence.CONFIRMED, path="other.py"),
    ]
    now = [_diagnostic(code, Confidence.CONFIRMED, line=line) for code, line in after]
    # The fix added a line above line 2: lines 2.. moved down by one.
    lines = {1: 1, 2: 3, 3: 4, 4: 5}
    outcome = _judge(fix, before, now, lines, failed)
    assert (outcome.kept, outcome.detail.split(" (")[0]) == (kept, detail)


def test_a_fix_that_changes_what_the_model_returns_is_rolled_back() -> None:
    from amplint.pipeline.verify import _changed_outputs, _judge

    before = {"/p/model.py:factory": ["bfloat16", "int64"]}
    assert _changed_outputs(before, {"/p/model.py:factory": ["bfloat16", "int64"]}) is None
    changed = _changed_outputs(before, {"/p/model.py:factory": ["float32", "int64"]})
    assert changed == "model.py:factory returned bfloat16, int64, now float32, int64"
    fix = _diagnostic("AMP001", Confidence.CONFIRMED, line=2)
    outcome = _judge(fix, [fix], [], {2: 2}, None, changed=changed)
    assert not outcome.kept and outcome.detail.startswith(
        "rolled back: it changes the dtypes the model returns"
    )


def test_a_fix_the_trace_cannot_confirm_is_kept_unverified() -> None:
    from amplint.pipeline.verify import _judge

    fix = _diagnostic("AMP014", Confidence.STATIC)
    outcome = _judge(fix, [fix], [], {1: 1}, None)
    assert (
        outcome.kept
        and outcome.detail == "kept, not verified: the trace did not confirm the finding (static)"
    )


def test_trace_reports_the_runtime_findings(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    done = amplint_call(tmp_path, "trace", "rwkv7_time_mix.py:factory", "--op", "sigmoid", "--format", "json")
    assert done.returncode == 1, done.stderr  # findings, as `check` exits
    data = json.loads(done.stdout)
    assert [(f["code"], f["path"], f["line"], f["confidence"]) for f in data["findings"]] == [
        ("AMP101", "rwkv7_time_mix.py", 52, "confirmed")
    ]
    text = amplint_call(tmp_path, "trace", "rwkv7_time_mix.py:factory", "--op", "sigmoid").stdout
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
    # AMP001 and AMP014 on: AMP001 still cannot see the chain across the two methods.
    args += ["--extend-select", "AMP014", "--show-conditional"]
    found = _json(amplint_call(tmp_path, *args, "--format", "json"))
    assert not [d for d in found if d["code"] == "AMP001"]
    amp101 = next(d for d in found if d["code"] == "AMP101")
    assert amp101["line"] == 11 and amp101["fix"]["edits"][0]["content"] == (
        "self.proj(x).to(torch.float32).sigmoid()"
    )
    preview = amplint_call(tmp_path, *args, "--diff")
    assert "+        return self.proj(x).to(torch.float32).sigmoid()" in preview.stdout
    # AMP014's `log1p` fix is not applied on top: with the sigmoid upcast, the dtype-facts engine
    # follows `self.gate(x)` and sees `1 - p` in float32, where `log(1 - p)` loses nothing.
    assert "log1p" not in preview.stdout
    assert path.read_text(encoding="utf-8") == GATE
    done = amplint_call(tmp_path, *args, "--fix")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        "amplint: fix gate.py:11 AMP101: verified: the finding is gone and no new one appeared",
        "amplint: fix gate.py:14 AMP014: kept, not verified: the trace did not confirm the finding (conditional)",
    ]
    assert "return self.proj(x).to(torch.float32).sigmoid()" in path.read_text(encoding="utf-8")


# The chain starts with arithmetic on the product (`* temperature`), and ends at `cumsum`, which
# autocast runs with `dtype=float32`: the upcast goes on the product, before the multiplication.
SCALED = GATE.replace(
    "self.proj = nn.Linear(64, 64)", "self.proj = nn.Linear(64, 64)\n        self.temperature = 0.3"
)
SCALED = SCALED.replace("return self.proj(x).sigmoid()", "return (self.proj(x) * self.temperature).sigmoid()")
SCALED = SCALED.replace("return (1 - self.gate(x)).log()", "return self.gate(x).cumsum(-1)")


def test_the_cast_point_is_the_start_of_the_chain(tmp_path: Path) -> None:
    path = write(tmp_path / "gate.py", SCALED)
    args = ["check", "gate.py", "--confirm", "--target", "gate.py:factory"]
    # AMP001 (the sigmoid) and AMP007 (the cumsum) on: neither adds a fix of its own.
    args += ["--show-conditional"]
    amp101 = next(
        d for d in _json(amplint_call(tmp_path, *args, "--format", "json")) if d["code"] == "AMP101"
    )
    assert [(step["op"], step["line"]) for step in amp101["chain"]] == [
        ("mul", 12),
        ("sigmoid", 12),
        ("cumsum", 15),
    ]
    assert amp101["fix"]["edits"][0]["content"] == "self.proj(x).to(torch.float32) * self.temperature"
    done = amplint_call(tmp_path, *args, "--fix")
    assert done.stderr.splitlines() == [
        "amplint: fix gate.py:12 AMP101: verified: the finding is gone and no new one appeared"
    ]
    assert "return (self.proj(x).to(torch.float32) * self.temperature).sigmoid()" in path.read_text(
        encoding="utf-8"
    )


@pytest.mark.parametrize(
    ("expression", "operand", "fixed"),
    [
        ("h * self.scale", (6, None), "h.to(torch.promote_types(h.dtype, torch.float32)) * self.scale"),
        ("self.scale * (x @ self.w)", (7, 30), "self.scale * (x @ self.w).to(torch.float32)"),
        ("x @ self.w + h", (7, 16), "(x @ self.w).to(torch.float32) + h"),
    ],
    ids=["name-assigned-earlier", "right-operand", "left-product"],
)
def test_a_binary_cast_point_upcasts_the_low_precision_operand(
    tmp_path: Path, expression: str, operand: tuple[int, int | None], fixed: str
) -> None:
    from amplint.fixing.graph import upcast_fix
    from amplint.source import read_source

    # The operand's position is where the trace says its producer ran (1-based column).
    text = f"import torch\n\n\nclass M:\n    def forward(self, x):\n        h = x @ self.w\n        return {expression}\n"
    path = write(tmp_path / "m.py", text)
    op = "mul" if "*" in expression else "add"
    fix, _ = upcast_fix(read_source(path), [CastPoint(op, str(path), 7, 16, operand)])
    assert fix is not None and fix.edits[0].content == fixed


def test_a_static_fix_on_the_line_is_not_made_twice(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    args = ["check", "rwkv7_time_mix.py", "--confirm", "--target", "rwkv7_time_mix.py:factory"]
    args += ["--show-conditional", "--modes", "autocast-bf16"]  # where AMP001 offers its upcast
    found = _json(amplint_call(tmp_path, *args, "--format", "json"))
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
    from amplint.fixing.graph import upcast_fix
    from amplint.source import read_source

    source = read_source(write(tmp_path / "gate.py", text))
    fix, note = upcast_fix(source, [CastPoint("sigmoid", str(tmp_path / "gate.py"), 11)])
    assert fix is None and reason in note


def test_measurement_can_be_turned_off(tmp_path: Path) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    write(
        tmp_path / "pyproject.toml",
        OPT_IN_AMP001
        + '\n[tool.amplint.runtime]\ntargets = [{ target = "rwkv7_time_mix.py:factory", measure = false }]\n',
    )
    found = _json(amplint_call(tmp_path, "check", ".", "--confirm", "--format", "json"))
    amp001 = next(d for d in found if d["code"] == "AMP001")
    assert amp001["confidence"] == "confirmed" and "measured" not in amp001


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        ("0.01", "the trace did not finish within 0.01 s"),
        ('"long"', "'timeout' must be a positive number of seconds, got 'long'"),
    ],
    ids=["applied", "invalid"],
)
def test_the_configured_timeout_bounds_each_trace(tmp_path: Path, timeout: str, expected: str) -> None:
    _copy_fixture(tmp_path, "rwkv7_time_mix.py")
    write(
        tmp_path / "pyproject.toml",
        f'[tool.amplint.runtime]\ntargets = ["rwkv7_time_mix.py:factory"]\ntimeout = {timeout}\n',
    )
    done = amplint_call(tmp_path, "check", ".", "--confirm")
    assert expected in done.stderr
    # `--timeout` wins over the configured one.
    if timeout == "0.01":
        assert expected not in amplint_call(tmp_path, "check", ".", "--confirm", "--timeout", "300").stderr


def test_a_finding_that_a_kept_fix_covers_is_fixed_by_it(tmp_path: Path) -> None:
    """AMP001's fix of the RWKV chain covers AMP007's `cumsum` (`Fix.covers`). Written with the
    other fixes it is one hunk; judged one at a time (a refuted fix in the file rolls the others
    back to that), AMP007's own casts are not stacked on it once it is kept, and the log says which
    fix fixed that finding."""
    (example,) = [e for e in rule_by_code("AMP001").bad if "self.out(x * torch.exp(w.cumsum(1)))" in e.code]
    assert example.fixed is not None
    refuted = UPCAST_EARLIER.split("\n\n\nclass Decay")[1].split("\n\n\ndef unused")[0]
    tail = (
        f"\n\nclass Decay{refuted}\n\n\ndef factory():\n    torch.manual_seed(0)\n"
        "    return TimeMix(16).to(torch.bfloat16), (torch.randn(1, 64, 16, dtype=torch.bfloat16),)\n"
        "\n\ndef refuted():\n    return Decay(), (torch.randn(2, 64),)\n"
    )
    path = write(tmp_path / "model.py", "import math\n" + example.code.lstrip("\n") + tail)
    write(
        tmp_path / "pyproject.toml",
        '[tool.amplint]\nselect = ["AMP001", "AMP007"]\nprecision = "bf16"\n\n'
        '[tool.amplint.runtime]\ntargets = ["model.py:factory", "model.py:refuted"]\n',
    )
    done = amplint_call(tmp_path, "check", "model.py", "--confirm", "--fix", "--unsafe-fixes")
    assert done.returncode in (0, 1), done.stderr
    log = [line for line in done.stderr.splitlines() if line.startswith("amplint: fix ")]
    assert "amplint: fix model.py:13 AMP001: verified: the finding is gone and no new one appeared" in log, (
        log
    )
    assert "amplint: fix model.py:14 AMP007: fixed by the AMP001 fix kept before it" in log, log
    assert any("AMP001: dropped: the trace refuted its finding" in line for line in log), log
    assert path.read_text(encoding="utf-8") == "import math\n" + example.fixed.lstrip("\n") + tail
