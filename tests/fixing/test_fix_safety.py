"""The helpers of `benchmarks/fix_safety.py` (docs/fix_safety.md) that decide what runs after a fix:
which lines it changed, which classes and functions of a module go through them, how a default
config is made tiny, and whether a run went through a fixed line."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fix_safety = _load("fix_safety")

# A model file as diffusers writes them: a norm the fix changed, the blocks that use it, a model
# that picks its blocks through a module-level table, and code the fix did not reach.
MODULE = textwrap.dedent(
    """\
    import torch


    def rms(x):
        return x / x.pow(2).mean(-1, keepdim=True).sqrt()


    class Block(torch.nn.Module):
        def forward(self, x):
            return rms(x)


    BLOCKS = {"plain": Block}


    class Model(torch.nn.Module):
        def __init__(self, kind="plain"):
            super().__init__()
            self.block = BLOCKS[kind]()


    class Unrelated(torch.nn.Module):
        def forward(self, x):
            return x.rms  # an attribute of the same name is not a use


    def lonely(x):
        return x.float()
    """
)


def test_changed_lines_are_numbered_on_each_side() -> None:
    old = "a\nb\nc\nd\n"
    new = "a\nB\nc\nc2\nd\n"  # line 2 replaced, a line inserted after line 3
    assert fix_safety._changed_lines(old, new) == ({2}, {2, 4})


def test_a_fixed_helper_is_run_through_the_model_that_uses_it() -> None:
    # line 5 is the body of `rms`: Block uses it, the table holds Block, Model reads the table
    assert fix_safety._reaching(MODULE, {5}) == (["Model"], ["rms"])


def test_a_fixed_function_nothing_uses_runs_by_itself() -> None:
    line = MODULE.splitlines().index("    return x.float()") + 1
    assert fix_safety._reaching(MODULE, {line}) == (["lonely"], ["lonely"])


def test_a_fix_outside_any_definition_reaches_nothing() -> None:
    assert fix_safety._reaching(MODULE, {1}) == ([], [])


def test_a_changed_decorator_is_reached_through_the_body_it_decorates() -> None:
    # AMP015's fix adds decorators, which run at import: a call goes through the fix when it runs
    # the decorated method's body, in the old source (no decorator yet) as in the new one
    old = "class F:\n    @staticmethod\n    def forward(ctx, x):\n        return x\n\n    def other(self):\n        return 1\n"
    new = old.replace("    @staticmethod\n", "    @staticmethod\n    @custom_fwd(device_type='cuda')\n")
    _, new_lines = fix_safety._changed_lines(old, new)
    assert new_lines == {3}
    assert fix_safety._redecorated(old, new, new_lines) == ({4}, {5})


def test_shrink_cuts_depth_and_width_and_keeps_the_rest() -> None:
    pytest.importorskip("torch")
    shrink = _load("fix_safety_calls").shrink
    assert shrink("layers_per_block", (4, 6, 2)) == (1, 1, 1)
    assert shrink("num_attention_heads", 20) == 2
    # widths that 16 divides shrink together, so their ratios (and divisibility) hold
    assert shrink("block_out_channels", (256, 512, 1024)) == (16, 32, 64)
    assert shrink("hidden_size", 2240) == 140
    # small or odd widths, flags, and numbers that are no width stay as they are
    assert shrink("in_channels", 3) == 3
    assert shrink("latent_channels", 48) == 48
    assert shrink("hidden_dim", 100) == 100
    assert shrink("use_hidden_bias", True) is True
    assert shrink("sample_rate", 16000) == 16000


TINY = textwrap.dedent(
    """

    class Tiny(torch.nn.Module):
        def __init__(self, hidden_size: int = 1024, num_layers: int = 12):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(hidden_size, hidden_size) for _ in range(num_layers))

        def forward(self, hidden_states):
            for layer in self.layers:
                hidden_states = rms(layer(hidden_states))
            return hidden_states
    """
)


def _calls(tmp_path: Path, name: str, lines: set[int], source: str = MODULE + TINY) -> dict[str, object]:
    """What `fix_safety_calls.py` prints for `name` of `source`, in a process of its own (it
    sets a trace function); its outputs are saved to `tmp_path / "outputs.pt"`."""
    package = tmp_path / "tinypkg"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(source)
    argv = [sys.executable, str(BENCHMARKS / "fix_safety_calls.py"), "tinypkg.model", name]
    argv += [",".join(map(str, sorted(lines))), str(tmp_path / "outputs.pt")]
    root = Path(__file__).parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), str(root)))}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(result, dict)
    return result


def test_a_default_config_is_built_tiny_and_runs_in_every_mode_through_the_fixed_line(
    tmp_path: Path,
) -> None:
    torch = pytest.importorskip("torch")
    from amplint.runtime.modes import MODES, load

    through = _calls(tmp_path, "Tiny", {5})  # line 5: the body of `rms`, which every layer calls
    # 1024 wide and 12 deep by default, built 64 wide and 1 deep, on 16 tokens
    assert through["bfloat16"] == {"dtype": "torch.bfloat16", "shape": [1, 16, 64], "finite": True}
    assert through["float16"] == {"dtype": "torch.float16", "shape": [1, 16, 64], "finite": True}
    # under autocast the weights stay float32; rms's mean and sqrt run in float32 there
    assert through["cuda-autocast-bf16"] == {"dtype": "torch.float32", "shape": [1, 16, 64], "finite": True}
    assert through["reached"] is True
    runs = load(str(tmp_path / "outputs.pt"))
    assert list(runs) == [mode.name for mode in MODES]
    # the same weights and inputs in every mode: each run is close to the float64 one
    reference = runs["float64"].out
    assert reference is not None
    for mode in MODES:
        out = runs[mode.name].out
        assert out is not None, runs[mode.name].raised
        tolerance = 8 * torch.finfo(mode.precision).eps * reference[0].abs().max()
        assert (out[0].double() - reference[0]).abs().max() <= tolerance, mode.name
    unrelated = MODULE.splitlines().index(
        "        return x.rms  # an attribute of the same name is not a use"
    )
    assert _calls(tmp_path, "Tiny", {unrelated + 1})["reached"] is False


def test_a_function_runs_only_from_the_table(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    assert _calls(tmp_path, "lonely", {5}) == {
        "build": "TypeError: lonely is not a module and has no tiny call here"
    }


def test_each_mode_is_judged_against_the_originals_float64_output(tmp_path: Path) -> None:
    """The saved outputs of a run before and after its fixes: in bfloat16 the error grew, in float16
    the fixed run raises, elsewhere they are equal; the table counts that under the run's rule."""
    torch = pytest.importorskip("torch")
    from amplint.runtime.modes import MODES, Run, save

    reference = torch.linspace(-1, 1, 64, dtype=torch.float64)
    before = {mode.name: Run(out=[reference.to(mode.dtype)]) for mode in MODES}
    after = dict(before)
    after["bfloat16"] = Run(out=[(reference + 0.25).to(torch.bfloat16)])
    after["float16"] = Run(raised="RuntimeError: mat1 and mat2 must have the same dtype")
    saved = (tmp_path / "original.pt", tmp_path / "fixed.pt")
    save(before, str(saved[0]))
    save(after, str(saved[1]))
    tried = fix_safety.Tried("model", {}, {}, saved, frozenset({"AMP007"}))
    verdicts = fix_safety._judged(tried, safe=False)
    assert verdicts["bfloat16"] is not None and verdicts["bfloat16"].startswith("error 0.25")
    assert verdicts["float16"] == "raises: RuntimeError: mat1 and mat2 must have the same dtype"
    assert [mode for mode, why in verdicts.items() if why is None] == [
        mode.name for mode in MODES if mode.name not in ("bfloat16", "float16")
    ]
    table = fix_safety._per_rule([(tried, verdicts)])
    assert list(table) == ["AMP007"]
    assert dict(zip([mode.name for mode in MODES], table["AMP007"], strict=True)) == {
        mode.name: {"bfloat16": [1, 0, 1], "float16": [1, 1, 0]}.get(mode.name, [1, 0, 0]) for mode in MODES
    }
    # the page says it: the summary counts the raise and the grown error, the rule's row each cell
    record = {
        "package": "tinypkg",
        "distribution": "tinypkg",
        "version": "1.0",
        "level": "unsafe",
        "command": "python benchmarks/fix_safety.py run --package tinypkg --unsafe-fixes",
        "check": "amplint check --fix --unsafe-fixes",
        "where": "the package",
        "amplint": "abc1234",
        "changed": 1,
        "applied": {"AMP007": 1},
        "failed_imports": [],
        "tried": 1,
        "compared": ["tinypkg.model.Tiny"],
        "worse": ["tinypkg.model.Tiny"],
        "broken": [
            "tinypkg.model.Tiny (AMP007), bfloat16: error 0.25 against float64, 0.0039 before the fix",
            "tinypkg.model.Tiny (AMP007), float16: raises: RuntimeError: mat1 and mat2 must have the same dtype",
        ],
        "unbuilt": [],
        "unreached": [],
        "no_entry": [],
        "replaced": ["tinypkg.model.Tiny: fused_rms by tinypkg.ref.rms"],
        "modes": [mode.name for mode in MODES],
        "per_rule": table,
    }
    page = fix_safety.report({"runs": {"tinypkg unsafe": record}})
    assert "| tinypkg 1.0 | unsafe | 1 | 1 | 1 of 1 | 1 | 1 |" in page
    assert "- triton kernels on CPU: tinypkg.model.Tiny: fused_rms by tinypkg.ref.rms" in page
    # a run of some folders alone (one that did not fit with the others) keeps a record of its own
    alone = {**record, "only": "big,bigger"}
    assert fix_safety._key(alone) == "tinypkg unsafe --only big,bigger"
    page = fix_safety.report({"runs": {"tinypkg unsafe": record, fix_safety._key(alone): alone}})
    assert "| tinypkg 1.0 | unsafe (`big/`, `bigger/` only) | 1 | 1 | 1 of 1 | 1 | 1 |" in page
    assert "## tinypkg 1.0, unsafe fixes (`big/`, `bigger/` only)" in page
    assert "| AMP007 | 1 / 0 / 0 | 1 / 0 / 0 | 1 / 0 / 1 | 1 / 1 / 0 |" in page


def test_token_ids_are_judged_by_how_many_differ_from_float64s(tmp_path: Path) -> None:
    """A beam search's token ids (diffusers' `UniDiffuserTextDecoder`): ids far from float64's in
    value but at as many positions are no worse; one more position that differs is."""
    torch = pytest.importorskip("torch")
    from amplint.runtime.modes import MODES, Run, save

    reference = torch.arange(16)
    near, far, more = reference.clone(), reference.clone(), reference.clone()
    near[:3] += 1  # three ids off by one
    far[5:8] += 900  # three others, off by 900
    more[:4] += 1
    before = {mode.name: Run(out=[reference if mode is MODES[0] else near]) for mode in MODES}
    after = dict(before, bfloat16=Run(out=[far]), float16=Run(out=[more]))
    saved = (tmp_path / "original.pt", tmp_path / "fixed.pt")
    save(before, str(saved[0]))
    save(after, str(saved[1]))
    tried = fix_safety.Tried("decoder", {}, {}, saved, frozenset({"AMP003"}))
    verdicts = fix_safety._judged(tried, safe=False)
    assert verdicts["bfloat16"] is None
    assert verdicts["float16"] == "error 4 against float64, 3 before the fix"


CONFIGURED = textwrap.dedent(
    """

    @dataclasses.dataclass
    class Config:
        d_model: int
        n_layers: int
        eps: float = 1e-5


    class Configured(torch.nn.Module):
        def __init__(self, config: Config):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(config.d_model, config.d_model) for _ in range(config.n_layers))

        def forward(self, x):
            return rms(self.layers[0](x))


    class Sized(torch.nn.Module):
        def __init__(self, dim, heads):
            super().__init__()
            self.proj = torch.nn.Linear(dim, dim * heads)

        def forward(self, x):
            return rms(self.proj(x))
    """
)


def test_required_sizes_and_a_dataclass_config_are_made_tiny(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    source = "import dataclasses\n" + MODULE + CONFIGURED  # `rms`'s body is now line 6
    # a required `dim` is 32 wide, `heads` 2; a config dataclass is built from its fields the same
    # way, and `x` is made 16 tokens of its width
    sized = _calls(tmp_path, "Sized", {6}, source)
    configured = _calls(tmp_path, "Configured", {6}, source)
    assert sized["float32"] == {"dtype": "torch.float32", "shape": [1, 16, 64], "finite": True}
    assert configured["float32"] == {"dtype": "torch.float32", "shape": [1, 16, 32], "finite": True}
    assert sized["reached"] is True and configured["reached"] is True


KERNELS = textwrap.dedent(
    """\
    import torch


    def fused_silu(x):
        raise RuntimeError("0 active drivers ([]). There should only be one.")  # a kernel without a GPU


    def fused_gate(x):
        raise RuntimeError("0 active drivers ([]). There should only be one.")


    def layer(x):
        return fused_silu(x) * 2


    def gated(x):
        return fused_gate(x)
    """
)


def test_a_kernel_is_replaced_by_its_reference_in_the_module_that_calls_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fla's layers run on CPU with each kernel they call replaced, in their module, by the package's
    reference; a kernel with no reference raises with that reason, so its layer is not compared."""
    torch = pytest.importorskip("torch")
    calls = _load("fix_safety_calls")
    (tmp_path / "kernelpkg").mkdir()
    (tmp_path / "kernelpkg" / "__init__.py").write_text("")
    (tmp_path / "kernelpkg" / "layers.py").write_text(KERNELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import kernelpkg.layers as layers

    monkeypatch.setattr(
        calls,
        "KERNELS",
        {
            "kernelpkg.layers:fused_silu": (torch.nn.functional.silu, "torch.nn.functional.silu"),
            "kernelpkg.layers:fused_gate": (None, "the gate kernel has no reference"),
            "kernelpkg.other:fused_silu": (torch.sigmoid, "another module's kernel"),
        },
    )
    assert calls._replace_kernels(layers) == [
        "fused_silu by torch.nn.functional.silu",
        "fused_gate: not replaced (the gate kernel has no reference)",
    ]
    x = torch.linspace(-3, 3, 8)
    assert torch.equal(layers.layer(x), torch.nn.functional.silu(x) * 2)
    with pytest.raises(NotImplementedError, match="the gate kernel has no reference"):
        layers.gated(x)
