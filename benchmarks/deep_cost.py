"""Wall time of `amplint check --deep` on model folders of an installed transformers, or on any
folder, and what the traces made of the candidates.

    python benchmarks/deep_cost.py run [MODEL ...] [--runs 3] [--modes autocast-bf16,cast-fp16]
    python benchmarks/deep_cost.py report [--write]  # its block of docs/tracing.md

MODEL names a folder of `transformers/models` (default: qwen2), or is the path of a folder (a
library's `fla/layers`, say). transformers runs none of its models in half precision itself (its
callers pick the dtype), so the modes are given, as `--modes` gives them to a library (`--modes ""`:
none). A folder is checked where it is (its modules import their package relatively), with an empty
configuration in place of its own, without the cache. Each run is a fresh process; deep_cost.json
keeps every run's wall time, the candidates per outcome, the findings confirmed and why each
unreached candidate was not reached.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs

RESULTS = Path(__file__).resolve().parent / "deep_cost.json"
PAGE = "tracing.md"
OUTCOMES = ("confirmed", "refuted", "unreached", "not confirmed")


def models_folder() -> Path:
    import transformers

    return Path(transformers.__file__).parent / "models"


def folder_of(model: str) -> Path:
    """A folder of `transformers/models` by name, else the folder at that path."""
    path = Path(model)
    return path if path.is_dir() else models_folder() / model


def run(folder: Path, modes: str, config: Path) -> tuple[float, dict[str, object]]:
    command = [
        sys.executable,
        "-m",
        "amplint",
        "check",
        str(folder),
        "--deep",
        *(["--modes", modes] if modes else []),
        "--config",
        str(config),
        "--no-cache",
        "--show-refuted",
        "--show-conditional",  # the unreached candidates of code no mode reaches too, with why
        "--format",
        "json",
    ]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"amplint failed on {folder}:\n{done.stderr}")
    return elapsed, json.loads(done.stdout)


def measure(model: str, modes: str, runs: int, config: Path) -> dict[str, Any]:
    times, document = [], {}
    for _ in range(runs):
        elapsed, document = run(folder_of(model), modes, config)
        times.append(elapsed)
    outcomes: Counter[str] = Counter()
    for tally in document["summary"].get("traced", {}).values():
        outcomes.update(tally)
    diagnostics = document["diagnostics"]
    confirmed = Counter(d["code"] for d in diagnostics if d["confidence"] == "confirmed")
    unreached = Counter(d["evidence"] for d in diagnostics if d["confidence"] == "unreached")
    return {
        "model": model,
        "modes": modes,
        "wall_s": times,
        "outcomes": dict(outcomes),
        "confirmed_findings": dict(sorted(confirmed.items())),
        "unreached": dict(unreached.most_common()),
    }


def report(data: dict[str, Any]) -> dict[str, str]:
    meta, runs = data["meta"], data["runs"]
    lines = [
        f"{'One run' if runs == 1 else f'The median of {runs} runs'} each, torch {meta['versions']['torch']}, "
        f"transformers {meta['versions']['transformers']}, {meta['cpus']} CPUs shared with other work "
        f"({docs_blocks.load_text(meta)}), the static pass, the index and the traces included "
        f"(`python benchmarks/deep_cost.py run {' '.join(row['model'] for row in data['rows'])} --runs {runs}`, "
        "then `report --write`):",
        "",
        "| folder | modes | wall s | confirmed | refuted | unreached | not confirmed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in data["rows"]:
        counts = [str(row["outcomes"].get(outcome, 0)) for outcome in OUTCOMES]
        lines.append(
            f"| transformers `models/{row['model']}/` | {row['modes'].replace(',', ', ') or 'none'} "
            f"| {statistics.median(row['wall_s']):.1f} | {' | '.join(counts)} |"
        )
    return {"table": "\n".join(lines)}


def main() -> None:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("models", nargs="*", default=["qwen2"])
    go.add_argument("--runs", type=int, default=3)
    go.add_argument("--modes", default="autocast-bf16,cast-fp16")
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args()
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "deep_cost", report)
        return
    meta = docs_blocks.machine()
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "pyproject.toml"
        config.write_text("[tool.amplint]\n", encoding="utf-8")
        rows = [measure(model, args.modes, args.runs, config) for model in args.models]
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), "runs": args.runs, "rows": rows})


if __name__ == "__main__":
    main()
