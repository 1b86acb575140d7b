"""The check run, shared by the command line and the Python API: discover, lint (or fix), filter."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from amplint.config import Settings, load_settings
from amplint.diagnostics import Diagnostic, sort_diagnostics
from amplint.discovery import discover
from amplint.notebook import cell_sources, fix_notebook, is_notebook, lint_notebook, lint_notebook_file
from amplint.results import UNPARSABLE, FileResult, too_large, unparsable_diagnostic, unreadable
from amplint.rule import Rule
from amplint.rules import rules_for
from amplint.source import SourceError, WriteRefused, decode_source, display_path, read_source, shown_lines
from amplint.static.profile import CALLER, Profile, detect

# libcst, the rules, the fixer and the process pool are imported where they are used: a run that
# the cache answers never loads them.


@dataclass
class CheckRun:
    diagnostics: list[Diagnostic] = field(default_factory=list)  # what remains, sorted
    sources: dict[str, str] = field(default_factory=dict)  # display path -> text, for snippets
    files_checked: int = 0
    fixed: int = 0
    applied: list[Diagnostic] = field(default_factory=list)  # the fixes written (or diffed), in order
    diffs: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # internal errors: the run exits 2
    warnings: list[str] = field(default_factory=list)  # worth saying, not failing for (the cache)
    profile: Profile = CALLER  # the precision profile every file was checked under


def project_profile(settings: Settings, files: Sequence[Path]) -> Profile:
    """The precision profile of a run: `precision` from the settings, or detected from the checked
    files, read one at a time as the scan asks for them."""
    from amplint.parallel import read_files

    return settings.configured_profile or settings.with_torch(detect(_texts(read_files(files))))


def _texts(contents: Iterable[tuple[Path, bytes | SourceError]]) -> Iterator[tuple[str, str]]:
    """(display path, text) of each file, decoded only when `detect` asks for it (it stops early). The
    scan looks for ASCII words, so a lenient UTF-8 decode does for a file in another encoding; a
    notebook's text is its code cells, each under the name reports give it."""
    for path, raw in contents:
        if isinstance(raw, SourceError) or b"\0" in raw[:8192]:
            continue  # unreadable or binary: its AMP900 is all there is to say
        display = display_path(path)
        if not is_notebook(path):
            yield display, raw.decode("utf-8", errors="replace")
            continue
        try:
            yield from cell_sources(decode_source(raw, path), display).items()
        except SourceError:
            continue


def _keep(settings: Settings, diagnostic: Diagnostic, path: Path) -> bool:
    # A file that could not be checked is always reported unless ignored by name.
    if diagnostic.code == UNPARSABLE:
        return UNPARSABLE not in settings.ignore and not settings.is_ignored_for(UNPARSABLE, path)
    return True


def run_check(
    paths: Sequence[Path],
    settings: Settings,
    *,
    fix: bool = False,
    diff: bool = False,
    unsafe_fixes: bool = False,
    cache: bool = False,
    jobs: int | None = 1,
) -> CheckRun:
    """Check `paths`. `fix`/`diff` apply or show the safe fixes (the unsafe ones too with
    `unsafe_fixes`); `cache`: use `.amplint_cache/` (read-only with `diff`); `jobs`: worker processes,
    None to decide from the CPUs and the amount of work (see `amplint/parallel.py`)."""
    from amplint.parallel import precheck

    found = discover(paths, settings)
    # The profile comes first: every check and every cache key depends on it.
    # Streamed: each file is read, scanned and let go, so that the run holds no file's bytes.
    profile = project_profile(settings, found.files)
    run = CheckRun(profile=profile)
    store = None
    if cache:
        from amplint.cache import Cache, cache_directory

        store = Cache(cache_directory(settings), settings, readonly=diff, profile=profile)
    # Cache hits, and (without fix/diff) every file checked in-process or in a pool.
    done = precheck(found.files, settings, cache=store, fix=fix or diff, jobs=jobs, profile=profile)
    for path, message in found.problems:
        problem = unparsable_diagnostic(display_path(path), message)
        if _keep(settings, problem, path):
            run.diagnostics.append(problem)
    for path in found.files:
        display = display_path(path)
        result = done.pop(path, None)  # let each result go once reported: memory stays flat
        if result is None:
            from amplint.runner import lint_file

            rules = rules_for(settings, path, profile)
            result = (
                _fix_file(
                    run, path, rules, display, write=fix, unsafe=unsafe_fixes, limit=settings.max_file_size
                )
                if fix or diff
                else (lint_notebook_file if is_notebook(path) else lint_file)(
                    path, rules, display, profile=profile
                )
            )
            if store is not None:
                store.store_checked(path, display, result)
        run.files_checked += 1
        run.errors.extend(result.internal_errors)
        run.warnings.extend(result.warnings)
        if result.source is not None and result.diagnostics:
            # Only reports with findings show snippets, one line each: the run keeps those lines.
            run.sources[display] = shown_lines(result.source.text, {d.line for d in result.diagnostics})
            if is_notebook(path):
                run.sources.update(cell_sources(result.source, display))  # a finding in a cell shows its line
        run.diagnostics.extend(d for d in result.diagnostics if _keep(settings, d, path))
    run.diagnostics = sort_diagnostics(run.diagnostics)
    if store is not None and store.warning is not None:
        run.warnings.append(store.warning)
    return run


def _fix_file(
    run: CheckRun, path: Path, rules: list[type[Rule]], display: str, *, write: bool, unsafe: bool, limit: int
) -> FileResult:
    from amplint.fixes import fix_source, unified_diff, write_atomic
    from amplint.runner import lint_source

    fix, lint = (fix_notebook, lint_notebook) if is_notebook(path) else (fix_source, lint_source)
    try:
        if path.stat().st_size > limit:
            return too_large(path, display, path.stat().st_size, limit)
        source = read_source(path)
    except SourceError as exc:
        return unreadable(path, display, exc)
    profile = run.profile
    outcome = fix(source, rules, display, profile=profile, unsafe=unsafe)
    run.errors.extend(outcome.errors)
    if not outcome.changed:
        return outcome.result
    if not write:
        run.fixed += outcome.fixed
        run.applied.extend(outcome.applied)
        run.diffs.append(unified_diff(display, source.text, outcome.new_text))
        # Report what is there now, not what the fixed text would contain.
        return lint(source, rules, display, profile=profile)
    try:
        write_atomic(source, outcome.new_text, was=source.text)
    except WriteRefused as exc:  # the file is left as it was, and its findings with it
        run.warnings.append(f"{display}: {exc}")
        return lint(source, rules, display, profile=profile)
    except OSError as exc:
        run.errors.append(f"{display}: could not write the fix: {exc}")
        return lint(source, rules, display, profile=profile)
    run.fixed += outcome.fixed  # counted once written: the summary says what the files now hold
    run.applied.extend(outcome.applied)
    outcome.result.source = replace(source, text=outcome.new_text)
    return outcome.result


def check_paths(
    paths: Sequence[str | Path],
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    config: str | Path | None = None,
) -> list[Diagnostic]:
    """Lint files and directories as `amplint check` does, honouring `[tool.amplint]`."""
    resolved = [Path(p) for p in paths]
    settings = load_settings(resolved, Path(config) if config else None)
    settings = settings.with_overrides(select=select, ignore=ignore)
    return run_check(resolved, settings).diagnostics


def check_source(
    source: str,
    path: str = "<string>",
    *,
    select: Sequence[str] = ("AMP",),
    ignore: Sequence[str] = (),
    profile: Profile = CALLER,
) -> list[Diagnostic]:
    """Lint Python source text; no file is read and no configuration is loaded. `profile`: the half
    dtypes the code runs in (`amplint.static.profile`); by default both, as for library code."""
    from amplint.runner import lint_text

    settings = Settings().with_overrides(select=list(select), ignore=list(ignore))
    return lint_text(source, rules_for(settings, Path(path), profile), path, profile=profile).diagnostics
