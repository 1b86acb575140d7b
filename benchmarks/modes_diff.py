"""The corpus projects whose execution modes differ between two commits, printed comma-separated for
`precision_review.py run --only`: the projects a change to the execution-modes pass can touch, so
that a before-and-after run on them is reproducible from committed data.

    python benchmarks/modes_diff.py de81681 1172989 [--from-review review-14]

Each commit's `amplint/` runs from a snapshot (`precision_review.snapshot`) on every fetched project,
checked whole as `precision_review.py run` checks it; a project is printed when some definition of
some file has other modes (or the same modes from other kinds of settings: code, tests, options).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from precision_review import DEFAULT_CORPUS, DEFAULT_MANIFEST, ReviewError, load_corpus, snapshot

# Run under a snapshot: the modes of each project folder read from stdin, as JSON on stdout. It uses
# only what every commit since execution modes landed has.
_DUMP = """
import json, sys
from pathlib import Path
from amplint.config import Settings
from amplint.pipeline.discovery import discover
from amplint.pipeline.precision import project_precision

found = {}
for folder in json.load(sys.stdin):
    files = discover([Path(folder)], Settings()).files
    modes = project_precision(Settings(), files).modes if files else None
    found[folder] = {
        path: {name: sorted(f"{w.mode.name}:{w.role}" for w in whys) for name, whys in names.items()}
        for path, names in (modes.definitions.items() if modes is not None else ())
    }
json.dump(found, sys.stdout)
"""


def modes_at(rev: str, folders: Sequence[str], corpus: Path) -> dict[str, object]:
    _, code = snapshot(rev, corpus)
    run = subprocess.run(
        [sys.executable, "-c", _DUMP],
        input=json.dumps(list(folders)),
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(code), "PATH": ""},
        cwd=corpus,
    )
    if run.returncode != 0:
        raise ReviewError(f"the modes of {rev} could not be read: {run.stderr.strip()[-400:]}")
    found: dict[str, object] = json.loads(run.stdout)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--from-review", help="only projects this review (its `id`) or a later one added")
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST)
    args = parser.parse_args(argv)
    try:
        corpus = load_corpus(args.manifest)
        projects = corpus.since(args.from_review) if args.from_review else corpus.projects
        fetched = {str(args.corpus / p.folder): p.name for p in projects if (args.corpus / p.folder).is_dir()}
        before = modes_at(args.before, sorted(fetched), args.corpus)
        after = modes_at(args.after, sorted(fetched), args.corpus)
    except ReviewError as error:
        parser.error(str(error))
    names = [name for folder, name in fetched.items() if before.get(folder) != after.get(folder)]
    print(",".join(names))
    print(f"modes_diff: {len(names)} of {len(fetched)} fetched projects differ", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
