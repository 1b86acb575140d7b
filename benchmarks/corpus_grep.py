"""The corpus projects with a file whose text matches every pattern given and none of the excluded
ones, printed comma-separated for `precision_review.py run --only`. It selects the projects a rule
change can touch, so that a before-and-after run on them is reproducible from committed data.

    python benchmarks/corpus_grep.py --from-review review-14 --all '\\.backward\\(' --all 'autocast|\\.half\\(\\)|float16|fp16' \\
        --all '\\.step\\(|optimizer_step' --none 'GradScaler|scaler'

Files are the unpacked projects' `.py` files, all of them (not only the package `subdir`), as
`fetch` left them in the corpus folder. `--from-review` keeps the projects that review or a later
one checked first (review-14 is the first since execution modes landed); projects not fetched are
skipped and counted on stderr.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from precision_review import DEFAULT_CORPUS, DEFAULT_MANIFEST, Project, ReviewError, load_corpus


def matches(text: str, wanted: Sequence[re.Pattern[str]], unwanted: Sequence[re.Pattern[str]]) -> bool:
    return all(p.search(text) for p in wanted) and not any(p.search(text) for p in unwanted)


def selected(
    projects: Sequence[Project],
    corpus: Path,
    wanted: Sequence[re.Pattern[str]],
    unwanted: Sequence[re.Pattern[str]],
) -> list[str]:
    names, absent = [], 0
    for project in projects:
        root = corpus / project.folder
        if not root.is_dir():
            absent += 1
            continue
        files = sorted(root.rglob("*.py"))
        if any(matches(f.read_text(errors="replace"), wanted, unwanted) for f in files if f.is_file()):
            names.append(project.name)
    if absent:
        print(f"corpus_grep: {absent} projects are not fetched and were skipped", file=sys.stderr)
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="append", default=[], help="a regex every chosen file matches")
    parser.add_argument("--none", action="append", default=[], help="a regex no chosen file matches")
    parser.add_argument("--from-review", help="only projects this review (its `id`) or a later one added")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    args = parser.parse_args(argv)
    if not args.all:
        parser.error("give at least one --all pattern")
    wanted = [re.compile(p) for p in args.all]
    unwanted = [re.compile(p) for p in args.none]
    corpus = load_corpus(args.manifest)
    try:
        projects = corpus.since(args.from_review) if args.from_review else corpus.projects
    except ReviewError as error:
        parser.error(str(error))
    names = selected(projects, args.corpus, wanted, unwanted)
    print(",".join(names))
    print(f"corpus_grep: {len(names)} projects", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
