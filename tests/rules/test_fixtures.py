"""The bundled fixtures reproduce the cases amplint exists for: each is found at its line, the
original RWKV7 form is not, and `--fix` on the RWKV7 fixture yields the documented upcast."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import amplint

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


# Copied out of fixtures/, away from the training script that runs it under bf16 autocast, the file
# says how it runs itself; its fix is unsafe (the upcast log-decay reaches its consumers in float32).
FIX_RWKV = [sys.executable, "-m", "amplint", "check", "--modes", "autocast-bf16", "--unsafe-fixes", "--fix"]


def _line_of(path: Path, needle: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(number for number, line in enumerate(lines, 1) if needle in line)


def test_each_case_is_found_where_it_is() -> None:
    found = {(Path(d.path).name, d.code, d.line) for d in amplint.check_paths([FIXTURES])}
    rwkv = FIXTURES / "rwkv7_time_mix.py"
    qwen = FIXTURES / "qwen2_eager_attention.py"
    sampling = FIXTURES / "sampling.py"
    vit = FIXTURES / "vit_attention.py"
    assert found == {
        ("rwkv7_time_mix.py", "AMP001", _line_of(rwkv, ".sigmoid()")),
        ("qwen2_eager_attention.py", "AMP002", _line_of(qwen, "key_states.transpose(2, 3)) * self.scaling")),
        ("sampling.py", "AMP007", _line_of(sampling, "torch.cumsum(sorted_probs")),  # top-p in half
        ("sampling.py", "AMP007", _line_of(sampling, "torch.cumsum(sorted_probs")),
        ("sampling.py", "AMP013", _line_of(sampling, "torch.multinomial(sorted_probs")),
        ("vit_attention.py", "AMP002", _line_of(vit, "q @ k.transpose")),
    }  # a half softmax feeding `@ v` or a sampler is not AMP003's: its kernel accumulates in float32


def test_the_evidence_says_each_step_once() -> None:
    # q and k both come back from `rotate_half` (inside `apply_rotary_pos_emb`): one step, said once.
    (scores,) = [
        d for d in amplint.check_paths([FIXTURES]) if Path(d.path).name == "qwen2_eager_attention.py"
    ]
    assert scores.message.count("returned by `rotate_half`") == 1, scores.message
    assert ".half()` at fixtures/generate.py:15" in scores.message


def test_fix_applies_the_rwkv7_upcast(tmp_path: Path) -> None:
    target = tmp_path / "rwkv7_time_mix.py"
    shutil.copy(FIXTURES / "rwkv7_time_mix.py", target)
    run = subprocess.run([*FIX_RWKV, str(target)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    fixed = target.read_text(encoding="utf-8")
    assert "w = -math.exp(-0.5) * self.w_lora(xw).to(torch.float32).sigmoid()" in fixed
    assert amplint.check_paths([target], select=["AMP001"], modes=["autocast-bf16"]) == []
    assert amplint.check_paths([FIXTURES / "rwkv7_time_mix.py"], select=["AMP001"], modes=["autocast-bf16"])


def test_fixed_rwkv7_fixture_still_runs(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    target = tmp_path / "rwkv7_fixed.py"
    shutil.copy(FIXTURES / "rwkv7_time_mix.py", target)
    subprocess.run([*FIX_RWKV, "-q", str(target)], check=True)
    assert ".to(torch.float32).sigmoid()" in target.read_text(encoding="utf-8")  # the fix is what runs
    namespace: dict[str, object] = {}
    exec(compile(target.read_text(encoding="utf-8"), str(target), "exec"), namespace)
    model, (x,) = namespace["factory"]()  # type: ignore[operator]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    assert out.shape == x.shape
    assert torch.isfinite(out).all()
