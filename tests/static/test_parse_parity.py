"""AMP900 on exactly the files Python rejects, on generated edge cases and a sample of the standard
library (`benchmarks/parse_parity.py` runs the whole standard library and site-packages), and none
on valid code in the grammar of the project's Python."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sysconfig
from pathlib import Path

import pytest
from libcst import KNOWN_PYTHON_VERSION_STRINGS
from support import amplint_run, write

from amplint.static.profile import NEWEST_PYTHON

_SPEC = importlib.util.spec_from_file_location(
    "parse_parity", Path(__file__).parents[2] / "benchmarks" / "parse_parity.py"
)
assert _SPEC is not None and _SPEC.loader is not None
parity = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(parity)

HALF = "s = torch.cuda.amp.GradScaler()\n"  # a word the rules look for, so libcst parses the file too
EDGE_CASES: dict[str, bytes] = {
    "parens_190.py": ("import torch\nx = " + "(" * 190 + "1" + ")" * 190 + "\n" + HALF).encode(),
    "parens_250.py": ("import torch\nx = " + "(" * 250 + "1" + ")" * 250 + "\n" + HALF).encode(),
    "elif_500.py": (
        "import torch\nif a == 0:\n    pass\n"
        + "".join(f"elif a == {i}:\n    pass\n" for i in range(1, 500))
        + HALF
    ).encode(),
    "binop_5000.py": ("import torch\nx = 1" + " + 1" * 5000 + "\n" + HALF).encode(),
    "list_20000.py": (
        "import torch\nx = [\n" + "".join(f"    {i},\n" for i in range(20000)) + "]\n" + HALF
    ).encode(),
    "strings_5000.py": (
        "import torch\nx = (\n" + "".join(f'    "s{i}"\n' for i in range(5000)) + ")\n" + HALF
    ).encode(),
    "bom.py": b"\xef\xbb\xbfimport torch\n" + HALF.encode(),
    "latin1.py": b"# -*- coding: latin-1 -*-\nimport torch\nname = '\xe9'\n" + HALF.encode(),
    "bad_coding.py": b"# -*- coding: klingon -*-\nimport torch\n" + HALF.encode(),
    "form_feed.py": b"import torch\n\x0c\n" + HALF.encode(),
    "mixed_tabs_ok.py": b"import torch\nif True:\n\tif True:\n\t        " + HALF.encode(),
    "mixed_tabs_bad.py": b"import torch\nif True:\n        x = 1\n\ty = 2\n" + HALF.encode(),
    "cr_only.py": b"import torch\rx = 1\r" + HALF.encode().replace(b"\n", b"\r"),
    "nul_byte.py": b"import torch\nx = 1\x00\n" + HALF.encode(),
    "syntax_error.py": b"import torch\ndef f(:\n    pass\n" + HALF.encode(),
    "walrus_in_comprehension_ok.py": b"import torch\ny = [z := 1, z]\n" + HALF.encode(),
    # Refused by the compiler, not the parser: an AST alone would accept them.
    "late_future.py": b"import torch\nfrom __future__ import annotations\n" + HALF.encode(),
    "module_return.py": b"import torch\nreturn 1\n" + HALF.encode(),
}


def test_generated_edge_cases(tmp_path: Path) -> None:
    for name, data in EDGE_CASES.items():
        (tmp_path / name).write_bytes(data)
    result = parity.run([tmp_path])
    assert result["files"] == len(EDGE_CASES)
    # The bad coding, the bad tabs, the NUL byte, the syntax error, the late future, the return.
    assert len(result["python_rejects"]) >= 6
    assert (result["false_amp900"], result["missed_amp900"]) == ([], [])


def test_a_sample_of_the_standard_library() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    result = parity.run([stdlib / "json", stdlib / "email", stdlib / "asyncio"])
    assert isinstance(result["files"], int) and result["files"] > 50
    assert (result["false_amp900"], result["missed_amp900"]) == ([], [])


NEWER = Path(__file__).parent / "data" / "newer_python"


def _amp(root: Path, *args: str) -> list[dict]:
    done = amplint_run(root, "check", ".", "--no-cache", "--format", "json", *args)
    assert done.returncode in (0, 1), done.stderr
    return [
        {k: d[k] for k in ("path", "code", "message", "help")} for d in json.loads(done.stdout)["diagnostics"]
    ]


def test_valid_python_312_and_313_is_checked_on_any_python(tmp_path: Path) -> None:
    """The corpus uses PEP 695, 696 and 701 syntax, which Python 3.11's `compile()` refuses;
    without a declared Python, the newest grammar libcst reads decides."""
    shutil.copytree(NEWER, tmp_path / "corpus")
    found = _amp(tmp_path / "corpus", "--extend-select", parity.OPT_IN)
    assert [d["code"] for d in found if d["code"] == "AMP900"] == []
    # Not skipped: the rules read the file (its deprecated GradScaler is found).
    assert [(d["path"], d["code"]) for d in found] == [("type_aliases.py", "AMP008")]


@pytest.mark.parametrize(
    "declared",
    ['[tool.amplint]\ntarget-version = "py311"\n', '[project]\nrequires-python = ">=3.11,<4"\n'],
)
def test_the_projects_python_decides_and_is_named(tmp_path: Path, declared: str) -> None:
    shutil.copytree(NEWER, tmp_path, dirs_exist_ok=True)
    write(tmp_path / "pyproject.toml", declared)
    refused = {d["path"]: d["help"] for d in _amp(tmp_path) if d["code"] == "AMP900"}
    # Python 3.11 has no `type` statement nor type parameters, whichever Python runs amplint.
    assert {"type_aliases.py", "generic_classes.py", "type_defaults.py"} <= set(refused)
    assert all(why == "Python 3.11, the project's Python, refuses it" for why in refused.values()), refused


def test_a_stale_requires_python_floor_is_read_as_python_37(tmp_path: Path) -> None:
    # `requires-python = ">=3.4"` on code with annotated assignments (3.6) is a stale bound, not
    # the project's grammar; Python 3.7 still refuses what came after it (`:=`, 3.8).
    write(tmp_path / "pyproject.toml", '[project]\nrequires-python = ">=3.4"\n')
    write(tmp_path / "alias.py", "from typing import Any\nParams: Any = None\n")
    write(tmp_path / "walrus.py", "if (n := 3) > 2:\n    pass\n")
    refused = {d["path"]: d["help"] for d in _amp(tmp_path) if d["code"] == "AMP900"}
    assert refused == {"walrus.py": "Python 3.7, the project's Python, refuses it"}


def test_a_target_version_amplint_cannot_read_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.amplint]\ntarget-version = "py27"\n')
    write(tmp_path / "a.py", "x = 1\n")
    done = amplint_run(tmp_path, "check", ".")
    assert done.returncode == 2
    assert "'target-version' must be a Python version such as \"py312\"" in done.stderr


def test_the_newest_grammar_is_libcsts() -> None:
    newest = max(KNOWN_PYTHON_VERSION_STRINGS, key=lambda v: tuple(map(int, v.split("."))))
    assert tuple(map(int, newest.split("."))) == NEWEST_PYTHON
