"""AMP900 on exactly the files Python rejects: amplint over the standard library, its test suite and
the installed packages, compared file by file with `compile()` on the running interpreter.

    python benchmarks/parse_parity.py run [--jobs 2] [stdlib] [site-packages] [DIR ...]  # parse_parity.json
    python benchmarks/parse_parity.py report [--write]  # its block of docs/parse-parity.md

Every `.py` file under the folders (default: the standard library with its tests, and
site-packages) is checked with `amplint check --select AMP --extend-select <every opt-in rule>
--format json --no-cache` (so that every file is parsed by libcst too), and compiled with
Python's own parser. A false AMP900 is a file Python accepts that amplint reports as unparsable; a
missed one is a file Python rejects that amplint does not report. Files over amplint's
`max-file-size` are counted apart (they are skipped with their own AMP900 on purpose).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs

OPT_IN = "AMP001,AMP002,AMP003,AMP004,AMP005,AMP006,AMP013,AMP014"
RESULTS = Path(__file__).resolve().parent / "parse_parity.json"
PAGE = "parse-parity.md"
MAX_FILE_SIZE = 1_048_576  # the `max-file-size` this comparison runs with (amplint's default is 16 MiB)


def python_rejects(path: Path) -> bool:
    try:
        source = path.read_bytes()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True
    return False


def run(folders: list[Path], jobs: int | None = None, skip: tuple[Path, ...] = ()) -> dict[str, Any]:
    files = sorted({p.resolve() for folder in folders for p in folder.rglob("*.py") if p.is_file()})
    files = [p for p in files if not any(p.is_relative_to(folder) for folder in skip)]
    files = [p for p in files if p.stat().st_size <= MAX_FILE_SIZE]
    with tempfile.TemporaryDirectory() as directory:
        listing = Path(directory) / "files.txt"
        output = Path(directory) / "out.json"
        listing.write_text("\n".join(map(str, files)), encoding="utf-8")
        started = time.perf_counter()
        # The files are named on the command line in chunks (an argument list has a size limit).
        reported: set[str] = set()
        for start in range(0, len(files), 2000):
            chunk = [str(p) for p in files[start : start + 2000]]
            command = [sys.executable, "-m", "amplint", "check", "--select", "AMP", "--extend-select", OPT_IN]
            command += ["--format", "json", "--no-cache", "--exit-zero", "--output", str(output), "--config"]
            config = Path(directory) / "amplint.toml"
            # The running Python's grammar: AMP900 must be where its `compile()` raises.
            running = f"{sys.version_info[0]}.{sys.version_info[1]}"
            config.write_text(
                f'exclude = []\nmax-file-size = "1MiB"\ntarget-version = "{running}"\n', encoding="utf-8"
            )
            command += [str(config), *(["--jobs", str(jobs)] if jobs else []), *chunk]
            proc = subprocess.run(command, capture_output=True, text=True, cwd=directory)
            if proc.returncode != 0:
                raise SystemExit(f"amplint failed ({proc.returncode}): {proc.stderr[-2000:]}")
            data = json.loads(output.read_text(encoding="utf-8"))
            reported |= {
                os.path.realpath(os.path.join(directory, d["path"]))
                for d in data["diagnostics"]
                if d["code"] == "AMP900"
            }
        seconds = time.perf_counter() - started
    rejected = {str(p) for p in files if python_rejects(p)}
    return {
        "files": len(files),
        "seconds": round(seconds, 1),
        "python_rejects": sorted(rejected),
        "false_amp900": sorted(reported - rejected),
        "missed_amp900": sorted(rejected - reported),
    }


def _folders(names: list[str]) -> dict[str, Path]:
    """The folders to check by the name the command line gives them: `stdlib` and `site-packages`
    stand for the running Python's, so that the results name no machine's paths."""
    roles = {"stdlib": sysconfig.get_paths()["stdlib"], "site-packages": sysconfig.get_paths()["purelib"]}
    return {name: Path(roles.get(name, name)).resolve() for name in names}


def report(data: dict[str, Any]) -> dict[str, str]:
    meta, result = data["meta"], data["result"]
    lines = [
        "```bash",
        f"python benchmarks/parse_parity.py run {' '.join(data['command'])}",
        "python benchmarks/parse_parity.py report --write   # this block",
        "```",
        "",
        f"On Python {meta['versions']['python']} (libcst {meta['versions']['libcst']}), {data['measured']}: "
        f"every `.py` file up to 1 MiB (the `max-file-size` the comparison sets), {meta['cpus']} CPUs "
        f"shared with other work ({docs_blocks.load_text(meta)}, so the seconds are not a speed "
        "measurement):",
        "",
        f"| Files | Python rejects | False AMP900 | Missed AMP900 | Seconds ({meta['cpus']} CPUs) |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {result['files']:,} | {len(result['python_rejects'])} | {len(result['false_amp900'])} | "
        f"{len(result['missed_amp900'])} | {result['seconds']} |",
    ]
    for kind in ("false_amp900", "missed_amp900"):
        lines += [f"- {kind.replace('_', ' ')}: `{item}`" for item in result[kind]]
    future = [name for name in result["python_rejects"] if Path(name).name.startswith("badsyntax_future")]
    lines += [
        "",
        f"The files Python rejects: {', '.join(f'`{name}`' for name in result['python_rejects']) or 'none'}"
        f" ({len(future)} of them `badsyntax_future*.py` files).",
    ]
    return {"table": "\n".join(lines)}


def main(argv: list[str] | None = None) -> int:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument(
        "folders",
        nargs="*",
        default=["stdlib", "site-packages"],
        help="`stdlib`, `site-packages` (the running Python's) or paths; default: both",
    )
    go.add_argument("--jobs", type=int, help="amplint's --jobs")
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args(argv)
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "parse_parity", report)
        return 0
    folders = _folders(args.folders)
    meta = docs_blocks.machine(("amplint", "libcst"))
    # The standard library is what Python ships: the packages installed into it are not.
    installed = Path(sysconfig.get_paths()["stdlib"]).resolve() / "site-packages"
    result = run(list(folders.values()), args.jobs, () if installed in folders.values() else (installed,))

    def shown(path: str) -> str:
        # A file by the name of its folder (the innermost, as the standard library holds a site-packages).
        name, folder = max(
            ((n, f) for n, f in folders.items() if path.startswith(f"{f}{os.sep}")),
            key=lambda nf: len(str(nf[1])),
        )
        return f"{name}/{os.path.relpath(path, folder)}"

    for kind in ("python_rejects", "false_amp900", "missed_amp900"):
        result[kind] = [shown(path) for path in result[kind]]
    command = [*args.folders, *(["--jobs", str(args.jobs)] if args.jobs else [])]
    measured = " and ".join(
        {
            "stdlib": "the standard library with its test suite (not the packages installed into it)",
            "site-packages": "the site-packages of the environment",
        }.get(name, f"`{name}`")
        for name in folders
    )
    docs_blocks.save(
        args.output,
        {"meta": docs_blocks.finished(meta), "command": command, "measured": measured, "result": result},
    )
    return 0 if not result["false_amp900"] and not result["missed_amp900"] else 1


if __name__ == "__main__":
    sys.exit(main())
