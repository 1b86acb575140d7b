"""What the command-line tests share: the snippets they check and how they run amplint."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The snippets use rules that are on by default (opt-in rules need `extend-select`).
# AMP008 flags the deprecated `torch.cuda.amp.GradScaler` at line 5, column 9, and fixes it.
HAZARD = """\
import torch


def make_scaler():
    s = torch.cuda.amp.GradScaler()
    return s
"""
HAZARD_LINE, HAZARD_COLUMN = 5, 9
HAZARD_CODE = "AMP008"
HAZARD_FIXED = HAZARD.replace("torch.cuda.amp.GradScaler()", 'torch.amp.GradScaler("cuda")')

# AMP011 (no automatic fix) on line 6, AMP006 (fixed) on line 7.
OTHERS = """\
import torch
from transformers import AutoModelForCausalLM


def load_and_norm(x):
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2-7B", torch_dtype=torch.float16, attn_implementation="eager")
    var = x.pow(2).mean(-1, keepdim=True)
    return model, x * torch.rsqrt(var + 1e-6)


torch.set_default_dtype(torch.float16)  # the steps run in float16: the AMP006 finding rests on this line
STEPS = [load_and_norm]
"""


def amplint_run(
    cwd: Path, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`amplint ARGS` in a fresh process, with `env` added to this one's environment."""
    return subprocess.run(
        [sys.executable, "-m", "amplint", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **env} if env is not None else None,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
