"""The process pool, through the command line on real files: the same report as checking file by file,
whatever the start method, with internal errors and unparsable files reported as without it."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import HAZARD, HAZARD_CODE, OTHERS, amplint_run, write

from amplint import rules
from amplint.config import Settings
from amplint.pipeline.check import run_check
from amplint.rule import Rule
from amplint.static.context import FileContext, Finding

CLEAN = "import torch\n\n\ndef forward(x):\n    return torch.relu(x)\n"


def many_files(root: Path, count: int = 48) -> Path:
    kinds = (
        HAZARD,
        OTHERS,
        CLEAN,
        "def f(:\n    pass\n",  # AMP900: syntax error
        "# amplint: noqa\n" + HAZARD,
        HAZARD.replace("GradScaler()\n", f"GradScaler()  # noqa: {HAZARD_CODE}\n"),
    )
    for index in range(count):
        write(
            root / "pkg" / f"sub{index % 4}" / f"m{index:02}.py", kinds[index % len(kinds)] + f"# {index}\n"
        )
    (root / "pkg" / "blob.py").write_bytes(b"\x00binary")  # AMP900: not text
    return root


def run(root: Path, *args: str, start_method: str | None = None) -> subprocess.CompletedProcess[str]:
    if start_method is None:
        return amplint_run(root, "check", "--no-cache", *args, "pkg")
    script = (
        "import multiprocessing, sys\n"
        f"multiprocessing.set_start_method({start_method!r})\n"
        "from amplint.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script, "check", "--no-cache", *args, "pkg"],
        cwd=root,
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_pool_and_sequential_reports_are_identical(tmp_path: Path, fmt: str) -> None:
    root = many_files(tmp_path)
    sequential = run(root, "--format", fmt, "--jobs", "1")
    pooled = run(root, "--format", fmt, "--jobs", "3")
    assert sequential.returncode == pooled.returncode == 1, sequential.stderr + pooled.stderr
    assert pooled.stdout == sequential.stdout
    assert pooled.stderr == sequential.stderr
    assert "AMP900" in sequential.stdout


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_pool_works_with_every_start_method(tmp_path: Path, method: str) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} is not available on this platform")
    root = many_files(tmp_path, count=12)
    sequential = run(root, "--jobs", "1")
    pooled = run(root, "--jobs", "2", start_method=method)
    assert pooled.returncode == sequential.returncode == 1, pooled.stderr
    assert pooled.stdout == sequential.stdout
    assert "Traceback" not in pooled.stderr


def test_pool_and_cache_together(tmp_path: Path) -> None:
    root = many_files(tmp_path)
    expected = run(root, "--format", "json", "--jobs", "1").stdout
    cold = amplint_run(root, "check", "--format", "json", "--jobs", "2", "pkg")
    warm = amplint_run(root, "check", "--format", "json", "--jobs", "2", "pkg")
    assert cold.stdout == warm.stdout == expected


def test_rule_crash_in_a_worker_is_reported_as_without_the_pool(tmp_path: Path) -> None:
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("needs the fork start method, so that the workers inherit the broken rule")
    root = many_files(tmp_path, count=12)
    script = (
        "import multiprocessing, sys\n"
        "multiprocessing.set_start_method('fork')\n"
        "from amplint.rules import rule_by_code\n"
        "def broken(self, ctx):\n"
        "    raise RuntimeError('boom')\n"
        f"rule_by_code({HAZARD_CODE!r}).check = broken\n"
        "from amplint.cli import main\n"
        "raise SystemExit(main(sys.argv[1:]))\n"
    )

    def crashed(jobs: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", script, "check", "--no-cache", "--jobs", jobs, "pkg"],
            cwd=root,
            capture_output=True,
            text=True,
        )

    sequential, pooled = crashed("1"), crashed("2")
    assert sequential.returncode == pooled.returncode == 2
    assert pooled.stdout == sequential.stdout
    assert pooled.stderr == sequential.stderr
    crashed_on = f"{HAZARD_CODE} crashed on"
    assert pooled.stderr.count(crashed_on) == sequential.stderr.count(crashed_on) > 0
    assert "RuntimeError: boom" in pooled.stderr


def test_jobs_must_be_a_positive_number(tmp_path: Path) -> None:
    root = many_files(tmp_path, count=2)
    for value in ("0", "-1", "many"):
        proc = amplint_run(root, "check", "--jobs", value, "pkg")
        assert proc.returncode == 2
        assert "--jobs" in proc.stderr
        assert "Traceback" not in proc.stderr


def test_jobs_decides_whether_workers_start(tmp_path: Path) -> None:
    root = many_files(tmp_path, count=12)

    def imported(*args: str) -> set[str]:
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "amplint", "check", "--no-cache", *args, "pkg"],
            cwd=root,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 1, proc.stderr
        return {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if "|" in line}

    assert "concurrent.futures.process" in imported("--jobs", "2")
    assert "concurrent.futures.process" not in imported("--jobs", "1")
    # A dozen small files is not worth a worker: the default checks them in-process.
    assert "concurrent.futures.process" not in imported()


class _Crasher(Rule):
    """Kills the process checking a file that says CRASH, as a segfault in a parser would."""

    code = "AMP999"
    name = "crasher"
    summary = "kills its process"

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        if "CRASH" in ctx.module.code:
            os.kill(os.getpid(), signal.SIGKILL)
        yield Finding(ctx.module.body[0], "checked")


@pytest.mark.skipif(
    multiprocessing.get_start_method() != "fork",
    reason="the probe rule reaches the workers only through fork",
)
def test_a_worker_that_dies_costs_one_diagnostic_for_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rules, "rules_for", lambda settings, path, profile: [_Crasher])
    files = [write(tmp_path / f"m{index:02}.py", f"x = {index}\n") for index in range(12)]
    write(tmp_path / "m05.py", "x = 'CRASH'\n")
    run = run_check(files, Settings(root=tmp_path), jobs=2, cache=False)
    by_file = {Path(d.path).name: (d.code, d.message) for d in run.diagnostics}
    assert by_file.pop("m05.py") == (
        "AMP900",
        "the worker process checking it crashed (killed by a signal, or a fault in a parser); not checked",
    )
    assert by_file == {f"m{index:02}.py": ("AMP999", "checked") for index in range(12) if index != 5}


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found |= {int(child) for child in (task / "children").read_text().split()}
    except FileNotFoundError:  # the process or one of its threads ended meanwhile
        pass
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent's reaping is left


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the process tree from /proc (Linux)")
@pytest.mark.parametrize("signal_", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_the_workers_end_with_the_run(tmp_path: Path, signal_: signal.Signals) -> None:
    for index in range(3000):
        write(tmp_path / f"m{index}.py", HAZARD + f"# {index}\n")
    run = subprocess.Popen(
        [sys.executable, "-m", "amplint", "check", ".", "--no-cache", "--jobs", "2"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    while len(workers) < 2 and run.poll() is None:
        workers = _children(run.pid)
    assert len(workers) >= 2, "the run ended before its workers were seen"
    run.send_signal(signal_)
    run.wait()
    # The kernel ends them as their parent ends. Before, they checked every file left, for
    # minutes; the minute here is only a guard against waiting for ever.
    guard = time.monotonic() + 60
    while any(_alive(pid) for pid in workers) and time.monotonic() < guard:
        time.sleep(0.05)
    assert not [pid for pid in workers if _alive(pid)]
