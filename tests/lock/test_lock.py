"""The dtype lockfile: records of real traces, their text form, the comparison (AMP110) on realistic
edits, and `amplint lock` on the command line."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import amplint_call, write

from amplint.cli import main
from amplint.lock.diff import diff
from amplint.lock.file import Lockfile, LockfileError, Target, dumps, loads
from amplint.lock.record import record
from amplint.rule import GraphFinding, RuntimeRule
from amplint.rules import all_rules
from amplint.rules.amp110_dtype_change import DtypeChange
from amplint.runtime.graph import DtypeGraph

pytest.importorskip("torch")

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SIGMOID = (FIXTURES / "rwkv7_time_mix.py").read_text(encoding="utf-8")
SOFTPLUS = (FIXTURES / "rwkv7_time_mix_softplus.py").read_text(encoding="utf-8")
SIGMOID_LINE = "w = -math.exp(-0.5) * self.w_lora(xw).sigmoid()"
SETTINGS = {"device": "cuda", "dtype": "bfloat16", "autocast": "true", "param-dtype": "none"}

_traced: dict[tuple[str, str], DtypeGraph] = {}
_roots: dict[int, Path] = {}  # the directory each traced model.py was written to, by graph


def _trace(tmp_path: Path, source: str, factory: str = "factory") -> DtypeGraph:
    """The graph of `source` saved as model.py (the same file name before and after an edit, as in a
    repository), traced in this process; traces of the same text are shared between tests."""
    from amplint.runtime.child import run_traced

    key = (source, factory)
    if key not in _traced:
        directory = tmp_path / f"v{len(_traced)}"
        write(directory / "model.py", source)
        spec = {"target": f"{directory / 'model.py'}:{factory}", "device": "cuda", "dtype": "bfloat16"}
        _traced[key] = run_traced({**spec, "autocast": True})
        _roots[id(_traced[key])] = directory
    return _traced[key]


def _record(graph: DtypeGraph) -> Target:
    return record("model.py:factory", SETTINGS, graph, _roots[id(graph)])


def _check(
    tmp_path: Path, locked: str, changed: str, factory: tuple[str, str] = ("factory", "factory")
) -> list[GraphFinding]:
    """The AMP110 findings of `changed` checked against a lock written for `locked`, the lock going
    through its text form as it does on disk."""
    old = loads(dumps(Lockfile("0", "0", (_record(_trace(tmp_path, locked, factory[0])),)))).targets[0]
    graph = _trace(tmp_path, changed, factory[1])
    return list(DtypeChange.check_lock(diff(old, _record(graph)), graph))


def _edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new)


# The log-decay: case 1, both ways, and its fix.


def test_softplus_to_sigmoid_reports_the_log_decay_and_nothing_else(tmp_path: Path) -> None:
    (finding,) = _check(tmp_path, SOFTPLUS, SIGMOID)
    assert re.fullmatch(
        r"`RWKV7TimeMix`: the input of `exp` was float32 and is now bfloat16; produced by `sigmoid` at "
        r"\S+/model\.py:52, which autocast does not upcast \(it replaced `softplus`, which autocast ran in "
        r"float32\)",
        finding.message,
    ), finding.message
    assert finding.node.op == "sigmoid" and finding.node.source is not None and finding.node.source.line == 52


def test_sigmoid_to_softplus_reports_the_log_decay_back_in_float32(tmp_path: Path) -> None:
    (finding,) = _check(tmp_path, SIGMOID, SOFTPLUS)
    assert "the input of `exp` was bfloat16 and is now float32" in finding.message
    assert "produced by `softplus`" in finding.message and "which autocast runs in float32" in finding.message
    assert "(it replaced `sigmoid`, which autocast did not upcast)" in finding.message
    assert finding.node.source is not None and finding.node.source.line == 52


def test_upcast_before_the_sigmoid_passes_again(tmp_path: Path) -> None:
    fixed = _edit(SIGMOID, SIGMOID_LINE, "w = -math.exp(-0.5) * self.w_lora(xw).to(torch.float32).sigmoid()")
    assert _check(tmp_path, SOFTPLUS, fixed) == []


# Edits that change no dtype, alone and beside a real change.

INSERTED_OP = ("r = self.r_proj(xr)", "r = self.r_proj(xr) * self.head_dim**-0.5")
RENAMED = ("xw", "x_decay")
REORDERED = (
    "        k = self.k_proj(xk)\n        v = self.v_proj(xv)\n",
    "        v = self.v_proj(xv)\n        k = self.k_proj(xk)\n",
)
LONGER = ("torch.randn(2, 16, 256)", "torch.randn(2, 40, 256)")
MOVED = ("import torch\n", "import torch\n\n# A comment and blank lines move every line below.\n\n\n")


@pytest.mark.parametrize(
    "edit",
    [INSERTED_OP, RENAMED, REORDERED, LONGER, MOVED],
    ids=["inserted-op", "renamed-variable", "reordered-branches", "longer-sequence", "moved-lines"],
)
def test_edits_that_change_no_dtype_pass(tmp_path: Path, edit: tuple[str, str]) -> None:
    assert _check(tmp_path, SIGMOID, SIGMOID.replace(*edit)) == []


BRANCHES = """\
import torch
from torch import nn


class Gated(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        h = self.proj(x)
        gate = torch.sigmoid(h)
        energy = h.float().pow(2).mean(-1, keepdim=True)
        return gate * energy


def factory():
    return Gated(), (torch.randn(2, 32),)
"""


def test_reordered_branches_of_one_module_pass(tmp_path: Path) -> None:
    # The branches' ops swap places in the module's sequence: one aligns, the other is removed and
    # inserted, and its cast to float32 cancels out.
    reordered = _edit(
        BRANCHES,
        "        gate = torch.sigmoid(h)\n        energy = h.float().pow(2).mean(-1, keepdim=True)\n",
        "        energy = h.float().pow(2).mean(-1, keepdim=True)\n        gate = torch.sigmoid(h)\n",
    )
    assert _check(tmp_path, BRANCHES, reordered) == []
    # Without the upcast, the same reordering reports the energy's dtype, once.
    (finding,) = _check(tmp_path, BRANCHES, reordered.replace("h.float().pow(2)", "h.pow(2)"))
    assert finding.message == (
        "`Gated`: the input of `pow` was float32 and is now bfloat16; `_to_copy` at model.py:13 in the "
        "lock, a cast to float32, is gone"
    )


def test_the_regression_among_other_edits_is_the_only_finding(tmp_path: Path) -> None:
    changed = SOFTPLUS
    for edit in (INSERTED_OP, REORDERED, LONGER, MOVED):
        changed = _edit(changed, *edit)
    changed = _edit(changed, "w = -F.softplus(-self.w_lora(xw)) - 0.5", SIGMOID_LINE)
    changed = _edit(changed, "import torch\n", "import math\n\nimport torch\n")
    (finding,) = _check(tmp_path, SOFTPLUS, changed)
    assert "the input of `exp` was float32 and is now bfloat16; produced by `sigmoid`" in finding.message
    assert (
        finding.node.source is not None
        and finding.node.source.line == changed.splitlines().index("        " + SIGMOID_LINE) + 1
    )


def test_moving_code_leaves_the_record_unchanged(tmp_path: Path) -> None:
    before = _record(_trace(tmp_path, SIGMOID))
    after = _record(_trace(tmp_path, SIGMOID.replace(*MOVED)))
    assert before == after  # line numbers are comments, not identity
    assert dumps(Lockfile("0", "0", (before,))) != dumps(Lockfile("0", "0", (after,)))


# A transformers Qwen2: two identical layers are one entry; sdpa -> eager changes the score path.

QWEN2 = """\
import torch
import transformers


def build(attention):
    config = transformers.Qwen2Config(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    config._attn_implementation = attention
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(config).eval()
    return model, (), {"input_ids": torch.zeros(1, 16, dtype=torch.long), "use_cache": False}


def sdpa():
    return build("sdpa")


def eager():
    return build("eager")
"""


def test_qwen2_layers_are_one_entry_and_eager_attention_changes_the_score_path(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    locked = _record(_trace(tmp_path, QWEN2, "sdpa"))
    names = {module.name: module.size for module in locked.modules}
    assert names["model.layers.*.self_attn"] == 2 and "model.layers.0.self_attn" not in names
    assert names["model.layers.*.mlp"] == 2
    (finding,) = _check(tmp_path, QWEN2, QWEN2, ("sdpa", "eager"))
    assert finding.message.startswith("`model.layers.*.self_attn`: the rewritten code runs `bmm` bfloat16")
    assert "`_softmax` float32" in finding.message
    assert "where `zeros_like` bfloat16" in finding.message  # the sdpa path it replaced
    assert "`_scaled_dot_product_efficient_attention` bfloat16" in finding.message
    assert "bfloat16 to float32 at `add`" in finding.message  # the mask promotes the scores to float32
    assert finding.node.source is not None and finding.node.source.path.endswith("modeling_qwen2.py")


# Layers that differ, and a matmul that moved to float32.

LAYERS = """\
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self, upcast):
        super().__init__()
        self.proj = nn.Linear(32, 32)
        self.upcast = upcast

    def forward(self, x):
        h = self.proj(x)
        if self.upcast:
            with torch.autocast("cuda", enabled=False):
                h = h.float() @ self.proj.weight.float()
        return torch.tanh(h)


class Stack(nn.Module):
    def __init__(self, upcast):
        super().__init__()
        self.layers = nn.ModuleList(Layer(i in upcast) for i in range(4))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x).to(torch.bfloat16)
        return x


def same():
    return Stack(upcast=()), (torch.randn(2, 32),)


def third_in_float32():
    return Stack(upcast=(2,)), (torch.randn(2, 32),)
"""


def test_a_layer_that_differs_is_recorded_on_its_own(tmp_path: Path) -> None:
    same = {m.name: m.size for m in _record(_trace(tmp_path, LAYERS, "same")).modules}
    # The first projection reads the float32 input, which autocast casts; the others read bfloat16.
    assert same == {"layers.*": 4, "layers.0.proj": 1, "layers.*.proj": 3}
    third = {m.name: m.size for m in _record(_trace(tmp_path, LAYERS, "third_in_float32")).modules}
    assert third == {"layers.*": 3, "layers.2": 1, "layers.0.proj": 1, "layers.*.proj": 3, "Stack": 1}


def test_a_matmul_moved_to_float32_is_a_finding(tmp_path: Path) -> None:
    (finding,) = _check(tmp_path, LAYERS, LAYERS, ("same", "third_in_float32"))
    assert finding.message.startswith("`layers.2`: the input of `tanh` was bfloat16 and is now float32")
    assert "`mm` in float32 (model.py:15), slower than in the autocast dtype" in finding.message
    # Back: the lock names layers.2 on its own, the trace has four alike layers.
    (finding,) = _check(tmp_path, LAYERS, LAYERS, ("third_in_float32", "same"))
    assert finding.message == (
        "`layers.2`: the input of `tanh` was float32 and is now bfloat16; `_to_copy` at model.py:15 in "
        "the lock, a cast to float32, is gone"
    )


# The rule's own examples: `locked()` is what the lock records, `factory()` what is checked.


@pytest.mark.parametrize(
    ("source", "bad"),
    [(example.code, True) for example in DtypeChange.bad]
    + [(example.code, False) for example in DtypeChange.good],
)
def test_rule_examples(tmp_path: Path, source: str, bad: bool) -> None:
    found = _check(tmp_path, source, source, ("locked", "factory"))
    assert bool(found) == bad, [finding.message for finding in found]


def test_lock_rules_are_the_ones_tested_here() -> None:
    lock_rules = [rule.code for rule in all_rules() if issubclass(rule, RuntimeRule) and rule.compares_lock]
    assert lock_rules == ["AMP110"]


# The text form.


def test_the_lockfile_round_trips(tmp_path: Path) -> None:
    target = _record(_trace(tmp_path, SIGMOID))
    text = dumps(Lockfile("0.1.0", "2.13.0", (target,)))
    assert loads(text) == Lockfile("0.1.0", "2.13.0", (target,))
    assert "    repeat 15\n" in text  # the recurrence's steps after the first are one block
    assert "exp(bfloat16 as float32) -> float32 fp32  # model.py:67" in text
    assert "stack(float32, ...) -> float32 inherited" in text  # one input per step, any number of steps


HEADER = "format 1\namplint 0.1.0\ntorch 2.13.0\n\n"
TARGET = "target m.py:factory\n  device cuda\n  dtype bfloat16\n  autocast true\n  param-dtype none\n"


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("", 0, "ends before its `format` line"),
        ("format 1\namplint 0.1.0\ntorch\n", 3, "expected `torch VERSION`"),
        (
            "format 2\namplint 9.0\ntorch 3.0\n",
            1,
            "format 2, written by amplint 9.0; this amplint reads format 1: upgrade",
        ),
        (
            HEADER + TARGET + "  module M\n    exp(bfloat16 as) -> float32 fp32\n",
            11,
            "for an input, found 'bfloat16 as'",
        ),
        (
            HEADER + TARGET + "  module M\n    exp(float32) float32 fp32\n",
            11,
            "expected `OP(INPUTS) -> DTYPE POLICY",
        ),
        (HEADER + TARGET + "  module M\n      exp(float32) -> float32 fp32\n", 11, "unexpected indentation"),
        (
            HEADER + "target m.py:factory\n  device cuda\n  module M\n",
            7,
            "expected the target's `dtype` setting",
        ),
        (
            HEADER + TARGET + "  module M\n    repeat 3\n  module N\n",
            11,
            "a `repeat` block needs at least one op",
        ),
        (HEADER + TARGET + TARGET, 10, "target m.py:factory appears twice"),
    ],
)
def test_a_lockfile_that_does_not_parse_names_the_line(text: str, line: int, message: str) -> None:
    with pytest.raises(LockfileError) as raised:
        loads(text)
    assert raised.value.line == line
    assert message in raised.value.message


# `amplint lock` on the command line.

TINY = """\
import torch
from torch import nn


class Gate(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        return self.proj(x).exp()


def factory():
    return Gate(), (torch.randn(2, 16),)
"""


def _project(tmp_path: Path, source: str = TINY, targets: str = '["model.py:factory"]') -> Path:
    write(tmp_path / "model.py", source)
    write(tmp_path / "pyproject.toml", f"[tool.amplint.runtime]\ntargets = {targets}\n")
    return tmp_path / "amplint.lock"


def _unchanged(lock: Path) -> Callable[[], bool]:
    before = lock.read_bytes()
    return lambda: lock.read_bytes() == before


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def lock_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Done]:
    """`amplint lock ARGS` in tmp_path, in this process: each target is traced for real, here rather
    than in a child process, which would import torch again for every run."""
    from amplint.runtime import child

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(child, "trace_in_child", lambda spec, timeout: child.run_traced(spec))

    def run(*args: str) -> Done:
        code = main(["lock", *args])
        captured = capsys.readouterr()
        return Done(code, captured.out, captured.err)

    return run


def test_lock_and_check_in_a_child_process(tmp_path: Path) -> None:
    lock = _project(tmp_path)
    done = amplint_call(tmp_path, "lock")
    assert done.returncode == 0, done.stderr
    assert "wrote amplint.lock" in done.stderr
    assert "exp(bfloat16 as float32) -> float32 fp32  # model.py:11" in lock.read_text()
    write(tmp_path / "model.py", TINY.replace("self.proj(x).exp()", "self.proj(x).sigmoid()"))
    done = amplint_call(tmp_path, "lock", "--check", "--format", "github")
    assert done.returncode == 1
    assert (
        done.stdout.startswith("::warning file=model.py,line=11,")
        and "title=AMP110 dtype-change::" in done.stdout
    )


def test_lock_check_update_workflow(tmp_path: Path, lock_cli: Callable[..., Done]) -> None:
    lock = _project(tmp_path)
    assert lock_cli().returncode == 0
    done = lock_cli()
    assert done.returncode == 0 and "amplint.lock is up to date" in done.stderr
    assert lock_cli("--check").returncode == 0

    write(tmp_path / "model.py", TINY.replace("self.proj(x).exp()", "self.proj(x).sigmoid()"))
    unchanged = _unchanged(lock)
    done = lock_cli("--check")
    assert done.returncode == 1
    assert done.stdout.startswith(
        "model.py:11:16: AMP110 `Gate`: the rewritten code runs `sigmoid` bfloat16 (at model.py:11) where "
        "`exp` float32 (at model.py:11) ran; dtype changes no longer made: bfloat16 to float32 at `exp` "
        "(model.py:11)\n"
    )
    done = lock_cli()  # a write that would change the lock needs --update
    assert done.returncode == 1 and "amplint lock --update" in done.stderr and unchanged()
    for fmt in ("json", "sarif", "github"):
        report = lock_cli("--check", "--format", fmt).stdout
        assert "AMP110" in report and "sigmoid" in report, fmt
    assert unchanged()
    done = lock_cli("--update")
    assert done.returncode == 0 and "sigmoid(bfloat16) -> bfloat16 inherited" in lock.read_text()
    assert lock_cli("--check").returncode == 0


def test_one_target_under_two_settings(tmp_path: Path, lock_cli: Callable[..., Done]) -> None:
    entries = '[{ target = "model.py:factory" }, { target = "model.py:factory", dtype = "float16" }]'
    lock = _project(tmp_path, targets=entries)
    assert lock_cli().returncode == 0
    names = [line for line in lock.read_text().splitlines() if line.startswith("target ")]
    assert names == [
        "target model.py:factory [device=cuda dtype=bfloat16 autocast=true param-dtype=none]",
        "target model.py:factory [device=cuda dtype=float16 autocast=true param-dtype=none]",
    ]
    assert "addmm(float32 as float16, float32 as float16, float16) -> float16" in lock.read_text()
    assert lock_cli("--check").returncode == 0


def test_a_failed_trace_leaves_the_lock_untouched(tmp_path: Path, lock_cli: Callable[..., Done]) -> None:
    lock = _project(tmp_path)
    assert lock_cli().returncode == 0
    unchanged = _unchanged(lock)
    write(
        tmp_path / "model.py",
        TINY.replace("return Gate(),", "raise RuntimeError('no weights today')\n    return Gate(),"),
    )
    for args in (["--check"], ["--update"], []):
        done = lock_cli(*args)
        assert done.returncode == 2, done.stderr
        assert "could not trace model.py:factory; amplint.lock is left as it was" in done.stderr
        assert "no weights today" in done.stderr
    assert unchanged()


def test_versions_targets_and_settings_that_differ(tmp_path: Path, lock_cli: Callable[..., Done]) -> None:
    lock = _project(tmp_path, targets='["model.py:factory", "other.py:factory"]')
    write(tmp_path / "other.py", TINY)
    assert lock_cli().returncode == 0
    text = lock.read_text()
    # A lock from a newer torch and amplint; a target removed, one added, one with other settings.
    text = re.sub(r"^torch .*$", "torch 9.1.0", text, flags=re.M).replace("amplint 0.1.0", "amplint 0.9.0")
    write(lock, text.replace("  dtype bfloat16", "  dtype float16", 1))
    write(
        tmp_path / "pyproject.toml",
        '[tool.amplint.runtime]\ntargets = ["model.py:factory", "new.py:factory"]\n',
    )
    write(tmp_path / "new.py", TINY)
    done = lock_cli("--check", "--format", "json")
    assert done.returncode == 1, done.stderr
    assert "recorded with torch 9.1.0, this trace ran torch 2." in done.stderr
    assert "written by amplint 0.9.0, this is amplint 0.1.0" in done.stderr
    found = {(d["path"], d["line"], d["message"]) for d in json.loads(done.stdout)["diagnostics"]}
    lines = text.splitlines()
    assert found == {
        (
            "amplint.lock",
            lines.index("target model.py:factory") + 1,
            "target `model.py:factory` was recorded with other settings (dtype: float16 -> bfloat16)",
        ),
        ("amplint.lock", 1, "target `new.py:factory` is not in the lockfile yet"),
        (
            "amplint.lock",
            lines.index("target other.py:factory") + 1,
            "target `other.py:factory` is in the lockfile but no longer a runtime target",
        ),
    }
    # A target named on the command line is compared, and written, on its own; a new one is added
    # without --update.
    done = lock_cli("new.py:factory")
    assert done.returncode == 0 and "wrote amplint.lock" in done.stderr and done.stdout == ""
    assert [line for line in lock.read_text().splitlines() if line.startswith("target ")] == [
        "target model.py:factory",
        "target new.py:factory",
        "target other.py:factory",
    ]


def test_a_lockfile_from_a_newer_format_or_hand_edited_is_an_error(
    tmp_path: Path, lock_cli: Callable[..., Done]
) -> None:
    lock = _project(tmp_path)
    write(lock, "format 3\namplint 2.0.0\ntorch 3.0\n")
    done = lock_cli("--check")
    assert done.returncode == 2
    assert "amplint.lock:1: the lockfile is in format 3, written by amplint 2.0.0" in done.stderr
    write(lock, HEADER + TARGET + "  module Gate\n    exp(bfloat16 -> float32 fp32\n")
    unchanged = _unchanged(lock)
    done = lock_cli("--update")
    assert done.returncode == 2 and "amplint.lock:11: expected `OP(INPUTS) -> DTYPE POLICY" in done.stderr
    assert unchanged()
    lock.unlink()
    done = lock_cli("--check")
    assert done.returncode == 2 and "amplint.lock does not exist" in done.stderr
    assert lock_cli("--check", "--update").returncode == 2


def test_update_never_writes_a_lock_outside_the_project(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, lock_cli: Callable[..., Done]
) -> None:
    lock = _project(tmp_path)
    assert lock_cli().returncode == 0
    outside = tmp_path_factory.mktemp("outside") / "amplint.lock"
    lock.rename(outside)
    lock.symlink_to(outside)  # committed to the repository, leading out of it
    write(tmp_path / "model.py", TINY.replace("self.proj(x).exp()", "self.proj(x).sigmoid()"))
    unchanged = _unchanged(outside)
    done = lock_cli("--update")
    assert done.returncode == 2
    assert (
        f"amplint: error: amplint.lock: a symbolic link leads to {outside}, outside the checked folders"
        in (done.stderr)
    )
    assert unchanged() and lock.is_symlink()
