"""The result cache, through the command line on real files: invisible in the output, invalidated by
whatever decides a result, and never a reason for a run to fail."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import (
    HAZARD,
    HAZARD_CODE,
    HAZARD_COLUMN,
    HAZARD_FIXED,
    HAZARD_LINE,
    OTHERS,
    amplint_run,
    write,
)

from amplint.pipeline.cache import _CACHEDIR_TAG, _FORMAT
from amplint.results import UNPARSABLE, UNPARSABLE_NAME, UNPARSABLE_SEVERITY
from amplint.rules.amp900_unparsable_file import UnparsableFile

CACHE = ".amplint_cache"
CLEAN = "import torch\n\n\ndef forward(x):\n    return torch.relu(x)\n"
FIXED = HAZARD_FIXED


def project(root: Path) -> Path:
    """Findings with and without fixes, a clean file, a syntax error, a binary file, a file-level noqa
    and a non-ASCII line (columns count characters), so every kind of result goes through the cache."""
    write(root / "pkg" / "decay.py", HAZARD)
    write(root / "pkg" / "others.py", OTHERS)
    write(root / "pkg" / "clean.py", CLEAN)
    write(root / "pkg" / "broken.py", "def f(:\n    pass\n")
    (root / "pkg" / "blob.py").write_bytes(b"\x00\x01binary")
    write(root / "pkg" / "exempt.py", "# amplint: noqa\n" + HAZARD)
    write(root / "pkg" / "accents.py", HAZARD.replace("def make_scaler():", "def make_scâler():  # é"))
    return root


def entries(root: Path) -> list[Path]:
    return sorted(p for p in (root / CACHE).rglob("*") if p.is_file() and p.parent != root / CACHE)


def outputs(root: Path, *args: str) -> tuple[str, str]:
    """The text and the JSON report of one configuration, each from its own run."""
    text = amplint_run(root, "check", *args, "pkg")
    assert text.returncode == 1, text.stderr
    report = amplint_run(root, "check", "--format", "json", *args, "pkg")
    assert report.returncode == 1, report.stderr
    return text.stdout, report.stdout


def test_warm_run_reports_exactly_what_a_cold_run_does(tmp_path: Path) -> None:
    root = project(tmp_path)
    uncached = outputs(root, "--no-cache")
    assert not (root / CACHE).exists()
    cold = outputs(root)
    assert (
        (root / CACHE / "CACHEDIR.TAG")
        .read_text(encoding="utf-8")
        .startswith("Signature: 8a477f597d28d172789f06886806bc55")
    )
    assert (root / CACHE / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
    stored = entries(root)
    assert stored
    warm = outputs(root)
    assert cold == uncached
    assert warm == uncached
    assert entries(root) == stored  # nothing new was written
    text, report = warm
    assert f"pkg/decay.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in text
    assert "torch.cuda.amp.GradScaler()" in text  # the snippet, from the file's text
    assert {d["code"] for d in json.loads(report)["diagnostics"]} >= {
        HAZARD_CODE,
        "AMP011",
        "AMP006",
        "AMP900",
    }


def test_warm_run_does_not_load_the_parser(tmp_path: Path) -> None:
    root = project(tmp_path)
    amplint_run(root, "check", "pkg")

    def imported(*args: str) -> set[str]:
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "amplint", "check", *args, "pkg"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 1, proc.stderr
        return {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}

    warm = imported()
    assert "libcst" not in warm
    assert "multiprocessing" not in warm
    cold = imported("--no-cache")
    assert "libcst" in cold
    assert "multiprocessing" not in cold  # a handful of files is checked in-process


def test_editing_a_file_invalidates_its_entry(tmp_path: Path) -> None:
    root = project(tmp_path)
    amplint_run(root, "check", "pkg")
    write(root / "pkg" / "decay.py", FIXED)
    write(root / "pkg" / "clean.py", HAZARD)
    assert outputs(root) == outputs(root, "--no-cache")
    text, _ = outputs(root)
    assert f"pkg/clean.py:{HAZARD_LINE}:{HAZARD_COLUMN}: {HAZARD_CODE}" in text
    assert "pkg/decay.py" not in text


def test_changing_the_selection_invalidates(tmp_path: Path) -> None:
    root = project(tmp_path)
    only_hazard = amplint_run(root, "check", "--format", "json", "--select", HAZARD_CODE, "pkg")
    assert {d["code"] for d in json.loads(only_hazard.stdout)["diagnostics"]} == {HAZARD_CODE, UNPARSABLE}
    everything = amplint_run(root, "check", "--format", "json", "pkg")
    assert {"AMP011", "AMP006"} <= {d["code"] for d in json.loads(everything.stdout)["diagnostics"]}
    ignored = amplint_run(root, "check", "--format", "json", "--ignore", HAZARD_CODE, "pkg")
    assert HAZARD_CODE not in {d["code"] for d in json.loads(ignored.stdout)["diagnostics"]}


def test_per_file_ignores_take_part_in_the_key(tmp_path: Path) -> None:
    root = project(tmp_path)
    amplint_run(root, "check", "pkg")
    write(root / "pyproject.toml", f'[tool.amplint.per-file-ignores]\n"pkg/decay.py" = ["{HAZARD_CODE}"]\n')
    text, _ = outputs(root)
    assert "pkg/decay.py" not in text
    assert (root / CACHE).is_dir()


def test_corrupt_entries_are_ignored_and_replaced(tmp_path: Path) -> None:
    root = project(tmp_path)
    expected = outputs(root, "--no-cache")
    amplint_run(root, "check", "pkg")
    stored = entries(root)
    garbage = [b"\x00\xff garbage", b"", b"{}", b'{"key": 1}', b"[1, 2", b'{"diagnostics": [{"code": 5}]}']
    for index, entry in enumerate(stored):
        entry.write_bytes(garbage[index % len(garbage)])
    proc = amplint_run(root, "check", "pkg")
    assert proc.stdout == expected[0]
    assert "Traceback" not in proc.stderr
    assert outputs(root) == expected
    for entry in entries(root):  # rewritten whole
        assert json.loads(entry.read_bytes())["diagnostics"] is not None


def test_cache_that_is_a_file_is_ignored(tmp_path: Path) -> None:
    root = project(tmp_path)
    expected = outputs(root, "--no-cache")
    write(root / CACHE, "not a directory")
    proc = amplint_run(root, "check", "pkg")
    assert proc.returncode == 1
    assert proc.stdout == expected[0]
    assert proc.stderr.count("warning") == 1
    assert "Traceback" not in proc.stderr


@contextlib.contextmanager
def unwritable(*directories: Path) -> Iterator[None]:
    """Make directories unwritable: `chmod 0o500`, or for root (whom modes do not stop) the immutable
    attribute; skip the test when neither is possible here."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    chattr = shutil.which("chattr")
    if as_root and chattr is None:
        pytest.skip("running as root, which can write anywhere, and chattr is not available")
    done: list[Path] = []
    try:
        for directory in directories:
            if as_root:
                proc = subprocess.run([str(chattr), "+i", str(directory)], capture_output=True, check=False)
                if proc.returncode != 0:
                    pytest.skip(f"running as root, and chattr +i failed: {proc.stderr.decode().strip()}")
            else:
                directory.chmod(0o500)
            done.append(directory)
        yield
    finally:
        for directory in done:
            if as_root:
                subprocess.run([str(chattr), "-i", str(directory)], check=False)
            else:
                directory.chmod(0o755)


def test_unwritable_cache_still_gives_correct_results(tmp_path: Path) -> None:
    root = project(tmp_path)
    # A cache made earlier and then made read-only: read, never written.
    amplint_run(root, "check", "pkg")
    write(root / "pkg" / "clean.py", HAZARD)  # one miss, whose entry cannot be written
    expected = outputs(root, "--no-cache")
    with unwritable(root / CACHE, *[p for p in (root / CACHE).rglob("*") if p.is_dir()]):
        proc = amplint_run(root, "check", "pkg")
        assert proc.returncode == 1
        assert proc.stdout == expected[0]
        assert proc.stderr.count("amplint: warning: cannot write the cache") == 1
        assert outputs(root) == expected


def test_unwritable_project_still_gives_correct_results(tmp_path: Path) -> None:
    root = project(tmp_path / "project")
    expected = outputs(root, "--no-cache")
    with unwritable(root):
        proc = amplint_run(root, "check", "pkg")
        assert proc.returncode == 1
        assert proc.stdout == expected[0]
        assert proc.stderr.count("amplint: warning: cannot write the cache") == 1
        assert not (root / CACHE).exists()


def test_no_cache_writes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    before = sorted(p.name for p in root.iterdir())
    outputs(root, "--no-cache")
    assert sorted(p.name for p in root.iterdir()) == before


def test_diff_reads_the_cache_but_writes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    proc = amplint_run(root, "check", "--diff", "pkg")
    assert proc.returncode == 1
    assert '+    s = torch.amp.GradScaler("cuda")' in proc.stdout
    assert not (root / CACHE).exists()


def test_fix_does_not_trust_the_cache_for_files_it_edits(tmp_path: Path) -> None:
    root = project(tmp_path)
    amplint_run(root, "check", "pkg")  # caches the fixable AMP008 finding
    proc = amplint_run(root, "check", "--fix", "pkg")
    assert proc.returncode == 1  # AMP011 (no automatic fix) and the AMP900s remain
    assert (root / "pkg" / "decay.py").read_text(encoding="utf-8") == FIXED
    # The fixed content got an entry of its own: the next run reports it clean, as a fresh run does.
    assert outputs(root) == outputs(root, "--no-cache")
    assert "pkg/decay.py" not in outputs(root)[0]
    again = amplint_run(root, "check", "--fix", "--format", "json", "pkg")
    assert json.loads(again.stdout)["summary"]["fixed"] == 0
    assert (root / "pkg" / "decay.py").read_text(encoding="utf-8") == FIXED


def test_two_processes_sharing_one_cache(tmp_path: Path) -> None:
    root = project(tmp_path)
    for index in range(30):
        write(root / "pkg" / f"copy_{index}.py", (HAZARD, OTHERS, CLEAN)[index % 3] + f"# {index}\n")
    expected = outputs(root, "--no-cache")[1]
    command = [sys.executable, "-m", "amplint", "check", "--format", "json", "pkg"]
    runs = [
        subprocess.Popen(command, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for run in runs:
        stdout, stderr = run.communicate()
        assert run.returncode == 1, stderr
        assert stdout == expected
        assert "warning" not in stderr
    assert outputs(root)[1] == expected
    assert not [p for p in (root / CACHE).rglob("*.tmp")]


def test_entries_of_old_code_versions_are_pruned(tmp_path: Path) -> None:
    root = project(tmp_path)
    amplint_run(root, "check", "--select", "AMP006", "pkg")  # amplint makes the folder
    old = [root / CACHE / f"v{_FORMAT}-{index:016x}" for index in range(6)]
    for index, directory in enumerate(old):
        write(directory / "entry", "{}")
        os.utime(directory, (1_000_000 + index, 1_000_000 + index))
    proc = amplint_run(root, "check", "pkg")
    assert proc.returncode == 1, proc.stderr
    kept = sorted(p.name for p in (root / CACHE).iterdir() if p.is_dir())
    assert len(kept) == 4  # this version's and the three most recently used others
    assert [d.name for d in old[3:]] == [name for name in kept if name in {d.name for d in old}]
    assert not [p for p in (root / CACHE).iterdir() if p.name.startswith(".removing")]


def test_clean_removes_the_cache(tmp_path: Path) -> None:
    root = project(tmp_path)
    amplint_run(root, "check", "pkg")
    assert (root / CACHE).is_dir()
    proc = amplint_run(root, "clean")
    assert proc.returncode == 0, proc.stderr
    assert "removed" in proc.stdout
    assert CACHE in proc.stdout
    assert not (root / CACHE).exists()
    proc = amplint_run(root, "clean")
    assert proc.returncode == 0
    assert "no cache" in proc.stdout


def test_clean_finds_the_project_root(tmp_path: Path) -> None:
    root = project(tmp_path)
    write(root / "pyproject.toml", "[tool.amplint]\n")
    amplint_run(root / "pkg", "check", ".")
    assert (root / CACHE).is_dir()
    assert not (root / "pkg" / CACHE).exists()
    proc = amplint_run(root / "pkg", "clean")
    assert proc.returncode == 0, proc.stderr
    assert not (root / CACHE).exists()


def test_unparsable_constants_match_the_rule() -> None:
    rule = (UnparsableFile.code, UnparsableFile.name, UnparsableFile.severity)
    assert rule == (UNPARSABLE, UNPARSABLE_NAME, UNPARSABLE_SEVERITY)


def test_extend_select_takes_part_in_the_key(tmp_path: Path) -> None:
    # Only the opt-in AMP014 flags this file (AMP003's finding is conditional, not shown): a cached
    # default run must not answer for it.
    write(
        tmp_path / "gate.py",
        "import torch\n\n\ndef log_probs(x):\n    return torch.log(torch.softmax(x, dim=-1))\n",
    )
    first = amplint_run(tmp_path, "check", "--format", "json", "gate.py")
    assert json.loads(first.stdout)["diagnostics"] == [] and (tmp_path / CACHE).is_dir()
    opted = amplint_run(tmp_path, "check", "--format", "json", "--extend-select", "AMP014", "gate.py")
    assert [d["code"] for d in json.loads(opted.stdout)["diagnostics"]] == ["AMP014"]


# A folder amplint did not make is never tagged, ignored, pruned or deleted: each case below is one
# that once lost or hid a user's files.
REFUSED = "amplint keeps its cache only in a folder it made"


def repository(root: Path) -> Path:
    """A project under git, with work in progress (a file git does not track yet)."""
    write(root / "pkg" / "decay.py", HAZARD)
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    write(root / "notes.txt", "uncommitted work\n")
    return root


def tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def legacy_tag(directory: Path) -> None:
    """The tag an earlier amplint wrote into whatever folder `cache-dir` named."""
    write(directory / "CACHEDIR.TAG", _CACHEDIR_TAG)


@pytest.mark.parametrize("cache_dir", ["..", "."])
def test_a_cache_dir_holding_the_project_is_refused_and_never_cleaned(tmp_path: Path, cache_dir: str) -> None:
    home = tmp_path / "home"
    write(home / "sibling" / "work.py", CLEAN)
    root = repository(home / "project")
    write(root / "pyproject.toml", f'[tool.amplint]\ncache-dir = "{cache_dir}"\n')
    before = tree(home)
    proc = amplint_run(root, "check", ".")
    assert proc.returncode == 2
    assert f"the cache folder {(root / cache_dir).resolve()} holds the project" in proc.stderr
    assert tree(home) == before  # no tag, no .gitignore, no entries
    legacy_tag(root / cache_dir)  # as an earlier amplint left it: still not proof enough
    before = tree(home)
    proc = amplint_run(root, "clean")
    assert proc.returncode == 2
    assert "nothing in it was removed" in proc.stderr
    assert tree(home) == before


def test_clean_never_removes_a_git_repository_or_the_home_folder(tmp_path: Path) -> None:
    root = repository(tmp_path / "project")
    checkout = tmp_path / "checkout"
    write(checkout / ".git" / "HEAD", "ref: refs/heads/main\n")
    home = tmp_path / "home"
    write(home / ".bashrc", "# mine\n")
    for folder, why in ((checkout, "holds a git repository (.git)"), (home, "is the home folder")):
        legacy_tag(folder)
        before = tree(folder)
        proc = subprocess.run(
            [sys.executable, "-m", "amplint", "clean", "--cache-dir", str(folder)],
            cwd=root,
            capture_output=True,
            text=True,
            env={**os.environ, "HOME": str(home)},
            timeout=600,  # a hang's guard: it takes seconds, ~20 s on a loaded machine
        )
        assert proc.returncode == 2 and why in proc.stderr, proc.stderr
        assert tree(folder) == before


def test_a_cache_dir_holding_other_files_is_refused(tmp_path: Path) -> None:
    # `--cache-dir ../releases` once pruned the user's `v2-release-*` folders as old cache versions.
    root = repository(tmp_path / "project")
    releases = tmp_path / "releases"
    for name in ("v2-release-1", "v2-release-2", f"v{_FORMAT}-{0:016x}"):
        write(releases / name / "notes.txt", "a release\n")
    before = tree(releases)
    proc = amplint_run(root, "check", "--cache-dir", "../releases", "pkg")
    assert proc.returncode == 2
    assert "holds files amplint did not write" in proc.stderr and REFUSED in proc.stderr
    assert tree(releases) == before
    proc = amplint_run(root, "clean", "--cache-dir", "../releases")
    assert proc.returncode == 2
    assert tree(releases) == before


def test_pruning_touches_only_amplint_version_folders(tmp_path: Path) -> None:
    # A folder an earlier amplint tagged, which also holds the user's folders: only amplint's go.
    root = repository(tmp_path / "project")
    cache = tmp_path / "shared"
    legacy_tag(cache)
    for index in range(5):
        write(cache / f"v{_FORMAT}-release-{index}" / "notes.txt", "a release\n")
        write(cache / f"v{_FORMAT}-{index:016x}" / "entry", "{}")
        os.utime(cache / f"v{_FORMAT}-{index:016x}", (1_000_000 + index, 1_000_000 + index))
    (cache / f"v{_FORMAT}-{9:016x}").symlink_to(cache / f"v{_FORMAT}-release-0")
    proc = amplint_run(root, "check", "--cache-dir", str(cache), "pkg")
    assert proc.returncode == 1, proc.stderr
    names = {p.name for p in cache.iterdir()}
    assert {f"v{_FORMAT}-release-{index}" for index in range(5)} <= names
    assert {f"v{_FORMAT}-{index:016x}" for index in range(2)}.isdisjoint(names)  # the oldest two
    assert {f"v{_FORMAT}-{index:016x}" for index in range(2, 5)} <= names
    assert (cache / f"v{_FORMAT}-{9:016x}").is_symlink()
    assert (cache / f"v{_FORMAT}-release-0" / "notes.txt").is_file()


def test_a_committed_symlink_cache_is_neither_used_nor_cleaned(tmp_path: Path) -> None:
    root = repository(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    legacy_tag(elsewhere)
    for index in range(6):
        write(elsewhere / f"v{_FORMAT}-{index:016x}" / "data", "not amplint's\n")
    (root / CACHE).symlink_to("../elsewhere")
    before = tree(elsewhere)
    proc = amplint_run(root, "check", "pkg")
    assert proc.returncode == 1  # the findings, checked without the cache
    assert f"{HAZARD_CODE}" in proc.stdout
    assert f"the cache folder {root / CACHE} is a symbolic link" in proc.stderr
    assert tree(elsewhere) == before
    proc = amplint_run(root, "clean")
    assert proc.returncode == 2 and "is a symbolic link" in proc.stderr
    assert (root / CACHE).is_symlink() and tree(elsewhere) == before


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_cache_dir_in_the_source_never_hides_it(tmp_path: Path) -> None:
    # `--cache-dir src` once wrote a `.gitignore` of `*` into src: git and amplint stopped seeing it.
    root = repository(tmp_path / "project")
    before = tree(root / "pkg")
    proc = amplint_run(root, "check", "--cache-dir", "pkg", "pkg")
    assert proc.returncode == 2 and "holds files amplint did not write" in proc.stderr
    assert tree(root / "pkg") == before
    write(root / "pkg" / "new.py", HAZARD)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=root, capture_output=True, text=True
    )
    assert "pkg/new.py" in status.stdout
    again = amplint_run(root, "check", "--no-cache", "pkg")
    assert again.returncode == 1 and "pkg/new.py" in again.stdout


def test_a_new_or_empty_cache_dir_is_made_and_cleaned_whole(tmp_path: Path) -> None:
    root = project(tmp_path / "project")
    (tmp_path / "empty").mkdir()
    for name in ("empty", "nested/new"):
        folder = tmp_path / name
        proc = amplint_run(root, "check", "--cache-dir", str(folder), "pkg")
        assert proc.returncode == 1 and "warning" not in proc.stderr, proc.stderr
        assert (folder / ".gitignore").read_text(encoding="utf-8").splitlines()[-1] == "*"
        assert entries_of(folder)
        proc = amplint_run(root, "clean", "--cache-dir", str(folder))
        assert (proc.returncode, proc.stdout.strip()) == (0, f"removed {folder}")
        assert not folder.exists()
    assert (tmp_path / "nested").is_dir()  # a folder above the cache is never removed
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def entries_of(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and p.parent != folder]


def test_clean_leaves_what_amplint_did_not_write(tmp_path: Path) -> None:
    root = project(tmp_path / "project")
    amplint_run(root, "check", "pkg")
    write(root / CACHE / "mine.txt", "the user's\n")
    write(root / CACHE / ".gitignore", "*.log\n")  # edited by the user: no longer amplint's
    proc = amplint_run(root, "clean")
    assert proc.returncode == 0, proc.stderr
    assert "the folder stays" in proc.stdout
    assert sorted(p.name for p in (root / CACHE).iterdir()) == [".gitignore", "mine.txt"]


def test_clean_never_empties_a_mount_point(tmp_path: Path, tmpfs: Path) -> None:
    root = project(tmp_path / "project")
    legacy_tag(tmpfs)
    write(tmpfs / f"v{_FORMAT}-{0:016x}" / "entry", "{}")
    write(tmpfs / "data.bin", "the volume's\n")
    before = tree(tmpfs)
    proc = amplint_run(root, "clean", "--cache-dir", str(tmpfs))
    assert proc.returncode == 2 and "is a mount point" in proc.stderr
    assert tree(tmpfs) == before
