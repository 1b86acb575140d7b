"""Execution modes, project-wide: entry points found where a project sets its precision, followed
across imports to the code they run; rules decide per mode; findings that rest on no mode are
conditional and hidden unless asked for."""

from __future__ import annotations

import json
import re
import shutil
from functools import partial
from pathlib import Path

import pytest
from support import amplint_run, flagged_places, write

from amplint.config import ConfigError, Settings, load_settings
from amplint.diagnostics import Confidence
from amplint.pipeline.check import run_check
from amplint.static.callers import call_lines, calls_of, float32_callees
from amplint.static.modes import index_modes, mode_named, role_of
from amplint.static.profile import AUTOCAST, CAST, Mode

# A package whose model a generation script runs in float16 and whose block a test runs under bf16
# autocast; `Policy` and `unused` are reached by nothing.
PROJECT = {
    "pyproject.toml": "[project]\nname = 'pkg'\n",
    "pkg/__init__.py": "from .model import GPT\n",
    "pkg/model.py": """\
import torch
from torch import nn
from .layers import Block, rms


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x):
        return rms(self.block(x))


class Policy(nn.Module):
    def forward(self, x):
        return torch.log_softmax(x, dim=-1)
""",
    "pkg/layers.py": """\
import torch
from torch import nn


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Block(nn.Module):
    def forward(self, x):
        return torch.log_softmax(x, dim=-1)


def unused(x):
    return torch.log_softmax(x, dim=-1)
""",
    "scripts/generate.py": """\
import torch
from pkg import GPT


def main():
    model = GPT().half()
    print(model(torch.randn(2, 3)))


if __name__ == "__main__":
    main()
""",
    "tests/test_block.py": """\
import torch
import pkg.layers as layers


def test_block():
    with torch.autocast("cuda", dtype=torch.bfloat16):
        layers.Block()(torch.randn(2))
""",
}


def _project(root: Path, files: dict[str, str] = PROJECT) -> Path:
    for name, text in files.items():
        write(root / name, text)
    return root


def _index(root: Path):  # type: ignore[no-untyped-def]
    files = sorted(p for p in root.rglob("*.py"))
    return index_modes(
        (p.relative_to(root).as_posix(), p.relative_to(root).as_posix(), p.read_bytes) for p in files
    )


def test_entries_are_followed_to_the_definitions_they_run(tmp_path: Path) -> None:
    found = _index(_project(tmp_path))
    assert {(why.path, why.line, why.mode.name, why.role) for why in found.entries} == {
        ("scripts/generate.py", 6, "cast-fp16", "code"),
        ("tests/test_block.py", 6, "autocast-bf16", "test"),
    }
    layers = found.definitions["pkg/layers.py"]
    # `GPT` from the package's `__init__` re-export, then `rms` and `Block` from its body.
    assert [why.describe() for why in layers["rms"]] == [
        "cast-fp16: `.half()` at scripts/generate.py:6 -> GPT -> rms"
    ]
    assert {why.mode.name for why in layers["Block"]} == {"cast-fp16", "autocast-bf16"}
    # `layers.Block` read through a module bound by `import pkg.layers as layers`.
    test_why = next(why for why in layers["Block"] if why.role == "test")
    assert test_why.via == ("Block",)
    assert "unused" not in layers
    assert set(found.definitions["pkg/model.py"]) == {"GPT"}  # `Policy`: nothing runs it
    # The function that holds a setting is the engine's to read, not a reached definition.
    assert "main" not in found.definitions.get("scripts/generate.py", {})


def test_relative_and_star_imports(tmp_path: Path) -> None:
    root = _project(
        tmp_path,
        {
            "a/__init__.py": "",
            "a/b/__init__.py": "from .c import *\n",
            "a/b/c.py": "def deep(x):\n    return x\n",
            "a/run.py": "from .b import deep\nimport torch\n\nwith torch.autocast('cuda', dtype=torch.bfloat16):\n    deep(torch.ones(2))\n",
        },
    )
    found = _index(root)
    assert [why.describe() for why in found.definitions["a/b/c.py"]["deep"]] == [
        "autocast-bf16: `torch.autocast('cuda', dtype=torch.bfloat16)` at a/run.py:4 -> deep"
    ]


def test_a_tensors_cast_is_no_execution_mode(tmp_path: Path) -> None:
    # `logits.bfloat16()` makes that value half (the engine follows it); the names used beside it do
    # not run in bf16 for it. A model's cast, a constructor's or `torch_dtype=` does set a mode.
    root = _project(
        tmp_path,
        {
            "lib.py": "def head(x):\n    return x\n",
            "run.py": "import torch\nfrom lib import head\n\n\ndef main(logits):\n    y = logits.bfloat16()\n    return head(torch.zeros(3, dtype=torch.float16))\n",
        },
    )
    found = _index(root)
    assert found.entries == [] and found.definitions == {}
    write(
        root / "run.py",
        "from lib import head\n\n\ndef main(model):\n    model.half()\n    return head(model)\n",
    )
    assert [why.mode.name for why in _index(root).definitions["lib.py"]["head"]] == ["cast-fp16"]


def test_names_in_docstrings_comments_and_annotations_are_not_followed(tmp_path: Path) -> None:
    # modalities 0.5.0's conversion casts the converted model only; its own model is named by the
    # function's return annotation and docstring, and a helper's parameter annotation.
    root = _project(
        tmp_path,
        {
            "models.py": "class Ours:\n    pass\n\n\nclass Theirs:\n    pass\n\n\nclass Config:\n    pass\n",
            "convert.py": """\
import torch
from models import Config, Ours, Theirs


def convert(config: dict) -> tuple[Theirs, Ours]:
    \"\"\"Returns the converted model and the original `Ours`.\"\"\"
    model = Theirs(Config()).to(dtype=torch.bfloat16)  # copied from an Ours
    copy(model, config)
    return model


def copy(
    theirs: Theirs,
    ours: "Ours",
    key=lambda item: Config(),
) -> None:
    theirs.load(ours)
""",
        },
    )
    reached = set(_index(root).definitions["models.py"])
    assert reached == {"Theirs", "Config"}


def test_a_docstring_or_comment_sets_nothing_and_a_def_inside_a_string_is_no_definition(
    tmp_path: Path,
) -> None:
    root = _project(
        tmp_path,
        {
            "m.py": '"""Run it with `model.half()`.\n\ndef fake():\n    pass\n"""\n# x.half()\ndef real(x):\n    return x\n',
        },
    )
    found = _index(root)
    assert found.entries == []
    assert not found.found


@pytest.mark.parametrize(
    ("name", "mode"),
    [
        ("autocast-bf16", Mode(AUTOCAST, "bfloat16", "cuda")),
        ("autocast-fp16:cpu", Mode(AUTOCAST, "float16", "cpu")),
        ("cast-fp16", Mode(CAST, "float16")),
    ],
)
def test_mode_names(name: str, mode: Mode) -> None:
    assert mode_named(name) == mode
    assert mode.name == name


def test_bad_mode_names_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        mode_named("bf16")
    with pytest.raises(ValueError, match="no device"):
        mode_named("cast-bf16:cpu")


@pytest.mark.parametrize(
    ("path", "role"),
    [
        ("tests/test_x.py", "test"),
        ("pkg/x_test.py", "test"),
        ("benchmarks/speed.py", "benchmark"),
        ("examples/train.py", "example"),
        ("pkg/train.py", "code"),
    ],
)
def test_roles(path: str, role: str) -> None:
    assert role_of(path) == role


def _check(root: Path, **overrides: object) -> list:  # type: ignore[type-arg]
    settings = load_settings([root]).with_overrides(**overrides)  # type: ignore[arg-type]
    return run_check([root], settings).diagnostics


def test_findings_follow_each_definitions_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    monkeypatch.chdir(root)
    found = {(d.path, d.line, d.code) for d in _check(root, select=["AMP003", "AMP006"])}
    # `rms` runs cast to float16 (generate.py): its mean of squares overflows. `Block` runs cast to
    # float16 too (log_softmax in half) and under bf16 autocast, where CUDA runs log_softmax in
    # float32. `Policy` and `unused` run in nothing the project shows: conditional, hidden.
    assert found == {("pkg/layers.py", 6, "AMP006"), ("pkg/layers.py", 11, "AMP003")}


def test_messages_name_the_mode_and_the_chain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_project(tmp_path))
    (rms,) = [d for d in _check(tmp_path, select=["AMP006"])]
    assert "which runs as cast-fp16: `.half()` at scripts/generate.py:6 -> GPT -> rms" in rms.message
    assert rms.confidence == Confidence.STATIC


def test_autocast_only_leaves_float32_ops_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = "import torch\n\n\ndef head(x):\n    return torch.log_softmax(x @ x.T, dim=-1)\n"
    root = _project(tmp_path, {"m.py": code})
    monkeypatch.chdir(root)
    assert _check(root, select=["AMP003"], modes=["autocast-bf16"]) == []
    (cast,) = _check(root, select=["AMP003"], modes=["cast-bf16"])
    assert cast.line == 5 and "`modes` in the configuration" in cast.message
    # CPU autocast keeps log_softmax in bfloat16: a hazard there.
    assert len(_check(root, select=["AMP003"], modes=["autocast-bf16:cpu"])) == 1


def test_a_float16_hazard_needs_a_float16_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "def pool(hidden_states, attention_mask):\n"
        "    expanded_mask = attention_mask.unsqueeze(-1).expand(hidden_states.shape).to(hidden_states.dtype)\n"
        "    return (hidden_states * expanded_mask).sum(1) / expanded_mask.sum(1).clamp_min(1e-9)\n"
    )
    root = _project(tmp_path, {"m.py": code})
    monkeypatch.chdir(root)
    assert _check(root, select=["AMP005"], modes=["cast-bf16"]) == []
    assert [d.code for d in _check(root, select=["AMP005"], modes=["cast-fp16"])] == ["AMP005"]


HEAD = "import torch\n\n\ndef head(x):\n    return torch.log_softmax(x, dim=-1)\n"
# The same file with a half dtype spelled in it, where it makes nothing the head reads half.
HEAD_AND_CAST = HEAD + "\n\ndef mask(n):\n    return torch.ones(n, dtype=torch.float16)\n"


@pytest.mark.parametrize(
    ("code", "hint"),
    [
        (HEAD, "1 file not checked for half-precision hazards: "),
        (HEAD_AND_CAST, "1 conditional finding not shown: "),
    ],
    ids=["nothing half in the file", "a half dtype spelled in the file"],
)
def test_no_mode_means_conditional_hidden_and_counted(tmp_path: Path, code: str, hint: str) -> None:
    """Where nothing in the file can make a value half, a plain check does not run the rules whose
    findings would all be conditional, and says how many files it left so; where something can, it
    runs them and counts the conditional findings it hides. The cache gives the same summary."""
    root = _project(tmp_path, {"pyproject.toml": "[tool.amplint]\n", "lib.py": code})
    for cache in ("--no-cache", "--cache-dir=.cache", "--cache-dir=.cache"):  # cold, written, warm
        quiet = amplint_run(root, "check", ".", cache, "--select", "AMP003")
        assert quiet.returncode == 0, quiet.stdout + quiet.stderr
        assert quiet.stdout.splitlines()[0] == "All checks passed!"
        (line,) = quiet.stdout.splitlines()[1:]
        assert line.startswith(hint), line
        assert "nothing in the project runs that code in bf16/fp16" in line
    shown = amplint_run(
        root, "check", ".", "--cache-dir=.cache", "--select=AMP003", "--show-conditional", "--format=json"
    )
    assert shown.returncode == 1
    (finding,) = json.loads(shown.stdout)["diagnostics"]
    assert finding["confidence"] == "conditional"
    assert "this holds when the caller runs it in" in finding["message"]


# Real-code excerpts laid out as small projects (each file's header names its source): with the
# defaults `amplint check` shows none of their findings; `--show-conditional` shows exactly the ones
# marked `# conditional: AMPnnn` at the end of their line, as conditional.
REAL_PROJECTS = Path(__file__).parent / "data" / "real_projects"
_CONDITIONAL_MARK = re.compile(r"#\s*conditional:\s*(AMP\d{3})\s*$")


def _copy_project(name: str, tmp_path: Path) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REAL_PROJECTS / name, root)
    return root


@pytest.mark.parametrize("name", sorted(p.name for p in REAL_PROJECTS.iterdir()))
def test_real_project_findings_are_conditional(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy_project(name, tmp_path)
    monkeypatch.chdir(root)
    marked = {
        (path.relative_to(root).as_posix(), number, mark.group(1))
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1)
        if (mark := _CONDITIONAL_MARK.search(line))
    }
    assert marked, f"{name}: no `# conditional:` mark"
    settings = load_settings([root])
    assert run_check([root], settings).diagnostics == []
    shown = run_check([root], settings.with_overrides(show_conditional=True)).diagnostics
    assert {(d.path, d.line, d.code) for d in shown} == marked
    assert {d.confidence for d in shown} == {Confidence.CONDITIONAL}


def test_a_test_only_mode_is_named_and_the_same_mode_in_code_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _copy_project("unsloth_zoo_autocast_in_tests_only", tmp_path)
    monkeypatch.chdir(root)
    settings = load_settings([root]).with_overrides(show_conditional=True)
    (finding,) = run_check([root], settings).diagnostics
    assert "at tests/test_grpo_logprob_recompute.py:26" in finding.message
    assert "in the project's tests only" in finding.message
    # The same autocast in the project's own code is how the project runs it: shown.
    script = root / "tests" / "test_grpo_logprob_recompute.py"
    script.rename(root / "unsloth_zoo" / "train.py")
    (shown,) = run_check([root], load_settings([root])).diagnostics
    assert shown.code == "AMP001" and shown.confidence == Confidence.STATIC


@pytest.mark.parametrize(
    ("run", "flagged"),
    [
        # A loader's dtype makes the model's new tensors half; the buffers made in float32 stay so.
        ("AutoModelForCausalLM.from_pretrained(name, torch_dtype=torch.bfloat16)", False),
        # Converting the built module converts its buffers too.
        ("LongRopeRotaryEmbedding(dim=64, short_factor=f, long_factor=f).to(torch.bfloat16)", True),
    ],
)
def test_float32_buffers_are_half_only_where_the_built_module_is_converted(
    run: str, flagged: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    excerpt = Path(__file__).parent / "data" / "real" / "unsloth_longrope_float32_buffers.py"
    script = (
        "import torch\nfrom transformers import AutoModelForCausalLM\n"
        "from pkg.llama import LongRopeRotaryEmbedding\n\n\n"
        # The cache method runs where the project names it (unsloth calls it as its rope grows).
        f"def main(name, f):\n    model = {run}\n    return model, LongRopeRotaryEmbedding._set_cos_sin_cache\n"
    )
    root = _project(
        tmp_path,
        {"pyproject.toml": "[project]\nname = 'pkg'\n", "pkg/__init__.py": "", "pkg/run.py": script},
    )
    shutil.copy(excerpt, root / "pkg" / "llama.py")
    monkeypatch.chdir(root)
    found = [(d.path, d.code) for d in _check(root, select=["AMP017"], show_conditional=True)]
    assert found == ([("pkg/llama.py", "AMP017")] if flagged else [])


def test_configured_modes_and_their_errors(tmp_path: Path) -> None:
    root = write(
        tmp_path / "pyproject.toml", '[tool.amplint]\nmodes = ["cast-bf16", "autocast-fp16"]\n'
    ).parent
    assert load_settings([root]).modes == ("cast-bf16", "autocast-fp16")
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nmodes = ["bf16"]\n')
    with pytest.raises(ConfigError, match="unknown mode 'bf16'"):
        load_settings([root])
    write(tmp_path / "pyproject.toml", "[tool.amplint]\n")
    run = amplint_run(tmp_path, "check", ".", "--modes", "fp16")
    assert run.returncode == 2 and "--modes" in run.stderr


def test_show_settings_lists_entries_and_chains(tmp_path: Path) -> None:
    root = _project(tmp_path)
    run = amplint_run(root, "check", "--show-settings", "pkg")
    assert run.returncode == 0, run.stderr
    assert "scripts/generate.py:6: cast-fp16 `.half()` (code)" in run.stdout
    assert "cast-fp16: `.half()` at scripts/generate.py:6 -> GPT (code)" in run.stdout


def test_a_changed_entry_point_checks_the_files_it_reaches_again(tmp_path: Path) -> None:
    root = _project(tmp_path)
    first = amplint_run(root, "check", "pkg", "--select", "AMP006", "--format", "json")
    assert len(json.loads(first.stdout)["diagnostics"]) == 1
    # The script now runs the model in bfloat16: `rms` no longer overflows (and the cache knows).
    write(root / "scripts/generate.py", PROJECT["scripts/generate.py"].replace(".half()", ".bfloat16()"))
    second = amplint_run(root, "check", "pkg", "--select", "AMP006", "--format", "json")
    (finding,) = json.loads(second.stdout)["diagnostics"]
    assert "cast-bf16" in finding["message"] and "float16 to inf" not in finding["message"]


def test_settings_default_to_found_modes() -> None:
    assert Settings().modes == () and Settings().show_conditional is False


# Real-code excerpts laid out as small projects whose modes decide a finding (each file's header
# names its source).
REAL_MODES = Path(__file__).parent / "data" / "real_modes"


def _real_modes_project(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "project"
    shutil.copytree(REAL_MODES / name, root)
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize(("device", "flagged"), [("cuda", False), ("cpu", True)])
def test_a_partial_of_autocast_gives_its_device_and_dtype(
    device: str, flagged: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # tabpfn binds `autocast = partial(torch.amp.autocast, device_type="cuda")` in one module and
    # enters `autocast(enabled=...)` in another: CUDA float16 autocast, under which softmax,
    # log_softmax and cumsum run in float32. Under CPU autocast they run in bfloat16.
    root = _real_modes_project("tabpfn_partial_autocast", tmp_path, monkeypatch)
    compat = root / "tabpfn" / "finetuning" / "_torch_compat.py"
    compat.write_text(compat.read_text().replace('device_type="cuda"', f'device_type="{device}"'))
    modes = {why.mode.name for why in _index(root).of("tabpfn/architectures/shared/bar_distribution.py")}
    assert modes == ({"autocast-fp16"} if device == "cuda" else {"autocast-fp16", "autocast-bf16:cpu"})
    found = {(d.line, d.code) for d in _check(root, show_conditional=True, extend_select=("AMP003",))}
    assert found == ({(15, "AMP007"), (21, "AMP003"), (26, "AMP003")} if flagged else set())


def test_a_float16_hazard_cites_the_float16_modes_evidence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Qwen2's eager attention under bf16 autocast and cast to float16: the scores overflow only in
    # float16, so the message cites the float16 cast, not the ops bf16 autocast runs in bf16.
    excerpt = Path(__file__).parent / "data" / "real" / "transformers_qwen2_eager_no_qk_norm.py"
    root = _project(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "pkg"\n\n[tool.amplint]\nmodes = ["autocast-bf16", "cast-fp16"]\n',
            "pkg/__init__.py": "",
        },
    )
    shutil.copy(excerpt, root / "pkg" / "modeling_qwen2.py")
    monkeypatch.chdir(root)
    (finding,) = _check(root, select=["AMP002"])
    assert "cast-fp16" in finding.message
    assert "in bf16 under autocast-bf16" not in finding.message
    assert not any("in bf16 under" in step["message"] for step in finding.extra.get("why", []))


def test_without_a_project_marker_only_the_paths_and_their_neighbours_are_read(tmp_path: Path) -> None:
    # A loose file in a big folder (downloads, /tmp): the modes pass reads the file and the files
    # beside it, not every folder below; a checked folder is read whole, as it is checked.
    model = "import torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n    def forward(self, x):\n"
    write(
        tmp_path / "loose" / "model.py", model + "        return x * torch.rsqrt(x.pow(2).mean(-1) + 1e-6)\n"
    )
    write(tmp_path / "loose" / "deep" / "go.py", "from model import Net\n\nmodel = Net().bfloat16()\n")
    alone = amplint_run(tmp_path / "loose", "check", "--show-settings", "model.py")
    assert alone.returncode == 0, alone.stderr
    assert "entry points: none" in alone.stdout and "go.py" not in alone.stdout
    write(tmp_path / "loose" / "run.py", "from model import Net\nmodel = Net().half()\n")
    beside = amplint_run(tmp_path / "loose", "check", "--show-settings", "model.py")
    assert "run.py:2: cast-fp16" in beside.stdout and "go.py" not in beside.stdout
    whole = amplint_run(tmp_path, "check", "--show-settings", "loose")
    assert "loose/deep/go.py:3: cast-bf16" in whole.stdout and "loose/run.py:2: cast-fp16" in whole.stdout


def test_evidence_of_several_modes_comes_in_one_order_whatever_the_hash_seed(tmp_path: Path) -> None:
    # Autocast states are a set: iterated as it stands, string hashing (random per process) would
    # order the steps, and the same check would print a different message from one run to the next.
    write(
        tmp_path / "model.py",
        "import torch\n\n\ndef decay(x, w):\n"
        "    gate = torch.sigmoid(torch.nn.functional.linear(x, w))\n"
        "    return torch.log(gate).cumsum(-1).exp()\n",
    )
    write(
        tmp_path / "train.py",
        "import torch\n\nfrom model import decay\n\n\n"
        'def run_bf16(x):\n    with torch.autocast("cuda", dtype=torch.bfloat16):\n        return decay(x, x)\n\n\n'
        'def run_fp16(x):\n    with torch.autocast("cuda", dtype=torch.float16):\n        return decay(x, x)\n',
    )
    outputs = set()
    for seed in ("1", "5", "6"):
        run = amplint_run(tmp_path, "check", "--no-cache", "--exit-zero", env={"PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1
    (output,) = outputs
    bf16 = output.index("`linear` runs in bf16 under autocast-bf16")
    assert bf16 < output.index("`linear` runs in fp16 under autocast-fp16")


def test_a_losss_labels_and_a_handed_callable_are_no_half_activations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # nnunet's dice loss under float16 autocast: its labels come from the data and its `apply_nonlin`
    # is the softmax it is handed, so the sums its eps guards are float32. The variant's guard on
    # sigmoid outputs is float16 and flagged.
    root = _real_modes_project("nnunet_dice_loss_labels", tmp_path, monkeypatch)
    loss = root / "nnunet" / "training" / "loss_functions" / "dice_loss.py"
    expected = [
        number
        for number, line in enumerate(loss.read_text(encoding="utf-8").split("\n"), start=1)
        if line.endswith("# expect: AMP005")
    ]
    found = [(d.path, d.line) for d in _check(root, select=["AMP005"], show_conditional=True)]
    assert expected and found == [("nnunet/training/loss_functions/dice_loss.py", n) for n in expected]


def test_the_parameters_of_a_model_passed_in_are_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # wavegrad's learner autocasts to float16; the model its training function is given is never
    # cast, so the optimizer updates float32 weights. Cast in the training function, they are half.
    root = _real_modes_project("wavegrad_optimizer_of_passed_model", tmp_path, monkeypatch)
    assert _check(root, select=["AMP016"], show_conditional=True) == []
    learner = root / "src" / "wavegrad" / "learner.py"
    text = learner.read_text(encoding="utf-8")
    learner.write_text(
        text.replace("  opt = torch.optim.Adam(", "  model = model.half()\n  opt = torch.optim.Adam(")
    )
    (found,) = _check(root, select=["AMP016"], show_conditional=True)
    assert "`.half()` makes it fp16" in found.message


def test_a_class_runs_only_the_methods_its_callers_and_regions_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # flagai's Predictor decodes images under an autocast region in one method and samples text in
    # another; the trainer casts its model to float16 and hands it to a Predictor that only searches
    # beams. Neither runs the sampler, whose softmax findings rest on no mode of the project.
    root = _real_modes_project("flagai_predictor_methods", tmp_path, monkeypatch)
    sampler = "flagai/model/predictor/gpt.py"
    assert _index(root).of(sampler) == ()
    assert not [d for d in _check(root, select=["AMP003", "AMP013"]) if d.path == sampler]
    assert {(d.path, d.code) for d in _check(root, select=["AMP003", "AMP013"], show_conditional=True)} >= {
        (sampler, "AMP003"),
        (sampler, "AMP013"),
    }
    # The trainer's predictor samples: the float16 cast reaches the sampler through it.
    trainer = root / "flagai" / "env_trainer_v1.py"
    trainer.write_text(
        trainer.read_text().replace("predict_generate_beamsearch(", "predict_generate_randomsample(")
    )
    assert {why.mode.name for why in _index(root).of(sampler)} == {"cast-fp16"}
    found = [d for d in _check(root, select=["AMP003", "AMP013"]) if d.path == sampler]
    assert found and all("`self.model.half()` at flagai/env_trainer_v1.py" in d.message for d in found)
    # The autocast region samples: the region reaches the sampler.
    trainer.write_text(
        trainer.read_text().replace("predict_generate_randomsample(", "predict_generate_beamsearch(")
    )
    predictor = root / "flagai" / "model" / "predictor" / "predictor.py"
    predictor.write_text(
        predictor.read_text().replace(
            "x_samples_ddim = self.model.decode_first_stage(",
            "x_samples_ddim = self.predict_generate_randomsample(",
        )
    )
    assert {why.mode.name for why in _index(root).of(sampler)} == {"autocast-fp16"}


def test_an_outer_einsum_is_half_only_where_a_mode_autocasts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # exllamav2's rotary tables: float32 operands, an outer product. CUDA autocast would lower the
    # einsum; the project only casts its model to float16, under which float32 stays float32.
    excerpt = Path(__file__).parent / "data" / "real" / "exllamav2_rope_outer_einsum_without_autocast.py"
    root = _project(
        tmp_path, {"pyproject.toml": '[project]\nname = "exllamav2"\n', "exllamav2/__init__.py": ""}
    )
    shutil.copy(excerpt, root / "exllamav2" / "device.py")
    write(
        root / "exllamav2" / "load.py",
        "from exllamav2.device import ExLlamaV2DeviceContext\n\ndef load(model):\n    return ExLlamaV2DeviceContext(model.half(), 0, 0)\n",
    )
    monkeypatch.chdir(root)
    assert _check(root, select=["AMP017"], show_conditional=True) == []
    write(
        root / "train.py",
        "import torch\nfrom exllamav2.load import load\n\ndef main(model):\n    with torch.autocast('cuda', dtype=torch.bfloat16):\n        return load(model)\n",
    )
    (found,) = _check(root, select=["AMP017"])
    assert "under autocast-bf16" in found.message


def test_a_subclass_named_as_its_base_reaches_the_base(tmp_path: Path) -> None:
    # unitorch's command-line models subclass the library's model of the same name, imported under
    # another (`from ...kolors import KolorsMPSModel as _KolorsMPSModel`), and run its `forward`
    # under an autocast decorator: the base is another definition, though it shares the name.
    root = _project(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "pkg"\n',
            "pkg/__init__.py": "",
            "pkg/models/__init__.py": "from pkg.models.modeling import Model\n",
            "pkg/models/modeling.py": (
                "from torch import nn\n\n\nclass Model(nn.Module):\n"
                "    def forward(self, x):\n        return x\n"
            ),
            "pkg/cli.py": (
                "import torch\nfrom torch import autocast\nfrom pkg.models import (\n    Model as _Model,\n)\n\n\n"
                "class Model(_Model):\n"
                '    @autocast(device_type="cuda")\n'
                "    def forward(self, x):\n        return super().forward(x)\n"
            ),
        },
    )
    found = _index(root)
    assert [why.describe() for why in found.definitions["pkg/models/modeling.py"]["Model"]] == [
        'autocast-fp16: `autocast(device_type="cuda") (float16 by default)` at pkg/cli.py:9 -> Model'
    ]


def test_a_region_in_a_test_method_reaches_what_it_calls_not_its_base_class(tmp_path: Path) -> None:
    # A test case's autocast region runs the sampler it calls; its base class's fixtures (an
    # engine's launch) run outside it. The method's signature ends on a line of its own (`):`).
    root = _project(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "pkg"\n',
            "pkg/__init__.py": "",
            "pkg/engine.py": "def launch():\n    return 1\n",
            "pkg/sampler.py": "def sample(x):\n    return x\n",
            "tests/base.py": "from pkg.engine import launch\n\n\nclass Base:\n    def setUp(self):\n        launch()\n",
            "tests/test_sampler.py": (
                "import torch\nfrom pkg.sampler import sample\nfrom tests.base import Base\n\n\n"
                "class TestSampler(Base):\n    def test_sample(\n        self,\n    ):\n"
                '        with torch.autocast("cuda", dtype=torch.bfloat16):\n            sample(1)\n'
            ),
        },
    )
    found = _index(root)
    assert {why.mode.name for why in found.of("pkg/sampler.py")} == {"autocast-bf16"}
    assert found.of("pkg/engine.py") == ()


def test_a_loaded_model_keeps_the_buffers_made_in_float32(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # flagai's AutoLoader loads Aquila with `from_pretrained(..., torch_dtype=torch.float16)`: a load
    # casts the checkpoint's weights, but a buffer the model makes in float32 on purpose (the rotary
    # `inv_freq`, `.float()`) stays float32, in the base rotary class and in the two that inherit it.
    # `model.half()` after the load converts it, and then the angles are fp16.
    root = _real_modes_project("flagai_aquila_loaded_rotary", tmp_path, monkeypatch)
    modeling = "flagai/model/aquila2/modeling_aquila.py"
    reached = _index(root).definitions[modeling]
    assert {why.mode.name for why in reached["AquilaLinearScalingRotaryEmbedding"]} == {"cast-fp16"}
    assert not _check(root, select=["AMP017"], show_conditional=True)
    loader = root / "flagai" / "auto_model" / "auto_loader.py"
    loader.write_text(loader.read_text().replace("model.eval()", "model.half()"))
    found = _check(root, select=["AMP017"])
    assert [(d.path, d.line) for d in found] == [(modeling, 37), (modeling, 66), (modeling, 92)]
    assert all("`model.half()` at flagai/auto_model/auto_loader.py:" in d.message for d in found)


def test_a_package_checked_alone_resolves_imports_of_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `amplint check .` in a folder that holds only the package `pkg/`: `from pkg.model import GPT`
    # names the project's own file, so the cast in `pkg/run.py` reaches the model.
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "run.py").write_text("def main():\n    from pkg.model import GPT\n    GPT().half()\n")
    (tmp_path / "pkg" / "model.py").write_text(
        "import torch\n\n\nclass GPT(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.log_softmax(x, dim=-1)\n"
    )
    monkeypatch.chdir(tmp_path)
    found = _check(tmp_path, select=["AMP003"])
    assert [(d.path, d.code) for d in found] == [("pkg/model.py", "AMP003")]
    assert "`.half()` at pkg/run.py:3 -> GPT" in found[0].message


def test_a_grad_scaler_yields_to_the_projects_autocast_regions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # DeDoDe's training script makes a GradScaler; its encoder autocasts inside its own forward. The
    # scaler says float16 autocast runs somewhere, the region says where: the keypoint sampling the
    # script's detector also reaches runs outside it, so its `1e-10` guard rests on no mode.
    root = _real_modes_project("dedode_scaler_and_regions", tmp_path, monkeypatch)
    utils = "DeDoDe/utils.py"
    assert not _check(root, select=["AMP005"])
    assert [(d.path, d.code) for d in _check(root, select=["AMP005"], show_conditional=True)] == [
        (utils, "AMP005")
    ]
    # Without a region in the project, the scaler is the only evidence, and it is followed.
    encoder = root / "DeDoDe" / "encoder.py"
    encoder.write_text(
        encoder.read_text().replace(
            'with torch.autocast("cuda", enabled=self.amp, dtype=self.amp_dtype):', "if True:"
        )
    )
    found = _check(root, select=["AMP005"])
    assert [(d.path, d.code) for d in found] == [(utils, "AMP005")]
    assert "`torch.cuda.amp.GradScaler(...)` at experiments/dedode_detector.py:" in found[0].message


@pytest.mark.parametrize(
    "passed",
    ["vae: VAE)", "vae):\n        assert isinstance(vae, VAE)\n        if True"],
    ids=["annotated", "asserted"],
)
def test_a_region_reaches_a_module_the_class_is_given(
    passed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # parti-pytorch's trainer keeps the VAE it is given (`self.vae = vae`) and runs it under its
    # training step's autocast: the region reaches the VAE's class, named by the parameter's
    # annotation or an `isinstance` check.
    (tmp_path / "vae.py").write_text(
        "import torch\n\n\nclass VAE(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.log(x.sigmoid() + 1e-10)\n"
    )
    (tmp_path / "trainer.py").write_text(
        "import torch\nfrom vae import VAE\n\n\nclass Trainer:\n"
        f"    def __init__(self, {passed}:\n            self.vae = vae\n\n"
        "    def step(self, x):\n"
        "        with torch.autocast('cuda'):\n            return self.vae(x)\n"
    )
    monkeypatch.chdir(tmp_path)
    found = _check(tmp_path, select=["AMP005"])
    assert [(d.path, d.code) for d in found] == [("vae.py", "AMP005")]
    assert "`torch.autocast('cuda') (float16 by default)` at trainer.py:" in found[0].message
    assert found[0].message.endswith(" -> VAE")


def test_an_autocast_region_ends_with_its_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # easydetect's trainer runs the network under autocast (float16 where the GPU has no bfloat16:
    # the dtype is assigned over two lines) and the loss after the block, on outputs cast to
    # float32: the matcher's `1e-8` guards run outside the region.
    root = _real_modes_project("easydetect_loss_after_region", tmp_path, monkeypatch)
    loss = "easydetect/utils/loss.py"
    assert not _check(root, select=["AMP005"])
    assert {d.path for d in _check(root, select=["AMP005"], show_conditional=True)} == {loss}
    # The loss computed inside the block: the region reaches the matcher.
    trainer = root / "easydetect" / "trainer.py"
    text = trainer.read_text()
    inside = text.replace(
        "                    out = net(imgs, targets)       # targets feed the denoising queries\n",
        "                    out = net(imgs, targets)       # targets feed the denoising queries\n"
        "                    loss, logs = self.criterion(out, targets)\n",
    )
    assert inside != text
    trainer.write_text(inside)
    found = _check(root, select=["AMP005"])
    assert {d.path for d in found} == {loss}
    assert all("autocast-fp16: `torch.amp.autocast(self.device.type" in d.message for d in found)


def test_an_autocast_made_into_a_name_runs_the_blocks_that_enter_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # axiomlm's trainer makes `autocast_ctx = torch.autocast(...) if cuda else nullcontext()` and
    # enters it around the validation and training forwards; the live sampling between them runs
    # outside it, so the sampler's softmax rests on no mode. The model the blocks run is reached.
    root = _real_modes_project("axiomlm_context_entered_around_forwards", tmp_path, monkeypatch)
    sampler, model = "axiomlm/engine/inference.py", "axiomlm/models/transformer.py"
    found = _index(root)
    assert [why.mode.name for why in found.of(model)] == ["autocast-bf16"]
    assert found.of(sampler) == ()
    # Sampling inside a block that enters the name: the region reaches the sampler.
    train = root / "axiomlm" / "train.py"
    text = train.read_text()
    inside = text.replace(
        "                    logits, loss = model(x, y)\n",
        "                    logits, loss = model(x, y)\n"
        "                    generate_with_cache(model, enc, device)\n",
    )
    assert inside != text
    train.write_text(inside)
    assert [why.mode.name for why in _index(root).of(sampler)] == ["autocast-bf16"]


def test_a_region_in_a_method_runs_its_body_not_its_header(tmp_path: Path) -> None:
    # The autocast's own arguments (`dtype=self.amp_dtype`) run nothing under it: the helper that
    # picked the dtype in `__init__` is not reached, the network the body calls is.
    root = _project(
        tmp_path,
        {
            "helpers.py": "import torch\n\n\ndef pick_dtype():\n    return torch.bfloat16\n",
            "net.py": "import torch\n\n\nclass Net(torch.nn.Module):\n    pass\n",
            "trainer.py": (
                "import torch\nfrom helpers import pick_dtype\nfrom net import Net\n\n\nclass Trainer:\n"
                "    def __init__(self):\n        self.amp_dtype = pick_dtype()\n        self.net = Net()\n\n"
                "    def step(self, x):\n"
                "        with torch.autocast('cuda', dtype=self.amp_dtype):\n            return self.net(x)\n"
            ),
        },
    )
    found = _index(root)
    assert {why.mode.kind for why in found.of("net.py")} == {"autocast"}
    assert found.of("helpers.py") == ()


def test_a_model_cast_to_the_dtype_a_helper_resolves_runs_in_its_half_dtype(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bclm's loader casts the model with `.to(device=..., dtype=resolved_dtype)`, and the dtype comes
    # from `_resolve_dtype`, which gives bfloat16 on CUDA; the model class comes from a registry the
    # loader's lookup fills. The oscillator's angles `omega * t` are then computed from bf16
    # positions (the float32 `_t` buffer is cast with the model).
    root = _real_modes_project("bclm_dtype_from_helper_and_registry", tmp_path, monkeypatch)
    found = _check(root, select=["AMP017"])
    assert [(d.path, d.line) for d in found] == [("bclm/model.py", 25)]
    assert "`resolved_dtype` assigned on line 45 by `_resolve_dtype`" in found[0].message
    assert (
        "bclm/hf_loader.py:53 -> get_architecture -> _ensure_builtins -> _register_bclm1" in found[0].message
    )
    # A helper that only passes the caller's dtype on, or gives float32, sets no half mode.
    loader = root / "bclm" / "hf_loader.py"
    loader.write_text(loader.read_text().replace("return torch.bfloat16", "return torch.float32"))
    assert _index(root).entries == []
    assert not _check(root, select=["AMP017"])
    assert [d.line for d in _check(root, select=["AMP017"], show_conditional=True)] == [25]


@pytest.mark.parametrize(
    ("forward_opens_with", "flagged"),
    [
        ("        with torch.autocast(device_type='cuda', enabled=False):\n", False),
        ("        with torch.no_grad():\n", True),
    ],
    ids=["autocast-off", "autocast-on"],
)
def test_a_module_whose_forward_turns_autocast_off_runs_outside_the_region(
    forward_opens_with: str, flagged: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # flashdrr's benchmark renders under float16 and bfloat16 autocast, but `VolumeRaycaster.forward`
    # turns autocast off for its whole body: `apply_poisson`'s `1e-8` floor guards float32 there.
    root = _real_modes_project("flashdrr_forward_without_autocast", tmp_path, monkeypatch)
    raycast = root / "flashdrr" / "rendering" / "raycast.py"
    text = raycast.read_text()
    off = "        with torch.autocast(device_type='cuda', enabled=False):\n"
    assert text.count(off) == 1
    raycast.write_text(text.replace(off, forward_opens_with))
    found = _check(root, select=["AMP005"])
    assert [(d.path, d.line) for d in found] == ([("flashdrr/rendering/raycast.py", 286)] if flagged else [])
    if flagged:
        assert 'autocast-fp16: `torch.autocast(device_type="cuda")' in found[0].message


def test_a_parameter_every_call_in_other_files_passes_float32_is_float32(tmp_path: Path) -> None:
    # rwkvserve's sampler: its module never calls `sample`; the scheduler, in another file, passes
    # the model's logits upcast with `.to(torch.float32)`. Whatever the pipeline casts the model to,
    # the sampler's `1e-10` guards are float32.
    root = tmp_path / "project"
    shutil.copytree(REAL_MODES / "rwkvserve_sampler_callers_upcast", root)

    def flagged() -> set[int]:
        run = amplint_run(root, "check", ".", "--select", "AMP005", "--show-conditional", "--format", "json")
        return {d["line"] for d in json.loads(run.stdout)["diagnostics"]}

    scheduler = root / "rwkvserve" / "inference" / "scheduler_core.py"
    generator = root / "rwkvserve" / "inference" / "batch_generator.py"
    upcast = scheduler.read_text(encoding="utf-8")
    # A call in a docstring is no call; a comment naming it neither.
    generator.write_text(
        generator.read_text(encoding="utf-8")
        + '\n\ndef usage():\n    """>>> token, _ = TokenSampler.sample(logits)"""\n    # TokenSampler.sample(logits)\n'
    )
    assert flagged() == set()
    # Without the upcast, the cast model's logits reach the guards (and the cache knows the caller
    # changed, though the sampler did not).
    write(scheduler, upcast.replace("]).to(torch.float32)", "])"))
    assert flagged() == {123, 129}
    # Every call must pass float32: one more caller, in a third file, that passes the logits as
    # they come is enough to keep the finding.
    write(scheduler, upcast)
    assert flagged() == set()
    write(
        root / "rwkvserve" / "inference" / "engine.py",
        "from rwkvserve.inference.core import TokenSampler\n\n\n"
        "def step(model, x):\n    return TokenSampler.sample(model.head(x)[-1])\n",
    )
    assert flagged() == {123, 129}


def test_names_called_with_float32_values_and_their_calls_by_text() -> None:
    code = b"""\
logits = self.model.head(x[:, -1, :]).to(torch.float32)
token = self.sampler.sample(
    logits[i],
    temperature=t,
)
probs = scores(h.float(), dim=-1)
mixed = x.float() * 2
blend(mixed)
loss = module.training_step(batch.float())
out = Fn.backward(ctx, grad.to(dtype=torch.float32))
"""
    # `mixed` is no cast (the product is what it holds); hooks a framework calls are left out.
    assert float32_callees(code) == {"sample", "scores"}
    text = b'def sample(x):\n    """sample(x)"""\n    return sample(x)  # sample(y)\n'
    hidden = [(text.index(b'"""'), text.rindex(b'"""')), (text.index(b"#"), len(text))]
    lines = call_lines(text, calls_of(["sample"]), lambda at: any(a <= at < b for a, b in hidden))
    assert list(lines) == [("sample", 3)]


def test_a_demo_under_main_in_an_imported_module_is_an_example(tmp_path: Path) -> None:
    # transformers-stream-generator's module ends with a demo that loads bloom-560m in float16; the
    # package imports the module and runs it otherwise. A script nothing imports is the project's.
    sampler = """\
import torch


class Streamer:
    def sample(self, model, input_ids):
        probs = torch.softmax(model(input_ids).logits[:, -1], dim=-1)
        return torch.multinomial(probs, 1)


if __name__ == "__main__":
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained("bigscience/bloom-560m", torch_dtype=torch.float16)
    print(Streamer().sample(lm, torch.ones(1, 4, dtype=torch.long)))
"""
    root = _project(
        tmp_path,
        {
            "pyproject.toml": "[project]\nname = 'pkg'\n",
            "pkg/__init__.py": "",
            "pkg/generator.py": sampler,
            "pkg/api.py": "from .generator import Streamer\n\n\ndef speak(model, ids):\n    return Streamer().sample(model, ids)\n",
        },
    )
    (entry,) = _index(root).entries
    assert (entry.path, entry.line, entry.role) == ("pkg/generator.py", 13, "example")
    run = amplint_run(root, "check", ".", "--select", "AMP013", "--format", "json")
    assert json.loads(run.stdout)["diagnostics"] == []
    # Nothing imports it: the same file is a script, and its cast is how the project runs.
    (root / "pkg" / "api.py").unlink()
    (entry,) = _index(root).entries
    assert entry.role == "code"
    run = amplint_run(root, "check", ".", "--select", "AMP013", "--format", "json")
    assert [d["line"] for d in json.loads(run.stdout)["diagnostics"]] == [7]


def test_a_method_the_project_never_names_runs_in_no_mode(tmp_path: Path) -> None:
    # A class with bases: its framework calls its hooks, and the project calls the methods it names
    # (`.generate(`, wherever an instance went); one named nowhere else, or only in a comment, runs
    # nowhere, nor does what only it calls.
    root = _project(
        tmp_path,
        {
            "pkg/model.py": (
                "from torch import nn\nfrom pkg.util import sampler, helper\n\n\n"
                "class GPT(nn.Module):\n    def forward(self, x):\n        return x\n\n"
                "    def on_train_start(self):\n        pass\n\n"
                "    def generate(self, x):\n        return helper(x)\n\n"
                "    def infer(self, x):\n        return sampler(x)\n"
            ),
            "pkg/util.py": "def sampler(x):\n    return x\n\n\ndef helper(x):\n    return x\n",
            "scripts/run.py": (
                "from pkg.model import GPT\n\n\ndef main():\n    model = GPT().half()\n    go(model)\n\n\n"
                "def go(model):\n    # model.infer(x)\n    return model.generate(1)\n"
            ),
        },
    )
    found = _index(root)
    reached = {name for name, whys in found.definitions["pkg/util.py"].items() if whys}
    assert reached == {"helper"}
    assert found.definitions["pkg/model.py"]["GPT.infer"] == ()
    assert "GPT.generate" not in found.definitions["pkg/model.py"]  # its class's modes
    assert "GPT.on_train_start" not in found.definitions["pkg/model.py"]  # a Lightning hook
    write(root / "scripts" / "run.py", (root / "scripts" / "run.py").read_text().replace("# model", "model"))
    assert {name for name, whys in _index(root).definitions["pkg/util.py"].items() if whys} == {
        "helper",
        "sampler",
    }


def test_a_sampler_only_an_uncalled_method_reaches(tmp_path: Path) -> None:
    # gpt-sovits-python casts its text-to-semantic model to float16 and samples through
    # `infer_panel`; `topk_sampling` is called only by `infer`, whose one call is commented out.
    root = tmp_path / "project"
    shutil.copytree(REAL_MODES / "gpt_sovits_infer_never_called", root)

    shown = partial(flagged_places, root, "AMP013")

    assert shown() == set()
    assert shown("--show-conditional") == {("gpt_sovits_python/AR/models/utils.py", 24)}
    module = root / "gpt_sovits_python" / "AR" / "models" / "t2s_lightning_module.py"
    write(module, module.read_text().replace("        return\n", "        return self.model.infer(batch)\n"))
    assert shown() == {("gpt_sovits_python/AR/models/utils.py", 24)}


def test_each_handler_calls_its_own_sampling_method(tmp_path: Path) -> None:
    # p3gpt's two handlers each define `_load_model` and `_apply_sampling`. `self._apply_sampling`
    # in the SMILES handler is its own method, which filters the bfloat16 model's logits: no layer
    # whose output a guessed float16 autocast would make half, so nothing samples in float16.
    root = tmp_path / "project"
    shutil.copytree(REAL_MODES / "p3gpt_handlers_own_methods", root)
    handler = "p3gpt/handlers/p3_multimodal_handler.py"

    assert flagged_places(root, "AMP013", "--show-conditional") == set()
    assert flagged_places(root, "AMP007") == {(handler, 83)}  # the bfloat16 top-p `cumsum` stays
    # Its own method decides: where it returns float16, the sampler samples float16.
    path = root / handler
    text = path.read_text()
    own = text.index("    def _apply_sampling", text.index("class SMILESHandler"))
    write(path, text[:own] + text[own:].replace("inf_tensor)\n", "inf_tensor).half()\n", 1))
    assert flagged_places(root, "AMP013") == {(handler, 76)}
