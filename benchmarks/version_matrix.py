"""amplint's runtime on several torch and transformers versions: the lower bounds pyproject admitted
before this table, the versions CI pins, the torch release between those and the newest, and the
newest on the registry. pyproject's ranges admit
the rows that pass and no other (tests/test_docs_tables.py).

Each row gets its own virtualenv (outside the repository), with only the packages the runtime
needs. In it run the runtime test subset (RUNTIME_TESTS) and the coverage sample
(benchmarks/hf_coverage.py on hf_coverage.SAMPLE); the rows are written to version_matrix.json.

    python benchmarks/version_matrix.py run [--root DIR] [--rows oldest,pinned,...] [--jobs N]
    python benchmarks/version_matrix.py report > docs/version-matrix.md
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_coverage  # the sample and the failure kinds of docs/hf-coverage.md

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "version_matrix.json"
DEFAULT_ROOT = Path.home() / ".cache" / "amplint-version-matrix"

# name, torch requirement, transformers requirement, what the row stands for. pyproject's ranges
# follow from the rows: from the oldest row that passes to below the first newer one that fails
# (tests/test_docs_tables.py checks it).
ROWS: tuple[tuple[str, str, str, str], ...] = (
    (
        "oldest",
        "torch==2.4.0",
        "transformers==4.45.0",
        "the lower bounds pyproject admitted before this table",
    ),
    ("pinned", "torch==2.13.0", "transformers==5.24.0", "the versions CI pins"),
    ("between", "torch==2.14.1", "transformers==5.24.0", "the torch release between pinned and newest"),
    ("newest", "torch==2.15.0", "transformers", "the newest on the registry"),
)
SHOWN_MESSAGES = 5  # the most common failure messages a row lists
STANDS_FOR = {name: text for name, _, _, text in ROWS}
# What the runtime needs besides torch and transformers, and the test runner.
PACKAGES = ("libcst>=1.1", "safetensors>=0.4", "pillow>=10", "pytest>=8")
RUNTIME_TESTS = (
    "tests/runtime/test_runtime.py",
    "tests/runtime/test_torch_version.py",
    "tests/runtime/test_values.py",
    "tests/runtime/test_backward.py",
    "tests/runtime/test_hf_models.py",
)


def _run(command: list[str], log: Path, env: dict[str, str] | None = None) -> int:
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO).returncode


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


def _installed(python: Path) -> dict[str, str]:
    code = "import json, sys, torch, transformers; print(json.dumps({'python': sys.version.split()[0], "
    code += "'torch': torch.__version__, 'transformers': transformers.__version__}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def portable(text: str) -> str:
    """A message as a reader's machine would have it: paths from the installed package's name or
    the repository's root on, pytest's temporary folders left out."""
    text = re.sub(r"\S*site-packages/", "", text)
    text = re.sub(r"\S*/pytest-of-[^/\s]+/pytest-\d+/", "", text)
    return text.replace(f"{REPO}/", "")


def _tests(junit: Path) -> dict[str, Any]:
    """Counts and failing test ids from pytest's junit XML."""
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures: dict[str, str] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is not None:
            counts["failed"] += 1
            failures[name] = portable((problem.get("message") or "").split("\n")[0])[:300]
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**counts, "failures": failures}


def measure(name: str, torch_req: str, transformers_req: str, root: Path) -> dict[str, Any]:
    venv = root / name
    log = root / f"{name}.log"
    log.write_text("", encoding="utf-8")
    row: dict[str, Any] = {"row": name, "requested": {"torch": torch_req, "transformers": transformers_req}}
    python = venv / "bin" / "python"
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)], log)
    started = time.perf_counter()
    code = _run([str(python), "-m", "pip", "install", "--quiet", torch_req, transformers_req, *PACKAGES], log)
    row["install_seconds"] = round(time.perf_counter() - started)
    if code != 0:
        row["install"] = "failed"
        row["reason"] = _tail(log)
        return row
    row["install"] = "ok"
    row["installed"] = _installed(python)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with tempfile.TemporaryDirectory(prefix="version-matrix-") as scratch:
        junit = Path(scratch) / "junit.xml"
        command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}"]
        started = time.perf_counter()
        _run([*command, *RUNTIME_TESTS], log, env)
        row["tests_seconds"] = round(time.perf_counter() - started)
        row["tests"] = _tests(junit) if junit.exists() else {"collection": _tail(log)}
        rows_file = Path(scratch) / "coverage.json"
        benchmark = [str(python), str(Path(__file__).parent / "hf_coverage.py"), "run", "--jobs", "1"]
        benchmark += ["--types", ",".join(hf_coverage.SAMPLE), "--timeout", "600", "--output", str(rows_file)]
        started = time.perf_counter()
        _run(benchmark, log, env)
        row["coverage_seconds"] = round(time.perf_counter() - started)
        if rows_file.exists():
            traced = json.loads(rows_file.read_text(encoding="utf-8"))["rows"]
            row["coverage"] = {
                "sample": len(hf_coverage.SAMPLE),
                "traced": sum(item["result"] == "traced" for item in traced),
                "failed": {
                    item["type"]: hf_coverage.kind(item) for item in traced if item["result"] != "traced"
                },
            }
        else:
            row["coverage"] = {"sample": len(hf_coverage.SAMPLE), "error": _tail(log)}
    return row


def passes(row: dict[str, Any]) -> bool:
    """Installed, every runtime test passed, and every type of the coverage sample traced."""
    tests, coverage = row.get("tests", {}), row.get("coverage", {})
    return (
        row["install"] == "ok"
        and tests.get("failed") == 0
        and tests.get("passed", 0) > 0
        and coverage.get("traced") == coverage.get("sample")
    )


def _cell_tests(row: dict[str, Any]) -> str:
    tests = row.get("tests")
    if tests is None:
        return "not run"
    if "collection" in tests:
        return "did not collect"
    return f"{tests['passed']} passed, {tests['failed']} failed, {tests['skipped']} skipped"


def _cell_coverage(row: dict[str, Any]) -> str:
    coverage = row.get("coverage")
    if coverage is None:
        return "not run"
    if "error" in coverage:
        return "did not run"
    return f"{coverage['traced']} of {coverage['sample']} traced"


def report(data: dict[str, Any]) -> str:
    rows = data["rows"]
    lines = [
        "# torch and transformers versions amplint's runtime was run on",
        "",
        "Each row is a fresh virtualenv with only the runtime's packages (the builds pip installs, "
        "run on a machine without a GPU; the torch column shows the build, `+cpu` or the CUDA version "
        "it was built for). In it run the runtime tests "
        f"({', '.join(f'`{Path(test).name}`' for test in RUNTIME_TESTS)}) and the coverage sample "
        f"({len(hf_coverage.SAMPLE)} model types across families, `hf_coverage.SAMPLE`, traced as "
        f"docs/hf-coverage.md traces them), on Python {data['meta']['python']}. Produced by:",
        "",
        "```",
        "python benchmarks/version_matrix.py run",
        "python benchmarks/version_matrix.py report > docs/version-matrix.md",
        "```",
        "",
        "| row | torch | transformers | install | runtime tests | coverage sample |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        installed = row.get("installed", {})
        lines.append(
            f"| {row['row']} ({STANDS_FOR[row['row']]}) | {installed.get('torch', row['requested']['torch'])} "
            f"| {installed.get('transformers', row['requested']['transformers'])} | {row['install']} "
            f"| {_cell_tests(row)} | {_cell_coverage(row)} |"
        )
    passed = [row["row"] for row in rows if passes(row)]
    lines += [
        "",
        f"Rows that pass every test and trace the whole sample: {', '.join(passed) or 'none'}. "
        "pyproject's torch and transformers ranges admit those rows and none of the others "
        "(`tests/test_docs_tables.py` checks it).",
    ]
    for row in rows:
        problems: list[str] = []
        if row["install"] != "ok":
            problems.append(f"install failed: `{_last_line(row.get('reason', ''))}`")
        by_message: dict[str, list[str]] = {}
        for test, message in row.get("tests", {}).get("failures", {}).items():
            by_message.setdefault(message, []).append(test)
        groups = sorted(by_message.items(), key=lambda item: -len(item[1]))
        for message, tests in groups[:SHOWN_MESSAGES]:
            named = ", ".join(f"`{test}`" for test in tests[:2]) + (", ..." if len(tests) > 2 else "")
            count = f"{len(tests)} tests" if len(tests) > 1 else "1 test"
            shown = message if len(message) <= 160 else f"{message[:70]} ... {message[-80:]}"
            problems.append(f"{count} ({named}): `{shown}`".replace("|", "\\|"))
        rest = sum(len(tests) for _, tests in groups[SHOWN_MESSAGES:])
        if rest:
            problems.append(f"{rest} more tests with other messages")
        by_kind: dict[str, list[str]] = {}
        for model_type, why in row.get("coverage", {}).get("failed", {}).items():
            by_kind.setdefault(why, []).append(model_type)
        for why, types in sorted(by_kind.items(), key=lambda item: -len(item[1])):
            problems.append(f"coverage sample, {why}: {', '.join(types)}")
        if problems:
            lines += ["", f"What failed on the {row['row']} row:", ""]
            lines += [f"- {problem}" for problem in problems]
    return "\n".join(lines) + "\n"


def _last_line(text: str) -> str:
    kept = [line for line in text.splitlines() if line.strip()]
    return re.sub(r"\s+", " ", kept[-1])[:200] if kept else ""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    go = commands.add_parser("run")
    go.add_argument("--root", type=Path, default=DEFAULT_ROOT, help="where the virtualenvs go")
    go.add_argument("--rows", default=",".join(row[0] for row in ROWS))
    go.add_argument("--output", type=Path, default=RESULTS)
    go.add_argument("--jobs", type=int, default=1, help="rows measured at once (each its own virtualenv)")
    show = commands.add_parser("report")
    show.add_argument("--input", type=Path, default=RESULTS)
    args = parser.parse_args()
    if args.command == "report":
        sys.stdout.write(report(json.loads(args.input.read_text(encoding="utf-8"))))
        return 0
    args.root.mkdir(parents=True, exist_ok=True)
    wanted = args.rows.split(",")
    # Rows measured earlier and not asked for now stay as they were.
    earlier = json.loads(args.output.read_text(encoding="utf-8"))["rows"] if args.output.exists() else []
    measured = {row["row"]: row for row in earlier}
    # Rows start in the order asked; each row's virtualenv and log are its own; the results file is
    # written as each row ends.
    requirements = {name: (torch_req, transformers_req) for name, torch_req, transformers_req, _ in ROWS}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        running = {
            pool.submit(measure, name, *requirements[name], args.root): name
            for name in wanted
            if name in requirements
        }
        for done in concurrent.futures.as_completed(running):
            print(f"{running[done]}: measured", file=sys.stderr, flush=True)
            measured[running[done]] = done.result()
            meta = {"python": sys.version.split()[0]}
            rows = [measured[row[0]] for row in ROWS if row[0] in measured]
            args.output.write_text(
                json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n", encoding="utf-8"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
