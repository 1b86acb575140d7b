"""Settings a flag, off by default, turns on: their modes are options', and findings resting on
options alone are conditional."""

from __future__ import annotations

import shutil
from functools import partial
from pathlib import Path

import pytest
from support import amplint_run, flagged_places, write

from amplint.static.gates import Blocks, Flag, flag_values, guards
from amplint.static.modes import index_modes


def _guards(code: str, setting: str) -> list[Flag]:
    raw = code.encode()
    comments = [(i, raw.index(b"\n", i)) for i in range(len(raw)) if raw[i : i + 1] == b"#"]
    blocks = Blocks(raw, lambda at: any(a <= at < b for a, b in comments))
    return guards(raw, raw.index(setting.encode()), blocks)


@pytest.mark.parametrize(
    ("code", "setting", "expected"),
    [
        # The tests of the `if` blocks around it, out to its function.
        (
            "def main(args):\n    for b in x:\n        if args.fp16:\n            # cast\n            model.half()\n",
            "model.half()",
            [Flag("args.fp16", "fp16")],
        ),
        ("if opt.half and cuda:\n    model.half()\n", "model.half()", [Flag("opt.half", "half")]),
        ("if args.fp16: model.half()\n", "model.half()", [Flag("args.fp16", "fp16")]),
        # An `else:` runs where its test is false; a test that is no name says nothing.
        ("if args.fp32:\n    pass\nelse:\n    model.half()\n", "model.half()", []),
        ("if args.precision == 'fp16':\n    model.half()\n", "model.half()", []),
        # `enabled=`, through a local bound to a parameter, which carries its default.
        (
            "def __init__(self, fp16 = False,\n    lr=1e-4,\n):\n    on = fp16\n    s = GradScaler(enabled = on)\n",
            "GradScaler(",
            [Flag("fp16", "fp16", False)],
        ),
        # A conditional expression whose other branch names no half dtype; one choosing the device
        # does not guard the dtype.
        ('mp = "fp16" if self.amp else "no"\n', '"fp16"', [Flag("self.amp", "amp")]),
        ('a = "bf16" if bf16 else "fp16"\nBF = 1\n', '"bf16"', []),
        ('with autocast("cuda" if cfg.cuda else "cpu", dtype=torch.float16):\n', "autocast(", []),
        # A line of a call is in the call's statement, not in the `if` above it (phi-torch).
        (
            "def train(args):\n    if args.use_ddp:\n        init()\n\n"
            '    accelerator = Accelerator(\n        mixed_precision="fp16",\n    )\n',
            "mixed_precision",
            [],
        ),
        # A name the function computes (a tuple unpacked, `&=`) is the code's to decide.
        (
            "def load(w, fp16=False):\n    pt, jit = kind(w)\n    if pt:\n        model.half()\n",
            "model.half()",
            [],
        ),
    ],
)
def test_the_flags_a_setting_runs_under(code: str, setting: str, expected: list[Flag]) -> None:
    assert _guards(code, setting) == expected


def _values(code: dict[str, str], text: dict[str, str] | None = None) -> dict[str, str | None]:
    values = flag_values(
        {"fp16", "use_amp"},
        ((name, body.encode(), lambda at: False) for name, body in code.items()),
        ((name, body.encode()) for name, body in (text or {}).items()),
    )
    return {name: values.is_off(Flag(f"args.{name}", name)) for name in ("fp16", "use_amp")}


def test_what_the_project_says_of_a_flag() -> None:
    parser = 'p.add_argument(\n    "--fp16", action="store_true", help="use --fp16 = True")\np.add_argument("--use-amp", default=False)\n'
    assert _values({"train.py": parser}) == {
        "fp16": "off by default at train.py:2",
        "use_amp": "off by default at train.py:3",
    }
    # A command line in a script, a config's `true`, a value the code computes: maybe on.
    assert _values({"train.py": parser}, {"run.sh": "python train.py --fp16\n"})["fp16"] is None
    assert _values({"train.py": parser}, {"cfg.yaml": "USE_AMP: true\n"})["use_amp"] is None
    assert _values({"train.py": parser, "t.py": "Trainer(fp16=not args.fp32)\n"})["fp16"] is None
    assert _values({"train.py": parser, "t.py": 'run(["--use_amp"])\n'})["use_amp"] is None
    # Passing it along (`fp16=fp16`, `self.fp16 = args.fp16`), or naming it in a message, is no use.
    passes = "Trainer(fp16=fp16)\nself.fp16 = args.fp16\nraise ValueError('set fp16 = True')\n"
    assert _values({"train.py": parser, "t.py": passes})["fp16"] == "off by default at train.py:2"
    assert (
        _values({"c.py": "class C:\n    fp16: bool = field(default=False)\n"})["fp16"]
        == "off by default at c.py:2"
    )
    # A string option holds what the user gives it.
    assert _values({"train.py": 'p.add_argument("--fp16", type=str)\n'})["fp16"] is None


def test_an_option_is_its_own_role(tmp_path: Path) -> None:
    files = {
        "train.py": (
            "import argparse\nfrom model import GPT\n\n\ndef main(args):\n    model = GPT()\n"
            "    if args.fp16:\n        model.half()\n\n\n"
            'p = argparse.ArgumentParser()\np.add_argument("--fp16", action="store_true")\n'
        ),
        "model.py": "class GPT:\n    pass\n",
        "tests/test_train.py": "from train import main\n\n\ndef test_main():\n    main(Args(fp16=True))\n",
    }
    for name, text in files.items():
        write(tmp_path / name, text)

    def roles() -> set[tuple[str, int, str]]:
        paths = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.py"))
        found = index_modes((p, p, (tmp_path / p).read_bytes) for p in paths)
        return {(why.path, why.line, why.role) for why in found.entries}

    # A test that turns the flag on says what it tests (its own entry), not how the project runs.
    assert roles() == {("train.py", 8, "option"), ("tests/test_train.py", 5, "test")}
    write(
        tmp_path / "scripts" / "go.py",
        'import subprocess\nsubprocess.run(["python", "train.py", "--fp16"])\n',
    )
    assert roles() == {("train.py", 8, "code"), ("tests/test_train.py", 5, "test")}


REAL_MODES = Path(__file__).parent / "data" / "real_modes"


def test_a_scaler_only_a_parameter_off_by_default_enables(tmp_path: Path) -> None:
    # starlight-vision's trainer enables its GradScaler with its `fp16` parameter, False by default,
    # and the package's trainer does not pass it: the LayerNorm's float16 variance is an option's.
    root = tmp_path / "project"
    shutil.copytree(REAL_MODES / "starlight_trainer_fp16_off_by_default", root)

    shown = partial(flagged_places, root, "AMP006")

    assert shown() == set()
    conditional = amplint_run(root, "check", ".", "--select", "AMP006", "--show-conditional")
    assert "only with `fp16` (a parameter that defaults to off)" in conditional.stdout
    assert shown("--show-conditional") == {("starlight_vision/core/gen2.py", 20)}
    model = root / "starlight_vision" / "model.py"
    write(
        model,
        model.read_text().replace(
            "StarlightTrainer(self.starlight)", "StarlightTrainer(self.starlight, fp16 = True)"
        ),
    )
    assert shown() == {("starlight_vision/core/gen2.py", 20)}
    # A config the project ships turns it on as well.
    write(model, model.read_text().replace(", fp16 = True", ", **config"))
    assert shown() == set()
    write(root / "configs" / "train.yaml", "fp16: true\n")
    assert shown() == {("starlight_vision/core/gen2.py", 20)}
