"""What the command-line tests share: the snippets they check and how they run amplint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HAZARD = """\
import torch


def decay(x):
    w = torch.sigmoid(x)
    return torch.exp(w)
"""
HAZARD_LINE, HAZARD_COLUMN = 5, 9

ATTENTION = """\
import math
import torch


def attention_loss(q, k, target):
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    log_probs = scores.log_softmax(dim=-1)
    return torch.nn.functional.nll_loss(log_probs.flatten(0, -2), target.flatten())
"""


def amplint_run(cwd: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "amplint", *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
