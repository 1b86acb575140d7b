"""What the command-line tests share: the snippets they check and how they run amplint."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
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


def flagged_places(root: Path, code: str, *options: str) -> set[tuple[str, int]]:
    """(path, line) of each finding `amplint check . --select CODE OPTIONS` shows in `root`, run as
    `amplint_run` runs it."""
    run = amplint_run(root, "check", ".", "--select", code, "--format", "json", *options)
    return {(d["path"], d["line"]) for d in json.loads(run.stdout)["diagnostics"]}


def amplint_call(
    cwd: Path | None, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`amplint ARGS` as `amplint_run` runs it, but in this process (`amplint.cli.main`), in `cwd`
    (else this process's folder): the traces it starts fork from this test process's trace server,
    which imported torch (and transformers) once, where each fresh `amplint` imports them again.
    For the tests of what a run finds; what only a process of its own shows (its imports, signals,
    exit) keeps `amplint_run`, and so does a trace run `--in-process` (it would patch torch here)."""
    if "--in-process" in args:
        return amplint_run(cwd or Path.cwd(), *args, env=env)
    from amplint.cli import main

    stdout, stderr = io.TextIOWrapper(io.BytesIO(), "utf-8"), io.StringIO()
    before = (Path.cwd(), dict(os.environ), signal.getsignal(signal.SIGTERM))
    os.chdir(cwd or before[0])
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                code = main([str(arg) for arg in args])
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(before[0])
        os.environ.clear()
        os.environ.update(before[1])
        signal.signal(signal.SIGTERM, before[2])
    stdout.flush()
    printed = stdout.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(["amplint", *map(str, args)], code, printed, stderr.getvalue())


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
