"""What a plain `amplint check` leaves out where only a caller could make values half, and whether
that hides anything: on the precision corpus (`benchmarks/precision_corpus.toml`, unpacked by
`precision_review.py fetch`), each project is read as `amplint check .` reads it (its configuration,
its execution modes), and every file that no mode reaches and that spells no half dtype, cast or
autocast (`half_only_by_caller`) is linted with the rules resting on half values
(`Rule.rests_on_half`), conditional findings kept. Each finding there must be conditional: that is
what lets a run hiding conditional findings not run those rules on such a file.

    python benchmarks/caller_gate.py run [--corpus DIR] [--jobs 2] [--sample N] [--seed S]
    python benchmarks/caller_gate.py report [--write]   # its block of docs/measured.md

`--sample N` checks N projects drawn with `--seed` from the corpus's unpacked projects (default all).
"""

from __future__ import annotations

import os
import random
import sys
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs
from precision_review import DEFAULT_CORPUS, DEFAULT_MANIFEST, Project, _git, load_corpus

RESULTS = Path(__file__).resolve().parent / "caller_gate.json"
PAGE = "measured.md"


def check_project(job: tuple[Project, Path]) -> dict[str, Any]:
    """One project's files where the gate holds, and the findings the rules it leaves out make there."""
    from amplint.config import load_settings
    from amplint.pipeline.discovery import discover
    from amplint.pipeline.precision import project_precision
    from amplint.rules import all_rules
    from amplint.rules.runner import lint_source
    from amplint.source import WORD, SourceError, display_path, python_ast, read_source
    from amplint.static.engine.interpret import half_only_by_caller

    project, corpus = job
    started = time.perf_counter()
    rules = [rule for rule in all_rules() if rule.rests_on_half]
    codes = {rule.code for rule in rules}
    os.chdir(corpus / project.folder)
    settings = load_settings([Path(".")])
    files = [path for path in discover([Path(".")], settings).files if path.suffix == ".py"]
    precision = project_precision(settings, files)
    gated = triggered = 0
    findings: list[str] = []
    static: list[str] = []
    for path in files:
        try:
            source = read_source(path, settings.max_file_size)
        except SourceError:
            continue
        display = display_path(path)
        words = frozenset(WORD.findall(source.text))
        try:
            tree = python_ast(source.text)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue  # AMP900's file: no rule runs on it
        if not half_only_by_caller(words, source.text, precision.of(display), tree):
            continue
        gated += 1
        triggered += any(rule.triggers & words for rule in rules)
        for d in lint_source(source, rules, display, profile=precision.of(display)).diagnostics:
            if d.code in codes:
                where = f"{project.folder}/{display}:{d.line} {d.code}"
                findings.append(where)
                if d.confidence.value != "conditional":
                    static.append(where)
    return {
        "project": project.folder,
        "files": len(files),
        "gated": gated,
        "triggered": triggered,
        "findings": len(findings),
        "not_conditional": static,
        "seconds": round(time.perf_counter() - started, 1),
    }


def run(corpus: Path, manifest: Path, jobs: int, sample: int | None, seed: int) -> dict[str, Any]:
    projects = [p for p in load_corpus(manifest).projects if (corpus / p.folder).is_dir()]
    if sample is not None:
        projects = random.Random(seed).sample(projects, min(sample, len(projects)))
    started = time.perf_counter()
    with Pool(jobs) as pool:
        rows = sorted(pool.map(check_project, [(p, corpus) for p in projects]), key=lambda r: r["project"])
    return {"rows": rows, "seconds": round(time.perf_counter() - started)}


def report(data: dict[str, Any]) -> dict[str, str]:
    rows, meta = data["rows"], data["meta"]
    static = [where for row in rows for where in row["not_conditional"]]
    total = sum(row["files"] for row in rows)
    gated = sum(row["gated"] for row in rows)
    triggered = sum(row["triggered"] for row in rows)
    findings = sum(row["findings"] for row in rows)
    lines = [
        "```bash",
        f"python benchmarks/caller_gate.py run {' '.join(data['command'])}".rstrip(),
        "python benchmarks/caller_gate.py report --write   # this block",
        "```",
        "",
        f"At `{data['commit']}` (Python {meta['versions']['python']}, libcst {meta['versions']['libcst']}), "
        f"on {len(rows)} projects of the precision corpus ({data['measured']}):",
        "",
        "| Files | Only a caller makes values half | Of those, with a trigger word of such a rule | Their findings there "
        "| Not conditional |",
        "| ---: | ---: | ---: | ---: | ---: |",
        f"| {total:,} | {gated:,} | {triggered:,} | {findings:,} | {len(static)} |",
    ]
    lines += [f"- not conditional: `{where}`" for where in static]
    return {"table": "\n".join(lines)}


def main(argv: list[str] | None = None) -> int:
    parser, commands = docs_blocks.script_parser(__doc__)
    go = commands.add_parser("run")
    go.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    go.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    go.add_argument("--jobs", type=int, default=2)
    go.add_argument("--sample", type=int)
    go.add_argument("--seed", type=int, default=20261130)
    go.add_argument("--output", type=Path, default=RESULTS)
    docs_blocks.add_report(commands, RESULTS, PAGE)
    args = parser.parse_args(argv)
    if args.command == "report":
        docs_blocks.report_args(args, PAGE, "caller_gate", report)
        return 0
    meta = docs_blocks.machine(("amplint", "libcst"))
    commit = _git("rev-parse", "--short=7", "HEAD")  # the code the run imports, taken as it starts
    data = run(args.corpus.resolve(), args.manifest.resolve(), args.jobs, args.sample, args.seed)
    data["meta"] = docs_blocks.finished(meta)
    data["commit"] = commit
    sampled = f"--sample {args.sample} --seed {args.seed}" if args.sample is not None else ""
    data["command"] = [part for part in (sampled, f"--jobs {args.jobs}") if part]
    data["measured"] = (
        f"{args.sample} drawn with seed {args.seed}" if args.sample is not None else "every unpacked project"
    )
    docs_blocks.save(args.output, data)
    print(
        f"{sum(len(row['not_conditional']) for row in data['rows'])} findings not conditional",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
