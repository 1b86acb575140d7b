"""Peak memory and wall time of the values replay (`amplint.runtime.replay`, what `amplint trace
--values` runs) against a plain forward pass, on a Llama-shaped causal LM of about 1B parameters
with random weights in bfloat16, on CPU.

    python benchmarks/values_memory.py run [--runs 3] [--seq-len 64] [--layers 16]  # values_memory.json
    python benchmarks/values_memory.py report [--write]  # its block of docs/tracing.md

Each measurement is a fresh process (so that its peak RSS is its own): it builds the model, records
its resident memory (the weights), then runs one forward pass or one replay and records the peak.
The replay holds each value as traced and in float64 only until its last reader has run. Needs torch
and transformers.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs

RESULTS = Path(__file__).resolve().parent / "values_memory.json"
PAGE = "tracing.md"
LLAMA_1B = {
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}
_MB = 1024**2


def _rss_now() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _one(mode: str, seq_len: int, layers: int) -> dict[str, float]:
    import torch
    import transformers

    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)  # built in bfloat16: no float32 copy inflates the peak
    config = transformers.LlamaConfig(**{**LLAMA_1B, "num_hidden_layers": layers})
    model = transformers.LlamaForCausalLM(config).eval()
    torch.set_default_dtype(torch.float32)
    input_ids = torch.randint(0, config.vocab_size, (1, seq_len))
    parameters = sum(p.numel() for p in model.parameters())
    weights = _rss_now()
    start = time.perf_counter()
    if mode == "forward":
        with torch.no_grad():
            model(input_ids=input_ids, use_cache=False)
    else:
        from amplint.runtime import replay

        graph = replay(
            model,
            (),
            {"input_ids": input_ids, "use_cache": False},
            autocast=False,
            param_dtype=torch.bfloat16,
        )
        assert graph.values is not None and graph.values.stopped is None, graph.values
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"parameters": parameters, "weights_rss": weights, "peak_rss": peak, "wall": wall}


NAMES = {"forward": "plain forward pass (`torch.no_grad`)", "values": "values replay (`--values`)"}


def report(data: dict[str, Any]) -> dict[str, str]:
    meta, runs = data["meta"], data["runs"]
    lines = [
        "| Run | RSS with the weights | Peak RSS | Peak above the weights | Wall time |",
        "| --- | --- | --- | --- | --- |",
    ]
    for mode, results in runs.items():
        weights = statistics.median(r["weights_rss"] for r in results)
        peak = statistics.median(r["peak_rss"] for r in results)
        wall = statistics.median(r["wall"] for r in results)
        lines.append(
            f"| {NAMES[mode]} | {weights / _MB:,.0f} MB | {peak / _MB:,.0f} MB | "
            f"{(peak - weights) / _MB:,.0f} MB | {wall:.1f} s |"
        )
    count = len(runs["forward"])
    parameters = runs["forward"][0]["parameters"]
    lines += [
        "",
        f"(`python benchmarks/values_memory.py run --runs {count} --seq-len {data['seq_len']} --layers "
        f"{data['layers']}`, then `report --write`: Llama-shaped, {data['layers']} layers, "
        f"{parameters / 1e9:.2f}B parameters in bfloat16, sequence length {data['seq_len']}, "
        + (f"median of {count} fresh processes" if count > 1 else "one fresh process per row")
        + f", torch {meta['versions']['torch']}, transformers {meta['versions']['transformers']}, on a "
        f"{meta['cpus']}-core machine shared with other work, {docs_blocks.load_text(meta)}: the memory is "
        "the process's own, the wall time grows with the load.)",
    ]
    return {"table": "\n".join(lines)}


def main() -> None:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--runs", type=int, default=3)
    go.add_argument("--seq-len", type=int, default=64)
    go.add_argument("--layers", type=int, default=LLAMA_1B["num_hidden_layers"])
    go.add_argument("--output", type=Path, default=RESULTS)
    go.add_argument("--one", choices=("forward", "values"), help=argparse.SUPPRESS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args()
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "values_memory", report)
        return
    if args.one:
        print(json.dumps(_one(args.one, args.seq_len, args.layers)))
        return
    meta = docs_blocks.machine()
    runs: dict[str, list[dict[str, float]]] = {}
    for mode in ("forward", "values"):
        runs[mode] = []
        for _ in range(args.runs):
            command = [sys.executable, __file__, "run", "--one", mode, "--seq-len", str(args.seq_len)]
            done = subprocess.run(
                [*command, "--layers", str(args.layers)], capture_output=True, text=True, check=True
            )
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    data = {"seq_len": args.seq_len, "layers": args.layers, "runs": runs}
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), **data})


if __name__ == "__main__":
    main()
