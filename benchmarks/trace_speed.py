"""Cost of `amplint trace --hf-config` on Qwen2-shaped configurations: it should grow with the
number of ops (layers) and stay flat in sequence length, in wall time and peak memory.

    python benchmarks/trace_speed.py run [--runs 3]   # trace_speed.json
    python benchmarks/trace_speed.py report [--write]  # its block of docs/tracing.md

Each measurement is a fresh `amplint trace --in-process` process, interpreter start included, so
that its peak RSS is the trace's own (the default child process adds one more interpreter start).
Needs torch and transformers.
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

RESULTS = Path(__file__).resolve().parent / "trace_speed.json"
PAGE = "tracing.md"
QWEN2_7B = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
}
QWEN2_72B = {
    **QWEN2_7B,
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
}


def _parameters(config: dict) -> int:
    h, i, layers, v = (
        config["hidden_size"],
        config["intermediate_size"],
        config["num_hidden_layers"],
        config["vocab_size"],
    )
    kv = h // config["num_attention_heads"] * config["num_key_value_heads"]
    per_layer = h * h * 2 + h * kv * 2 + 3 * h * i + 2 * h
    return layers * per_layer + 2 * v * h


# A real bf16 forward pass of the same configuration on CPU, in a fresh process: what tracing avoids.
_REAL_FORWARD = """
import json, sys, torch, transformers
data = json.load(open(sys.argv[1]))
config = transformers.AutoConfig.for_model(data.pop("model_type"), **data)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
with torch.no_grad():
    model(input_ids=torch.zeros(1, int(sys.argv[2]), dtype=torch.long), use_cache=False)
"""


def _run(command: list[str], runs: int) -> tuple[float, float]:
    walls, peaks = [], []
    for _ in range(runs):
        start = time.perf_counter()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        walls.append(time.perf_counter() - start)
        if status != 0:
            raise SystemExit(f"failed: {' '.join(command)}")
        peaks.append(usage.ru_maxrss / 1024)
    return statistics.median(walls), max(peaks)


def _measure(
    config: dict, seq_len: int, runs: int, scratch: Path, *, real: bool = False
) -> tuple[float, float]:
    path = scratch / "config.json"
    path.write_text(json.dumps(config))
    command = [
        sys.executable,
        "-m",
        "amplint",
        "trace",
        "--hf-config",
        str(path),
        "--seq-len",
        str(seq_len),
        "--format",
        "json",
        "-o",
        str(scratch / "graph.json"),
        "--in-process",
    ]
    if real:
        command = [sys.executable, "-c", _REAL_FORWARD, str(path), str(seq_len)]
    return _run(command, runs)


def _rows(runs: int, scratch: Path) -> list[dict[str, Any]]:
    rows = []

    def add(name: str, config: dict, seq_len: int, *, real: bool = False) -> None:
        wall, peak = _measure(config, seq_len, runs, scratch, real=real)
        print(name, seq_len, wall, peak, file=sys.stderr, flush=True)
        rows.append(
            {
                "configuration": name,
                "seq_len": seq_len,
                "wall_s": wall,
                "peak_mb": peak,
                "bf16_weights_gb": _parameters(config) * 2 / 1e9,
            }
        )

    for layers in (4, 8, 16, 28):
        add(f"Qwen2-7B shape, {layers} layers", {**QWEN2_7B, "num_hidden_layers": layers}, 4096)
    for seq_len in (512, 1024, 2048):
        add("Qwen2-7B, 28 layers", QWEN2_7B, seq_len)
    add("Qwen2-72B, 80 layers", QWEN2_72B, 4096)
    # Where a real forward pass fits on the machine: the same small configuration both ways.
    small = {**QWEN2_7B, "num_hidden_layers": 2}
    add("Qwen2-7B shape, 2 layers: trace", small, 512)
    add("the same: a real bf16 forward pass on CPU", small, 512, real=True)
    return rows


def report(data: dict[str, Any]) -> dict[str, str]:
    meta, runs = data["meta"], data["runs"]
    lines = [
        f"Measured with `python benchmarks/trace_speed.py run --runs {runs}`, then `report --write` (torch "
        f"{meta['versions']['torch']}, transformers {meta['versions']['transformers']}, a fresh process per run "
        "with interpreter start, "
        + (f"median of {runs}" if runs > 1 else "one run each")
        + f", on a {meta['cpus']}-core machine shared with other work, {docs_blocks.load_text(meta)}: the wall "
        "times grow with the load, the memory is each process's own):",
        "",
        "| Configuration | Seq len | Wall time | Peak RSS | bf16 weights alone |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [
        f"| {row['configuration']} | {row['seq_len']} | {row['wall_s']:.1f} s | {row['peak_mb']:,.0f} MB "
        f"| {row['bf16_weights_gb']:.1f} GB |"
        for row in data["rows"]
    ]
    return {"table": "\n".join(lines)}


def main() -> None:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--runs", type=int, default=3)
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args()
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "trace_speed", report)
        return
    meta = docs_blocks.machine()
    with tempfile.TemporaryDirectory() as scratch:
        rows = _rows(args.runs, Path(scratch))
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), "runs": args.runs, "rows": rows})


if __name__ == "__main__":
    main()
