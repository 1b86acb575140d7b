"""Wall time of `amplint check --deep` on model folders of an installed transformers, or on any
folder, and what the traces made of the candidates.

    python benchmarks/deep_cost.py [MODEL ...] [--runs 3] [--modes autocast-bf16,cast-fp16]

MODEL names a folder of `transformers/models` (default: qwen2), or is the path of a folder (a
library's `fla/layers`, say). transformers runs none of its models in half precision itself (its
callers pick the dtype), so the modes are given, as `--modes` gives them to a library (`--modes ""`:
none). A folder is checked where it is (its modules import their package relatively), with an empty
configuration in place of its own, without the cache. Each run is a fresh process; the table
gives the median wall time, the spread, the candidates per outcome and the findings confirmed,
then why each unreached candidate was not reached.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("models", nargs="*", default=["qwen2"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="autocast-bf16,cast-fp16")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        config = Path(scratch) / "pyproject.toml"
        config.write_text("[tool.amplint]\n", encoding="utf-8")
        print(f"modes: {args.modes or 'none given'}; {args.runs} runs each\n")
        print(
            f"{'model':<10} {'median s':>9} {'spread s':>9}  candidates (outcome: count)  confirmed findings"
        )
        for model in args.models:
            times, document = [], {}
            for _ in range(args.runs):
                elapsed, document = run(folder_of(model), args.modes, config)
                times.append(elapsed)
            summary = document["summary"]
            assert isinstance(summary, dict)
            outcomes: Counter[str] = Counter()
            for tally in summary.get("traced", {}).values():
                outcomes.update(tally)
            diagnostics = document["diagnostics"]
            assert isinstance(diagnostics, list)
            confirmed = Counter(d["code"] for d in diagnostics if d["confidence"] == "confirmed")
            print(
                f"{model:<10} {statistics.median(times):>9.1f} {max(times) - min(times):>9.1f}  "
                f"{dict(outcomes)}  {dict(sorted(confirmed.items()))}"
            )
            unreached = Counter(d["evidence"] for d in diagnostics if d["confidence"] == "unreached")
            for why, count in unreached.most_common():
                print(f"    unreached ({count}): {why}")


if __name__ == "__main__":
    main()
