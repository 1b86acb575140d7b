"""Picks the next precision review's new projects from a list of PyPI names, by review 5's written
rule applied by a script rather than by hand:

    python benchmarks/corpus_pick.py --list torch --seed 28 > benchmarks/candidates/review-28.txt
    python benchmarks/corpus_pick.py benchmarks/candidates/review-28.txt --take 150 --review review-28 \
        --log benchmarks/candidates/review-28.log >> benchmarks/precision_corpus.toml

A later review goes on down the same list from the line after the last one the log names
(`--from-line 1579` for review 29). `--list` writes the names of PyPI's simple index that contain a word (or any of several), the corpus's names left out,
normalized and shuffled by the seed (Python's `random.Random(seed).shuffle` of the sorted names).

Names are taken in the list's order (the list is shuffled when it is made, and committed). A name
qualifies when
  - it is in no project of `benchmarks/precision_corpus.toml` and named nowhere in this repository
    (its tracked text files), so nobody here has read its code or findings;
  - its latest release was uploaded in 2023 or later and has an sdist (else a wheel) of at most 50 MB;
  - its `.py` files import torch, and mention autocast, bfloat16, float16, fp16, bf16 or `.half()`:
    PyTorch code that meets reduced precision somewhere, the code amplint is for;
  - its `.py` files hold 1 to 100,000 lines;
  - fewer than five projects already taken share its author (author e-mail, else author name);
  - its package folder (`src/` or `python/` aside) is not that of a corpus project or of a project already taken: a
    nightly, a build for another CUDA or a renamed fork is the same code under another name. A folder
    with a name any project may give its code (`src`, `app`, `benchmark`) tells nothing of whose it is.
Every name read gets a line on stderr and in `--log` (its verdict or the reason it was refused);
each qualifying one is printed as a `[[project]]` entry for the corpus, its `subdir` the package's
top folder (the one with `__init__.py` nearest the root whose name best matches the project). Where
`precision_review.py fetch` cannot prepare the sdist it takes the wheel, whose folder may differ
(`src/pkg` becomes `pkg`): `run` names such a project, and its `subdir` is then set by hand.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from precision_review import DEFAULT_MANIFEST, REPO, _members, _normalize, load_corpus

MAX_ARCHIVE = 50 << 20
MAX_LINES = 100_000
MAX_PER_AUTHOR = 5
SINCE = "2023-01-01"
IMPORTS_TORCH = re.compile(rb"(?m)^\s*(?:import torch\b|from torch\b)")
REDUCED = re.compile(rb"autocast|bfloat16|float16|\bfp16\b|\bbf16\b|\.half\(\)")
NOT_PACKAGES = frozenset({"test", "tests", "docs", "doc", "examples", "example", "benchmarks", "scripts"})


@dataclass(frozen=True)
class Verdict:
    name: str
    reason: str
    version: str = ""
    author: str = ""
    subdir: str = ""
    sdist: bool = False
    lines: int = 0

    @property
    def qualifies(self) -> bool:
        return self.reason == "qualifies"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:
        return bytes(response.read())


def package_folder(name: str, paths: Sequence[str]) -> str:
    """The top package folder: of the folders with an `__init__.py` nearest the root (tests, docs and
    examples aside), the one whose name is closest to the project's, else the first."""
    folders = [str(PurePosixPath(p).parent) for p in paths if PurePosixPath(p).name == "__init__.py"]
    folders = [f for f in folders if f != "." and not NOT_PACKAGES & set(PurePosixPath(f).parts)]
    if not folders:
        return ""
    depth = min(f.count("/") for f in folders)
    top = sorted(f for f in folders if f.count("/") == depth)
    wanted = _normalize(name).replace("-", "")
    for folder in top:
        if _normalize(PurePosixPath(folder).name).replace("-", "") == wanted:
            return folder
    for folder in top:
        stem = _normalize(PurePosixPath(folder).name).replace("-", "")
        if stem in wanted or wanted in stem:
            return folder
    return top[0]


def judge(name: str, known: set[str], repo_text: str) -> Verdict:
    if _normalize(name) in known:
        return Verdict(name, "in the corpus")
    spellings = {name, _normalize(name), _normalize(name).replace("-", "_")}
    if any(re.search(rf"(?<![\w-]){re.escape(s)}(?![\w-])", repo_text) for s in spellings):
        return Verdict(name, "named in this repository")
    try:
        meta = json.loads(_get(index := f"https://pypi.org/pypi/{name}/json"))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Verdict(name, f"no metadata ({exc})")
    info, files = meta["info"], meta.get("urls") or []
    version = info.get("version") or ""
    author = (info.get("author_email") or info.get("author") or "").strip().lower()
    if not files or max(f["upload_time"] for f in files) < SINCE:
        return Verdict(name, f"latest release before {SINCE}", version)
    sdists = [f for f in files if f["packagetype"] == "sdist"]
    wheels = sorted(
        (f for f in files if f["packagetype"] == "bdist_wheel"), key=lambda f: "none-any" not in f["filename"]
    )
    chosen = (sdists or wheels or [None])[0]
    if chosen is None:
        return Verdict(name, "no sdist or wheel", version)
    if chosen["size"] > MAX_ARCHIVE:
        return Verdict(name, f"archive of {chosen['size'] >> 20} MB", version)
    try:
        # A mirror of the index may give the file's address relative to the page.
        data = _get(urllib.parse.urljoin(index, chosen["url"]))
        members = dict(_members(Path(chosen["filename"]), data, keep=lambda name: name.endswith(".py")))
    except (
        urllib.error.URLError,
        OSError,
        ValueError,
        tarfile.TarError,
        zipfile.BadZipFile,
        EOFError,
    ) as exc:
        return Verdict(name, f"unreadable archive ({exc})", version)
    lines = sum(content.count(b"\n") for content in members.values())
    if not any(IMPORTS_TORCH.search(content) for content in members.values()):
        return Verdict(name, "does not import torch", version)
    if not any(REDUCED.search(content) for content in members.values()):
        return Verdict(name, "never meets reduced precision", version)
    if not 0 < lines <= MAX_LINES:
        return Verdict(name, f"{lines:,} lines", version)
    subdir = package_folder(name, sorted(members))
    return Verdict(name, "qualifies", version, author, subdir, bool(sdists), lines)


def _package(subdir: str) -> str:
    """The import path of a package folder: `src/metrik/torch` is `metrik/torch`, and an sdist's
    `python/torchburn` is its wheel's `torchburn`; none (empty) for a name any project may give
    its code."""
    package = subdir.removeprefix("src/").removeprefix("python/")
    return "" if package in _GENERIC else package


# Package folders named for what they hold, not whose they are (unrelated projects in the logs of
# reviews 28 to 34 refused each other on `src` and `benchmark`).
_GENERIC = frozenset(
    {
        "src",
        "app",
        "apps",
        "lib",
        "core",
        "utils",
        "model",
        "models",
        "benchmark",
        "benchmarks",
        "scripts",
        "demo",
        "examples",
        "tests",
        "python",
    }
)


def repository_text() -> str:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    parts = []
    for path in files.decode().split("\0"):
        # The candidate lists name every project they offer, read or not.
        if path and not path.startswith("benchmarks/candidates/") and (REPO / path).is_file():
            parts.append((REPO / path).read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts).lower()


def entry(verdict: Verdict, review: str) -> str:
    # A JSON string is a TOML basic string: a folder named with a control character (cookienlp's
    # sdist has one) is written escaped.
    lines = ["[[project]]", f"name = {json.dumps(verdict.name)}", f"version = {json.dumps(verdict.version)}"]
    if verdict.subdir:
        lines.append(f"subdir = {json.dumps(verdict.subdir)}")
    lines += [f"sdist = {str(verdict.sdist).lower()}", f'first_checked = "{review}"', ""]
    return "\n".join(lines)


def candidates(words: Sequence[str], seed: int, known: set[str]) -> list[str]:
    index = _get("https://pypi.org/simple/").decode("utf-8", "replace")
    names = sorted(
        {
            _normalize(n)
            for n in re.findall(r'<a href="[^"]*">([^<]+)</a>', index)
            if any(word in n.lower() for word in words)
        }
    )
    names = [n for n in names if n not in known]
    random.Random(seed).shuffle(names)
    return names


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "names", type=Path, nargs="?", help="the shuffled candidate list, one PyPI name a line"
    )
    parser.add_argument(
        "--list",
        metavar="WORD",
        help="print the candidate list of names containing WORD (or any of WORD,WORD,...)",
    )
    parser.add_argument("--seed", type=int, default=0, help="the shuffle's seed for --list")
    parser.add_argument("--take", type=int, help="stop once this many qualify")
    parser.add_argument(
        "--from-line", type=int, default=1, help="start at this line of the list (where a review stopped)"
    )
    parser.add_argument("--review", help="the review the picked projects are first checked in")
    parser.add_argument("--log", type=Path, help="write each name read and its verdict here")
    parser.add_argument("--jobs", type=int, default=16, help="names judged at once (network-bound)")
    args = parser.parse_args(argv)
    corpus = load_corpus(DEFAULT_MANIFEST).projects
    known = {_normalize(p.name) for p in corpus}
    if args.list:
        print("\n".join(candidates(args.list.split(","), args.seed, known)))
        return 0
    if args.names is None or args.take is None or args.review is None:
        parser.error("a candidate list, --take and --review are needed to pick")

    lines = args.names.read_text().splitlines()[args.from_line - 1 :]
    names = [line.strip() for line in lines if line.strip()]
    packages = {_package(p.subdir) for p in corpus if p.subdir}
    repo_text = repository_text()
    taken: list[Verdict] = []
    authors: Counter[str] = Counter()
    log: list[str] = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for start in range(0, len(names), args.jobs):
            batch = list(pool.map(lambda n: judge(n, known, repo_text), names[start : start + args.jobs]))
            for verdict in batch:
                reason = verdict.reason
                package = _package(verdict.subdir)
                if verdict.qualifies and verdict.author and authors[verdict.author] >= MAX_PER_AUTHOR:
                    reason = "five projects of this author taken"
                elif verdict.qualifies and package and package in packages:
                    reason = f"package {package} already in the corpus or taken"
                elif verdict.qualifies:
                    taken.append(verdict)
                    authors[verdict.author] += 1
                    packages.add(package)
                log.append(f"{verdict.name}\t{verdict.version}\t{reason}")
                print(log[-1], file=sys.stderr)
                if len(taken) == args.take:
                    break
            if len(taken) == args.take:
                break
    if args.log:
        args.log.write_text("\n".join(log) + "\n")
    print("\n".join(entry(v, args.review) for v in taken), end="")
    print(f"{len(log)} names read, {len(taken)} qualify", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
