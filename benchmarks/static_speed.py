"""Wall time of the static pass against its peers, side by side on one corpus in one run.

    python benchmarks/static_speed.py [CORPUS_DIR] [--subset 'b*,c*'] [--runs 3] [--single FILE]
        [--peer-bin DIR] [--torchfix PATH] [--fixit PATH] [--ruff PATH] [--flake8 PATH] [--no-tree]

CORPUS_DIR is the `transformers/models` folder of an installed transformers (found with this
interpreter when not given). It is copied to a temporary directory first: amplint and ruff skip
anything under `site-packages`, and a copy gives every tool the same files and every cold run an
empty cache. Three corpora, each tool `--runs` times, in one run:

- the subset (`--subset`, default `b*,c*`): amplint with a cold cache (the cache directory removed
  before each run, so the run also writes it), amplint with a warm cache (nothing changed since the
  previous run), TorchFix, Fixit, ruff and flake8 (pyflakes, pycodestyle and bugbear), the peers
  with their caches off and their default rules;
- the whole tree: amplint cold and warm (`--no-tree` leaves it out; the peers take minutes on it);
- one file (`--single`, default `llama/modeling_llama.py` of the corpus) as a pre-commit hook runs it:
  a fresh process per run, interpreter start included; amplint cold and warm, and the peers.

Peers are looked up in the `--peer-bin` directories, next to this interpreter, then on PATH (TorchFix and Fixit are best
installed in an environment of their own, as they pin their own libcst); a missing one is left out.
Each table gives the median, the spread and the ratio to amplint with a cold cache; the load average
before and after the run is printed with them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path

CACHE = ".amplint_cache"


@dataclass
class Tool:
    name: str
    command: list[str]
    before: Callable[[], None] = lambda: None  # run before each timed run, not timed
    runs: list[float] = field(default_factory=list)


def _installed_models() -> Path | None:
    spec = find_spec("transformers")
    if spec is None or not spec.submodule_search_locations:
        return None
    models = Path(next(iter(spec.submodule_search_locations))) / "models"
    return models if models.is_dir() else None


def _size(paths: list[Path]) -> tuple[int, int]:
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*.py")))]
    return len(files), sum(f.read_bytes().count(b"\n") for f in files)


def _find(name: str, explicit: str | None, peer_bins: list[str]) -> str | None:
    if explicit:
        return explicit
    # The --peer-bin directories, then this interpreter's own (a virtualenv's bin), then PATH.
    for directory in [*peer_bins, os.path.dirname(sys.executable)]:
        candidate = Path(directory) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


def _peers(args: argparse.Namespace, paths: list[str]) -> list[Tool]:
    tools = []
    torchfix = _find("torchfix", args.torchfix, args.peer_bin)
    if torchfix:
        tools.append(Tool("TorchFix 0.7", [torchfix, *paths]))
    fixit = _find("fixit", args.fixit, args.peer_bin)
    if fixit:
        tools.append(Tool("Fixit 2.2 (default rules)", [fixit, "lint", *paths]))
    ruff = _find("ruff", args.ruff, args.peer_bin)
    if ruff:
        tools.append(Tool("ruff (default rules)", [ruff, "check", "--no-cache", "--exit-zero", "-q", *paths]))
    flake8 = _find("flake8", args.flake8, args.peer_bin)
    if flake8:
        # Only pyflakes, pycodestyle and bugbear: TorchFix registers itself as a flake8 plugin too.
        tools.append(Tool("flake8 + bugbear", [flake8, "--select", "E,F,W,C90,B", "--exit-zero", *paths]))
    return tools


def _amplint(root: Path, paths: list[str]) -> list[Tool]:
    command = [sys.executable, "-m", "amplint", "check", "--exit-zero", "-q", "--format", "json", "-o"]
    command += [os.devnull, *paths]

    def drop_cache() -> None:
        shutil.rmtree(root / CACHE, ignore_errors=True)

    def fill_cache() -> None:
        if not (root / CACHE).is_dir():
            subprocess.run(command, cwd=root, capture_output=True, check=False)

    return [
        Tool("amplint, cold cache", command, before=drop_cache),
        Tool("amplint, warm cache", command, before=fill_cache),
    ]


def _time(tools: list[Tool], root: Path, runs: int) -> None:
    for tool in tools:
        for _ in range(runs):
            tool.before()
            start = time.perf_counter()
            subprocess.run(tool.command, cwd=root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            tool.runs.append(time.perf_counter() - start)
        print(f"  {tool.name}: {', '.join(f'{t:.2f}' for t in tool.runs)} s", file=sys.stderr, flush=True)


def _table(label: str, files: int, lines: int, tools: list[Tool]) -> None:
    base = statistics.median(tools[0].runs)
    plural = "" if files == 1 else "s"
    print(f"\n{label}: {files:,} file{plural}, {lines:,} lines, median of {len(tools[0].runs)} runs\n")
    print("| Tool | Median wall time | Min-max | Ratio to amplint cold |")
    print("| --- | --- | --- | --- |")
    for tool in tools:
        median = statistics.median(tool.runs)
        spread = f"{min(tool.runs):.2f}-{max(tool.runs):.2f} s"
        print(f"| {tool.name} | {median:.2f} s | {spread} | {median / base:.2f} |")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "corpus", type=Path, nargs="?", help="transformers/models (default: the installed one)"
    )
    parser.add_argument("--subset", default="b*,c*", help="comma-separated globs of sub-directories")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--single", type=Path, help="one file, relative to the corpus or absolute")
    parser.add_argument("--peer-bin", action="append", default=[], metavar="DIR", help="where peers live")
    parser.add_argument("--torchfix")
    parser.add_argument("--fixit")
    parser.add_argument("--ruff")
    parser.add_argument("--flake8")
    parser.add_argument("--no-tree", action="store_true", help="leave out the whole-tree runs")
    args = parser.parse_args()

    corpus = args.corpus or _installed_models()
    if corpus is None or not corpus.is_dir():
        parser.error("give the transformers/models directory (transformers is not installed here)")
    single = args.single or Path("llama/modeling_llama.py")
    if single.is_absolute():
        single = single.relative_to(corpus)

    # Wall time depends on what else runs: the load average before and after says how quiet it was.
    print(f"CPUs: {os.cpu_count()}; load average (1, 5, 15 min) at the start: {_load()}")
    with tempfile.TemporaryDirectory(prefix="amplint-bench-") as temporary:
        root = Path(temporary)
        shutil.copytree(corpus, root / "models", ignore=shutil.ignore_patterns("__pycache__"))
        print(f"corpus: {corpus} (copied), {args.runs} runs each", file=sys.stderr)

        subset = sorted(
            {
                p.relative_to(root).as_posix()
                for g in args.subset.split(",")
                for p in (root / "models").glob(g)
            }
        )
        files, lines = _size([root / p for p in subset])
        print(f"subset {args.subset}:", file=sys.stderr)
        tools = _amplint(root, subset) + _peers(args, subset)
        _time(tools, root, args.runs)
        _table(f"`models/{{{args.subset}}}`", files, lines, tools)

        if not args.no_tree:
            files, lines = _size([root / "models"])
            print("whole tree:", file=sys.stderr)
            tools = _amplint(root, ["models"])
            _time(tools, root, args.runs)
            _table("`models/` (whole tree)", files, lines, tools)

        target = (Path("models") / single).as_posix()
        if (root / target).is_file():
            print(f"one file, {target}:", file=sys.stderr)
            tools = _amplint(root, [target]) + _peers(args, [target])
            _time(tools, root, args.runs)
            _table(f"`{single.as_posix()}` as pre-commit runs it", 1, _size([root / target])[1], tools)
    print(f"\nload average (1, 5, 15 min) at the end: {_load()}")


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
