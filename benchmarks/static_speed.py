"""Wall time of the static pass against its peers, side by side on one corpus in one run.

    python benchmarks/static_speed.py run [CORPUS_DIR] [--subset 'b*,c*'] [--runs 3] [--single FILE]
        [--peer-bin DIR] [--torchfix PATH] [--fixit PATH] [--ruff PATH] [--flake8 PATH] [--no-tree]
    python benchmarks/static_speed.py report [--write]

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
`run` keeps every time in static_speed.json (with the versions, the CPU count and the load average
before and after); `report` renders from it the table of docs/measured.md and the README's speed line:
the median, the spread and the ratio to amplint with a cold cache.
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
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs

CACHE = ".amplint_cache"
RESULTS = Path(__file__).resolve().parent / "static_speed.json"
PAGE = "measured.md"


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


def _record(label: str, paths: list[Path], tools: list[Tool]) -> dict[str, Any]:
    files, lines = _size(paths)
    return {
        "corpus": label,
        "files": files,
        "lines": lines,
        "tools": [{"name": t.name, "runs": [round(r, 3) for r in t.runs]} for t in tools],
    }


def _median(table: dict[str, Any], name: str) -> float:
    return statistics.median(next(t["runs"] for t in table["tools"] if t["name"] == name))


def _peer_ratio(table: dict[str, Any], peer: str) -> str:
    names = [t["name"] for t in table["tools"] if t["name"].startswith(peer)]
    if not names:
        return f"{peer} was not measured"
    return f"{_median(table, names[0]) / _median(table, 'amplint, cold cache'):.1f}x faster than {peer}"


def report(data: dict[str, Any]) -> dict[str, str]:
    meta = data["meta"]
    versions = meta["versions"]
    lines = [
        f"`python benchmarks/static_speed.py run --runs {data['runs']} --peer-bin <the peers' bin directory>` "
        f"on transformers {versions['transformers']}'s `models/`, then `report --write`: amplint "
        f"{versions['amplint']} (libcst {versions['libcst']}) on {meta['cpus']} CPUs "
        f"({docs_blocks.load_text(meta)}), {meta['date']}; the median of {data['runs']} runs, every "
        'tool with its default rules, all in one run ("cold" removes `.amplint_cache/` before each '
        'run, "warm" runs again with nothing changed; the peers run without caches):',
        "",
        "| Tool | Corpus | Median wall time | Min-max | Ratio to amplint, cold cache |",
        "| --- | --- | ---: | --- | ---: |",
    ]
    for table in data["tables"]:
        base = _median(table, "amplint, cold cache")
        plural = "" if table["files"] == 1 else "s"
        corpus = f"{table['corpus']}: {table['files']:,} file{plural}, {table['lines']:,} lines"
        for tool in table["tools"]:
            median, runs = statistics.median(tool["runs"]), tool["runs"]
            lines.append(
                f"| {tool['name']} | {corpus} | {median:.2f} s | {min(runs):.2f}-{max(runs):.2f} s | "
                f"{median / base:.2f} |"
            )
            corpus = "same"
    subset, *rest = data["tables"]
    tree = next((t for t in rest if t["corpus"].startswith("`models/` (whole")), None)
    readme = (
        f"- **Speed**: transformers' {subset['corpus']} ({subset['files']:,} files, {subset['lines']:,} lines) "
        f"in {_median(subset, 'amplint, cold cache'):.1f} s on {meta['cpus']} cores, "
        f"{_peer_ratio(subset, 'TorchFix')} and {_peer_ratio(subset, 'Fixit')}"
    )
    if tree:
        readme += (
            f"; the whole `models/` tree ({tree['lines']:,} lines) in {_median(tree, 'amplint, cold cache'):.0f} s "
            f"cold and {_median(tree, 'amplint, warm cache'):.1f} s with a warm cache"
        )
    readme += f" ({docs_blocks.load_text(meta)}; [docs/measured.md](docs/measured.md))."
    return {"table": "\n".join(lines), "readme": readme}


def main(argv: list[str] | None = None) -> int:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("corpus", type=Path, nargs="?", help="transformers/models (default: the installed one)")
    go.add_argument("--subset", default="b*,c*", help="comma-separated globs of sub-directories")
    go.add_argument("--runs", type=int, default=3)
    go.add_argument("--single", type=Path, help="one file, relative to the corpus or absolute")
    go.add_argument("--peer-bin", action="append", default=[], metavar="DIR", help="where peers live")
    go.add_argument("--torchfix")
    go.add_argument("--fixit")
    go.add_argument("--ruff")
    go.add_argument("--flake8")
    go.add_argument("--no-tree", action="store_true", help="leave out the whole-tree runs")
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE, readme=True)
    args = parser.parse_args(argv)
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "static_speed", report)
        return 0

    corpus = args.corpus or _installed_models()
    if corpus is None or not corpus.is_dir():
        parser.error("give the transformers/models directory (transformers is not installed here)")
    single = args.single or Path("llama/modeling_llama.py")
    if single.is_absolute():
        single = single.relative_to(corpus)

    # Wall time depends on what else runs: the load average before and after says how quiet it was.
    meta = docs_blocks.machine(("amplint", "libcst", "transformers"))
    tables = []
    with tempfile.TemporaryDirectory(prefix="amplint-bench-") as temporary:
        root = Path(temporary)
        shutil.copytree(corpus, root / "models", ignore=shutil.ignore_patterns("__pycache__"))
        print(f"{args.runs} runs each; load average {meta['load_average']}", file=sys.stderr)

        subset = sorted(
            {
                p.relative_to(root).as_posix()
                for g in args.subset.split(",")
                for p in (root / "models").glob(g)
            }
        )
        label = " + ".join(f"`models/{g}`" for g in args.subset.split(","))
        print(f"subset {args.subset}:", file=sys.stderr)
        tools = _amplint(root, subset) + _peers(args, subset)
        _time(tools, root, args.runs)
        tables.append(_record(label, [root / p for p in subset], tools))

        if not args.no_tree:
            print("whole tree:", file=sys.stderr)
            tools = _amplint(root, ["models"])
            _time(tools, root, args.runs)
            tables.append(_record("`models/` (whole tree)", [root / "models"], tools))

        target = (Path("models") / single).as_posix()
        if (root / target).is_file():
            print(f"one file, {target}:", file=sys.stderr)
            tools = _amplint(root, [target]) + _peers(args, [target])
            _time(tools, root, args.runs)
            label = f"`{single.as_posix()}` as pre-commit runs it (a fresh process)"
            tables.append(_record(label, [root / target], tools))
    data = {"meta": docs_blocks.finished(meta), "runs": args.runs, "subset": args.subset, "tables": tables}
    docs_blocks.save(args.output, data)
    print(report(data)["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
