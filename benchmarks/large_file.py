"""Cost of checking one large valid file: wall time and peak memory of `amplint check` on a generated
10 MB module, and on a notebook of 10 MB whose outputs hold a plot.

    python benchmarks/large_file.py run [--megabytes 10] [--cpus 0,1] [--fix] [--no-trigger]
    python benchmarks/large_file.py report [--write]  # its block of docs/usage.md

The module is what code generators write: small functions (`F.linear`, a scale), a table every 40
functions, a multi-line string whose lines look like statements, and a deprecated
`torch.cuda.amp.GradScaler()` every 5,000 functions for the rules to find. Each case runs in a fresh
process with the cache off (`--no-cache`), pinned to `--cpus` (two by default) where the platform
allows; peak memory is the child's maximum resident set, CPU seconds its user and system time (what
the check cost, however loaded the machine). The target (docs/usage.md): under 10 s and
500 MB on 2 cores for 10 MB.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs

RESULTS = Path(__file__).resolve().parent / "large_file.json"
PAGE = "usage.md"


def module(megabytes: float, trigger: bool = True) -> str:
    parts = ["import torch\nimport torch.nn.functional as F\n\n"]
    size, i = len(parts[0]), 0
    while size < megabytes * 1_000_000:
        block = f"\ndef layer_{i}(x, w):\n    y = F.linear(x, w)\n    return y * {i}\n\n"
        if i % 40 == 0:
            block += f"TABLE_{i} = {{" + ", ".join(f"'k{j}': {j}" for j in range(100)) + "}\n"
        if i % 997 == 0 and trigger:
            block += 'DOC = """\nx = torch.cuda.amp.GradScaler()\nelse:\n"""\n'
        if i % 5000 == 4999 and trigger:
            block += f"def scaler_{i}():\n    return torch.cuda.amp.GradScaler()\n\n"
        parts.append(block)
        size += len(block)
        i += 1
    return "".join(parts)


def notebook(megabytes: float) -> str:
    """A notebook with a few code cells and one cell whose output is a PNG of `megabytes`."""
    code = ["import torch\n", "scaler = torch.cuda.amp.GradScaler()\n"]
    png = base64.b64encode(os.urandom(int(megabytes * 1_000_000 * 3 / 4))).decode()
    cells = [
        {"cell_type": "code", "metadata": {}, "execution_count": 1, "outputs": [], "source": code},
        {
            "cell_type": "code",
            "metadata": {},
            "execution_count": 2,
            "outputs": [{"output_type": "display_data", "metadata": {}, "data": {"image/png": png}}],
            "source": ["import matplotlib.pyplot as plt\n", "plt.plot([1, 2, 3])\n"],
        },
    ]
    meta = {"kernelspec": {"name": "python3", "language": "python", "display_name": "Python 3"}}
    return json.dumps({"cells": cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5})


def measure(folder: Path, name: str, cpus: set[int], fix: bool) -> dict[str, object]:
    command = [sys.executable, "-m", "amplint", "check", name, "--no-cache", "--jobs", str(len(cpus))]
    command += ["--fix"] if fix else []

    def pin() -> None:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, cpus)

    report = folder / "report.txt"
    started = time.perf_counter()
    with open(report, "w", encoding="utf-8") as out:
        child = subprocess.Popen(command, cwd=folder, stdout=out, stderr=subprocess.DEVNULL, preexec_fn=pin)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak, not the largest so far
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    stdout = report.read_text(encoding="utf-8")
    return {
        "file": name,
        "megabytes": round((folder / name).stat().st_size / 1e6, 1),
        "exit": child.returncode,
        "amp900": stdout.count("AMP900"),
        "findings": stdout.count("AMP008"),
        "seconds": round(seconds, 2),
        # The child's own CPU time: what the check cost, whatever else the machine was running.
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_mb": round(usage.ru_maxrss / 1024, 1),  # kilobytes on Linux
    }


def report(data: dict[str, Any]) -> dict[str, str]:
    meta = data["meta"]
    names = {
        "generated.py": f"generated module, {data['megabytes']:g} MB",
        "generated.py --fix": "the same, `--fix` (two checks and the fixed text verified)",
        "plots.ipynb": f"notebook, {data['megabytes']:g} MB (one plot output)",
        "plain.py": "the module without a rule's trigger word (`--no-trigger`: only compiled)",
    }
    options = "".join(
        f" {option}" for option in ("--fix", "--no-trigger") if data[option[2:].replace("-", "_")]
    )
    if data["megabytes"] != 10:
        options += f" --megabytes {data['megabytes']:g}"
    lines = [
        f"On a {meta['cpus']}-core machine shared with other work ({docs_blocks.load_text(meta)}; wall time "
        "grows with the load, CPU seconds and memory are the check's own), amplint "
        f"{meta['versions']['amplint']}, `python benchmarks/large_file.py run{options}` "
        "then `report --write`:",
        "",
        "| File | Findings | AMP900 | Seconds | CPU seconds | Peak memory |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in data["rows"]:
        fixed = row["file"].endswith("--fix")
        findings = f"{row['findings']} left" if fixed else str(row["findings"])
        lines.append(
            f"| {names[row['file']]} | {findings} | {row['amp900']} | {row['seconds']:.1f} | "
            f"{row['cpu_seconds']:.1f} | {row['peak_mb']:.0f} MB |"
        )
    return {"table": "\n".join(lines)}


def main(argv: list[str] | None = None) -> int:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--megabytes", type=float, default=10.0)
    go.add_argument("--cpus", default="0,1", help="the CPUs the check may run on")
    go.add_argument("--fix", action="store_true", help="also time `--fix` on the module")
    go.add_argument(
        "--no-trigger",
        action="store_true",
        help="also check the module without any rule's trigger word (only compiled)",
    )
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args(argv)
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "large_file", report)
        return 0
    cpus = {int(cpu) for cpu in args.cpus.split(",")}
    meta = docs_blocks.machine(("amplint", "libcst"))
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        (folder / "generated.py").write_text(module(args.megabytes), encoding="utf-8")
        (folder / "plots.ipynb").write_text(notebook(args.megabytes), encoding="utf-8")
        rows = [measure(folder, "generated.py", cpus, False), measure(folder, "plots.ipynb", cpus, False)]
        if args.no_trigger:
            (folder / "plain.py").write_text(module(args.megabytes, trigger=False), encoding="utf-8")
            rows.insert(1, measure(folder, "plain.py", cpus, False))
        if args.fix:  # last: it rewrites generated.py
            rows.insert(1, {**measure(folder, "generated.py", cpus, True), "file": "generated.py --fix"})
    data = {
        "megabytes": args.megabytes,
        "cpus": sorted(cpus),
        "fix": args.fix,
        "no_trigger": args.no_trigger,
    }
    docs_blocks.save(args.output, {"meta": docs_blocks.finished(meta), **data, "rows": rows})
    return 0 if all(row["amp900"] == 0 for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
