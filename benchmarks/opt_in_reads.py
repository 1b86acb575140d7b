"""First-contact reads of rules that are off by default: would they hold the bar if they were on?

    python benchmarks/opt_in_reads.py run --rules AMP002,AMP003 --from-review review-14 --rev R \
        --only "$(python benchmarks/corpus_grep.py --from-review review-14 --all softmax)"
    python benchmarks/opt_in_reads.py aid [--per-rule 20] [--seed N]
    python benchmarks/opt_in_reads.py report [--write]

`run` checks every fetched project that review (or a later one) added, whole, with only `--rules`
selected (`--only`: those named; both rules need a softmax in the file they flag, so the projects
with no `softmax` anywhere cannot have a finding), as a user who turns them on would (`--select`: what the project's execution modes show,
nothing conditional), at the commit `--rev` (a snapshot, as `precision_review.py run` takes). The
projects' default findings were read in their reviews; these rules' findings were off, so nobody
here had read them, nor changed a rule because of them: a first contact for these rules. `aid`
draws up to `--per-rule` findings of each rule in a seeded uniform order (`precision_review.draw`)
and writes their reading aid; verdicts go into benchmarks/precision_verdicts.toml beside the
reviews'. `report` renders the per-rule shares with Wilson intervals into docs/measured.md from
opt_in_reads.json, which `run` and `report` keep.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import docs_blocks  # this folder is on sys.path when a script in it runs
from precision_review import (
    AID_DIR,
    DEFAULT_CORPUS,
    DEFAULT_MANIFEST,
    DEFAULT_VERDICTS,
    FIRST,
    UNPACKED_MARKER,
    ReviewError,
    _check,
    _file_lines,
    archive_and_torch,
    dedup,
    draw,
    load_corpus,
    load_verdicts,
    read_units,
    render_finding,
    snapshot_command,
    verdict_of,
    wilson,
)

RESULTS = Path(__file__).resolve().parent / "opt_in_reads.json"
PAGE = "measured.md"
DEFAULT_SEED = 2026113099
DEFAULT_PER_RULE = 20


def run(args: argparse.Namespace) -> dict[str, Any]:
    try:
        chosen = load_corpus(args.manifest).since(args.from_review)
    except ReviewError as error:
        raise SystemExit(f"opt_in_reads: {error}") from None
    only = set(args.only.split(",")) if args.only is not None else None
    commit, amplint, env = snapshot_command(args.rev, args.corpus)
    raw = args.corpus / "raw"
    raw.mkdir(exist_ok=True)
    findings: list[dict[str, Any]] = []
    projects = 0
    for project in chosen:
        root = args.corpus / project.folder
        if not (root / UNPACKED_MARKER).is_file():
            continue
        if only is not None and project.name not in only:
            continue
        _, torch_version = archive_and_torch(args.corpus, project)
        output = (raw / f"{project.folder}.opt-in.json").resolve()
        result, found = _check(
            project, args.corpus, amplint, args.jobs, env, torch_version, ["--select", args.rules], output
        )
        if found is None:
            print(f"{project.folder}: amplint failed: {result.stderr.strip()[-300:]}", file=sys.stderr)
            continue
        projects += 1
        findings += found
        if found:
            print(f"{project.folder}: {dict(Counter(f['code'] for f in found))}", file=sys.stderr)
    data = {
        "commit": commit,
        "rules": args.rules.split(","),
        "from_review": args.from_review,
        "only": args.only is not None,
        "projects": projects,
        "findings": findings,
        "seed": args.seed,
        "per_rule": args.per_rule,
    }
    docs_blocks.save(RESULTS, data)
    return data


def sample(data: dict[str, Any]) -> list[Any]:
    """Each rule's first `per_rule` units in the seeded order, rule by rule."""
    units = dedup(data["findings"])
    return [
        unit
        for code in data["rules"]
        for unit in draw([u for u in units if u.code == code], data["per_rule"], data["seed"])
    ]


def aid(args: argparse.Namespace) -> None:
    data = docs_blocks.load(RESULTS)
    data["seed"], data["per_rule"] = args.seed, args.per_rule
    docs_blocks.save(RESULTS, data)
    corpus = load_corpus(args.manifest)
    verdicts = load_verdicts(args.verdicts)
    folder = args.corpus / AID_DIR / "opt-in"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    manifest = {p.name: p for p in corpus.projects}
    blocks = []
    for n, read in enumerate(read_units(sample(data), verdicts), 1):
        f = read.unit.first
        project = manifest[f["project"]]
        lines = _file_lines(args.corpus / project.folder, f["path"], None)
        blocks.append(render_finding(f"O{n}", read, FIRST, project.version, lines, 15))
    (folder / "all.md").write_text("\n".join(blocks), encoding="utf-8")
    print(f"{len(blocks)} findings: {folder / 'all.md'}")


def count(data: dict[str, Any], verdicts_path: Path) -> dict[str, dict[str, int]]:
    """Per rule: its projects and findings, and the verdicts on its sampled findings."""
    verdicts = load_verdicts(verdicts_path)
    units, chosen = dedup(data["findings"]), sample(data)
    counts: dict[str, dict[str, int]] = {}
    for code in data["rules"]:
        mine = [u for u in units if u.code == code]
        read = Counter(v.counted for u in chosen if u.code == code and (v := verdict_of(u, verdicts)))
        counts[code] = {
            "projects": len({u.project for u in mine}),
            "findings": len(mine),
            "real": read["real"],
            "worth a look": read["worth a look"],
            "false": read["false"],
        }
    return counts


def _share(hits: int, read: int) -> str:
    if not read:
        return "-"
    low, high = wilson(hits, read)
    return f"{100 * hits / read:.0f}% (Wilson {100 * low:.0f}-{100 * high:.0f}%)"


def report(data: dict[str, Any]) -> dict[str, str]:
    """The block of docs/measured.md: each rule's first-contact reads, from opt_in_reads.json."""
    only = (
        f' --only "$(python benchmarks/corpus_grep.py --from-review {data["from_review"]} --all softmax)"'
        if data.get("only")
        else ""
    )
    rows = [
        f"`python benchmarks/opt_in_reads.py run --rules {','.join(data['rules'])} --from-review "
        f"{data['from_review']} --rev {data['commit'][:12]}{only}`, then `aid` (up to {data['per_rule']} "
        f"findings per rule, seed {data['seed']}) and `report`: {data['projects']} projects of the "
        "reviews since execution modes landed"
        + (" with a softmax in some file" if only else "")
        + ", checked whole with only these rules selected (no conditional findings). The reads are "
        "blind, by readers outside the rules' development; a finding an earlier review had read keeps "
        "that verdict.",
        "",
        "| Rule | Projects with findings | Findings | Read | Real | Worth a look | False | Real | Useful |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for code, c in data["reads"].items():
        real, look, false = c["real"], c["worth a look"], c["false"]
        read = real + look + false
        rows.append(
            f"| {code} | {c['projects']} | {c['findings']} | {read} | {real} | {look} | {false} | "
            f"{_share(real, read)} | {_share(real + look, read)} |"
        )
    return {"table": "\n".join(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=("run", "aid", "report"))
    parser.add_argument("--rules", default="AMP002,AMP003")
    parser.add_argument("--from-review", default="review-14")
    parser.add_argument("--rev", default="HEAD")
    parser.add_argument("--jobs", type=int)
    parser.add_argument("--only", help="run: comma-separated project names (default: all)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--per-rule", type=int, default=DEFAULT_PER_RULE)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    parser.add_argument("--verdicts", type=Path, default=DEFAULT_VERDICTS)
    parser.add_argument("--write", action="store_true", help="report: write the table into docs/")
    args = parser.parse_args(argv)
    if args.step == "run":
        data = run(args)
        print(f"{len(data['findings'])} findings in {data['projects']} projects")
    elif args.step == "aid":
        aid(args)
    else:
        data = docs_blocks.load(RESULTS)
        data["reads"] = count(data, args.verdicts)
        docs_blocks.save(RESULTS, data)
        docs_blocks.report_command(docs_blocks.DOCS / PAGE, "opt_in_reads", report(data), args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())
