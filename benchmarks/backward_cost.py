"""Cost of `amplint trace --backward` next to the forward-only trace of the same model: wall time
and peak memory on transformers configurations, `--layers 2 --seq-len 64`.

    python benchmarks/backward_cost.py [--runs 3] [--models qwen2-7b,llama,...]

Qwen2-7B is the shape of the released model (hidden 3584, intermediate 18944, 28 heads, 4 key/value
heads, vocabulary 152064); every other model type is transformers' default configuration of that
type (`AutoConfig.for_model(type)`). Each measurement is a fresh `amplint trace --in-process`
process, interpreter start included, so that its peak RSS is the trace's own; the medians of
`--runs` runs are printed. Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trace_speed import QWEN2_7B  # the same config as the forward-only timings (this folder is on sys.path)

MODEL_TYPES = (
    "llama",
    "mistral",
    "gemma",
    "gpt2",
    "bert",
    "t5",
    "whisper",
    "vit",
    "clip",
    "mamba",
    "mixtral",
    "qwen2_moe",
)


def _config(name: str) -> dict:
    if name == "qwen2-7b":
        return QWEN2_7B
    import transformers

    return {"model_type": name, **transformers.AutoConfig.for_model(name).to_diff_dict()}


def _run(command: list[str], runs: int) -> tuple[float, float] | None:
    """Median wall seconds and median peak RSS (MB) of `runs` fresh processes; None if one fails."""
    walls, peaks = [], []
    for _ in range(runs):
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        walls.append(time.perf_counter() - start)
        if os.waitstatus_to_exitcode(status) not in (0, 1):  # 1: the trace has findings
            return None
        peaks.append(usage.ru_maxrss / 1024)
    return statistics.median(walls), statistics.median(peaks)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--models", default=",".join(("qwen2-7b", *MODEL_TYPES)))
    args = parser.parse_args()
    print(
        "| model | forward: wall (s) | peak RSS (MB) | --backward: wall (s) | peak RSS (MB) | ops forward / backward |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            path = Path(scratch) / f"{name}.json"
            path.write_text(json.dumps(_config(name)), encoding="utf-8")
            graph = Path(scratch) / "graph.json"
            base = [sys.executable, "-m", "amplint", "trace", "--hf-config", str(path), "--layers", "2"]
            base += ["--seq-len", "64", "--in-process", "--format", "json", "-o", str(graph)]
            forward = _run(base, args.runs)
            backward = _run([*base, "--backward"], args.runs)
            if forward is None or backward is None:
                print(f"| {name} | failed | | | | |")
                continue
            summary = json.loads(graph.read_text(encoding="utf-8"))["summary"]
            ops = f"{summary['ops']} / {summary['backward_ops']}"
            print(
                f"| {name} | {forward[0]:.1f} | {forward[1]:.0f} | {backward[0]:.1f} | {backward[1]:.0f} | {ops} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
