"""AMP900 on exactly the files Python rejects, on generated edge cases and a sample of the standard
library (`benchmarks/parse_parity.py` runs the whole standard library and site-packages)."""

from __future__ import annotations

import importlib.util
import sysconfig
from pathlib import Path

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
    assert result["python_rejects"] >= 6
    assert (result["false_amp900"], result["missed_amp900"]) == ([], [])


def test_a_sample_of_the_standard_library() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    result = parity.run([stdlib / "json", stdlib / "email", stdlib / "asyncio"])
    assert isinstance(result["files"], int) and result["files"] > 50
    assert (result["false_amp900"], result["missed_amp900"]) == ([], [])
