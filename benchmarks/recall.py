"""Recall on real mixed-precision bugs that public projects fixed: does amplint flag the buggy lines?

    python benchmarks/recall.py fetch     # download + unpack each case's release (the one with the bug)
    python benchmarks/recall.py run       # amplint in each release's folder; keeps what lands on the lines
    python benchmarks/recall.py report    # the table of docs/recall.md (--write puts it there)

    python benchmarks/recall.py run --rev HEAD    # amplint as committed, not the working tree

Each case of `benchmarks/recall_cases.toml` is a bug a project fixed in its code (the issue or pull
request and the fix commit are cited), pinned to the newest PyPI release that still has it, with the
lines the fix changed. The cases were gathered from the projects' own reports, without running amplint
or reading its rules, so that the set is not chosen by what amplint catches.

`run` checks each release whole, as a new user would, in three ways: the defaults (`amplint check
.`), with `--show-conditional` (findings whose half precision rests on nothing in the project), and
with every rule on (`--select ALL --show-conditional`). A case is caught by a way when a finding of a
numeric rule (any but AMP008, which flags a deprecated API, and AMP900, a file it could not parse)
lands on one of its lines. Whether that finding names the bug's own hazard is for the reader: the
report prints each one's rule and message beside the case. The results go to
`benchmarks/recall.json`, one run per amplint commit: the first is first contact (no rule had
changed because of these cases), later ones come after changes made with them in view. `report`
renders them with Wilson intervals, and apart for the cases from projects this repository names
nowhere else (the rest may have shaped the rules).
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs
from precision_review import (
    CONFIG_FILE,
    Project,
    ReviewError,
    _check,
    _git,
    archive_and_torch,
    default_amplint,
    fetch,
    snapshot_command,
    wilson,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CASES = REPO / "benchmarks" / "recall_cases.toml"
DEFAULT_CORPUS = REPO / ".recall_corpus"
RESULTS = REPO / "benchmarks" / "recall.json"
PAGE = "recall.md"
NOT_NUMERIC = frozenset({"AMP008", "AMP900"})
# The ways a release is checked: (name, extra arguments of `amplint check`).
WAYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("default", ()),
    ("conditional", ("--show-conditional",)),
    ("all rules", ("--select", "ALL", "--show-conditional")),
)
MAX_LINES = 15
_FIELDS = frozenset(
    {
        "id",
        "name",
        "version",
        "sdist",
        "path",
        "lines",
        "fixed_in",
        "reference",
        "commit",
        "hazard",
        "fix",
        "mode",
        "named_in_repo",
    }
)
_JUDGED = frozenset({"case", "code", "names_hazard", "reason"})
_ID = re.compile(r"[a-z0-9][a-z0-9._-]*")


@dataclass(frozen=True)
class Case:
    id: str
    project: Project
    path: str
    lines: tuple[int, int]
    reference: str
    hazard: str
    named_in_repo: bool
    # A rule's finding on the lines, judged by reading it beside the bug: (names the hazard, why).
    judged: dict[str, tuple[bool, str]] = field(default_factory=dict)


def load_cases(path: Path) -> list[Case]:
    """The cases of `path`, checked: every field there, lines in order and at most MAX_LINES long,
    ids unique; each with the judgements (`[[judged]]`: case, code, names_hazard, reason) of the
    findings on its lines."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    cases: list[Case] = []
    for number, entry in enumerate(data.get("case", []), 1):
        where = f"{path.name}: case {number}"
        missing = _FIELDS - entry.keys()
        extra = entry.keys() - _FIELDS
        if missing or extra:
            raise ReviewError(f"{where}: missing {sorted(missing)}, unknown {sorted(extra)}")
        if not _ID.fullmatch(entry["id"]):
            raise ReviewError(f"{where}: id {entry['id']!r} is not lower-case letters, digits, '.', '_', '-'")
        lines = entry["lines"]
        if not (len(lines) == 2 and 1 <= lines[0] <= lines[1] < lines[0] + MAX_LINES):
            raise ReviewError(f"{where} ({entry['id']}): lines must be [first, last], at most {MAX_LINES}")
        if any(case.id == entry["id"] for case in cases):
            raise ReviewError(f"{where}: id {entry['id']!r} is used twice")
        project = Project(entry["name"], entry["version"], sdist=bool(entry["sdist"]))
        cases.append(
            Case(
                entry["id"],
                project,
                entry["path"],
                (lines[0], lines[1]),
                entry["reference"],
                entry["hazard"],
                bool(entry["named_in_repo"]),
            )
        )
    by_id = {case.id: case for case in cases}
    for number, entry in enumerate(data.get("judged", []), 1):
        if entry.keys() != _JUDGED or entry["case"] not in by_id:
            raise ReviewError(f"{path.name}: judged {number}: needs {sorted(_JUDGED)} and a known case")
        by_id[entry["case"]].judged[entry["code"]] = (bool(entry["names_hazard"]), entry["reason"])
    return cases


def on_lines(case: Case, findings: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The numeric findings on the case's lines of its file."""
    first, last = case.lines
    return [
        {"code": f["code"], "line": f["line"], "message": f["message"]}
        for f in findings
        if f["path"] == case.path and first <= f["line"] <= last and f["code"] not in NOT_NUMERIC
    ]


def run(cases: Sequence[Case], corpus: Path, rev: str | None, jobs: int | None) -> dict[str, Any]:
    env: dict[str, str] | None = None
    commit: str | None
    if rev is not None:
        commit, amplint, env = snapshot_command(rev, corpus)
    else:
        commit, amplint = _git("rev-parse", "HEAD"), default_amplint()
    # amplint's defaults, not the configuration of a repository the corpus folder sits in.
    (corpus / CONFIG_FILE).write_text("# amplint's defaults for the recall cases.\n", encoding="utf-8")
    results: list[dict[str, Any]] = []
    by_release: dict[str, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for case in cases:
            root = corpus / case.project.folder
            if not (root / case.path).is_file():
                raise ReviewError(f"{case.id}: {case.project.folder} has no {case.path}: run `fetch` first")
            found = by_release.setdefault(case.project.folder, {})
            _, torch_version = archive_and_torch(corpus, case.project)
            caught: dict[str, list[dict[str, Any]]] = {}
            for way, extra in WAYS:
                if way not in found:
                    output = Path(scratch) / f"{case.project.folder}.{len(found)}.json"
                    result, findings = _check(
                        case.project, corpus, amplint, jobs, env, torch_version, extra, output
                    )
                    if findings is None:
                        raise ReviewError(f"{case.id}: amplint failed:\n{result.stderr.strip()[-2000:]}")
                    found[way] = findings
                caught[way] = on_lines(case, found[way])
            results.append({"id": case.id, **caught})
            shown = ", ".join(f"{way} {'+' if caught[way] else '-'}" for way, _ in WAYS)
            print(f"{case.id}: {shown}")
    return {"commit": commit[:12] if commit else None, "rev": rev, "cases": results}


def report(document: dict[str, Any], cases: Sequence[Case] | None = None) -> dict[str, str]:
    """The blocks of docs/recall.md (each run's recall, the cases one by one in the latest run) and
    README.md's line."""
    cases = load_cases(DEFAULT_CASES) if cases is None else cases
    runs = [{entry["id"]: entry for entry in run["cases"]} for run in document["runs"]]
    for results in runs:
        missing = [case.id for case in cases if case.id not in results]
        if missing:
            raise ReviewError(f"no result for {', '.join(missing)}: run `run` again")
    unjudged = sorted(
        {
            f"{case.id} {f['code']}"
            for results in runs
            for case in cases
            for way, _ in WAYS
            for f in results[case.id][way]
            if f["code"] not in case.judged
        }
    )
    if unjudged:
        raise ReviewError(f"judge these findings in {DEFAULT_CASES.name} ([[judged]]): {', '.join(unjudged)}")

    def caught(results: dict[str, Any], case: Case, way: str) -> bool:
        return any(case.judged[f["code"]][0] for f in results[case.id][way])

    apart = [case for case in cases if not case.named_in_repo]
    head = [
        f"`python benchmarks/recall.py run --rev <commit>` on the {len(cases)} cases of "
        f"`benchmarks/recall_cases.toml` ({len(apart)} from projects this repository names nowhere "
        "else), then `report --write`. The first run is first contact: no rule had changed because of "
        "these cases; a later one comes after changes made with them in view. Flagged: a numeric "
        "rule's finding on one of the lines the fix changed; caught: that finding names the bug's "
        "hazard (judged by reading it beside the report, in the cases file). Shares with 95% Wilson "
        "intervals.",
        "",
        "| amplint | Run | Flagged | Caught | Caught, projects named nowhere else |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for number, (run, results) in enumerate(zip(document["runs"], runs, strict=True)):
        label = f"`{run['commit']}`" + (", first contact" if number == 0 else ", after changes")
        for way, _ in WAYS:
            cells = [
                _share(sum(1 for case in cases if results[case.id][way]), len(cases)),
                _share(sum(1 for case in cases if caught(results, case, way)), len(cases)),
                _share(sum(1 for case in apart if caught(results, case, way)), len(apart)),
            ]
            head.append(f"| {label} | {way} | " + " | ".join(cells) + " |")
    latest = runs[-1]
    out = [f"In the latest run (amplint at `{document['runs'][-1]['commit']}`):", ""]
    out.append("| Case | Release | Hazard | " + " | ".join(way for way, _ in WAYS) + " |")
    out.append("| --- | --- | --- | " + " | ".join("---" for _ in WAYS) + " |")
    for case in cases:
        cells = []
        for way, _ in WAYS:
            codes = sorted({f["code"] for f in latest[case.id][way]})
            marks = [f"{code} ({'names it' if case.judged[code][0] else 'another hazard'})" for code in codes]
            cells.append(", ".join(marks) or "-")
        release = f"{case.project.name} {case.project.version}, `{case.path}`:{case.lines[0]}-{case.lines[1]}"
        hazard = f"{case.hazard} ([report]({case.reference}))"
        out.append(f"| {case.id} | {release} | {hazard.replace('|', '/')} | " + " | ".join(cells) + " |")
    notes = sorted(
        {
            (case.id, f["code"], f["message"], case.judged[f["code"]][1])
            for results in runs
            for case in cases
            for way, _ in WAYS
            for f in results[case.id][way]
        }
    )
    if notes:
        out += ["", "Each finding on a case's lines, in any run, and how it was judged:", ""]
        out += [f"- {id_} {code}: {message} Judged: {reason}" for id_, code, message, reason in notes]
    first, last = ([sum(1 for c in cases if caught(r, c, w)) for w, _ in WAYS] for r in (runs[0], latest))
    readme = (
        f"- **Recall**: of {len(cases)} real mixed-precision bugs that public projects fixed, each "
        "checked in the PyPI release that still had it, amplint's defaults caught "
        f"{first[0]} on first contact, with `--show-conditional` {first[1]}, with every rule on {first[2]}"
    )
    if len(runs) > 1:
        readme += f"; after changes made with them in view, {last[0]}, {last[1]} and {last[2]}"
    readme += " ([docs/recall.md](docs/recall.md))."
    return {"table": "\n".join(head), "cases": "\n".join(out), "readme": readme}


def _share(hits: int, total: int) -> str:
    if not total:
        return "-"
    low, high = wilson(hits, total)
    return f"{hits}/{total} ({hits / total:.0%}; {low:.0%}-{high:.0%})"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="amplint's recall on real, fixed mixed-precision bugs.")
    parser.add_argument("step", choices=("fetch", "run", "report"))
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="download/unpack folder")
    parser.add_argument("--rev", help="amplint as committed at this revision, not the working tree")
    parser.add_argument("--jobs", type=int, help="passed to `amplint check --jobs`")
    parser.add_argument("--write", action="store_true", help="report: write the table into docs/recall.md")
    args = parser.parse_args(argv)
    corpus = args.corpus.resolve()
    try:
        cases = load_cases(args.cases)
        if args.step == "fetch":
            corpus.mkdir(parents=True, exist_ok=True)
            fetch(list(dict.fromkeys(case.project for case in cases)), corpus)
        elif args.step == "run":
            latest = run(cases, corpus, args.rev, args.jobs)
            runs = docs_blocks.load(RESULTS)["runs"] if RESULTS.is_file() else []
            # A run of the same commit replaces the earlier one; another is added after them.
            runs = [r for r in runs if r["commit"] != latest["commit"]] + [latest]
            docs_blocks.save(RESULTS, {"runs": runs})
        else:
            rendered = report(docs_blocks.load(RESULTS), cases)
            docs_blocks.report_command(docs_blocks.DOCS / PAGE, "recall", rendered, args.write)
    except ReviewError as exc:
        print(f"recall: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
