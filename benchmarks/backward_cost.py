"""Cost of `amplint trace --backward` next to the forward-only trace of the same model: wall time
and peak memory on transformers configurations, `--layers 2 --seq-len 64`.

    python benchmarks/backward_cost.py run [--runs 3] [--models qwen2-7b,llama,...]  # backward_cost.json
    python benchmarks/backward_cost.py report [--write]  # its block of docs/tracing.md

Qwen2-7B is the shape of the released model (hidden 3584, intermediate 18944, 28 heads, 4 key/value
heads, vocabulary 152064); every other model type is transformers' default configuration of that
type (`AutoConfig.for_model(type)`). Each measurement is a fresh `amplint trace --in-process`
process, interpreter start included, so that its peak RSS is the trace's own; the medians of
`--runs` runs are printed. Needs torch and transformers.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs
from trace_speed import QWEN2_7B  # the same config as the forward-only timings (this folder is on sys.path)

RESULTS = Path(__file__).resolve().parent / "backward_cost.json"
PAGE = "tracing.md"


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


NAMES = {
    "qwen2-7b": "Qwen2-7B",
    "llama": "Llama",
    "mistral": "Mistral",
    "gemma": "Gemma",
    "gpt2": "GPT-2",
    "bert": "BERT (causal LM head)",
    "t5": "T5",
    "whisper": "Whisper",
    "vit": "ViT (image classification)",
    "clip": "CLIP (image classification)",
    "mamba": "Mamba",
    "mixtral": "Mixtral (MoE)",
    "qwen2_moe": "Qwen2-MoE",
}


def report(data: dict[str, Any]) -> dict[str, str]:
    meta, runs = data["meta"], data["runs"]
    lines = [
        f"`python benchmarks/backward_cost.py run --runs {runs} --models {','.join(r['model'] for r in data['rows'])}`, "
        "then `report --write`: each configuration traced with `--layers 2 --seq-len 64`, a fresh "
        "`amplint trace --in-process` process per run (interpreter start and the torch and transformers "
        "imports included), "
        + (f"the medians of {runs} runs" if runs > 1 else "one run each")
        + f", torch {meta['versions']['torch']}, transformers {meta['versions']['transformers']}, on a "
        f"{meta['cpus']}-core machine shared with other jobs ({docs_blocks.load_text(meta)}: the wall times "
        "grow with the load, the memory is each process's own). Qwen2-7B has the released model's shape; the "
        "other types are transformers' default configuration of that type.",
        "",
        "| Model | Forward: wall | Peak RSS | `--backward`: wall | Peak RSS | Ops forward / backward |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in data["rows"]:
        name = NAMES.get(row["model"], row["model"])
        if "forward" not in row:
            lines.append(f"| {name} | failed | | | | |")
            continue
        forward, backward = row["forward"], row["backward"]
        lines.append(
            f"| {name} | {forward['wall_s']:.1f} s | {forward['peak_mb']:.0f} MB | {backward['wall_s']:.1f} s "
            f"| {backward['peak_mb']:.0f} MB | {row['ops']} / {row['backward_ops']} |"
        )
    return {"table": "\n".join(lines)}


def main() -> None:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--runs", type=int, default=3)
    go.add_argument("--models", default=",".join(NAMES))
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args()
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "backward_cost", report)
        return
    meta = docs_blocks.machine()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            path = Path(scratch) / f"{name}.json"
            path.write_text(json.dumps(_config(name)), encoding="utf-8")
            graph = Path(scratch) / "graph.json"
            base = [sys.executable, "-m", "amplint", "trace", "--hf-config", str(path), "--layers", "2"]
            base += ["--seq-len", "64", "--in-process", "--format", "json", "-o", str(graph)]
            forward = _run(base, args.runs)
            backward = _run([*base, "--backward"], args.runs)
            print(name, forward, backward, file=sys.stderr, flush=True)
            if forward is None or backward is None:
                rows.append({"model": name})
                continue
            summary = json.loads(graph.read_text(encoding="utf-8"))["summary"]
            rows.append(
                {
                    "model": name,
                    "forward": {"wall_s": forward[0], "peak_mb": forward[1]},
                    "backward": {"wall_s": backward[0], "peak_mb": backward[1]},
                    "ops": summary["ops"],
                    "backward_ops": summary["backward_ops"],
                }
            )
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), "runs": args.runs, "rows": rows})


if __name__ == "__main__":
    main()
