"""A reproducible precision review of amplint's findings on public PyTorch projects.

    python benchmarks/precision_review.py fetch     # download + unpack the pinned corpus
    python benchmarks/precision_review.py run       # amplint over every project; saves the findings
    python benchmarks/precision_review.py report    # sample, join the verdicts, write docs/precision.md
    python benchmarks/precision_review.py all       # the three in turn

    python benchmarks/precision_review.py run --rev HEAD      # amplint as committed, not the working tree
    python benchmarks/precision_review.py run --only kornia   # redo some projects, keep the others' results
    python benchmarks/precision_review.py run --review review-5   # the projects one review added

The corpus (`benchmarks/precision_corpus.toml`) pins each project's PyPI name and version and records
the reviews. `fetch` downloads each project's sdist (`sdist = true`: it ships the tests, examples,
scripts and configs that show how the code is run) or its wheel, and unpacks the `.py`, `.ipynb`,
`.gitignore` and configuration files (`.yaml`, `.json`, `.toml`, `.cfg`) into
`<corpus>/<name>-<version>/`; nothing is installed or imported. `run` runs amplint as a new user
would, with its defaults, in each project's folder: `amplint check . --format json --exit-zero
--no-cache`, and again with `--show-conditional` where amplint has that flag (recorded apart). Every
finding is saved to `<corpus>/last_run.json`; only those inside a project's package (`subdir`) are
sampled.

`report` reads that file back and measures **first-contact precision**: the default findings on the
projects the current review checks for the first time, read before any rule is changed because of
them (the current review names the amplint commit they are read on, and the report says so when a
run comes from another). A finding counts once per project, rule and flagged line text, however many
identical lines and copies across files it has. The sample ranks these by a hash of the review's
seed and their key and takes the lowest ranks (a finding stays sampled while others come and go);
each rule gets more of its first-contact findings, drawn the same way, up to `--per-rule`. Projects
checked in earlier reviews and the projects the rules were tuned on are reported apart, never in the
headline. Shares come with a 95% Wilson interval and a cluster bootstrap over projects. The report
goes to `docs/precision.md`; the reading aid (each sampled finding with its code around it and a
verdict stub, in parts of 15 to share among readers) to `<corpus>/reading_aid/`, never committed.
Editing verdicts needs only `report` again, not `run`.

A verdict is keyed by the project, the file's path inside it, the rule code and the stripped source
text of the flagged line (not the line number, so a verdict survives small shifts of the code):

    [[verdict]]
    project = "timm"
    path = "timm/models/vision_transformer.py"
    code = "AMP003"
    source = "attn = attn.softmax(dim=-1)"
    line = 93              # informational only: where it was when it was read
    verdict = "real"       # "real" | "worth a look" | "false"
    reason = "fp16 eager attention probabilities, no float32 softmax"

A reason that calls the problem unlikely or harmless makes the verdict count as "false".
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO / ".precision_corpus"
DEFAULT_MANIFEST = REPO / "benchmarks" / "precision_corpus.toml"
DEFAULT_VERDICTS = REPO / "benchmarks" / "precision_verdicts.toml"
DEFAULT_REPORT = REPO / "docs" / "precision.md"
# First-contact findings in the uniform sample, and of the projects checked before.
DEFAULT_SAMPLE = 120
DEFAULT_SAMPLE_EARLIER = 60
# A rule is on by default only with this many first-contact reads; each rule's first-contact findings
# are read up to this many (or all it has).
MIN_READS = 20
DEFAULT_CONTEXT = 15
RESAMPLES = 2000
AID_PART = 15

RUN_FILE = "last_run.json"
AID_DIR = "reading_aid"
CONFIG_FILE = "amplint.toml"
UNPACKED_MARKER = ".unpacked"
VERDICT_VALUES = ("real", "worth a look", "false")
UNREAD = "unread"
# A reason saying this about the problem makes the verdict "false", whatever it says.
DISMISSIVE = re.compile(r"\b(unlikely|harmless)\b", re.IGNORECASE)
# AMP008 flags a deprecated API: the numeric rules are all the others.
API_RULES = frozenset({"AMP008"})
# The core numeric rules issue 29 puts on by default: their first-contact reads are summed apart.
CORE_RULES = frozenset({"AMP001", "AMP002", "AMP003", "AMP004", "AMP005", "AMP007", "AMP013"})
# Each review's first-contact counts per project, written by `report`: the numbers README.md and
# docs/measured.md quote are rendered from it (benchmarks/precision_summary.py).
DEFAULT_SUMMARY = REPO / "benchmarks" / "precision_summary.json"
# Findings that say nothing about a hazard (a file amplint could not parse): counted, never sampled.
NOT_SAMPLED = frozenset({"AMP900"})
KEPT_SUFFIXES = (".py", ".ipynb")
# Configuration files name dtypes and precision (a YAML recipe, a DeepSpeed JSON); data files that
# happen to share a suffix are left out by size.
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini")
# Scripts and docs: a command line's `--fp16` or a README's usage turns on a flag amplint would
# otherwise take as off (`amplint.static.gates`), so they are kept from review 40 on.
TEXT_SUFFIXES = (".sh", ".bash", ".md", ".rst", ".txt")
MAX_CONFIG_BYTES = 1 << 20
# Directory names amplint skips by default; the line counts skip them too.
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", ".tox", ".eggs", "build", "dist", "__pycache__", "node_modules"}
)
_PROJECT_KEYS = frozenset({"name", "version", "subdir", "sdist", "first_checked", "tuned_on"})
_REVIEW_KEYS = frozenset({"id", "date", "seed", "commit"})
_VERDICT_KEYS = frozenset({"project", "path", "code", "source", "line", "verdict", "reason"})
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_REVIEW_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")

FIRST, EARLIER, TUNED = "first contact", "checked before", "tuned on"
GROUPS = (FIRST, EARLIER, TUNED)


class ReviewError(Exception):
    """A problem the user has to fix (a missing run, a bad verdict); printed without a traceback."""


# --- corpus ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    subdir: str | None = None
    sdist: bool = False
    # The review that first read (or reads) its findings, by its `key`; None: the current review.
    first_checked: str | None = None
    tuned_on: bool = False

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def package(self) -> str:
        return self.subdir or "."


@dataclass(frozen=True)
class Review:
    date: str | None  # None while its first-contact projects are being read
    seed: int
    # The amplint commit whose findings the first-contact projects are read on: a run from another
    # commit may carry rule changes made because of them, and is no longer first contact.
    commit: str | None = None
    # Names the review where its date cannot: two reviews on one date, or one not yet dated.
    id: str | None = None

    @property
    def key(self) -> str | None:
        """What a project's `first_checked` names this review by: its `id`, else its date."""
        return self.id or self.date


@dataclass(frozen=True)
class Corpus:
    projects: list[Project]
    reviews: list[Review]

    @property
    def current(self) -> Review:
        return self.reviews[-1]

    def group(self, project: Project) -> str:
        # The review that checks a project first reads it on first contact, whatever rules were
        # tuned on it after that read; the reviews after it report it apart.
        if project.first_checked is None or project.first_checked == self.current.key:
            return FIRST
        return TUNED if project.tuned_on else EARLIER

    def as_of(self, key: str) -> Corpus:
        """The corpus as it stood when the review named `key` was the current one."""
        keys = [review.key for review in self.reviews]
        if key not in keys:
            raise ReviewError(f"no [[review]] is named {key!r} (by its `id`, or its date where it has none)")
        return Corpus(self.projects, self.reviews[: keys.index(key) + 1])

    def since(self, key: str) -> list[Project]:
        """The projects that review (named by its `id` or date) or a later one checks first."""
        keys = [review.key for review in self.reviews]
        if key not in keys:
            raise ReviewError(f"no [[review]] is named {key!r} (by its `id`, or its date where it has none)")
        later = set(keys[keys.index(key) :])
        return [p for p in self.projects if p.first_checked in later or p.first_checked is None]

    def added_by(self, key: str) -> list[Project]:
        """The projects a review (named by its `id` or date) checks first, tuned-on ones included."""
        if key not in {review.key for review in self.reviews}:
            raise ReviewError(f"no [[review]] is named {key!r} (by its `id`, or its date where it has none)")
        current = key == self.current.key
        return [p for p in self.projects if p.first_checked == key or (current and p.first_checked is None)]


def load_corpus(path: Path) -> Corpus:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    reviews = _load_reviews(path, data.get("review"))
    keys = {review.key for review in reviews}
    entries = data.get("project")
    if not isinstance(entries, list) or not entries:
        raise ReviewError(f"{path}: expected a list of [[project]] tables")
    projects: list[Project] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries, 1):
        unknown = set(entry) - _PROJECT_KEYS
        if unknown:
            raise ReviewError(f"{path}: project {i}: unknown key(s) {sorted(unknown)}")
        name, version, subdir = entry.get("name"), entry.get("version"), entry.get("subdir")
        if not isinstance(name, str) or not isinstance(version, str) or not name or not version:
            raise ReviewError(f"{path}: project {i}: `name` and `version` must be non-empty strings")
        if subdir is not None and (not isinstance(subdir, str) or not _is_safe_relative(subdir)):
            raise ReviewError(f"{path}: project {name}: `subdir` must be a relative path inside the project")
        if not isinstance(entry.get("sdist"), bool):
            raise ReviewError(f"{path}: project {name}: `sdist` must be true or false")
        first = entry.get("first_checked")
        if first is not None and first not in keys:
            raise ReviewError(
                f"{path}: project {name}: `first_checked` must name a [[review]] by its `id`, or by its "
                f"date where it has none (got {first!r})"
            )
        tuned_on = bool(entry.get("tuned_on", False))
        if tuned_on and first is None:
            raise ReviewError(
                f"{path}: project {name}: a `tuned_on` project was checked before: set `first_checked`"
            )
        if name in seen:
            raise ReviewError(f"{path}: project {name} is listed twice")
        seen.add(name)
        projects.append(Project(name, version, subdir, entry["sdist"], first, tuned_on))
    return Corpus(projects, reviews)


def _load_reviews(path: Path, entries: object) -> list[Review]:
    """The [[review]] tables, oldest first: every one dated but the last, dates never falling, each
    named apart (by its `id`, else its date: two reviews on one date need ids), and the current
    review's seed new (a sample drawn again with an old seed is the old sample)."""
    if not isinstance(entries, list) or not entries:
        raise ReviewError(f"{path}: expected a list of [[review]] tables")
    reviews: list[Review] = []
    for i, entry in enumerate(entries, 1):
        unknown = set(entry) - _REVIEW_KEYS
        if unknown:
            raise ReviewError(f"{path}: review {i}: unknown key(s) {sorted(unknown)}")
        date, seed = entry.get("date"), entry.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise ReviewError(f"{path}: review {i}: `seed` must be an integer")
        if date is None and i < len(entries):
            raise ReviewError(f"{path}: review {i}: only the current (last) review may lack a `date`")
        if date is not None and (not isinstance(date, str) or not _DATE.fullmatch(date)):
            raise ReviewError(f"{path}: review {i}: `date` must be a YYYY-MM-DD string")
        if date is not None and reviews and reviews[-1].date is not None and date < reviews[-1].date:
            raise ReviewError(f"{path}: review {i}: dates must not fall from one review to the next")
        commit = entry.get("commit")
        if commit is not None and (
            not isinstance(commit, str) or not re.fullmatch(r"[0-9a-f]{7,40}", commit)
        ):
            raise ReviewError(f"{path}: review {i}: `commit` must be a git commit hash")
        review_id = entry.get("id")
        if review_id is not None and (not isinstance(review_id, str) or not _REVIEW_ID.fullmatch(review_id)):
            raise ReviewError(f"{path}: review {i}: `id` must be a string of letters, digits, '.', '_', '-'")
        review = Review(date, seed, commit, review_id)
        if review.key is not None and any(earlier.key == review.key for earlier in reviews):
            raise ReviewError(
                f"{path}: review {i}: {review.key!r} already names an earlier review (two reviews on "
                "one date need an `id` each, or the later one does)"
            )
        reviews.append(review)
    if any(review.seed == reviews[-1].seed for review in reviews[:-1]):
        raise ReviewError(f"{path}: the current review needs a seed no earlier review used")
    return reviews


def _is_safe_relative(path: str) -> bool:
    pure = PurePosixPath(path)
    return bool(path) and not pure.is_absolute() and ".." not in pure.parts


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _archive_dist(filename: str) -> tuple[str, str] | None:
    """(name, version) of a wheel or sdist file name; None for anything else."""
    if filename.endswith(".whl"):
        parts = filename[: -len(".whl")].split("-")
        return (parts[0], parts[1]) if len(parts) >= 5 else None
    for ext in (".tar.gz", ".tgz", ".tar.bz2", ".zip"):
        if filename.endswith(ext):
            name, _, version = filename[: -len(ext)].rpartition("-")
            return (name, version) if name else None
    return None


def find_archive(downloads: Path, project: Project) -> Path | None:
    """The downloaded archive of `project`: its sdist when `sdist` is set, else its wheel, else
    whichever of the two is there."""
    if not downloads.is_dir():
        return None
    matches = sorted(
        path
        for path in downloads.iterdir()
        if (dist := _archive_dist(path.name)) is not None
        and _normalize(dist[0]) == _normalize(project.name)
        and _normalize(dist[1]) == _normalize(project.version)
    )
    wheels = [path for path in matches if path.suffix == ".whl"]
    sdists = [path for path in matches if path.suffix != ".whl"]
    preferred = sdists if project.sdist else wheels
    return (preferred or matches)[0] if matches else None


def download(project: Project, downloads: Path) -> Path:
    """Download the project's sdist (`--no-binary` for it alone: its build backend may still come as
    a wheel), else what pip prefers: the wheel where there is one. An sdist that cannot be prepared
    (one whose metadata needs torch installed) falls back to the wheel."""
    downloads.mkdir(parents=True, exist_ok=True)
    spec = f"{project.name}=={project.version}"
    # The sources are read, never installed: a release for a newer Python than this one is fetched too.
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--ignore-requires-python"]
    base += ["--dest", str(downloads)]
    tries = [[spec]]
    if project.sdist:
        tries.insert(0, ["--no-binary", project.name, spec])
    output = ""
    for extra in tries:
        result = subprocess.run([*base, *extra], capture_output=True, text=True)
        archive = find_archive(downloads, project) if result.returncode == 0 else None
        if archive is not None:
            return archive
        output = result.stderr or result.stdout
    tail = "\n".join(output.strip().splitlines()[-5:])
    raise ReviewError(f"pip download {spec} failed:\n{tail}")


def is_sdist(archive: Path) -> bool:
    return archive.suffix != ".whl"


def _members(
    archive: Path, data: bytes | None = None, keep: Callable[[str], bool] = lambda name: True
) -> Iterable[tuple[str, bytes]]:
    """(path inside the project, content) of every file whose path `keep` accepts (read only then);
    an sdist loses its top folder. `data`: the archive's bytes, for one downloaded but not saved
    (its kind still comes from the name)."""
    source = io.BytesIO(data) if data is not None else archive
    if archive.suffix in (".whl", ".zip"):
        top = archive.suffix == ".zip"
        with zipfile.ZipFile(source) as zf:
            for info in zf.infolist():
                name = info.filename.split("/", 1)[-1] if top else info.filename
                if not info.is_dir() and keep(name):
                    yield name, zf.read(info)
    else:
        with tarfile.open(fileobj=source) if data is not None else tarfile.open(archive) as tf:
            for member in tf:
                name = member.name.split("/", 1)[-1]
                if member.isfile() and keep(name) and (handle := tf.extractfile(member)) is not None:
                    yield name, handle.read()


def archive_and_torch(corpus: Path, project: Project) -> tuple[Path | None, str]:
    """The downloaded archive of `project` in `corpus` and the torch requirement it declares."""
    archive = find_archive(corpus / "downloads", project)
    return archive, declared_torch(archive) if archive is not None else ""


def declared_torch(archive: Path) -> str:
    """The torch requirement the package declares (`Requires-Dist: torch>=1.13`, in a wheel's METADATA
    or an sdist's PKG-INFO), "" for none: what the project's own pyproject.toml tells amplint."""
    for name, content in _members(archive):
        if PurePosixPath(name).name in ("METADATA", "PKG-INFO") and name.count("/") <= 1:
            found = re.findall(
                r"(?m)^Requires-Dist:\s*(torch\b(?![-_.\w])[^;\n]*)", content.decode("utf-8", "replace")
            )
            if found:
                return found[0].strip()
    return ""


def kept(name: str, size: int) -> bool:
    """Whether `fetch` unpacks this file: source, notebooks, .gitignore, configuration files, scripts
    and docs."""
    if name.endswith(KEPT_SUFFIXES) or PurePosixPath(name).name == ".gitignore":
        return True
    return name.endswith(CONFIG_SUFFIXES + TEXT_SUFFIXES) and size <= MAX_CONFIG_BYTES


def unpack(archive: Path, target: Path) -> int:
    """Unpack the kept files of `archive` into `target`; the number of files written."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    written = 0
    for name, content in _members(archive):
        if not kept(name, len(content)) or not _is_safe_relative(name):
            continue
        path = partial / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        written += 1
    # amplint honours the .gitignore files of the repository around a checked folder, and this
    # repository ignores the corpus folder: an (empty) `.git` makes each project its own repository
    # root, as a real checkout of it would be.
    (partial / ".git").mkdir(exist_ok=True)
    (partial / UNPACKED_MARKER).write_text(archive.name + "\n", encoding="utf-8")
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return written


def fetch(projects: Sequence[Project], corpus: Path) -> None:
    downloads = corpus / "downloads"
    failures: list[str] = []
    for project in projects:
        target = corpus / project.folder
        if (target / UNPACKED_MARKER).is_file():
            print(f"{project.folder}: present")
            continue
        try:
            archive = find_archive(downloads, project)
            if archive is None or is_sdist(archive) != project.sdist:
                archive = download(project, downloads)
        except ReviewError as exc:
            print(f"{project.folder}: {exc}", file=sys.stderr)
            failures.append(project.folder)
            continue
        count = unpack(archive, target)
        files, lines = count_source(target)
        wanted = ""
        if is_sdist(archive) != project.sdist:
            wanted = " (no sdist could be prepared: the wheel)" if project.sdist else " (no wheel: the sdist)"
        print(
            f"{project.folder}: {archive.name}{wanted}, {count} files kept, {files} .py files, {lines:,} lines"
        )
    if failures:
        raise ReviewError(f"could not fetch: {', '.join(failures)}")


# --- run -----------------------------------------------------------------------------------------


def default_amplint() -> list[str]:
    """amplint's console script next to this interpreter, else on PATH, else `python -m amplint`."""
    beside = Path(sys.executable).parent / ("amplint.exe" if os.name == "nt" else "amplint")
    if beside.is_file():
        return [str(beside)]
    on_path = shutil.which("amplint")
    if on_path:
        return [on_path]
    # -P: the checked project is the working directory; it must not shadow amplint's imports.
    return [sys.executable, *(["-P"] if sys.version_info >= (3, 11) else []), "-m", "amplint"]


# Runs `amplint` from PYTHONPATH (a snapshot) with the working directory (the checked project) kept off
# sys.path, on every Python version (`-P` is 3.11+).
_RUN_SNAPSHOT = (
    "import runpy, sys; del sys.path[0]; runpy.run_module('amplint', run_name='__main__', alter_sys=True)"
)


def snapshot(rev: str, corpus: Path) -> tuple[str, Path]:
    """`amplint/` as committed at `rev`, unpacked into the corpus folder: (full commit, folder).

    Other people may be editing the working tree while a run takes minutes; a snapshot keeps every
    project of one run on the same code, and the commit names it.
    """
    commit = _git("rev-parse", "--verify", f"{rev}^{{commit}}")
    if not commit:
        raise ReviewError(f"{rev!r} is not a commit of this repository")
    folder = corpus / f"amplint-{commit[:12]}"
    if not (folder / "amplint" / "__init__.py").is_file():
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, "amplint"], capture_output=True
        )
        if archive.returncode != 0:
            raise ReviewError(f"git archive {commit} amplint failed: {archive.stderr.decode().strip()}")
        shutil.rmtree(folder, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tf:
            for member in tf:
                if member.isfile() and _is_safe_relative(member.name):
                    (folder / member.name).parent.mkdir(parents=True, exist_ok=True)
                    handle = tf.extractfile(member)
                    assert handle is not None
                    (folder / member.name).write_bytes(handle.read())
    return commit, folder


def snapshot_command(rev: str, corpus: Path) -> tuple[str, list[str], dict[str, str]]:
    """(full commit, command, environment) that run `amplint/` as committed at `rev` (`snapshot`)."""
    commit, folder = snapshot(rev, corpus)
    return commit, [sys.executable, "-c", _RUN_SNAPSHOT], {**os.environ, "PYTHONPATH": str(folder)}


def _display_amplint(command: Sequence[str]) -> str:
    """The amplint command without machine paths (it goes into the committed report)."""
    if len(command) == 1:
        return Path(command[0]).name.removesuffix(".exe")
    if command[-1] == _RUN_SNAPSHOT:
        return "python -m amplint"
    shown = ["python" if part == sys.executable else part for part in command]
    return shlex.join(part for part in shown if part != "-P")


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def count_source(folder: Path) -> tuple[int, int]:
    """(.py files, their lines) under `folder`, skipping the directories amplint skips."""
    files = lines = 0
    for directory, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(
            d for d in dirnames if d not in SKIPPED_DIRS and not d.endswith((".egg-info", ".dist-info"))
        )
        for filename in filenames:
            if filename.endswith(".py"):
                files += 1
                with open(os.path.join(directory, filename), "rb") as handle:
                    lines += sum(1 for _ in handle)
    return files, lines


def _source_line(root: Path, path: str, line: int, cell: int | None) -> str:
    """The stripped text of the flagged line ('' when it cannot be read)."""
    lines = _file_lines(root, path, cell)
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _file_lines(root: Path, path: str, cell: int | None) -> list[str]:
    try:
        text = (root / path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    if cell is None:
        return text.splitlines()
    try:
        cells = json.loads(text).get("cells", [])
        source = cells[cell - 1].get("source", "")
    except (ValueError, IndexError, AttributeError):
        return []
    return ("".join(source) if isinstance(source, list) else str(source)).splitlines()


def _relative(path: str) -> str:
    pure = PurePosixPath(path.replace("\\", "/"))
    return str(pure.relative_to(".")) if pure.parts[:1] == (".",) else str(pure)


def rule_codes(amplint: Sequence[str], env: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """The codes of the static rules (AMP0xx: the ones a check of code runs) and of the rules that
    are off by default (`default_on` false in `amplint rule --all`)."""
    listed = subprocess.run(
        [*amplint, "rule", "--all", "--format", "json"], capture_output=True, text=True, env=env, check=True
    )
    rules = json.loads(listed.stdout)
    static = [rule["code"] for rule in rules if re.fullmatch(r"AMP0\d\d", rule["code"])]
    return static, [rule["code"] for rule in rules if not rule.get("default_on", True)]


def supports_show_conditional(amplint: Sequence[str], env: dict[str, str] | None) -> bool:
    """Whether this amplint has `check --show-conditional` (findings whose half precision rests on
    nothing in the project); older ones have not, and their run is then the default run alone."""
    listed = subprocess.run([*amplint, "check", "--help"], capture_output=True, text=True, env=env)
    return "--show-conditional" in listed.stdout


def in_package(path: str, package: str) -> bool:
    return package == "." or PurePosixPath(path).is_relative_to(package)


def _check(
    project: Project,
    corpus: Path,
    amplint: Sequence[str],
    jobs: int | None,
    env: dict[str, str] | None,
    torch_version: str,
    extra: Sequence[str],
    output: Path,
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]] | None]:
    """One `amplint check .` in the project's folder; its findings, None when it failed."""
    root = corpus / project.folder
    output.unlink(missing_ok=True)
    command = [
        *amplint,
        "check",
        ".",
        "--format",
        "json",
        "--exit-zero",
        "--no-cache",
        "--output",
        str(output),
        *extra,
        *(["--jobs", str(jobs)] if jobs else []),
        *(["--torch-version", torch_version] if torch_version else []),
    ]
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    if result.returncode != 0 or not output.is_file():
        return result, None
    data = json.loads(output.read_text(encoding="utf-8"))
    findings = []
    for diagnostic in data["diagnostics"]:
        path = _relative(diagnostic["path"])
        cell = diagnostic.get("cell")
        findings.append(
            {
                "project": project.name,
                "path": path if cell is None else f"{path}:cell {cell}",
                "line": int(diagnostic["line"]),
                "column": int(diagnostic["column"]),
                "code": diagnostic["code"],
                "message": diagnostic["message"],
                "why": diagnostic.get("why") or [],
                "source": _source_line(root, path, int(diagnostic["line"]), cell),
                "in_package": in_package(path, project.package),
            }
        )
    return result, findings


def run_project(
    project: Project,
    corpus: Path,
    amplint: Sequence[str],
    jobs: int | None,
    env: dict[str, str] | None,
    conditional: bool,
) -> dict[str, Any]:
    """The project checked whole (its tests, examples and configs show how its code runs), with the
    defaults and, where `conditional`, again with `--show-conditional`."""
    root = corpus / project.folder
    if not (root / UNPACKED_MARKER).is_file():
        raise ReviewError(f"{project.folder} is not in {corpus}: run `fetch` first")
    if not (root / project.package).is_dir():
        raise ReviewError(f"{project.folder} has no folder {project.package!r} (see `subdir`)")
    raw = corpus / "raw"
    raw.mkdir(exist_ok=True)
    archive, torch_version = archive_and_torch(corpus, project)
    start = time.perf_counter()
    output = (raw / f"{project.folder}.json").resolve()
    result, findings = _check(project, corpus, amplint, jobs, env, torch_version, (), output)
    seconds = time.perf_counter() - start
    files, lines = count_source(root)
    package_files, package_lines = count_source(root / project.package)
    summary: dict[str, Any] = {
        "name": project.name,
        "version": project.version,
        "package": project.package,
        "archive": "sdist" if archive is not None and is_sdist(archive) else "wheel",
        "files": files,
        "lines": lines,
        "package_files": package_files,
        "package_lines": package_lines,
        "seconds": round(seconds, 2),
        "returncode": result.returncode,
        "torch": torch_version,
    }
    if findings is None:
        summary["error"] = _error(result)
        return {"project": summary, "findings": [], "conditional": []}
    extra: list[dict[str, Any]] = []
    if conditional:
        output = (raw / f"{project.folder}.conditional.json").resolve()
        shown, all_findings = _check(
            project, corpus, amplint, jobs, env, torch_version, ["--show-conditional"], output
        )
        if all_findings is None:
            summary["conditional_error"] = _error(shown)
        else:
            default = {_location(f) for f in findings}
            extra = [f for f in all_findings if _location(f) not in default]
    summary["findings"] = len(findings)
    summary["package_findings"] = sum(1 for f in findings if f["in_package"])
    summary["conditional"] = len(extra)
    summary["by_rule"] = dict(sorted(Counter(f["code"] for f in findings).items()))
    return {"project": summary, "findings": findings, "conditional": extra}


def _location(finding: dict[str, Any]) -> tuple[str, int, int, str]:
    return (finding["path"], finding["line"], finding["column"], finding["code"])


def _error(result: subprocess.CompletedProcess[str]) -> str:
    stderr = result.stderr.strip().splitlines()
    errors = [line for line in stderr if line.startswith("amplint: error")]
    return "\n".join(dict.fromkeys([*errors, *stderr[-1:]]))


def run(
    projects: Sequence[Project],
    corpus: Path,
    amplint: Sequence[str] | None,
    jobs: int | None,
    rev: str | None,
    command_line: str,
    partial: bool = False,
    run_name: str = RUN_FILE,
) -> dict[str, Any]:
    """Check every project; with `partial`, replace only these projects in the last run's results
    (which must come from the same amplint source). The findings go to `run_name` in `corpus`."""
    if not corpus.is_dir():
        raise ReviewError(f"{corpus} does not exist: run `fetch` first")
    env: dict[str, str] | None = None
    commit: str | None
    if rev is not None:
        commit, amplint, env = snapshot_command(rev, corpus)
        source = f"`amplint/` as committed at `{commit[:12]}` (unpacked with git archive)"
        changes: bool | None = False
    else:
        commit = _git("rev-parse", "HEAD")
        amplint = amplint or default_amplint()
        dirty = _git("status", "--porcelain", "--", "amplint")
        changes = bool(dirty) if dirty is not None else None
        source = "the working tree" + (" (with uncommitted changes under `amplint/`)" if changes else "")
    static, opt_in = rule_codes(amplint, env)
    conditional = supports_show_conditional(amplint, env)
    # The nearest configuration above every project that has none of its own: amplint's defaults,
    # not the `[tool.amplint]` table of a repository the corpus folder sits in.
    (corpus / CONFIG_FILE).write_text(
        "# amplint's defaults for the projects of the precision review, whatever repository the\n"
        "# corpus folder sits in: a new user's check.\n",
        encoding="utf-8",
    )
    version = subprocess.run([*amplint, "--version"], capture_output=True, text=True, env=env).stdout.strip()
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = datetime.now(timezone.utc)
    summaries: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    shown: list[dict[str, Any]] = []
    total_start = time.perf_counter()
    for project in projects:
        result = run_project(project, corpus, amplint, jobs, env, conditional)
        summary = result["project"]
        summaries.append(summary)
        findings.extend(result["findings"])
        shown.extend(result["conditional"])
        if "error" in summary:
            print(f"{project.folder}: amplint failed (exit {summary['returncode']}):\n{summary['error']}")
        else:
            rules = ", ".join(f"{code} {n}" for code, n in summary["by_rule"].items())
            more = f", {summary['conditional']} more with --show-conditional" if conditional else ""
            print(
                f"{project.folder}: {summary['findings']} findings ({summary['package_findings']} in "
                f"{project.package}) in {summary['files']} files{more} ({summary['seconds']:.1f} s)"
                f"{': ' + rules if rules else ''}"
            )
    wall = time.perf_counter() - total_start
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    if partial and (corpus / run_name).is_file():
        short = commit[:12] if commit else None
        return _merge_partial(
            corpus / run_name, short, rev is not None, source, summaries, findings, shown, command_line, wall
        )
    document = {
        "format": 2,
        "command": command_line,
        "started": started.isoformat(timespec="seconds"),
        "amplint": {
            "command": _display_amplint(amplint),
            "version": version,
            "commit": commit[:12] if commit else None,
            "source": source,
            "snapshot": rev is not None,
            "uncommitted_changes": changes,
        },
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "jobs": jobs,
        "load_average_1min": [round(load[0], 2) if load else None for load in (load_before, load_after)],
        "wall_seconds": round(wall, 1),
        "reruns": [],
        "opt_in": opt_in,
        "static_rules": static,
        "show_conditional": conditional,
        "projects": summaries,
        "findings": findings,
        "conditional": shown,
    }
    _save_run(corpus / run_name, document)
    return document


def _save_run(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    findings = document["findings"]
    by_rule = Counter(f["code"] for f in findings)
    print(
        f"\n{len(findings)} findings in {len(document['projects'])} projects, {document['wall_seconds']:.1f} s"
    )
    for code, count in sorted(by_rule.items()):
        print(f"  {code}  {count}")


def _merge_partial(
    path: Path,
    commit: str | None,
    snapshot: bool,
    source: str,
    summaries: list[dict[str, Any]],
    findings: list[dict[str, Any]],
    shown: list[dict[str, Any]],
    command_line: str,
    wall: float,
) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    before = document["amplint"]
    if (before.get("commit"), before.get("snapshot")) != (commit, snapshot) or document.get("format") != 2:
        raise ReviewError(
            f"the last run checked {document['amplint'].get('source')}, this one {source}: "
            "rerun every project (no --only) rather than mix them"
        )
    fresh = {summary["name"]: summary for summary in summaries}
    previous = {summary["name"]: summary for summary in document["projects"]}
    document["projects"] = [fresh.get(name, summary) for name, summary in previous.items()] + [
        summary for name, summary in fresh.items() if name not in previous
    ]
    document["findings"] = [f for f in document["findings"] if f["project"] not in fresh] + findings
    document["conditional"] = [f for f in document["conditional"] if f["project"] not in fresh] + shown
    document["wall_seconds"] = round(
        document["wall_seconds"]
        + wall
        - sum(previous[name]["seconds"] for name in fresh if name in previous),
        1,
    )
    document.setdefault("reruns", []).append(command_line)
    _save_run(path, document)
    return document


# --- verdicts, sample, report ------------------------------------------------------------------

Key = tuple[str, str, str, str]
UnitKey = tuple[str, str, str]


def finding_key(finding: dict[str, Any]) -> Key:
    """The key a verdict is filed under."""
    return (finding["project"], finding["path"], finding["code"], finding["source"])


def unit_key(finding: dict[str, Any]) -> UnitKey:
    """What is counted once: a rule on one line text of one project, however many identical lines
    and copies across files it has (a line that could not be read stands for itself)."""
    source = finding["source"] or f"{finding['path']}:{finding['line']}"
    return (finding["project"], finding["code"], source)


@dataclass(frozen=True)
class Unit:
    """One counted finding: its first occurrence and every occurrence of its key."""

    members: tuple[dict[str, Any], ...]

    @property
    def first(self) -> dict[str, Any]:
        return self.members[0]

    @property
    def key(self) -> UnitKey:
        return unit_key(self.first)

    @property
    def project(self) -> str:
        return str(self.first["project"])

    @property
    def code(self) -> str:
        return str(self.first["code"])


def dedup(findings: Iterable[dict[str, Any]]) -> list[Unit]:
    """The sampled findings (in a package, not unparsable files) counted once each, in a stable order."""
    groups: dict[UnitKey, list[dict[str, Any]]] = {}
    ordered = sorted(
        (f for f in findings if f["code"] not in NOT_SAMPLED and f.get("in_package", True)),
        key=lambda f: (f["project"], f["path"], f["line"], f["column"], f["code"]),
    )
    for finding in ordered:
        groups.setdefault(unit_key(finding), []).append(finding)
    return [Unit(tuple(members)) for members in groups.values()]


def conditional_units(run_data: dict[str, Any], projects: Iterable[str]) -> list[Unit]:
    """The findings `--show-conditional` adds in `projects`, counted once each. A line text a default
    finding of the same rule flags elsewhere in the project is counted once, as that default finding."""
    wanted = set(projects)
    shown = {u.key for u in dedup(run_data["findings"])}
    added = run_data.get("conditional", [])
    return dedup(f for f in added if f["project"] in wanted and unit_key(f) not in shown)


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str

    @property
    def counted(self) -> str:
        """The verdict as counted: a reason that calls the problem unlikely or harmless is "false"."""
        return "false" if DISMISSIVE.search(self.reason) else self.verdict


def load_verdicts(path: Path) -> dict[Key, Verdict]:
    if not path.is_file():
        return {}
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    entries = data.get("verdict", [])
    if not isinstance(entries, list):
        raise ReviewError(f"{path}: expected a list of [[verdict]] tables")
    verdicts: dict[Key, Verdict] = {}
    for i, entry in enumerate(entries, 1):
        where = f"{path}: verdict {i}"
        unknown = set(entry) - _VERDICT_KEYS
        if unknown:
            raise ReviewError(f"{where}: unknown key(s) {sorted(unknown)}")
        missing = [k for k in ("project", "path", "code", "source", "verdict", "reason") if k not in entry]
        if missing:
            raise ReviewError(f"{where}: missing {', '.join(missing)}")
        if entry["verdict"] not in VERDICT_VALUES:
            raise ReviewError(f"{where}: verdict must be one of {', '.join(map(repr, VERDICT_VALUES))}")
        reason = " ".join(str(entry["reason"]).split())
        if not reason:
            raise ReviewError(f"{where}: every verdict keeps its reason")
        key = (entry["project"], entry["path"], entry["code"], entry["source"].strip())
        verdict = Verdict(entry["verdict"], reason)
        if key in verdicts and verdicts[key] != verdict:
            raise ReviewError(f"{where}: contradicts an earlier verdict for the same finding")
        verdicts[key] = verdict
    return verdicts


def verdict_of(unit: Unit, verdicts: dict[Key, Verdict]) -> Verdict | None:
    """The verdict filed under the first of the unit's occurrences that has one."""
    for member in unit.members:
        verdict = verdicts.get(finding_key(member))
        if verdict is not None:
            return verdict
    return None


def _rank(key: UnitKey, seed: int) -> str:
    """A unit's place in the seeded random order: a hash of the seed and its key, so that adding or
    removing other findings never moves it."""
    return hashlib.sha256("\x1f".join([str(seed), *key]).encode("utf-8")).hexdigest()


def draw(units: Sequence[Unit], size: int, seed: int) -> list[Unit]:
    """A uniform sample: the first `size` units in the seeded random order (so any prefix of it is a
    uniform sample too, and a unit stays sampled while the units around it change)."""
    return sorted(units, key=lambda unit: _rank(unit.key, seed))[:size]


def supplement(units: Sequence[Unit], sample: Sequence[Unit], per_rule: int, seed: int) -> list[Unit]:
    """For each rule with fewer than `per_rule` units in `sample`, more of its units up to `per_rule`
    (or all it has), taken in the same seeded order."""
    taken = {unit.key for unit in sample}
    counts = Counter(unit.code for unit in sample)
    extra: list[Unit] = []
    for code in sorted({unit.code for unit in units}):
        rest = [u for u in draw([u for u in units if u.code == code], len(units), seed) if u.key not in taken]
        extra += rest[: max(per_rule - counts[code], 0)]
    return extra


def wilson(hits: int, read: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if read == 0:
        return (0.0, 1.0)
    z = 1.959964
    p = hits / read
    centre = (p + z * z / (2 * read)) / (1 + z * z / read)
    half = z * math.sqrt(p * (1 - p) / read + z * z / (4 * read * read)) / (1 + z * z / read)
    return (max(0.0, centre - half), min(1.0, centre + half))


def cluster_bootstrap(
    clusters: Sequence[tuple[int, int]], seed: int, resamples: int = RESAMPLES
) -> tuple[float, float]:
    """95% percentile interval of a pooled proportion when whole projects are resampled: each of
    `clusters` is (hits, read) of one project. Findings of one project share its code style and how
    it runs, so they are not independent; this interval widens when projects disagree."""
    clusters = [c for c in clusters if c[1] > 0]
    if not clusters:
        return (0.0, 1.0)
    rng = random.Random(seed)
    shares = []
    for _ in range(resamples):
        picked = rng.choices(clusters, k=len(clusters))
        shares.append(sum(h for h, _ in picked) / sum(r for _, r in picked))
    shares.sort()
    return (shares[math.floor(0.025 * (resamples - 1))], shares[math.ceil(0.975 * (resamples - 1))])


@dataclass(frozen=True)
class Read:
    """A sampled unit with its status: a verdict as counted, or "unread"."""

    unit: Unit
    status: str
    verdict: Verdict | None


def read_units(units: Sequence[Unit], verdicts: dict[Key, Verdict]) -> list[Read]:
    reads = []
    for unit in units:
        verdict = verdict_of(unit, verdicts)
        reads.append(Read(unit, verdict.counted if verdict else UNREAD, verdict))
    return reads


def share_cell(reads: Sequence[Read], useful: bool, seed: int) -> str:
    """'N% (a-b; c-d)': the share of read units that are real (or useful: real or worth a look), its
    Wilson interval and its cluster bootstrap over projects."""
    wanted = ("real", "worth a look") if useful else ("real",)
    per_project: dict[str, list[int]] = {}
    for read in reads:
        if read.status != UNREAD:
            counts = per_project.setdefault(read.unit.project, [0, 0])
            counts[0] += read.status in wanted
            counts[1] += 1
    hits = sum(c[0] for c in per_project.values())
    total = sum(c[1] for c in per_project.values())
    if total == 0:
        return "-"
    low, high = wilson(hits, total)
    b_low, b_high = cluster_bootstrap([(h, r) for h, r in per_project.values()], seed)
    return (
        f"{100 * hits / total:.0f}% ({100 * low:.0f}-{100 * high:.0f}; {100 * b_low:.0f}-{100 * b_high:.0f})"
    )


def _counts(reads: Sequence[Read]) -> Counter[str]:
    return Counter(read.status for read in reads)


def _share_row(label: str, units: int, reads: Sequence[Read], seed: int, more: Sequence[str] = ()) -> str:
    tally = _counts(reads)
    projects = len({read.unit.project for read in reads if read.status != UNREAD})
    cells = [
        label,
        str(units),
        str(len(reads)),
        str(sum(tally[v] for v in VERDICT_VALUES)),
        str(projects),
        str(tally["real"]),
        str(tally["worth a look"]),
        str(tally["false"]),
        str(tally[UNREAD]),
        share_cell(reads, False, seed),
        share_cell(reads, True, seed),
        *more,
    ]
    return "| " + " | ".join(cells) + " |"


SHARE_HEADER = "| {label} | Findings | Sampled | Read | Projects read | Real | Worth a look | False | Unread | Real | Useful |"
SHARE_RULE = "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _shown_path(path: Path) -> str:
    """A path for the committed report: relative to the repository, never a machine path."""
    try:
        relative = Path(os.path.relpath(path.resolve(), REPO)).as_posix()
    except ValueError:  # another drive
        relative = ".."
    return f"<outside the repository>/{path.name}" if relative.startswith("..") else relative


@dataclass(frozen=True)
class Measured:
    """What `report` measured: the units and sampled reads of each group of projects."""

    units: dict[str, list[Unit]]
    sample: dict[str, list[Read]]
    # First contact: the numeric rules' findings of the sample and, past them up to --sample-numeric,
    # their next ones in the same order (so `numeric` is a uniform sample of the numeric findings).
    numeric: list[Read]
    more_numeric: list[Read]
    extra: list[Read]  # the per-rule supplement, first-contact projects only
    labels: dict[UnitKey, str]  # sample row labels: F1.., N1.., S1.., E1.., T1.., C1..
    # First contact: a uniform sample of the findings amplint hides by default (`--show-conditional`),
    # read to learn what the default leaves out; in no share of the default findings.
    hidden: list[Read] = field(default_factory=list)

    @property
    def first_reads(self) -> list[Read]:
        """Every first-contact read, each once: per rule, a prefix of the rule's seeded order."""
        return [*self.sample[FIRST], *self.more_numeric, *self.extra]


def measure(
    run_data: dict[str, Any],
    corpus: Corpus,
    verdicts: dict[Key, Verdict],
    sample_size: int,
    earlier_size: int,
    per_rule: int,
    seed: int,
    numeric_size: int = 0,
    conditional_size: int = 0,
) -> Measured:
    groups = {p.name: corpus.group(p) for p in corpus.projects}
    units = dedup(f for f in run_data["findings"] if f["project"] in groups)
    by_group = {group: [u for u in units if groups[u.project] == group] for group in GROUPS}
    sizes = {FIRST: sample_size, EARLIER: earlier_size, TUNED: earlier_size}
    sample = {group: read_units(draw(by_group[group], sizes[group], seed), verdicts) for group in GROUPS}
    in_sample = [r for r in sample[FIRST] if r.unit.code not in API_RULES]
    numeric_units = [u for u in by_group[FIRST] if u.code not in API_RULES]
    # The seeded order makes the sample's numeric findings the first ones of the numeric order.
    numeric = in_sample + read_units(draw(numeric_units, numeric_size, seed)[len(in_sample) :], verdicts)
    more = numeric[len(in_sample) :]
    taken = [r.unit for r in (*sample[FIRST], *more)]
    extra = read_units(supplement(by_group[FIRST], taken, per_rule, seed), verdicts)
    conditional = conditional_units(run_data, (name for name, group in groups.items() if group == FIRST))
    hidden = read_units(draw(conditional, conditional_size, seed), verdicts)
    labels: dict[UnitKey, str] = {}
    prefixed = (
        ("F", sample[FIRST]),
        ("N", more),
        ("S", extra),
        ("E", sample[EARLIER]),
        ("T", sample[TUNED]),
        ("C", hidden),
    )
    for prefix, reads in prefixed:
        for i, read in enumerate(reads, 1):
            labels[read.unit.key] = f"{prefix}{i}"
    return Measured(by_group, sample, numeric, more, extra, labels, hidden)


def first_contact_warning(review: Review, amplint: dict[str, Any]) -> str:
    """Why this run's findings may not be first contact ("" when they are the review's)."""
    commit = amplint.get("commit") or ""
    if review.commit is None:
        return (
            "The current review names no amplint commit: set its `commit` to this run's "
            f"(`{commit or 'unknown'}`) when the reading starts."
        )
    if not commit or not (commit.startswith(review.commit) or review.commit.startswith(commit)):
        return (
            f"Not first contact: these findings come from amplint `{commit or 'unknown'}`, the review "
            f"reads those of `{review.commit}`."
        )
    if amplint.get("uncommitted_changes"):
        return f"Not first contact: amplint ran with uncommitted changes on top of `{commit}`."
    return ""


def render_report(
    run_data: dict[str, Any],
    corpus: Corpus,
    measured: Measured,
    command: str,
    stale: int,
    seed: int,
    per_rule: int,
    dismissed: int = 0,
) -> str:
    findings = run_data["findings"]
    projects = run_data["projects"]
    manifest = {p.name: p for p in corpus.projects}
    meta = run_data["amplint"]
    current = corpus.current
    review_no = len(corpus.reviews)
    first_names = sorted(p for p, project in manifest.items() if corpus.group(project) == FIRST)
    out: list[str] = []
    add = out.append
    add("# Precision on public PyTorch projects")
    add("")
    add(
        "How many of amplint's findings on code nobody here wrote are worth acting on, as a new user "
        "sees them: each project is checked whole, with amplint's defaults, and a uniform sample of "
        "the findings in its package is read by hand against the code around it. **First contact** "
        "is the headline: the projects this review checks for the first time, read before any rule "
        "is changed because of them. A verdict is **real** (a genuine mixed-precision hazard a "
        "maintainer would want fixed), **worth a look** (plausible, depends on how the code is "
        "called) or **false** (not a hazard; a reason that calls the problem unlikely or harmless "
        "counts as false). Real = real / read, useful = (real + worth a look) / read; each share "
        "has two 95% intervals: Wilson's (findings independent) and a cluster bootstrap that "
        f"resamples whole projects ({RESAMPLES} resamples, seed {seed}). A finding counts once per "
        "project, rule and flagged line text, however many identical lines or copies it has."
    )
    add("")
    when = current.date or "not yet read"
    add(f"## First contact: review {review_no} ({when}), projects: {len(first_names)}")
    add("")
    warning = first_contact_warning(current, meta)
    if warning:
        add(f"**{warning}**")
        add("")
    first = measured.sample[FIRST]
    first_units = measured.units[FIRST]
    add(SHARE_HEADER.format(label="Rules"))
    add(SHARE_RULE)
    add(
        _share_row(
            "numeric rules (all but AMP008)",
            sum(1 for u in first_units if u.code not in API_RULES),
            measured.numeric,
            seed,
        )
    )
    add(_share_row("all default rules", len(first_units), first, seed))
    add("")
    add(
        f"Projects: {', '.join(first_names) or 'none'}. Findings: counted once each, in the projects' "
        "packages. The all-rules row reads the uniform sample; the numeric row reads its findings of "
        "the numeric rules and, up to `--sample-numeric`, the next numeric findings in the same "
        "seeded order (rows N), a uniform sample of the numeric findings. Intervals: (Wilson; by "
        "project)."
    )
    add("")
    add("## Projects checked in earlier reviews and projects the rules were tuned on")
    add("")
    add(
        "Apart from the headline: findings on projects that were read before (the rules may have "
        "changed because of them), and on the projects marked `tuned_on` (rules were developed "
        "against them: real-code excerpts in the tests, rules changed for their findings)."
    )
    add("")
    add(SHARE_HEADER.format(label="Projects"))
    add(SHARE_RULE)
    for group in (EARLIER, TUNED):
        reads = measured.sample[group]
        add(
            _share_row(
                f"{group}, numeric rules",
                sum(1 for u in measured.units[group] if u.code not in API_RULES),
                [r for r in reads if r.unit.code not in API_RULES],
                seed,
            )
        )
        add(_share_row(f"{group}, all default rules", len(measured.units[group]), reads, seed))
    add("")
    add(f"## Per rule, first contact (on by default only with at least {MIN_READS} reads)")
    add("")
    add(SHARE_HEADER.format(label="Rule") + f" {MIN_READS}+ reads |")
    add(SHARE_RULE + " --- |")
    by_rule: dict[str, list[Read]] = {}
    for read in measured.first_reads:
        by_rule.setdefault(read.unit.code, []).append(read)
    opt_in = set(run_data.get("opt_in", ()))
    codes = sorted(
        {u.code for u in first_units} | {c for c in run_data.get("static_rules", ()) if c not in opt_in}
    )
    for code in codes:
        reads = by_rule.get(code, [])
        read_count = sum(1 for r in reads if r.status != UNREAD)
        units = sum(1 for u in first_units if u.code == code)
        add(_share_row(code, units, reads, seed, ["yes" if read_count >= MIN_READS else "no"]))
    add("")
    add(
        f"A rule's row reads its findings in the uniform sample and, where that holds fewer than "
        f"{per_rule}, more of its first-contact findings drawn uniformly from the rule's own (up to "
        f"{per_rule}, or all it has). A rule that found nothing reads `-`."
    )
    add("")
    if run_data.get("show_conditional"):
        add("## Conditional findings (`--show-conditional`)")
        add("")
        add(
            "Findings amplint hides by default because their half precision rests on nothing in the "
            "project; recorded apart, in no share above."
        )
        add("")
        add("| Rule | " + " | ".join(GROUPS) + " |")
        add("| --- |" + " ---: |" * len(GROUPS))
        groups = {p.name: corpus.group(p) for p in corpus.projects}
        shown = conditional_units(run_data, groups)
        conditional_first = [u for u in shown if groups[u.project] == FIRST]
        for code in sorted({u.code for u in shown}):
            cells = [str(sum(1 for u in shown if u.code == code and groups[u.project] == g)) for g in GROUPS]
            add(f"| {code} | " + " | ".join(cells) + " |")
        add("")
        if measured.hidden:
            add(
                "A uniform sample of the first-contact ones (`--sample-conditional`) was read as the "
                "default findings are, to learn what the default leaves out (rows C below):"
            )
            add("")
            add(SHARE_HEADER.format(label="Rules"))
            add(SHARE_RULE)
            add(_share_row("conditional, first contact", len(conditional_first), measured.hidden, seed))
            add("")
    add("## How this page was made")
    add("")
    add("```bash")
    add("python benchmarks/precision_review.py fetch")
    add(run_data.get("command") or "python benchmarks/precision_review.py run")
    for rerun in run_data.get("reruns", []):
        add(rerun + "   # replaces these projects' results")
    add(command)
    add("```")
    add("")
    source = meta.get("source") or f"commit `{meta.get('commit')}`"
    loads = [x for x in run_data.get("load_average_1min") or [] if x is not None]
    load = f" (1-minute load average {loads[0]} at the start, {loads[-1]} at the end)" if loads else ""
    conditional = (
        ", and again with `--show-conditional`"
        if run_data.get("show_conditional")
        else " (this amplint has no `--show-conditional`)"
    )
    add(
        f"`fetch` downloads and unpacks the pinned projects (the sdist where the corpus says so: it "
        f"ships the tests, examples and configs that show how the code runs), `run` checks each in "
        f"its folder with `{meta['command']} check . --format json --exit-zero --no-cache`"
        f"{conditional}, `report` writes this page. Findings from {source}, "
        f"{meta.get('version') or 'amplint'}; Python {run_data['python']}, {run_data['cpus']} CPUs"
        f"{load}, run started {run_data['started']}; the projects one after another, "
        f"{run_data['wall_seconds']:.1f} s in all. Verdicts from `benchmarks/precision_verdicts.toml`; "
        f"seed {seed} (review {review_no}'s, `benchmarks/precision_corpus.toml`): the findings ranked "
        "by a hash of the seed and their key, the lowest ranks taken, so the same findings give the "
        "same sample, a finding stays sampled while others come and go, and the first *k* rows of a "
        "sample table are themselves a uniform sample."
    )
    add("")
    add("## Corpus")
    add("")
    add(
        "| Project | Version | Archive | First checked | Package | Files | Lines | Findings | In package "
        "| Counted once | Seconds | By rule |"
    )
    add("| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    counted = Counter(u.project for units in measured.units.values() for u in units)
    for p in projects:
        project = manifest.get(p["name"])
        mark = " †" if project is not None and project.tuned_on else ""
        checked = (project.first_checked if project else None) or "this review"
        lead = f"| {p['name']}{mark} | {p['version']} | {p['archive']} | {checked} | `{p['package']}` "
        if "error" in p:
            add(
                f"{lead}| {p['files']:,} | {p['lines']:,} | failed | | | {p['seconds']:.1f} "
                f"| exit {p['returncode']} |"
            )
            continue
        rules = ", ".join(f"{code[3:]}: {n}" for code, n in p["by_rule"].items())
        add(
            f"{lead}| {p['files']:,} | {p['lines']:,} | {p['findings']:,} | {p['package_findings']:,} "
            f"| {counted[p['name']]:,} | {p['seconds']:.1f} | {rules} |"
        )
    total_files = sum(p["files"] for p in projects)
    total_lines = sum(p["lines"] for p in projects)
    total_seconds = sum(p["seconds"] for p in projects)
    add(
        f"| **{len(projects)} projects** | | | | | **{total_files:,}** | **{total_lines:,}** "
        f"| **{len(findings):,}** | **{sum(p.get('package_findings', 0) for p in projects):,}** "
        f"| **{sum(counted.values()):,}** | **{total_seconds:.1f}** | |"
    )
    add("")
    add(
        "Files and lines count the `.py` files of the whole unpacked project; findings are all of the "
        "check's, in package those under the package folder (the ones sampled), counted once after "
        "merging identical lines and copies. † marks the projects the rules were tuned on. "
        '"By rule" gives `AMP`-less codes.'
    )
    unparsable = sum(1 for f in findings if f["code"] in NOT_SAMPLED)
    if unparsable:
        add(
            f"{unparsable} findings are {'/'.join(sorted(NOT_SAMPLED))} (unparsable files): counted, not sampled."
        )
    add("")
    notes: list[str] = []
    for p in projects:
        if "error" in p:
            message = "; ".join(line.strip() for line in p["error"].splitlines() if line.strip())
            notes.append(
                f"amplint failed on {p['name']} {p['version']} (exit {p['returncode']}: {_md(message)}), so "
                "none of its findings are counted."
            )
        if "conditional_error" in p:
            notes.append(
                f"The `--show-conditional` run failed on {p['name']}: {_md(p['conditional_error'])}."
            )
    if dismissed:
        notes.append(
            f"{dismissed} sampled verdicts are marked real or worth a look but their reason calls the "
            'problem unlikely or harmless: they count as false (their rows show "false").'
        )
    if stale:
        notes.append(
            f"{stale} verdicts of `benchmarks/precision_verdicts.toml` match no finding of this run (the "
            "code or the rule changed); they are kept for reruns and count nowhere."
        )
    notes.append(
        "Seconds are wall time on the machine named above, with whatever else ran on it (see the load "
        "average): a reproducibility record, not a benchmark; `benchmarks/static_speed.py` measures speed."
    )
    add("## Notes")
    add("")
    for note in notes:
        add(f"- {note}")
    add("")
    tables = (
        ("Sample: first contact", measured.sample[FIRST]),
        ("More numeric findings: first contact (up to `--sample-numeric`)", measured.more_numeric),
        (
            f"Per-rule supplement: first contact (rules with fewer than {per_rule} in the sample)",
            measured.extra,
        ),
        ("Sample: checked before", measured.sample[EARLIER]),
        ("Sample: tuned on", measured.sample[TUNED]),
        ("Sample: conditional findings, first contact (hidden by default)", measured.hidden),
    )
    for title, reads in tables:
        if not reads:
            continue
        add(f"## {title}")
        add("")
        add("| # | Project | File:line | Rule | Copies | Verdict | Reason |")
        add("| --- | --- | --- | --- | ---: | --- | --- |")
        for read in reads:
            f = read.unit.first
            reason = read.verdict.reason if read.verdict else ""
            add(
                f"| {measured.labels[read.unit.key]} | {f['project']} | `{_md(f['path'])}:{f['line']}` | "
                f"{f['code']} | {len(read.unit.members)} | {read.status} | {_md(reason)} |"
            )
        add("")
    return "\n".join(out)


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def render_finding(
    label: str, read: Read, group: str, version: str, lines: Sequence[str], context: int
) -> str:
    """One self-contained block of the reading aid: where, what amplint says and why, the code
    around it, and the verdict stub to paste."""
    f = read.unit.first
    line = f["line"]
    out = [f"## {label}: {f['project']} {version}, `{f['path']}:{line}`, {f['code']}", ""]
    out.append(f"- project: {f['project']} {version} ({group})")
    out.append(f"- where: `{f['path']}`, line {line}, column {f['column']}")
    others = [f"`{m['path']}:{m['line']}`" for m in read.unit.members[1:]]
    if others:
        out.append(f"- the same line also at: {', '.join(others)} (counted once)")
    out.append(f"- rule: {f['code']}")
    out.append(f"- message: {f['message']}")
    for step in f.get("why") or []:
        out.append(f"- why: line {step.get('line')}:{step.get('column')}: {step.get('message')}")
    if read.verdict is not None:
        out.append(f"- verdict so far: {read.status}: {read.verdict.reason}")
    out.append("")
    first, last = max(1, line - context), min(len(lines), line + context)
    width = len(str(last))
    out.append("```python")
    for n in range(first, last + 1):
        out.append(f"{'>' if n == line else ' '}{n:>{width}} | {lines[n - 1]}")
    out.append("```")
    out.append("")
    out.append("```toml")
    out.append(f"# {label}")
    out.append("[[verdict]]")
    for key in ("project", "path", "code", "source"):
        out.append(f"{key} = {_toml_string(f[key])}")
    out.append(f"line = {line}")
    out.append(f"verdict = {_toml_string(read.verdict.verdict if read.verdict else '')}")
    out.append(f"reason = {_toml_string(read.verdict.reason if read.verdict else '')}")
    out.append("```")
    out.append("")
    return "\n".join(out)


def write_reading_aid(
    run_data: dict[str, Any], corpus: Corpus, measured: Measured, corpus_dir: Path, context: int
) -> list[Path]:
    """The sampled findings, first contact first, in parts of AID_PART blocks (one reader each), with
    an index; the folder is rewritten."""
    folder = corpus_dir / AID_DIR
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    manifest = {p.name: p for p in corpus.projects}
    versions = {p["name"]: p["version"] for p in run_data["projects"]}
    ordered = [
        *((FIRST, r) for r in measured.first_reads),
        *((EARLIER, r) for r in measured.sample[EARLIER]),
        *((TUNED, r) for r in measured.sample[TUNED]),
        *((FIRST, r) for r in measured.hidden),
    ]
    parts: list[Path] = []
    index = [
        "# Reading aid for the precision review",
        "",
        f"Each part holds up to {AID_PART} sampled findings with {context} lines of code either side "
        '(`>` marks the flagged line) and a verdict stub: fill in `verdict` ("real", "worth a '
        'look" or "false") and `reason`, and paste it into `benchmarks/precision_verdicts.toml`. A '
        "reason that calls the problem unlikely or harmless counts as false. Not committed.",
        "",
    ]
    for start in range(0, len(ordered), AID_PART):
        chunk = ordered[start : start + AID_PART]
        path = folder / f"part-{start // AID_PART + 1:02d}.md"
        blocks = []
        for group, read in chunk:
            f = read.unit.first
            file_path, _, cell_part = f["path"].partition(":cell ")
            project = manifest[f["project"]]
            lines = _file_lines(corpus_dir / project.folder, file_path, int(cell_part) if cell_part else None)
            label = measured.labels[read.unit.key]
            blocks.append(render_finding(label, read, group, versions.get(f["project"], ""), lines, context))
        path.write_text("\n".join(blocks), encoding="utf-8")
        parts.append(path)
        labels = [measured.labels[read.unit.key] for _, read in chunk]
        unread = sum(1 for _, read in chunk if read.status == UNREAD)
        index.append(f"- `{path.name}`: {labels[0]}-{labels[-1]} ({len(chunk)} findings, {unread} unread)")
    (folder / "README.md").write_text("\n".join(index) + "\n", encoding="utf-8")
    return parts


def _verdict_counts(reads: Sequence[Read], key: Callable[[Unit], str]) -> dict[str, list[int]]:
    """Real, worth a look and false verdicts per `key` of the read finding, in the order of the reads
    (per project, the order the cluster bootstrap draws from)."""
    counts: dict[str, list[int]] = {}
    for read in reads:
        if read.status in VERDICT_VALUES:
            counts.setdefault(key(read.unit), [0, 0, 0])[VERDICT_VALUES.index(read.status)] += 1
    return counts


def _per_project(reads: Sequence[Read]) -> dict[str, list[int]]:
    return _verdict_counts(reads, lambda unit: unit.project)


def summary(measured: Measured, corpus: Corpus, seed: int) -> dict[str, Any]:
    """The current review's first-contact counts, per project, for benchmarks/precision_summary.json."""
    first, units = measured.sample[FIRST], measured.units[FIRST]
    return {
        "order": len(corpus.reviews),  # the review's number: 1 for the corpus's first
        "date": corpus.current.date,
        "commit": corpus.current.commit,
        "seed": seed,
        "projects": sum(1 for p in corpus.projects if corpus.group(p) == FIRST),
        "findings": len(units),
        "numeric_findings": sum(1 for u in units if u.code not in API_RULES),
        "all": _per_project(first),
        "numeric": _per_project(measured.numeric),
        "api": _per_project([r for r in first if r.unit.code in API_RULES]),
        "core": _per_project([r for r in measured.first_reads if r.unit.code in CORE_RULES]),
        "rules": dict(sorted(_verdict_counts(measured.first_reads, lambda unit: unit.code).items())),
    }


def report(
    corpus_dir: Path,
    corpus: Corpus,
    verdicts_path: Path,
    output: Path,
    sample_size: int,
    earlier_size: int,
    seed: int,
    context: int,
    command: str,
    per_rule: int = MIN_READS,
    numeric_size: int = 0,
    run_name: str = RUN_FILE,
    summary_path: Path | None = None,
    conditional_size: int = 0,
) -> None:
    run_file = corpus_dir / run_name
    if not run_file.is_file():
        raise ReviewError(f"{run_file} does not exist: run `run` first")
    run_data = json.loads(run_file.read_text(encoding="utf-8"))
    if run_data.get("format") != 2:
        raise ReviewError(f"{run_file} comes from an older version of this script: run `run` again")
    verdicts = load_verdicts(verdicts_path)
    measured = measure(
        run_data, corpus, verdicts, sample_size, earlier_size, per_rule, seed, numeric_size, conditional_size
    )
    keys = {finding_key(f) for f in run_data["findings"]}
    stale = sum(1 for key in verdicts if key not in keys)
    sampled = [*measured.first_reads, *measured.sample[EARLIER], *measured.sample[TUNED]]
    dismissed = sum(1 for r in sampled if r.verdict is not None and r.verdict.counted != r.verdict.verdict)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        render_report(run_data, corpus, measured, command, stale, seed, per_rule, dismissed) + "\n",
        encoding="utf-8",
    )
    # The counts README.md quotes are the review's first contact: a run of another amplint (a
    # re-check after changes made because of it) is reported, never kept.
    other = first_contact_warning(corpus.current, run_data["amplint"]).startswith("Not first contact")
    if summary_path is not None and corpus.current.key is not None and not other:
        kept = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
        kept.setdefault("reviews", {})[corpus.current.key] = summary(measured, corpus, seed)
        kept["reviews"] = dict(sorted(kept["reviews"].items(), key=lambda item: item[1]["order"]))
        summary_path.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")
    parts = write_reading_aid(run_data, corpus, measured, corpus_dir, context)
    for group in GROUPS:
        tally = _counts(measured.sample[group])
        print(
            f"{group}: {len(measured.units[group])} findings counted once, sample of "
            f"{len(measured.sample[group])}: {tally['real']} real, {tally['worth a look']} worth a look, "
            f"{tally['false']} false, {tally[UNREAD]} unread"
        )
    for label, reads in (
        ("numeric findings past the sample", measured.more_numeric),
        ("per-rule supplement", measured.extra),
    ):
        unread = sum(1 for r in reads if r.status == UNREAD)
        print(f"first contact, {label}: {len(reads)}, {unread} unread")
    print(f"wrote {output} and {len(parts)} reading-aid parts in {corpus_dir / AID_DIR}")


# --- command line --------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Precision review of amplint on pinned public PyTorch projects.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("step", choices=("fetch", "run", "report", "all"))
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="download/unpack folder")
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST, help="the pinned projects")
    parser.add_argument("--verdicts", type=Path, default=DEFAULT_VERDICTS, help="hand-written verdicts")
    parser.add_argument("--output", "-o", type=Path, default=DEFAULT_REPORT, help="the Markdown report")
    parser.add_argument(
        "--sample", type=int, default=DEFAULT_SAMPLE, help="first-contact findings in the uniform sample"
    )
    parser.add_argument(
        "--sample-numeric",
        type=int,
        default=0,
        help="first-contact findings of the numeric rules read at least (the sample's, then more)",
    )
    parser.add_argument(
        "--sample-earlier",
        type=int,
        default=DEFAULT_SAMPLE_EARLIER,
        help="findings sampled from the projects checked before, and from the tuned-on ones",
    )
    parser.add_argument(
        "--sample-conditional",
        type=int,
        default=0,
        help="first-contact conditional findings (hidden by default) read, apart from every share",
    )
    parser.add_argument("--seed", type=int, help="the sample's random seed (default: the current review's)")
    parser.add_argument(
        "--per-rule",
        type=int,
        default=MIN_READS,
        help="first-contact findings read per rule at least (or all)",
    )
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="reading-aid lines either side")
    parser.add_argument("--only", help="comma-separated project names (fetch/run); default: all")
    parser.add_argument(
        "--review",
        help="only the projects this review (its `id`, or its date) added (fetch/run); report: measure "
        "that review as it stood, from --run-file",
    )
    parser.add_argument(
        "--run-file", default=RUN_FILE, help="the run's findings, in the corpus folder (run, report)"
    )
    parser.add_argument(
        "--summary",
        type=Path,
        default=DEFAULT_SUMMARY,
        help="where report keeps each review's first-contact counts",
    )
    parser.add_argument("--amplint", help="the amplint command (default: the one beside this Python)")
    parser.add_argument("--jobs", type=int, help="passed to `amplint check --jobs`")
    parser.add_argument(
        "--rev",
        help="run amplint as committed at this git revision (a snapshot in the corpus folder) instead "
        "of the working tree",
    )
    return parser


def display_command(args: argparse.Namespace, step: str, seed: int | None = None) -> str:
    """The command of `step` as typed from the repository root, without machine paths."""
    parts = ["python", "benchmarks/precision_review.py", step]
    defaults = {
        "corpus": DEFAULT_CORPUS,
        "manifest": DEFAULT_MANIFEST,
        "verdicts": DEFAULT_VERDICTS,
        "output": DEFAULT_REPORT,
    }
    wanted = {
        "fetch": ("corpus", "manifest"),
        "run": ("corpus", "manifest"),
        "report": ("corpus", "manifest", "verdicts", "output"),
    }[step]
    for name in wanted:
        value: Path = getattr(args, name)
        if value.resolve() != defaults[name]:
            parts += [f"--{name}", _shown_path(value)]
    if step in ("fetch", "run") and args.only:
        parts += ["--only", args.only]
    if step in ("fetch", "run") and args.review:
        parts += ["--review", args.review]
    if step == "run" and args.run_file != RUN_FILE:
        parts += ["--run-file", args.run_file]
    if step == "run":
        if args.rev:
            parts += ["--rev", args.rev]
        if args.amplint:
            parts += ["--amplint", args.amplint]
        if args.jobs:
            parts += ["--jobs", str(args.jobs)]
    if step == "report":
        if args.review:
            parts += ["--review", args.review]
        if args.run_file != RUN_FILE:
            parts += ["--run-file", args.run_file]
        parts += ["--sample", str(args.sample), "--sample-numeric", str(args.sample_numeric)]
        parts += ["--sample-earlier", str(args.sample_earlier)]
        parts += ["--seed", str(seed), "--per-rule", str(args.per_rule)]
        if args.sample_conditional:
            parts += ["--sample-conditional", str(args.sample_conditional)]
    return shlex.join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    sizes = (args.sample, args.sample_numeric, args.sample_earlier, args.sample_conditional)
    if min(*sizes, args.context, args.per_rule) < 0:
        print(
            "--sample, --sample-numeric, --sample-earlier, --sample-conditional, --per-rule and "
            "--context must be >= 0",
            file=sys.stderr,
        )
        return 2
    corpus_dir: Path = args.corpus.resolve()
    try:
        corpus = load_corpus(args.manifest)
        projects = corpus.projects
        if args.only:
            wanted = {name.strip() for name in args.only.split(",") if name.strip()}
            unknown = wanted - {p.name for p in projects}
            if unknown:
                raise ReviewError(f"not in the corpus: {', '.join(sorted(unknown))}")
            projects = [p for p in projects if p.name in wanted]
        if args.review:
            added = set(corpus.added_by(args.review))
            projects = [p for p in projects if p in added]
        if args.rev and args.amplint:
            raise ReviewError("--rev and --amplint exclude each other")
        amplint = shlex.split(args.amplint) if args.amplint else None
        if args.step in ("fetch", "all"):
            corpus_dir.mkdir(parents=True, exist_ok=True)
            fetch(projects, corpus_dir)
        if args.step in ("run", "all"):
            rev = _git("rev-parse", "--short=12", args.rev) if args.rev else None
            if args.rev:
                args.rev = rev or args.rev  # the report names the commit, not a moving `HEAD`
            partial = bool(args.only or args.review) and args.step == "run"
            command = display_command(args, "run")
            run(projects, corpus_dir, amplint, args.jobs, args.rev, command, partial, args.run_file)
        if args.step in ("report", "all"):
            if args.review:
                corpus = corpus.as_of(args.review)
            seed = corpus.current.seed if args.seed is None else args.seed
            report(
                corpus_dir,
                corpus,
                args.verdicts,
                args.output,
                args.sample,
                args.sample_earlier,
                seed,
                args.context,
                display_command(args, "report", seed),
                args.per_rule,
                args.sample_numeric,
                args.run_file,
                args.summary,
                args.sample_conditional,
            )
    except ReviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
