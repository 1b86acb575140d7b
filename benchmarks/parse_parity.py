"""AMP900 on exactly the files Python rejects: amplint over the standard library, its test suite and
the installed packages, compared file by file with `compile()` on the running interpreter.

    python benchmarks/parse_parity.py [--output docs/parse-parity.md] [DIR ...]

Every `.py` file under the folders (default: the standard library with its tests, and
site-packages) is checked with `amplint check --select AMP --extend-select <every opt-in rule>
--format json --no-cache` (so that every file is parsed by libcst too), and compiled with
Python's own parser. A false AMP900 is a file Python accepts that amplint reports as unparsable; a
missed one is a file Python rejects that amplint does not report. Files over amplint's
`max-file-size` are counted apart (they are skipped with their own AMP900 on purpose).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from pathlib import Path

OPT_IN = "AMP001,AMP002,AMP003,AMP004,AMP005,AMP006,AMP013,AMP014"
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


def run(folders: list[Path], jobs: int | None = None) -> dict[str, object]:
    files = sorted({p.resolve() for folder in folders for p in folder.rglob("*.py") if p.is_file()})
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
        "python_rejects": len(rejected),
        "false_amp900": sorted(reported - rejected),
        "missed_amp900": sorted(rejected - reported),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "folders", nargs="*", type=Path, help="default: the standard library and site-packages"
    )
    parser.add_argument("--output", type=Path, help="write the result as Markdown here")
    parser.add_argument("--jobs", type=int, help="amplint's --jobs")
    args = parser.parse_args(argv)
    folders = args.folders or [Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])]
    result = run(folders, args.jobs)
    lines = [
        "# AMP900 against Python's own parser",
        "",
        f"`python benchmarks/parse_parity.py` on Python {sys.version.split()[0]}: every `.py` file under "
        + ", ".join(
            f"`{f}`" for f in (["<stdlib>", "<site-packages>"] if not args.folders else map(str, folders))
        )
        + " up to a `max-file-size` of 1 MiB, checked with every rule on.",
        "",
        "| Files | Python rejects | False AMP900 | Missed AMP900 | Seconds |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {result['files']:,} | {result['python_rejects']} | {len(result['false_amp900'])} | "
        f"{len(result['missed_amp900'])} | {result['seconds']} |",
    ]
    for kind in ("false_amp900", "missed_amp900"):
        items = result[kind]
        assert isinstance(items, list)
        lines += [f"- {kind.replace('_', ' ')}: `{item}`" for item in items[:20]]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")
    return 0 if not result["false_amp900"] and not result["missed_amp900"] else 1


if __name__ == "__main__":
    sys.exit(main())
