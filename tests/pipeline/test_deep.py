"""`amplint check --deep`: the candidates of the five incidents of CASES.md, in modules written as a
user would (tests/data/incidents), confirmed by traces of classes amplint finds and builds itself,
in the mode each project runs them in; and the pieces that make that: the classes found, the modes
a command-line target is traced in."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support import amplint_call, write

from amplint.pipeline.deep import model_classes
from amplint.report import ReportSummary, render

INCIDENTS = Path(__file__).resolve().parents[1] / "data" / "incidents"

# file -> (rule, line, the mode its project runs it in, whether the error is measured)
EXPECTED = {
    "rwkv_decay.py": ("AMP001", 22, "autocast-bf16", True),
    "qwen_eager_fp16.py": ("AMP002", 32, "cast-fp16", True),
    "v100_rmsnorm.py": ("AMP006", 14, "cast-fp16", True),
    "finetune_mask.py": ("AMP004", 18, "autocast-fp16", False),
    "gptq_sampling.py": ("AMP007", 18, "cast-fp16", True),
}


def _json(done: Any) -> list[dict[str, Any]]:
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)["diagnostics"]


@pytest.fixture(scope="module")
def incidents(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    pytest.importorskip("torch")
    project = tmp_path_factory.mktemp("incidents")
    for module in INCIDENTS.glob("*.py"):
        shutil.copy(module, project / module.name)
    write(project / "pyproject.toml", '[project]\nname = "incidents"\n')  # no [tool.amplint]
    done = amplint_call(project, "check", ".", "--deep", "--show-refuted", "--no-cache", "--format", "json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    return document["diagnostics"], document["summary"]


@pytest.mark.parametrize("file", sorted(EXPECTED))
def test_each_incident_is_confirmed_in_its_projects_mode(
    incidents: tuple[list[dict[str, Any]], dict[str, Any]], file: str
) -> None:
    found, _ = incidents
    code, line, mode, measured = EXPECTED[file]
    hits = [d for d in found if d["path"] == file and d["code"] == code and d["line"] == line]
    assert len(hits) == 1, [(d["code"], d["line"], d["confidence"]) for d in found if d["path"] == file]
    hit = hits[0]
    assert hit["confidence"] == "confirmed", hit.get("evidence")
    assert all(f"[{mode}]" in target for target in hit["targets"]), hit["targets"]
    if measured:
        assert 0 < hit["measured"]["max"] < 0.1
        assert "relative error max" in hit["evidence"]
        # A class built from its defaults has no real inputs or weights: the message says what ran.
        assert (
            "on inputs made up for the class built from its defaults and the weights it initialised"
            in (hit["evidence"])
        )


def test_no_true_finding_refuted_and_no_runtime_finding_a_real_run_would_not_show(
    incidents: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    found, _ = incidents
    assert [d for d in found if d["confidence"] == "refuted"] == []
    assert [d for d in found if d["code"] in {"AMP103", "AMP104", "AMP111"}] == []


def test_the_mask_cast_two_lines_on_is_followed(
    incidents: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    """The mask is built in float32 at its line: the trace follows it to the cast that makes it
    float16 (where -1e9 becomes -inf) instead of refuting it by the op on the line."""
    found, _ = incidents
    (mask,) = [d for d in found if d["code"] == "AMP004"]
    assert "ran in float32" in mask["evidence"]
    assert "`_to_copy` at finetune_mask.py:19 made it float16" in mask["evidence"]
    # The values replay measures what the cast does: -1e9 becomes -inf in about half of the mask.
    (overflow,) = [d for d in found if d["code"] == "AMP105"]
    assert (overflow["path"], overflow["line"]) == ("finetune_mask.py", 19)
    assert 0.4 < overflow["overflow"] < 0.6
    assert ".float()" not in overflow["help"]  # the cast's input is float32 already


def test_sampling_is_followed_back_to_the_probabilities(
    incidents: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    found, _ = incidents
    (sampling,) = [d for d in found if d["code"] == "AMP013"]
    assert sampling["confidence"] == "confirmed"
    assert "held in float16" in sampling["evidence"]


def test_the_summary_counts_per_file(incidents: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    _, summary = incidents
    confirmed = {"confirmed": 1, "refuted": 0, "unreached": 0, "not confirmed": 0}
    assert summary["traced"] == {
        "finetune_mask.py": confirmed,
        "gptq_sampling.py": {**confirmed, "confirmed": 2},  # AMP007 and AMP013
        "qwen_eager_fp16.py": confirmed,
        "rwkv_decay.py": confirmed,
        "v100_rmsnorm.py": confirmed,
    }


def test_the_text_summary_adds_up() -> None:
    traced = {
        "a.py": {"confirmed": 2, "refuted": 1, "unreached": 0, "not confirmed": 0},
        "b.py": {"confirmed": 0, "refuted": 0, "unreached": 3, "not confirmed": 1},
    }
    text = render("text", [], sources={}, color=False, summary=ReportSummary(traced=traced))
    assert "Traced 7 candidates in 2 files: 2 confirmed, 1 refuted, 3 unreached, 1 not confirmed." in text
    assert "  b.py: 0 confirmed, 0 refuted, 3 unreached, 1 not confirmed" in text


def test_a_file_no_mode_reaches_is_unreached_with_why(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code = (INCIDENTS / "qwen_eager_fp16.py").read_text(encoding="utf-8")
    write(tmp_path / "attention.py", code[: code.index("def generate")])  # no entry point: the caller's
    write(tmp_path / "pyproject.toml", '[project]\nname = "library"\n')
    args = [
        "check",
        ".",
        "--deep",
        "--show-conditional",
        "--extend-select",
        "AMP002",
        "--no-cache",
        "--format",
        "json",
    ]
    (finding,) = [d for d in _json(amplint_call(tmp_path, *args)) if d["code"] == "AMP002"]
    assert finding["confidence"] == "unreached"
    assert "nothing in the project runs this code in bf16/fp16" in finding["evidence"]


def test_an_opt_in_rules_unreached_candidate_is_neither_shown_nor_counted(tmp_path: Path) -> None:
    # AMP002 is off by default: --deep traces its candidates, but one no trace reaches stays as the
    # plain check left it (not made), so the traced counts leave it out too.
    pytest.importorskip("torch")
    code = (INCIDENTS / "qwen_eager_fp16.py").read_text(encoding="utf-8")
    write(tmp_path / "attention.py", code[: code.index("def generate")])  # no entry point: the caller's
    write(tmp_path / "pyproject.toml", '[project]\nname = "library"\n')
    done = amplint_call(
        tmp_path, "check", ".", "--deep", "--show-conditional", "--no-cache", "--format", "json"
    )
    document = json.loads(done.stdout)
    assert [d["code"] for d in document["diagnostics"] if d["code"] == "AMP002"] == []
    counted = document["summary"].get("traced", {})
    assert sum(sum(tally.values()) for tally in counted.values()) == 0, counted


def test_a_notebooks_candidates_are_unreached_with_why(tmp_path: Path) -> None:
    # Building a notebook's class would run the cells before it; the candidate says so, not that the
    # file has no model class.
    pytest.importorskip("torch")
    code = (INCIDENTS / "qwen_eager_fp16.py").read_text(encoding="utf-8")
    cell = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None}
    notebook = {
        "cells": [{**cell, "source": code[: code.index("def generate")].splitlines(keepends=True)}],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    write(tmp_path / "attention.ipynb", json.dumps(notebook))
    settings = '[tool.amplint]\nmodes = ["cast-fp16"]\nextend-select = ["AMP002"]\n'  # AMP002 is opt-in
    write(tmp_path / "pyproject.toml", f'[project]\nname = "nb"\n{settings}')
    found = _json(amplint_call(tmp_path, "check", ".", "--deep", "--no-cache", "--format", "json"))
    (finding,) = [d for d in found if d["code"] == "AMP002"]
    assert finding["confidence"] == "unreached"
    assert "a notebook's classes are not built" in finding["evidence"]


GATE = """\
import torch
import torch.nn.functional as F


def decay(f: torch.Tensor) -> torch.Tensor:
    g = F.logsigmoid(f)
    return 1 - torch.exp(g)
"""


@pytest.mark.parametrize(
    ("modes", "shown", "not_shown"),
    [
        ("", "All checks passed!", "1 conditional finding not shown"),  # AMP001's half rests on the caller
        ('modes = ["autocast-bf16"]\n', "Found 1 finding.", None),
    ],
)
def test_only_conditional_findings_are_counted_as_not_shown(
    tmp_path: Path, modes: str, shown: str, not_shown: str | None
) -> None:
    """--deep runs the opt-in rules too (AMP014 on `1 - exp`); those a trace does not confirm are
    left out as a plain check leaves them, not counted as conditional findings whose mode is
    missing."""
    pytest.importorskip("torch")
    write(tmp_path / "gate.py", GATE)
    write(tmp_path / "pyproject.toml", f'[project]\nname = "library"\n[tool.amplint]\n{modes}')
    done = amplint_call(tmp_path, "check", ".", "--deep", "--no-cache")
    assert shown in done.stdout, done.stdout + done.stderr
    assert "AMP014" not in done.stdout
    lines = [line for line in done.stdout.splitlines() if "not shown" in line]
    assert lines == (
        [
            f"{not_shown}: nothing in the project runs that code in bf16/fp16 (--show-conditional "
            "shows them; `modes` in [tool.amplint] says how a library is run)."
        ]
        if not_shown
        else []
    )


GUARDED = """\
import torch
import torch.nn.functional as F
from torch import nn


def on_device(x: torch.Tensor) -> None:
    if x.is_cuda:
        raise RuntimeError("this kernel needs a GPU build")


class Gate(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        g = F.logsigmoid(self.proj(x))
        on_device(g)
        return torch.exp(g)
"""


def test_a_trace_the_models_code_stops_says_where(tmp_path: Path) -> None:
    """A library's device guard (flash-linear-attention's opens a CUDA device context) stops the
    trace under emulated CUDA: the candidate stays unreached, and the reason names the line that
    raised, so that it does not read as amplint's own failure."""
    pytest.importorskip("torch")
    write(tmp_path / "gate.py", GUARDED)
    write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "library"\n[tool.amplint]\nmodes = ["autocast-bf16"]\n',
    )
    done = amplint_call(tmp_path, "check", ".", "--deep", "--no-cache", "--format", "json")
    (gate,) = [d for d in _json(done) if d["code"] == "AMP001"]
    assert gate["confidence"] == "unreached"
    said = "gate.py:8 in on_device() (module Gate) (RuntimeError: this kernel needs a GPU build)"
    assert said in gate["evidence"]
    assert said in done.stderr


def _gate(forward: str, imports: str = "") -> str:
    """A module with a `Gate` layer whose `forward` body is `forward` (`imports` after torch's)."""
    return (
        "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n" + imports + "\n\n"
        "class Gate(nn.Module):\n"
        "    def __init__(self, width: int = 8) -> None:\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(width, width)\n\n"
        "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n" + forward
    )


KERNEL_GATE = _gate(
    "        g = F.logsigmoid(self.proj(x))\n        return torch.exp(fused_scale(g))\n",
    "\nfrom kernels import fused_scale\n",
)


@pytest.mark.parametrize("replaced", [False, True])
def test_a_kernel_without_a_cpu_path_is_replaced_for_the_trace(tmp_path: Path, replaced: bool) -> None:
    """A layer calling a GPU-only kernel (flash-linear-attention's triton ops) is unreached on CPU;
    `replace` in [tool.amplint.runtime] swaps the kernel, for the trace only, for a reference."""
    pytest.importorskip("torch")
    write(tmp_path / "gate.py", KERNEL_GATE)
    write(
        tmp_path / "kernels.py",
        'def fused_scale(x):\n    raise RuntimeError("fused_scale is a triton kernel: it needs a GPU")\n',
    )
    write(tmp_path / "refs.py", "def scale_ref(x):\n    return x * 0.5\n")
    table = '[tool.amplint.runtime]\nreplace = { "gate.py:fused_scale" = "refs.py:scale_ref" }\n'
    write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "library"\n[tool.amplint]\nmodes = ["autocast-bf16"]\n'
        + (table if replaced else ""),
    )
    done = amplint_call(tmp_path, "check", ".", "--deep", "--no-cache", "--format", "json")
    (gate,) = [d for d in _json(done) if d["code"] == "AMP001"]
    if replaced:
        assert gate["confidence"] == "confirmed", gate.get("evidence")
        assert "relative error max" in gate["evidence"]
        # The swap is the trace's alone: the project's files are as they were.
        assert "raise RuntimeError" in (tmp_path / "kernels.py").read_text(encoding="utf-8")
    else:
        assert gate["confidence"] == "unreached"
        assert "fused_scale is a triton kernel" in gate["evidence"]


DEVICE_GUARD = _gate(
    "        torch.cuda.set_device(torch.cuda.current_device())\n"
    "        with torch.cuda.device(x.device.index), torch.cuda.device_of(x):\n"
    "            g = F.logsigmoid(self.proj(x))\n"
    "        torch.cuda.synchronize()\n"
    "        return torch.exp(g)\n"
)


def test_a_kernels_device_guard_runs_under_emulated_cuda(tmp_path: Path) -> None:
    """`with torch.cuda.device(x.device.index)` (flash-linear-attention's `input_guard` around each
    kernel) is refused by a CPU-only torch; under emulated CUDA it is the one device, always current."""
    pytest.importorskip("torch")
    write(tmp_path / "gate.py", DEVICE_GUARD)
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nmodes = ["autocast-bf16"]\n')
    done = amplint_call(tmp_path, "check", ".", "--deep", "--no-cache", "--format", "json")
    (gate,) = [d for d in _json(done) if d["code"] == "AMP001"]
    assert gate["confidence"] == "confirmed", gate.get("evidence")


def test_trace_takes_the_replacements_on_its_command_line(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    write(tmp_path / "gate.py", KERNEL_GATE)
    write(tmp_path / "kernels.py", 'def fused_scale(x):\n    raise RuntimeError("needs a GPU")\n')
    write(tmp_path / "refs.py", "def scale_ref(x):\n    return x * 0.5\n")
    write(
        tmp_path / "build.py",
        "import torch\nfrom gate import Gate\n\n\ndef factory():\n    return Gate(), (torch.randn(2, 8),)\n",
    )
    stopped = amplint_call(tmp_path, "trace", "build.py:factory")
    assert stopped.returncode == 2 and "needs a GPU" in stopped.stderr, stopped.stdout + stopped.stderr
    done = amplint_call(
        tmp_path, "trace", "build.py:factory", "--replace", "gate.py:fused_scale=refs.py:scale_ref"
    )
    assert done.returncode in (0, 1), done.stderr
    assert "log_sigmoid_forward" in done.stdout and "mul" in done.stdout
    wrong = amplint_call(tmp_path, "trace", "build.py:factory", "--replace", "gate.py:fused_scale")
    assert wrong.returncode == 2
    assert "--replace 'gate.py:fused_scale': the value '' is not MODULE:NAME" in wrong.stderr, wrong.stderr


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('replace = "refs.py:scale_ref"', "must be a table"),
        ('replace = { "fused_scale" = "refs.py:scale_ref" }', "the key 'fused_scale' is not MODULE:NAME"),
        ('replace = { "gate.py:fused_scale" = "refs.py" }', "the value 'refs.py' is not MODULE:NAME"),
    ],
)
def test_a_wrong_replace_table_is_refused_where_it_is_written(tmp_path: Path, table: str, said: str) -> None:
    write(tmp_path / "gate.py", "x = 1\n")
    write(tmp_path / "pyproject.toml", f"[tool.amplint.runtime]\n{table}\n")
    done = amplint_call(tmp_path, "check", ".", "--no-cache")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "pyproject.toml" in done.stderr and said in done.stderr, done.stderr


def test_a_replacement_that_does_not_resolve_names_the_entry(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    write(tmp_path / "gate.py", KERNEL_GATE)
    write(tmp_path / "kernels.py", "def fused_scale(x):\n    return x\n")
    write(
        tmp_path / "pyproject.toml",
        '[tool.amplint]\nmodes = ["autocast-bf16"]\n'
        '[tool.amplint.runtime]\nreplace = { "gate.py:fused_scale" = "refs.py:scale_ref" }\n',
    )
    done = amplint_call(tmp_path, "check", ".", "--deep", "--no-cache", "--format", "json")
    (gate,) = [d for d in _json(done) if d["code"] == "AMP001"]
    assert gate["confidence"] == "unreached"
    # Said as written in the configuration, not as amplint resolved it.
    said = "[tool.amplint.runtime] replace 'gate.py:fused_scale': target file "
    assert said in gate["evidence"] and "refs.py does not exist" in gate["evidence"], gate["evidence"]


FLOAT16_FACTORY = """\
import torch
from attention import AttentionConfig, EagerAttention


def factory():
    return EagerAttention(AttentionConfig()).half(), (torch.randn(1, 16, 64).half(),)
"""


@pytest.mark.parametrize(
    ("flags", "confidence"),
    [
        ((), "confirmed"),  # the factory's float16 model is run as it is, without autocast
        (("--mode", "cast-fp16"), "confirmed"),
        (("--param-dtype", "float16", "--no-autocast"), "confirmed"),
        (("--mode", "autocast-bf16"), "refuted"),
    ],
)
def test_a_command_line_target_takes_the_mode(
    tmp_path: Path, flags: tuple[str, ...], confidence: str
) -> None:
    pytest.importorskip("torch")
    code = (INCIDENTS / "qwen_eager_fp16.py").read_text(encoding="utf-8")
    write(tmp_path / "attention.py", code[: code.index("def generate")])
    write(tmp_path / "build.py", FLOAT16_FACTORY)
    write(tmp_path / "pyproject.toml", '[project]\nname = "library"\n')
    args = ["check", ".", "--confirm", "--target", "build.py:factory", *flags, "--show-refuted"]
    found = _json(amplint_call(tmp_path, *args, "--show-conditional", "--no-cache", "--format", "json"))
    (scores,) = [d for d in found if d["code"] == "AMP002"]
    assert scores["confidence"] == confidence, scores.get("evidence")
    # A float16 model has no bfloat16 to meet: no AMP104 made up by a bf16 autocast it never runs in.
    if confidence == "confirmed":
        assert [d for d in found if d["code"] == "AMP104"] == []


def test_mode_flags_conflict(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    write(tmp_path / "m.py", "x = 1\n")
    done = amplint_call(
        tmp_path, "check", "m.py", "--confirm", "--target", "m.py:f", "--mode", "cast-fp16", "--no-autocast"
    )
    assert done.returncode == 2
    assert "give --mode, or --dtype/--param-dtype/--no-autocast, not both" in done.stderr


NESTED = """\
from torch import nn
import transformers


class Norm(nn.Module):
    pass


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = Norm()


class Wrapped(Block):
    pass


class Helper:
    pass


class FooPreTrainedModel(transformers.PreTrainedModel):
    pass


class FooDecoderLayer(GradientCheckpointingLayer):
    def __init__(self, config):
        super().__init__()
        self.block = Block()


class FooModel(FooPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.layers = nn.ModuleList([FooDecoderLayer(config)])


class FooForCausalLM(FooPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = FooModel(config)


class FooForSequenceClassification(FooPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.model = FooModel(config)
"""


def test_model_classes_are_the_outermost_and_one_head_of_a_family() -> None:
    # Norm is built by Block, Block extended by Wrapped and built by the decoder layer (a module
    # through transformers' base), which FooModel builds, which the heads build; of the two heads
    # one is kept: they share the body.
    assert model_classes(NESTED) == ["Wrapped", "FooForCausalLM"]
    assert model_classes("class A:\n    pass\n") == []
    assert model_classes("def broken(:\n") == []


def test_the_deep_setting(tmp_path: Path) -> None:
    write(tmp_path / "m.py", (INCIDENTS / "rwkv_decay.py").read_text(encoding="utf-8"))
    write(tmp_path / "pyproject.toml", '[tool.amplint]\ndeep = "yes"\n')
    done = amplint_call(tmp_path, "check", "m.py", "--no-cache")
    assert done.returncode == 2
    assert "'deep' must be true or false" in done.stderr
    # `deep = true`, and --no-deep for one quick run: the static pass alone, nothing traced.
    write(tmp_path / "pyproject.toml", "[tool.amplint]\ndeep = true\n")
    quick = json.loads(
        amplint_call(tmp_path, "check", "m.py", "--no-cache", "--no-deep", "--format", "json").stdout
    )
    assert [d["confidence"] for d in quick["diagnostics"]] == ["static"]
    assert "traced" not in quick["summary"]


def test_deep_fix_is_verified_on_the_same_models(tmp_path: Path) -> None:
    """The fix leaves its file without candidates: it is judged by tracing the model the first
    check found again, not by an empty trace."""
    pytest.importorskip("torch")
    shutil.copy(INCIDENTS / "v100_rmsnorm.py", tmp_path / "v100_rmsnorm.py")
    write(tmp_path / "pyproject.toml", '[project]\nname = "served"\n')
    done = amplint_call(tmp_path, "check", ".", "--deep", "--fix", "--no-cache")
    assert done.returncode == 0, done.stderr
    assert (
        "amplint: fix v100_rmsnorm.py:14 AMP006: verified: the finding is gone and no new one appeared"
        in done.stderr
    )
    assert (
        "torch.promote_types(hidden_states.dtype, torch.float32)"
        in (tmp_path / "v100_rmsnorm.py").read_text()
    )


def test_trace_runs_a_float16_factory_as_built_and_takes_the_mode(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    code = (INCIDENTS / "qwen_eager_fp16.py").read_text(encoding="utf-8")
    write(tmp_path / "attention.py", code[: code.index("def generate")])
    write(tmp_path / "build.py", FLOAT16_FACTORY)
    plain = amplint_call(tmp_path, "trace", "build.py:factory", "--format", "json")
    assert plain.returncode in (0, 1), plain.stderr
    traced = json.loads(plain.stdout)
    assert traced["autocast"] is False
    assert any("holds float16 weights and no mode was given" in note for note in traced["notes"])
    assert [f for f in traced["findings"] if f["code"] == "AMP104"] == []
    moded = json.loads(
        amplint_call(
            tmp_path, "trace", "build.py:factory", "--mode", "autocast-bf16", "--format", "json"
        ).stdout
    )
    assert moded["autocast"] is True and moded["dtype"] == "bfloat16"


SOFTCAPPED = """\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, softcap=None):
        super().__init__()
        self.qkv = nn.Linear(64, 192)
        self.softcap = softcap

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        scores = torch.matmul(q, k.transpose(-1, -2)) * 0.125
        if self.softcap is not None:
            scores = torch.tanh(scores / self.softcap) * self.softcap
        return torch.softmax(scores, dim=-1) @ v


def factory():
    return Attention(SOFTCAP).half(), (torch.randn(2, 16, 64).half(),)
"""


@pytest.mark.parametrize(("softcap", "confidence"), [("None", "confirmed"), ("50.0", "refuted")])
def test_soft_capped_scores_cannot_turn_an_overflow_into_nan(
    tmp_path: Path, softcap: str, confidence: str
) -> None:
    # Gemma 2's soft-capping, `tanh(s / c) * c` between the product and the softmax, maps an inf
    # back to a finite value: the trace of a capped model refutes AMP002 and has no AMP109.
    pytest.importorskip("torch")
    write(tmp_path / "m.py", SOFTCAPPED.replace("SOFTCAP", softcap))
    write(tmp_path / "pyproject.toml", '[project]\nname = "library"\n')
    args = [
        "check",
        ".",
        "--confirm",
        "--target",
        "m.py:factory",
        "--extend-select",
        "AMP002",
        "--show-refuted",
    ]
    found = _json(amplint_call(tmp_path, *args, "--show-conditional", "--no-cache", "--format", "json"))
    (scores,) = [d for d in found if d["code"] == "AMP002"]
    assert scores["confidence"] == confidence, scores.get("evidence")
    if confidence == "refuted":
        assert "`tanh` at" in scores["evidence"] and "bounds them before the softmax" in scores["evidence"]
    assert bool([d for d in found if d["code"] == "AMP109"]) == (confidence == "confirmed")
