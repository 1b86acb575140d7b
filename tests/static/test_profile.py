"""The project precision profile: what the detection counts as setting precision (and what it does
not), `precision` in `[tool.amplint]` and `--precision`, `check --show-settings`, and that the
profile reaches every file's check and takes part in the cache key."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from support import HAZARD, amplint_run, write

from amplint import api, rules
from amplint.config import ConfigError, Settings, load_settings
from amplint.pipeline.cache import Cache
from amplint.pipeline.check import run_check
from amplint.pipeline.pool import precheck
from amplint.pipeline.precision import Precision
from amplint.rule import Rule
from amplint.rules.runner import lint_text
from amplint.source import display_path
from amplint.static.context import FileContext, Finding
from amplint.static.profile import (
    BOTH,
    CALLER,
    CAST,
    Mode,
    ModeWhy,
    Profile,
    TorchRange,
    configured,
    detect,
    settings_in,
    settings_with_kinds,
)

BF16, FP16 = frozenset({"bfloat16"}), frozenset({"float16"})
CACHE = ".amplint_cache"
# A finding (AMP006, on by default) in a file that sets no dtype: unlike HAZARD, whose
# `torch.cuda.amp.GradScaler()` counts as a float16 setting, it leaves the detected profile alone.
NORM = """\
import torch


def rms_norm(x):
    var = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(var + 1e-6)
"""


def detected(text: str) -> Profile:
    return detect([("train.py", text)])


# --- detection: one small text per kind of setting -----------------------------------------------


@pytest.mark.parametrize(
    ("text", "half", "what"),
    [
        # autocast: the dtype given, else the device's default (cuda float16, cpu bfloat16)
        ('with torch.autocast("cuda"):\n    pass\n', FP16, 'torch.autocast("cuda") (float16 by default)'),
        ("with torch.autocast(device_type='cpu'):\n    pass\n", BF16, "bfloat16 by default"),
        (
            "with torch.cuda.amp.autocast():\n    pass\n",
            FP16,
            "torch.cuda.amp.autocast() (float16 by default)",
        ),
        ("with torch.cpu.amp.autocast():\n    pass\n", BF16, "torch.cpu.amp.autocast()"),
        ("from torch.cuda.amp import autocast\nwith autocast():\n    pass\n", FP16, "autocast()"),
        (
            'with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n    pass\n',
            BF16,
            'torch.autocast(device_type="cuda", dtype=torch.bfloat16)',
        ),
        ('with torch.amp.autocast("cuda", dtype=torch.float16):\n    pass\n', FP16, "torch.amp.autocast"),
        ("with torch.autocast(device_type=dev, dtype=amp_dtype):\n    pass\n", BOTH, "not known statically"),
        # a variable the file assigns dtypes to (rl-games 1.6.5 sac_agent.py:114): those it names
        (
            "self.amp_dtype = torch.bfloat16 if self.amp else torch.float32\n"
            "with torch.amp.autocast('cuda', dtype=self.amp_dtype):\n    pass\n",
            BF16,
            "(`self.amp_dtype` assigned on line 2)",
        ),
        (
            "amp_dtype: torch.dtype = torch.float16\nwith torch.autocast('cuda', dtype=amp_dtype):\n    pass\n",
            FP16,
            "(`amp_dtype` assigned on line 2)",
        ),
        (
            "amp_dtype = torch.bfloat16\namp_dtype = cfg.dtype\nwith torch.autocast('cuda', dtype=amp_dtype):\n    pass\n",
            BOTH,
            "not known statically",
        ),
        # a partial of autocast: its arguments come first (tabpfn's `partial(_amp_autocast,
        # device_type="cuda")`), under any name it is bound to
        (
            "from torch.amp import autocast as _amp_autocast\n"
            'autocast = partial(_amp_autocast, device_type="cuda")\n'
            "with autocast(enabled=use_scaler):\n    pass\n",
            FP16,
            'autocast(enabled=use_scaler), a partial(_amp_autocast, device_type="cuda")',
        ),
        (
            'amp = functools.partial(torch.autocast, "cuda", dtype=torch.bfloat16)\nwith amp():\n    pass\n',
            BF16,
            'amp(), a partial(torch.autocast, "cuda", dtype=torch.bfloat16)',
        ),
        (
            'amp = partial(torch.autocast, "cpu")\nwith amp(enabled=True):\n    pass\n',
            BF16,
            "bfloat16 by default",
        ),
        # casts of objects
        ("model = model.half()\n", FP16, "model.half()"),
        ("model.bfloat16()\n", BF16, "model.bfloat16()"),
        ("x = x.to(torch.float16)\n", FP16, "x.to(torch.float16)"),
        ("x = x.to(torch.half)\n", FP16, "x.to(torch.half)"),
        ("x = x.to(device, torch.bfloat16)\n", BF16, "x.to(device, torch.bfloat16)"),
        # a model cast to the dtype a variable holds, given in place (lpu-nn 0.1.0 training.py:1733,
        # the trainer's `--float16` flag): the half dtypes the file assigns to it
        (
            "if args.float16:\n    self.dtype = torch.float16\nelse:\n    self.dtype = torch.float32\n"
            "self.model.to(self.device, self.dtype)\n",
            FP16,
            "self.model.to(self.device, self.dtype) (`self.dtype` assigned on line 3, 5)",
        ),
        # dtype arguments
        (
            'm = AutoModel.from_pretrained("m", torch_dtype=torch.float16)\n',
            FP16,
            "torch_dtype=torch.float16",
        ),
        ('pipe = pipeline("text-generation", torch_dtype="bfloat16")\n', BF16, 'torch_dtype="bfloat16"'),
        ("w = torch.zeros(3, dtype=torch.bfloat16)\n", BF16, "dtype=torch.bfloat16"),
        ('load(path, dtype="fp16")\n', FP16, 'dtype="fp16"'),
        ("load(dtype=torch.bfloat16 if bf16 else torch.float16)\n", BOTH, "if bf16 else torch.float16"),
        # loss scaling is for float16
        ("scaler = torch.cuda.amp.GradScaler()\n", FP16, "torch.cuda.amp.GradScaler(...)"),
        ("scaler = GradScaler(enabled=args.fp16)\n", FP16, "GradScaler(...)"),
        # Lightning
        ('trainer = L.Trainer(precision="16-mixed")\n', FP16, 'precision="16-mixed"'),
        ('trainer = L.Trainer(precision="bf16-mixed")\n', BF16, 'precision="bf16-mixed"'),
        ("trainer = pl.Trainer(precision=16)\n", FP16, "precision=16"),
        ("fabric = Fabric(precision='bf16')\n", BF16, "precision='bf16'"),
        # accelerate
        ('accelerator = Accelerator(mixed_precision="fp16")\n', FP16, 'mixed_precision="fp16"'),
        ('accelerator = Accelerator(mixed_precision="bf16")\n', BF16, 'mixed_precision="bf16"'),
        # transformers TrainingArguments
        ('args = TrainingArguments("out", fp16=True)\n', FP16, "fp16=True"),
        ('args = TrainingArguments("out", bf16=True)\n', BF16, "bf16=True"),
        # the default dtype
        ("torch.set_default_dtype(torch.bfloat16)\n", BF16, "set_default_dtype(torch.bfloat16)"),
        ("torch.set_default_dtype(torch.float16)\n", FP16, "set_default_dtype(torch.float16)"),
    ],
)
def test_each_kind_of_setting_is_detected(text: str, half: frozenset[str], what: str) -> None:
    profile = detected("import torch\n" + text)
    assert profile.origin == "detected"
    assert profile.half == half
    assert profile.evidence, profile
    path, line, seen = profile.evidence[0]
    assert path == "train.py"
    assert line >= 2  # the line of the setting, not of the import
    assert what in seen


def test_evidence_names_the_line_and_is_capped_per_dtype() -> None:
    text = "import torch\n" + "".join(f"m{i}.half()\n" for i in range(12)) + "\nx = x.to(torch.bfloat16)\n"
    profile = detect([("a.py", text), ("b.py", "model.half()\n")])
    assert profile.half == BOTH
    assert [entry for entry in profile.evidence if "half" in entry[2]] == [
        ("a.py", line, f"m{line - 2}.half()") for line in range(2, 7)
    ]
    assert ("a.py", 15, "x.to(torch.bfloat16)") in profile.evidence


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("model = GPT(cfg).half()\n", "cast"),
        ("self.weight_tensor = torch.Tensor([5.0, 4.0]).half().to(self.device)\n", "cast:tensor"),
        ("w = torch.FloatTensor(3).half()\n", "cast:tensor"),
        ("p = nn.Parameter(torch.ones(3)).half()\n", "cast:tensor"),
        ("self.text_encoder_2.half()\n", "cast"),
        # jukebox-infer 0.1.2 prior/prior.py:304: the encoder's keys and values, not the encoder.
        ("encoder_kv = encoder_kv.half()\n", "cast:tensor"),
        ("y = self.model_out.to(torch.float16)\n", "cast:tensor"),
    ],
    ids=["model", "tensor", "float-tensor", "parameter", "numbered-module", "module-output", "model-out"],
)
def test_what_a_cast_is_called_on_says_whether_it_casts_a_model(text: str, kind: str) -> None:
    # pyiqa 0.1.16 q_align/modeling_mplug_owl2.py:280: a tensor of weights made half in a model's
    # method was taken for a cast of the model, and every attention of it ran "as cast-fp16".
    assert [found[3] for found in settings_with_kinds(text)] == [kind]


def test_both_dtypes_on_one_line_are_two_settings() -> None:
    found = list(settings_in("a.half(); b.bfloat16()\n"))
    assert [(line, dtypes) for line, _, dtypes in found] == [(1, FP16), (1, BF16)]


@pytest.mark.parametrize(
    "text",
    [
        "# with torch.autocast('cuda', dtype=torch.bfloat16):\nx = 1\n",  # a comment
        "x = 1  # model.half()\n",
        '"""Train with torch.autocast("cuda") and model.half().\n\nGradScaler() too."""\n',  # a docstring
        "def f():\n    '''Call .to(torch.float16) first;\n    fp16=True works.'''\n    return 1\n",
        "raise ValueError(\"call model.half() before torch.autocast('cuda')\")\n",  # a message
        'print("# not a comment"); msg = "see .bfloat16()"\n',
        'with torch.autocast("cuda", enabled=False):\n    pass\n',  # turns autocast off
        "scaler = GradScaler(enabled=False)\n",
        "with accelerator.autocast():\n    pass\n",  # accelerate's own, set elsewhere
        'amp = partial(torch.autocast, "cuda", enabled=False)\nwith amp():\n    pass\n',  # bound off
        "ctx = partial(my.autocast, 'cuda')\nwith ctx():\n    pass\n",  # not torch's
        "with maybe_autocast(x):\n    pass\n",
        "def autocast(x):\n    return x\n",
        "if x.dtype == torch.float16:\n    pass\n",  # comparisons and reads
        "if dtype != torch.bfloat16:\n    pass\n",
        "big = torch.finfo(torch.float16).max\n",
        "self.dtype = torch.float16\n",
        "self.dtype = torch.float16\nx = x.to(self.device, self.dtype)\n",  # a tensor: the engine follows it
        "def load(path, dtype=torch.float16):\n    pass\n",  # a parameter's default
        "x = x.to(torch.float32)\n",  # float32 is not a half dtype
        "with torch.autocast('cuda', dtype=torch.float32):\n    pass\n",
        "amp_dtype = torch.float32\nwith torch.autocast('cuda', dtype=amp_dtype):\n    pass\n",
        "np.set_printoptions(precision=16)\n",  # printed digits
        'args = TrainingArguments("out", fp16=False)\n',
        'Trainer(precision="32-true")\n',
        "is_half = args.fp16 == True\n",
    ],
)
def test_what_sets_nothing(text: str) -> None:
    assert detected(text) == CALLER


def test_a_docstring_closed_earlier_on_the_line_hides_nothing_after_it() -> None:
    assert detected('def f():\n    """Doc."""; return x.half()\n').half == FP16


def test_an_empty_project_is_library_code_run_in_both() -> None:
    for texts in ([], [("a.py", "")], [("a.py", "import torch\n\ndef f(x):\n    return x * 2\n")]):
        profile = detect(texts)
        assert profile == CALLER
        assert profile.origin == "caller"
        assert profile.half == BOTH
        assert profile.evidence == ()


def test_detection_stops_reading_once_nothing_can_change() -> None:
    read: list[str] = []

    def texts() -> Iterator[tuple[str, str]]:
        for index in range(100):
            read.append(f"{index}.py")
            yield f"{index}.py", "a.half()\nb.half()\nc.half()\nd.bfloat16()\ne.bfloat16()\nf.bfloat16()\n"

    assert detect(texts()).half == BOTH
    assert len(read) == 2  # five of each after the second file


# --- the profile itself ----------------------------------------------------------------------------


def test_configured_profiles() -> None:
    assert configured("auto") is None
    assert configured("bf16") == Profile(BF16, "configured")
    assert configured("fp16") == Profile(FP16, "configured")
    fp32 = configured("fp32")
    assert fp32 is not None and fp32.half == frozenset()
    with pytest.raises(ValueError, match="precision must be one of auto, bf16, fp16, fp32"):
        configured("bf17")


def test_may_be_describe_and_key() -> None:
    bf16 = Profile(BF16, "detected", (("a.py", 3, "model.bfloat16()"),))
    assert bf16.may_be("bfloat16") and bf16.may_be("torch.bfloat16") and bf16.may_be("bf16")
    assert not bf16.may_be("float16") and not bf16.may_be("half")
    assert bf16.may_be("float32")  # autocast keeps some ops in float32 whatever the half dtype
    with pytest.raises(ValueError):
        bf16.may_be("int8")
    assert bf16.describe() == "bfloat16 only (detected)"
    assert Profile(frozenset(), "configured").describe() == "float32 only (configured)"
    assert CALLER.describe().startswith("bfloat16 or float16 (nothing in the project sets it")
    # The key: the dtypes, the origin, the torch range and the Python, never the evidence.
    assert bf16.key() == Profile(BF16, "detected").key() == "detected:bfloat16:torchany:py3.15"
    assert (
        Profile(BF16, "detected", torch=TorchRange.parse(">=2.1")).key()
        == "detected:bfloat16:torch>=2.1:py3.15"
    )
    keys = {CALLER.key(), Profile(BOTH, "detected").key(), bf16.key(), Profile(BF16, "configured").key()}
    assert len(keys) == 4
    assert Profile(frozenset(), "configured").key() == "configured:float32:torchany:py3.15"
    with pytest.raises(ValueError):
        Profile(frozenset({"float32"}), "configured")
    with pytest.raises(ValueError):
        Profile(BF16, "guessed")  # type: ignore[arg-type]


# --- configuration and the command line ----------------------------------------------------------


def test_precision_is_read_from_the_config(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nprecision = "bf16"\n')
    settings = load_settings([tmp_path])
    assert settings.precision == "bf16"
    assert settings.configured_profile == Profile(BF16, "configured")
    assert Settings().precision == "auto" and Settings().configured_profile is None


@pytest.mark.parametrize("value", ['"bf17"', '"BF16"', "16", "true", '["bf16"]'])
def test_a_bad_precision_is_a_config_error(tmp_path: Path, value: str) -> None:
    config = write(tmp_path / "pyproject.toml", f"[tool.amplint]\nprecision = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_settings([tmp_path])
    message = str(info.value)
    assert message.startswith(f"{config}: [tool.amplint] 'precision' must be one of ")
    assert '"auto", "bf16", "fp16", "fp32", got ' in message


def test_a_bad_precision_stops_the_check(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nprecision = "half"\n')
    write(tmp_path / "model.py", HAZARD)
    proc = amplint_run(tmp_path, "check", "model.py")
    assert proc.returncode == 2
    assert "'precision' must be one of" in proc.stderr
    assert "got 'half'" in proc.stderr


def test_the_flag_overrides_the_config(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\nprecision = "fp16"\n')
    write(tmp_path / "train.py", "model.bfloat16()\n")
    settings = load_settings([tmp_path])
    assert settings.with_overrides(precision="bf16").precision == "bf16"
    assert settings.with_overrides(precision=None).precision == "fp16"
    assert settings.with_overrides(precision="auto").configured_profile is None
    with pytest.raises(ConfigError, match="--precision must be one of"):
        settings.with_overrides(precision="bf17")
    configured_run = amplint_run(tmp_path, "check", "--show-settings", ".")
    assert "profile: float16 only (configured)" in configured_run.stdout.splitlines()
    flagged = amplint_run(tmp_path, "check", "--show-settings", "--precision", "bf16", ".")
    assert flagged.returncode == 0, flagged.stderr
    assert "precision: bf16" in flagged.stdout.splitlines()
    assert "profile: bfloat16 only (configured)" in flagged.stdout.splitlines()
    auto = amplint_run(tmp_path, "check", "--show-settings", "--precision", "auto", ".")
    assert "profile: per file, from the execution modes" in auto.stdout.splitlines()
    assert "  train.py:1: cast-bf16 `model.bfloat16()` (code)" in auto.stdout.splitlines()
    bad = amplint_run(tmp_path, "check", "--precision", "bf17", ".")
    assert bad.returncode == 2
    assert "invalid choice: 'bf17'" in bad.stderr


def test_show_settings_on_a_project(tmp_path: Path) -> None:
    config = write(
        tmp_path / "pyproject.toml",
        '[tool.amplint]\nignore = ["AMP010"]\nextend-exclude = ["scratch/"]\n\n'
        '[tool.amplint.per-file-ignores]\n"tests/*" = ["AMP006"]\n',
    )
    write(
        tmp_path / "src" / "train.py",
        "import torch\n\n\ndef train(model, x):\n    # model.half()\n"
        '    with torch.autocast("cuda", dtype=torch.bfloat16):\n        return model(x)\n',
    )
    write(tmp_path / "src" / "model.py", NORM)
    write(tmp_path / "scratch" / "old.py", "model.half()\n")  # excluded: not checked, not detected
    proc = amplint_run(tmp_path, "check", "--show-settings")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert f"config file: {config}" in lines
    assert f"root: {tmp_path}" in lines
    assert "files: 2" in lines
    assert "ignore: AMP010" in lines
    rules = next(line for line in lines if line.startswith("rules: "))
    # AMP006 (opt-in) is on by default only where the project runs in float16 alone.
    assert "AMP006" not in rules and "AMP008" in rules and "AMP010" not in rules
    assert "  tests/* = AMP006" in lines
    assert "extend-exclude: scratch/" in lines
    assert "precision: auto" in lines
    assert "profile: per file, from the execution modes" in lines
    assert '  src/train.py:6: autocast-bf16 `torch.autocast("cuda", dtype=torch.bfloat16)` (code)' in lines
    assert not (tmp_path / CACHE).exists()  # nothing was checked
    assert "AMP006" not in proc.stderr and "src/model.py:" not in proc.stdout
    fp16 = amplint_run(tmp_path, "check", "--show-settings", "--precision", "fp16").stdout.splitlines()
    assert "AMP006" in next(line for line in fp16 if line.startswith("rules: "))


def test_notebook_cells_are_scanned_as_code(tmp_path: Path) -> None:
    def cell(kind: str, source: str) -> dict[str, object]:
        return {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}

    document = {
        "cells": [
            cell("markdown", "Never call `model.half()` here."),
            cell("code", "import torch\n"),
            cell("code", 'print("ready")\nmodel = model.bfloat16()\n'),
        ],
        "metadata": {"language_info": {"name": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    write(tmp_path / "train.ipynb", json.dumps(document, indent=1))
    proc = amplint_run(tmp_path, "check", "--show-settings")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "  train.ipynb:cell 3:2: cast-bf16 `model.bfloat16()` (code)" in lines
    assert not any("cell 1" in line for line in lines)  # the markdown cell sets nothing


def test_show_settings_without_config_or_settings(tmp_path: Path) -> None:
    write(tmp_path / "lib.py", "def f(x):\n    return x\n")
    proc = amplint_run(tmp_path, "check", "--show-settings")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "config file: none (defaults)" in lines
    assert "precision: auto" in lines
    assert "profile: per file, from the execution modes" in lines
    assert "entry points: none: every finding is conditional (--show-conditional)" in lines


# --- the profile reaches every check ---------------------------------------------------------------


class _Probe(Rule):
    """Reports the profile it was given, so that a test can see what reached the check."""

    code = "AMP990"
    name = "profile-probe"
    summary = "the profile"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        yield Finding(ctx.module.body[0], f"profile {ctx.profile.key()}")


def test_lint_text_takes_a_profile() -> None:
    assert (
        lint_text("x = 1\n", [_Probe]).diagnostics[0].message
        == "profile caller:bfloat16+float16:torchany:py3.15"
    )
    given = lint_text("x = 1\n", [_Probe], profile=Profile(BF16, "configured"))
    assert given.diagnostics[0].message == "profile configured:bfloat16:torchany:py3.15"


@pytest.mark.parametrize("jobs", [1, 2])
def test_the_profile_reaches_every_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int) -> None:
    if jobs > 1 and multiprocessing.get_start_method() != "fork":
        pytest.skip("the probe rule reaches the workers only through fork")
    for module in (api, rules):  # the in-process path and the workers
        monkeypatch.setattr(module, "rules_for", lambda settings, path, profile: [_Probe])
    files = [write(tmp_path / f"m{index}.py", f"def f{index}(x):\n    return x\n") for index in range(3)]
    files.append(
        write(
            tmp_path / "train.py",
            "import torch\nfrom m0 import f0\n\ntorch.set_default_dtype(torch.bfloat16)\nf0(x)\n",
        )
    )
    settings = Settings(root=tmp_path)
    monkeypatch.chdir(tmp_path)
    run = run_check(files, settings, jobs=jobs)
    reached = run.precision.of(display_path(files[0]))
    assert reached.half == BF16 and reached.origin == "detected"
    assert [why.describe() for why in reached.modes] == [
        "cast-bf16: `set_default_dtype(torch.bfloat16)` at train.py:4 -> f0"
    ]
    messages = sorted(d.message for d in run.diagnostics)
    assert messages == sorted(
        [f"profile {reached.key()}", *["profile caller:bfloat16+float16:torchany:py3.15"] * 3]
    )
    configured = Precision(Profile(FP16, "configured"))
    done = precheck(files, settings, cache=None, jobs=jobs, precision=configured)
    assert {result.diagnostics[0].message for result in done.values()} == {
        "profile configured:float16:torchany:py3.15"
    }


# --- the cache -------------------------------------------------------------------------------------


def test_the_profile_takes_part_in_the_cache_key(tmp_path: Path) -> None:
    settings = Settings(root=tmp_path)
    path, raw = tmp_path / "m.py", b"x = 1\n"

    def key(profile: Profile) -> str:
        return Cache(tmp_path / CACHE, settings, precision=Precision(profile)).key(path, "m.py", raw)

    assert key(CALLER) == Cache(tmp_path / CACHE, settings).key(path, "m.py", raw)
    assert key(Profile(BF16, "detected", (("a.py", 1, "a.bfloat16()"),))) == key(Profile(BF16, "detected"))
    keys = {key(CALLER), key(Profile(BOTH, "detected")), key(Profile(BF16, "detected"))}
    keys |= {
        key(Profile(BF16, "configured")),
        key(Profile(FP16, "configured")),
        key(Profile(frozenset(), "configured")),
    }
    assert len(keys) == 6
    # A file's execution modes and their evidence are part of its key (its messages name them).
    why = ModeWhy(Mode(CAST, "bfloat16"), "train.py", 3, "model.bfloat16()", ("GPT",))
    with_modes = key(Profile(BF16, "detected", modes=(why,)))
    assert with_modes != key(Profile(BF16, "detected"))
    assert with_modes != key(Profile(BF16, "detected", modes=(replace(why, line=4),)))


def _entries(root: Path) -> set[str]:
    return {p.name for p in (root / CACHE).rglob("*") if p.is_file() and p.parent != root / CACHE}


def test_a_changed_profile_misses_the_cache(tmp_path: Path) -> None:
    write(
        tmp_path / "pyproject.toml", '[tool.amplint]\nextend-select = ["AMP006"]\nshow-conditional = true\n'
    )
    write(tmp_path / "pkg" / "model.py", NORM)
    write(tmp_path / "pkg" / "lib.py", "def f(x):\n    return x\n")
    first = amplint_run(tmp_path, "check", "pkg")
    assert first.returncode == 1, first.stderr
    caller = _entries(tmp_path)
    assert len(caller) == 2
    amplint_run(tmp_path, "check", "pkg")
    assert _entries(tmp_path) == caller  # same profile: hits, nothing written
    # The flag: a new profile, new entries for every file; back to auto, the old ones hit again.
    amplint_run(tmp_path, "check", "--precision", "bf16", "pkg")
    bf16 = _entries(tmp_path) - caller
    assert len(bf16) == 2
    amplint_run(tmp_path, "check", "--precision", "auto", "pkg")
    assert _entries(tmp_path) == caller | bf16
    # A script that runs `rms_norm` in float16 changes that file's profile alone: it and the new
    # file are checked, `lib.py` is answered from the cache.
    write(
        tmp_path / "pkg" / "train.py",
        "import torch\nfrom model import rms_norm\n\ntorch.set_default_dtype(torch.float16)\nrms_norm(x)\n",
    )
    amplint_run(tmp_path, "check", "pkg")
    detected = _entries(tmp_path) - caller - bf16
    assert len(detected) == 2
    # A setting that reaches nothing changes no key.
    write(tmp_path / "pkg" / "train2.py", "model.half()\n")
    amplint_run(tmp_path, "check", "pkg")
    assert len(_entries(tmp_path) - caller - bf16 - detected) == 1  # only the new file
