"""Checking many files at once: each file's bytes are hashed; the cache answers what it can; what is
left is checked in a pool of worker processes when there is enough of it to pay for starting them,
and in this process otherwise.

No file's bytes are held longer than one file takes: the precision of each file is settled first
(`amplint.pipeline.precision`: it takes part in every cache key and every check), and each check, a
worker's included, reads its file itself. A result is cached only when the file still hashes to the key it
was looked up by, so an entry always describes the content it is keyed by, even when the file
changes during the run. Results come
back keyed by path; the caller walks the files in their own (sorted) order, so the output does not
depend on which worker finished first. The pool works with every start method (`fork`, `forkserver`,
`spawn`): a worker receives the settings and the files' precision once and imports what it needs
itself, and the parent imports neither libcst nor multiprocessing unless it has to.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from amplint.config import Settings
from amplint.diagnostics import Diagnostic
from amplint.pipeline.precision import Precision
from amplint.results import FileResult, unparsable_diagnostic, unreadable
from amplint.source import SourceError, SourceFile, decode_source, display_path, read_bytes, shown_lines
from amplint.static.profile import CALLER, Profile

if TYPE_CHECKING:
    from amplint.pipeline.cache import Cache

__all__ = [
    "AUTO_MIN_BYTES",
    "AUTO_MIN_FILES",
    "check_bytes",
    "collect_less",
    "precheck",
    "read_files",
    "usable_cpus",
]

# Starting a worker costs about as much as checking 100-300 kB of code (interpreter start and the
# libcst import; more under `spawn`). Below both of these the automatic choice checks in-process.
AUTO_MIN_FILES = 8
AUTO_MIN_BYTES = 400_000


# A check builds libcst trees of up to a million nodes that live while their file is checked. Python's
# collector by default looks at new objects every 700 allocations and soon walks the older ones too:
# about a tenth of a check's time. Looking less often frees the same objects: a checked file's
# tree holds no cycle (`FileContext.release`), so it goes as soon as the run lets go of it.
_GC_THRESHOLD = (10_000, 10, 10)


def collect_less() -> None:
    """Set this process's garbage collector for checking files (see `_GC_THRESHOLD`); what is alive
    now (the imported modules, the settings) is not walked again."""
    gc.freeze()
    gc.set_threshold(*_GC_THRESHOLD)


@dataclass
class _Task:
    path: Path
    display: str
    size: int
    key: str | None  # the cache key of the bytes read when the cache was asked


def _bytes_of(task: _Task, limit: int) -> bytes | SourceError:
    """The file's bytes, read when it is checked: a run keeps no file's bytes longer than that."""
    return _read(task.path, limit)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return int(counter() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def read_files(files: Sequence[Path], limit: int) -> Iterator[tuple[Path, bytes | SourceError]]:
    """Each file with its bytes (none over `limit`), or why it cannot be read, one at a time (none
    is kept)."""
    for path in files:
        yield path, _read(path, limit)


def _read(path: Path, limit: int) -> bytes | SourceError:
    try:
        return read_bytes(path, limit)
    except SourceError as exc:
        return exc


def check_bytes(
    path: Path, display: str, raw: bytes, settings: Settings, profile: Profile = CALLER
) -> FileResult:
    """Check one file's content: decode, pre-scan, parse and run the rules that apply to it."""
    from amplint.pipeline.notebook import is_notebook, lint_notebook
    from amplint.rules import rules_for
    from amplint.rules.runner import lint_source

    try:
        source = decode_source(raw, path)
    except SourceError as exc:
        return unreadable(path, display, exc)
    rules = rules_for(settings, path, profile)
    if is_notebook(path):
        return lint_notebook(source, rules, display, profile=profile)
    return lint_source(source, rules, display, profile=profile, conditional=settings.show_conditional)


def precheck(
    files: Sequence[Path],
    settings: Settings,
    *,
    cache: Cache | None,
    fix: bool = False,
    jobs: int | None = None,
    precision: Precision | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[Path, FileResult]:
    """Results for the files that can be settled here. Without `fix`: every file. With `fix`: only
    cache hits that carry no fix (the rest must go through the fixer, which does not trust the cache
    for a file it may edit). `progress` is told how many more files are settled, as they are."""

    precision = precision or Precision()
    done: dict[Path, FileResult] = {}
    tasks: list[_Task] = []
    if fix and cache is None:
        return done
    for path in files:
        display = display_path(path)
        raw = _read(path, settings.max_file_size)
        if isinstance(raw, SourceError):
            if not fix:
                done[path] = unreadable(path, display, raw)
            continue
        key = cache.key(path, display, raw) if cache is not None else None
        if cache is not None and key is not None:
            cached = cache.load(key, display)
            if cached is not None and not (fix and any(d.fix is not None for d in cached.diagnostics)):
                done[path] = cache.result(path, display, raw, cached)
                continue
        if not fix:
            tasks.append(_Task(path, display, len(raw), key))
    tell = progress or (lambda count: None)
    tell(len(done))
    if not tasks:
        return done
    workers = _workers(jobs, tasks)
    results: dict[int, FileResult] = {}
    if workers > 1:
        with _safe_path():
            results = _run_pool(tasks, settings, precision, workers, tell)
    for index, task in enumerate(tasks):
        result = results.get(index)
        if result is None:
            raw = _bytes_of(task, settings.max_file_size)
            result = (
                unreadable(task.path, task.display, raw)
                if isinstance(raw, SourceError)
                else check_bytes(task.path, task.display, raw, settings, precision.of(task.display))
            )
            result.source = _shown(result)  # a pool's results come back trimmed already
            tell(1)
        if cache is not None and task.key is not None and _unchanged(cache, task):
            cache.store(task.key, result)
        done[task.path] = result
    return done


def _unchanged(cache: Cache, task: _Task) -> bool:
    """The file still holds the bytes its cache key was computed from."""
    raw = _read(task.path, cache.settings.max_file_size)
    return isinstance(raw, bytes) and cache.key(task.path, task.display, raw) == task.key


def _workers(jobs: int | None, tasks: Sequence[_Task]) -> int:
    """How many processes: `jobs` when given (1: none), else one per usable CPU when the work is
    large enough to pay for starting them."""
    if len(tasks) < 2 or (jobs is not None and jobs <= 1):
        return 1
    if jobs is not None:
        return min(jobs, len(tasks))
    cpus = usable_cpus()
    size = sum(task.size for task in tasks)
    if cpus < 2 or len(tasks) < AUTO_MIN_FILES or size < AUTO_MIN_BYTES:
        return 1
    return min(cpus, len(tasks))


def _batches(tasks: Sequence[_Task], workers: int) -> list[list[int]]:
    """Indices of the tasks, largest files first, grouped into batches of similar size (a few per
    worker, so that one slow batch does not leave the other workers idle at the end)."""
    ordered = sorted(range(len(tasks)), key=lambda index: tasks[index].size, reverse=True)
    target = max(sum(task.size for task in tasks) // (workers * 10), 1)
    batches: list[list[int]] = []
    current: list[int] = []
    size = 0
    for index in ordered:
        current.append(index)
        size += tasks[index].size
        if size >= target:
            batches.append(current)
            current, size = [], 0
    if current:
        batches.append(current)
    return batches


# (task index, diagnostics, internal errors, warnings, what a report shows of the file's text,
# `FileResult.unchecked`)
_Outcome = tuple[int, list[Diagnostic], list[str], list[str], SourceFile | None, bool]
_worker_settings: Settings | None = None
_worker_precision: Precision = Precision()


def _initialize(settings: Settings, precision: Precision, parent: int | None) -> None:
    global _worker_settings, _worker_precision
    _worker_settings, _worker_precision = settings, precision
    _die_with_parent(parent)
    collect_less()


def _die_with_parent(parent: int | None) -> None:
    """End this worker when the process that started it ends, however it ends (SIGKILL included):
    on Linux the kernel sends SIGKILL then; elsewhere a thread watches for the parent to be gone. (A
    forkserver, which starts workers on some platforms, ends with the run's process in turn.)
    `parent`: the run's pid where it forks the workers itself; a run that ended before this worker
    got here has left it another parent already, which the worker could not tell from its own."""
    parent = os.getppid() if parent is None else parent
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        registered = libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        registered = False
    if os.getppid() != parent:  # gone before, or while, the request was made
        os._exit(1)
    if not registered:
        threading.Thread(target=_watch, args=(parent,), daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def _check_batch(batch: list[tuple[int, str, str]]) -> list[_Outcome]:
    """Check files in a worker, which reads them itself: the parent sends paths, not bytes."""
    assert _worker_settings is not None, "the pool initializer sets the settings"
    outcomes: list[_Outcome] = []
    for index, path, display in batch:
        raw = _read(Path(path), _worker_settings.max_file_size)
        if isinstance(raw, SourceError):
            result = unreadable(Path(path), display, raw)
        else:
            result = check_bytes(Path(path), display, raw, _worker_settings, _worker_precision.of(display))
        outcomes.append(
            (
                index,
                result.diagnostics,
                result.internal_errors,
                result.warnings,
                _shown(result),
                result.unchecked,
            )
        )
    return outcomes


def _shown(result: FileResult) -> SourceFile | None:
    """What a run keeps of a checked file's text, only for a report's snippets: the lines findings
    are on (a notebook whole, whose cells are shown by name); nothing for a file without findings.
    A worker sends it back with the findings, so the parent neither reads nor decodes the file again."""
    from amplint.pipeline.notebook import is_notebook

    if not result.diagnostics or result.source is None:
        return None
    if is_notebook(result.path):
        return result.source
    return replace(result.source, text=shown_lines(result.source.text, {d.line for d in result.diagnostics}))


@contextlib.contextmanager
def _safe_path() -> Iterator[None]:
    """PYTHONSAFEPATH (Python 3.11+) while the pool lives: a worker that `spawn` or `forkserver`
    starts, and their helper processes, are new interpreters run with `-c`, which would put the
    working directory (the checked repository) first on the import path, where a repository's own
    `multiprocessing.py` would run in place of the standard library's."""
    before = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONSAFEPATH"]
        else:
            os.environ["PYTHONSAFEPATH"] = before


def _run_pool(
    tasks: Sequence[_Task],
    settings: Settings,
    precision: Precision,
    workers: int,
    tell: Callable[[int], None],
) -> dict[int, FileResult]:
    """Check the tasks in worker processes. When a worker dies (a crash in a parser, a kill by a
    signal), the files it had not reported are checked again one at a time in a fresh worker, and
    the one that kills that worker too gets an AMP900 saying so: one file's crash is one diagnostic,
    never a lost run. A batch that failed otherwise (a result that would not pickle) is left out,
    and so checked again in this process, where a real bug raises as it would without the pool."""
    import multiprocessing

    results: dict[int, FileResult] = {}
    if multiprocessing.get_start_method() == "fork":
        # Workers forked from this process find libcst and the rules imported: once here, not once
        # in each worker.
        from amplint.rules import all_rules
        from amplint.rules.runner import lint_source  # noqa: F401

        all_rules()
    broken = _pool_round(tasks, _batches(tasks, workers), settings, precision, workers, results, tell)
    while broken:
        # One worker, one file at a time: the first file left unreported is the one it died on.
        broken = _pool_round(tasks, [[index] for index in broken], settings, precision, 1, results, tell)
        if broken:
            index = broken.pop(0)
            task = tasks[index]
            results[index] = FileResult(
                task.path, task.display, None, [unparsable_diagnostic(task.display, _CRASHED)]
            )
    return results


_CRASHED = "the worker process checking it crashed (killed by a signal, or a fault in a parser); not checked"


def _pool_round(
    tasks: Sequence[_Task],
    batches: list[list[int]],
    settings: Settings,
    precision: Precision,
    workers: int,
    results: dict[int, FileResult],
    tell: Callable[[int], None],
) -> list[int]:
    """Check `batches` in a pool of `workers`, adding to `results`; the task indices that a dead
    worker left unreported, in order (the first is where a one-worker pool died)."""
    import multiprocessing
    from concurrent.futures import Future, ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context()
    forked = context.get_start_method() == "fork"
    executor = ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_initialize,
        initargs=(settings, precision, os.getpid() if forked else None),
    )
    broken: list[int] = []
    try:
        futures: list[tuple[list[int], Future[list[_Outcome]]]] = [
            (
                batch,
                executor.submit(
                    _check_batch,
                    [(i, os.fspath(tasks[i].path), tasks[i].display) for i in batch],
                ),
            )
            for batch in batches
        ]
        for batch, future in futures:
            try:
                outcomes = future.result()
            except BrokenProcessPool:
                broken.extend(batch)
                continue
            except Exception:
                continue
            for index, diagnostics, errors, warnings, shown, unchecked in outcomes:
                task = tasks[index]
                results[index] = FileResult(
                    task.path, task.display, shown, diagnostics, errors, warnings, unchecked=unchecked
                )
            tell(len(outcomes))
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return broken
