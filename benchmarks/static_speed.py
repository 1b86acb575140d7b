"""Wall time of the static pass against its peers, side by side on one corpus in one run.

    python benchmarks/static_speed.py CORPUS_DIR [--subset 'b*,c*'] [--runs 3] [--single FILE]
        [--torchfix PATH] [--fixit PATH] [--ruff PATH]

CORPUS_DIR is typically the `transformers/models` folder of an installed transformers. Each tool
runs over the same directories `--runs` times with caches off; the table gives the median, the
spread and the ratio to amplint. `--single FILE` adds the same table for one file, as a pre-commit
hook runs it (interpreter start included). Peers missing from PATH (or not given) are left out. TorchFix and
Fixit are installed in an environment of their own, as they pin their own libcst.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _corpus(root: Path, subset: str | None) -> list[Path]:
    if not subset:
        return [root]
    return sorted({path for pattern in subset.split(",") for path in root.glob(pattern) if path.is_dir()})


def _size(paths: list[Path]) -> tuple[int, int]:
    files = [f for p in paths for f in p.rglob("*.py")]
    lines = sum(f.read_bytes().count(b"\n") for f in files)
    return len(files), lines


def _commands(args: argparse.Namespace, paths: list[str]) -> dict[str, list[str]]:
    amplint = [
        sys.executable,
        "-m",
        "amplint",
        "check",
        "--exit-zero",
        "-q",
        "--format",
        "json",
        "-o",
        "/dev/null",
    ]
    tools = {"amplint": [*amplint, *paths]}
    ruff = args.ruff or shutil.which("ruff")
    if ruff:
        tools["ruff (default rules)"] = [ruff, "check", "--no-cache", "--exit-zero", "-q", *paths]
    torchfix = args.torchfix or shutil.which("torchfix")
    if torchfix:
        tools["TorchFix"] = [torchfix, *paths]
    fixit = args.fixit or shutil.which("fixit")
    if fixit:
        tools["Fixit (default rules)"] = [fixit, "lint", *paths]
    return tools


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("corpus", type=Path)
    parser.add_argument("--subset", help="comma-separated glob patterns of sub-directories, e.g. 'b*,c*'")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--torchfix")
    parser.add_argument("--fixit")
    parser.add_argument("--ruff")
    parser.add_argument("--single", help="also time the tools on this one file")
    args = parser.parse_args()

    paths = _corpus(args.corpus, args.subset)
    _table(args, paths, f"{args.corpus} {args.subset or ''}".strip())
    if args.single:
        _table(args, [Path(args.single)], args.single)


def _table(args: argparse.Namespace, paths: list[Path], label: str) -> None:
    files, lines = _size(paths) if paths[0].is_dir() else (1, paths[0].read_bytes().count(b"\n"))
    print(f"corpus: {label}: {files} files, {lines} lines, {args.runs} runs each")
    timings: dict[str, list[float]] = {}
    for name, command in _commands(args, [str(p) for p in paths]).items():
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
            timings.setdefault(name, []).append(time.perf_counter() - start)
        print(f"  {name}: {', '.join(f'{t:.2f}' for t in timings[name])} s", flush=True)

    base = statistics.median(timings["amplint"])
    print()
    print("| tool | files | lines | median wall (s) | min-max (s) | ratio to amplint |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in timings.items():
        median = statistics.median(runs)
        print(
            f"| {name} | {files} | {lines} | {median:.2f} | {min(runs):.2f}-{max(runs):.2f} | {median / base:.2f} |"
        )
    print()


if __name__ == "__main__":
    main()
