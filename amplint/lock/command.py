"""`amplint lock`: trace the runtime targets, compare each with `amplint.lock`, write it.

The lockfile is written only when every target traced, and atomically: a failed trace, a check or
a refused write leave it byte for byte as it was.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from amplint import __version__
from amplint.config import Settings
from amplint.diagnostics import Confidence, Diagnostic
from amplint.fixing.confirm import TARGETS, runtime_diagnostic
from amplint.lock.diff import diff, settings_changes
from amplint.lock.file import LOCK_NAME, Lockfile, LockfileError, Target, read, write
from amplint.lock.record import record, settings_of
from amplint.rules.amp110_dtype_change import DIFFERENCE, DtypeChange
from amplint.runtime.graph import DtypeGraph
from amplint.source import WriteRefused, display_path

Mode = Literal["write", "check", "update"]
# What differs (`extra[DIFFERENCE]`) in an AMP110 finding about a whole target.
TARGET_ADDED, TARGET_REMOVED, SETTINGS_CHANGED = "target-added", "target-removed", "settings"


class LockError(Exception):
    """A usage error or a failed trace: nothing was written; the message says what to do."""


@dataclass
class LockRun:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    status: str = ""
    # Whether the run found differences that it did not write (`--check`, or a write that needs --update).
    differs: bool = False


def lock_path(settings: Settings, given: Path | None) -> Path:
    return given if given is not None else settings.root / LOCK_NAME


def run_lock(
    settings: Settings, targets: Sequence[str] | None, *, mode: Mode, path: Path, timeout: float | None
) -> LockRun:
    """Trace the targets and write, update or check the lock at `path`; `timeout`: seconds per trace
    (None: the configured `timeout`, or 300)."""
    from amplint.runtime.child import ChildError, trace_in_child
    from amplint.runtime.target import TargetError, target_specs, trace_timeout

    shown = display_path(path)
    try:
        specs = target_specs(settings.runtime, list(targets) if targets else None, settings.root)
        seconds = trace_timeout(settings.runtime, timeout)
    except TargetError as exc:
        raise LockError(str(exc)) from None
    if not specs:
        raise LockError(
            "amplint lock needs a runtime target: TARGET (file.py:factory), or `targets` in [tool.amplint.runtime]"
        )
    old = _read(path, shown) if path.exists() else None
    if old is None and mode == "check":
        raise LockError(f"{shown} does not exist: write it with `amplint lock` and commit it")
    traced: list[tuple[Target, DtypeGraph]] = []
    for name, spec in zip(_names(specs), specs, strict=True):
        try:
            # The lock records dtypes only: no measuring or values replay, no second trace under CPU
            # autocast.
            graph = trace_in_child({**spec, "measure": False, "values": False, "compare_cpu": False}, seconds)
        except (ChildError, TargetError) as exc:
            raise LockError(f"could not trace {name}; {shown} is left as it was: {exc}") from None
        traced.append((record(name, settings_of(spec), graph, settings.root), graph))

    run = LockRun()
    torch_version = traced[0][1].torch_version
    if old is not None:
        run.warnings += _version_notes(old, torch_version, shown)
        run.diagnostics = _compare(old, traced, every_target=not targets, path=path)
    if mode == "check":
        run.differs = bool(run.diagnostics)
        run.status = f"{shown} differs from the trace" if run.differs else f"{shown} matches the trace"
        return run
    if mode == "write" and old is not None:
        # A target the lock does not have yet is what this write adds; any other difference is
        # accepted only with --update.
        if any(d.extra.get(DIFFERENCE) != TARGET_ADDED for d in run.diagnostics):
            run.differs = True
            run.status = f"{shown} differs from the trace; accept the changes with `amplint lock --update`"
            return run
        if not run.diagnostics:
            run.status = f"{shown} is up to date"
            return run
        run.diagnostics = []
    # Targets named on the command line replace theirs; the lock's other targets stay as they are.
    names = {target.name for target, _ in traced}
    kept = (
        [target for target in old.targets if target.name not in names] if old is not None and targets else []
    )
    try:
        lock = Lockfile(__version__, torch_version, (*kept, *(target for target, _ in traced)))
        write(path, lock, roots=[settings.root])
    except WriteRefused as exc:
        raise LockError(f"{shown}: {exc}") from None
    run.status = f"wrote {shown} ({len(traced)} target(s) traced)"
    return run


def _names(specs: list[dict[str, Any]]) -> list[str]:
    """Each target as the lock names it: as configured, with its settings when the same target is
    traced under several (`model.py:factory [dtype=float16]`)."""
    counts = Counter(spec["name"] for spec in specs)
    names = []
    for spec in specs:
        words = " ".join(f"{key}={value}" for key, value in settings_of(spec).items())
        names.append(spec["name"] if counts[spec["name"]] == 1 else f"{spec['name']} [{words}]")
    return names


def _read(path: Path, shown: str) -> Lockfile:
    try:
        return read(path)
    except LockfileError as exc:
        where = f"{shown}:{exc.line}" if exc.line else shown
        raise LockError(f"{where}: {exc.message}") from None


def _version_notes(old: Lockfile, torch_version: str, shown: str) -> list[str]:
    notes = []
    if old.torch != torch_version:
        notes.append(
            f"{shown} was recorded with torch {old.torch}, this trace ran torch {torch_version}: autocast's "
            "op lists and the names of ops differ between versions, so a difference may come from the upgrade"
        )
    if old.amplint != __version__:
        notes.append(f"{shown} was written by amplint {old.amplint}, this is amplint {__version__}")
    return notes


def _compare(
    old: Lockfile, traced: list[tuple[Target, DtypeGraph]], *, every_target: bool, path: Path
) -> list[Diagnostic]:
    found: list[Diagnostic] = []
    for new, graph in traced:
        locked = old.target(new.name)
        if locked is None:
            message = f"target `{new.name}` is not in the lockfile yet"
            found.append(_at_lock(path, 1, message, new.name, TARGET_ADDED))
            continue
        changed = settings_changes(locked, new)
        if changed:
            message = f"target `{new.name}` was recorded with other settings ({'; '.join(changed)})"
            found.append(_at_lock(path, locked.line, message, new.name, SETTINGS_CHANGED))
            continue
        for finding in DtypeChange.check_lock(diff(locked, new), graph):
            diagnostic = runtime_diagnostic(DtypeChange, finding, new.name)
            if diagnostic is not None:
                found.append(diagnostic)
    if every_target:
        names = {new.name for new, _ in traced}
        for gone in (target for target in old.targets if target.name not in names):
            message = f"target `{gone.name}` is in the lockfile but no longer a runtime target"
            found.append(_at_lock(path, gone.line, message, gone.name, TARGET_REMOVED))
    return found


def _at_lock(path: Path, line: int, message: str, target: str, difference: str) -> Diagnostic:
    """A difference of a whole target, pointed at its place in the lockfile."""
    return Diagnostic(
        code=DtypeChange.code,
        name=DtypeChange.name,
        message=message,
        path=display_path(path),
        line=line,
        column=1,
        end_line=line,
        end_column=1,
        severity=DtypeChange.severity,
        confidence=Confidence.CONFIRMED,
        help="`amplint lock --update` records the targets as they trace now",
        extra={TARGETS: [target], DIFFERENCE: difference},
    )
