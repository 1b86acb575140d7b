"""The reports of real traces: `amplint trace`'s text output (what was built and how, the findings
first, the op table only when asked for, counts whose parts add up to their totals), the messages of
the runtime rules checked against the numbers they summarize, and the snippets of runtime findings."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from support import amplint_call

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
TINY_QWEN2 = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "torch_dtype": "bfloat16",
}
_FORWARD = re.compile(
    r"^(\d+) ops: (\d+) computing \((.*)\), (\d+) casts? \((\d+) inserted by autocast, (\d+) explicit\)", re.M
)
_BACKWARD = re.compile(r"^(\d+) backward ops: (\d+) computing \((.*)\), (\d+) casts of a gradient", re.M)


def _parts(listed: str) -> int:
    """The sum of `200 bfloat16, 33 float32, 2 with no tensor output`."""
    return sum(int(part.split()[0]) for part in listed.split(", "))


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_QWEN2), encoding="utf-8")
    return path


def test_counts_add_up_on_a_transformers_model(tmp_path: Path) -> None:
    config = _config(tmp_path)
    # The config's bfloat16 weights alone would run as built, without autocast: the mode asks for
    # autocast so that its casts are counted too.
    done = amplint_call(
        tmp_path, "trace", "--hf-config", config, "--seq-len", "16", "--backward", "--mode", "autocast-bf16"
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("# traced Qwen2ForCausalLM from ")
    assert "cuda autocast bfloat16" in text.splitlines()[0]
    forward = _FORWARD.search(text)
    assert forward is not None, text
    total, computing, listed, casts, by_autocast, explicit = forward.groups()
    assert int(total) == int(computing) + int(casts)
    assert int(computing) == _parts(listed)
    assert int(casts) == int(by_autocast) + int(explicit) and int(by_autocast) > 0
    backward = _BACKWARD.search(text)
    assert backward is not None, text
    total, computing, listed, casts = backward.groups()
    assert int(total) == int(computing) + int(casts) and int(computing) == _parts(listed)
    # The islands are some of the float32 ops, counted as such.
    islands = re.search(
        r"^(\d+) of the (\d+) float32 ops (?:is a float32 island|are float32 islands)", text, re.M
    )
    assert islands is not None and int(islands.group(1)) <= int(islands.group(2))
    assert re.search(r"\b(\d+) float32\b", listed) is not None
    # No table unless asked: a line says how to get one.
    assert "--ops lists each op" in text and "\nid  " not in text and "lower_precision" not in text
    # The JSON's nodes are the ops counted.
    data = json.loads(
        amplint_call(tmp_path, "trace", "--hf-config", config, "--seq-len", "16", "--format", "json").stdout
    )
    assert data["model"] == "Qwen2ForCausalLM"
    forward_nodes = [n for n in data["nodes"] if n["policy"] != "input"]
    assert len(forward_nodes) == data["summary"]["ops"]


def test_the_table_comes_behind_ops_after_the_findings(tmp_path: Path) -> None:
    target = f"{FIXTURES / 'qwen2_fp16_overflow.py'}:factory"
    done = amplint_call(
        tmp_path, "trace", target, "--no-autocast", "--param-dtype", "float16", "--values", "--ops"
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("# traced Qwen2Attention from ")
    assert "no autocast, parameters cast to float16" in lines[0]
    finding = next(i for i, line in enumerate(lines) if ": AMP105 " in line)
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["id", "op", "dtypes"])
    counts = next(i for i, line in enumerate(lines) if _FORWARD.match(line))
    assert finding < header < counts
    rows = [line for line in lines[header + 1 : counts] if line.strip()]
    counted = _FORWARD.match(lines[counts])
    assert counted is not None
    total, computing, _, casts, by_autocast, _ = counted.groups()
    assert len(rows) == int(total) == int(computing) + int(casts) and int(by_autocast) == 0
    assert "--ops lists each op" not in done.stdout
    # Every op is replayed or said not to hold a floating-point value.
    replayed = re.search(
        r"^values: (\d+) of the (\d+) ops replayed against float64 \((\d+) produce no", done.stdout, re.M
    )
    assert replayed is not None, done.stdout
    assert int(replayed.group(1)) + int(replayed.group(3)) == int(replayed.group(2)) == int(total)


# --- messages checked against the numbers they summarize ----------------------------------------

# One element of 4096 overflows float16 (1000 * 100 > 65504); bfloat16 and float64 hold it. The
# second product overflows bfloat16 as well (1e20 squared), where float64 holds it.
SCALE = """\
import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((4096,), 100.0))

    def forward(self, x):
        return x * self.w


class Square(nn.Module):
    def forward(self, x):
        return x * x


def scale():
    x = torch.rand(4096)
    x[7] = 1000.0
    return Scale(), (x,)


def square():
    x = torch.rand(4096)
    x[7] = 1e20
    return Square(), (x,)
"""

# A mask built from float32's minimum and cast to the scores' float16 two lines later.
MASK = """\
import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(32, 32)
        self.k = nn.Linear(32, 32)

    def forward(self, x):
        scores = self.q(x) @ self.k(x).transpose(-1, -2)
        mask = torch.full((x.shape[1], x.shape[1]), torch.finfo(torch.float32).min, device=x.device).triu(1)
        return (scores + mask.to(scores.dtype)).softmax(-1)


def factory():
    torch.manual_seed(0)
    return Attention(), (torch.randn(1, 16, 32),)
"""


def _json(tmp_path: Path, target: str, *flags: str) -> dict:
    done = amplint_call(tmp_path, "trace", target, "--values", "--format", "json", *flags)
    assert done.returncode in {0, 1}, done.stderr
    return json.loads(done.stdout)


def _finding(data: dict, code: str) -> dict:
    [finding] = [f for f in data["findings"] if f["code"] == code]
    return finding


def test_a_share_under_one_percent_prints_as_such(tmp_path: Path) -> None:
    (tmp_path / "scale.py").write_text(SCALE, encoding="utf-8")
    data = _json(tmp_path, "scale.py:scale", "--no-autocast", "--param-dtype", "float16")
    finding = _finding(data, "AMP105")
    assert finding["overflow"] == 1 / 4096
    assert "`mul` produced inf in 0.02% of its values" in finding["message"]
    # Its input's range is the values seen: the 1000 among them.
    assert "inputs in [" in finding["message"] and ", 1e+03]" in finding["message"]
    # The op is in float16: bfloat16's range is a way out.
    assert "run in bfloat16" in finding["help"]


def test_no_bfloat16_hint_for_an_op_already_in_bfloat16(tmp_path: Path) -> None:
    (tmp_path / "scale.py").write_text(SCALE, encoding="utf-8")
    data = _json(tmp_path, "scale.py:square", "--no-autocast", "--param-dtype", "bfloat16")
    finding = _finding(data, "AMP105")
    assert "`mul` produced inf in 0.02% of its values (bfloat16;" in finding["message"]
    assert "bfloat16" not in finding["help"] and finding["help"].startswith("upcast to float32 before `mul`")


def test_a_cast_of_float32s_minimum_shows_the_range_it_read(tmp_path: Path) -> None:
    (tmp_path / "mask.py").write_text(MASK, encoding="utf-8")
    data = _json(tmp_path, "mask.py:factory", "--no-autocast", "--param-dtype", "float16")
    finding = _finding(data, "AMP105")
    assert finding["line"] == 14 and "`_to_copy` produced inf in 47% of its values" in finding["message"]
    # The mask holds float32's minimum and zeros, as the message says; never "[0, 0]".
    assert "inputs in [-3.4e+38, 0])" in finding["message"]
    assert finding["input_ranges"] == [[-3.4028234663852886e38, 0.0]]
    # Its input is float32 already: an upcast before the cast changes nothing.
    assert ".float()" not in finding["help"] and "torch.finfo(torch.float16).min" in finding["help"]
    assert "keep them in float32" in finding["help"]


def test_a_runtime_finding_shows_its_line_beside_refuted_static_ones(tmp_path: Path) -> None:
    # The static pass flags lines of the attention file that the trace refutes; the run keeps only
    # those lines of the file, and AMP104's line (the float16 mask added to bfloat16 scores) is
    # another one: its snippet must show it all the same.
    for name in ("qwen2_eager_attention.py", "qwen2_fp16_overflow.py"):
        shutil.copy(FIXTURES / name, tmp_path / name)
    done = amplint_call(
        tmp_path, "check", "--confirm", "--target", "qwen2_fp16_overflow.py:factory", "--no-cache", "."
    )
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if ": AMP104 " in line)
    assert lines[header].startswith(
        "qwen2_eager_attention.py:89:28: AMP104 `add` reads both bfloat16 and float16"
    )
    assert lines[header + 2] == "89 |             attn_weights = attn_weights + attention_mask"
    # The float16 side is the mask the factory passes, not an op at "an unknown line".
    assert "float16 from an input of the traced call (an argument or a buffer)" in lines[header]


# float32 values too small for float16, cast down: the cast flushes them.
TINY = """\
import torch
from torch import nn


class Tiny(nn.Module):
    def forward(self, x):
        small = x.float() * 1e-9
        return small.half()


def factory():
    return Tiny(), (torch.linspace(0.5, 1.5, 4096),)
"""


def test_an_underflowing_cast_is_not_told_to_upcast_its_float32_input(tmp_path: Path) -> None:
    (tmp_path / "tiny.py").write_text(TINY, encoding="utf-8")
    data = _json(tmp_path, "tiny.py:factory", "--no-autocast", "--param-dtype", "float16")
    finding = _finding(data, "AMP107")
    assert finding["line"] == 8 and "`_to_copy` flushed 100% of its non-zero values" in finding["message"]
    assert "(limit 1%)" in finding["message"]
    assert "inputs in [5e-10, 1.5e-09]" in finding["evidence"]
    assert ".float()" not in finding["help"] and "keep them in float32" in finding["help"]
