"""The torch versions a project supports: `torch-version`, or the torch its pyproject.toml depends on,
decide whether a deprecation reaches the project and whether the replacement API exists there."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support import amplint_run, write

from amplint.config import ConfigError, Settings, load_settings
from amplint.static.profile import TorchRange

SCALER = "import torch\n\n\ndef make():\n    return torch.cuda.amp.GradScaler()\n"
AUTOCAST = (
    "import torch\n\n\ndef run(model, x):\n    with torch.cuda.amp.autocast():\n        return model(x)\n"
)


@pytest.mark.parametrize(
    ("requirement", "low", "high"),
    [
        ("", None, None),
        ("torch", None, None),
        ("torch>=1.13.1", (1, 13), None),
        ("torch (<1.13.0,>=1.10.0)", (1, 10), (1, 13)),  # older wheel metadata
        ("torch==2.1.0", (2, 1), (2, 2)),
        ("~=2.1", (2, 1), (3, 0)),
        ("<=2.3.1", None, (2, 4)),
        ("<2.4", None, (2, 4)),
        ('torch>=2.0 ; python_version>"3.8"', (2, 0), None),
    ],
)
def test_requirements_parse(
    requirement: str, low: tuple[int, int] | None, high: tuple[int, int] | None
) -> None:
    assert TorchRange.parse(requirement) == TorchRange(low, high)


def test_a_range_knows_which_versions_it_reaches() -> None:
    assert TorchRange.parse(">=2.3").always((2, 3)) and not TorchRange.parse(">=2.2").always((2, 3))
    assert not TorchRange.parse("").always((1, 10))  # unknown: nothing is certain
    assert TorchRange.parse("<2.4").ever((2, 3)) and not TorchRange.parse("<2.4").ever((2, 4))


def test_the_dependency_in_pyproject_stands_for_the_setting(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[project]\nname = "p"\ndependencies = ["numpy", "torch>=1.13"]\n')
    write(tmp_path / "src" / "m.py", "x = 1\n")
    assert load_settings([Path("src")], cwd=tmp_path).torch_version == "torch>=1.13"
    write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "p"\ndependencies = ["torch>=1.13"]\n\n[tool.amplint]\ntorch-version = ">=2.4"\n',
    )
    assert load_settings([Path("src")], cwd=tmp_path).torch_version == ">=2.4"


def test_a_wrong_torch_version_names_the_key(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", "[tool.amplint]\ntorch-version = 2.4\n")
    with pytest.raises(ConfigError, match=r"'torch-version' must be a torch requirement"):
        load_settings([tmp_path], cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"--torch-version .*'banana'"):
        Settings().with_overrides(torch_version="banana")


def test_a_replacement_the_oldest_supported_torch_lacks_is_never_applied(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[project]\nname = "p"\ndependencies = ["torch>=1.13"]\n')
    write(tmp_path / "train.py", SCALER)
    write(tmp_path / "infer.py", AUTOCAST)
    proc = amplint_run(tmp_path, "check", ".", "--format", "json", "--no-cache")
    found = {d["path"]: d for d in json.loads(proc.stdout)["diagnostics"]}
    # torch.amp.GradScaler arrived in 2.3: shown, never written; torch.amp.autocast is there since 1.10.
    assert found["train.py"]["fix"]["applicability"] == "display-only"
    assert (
        "the project supports torch >=1.13, and `torch.amp.GradScaler` needs torch 2.3"
        in found["train.py"]["message"]
    )
    assert found["infer.py"]["fix"]["applicability"] == "safe"
    amplint_run(tmp_path, "check", ".", "--fix", "--unsafe-fixes", "--no-cache")
    assert (tmp_path / "train.py").read_text() == SCALER
    # The old API meant float16: the rewrite keeps it (torch.amp.autocast alone inherits a region's).
    assert 'torch.amp.autocast("cuda", dtype=torch.float16)' in (tmp_path / "infer.py").read_text()


def test_no_finding_where_no_supported_torch_deprecates_the_api(tmp_path: Path) -> None:
    write(tmp_path / "train.py", SCALER)
    assert (
        amplint_run(tmp_path, "check", ".", "--no-cache", "--torch-version", ">=1.10,<1.13").returncode == 0
    )
    assert amplint_run(tmp_path, "check", ".", "--no-cache", "--torch-version", ">=2.3").returncode == 1


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("setup.py", 'setup(name="p", install_requires=["numpy", "torchvision", "torch==2.0.1"])\n'),
        ("setup.cfg", "[options]\ninstall_requires =\n    numpy\n    torch>=1.13,<2.4  # tested\n"),
        ("requirements.txt", "# core\n-r base.txt\ntorchaudio\ntorch==2.1.0\n"),
    ],
)
def test_a_pin_in_setup_or_requirements_files_stands_for_the_setting(
    name: str, text: str, tmp_path: Path
) -> None:
    write(tmp_path / name, text)
    write(tmp_path / "src" / "m.py", "x = 1\n")
    expected = {
        "setup.py": "torch==2.0.1",
        "setup.cfg": "torch>=1.13,<2.4",
        "requirements.txt": "torch==2.1.0",
    }
    assert load_settings([Path("src")], cwd=tmp_path).torch_version == expected[name]
    # `[project] dependencies` comes first where it names torch.
    write(tmp_path / "pyproject.toml", '[project]\nname = "p"\ndependencies = ["torch>=2.5"]\n')
    assert load_settings([Path("src")], cwd=tmp_path).torch_version == "torch>=2.5"


REAL_PINS = Path(__file__).parents[1] / "static" / "data" / "real_pins"


@pytest.mark.parametrize(("pin", "flagged"), [("torch==2.0.1", False), ("torch>=2.4", True)])
def test_open_flamingo_pins_torch_in_setup_py(pin: str, flagged: bool, tmp_path: Path) -> None:
    # open-flamingo's setup.py pins torch==2.0.1, where torch.cuda.amp.autocast is not deprecated.
    root = tmp_path / "project"
    shutil.copytree(REAL_PINS / "open_flamingo_setup_py_pin", root)
    setup = root / "setup.py"
    setup.write_text(setup.read_text().replace('"torch==2.0.1"', f'"{pin}"'))
    proc = amplint_run(root, "check", ".", "--select", "AMP008", "--format", "json", "--no-cache")
    found = [(d["path"], d["line"]) for d in json.loads(proc.stdout)["diagnostics"]]
    utils = "open_flamingo/eval/utils.py"
    assert found == ([(utils, 11), (utils, 14)] if flagged else [])
