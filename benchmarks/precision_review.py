"""A reproducible precision review of amplint's findings on public PyTorch projects.

    python benchmarks/precision_review.py fetch     # download + unpack the pinned corpus
    python benchmarks/precision_review.py run       # amplint over every project; saves the findings
    python benchmarks/precision_review.py report    # sample, join the verdicts, write docs/precision.md
    python benchmarks/precision_review.py all       # the three in turn

    python benchmarks/precision_review.py run --rev HEAD      # amplint as committed, not the working tree
    python benchmarks/precision_review.py run --only kornia   # redo some projects, keep the others' results

The corpus (`benchmarks/precision_corpus.toml`) pins each project's PyPI name and version. `fetch`
runs `pip download --no-deps --no-build-isolation NAME==VERSION` (pip takes the wheel where there is
one, else the sdist) and unpacks the archive's `.py`, `.ipynb` and `.gitignore` files into
`<corpus>/<name>-<version>/`; nothing is installed or imported. `run` runs
`amplint check <folder> --format json --exit-zero --no-cache` in each project (with a configuration
file of its own, so no `[tool.amplint]` table of the surrounding repository applies, that turns the
opt-in rules on) and saves every finding to `<corpus>/last_run.json`. `report` reads that file back,
draws a uniform sample of the findings of the rules that are on by default (each finding ranked by a
hash of the seed and its verdict key, the lowest ranks taken: the same findings give the same
sample, and a finding stays in it when others come and go), adds up to `--per-rule` findings of each
rule drawn the same way, joins the hand-written verdicts of
`benchmarks/precision_verdicts.toml` and writes the report (`docs/precision.md`) and, into the corpus
folder (never committed), a reading aid that shows each sampled finding with its code around it and a
verdict stub to paste. Editing verdicts needs only `report` again, not `run`.

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
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
DEFAULT_SAMPLE = 120
DEFAULT_SEED = 14
# Each rule's findings read at least this often (or all of them): the uniform sample gives the
# overall share, but a rule with few findings would otherwise have none read.
DEFAULT_PER_RULE = 10
DEFAULT_CONTEXT = 8

RUN_FILE = "last_run.json"
AID_FILE = "reading_aid.md"
CONFIG_FILE = "amplint.toml"
UNPACKED_MARKER = ".unpacked"
VERDICT_VALUES = ("real", "worth a look", "false")
UNREAD = "unread"
# Findings that say nothing about a hazard (a file amplint could not parse): counted, never sampled.
NOT_SAMPLED = frozenset({"AMP900"})
KEPT_SUFFIXES = (".py", ".ipynb")
# Directory names amplint skips by default; the line counts skip them too.
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", ".venv", "venv", ".tox", ".eggs", "build", "dist", "__pycache__", "node_modules"}
)
_PROJECT_KEYS = frozenset({"name", "version", "subdir", "tuned_on"})
_VERDICT_KEYS = frozenset({"project", "path", "code", "source", "line", "verdict", "reason"})


class ReviewError(Exception):
    """A problem the user has to fix (a missing run, a bad verdict); printed without a traceback."""


# --- corpus ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Project:
    name: str
    version: str
    subdir: str | None = None
    tuned_on: bool = False

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"

    @property
    def checked(self) -> str:
        return self.subdir or "."


def load_corpus(path: Path) -> list[Project]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
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
        if name in seen:
            raise ReviewError(f"{path}: project {name} is listed twice")
        seen.add(name)
        projects.append(Project(name, version, subdir, bool(entry.get("tuned_on", False))))
    return projects


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
    """The downloaded wheel of `project` (or its sdist when there is no wheel)."""
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
    return (wheels or matches)[0] if matches else None


def download(project: Project, downloads: Path) -> Path:
    downloads.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-build-isolation",
        "--quiet",
        "--dest",
        str(downloads),
        f"{project.name}=={project.version}",
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    archive = find_archive(downloads, project)
    if result.returncode != 0 or archive is None:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise ReviewError(f"pip download {project.name}=={project.version} failed:\n{tail}")
    return archive


def _members(archive: Path) -> Iterable[tuple[str, bytes]]:
    """(path inside the project, content) of every kept file; an sdist loses its top folder."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename, zf.read(info)
    elif archive.suffix == ".zip":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir():
                    yield info.filename.split("/", 1)[-1], zf.read(info)
    else:
        with tarfile.open(archive) as tf:
            for member in tf:
                if member.isfile() and (handle := tf.extractfile(member)) is not None:
                    yield member.name.split("/", 1)[-1], handle.read()


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


def unpack(archive: Path, target: Path) -> int:
    """Unpack the source files of `archive` into `target`; the number of files written."""
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    written = 0
    for name, content in _members(archive):
        keep = name.endswith(KEPT_SUFFIXES) or PurePosixPath(name).name == ".gitignore"
        if not keep or not _is_safe_relative(name):
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
            archive = find_archive(downloads, project) or download(project, downloads)
        except ReviewError as exc:
            print(f"{project.folder}: {exc}", file=sys.stderr)
            failures.append(project.folder)
            continue
        count = unpack(archive, target)
        print(f"{project.folder}: {archive.name}, {count} files")
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


def run_project(
    project: Project, corpus: Path, amplint: Sequence[str], jobs: int | None, env: dict[str, str] | None
) -> dict[str, Any]:
    root = corpus / project.folder
    if not (root / UNPACKED_MARKER).is_file():
        raise ReviewError(f"{project.folder} is not in {corpus}: run `fetch` first")
    if not (root / project.checked).is_dir():
        raise ReviewError(f"{project.folder} has no folder {project.checked!r} (see `subdir`)")
    raw = corpus / "raw"
    raw.mkdir(exist_ok=True)
    output = (raw / f"{project.folder}.json").resolve()
    output.unlink(missing_ok=True)
    archive = find_archive(corpus / "downloads", project)
    torch_version = declared_torch(archive) if archive is not None else ""
    command = [
        *amplint,
        "check",
        project.checked,
        "--format",
        "json",
        "--exit-zero",
        "--no-cache",
        "--config",
        str((corpus / CONFIG_FILE).resolve()),
        "--output",
        str(output),
        *(["--jobs", str(jobs)] if jobs else []),
        *(["--torch-version", torch_version] if torch_version else []),
    ]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=root, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    files, lines = count_source(root / project.checked)
    summary: dict[str, Any] = {
        "name": project.name,
        "version": project.version,
        "checked": project.checked,
        "tuned_on": project.tuned_on,
        "files": files,
        "lines": lines,
        "seconds": round(seconds, 2),
        "returncode": result.returncode,
        "torch": torch_version,
    }
    if result.returncode != 0 or not output.is_file():
        stderr = result.stderr.strip().splitlines()
        errors = [line for line in stderr if line.startswith("amplint: error")]
        summary["error"] = "\n".join(dict.fromkeys([*errors, *stderr[-1:]]))
        return {"project": summary, "findings": []}
    data = json.loads(output.read_text(encoding="utf-8"))
    summary["files_checked"] = data.get("summary", {}).get("files_checked")
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
                "source": _source_line(root, path, int(diagnostic["line"]), cell),
            }
        )
    summary["findings"] = len(findings)
    summary["by_rule"] = dict(sorted(Counter(f["code"] for f in findings).items()))
    return {"project": summary, "findings": findings}


def run(
    projects: Sequence[Project],
    corpus: Path,
    amplint: Sequence[str] | None,
    jobs: int | None,
    rev: str | None,
    command_line: str,
    partial: bool = False,
) -> dict[str, Any]:
    """Check every project; with `partial`, replace only these projects in the last run's results
    (which must come from the same amplint source)."""
    if not corpus.is_dir():
        raise ReviewError(f"{corpus} does not exist: run `fetch` first")
    env: dict[str, str] | None = None
    commit: str | None
    if rev is not None:
        commit, folder = snapshot(rev, corpus)
        amplint = [sys.executable, "-c", _RUN_SNAPSHOT]
        env = {**os.environ, "PYTHONPATH": str(folder)}
        source = f"`amplint/` as committed at `{commit[:12]}` (unpacked with git archive)"
        changes: bool | None = False
    else:
        commit = _git("rev-parse", "HEAD")
        amplint = amplint or default_amplint()
        dirty = _git("status", "--porcelain", "--", "amplint")
        changes = bool(dirty) if dirty is not None else None
        source = "the working tree" + (" (with uncommitted changes under `amplint/`)" if changes else "")
    static, opt_in = rule_codes(amplint, env)
    (corpus / CONFIG_FILE).write_text(
        "# amplint's defaults, whatever repository the corpus folder sits in, and the opt-in rules, so\n"
        "# that their findings are measured too.\n"
        + (f"extend-select = {json.dumps(opt_in)}\n" if opt_in else ""),
        encoding="utf-8",
    )
    version = subprocess.run([*amplint, "--version"], capture_output=True, text=True, env=env).stdout.strip()
    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    started = datetime.now(timezone.utc)
    summaries: list[dict[str, Any]] = []
    findings: list[dict[str, Any]] = []
    total_start = time.perf_counter()
    for project in projects:
        result = run_project(project, corpus, amplint, jobs, env)
        summary = result["project"]
        summaries.append(summary)
        findings.extend(result["findings"])
        if "error" in summary:
            print(f"{project.folder}: amplint failed (exit {summary['returncode']}):\n{summary['error']}")
        else:
            rules = ", ".join(f"{code} {n}" for code, n in summary["by_rule"].items())
            print(
                f"{project.folder}: {summary['findings']} findings in {summary['files']} files "
                f"({summary['seconds']:.1f} s){': ' + rules if rules else ''}"
            )
    wall = time.perf_counter() - total_start
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    if partial and (corpus / RUN_FILE).is_file():
        short = commit[:12] if commit else None
        return _merge_partial(corpus, short, rev is not None, source, summaries, findings, command_line, wall)
    document = {
        "format": 1,
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
        "projects": summaries,
        "findings": findings,
    }
    _save_run(corpus, document)
    return document


def _save_run(corpus: Path, document: dict[str, Any]) -> None:
    (corpus / RUN_FILE).write_text(
        json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    findings = document["findings"]
    by_rule = Counter(f["code"] for f in findings)
    print(
        f"\n{len(findings)} findings in {len(document['projects'])} projects, {document['wall_seconds']:.1f} s"
    )
    for code, count in sorted(by_rule.items()):
        print(f"  {code}  {count}")


def _merge_partial(
    corpus: Path,
    commit: str | None,
    snapshot: bool,
    source: str,
    summaries: list[dict[str, Any]],
    findings: list[dict[str, Any]],
    command_line: str,
    wall: float,
) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((corpus / RUN_FILE).read_text(encoding="utf-8"))
    before = document["amplint"]
    if (before.get("commit"), before.get("snapshot")) != (commit, snapshot):
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
    document["wall_seconds"] = round(
        document["wall_seconds"]
        + wall
        - sum(previous[name]["seconds"] for name in fresh if name in previous),
        1,
    )
    document.setdefault("reruns", []).append(command_line)
    _save_run(corpus, document)
    return document


# --- verdicts, sample, report ------------------------------------------------------------------

Key = tuple[str, str, str, str]


def finding_key(finding: dict[str, Any]) -> Key:
    return (finding["project"], finding["path"], finding["code"], finding["source"])


@dataclass(frozen=True)
class Verdict:
    verdict: str
    reason: str


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
        key = (entry["project"], entry["path"], entry["code"], entry["source"].strip())
        verdict = Verdict(entry["verdict"], " ".join(str(entry["reason"]).split()))
        if key in verdicts and verdicts[key] != verdict:
            raise ReviewError(f"{where}: contradicts an earlier verdict for the same finding")
        verdicts[key] = verdict
    return verdicts


def population(findings: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The findings the sample is drawn from, in a stable order."""
    return sorted(
        (f for f in findings if f["code"] not in NOT_SAMPLED),
        key=lambda f: (f["project"], f["path"], f["line"], f["column"], f["code"]),
    )


def _rank(finding: dict[str, Any], seed: int) -> str:
    """A finding's place in the seeded random order: a hash of the seed and the finding's verdict
    key, so that adding or removing other findings never moves it."""
    key = "\x1f".join([str(seed), *finding_key(finding)])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def draw(findings: Sequence[dict[str, Any]], size: int, seed: int) -> list[dict[str, Any]]:
    """A uniform sample: the first `size` findings in the seeded random order (so any prefix of it
    is a uniform sample too, and a finding stays sampled while the findings around it change)."""
    return sorted(findings, key=lambda f: (_rank(f, seed), f["line"], f["column"]))[:size]


def supplement(
    findings: Sequence[dict[str, Any]], sample: Sequence[dict[str, Any]], per_rule: int, seed: int
) -> list[dict[str, Any]]:
    """For each rule with fewer than `per_rule` findings in `sample`, more of its findings up to
    `per_rule` (or all it has), taken in the same seeded order."""
    taken = {id(f) for f in sample}
    counts = Counter(f["code"] for f in sample)
    extra: list[dict[str, Any]] = []
    for code in sorted({f["code"] for f in findings}):
        rest = [
            f
            for f in draw([f for f in findings if f["code"] == code], len(findings), seed)
            if id(f) not in taken
        ]
        extra += rest[: max(per_rule - counts[code], 0)]
    return extra


def wilson(useful: int, read: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if read == 0:
        return (0.0, 1.0)
    z = 1.959964
    p = useful / read
    centre = (p + z * z / (2 * read)) / (1 + z * z / read)
    half = z * math.sqrt(p * (1 - p) / read + z * z / (4 * read * read)) / (1 + z * z / read)
    return (max(0.0, centre - half), min(1.0, centre + half))


def useful_cell(useful: int, read: int, interval: bool = True) -> str:
    if read == 0:
        return "-"
    text = f"{100 * useful / read:.0f}%"
    if interval:
        low, high = wilson(useful, read)
        text += f" ({100 * low:.0f}-{100 * high:.0f})"
    return text


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _shown_path(path: Path) -> str:
    """A path for the committed report: relative to the repository, never a machine path."""
    try:
        relative = Path(os.path.relpath(path.resolve(), REPO)).as_posix()
    except ValueError:  # another drive
        relative = ".."
    return f"<outside the repository>/{path.name}" if relative.startswith("..") else relative


def _tally(statuses: Iterable[str]) -> Counter[str]:
    return Counter(statuses)


def _rule_row(label: str, findings: int, statuses: Sequence[str]) -> str:
    tally = _tally(statuses)
    read = sum(tally[v] for v in VERDICT_VALUES)
    useful = tally["real"] + tally["worth a look"]
    return (
        f"| {label} | {findings} | {len(statuses)} | {tally['real']} | {tally['worth a look']} | "
        f"{tally['false']} | {tally[UNREAD]} | {useful_cell(useful, read)} |"
    )


def render_report(
    run_data: dict[str, Any],
    sample: Sequence[dict[str, Any]],
    statuses: Sequence[tuple[str, str]],
    command: str,
    stale: int,
    sample_size: int,
    seed: int,
    extra: Sequence[dict[str, Any]] = (),
    extra_statuses: Sequence[tuple[str, str]] = (),
    per_rule: int = 0,
) -> str:
    findings = run_data["findings"]
    projects = run_data["projects"]
    tuned = {p["name"] for p in projects if p.get("tuned_on")}
    meta = run_data["amplint"]
    out: list[str] = []
    add = out.append
    add("# Precision on public PyTorch projects")
    add("")
    add(
        "How many of amplint's findings on code nobody here wrote are worth acting on. Every pinned "
        "project of `benchmarks/precision_corpus.toml` is checked with all static rules, a uniform "
        "sample of the findings is drawn, and each sampled finding is read by hand against the code "
        "around it. A verdict is one of **real** (a genuine mixed-precision hazard a maintainer "
        "would want fixed), **worth a look** (plausible, depends on how the code is called) or "
        "**false** (not a hazard: already float32, not half precision, the pattern misread); "
        "findings nobody has read yet are **unread**. Useful = (real + worth a look) / read, with a "
        "95% Wilson interval in brackets."
    )
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
    add(
        f"`fetch` downloads and unpacks the pinned projects, `run` checks each with "
        f"`{meta['command']} check <folder> --format json --exit-zero --no-cache`, `report` writes this "
        f"page. Findings from {source}, {meta.get('version') or 'amplint'}; Python "
        f"{run_data['python']}, {run_data['cpus']} CPUs{load}, run started {run_data['started']}; "
        f"the projects one after another, {run_data['wall_seconds']:.1f} s in all. "
        "Verdicts from `benchmarks/precision_verdicts.toml`; "
        f"sample of {sample_size} with seed {seed}: the findings ranked by a hash of the seed and their "
        "verdict key, the lowest ranks taken, so the same findings give the same sample, a finding "
        "stays sampled while others come and go, and the first *k* rows of the sample table are "
        "themselves a uniform sample."
    )
    add("")
    add("## Corpus")
    add("")
    add("| Project | Version | Checked | Files | Lines | Findings | Seconds | By rule |")
    add("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |")
    for p in projects:
        mark = " †" if p.get("tuned_on") else ""
        if "error" in p:
            add(
                f"| {p['name']}{mark} | {p['version']} | `{p['checked']}` | {p['files']:,} | {p['lines']:,} "
                f"| failed | {p['seconds']:.1f} | exit {p['returncode']} |"
            )
            continue
        rules = ", ".join(f"{code[3:]}: {n}" for code, n in p["by_rule"].items())
        add(
            f"| {p['name']}{mark} | {p['version']} | `{p['checked']}` | {p['files']:,} | {p['lines']:,} "
            f"| {p['findings']:,} | {p['seconds']:.1f} | {rules} |"
        )
    total_files = sum(p["files"] for p in projects)
    total_lines = sum(p["lines"] for p in projects)
    total_seconds = sum(p["seconds"] for p in projects)
    add(
        f"| **{len(projects)} projects** | | | **{total_files:,}** | **{total_lines:,}** "
        f"| **{len(findings):,}** | **{total_seconds:.1f}** | |"
    )
    add("")
    add(
        "Files and lines count the `.py` files of the checked folder. † marks the projects amplint's "
        "rules were developed against (docs/measured.md); the held-out rows below "
        'leave them out. "By rule" gives `AMP`-less codes.'
    )
    unparsable = sum(1 for f in findings if f["code"] in NOT_SAMPLED)
    if unparsable:
        add(
            f"{unparsable} findings are {'/'.join(sorted(NOT_SAMPLED))} (unparsable files): counted, not sampled."
        )
    add("")
    add("## Per rule")
    add("")
    add("| Rule | Findings | Sampled | Real | Worth a look | False | Unread | Useful |")
    add("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    by_rule = Counter(f["code"] for f in findings)
    sampled_status: dict[str, list[str]] = {}
    for finding, (status, _) in zip([*sample, *extra], [*statuses, *extra_statuses], strict=True):
        sampled_status.setdefault(finding["code"], []).append(status)
    opt_in = set(run_data.get("opt_in", ()))
    # A rule that ran and found nothing has its row too: no number, and the page says so.
    for code in sorted({*by_rule, *run_data.get("static_rules", ())}):
        label = f"{code} (opt-in)" if code in opt_in else code
        add(_rule_row(label, by_rule[code], sampled_status.get(code, [])))
    all_statuses = [s for s, _ in statuses]
    default = [f for f in findings if f["code"] not in NOT_SAMPLED and f["code"] not in opt_in]
    add(_rule_row("**all, default rules**", len(default), all_statuses))
    held_out = [s for f, (s, _) in zip(sample, statuses, strict=True) if f["project"] not in tuned]
    held_out_findings = sum(1 for f in default if f["project"] not in tuned)
    add(_rule_row("held-out projects", held_out_findings, held_out))
    add("")
    add(
        "Findings: all findings of the rule in the corpus; the held-out row counts only the projects "
        "without †. Sampled rows are split by verdict; useful % is over the read ones only. A rule's "
        f"row reads its findings in the uniform sample and, where that holds fewer than {per_rule}, "
        f"more of its findings drawn uniformly from the rule's own (up to {per_rule}, or all it has); "
        "the **all** and held-out rows count the uniform sample only, which is drawn from the findings "
        "of the rules that are on by default (what `amplint check` reports without `--select`). "
        "Opt-in rules run in the review with `extend-select` and are measured by their own rows. A rule "
        "that found nothing in the corpus reads `-`: no number backs it here, only its examples, cut "
        "from the real public code its docs name."
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
    seen: set[Key] = set()
    shared = []
    for i, finding in enumerate(sample, 1):
        key = finding_key(finding)
        if key in seen:
            shared.append(str(i))
        seen.add(key)
    if shared:
        notes.append(
            f"A verdict is keyed by project, file, rule and the text of the flagged line, so identical "
            f"lines in one file share it: sample rows {', '.join(shared)} repeat the key of an earlier row."
        )
    # AMP008 is an API deprecation, not a numeric hazard, and easy to judge: the rest on their own.
    api = sum(1 for finding in sample if finding["code"] == "AMP008")
    numeric = [s for f, s in zip(sample, statuses, strict=True) if f["code"] != "AMP008" and s[0] != UNREAD]
    if api and numeric:
        useful = sum(1 for verdict, _ in numeric if verdict != "false")
        notes.append(
            f"AMP008 (a deprecated API, not a numeric hazard) is {api} of the {len(sample)} sampled findings; "
            f"the sampled findings of the other default rules, the numeric ones, read "
            f"{useful_cell(useful, len(numeric))} useful ({len(numeric)} read)."
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
    add("## Sample")
    add("")
    add("| # | Project | File:line | Rule | Verdict | Reason |")
    add("| ---: | --- | --- | --- | --- | --- |")
    for i, (finding, (status, reason)) in enumerate(zip(sample, statuses, strict=True), 1):
        add(
            f"| {i} | {finding['project']} | `{_md(finding['path'])}:{finding['line']}` | {finding['code']} "
            f"| {status} | {_md(reason)} |"
        )
    if extra:
        add("")
        add(f"## Per-rule supplement (rules with fewer than {per_rule} findings in the uniform sample)")
        add("")
        add("| # | Project | File:line | Rule | Verdict | Reason |")
        add("| ---: | --- | --- | --- | --- | --- |")
        for i, (finding, (status, reason)) in enumerate(zip(extra, extra_statuses, strict=True), 1):
            add(
                f"| s{i} | {finding['project']} | `{_md(finding['path'])}:{finding['line']}` | "
                f"{finding['code']} | {status} | {_md(reason)} |"
            )
    add("")
    return "\n".join(out)


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOML basic string


def render_reading_aid(
    run_data: dict[str, Any],
    sample: Sequence[dict[str, Any]],
    statuses: Sequence[tuple[str, str]],
    corpus: Path,
    context: int,
) -> str:
    folders = {p["name"]: f"{p['name']}-{p['version']}" for p in run_data["projects"]}
    out = [
        "# Reading aid for the precision sample",
        "",
        f"Each sampled finding with {context} lines of code either side (`>` marks the flagged line) and a "
        "verdict stub for `benchmarks/precision_verdicts.toml`. Not committed.",
        "",
    ]
    for i, (finding, (status, reason)) in enumerate(zip(sample, statuses, strict=True), 1):
        path, _, cell_part = finding["path"].partition(":cell ")
        cell = int(cell_part) if cell_part else None
        lines = _file_lines(corpus / folders[finding["project"]], path, cell)
        line = finding["line"]
        first, last = max(1, line - context), min(len(lines), line + context)
        width = len(str(last))
        out.append(
            f"## #{i} {finding['project']}: {finding['path']}:{line}:{finding['column']} "
            f"{finding['code']} [{status}]"
        )
        out.append("")
        out.append(finding["message"])
        if status != UNREAD:
            out.append(f"\nVerdict: {status}: {reason}")
        out.append("")
        out.append("```python")
        for n in range(first, last + 1):
            out.append(f"{'>' if n == line else ' '}{n:>{width}} | {lines[n - 1]}")
        out.append("```")
        out.append("")
        out.append("```toml")
        out.append("[[verdict]]")
        for key in ("project", "path", "code", "source"):
            out.append(f"{key} = {_toml_string(finding[key])}")
        out.append(f"line = {line}")
        out.append(f"verdict = {_toml_string('' if status == UNREAD else status)}")
        out.append(f"reason = {_toml_string(reason)}")
        out.append("```")
        out.append("")
    return "\n".join(out)


def report(
    corpus: Path,
    verdicts_path: Path,
    output: Path,
    sample_size: int,
    seed: int,
    context: int,
    command: str,
    per_rule: int = DEFAULT_PER_RULE,
) -> None:
    run_file = corpus / RUN_FILE
    if not run_file.is_file():
        raise ReviewError(f"{run_file} does not exist: run `run` first")
    run_data = json.loads(run_file.read_text(encoding="utf-8"))
    verdicts = load_verdicts(verdicts_path)
    findings = population(run_data["findings"])
    opt_in = set(run_data.get("opt_in", ()))
    # The uniform sample is what a user sees with the defaults; opt-in rules get the supplement only.
    sample = draw([f for f in findings if f["code"] not in opt_in], sample_size, seed)
    extra = supplement(findings, sample, per_rule, seed)

    def status(finding: dict[str, Any]) -> tuple[str, str]:
        verdict = verdicts.get(finding_key(finding))
        return (verdict.verdict, verdict.reason) if verdict else (UNREAD, "")

    statuses = [status(f) for f in sample]
    extra_statuses = [status(f) for f in extra]
    keys = {finding_key(f) for f in run_data["findings"]}
    stale = sum(1 for key in verdicts if key not in keys)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(
        render_report(
            run_data, sample, statuses, command, stale, sample_size, seed, extra, extra_statuses, per_rule
        ),
        encoding="utf-8",
    )
    aid = corpus / AID_FILE
    aid.write_text(
        render_reading_aid(run_data, [*sample, *extra], [*statuses, *extra_statuses], corpus, context),
        encoding="utf-8",
    )
    tally = Counter(status for status, _ in statuses)
    read = sum(tally[v] for v in VERDICT_VALUES)
    useful = tally["real"] + tally["worth a look"]
    print(
        f"sample of {len(sample)}: {read} read ({tally['real']} real, {tally['worth a look']} worth a look, "
        f"{tally['false']} false), {tally[UNREAD]} unread; useful {useful_cell(useful, read)}"
    )
    unread = sum(1 for s, _ in extra_statuses if s == UNREAD)
    print(f"per-rule supplement of {len(extra)} (at least {per_rule} per rule): {unread} unread")
    print(f"wrote {output} and {aid}")


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
    parser.add_argument("--sample", type=int, default=DEFAULT_SAMPLE, help="findings to sample")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="the sample's random seed")
    parser.add_argument(
        "--per-rule", type=int, default=DEFAULT_PER_RULE, help="findings read per rule at least (or all)"
    )
    parser.add_argument("--context", type=int, default=DEFAULT_CONTEXT, help="reading-aid lines either side")
    parser.add_argument("--only", help="comma-separated project names (fetch/run); default: all")
    parser.add_argument("--amplint", help="the amplint command (default: the one beside this Python)")
    parser.add_argument("--jobs", type=int, help="passed to `amplint check --jobs`")
    parser.add_argument(
        "--rev",
        help="run amplint as committed at this git revision (a snapshot in the corpus folder) instead "
        "of the working tree",
    )
    return parser


def display_command(args: argparse.Namespace, step: str) -> str:
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
        "report": ("corpus", "verdicts", "output"),
    }[step]
    for name in wanted:
        value: Path = getattr(args, name)
        if value.resolve() != defaults[name]:
            parts += [f"--{name}", _shown_path(value)]
    if step in ("fetch", "run") and args.only:
        parts += ["--only", args.only]
    if step == "run":
        if args.rev:
            parts += ["--rev", args.rev]
        if args.amplint:
            parts += ["--amplint", args.amplint]
        if args.jobs:
            parts += ["--jobs", str(args.jobs)]
    if step == "report":
        parts += ["--sample", str(args.sample), "--seed", str(args.seed), "--per-rule", str(args.per_rule)]
    return shlex.join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.sample < 0 or args.context < 0:
        print("--sample and --context must be >= 0", file=sys.stderr)
        return 2
    corpus: Path = args.corpus.resolve()
    try:
        projects = load_corpus(args.manifest)
        if args.only:
            wanted = {name.strip() for name in args.only.split(",") if name.strip()}
            unknown = wanted - {p.name for p in projects}
            if unknown:
                raise ReviewError(f"not in the corpus: {', '.join(sorted(unknown))}")
            projects = [p for p in projects if p.name in wanted]
        if args.rev and args.amplint:
            raise ReviewError("--rev and --amplint exclude each other")
        amplint = shlex.split(args.amplint) if args.amplint else None
        if args.step in ("fetch", "all"):
            corpus.mkdir(parents=True, exist_ok=True)
            fetch(projects, corpus)
        if args.step in ("run", "all"):
            rev = _git("rev-parse", "--short=12", args.rev) if args.rev else None
            if args.rev:
                args.rev = rev or args.rev  # the report names the commit, not a moving `HEAD`
            partial = bool(args.only) and args.step == "run"
            run(projects, corpus, amplint, args.jobs, args.rev, display_command(args, "run"), partial)
        if args.step in ("report", "all"):
            report(
                corpus,
                args.verdicts,
                args.output,
                args.sample,
                args.seed,
                args.context,
                display_command(args, "report"),
                args.per_rule,
            )
    except ReviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
