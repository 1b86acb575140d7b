"""What a benchmark records beside its measurements, and the blocks of docs/ its `report` renders.

A page with prose around a benchmark's numbers holds them between markers named after the script
and the block:

    <!-- begin values_memory:table -->

    | Run | ... |

    <!-- end values_memory:table -->

`python benchmarks/<script>.py report` prints the blocks its committed JSON renders; `--write` puts
them into the page (a block may instead sit in README.md, for the numbers the README quotes);
`python benchmarks/docs_blocks.py` writes every script's blocks (nothing is measured). tests/test_docs_tables.py checks that every block is what its data renders.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import re
import sys
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent / "docs"
README = DOCS.parent / "README.md"
# The scripts whose `report` renders blocks of docs/, each from its RESULTS into its PAGE.
SCRIPTS = (
    "parse_parity",
    "training_curves",
    "values_memory",
    "backward_cost",
    "trace_speed",
    "deep_cost",
    "large_file",
    "lsp_latency",
    "static_speed",
    "precision_summary",
    "opt_in_reads",
    "recall",
    "caller_gate",
)


def machine(packages: Iterable[str] = ("amplint", "libcst", "torch", "transformers")) -> dict[str, Any]:
    """The versions, CPU count and load average a measurement ran with (taken when it starts)."""
    versions: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": versions,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 1) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }


def finished(meta: dict[str, Any]) -> dict[str, Any]:
    """`meta` with the load average at the end of the measurement added."""
    if hasattr(os, "getloadavg"):
        return {**meta, "load_average_after": [round(x, 1) for x in os.getloadavg()]}
    return meta


def load_text(meta: dict[str, Any]) -> str:
    """'load average 9.2 to 11.0': the 1-minute load average at the start and at the end."""
    before, after = meta.get("load_average"), meta.get("load_average_after")
    if not before:
        return "load average not recorded"
    if not after or after[0] == before[0]:
        return f"load average {before[0]}"
    low, high = sorted((before[0], after[0]))
    return f"load average {low} to {high}"


def save(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _pattern(script: str) -> re.Pattern[str]:
    return re.compile(
        rf"<!-- begin {re.escape(script)}:(?P<name>[\w-]+) -->\n\n(?P<text>.*?)\n\n<!-- end {re.escape(script)}:(?P=name) -->",
        re.DOTALL,
    )


def blocks(page: str, script: str) -> dict[str, str]:
    """The blocks of `page` that `script` renders, by name."""
    return {match["name"]: match["text"] for match in _pattern(script).finditer(page)}


def fill(page: str, script: str, rendered: dict[str, str]) -> str:
    """`page` with each of `script`'s blocks replaced by its rendering; every block must be there."""
    missing = set(rendered) - set(blocks(page, script))
    if missing:
        raise SystemExit(f"the page has no block {', '.join(sorted(missing))} of {script}")
    return _pattern(script).sub(
        lambda match: (
            page[match.start() : match.start("text")]
            + rendered.get(match["name"], match["text"])
            + page[match.end("text") : match.end()]
        ),
        page,
    )


def page_blocks(page: Path, script: str) -> dict[str, str]:
    """The blocks of `script` in its page and in the README, by name."""
    return {
        **blocks(page.read_text(encoding="utf-8"), script),
        **blocks(README.read_text(encoding="utf-8"), script),
    }


def script_parser(doc: str | None) -> tuple[argparse.ArgumentParser, Any]:
    """A benchmark script's parser (its docstring as help) and its subcommands."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser, parser.add_subparsers(dest="command", required=True)


def add_report(commands: Any, results: Path, page: str, *, readme: bool = False) -> None:
    """A script's `report [--input JSON] [--write]` subcommand (`commands`: its subparsers)."""
    show = commands.add_parser("report")
    show.add_argument("--input", type=Path, default=results)
    show.add_argument(
        "--write", action="store_true", help=f"into docs/{page}" + (" and README.md" if readme else "")
    )


def report_args(args: Any, page: str, script: str, report: Callable[[Any], dict[str, str]]) -> None:
    """Run the `report` subcommand `add_report` made: `report` of the JSON `args.input` names."""
    report_command(DOCS / page, script, report(load(args.input)), args.write)


def report_command(page: Path, script: str, rendered: dict[str, str], write: bool) -> None:
    """The `report` subcommand: print the blocks, or (`write`) put them into the page or the README,
    wherever each block's markers are."""
    if write:
        readme = README.read_text(encoding="utf-8")
        in_readme = set(blocks(readme, script)) & set(rendered)
        if in_readme:
            README.write_text(fill(readme, script, {n: rendered[n] for n in in_readme}), encoding="utf-8")
        rest = {n: t for n, t in rendered.items() if n not in in_readme}
        page.write_text(fill(page.read_text(encoding="utf-8"), script, rest), encoding="utf-8")
        return
    for name, text in rendered.items():
        sys.stdout.write(f"<!-- {script}:{name} -->\n\n{text}\n\n")


def main() -> None:
    for name in SCRIPTS:
        script = importlib.import_module(name)  # this folder is on sys.path when this file runs
        report_command(DOCS / script.PAGE, name, script.report(load(script.RESULTS)), write=True)


if __name__ == "__main__":
    main()
