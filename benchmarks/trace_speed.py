"""Cost of `amplint trace --hf-config` on Qwen2-shaped configurations: it should grow with the
number of ops (layers) and stay flat in sequence length, in wall time and peak memory.

    python benchmarks/trace_speed.py [--runs 3]

Each measurement is a fresh `amplint trace --in-process` process, interpreter start included, so
that its peak RSS is the trace's own (the default child process adds one more interpreter start).
Needs torch and transformers.
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for layers in (4, 8, 16, 28):
            config = {**QWEN2_7B, "num_hidden_layers": layers}
            rows.append(
                (
                    f"Qwen2-7B shape, {layers} layers",
                    4096,
                    config,
                    *_measure(config, 4096, args.runs, Path(scratch)),
                )
            )
        for seq_len in (512, 1024, 2048):
            rows.append(
                (
                    "Qwen2-7B, 28 layers",
                    seq_len,
                    QWEN2_7B,
                    *_measure(QWEN2_7B, seq_len, args.runs, Path(scratch)),
                )
            )
        rows.append(
            ("Qwen2-72B, 80 layers", 4096, QWEN2_72B, *_measure(QWEN2_72B, 4096, args.runs, Path(scratch)))
        )
        # Where a real forward pass fits on the machine: the same small configuration both ways.
        small = {**QWEN2_7B, "num_hidden_layers": 2}
        for label, real in (("trace", False), ("real bf16 forward on CPU", True)):
            measured = _measure(small, 512, args.runs, Path(scratch), real=real)
            rows.append((f"Qwen2-7B shape, 2 layers: {label}", 512, small, *measured))
    print(
        f"| configuration | seq len | median wall (s), {args.runs} runs | peak RSS (MB) | bf16 weights alone (GB) |"
    )
    print("| --- | --- | --- | --- | --- |")
    for name, seq_len, config, wall, peak in rows:
        print(f"| {name} | {seq_len} | {wall:.2f} | {peak:.0f} | {_parameters(config) * 2 / 1e9:.1f} |")


if __name__ == "__main__":
    main()
