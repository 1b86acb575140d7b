"""The check run, shared by the command line and the Python API: discover, lint (or fix), filter."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from amplint.config import ConfigError, Settings, nearest_settings
from amplint.diagnostics import Confidence, Diagnostic, sort_diagnostics
from amplint.pipeline.discovery import discover
from amplint.pipeline.notebook import (
    cell_sources,
    fix_notebook,
    is_notebook,
    lint_notebook,
    lint_notebook_file,
)
from amplint.pipeline.precision import Precision, project_precision
from amplint.pipeline.progress import Progress
from amplint.results import UNPARSABLE, FileResult, too_large, unparsable_diagnostic, unreadable
from amplint.rule import Rule
from amplint.rules import check_codes, rules_for
from amplint.source import (
    SourceError,
    SourceFile,
    WriteRefused,
    decode_source,
    display_path,
    read_source,
    shown_lines,
)

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
    # The precision each file was checked under: one per configuration, the last one here.
    precision: Precision = field(default_factory=Precision)
    # Findings not shown because their half precision rests on nothing in the project.
    conditional: int = 0
    # Files where the rules resting on half values did not run, as all their findings would have
    # been conditional (`FileResult.unchecked`).
    unchecked: int = 0
    show_conditional: bool = False  # shown, and fixed, all the same (--show-conditional)
    # `--deep`: per file, how many candidates the traces confirmed, refuted, did not reach, and
    # reached without a verdict (`amplint.pipeline.deep.counts`).
    traced: dict[str, dict[str, int]] = field(default_factory=dict)
    # The folders a fix may write in: those checked and the project's (`write_roots`).
    roots: tuple[Path, ...] = ()


def write_roots(paths: Sequence[Path], settings: Settings) -> tuple[Path, ...]:
    """The folders amplint writes in for a run over `paths`: each folder named, the folder of each
    file named, and the project root. A file whose real place lies outside them (through a
    symbolic link) is checked, never written."""
    return (*(path if path.is_dir() else path.parent for path in paths), settings.root)


def _keep(settings: Settings, diagnostic: Diagnostic, path: Path) -> bool:
    # A file that could not be checked is always reported unless ignored by name.
    if diagnostic.code == UNPARSABLE:
        return UNPARSABLE not in settings.ignore and not settings.is_ignored_for(UNPARSABLE, path)
    return settings.show_conditional or diagnostic.confidence != Confidence.CONDITIONAL


def _kept(
    run: CheckRun, settings: Settings, diagnostics: Iterable[Diagnostic], path: Path
) -> list[Diagnostic]:
    """The diagnostics a report shows; the conditional ones it hides are counted in `run`."""
    shown = []
    for diagnostic in diagnostics:
        if _keep(settings, diagnostic, path):
            shown.append(diagnostic)
        elif diagnostic.confidence == Confidence.CONDITIONAL:
            run.conditional += 1
    return shown


def run_check(
    paths: Sequence[Path],
    settings: Settings,
    *,
    fix: bool = False,
    diff: bool = False,
    unsafe_fixes: bool = False,
    cache: bool = False,
    jobs: int | None = 1,
    progress: Progress | None = None,
) -> CheckRun:
    """Check `paths`. `fix`/`diff` apply or show the safe fixes (the unsafe ones too with
    `unsafe_fixes`); `cache`: use `.amplint_cache/` (read-only with `diff`); `jobs`: worker processes,
    None to decide from the CPUs and the amount of work (see `amplint/pipeline/pool.py`); `progress`:
    told of every file settled."""
    if progress is not None:
        progress.begin("finding files")
    found = discover(paths, settings)
    if progress is not None:
        progress.total = len(found.files)
        progress.begin("reading configurations")
    run = CheckRun(show_conditional=settings.show_conditional, roots=write_roots(paths, settings))
    for path, message in found.problems:
        problem = unparsable_diagnostic(display_path(path), message)
        if _keep(settings, problem, path):
            run.diagnostics.append(problem)
    # Each file is checked under the nearest configuration above it: one group per configuration.
    # One that cannot be used (broken TOML, a bad value, a code that matches no rule) is one
    # diagnostic, and the files under it go unchecked; the others are checked.
    check_codes(settings)
    settings_of = nearest_settings(settings)
    groups: dict[int, tuple[Settings, list[Path]]] = {}
    broken: set[str] = set()
    for path in found.files:
        try:
            own = settings_of(path)
            if id(own) not in groups and own is not settings:
                check_codes(own)
        except ConfigError as exc:
            where = display_path(exc.path or path.parent)
            if where not in broken:
                broken.add(where)
                message = f"configuration not used, the files under it not checked: {exc}"
                run.diagnostics.append(unparsable_diagnostic(where, message))
            if progress is not None:
                progress.advance()
            continue
        if own is settings or not own.is_excluded(path, is_dir=False):
            groups.setdefault(id(own), (own, []))[1].append(path)
        elif progress is not None:
            progress.advance()
    for own, files in groups.values():
        _check_files(
            run,
            files,
            own,
            fix=fix,
            diff=diff,
            unsafe_fixes=unsafe_fixes,
            cache=cache,
            jobs=jobs,
            progress=progress,
        )
    run.diagnostics = sort_diagnostics(run.diagnostics)
    return run


def _check_files(
    run: CheckRun,
    files: list[Path],
    settings: Settings,
    *,
    fix: bool,
    diff: bool,
    unsafe_fixes: bool,
    cache: bool,
    jobs: int | None,
    progress: Progress | None,
) -> None:
    """Check `files`, all under the one configuration `settings`, into `run`."""
    from amplint.pipeline.pool import precheck

    # The precision comes first: every check and every cache key depends on it.
    if progress is not None:
        progress.begin("reading execution modes")
    precision = project_precision(settings, files)
    if progress is not None:
        progress.begin("")
    run.precision = precision
    store = None
    if cache:
        from amplint.pipeline.cache import Cache, cache_directory

        store = Cache(cache_directory(settings), settings, readonly=diff, precision=precision)
        if store.refused is not None:
            # A folder the configuration names is an error to fix; the default one, only not used.
            if settings.cache_dir is not None:
                run.errors.append(store.refused)
            else:
                run.warnings.append(f"{store.refused}; going on without it")
            store = None
    # Cache hits, and (without fix/diff) every file checked in-process or in a pool.
    done = precheck(
        files,
        settings,
        cache=store,
        fix=fix or diff,
        jobs=jobs,
        precision=precision,
        progress=progress.advance if progress is not None else None,
    )
    for path in files:
        display = display_path(path)
        result = done.pop(path, None)  # let each result go once reported: memory stays flat
        if result is None:
            from amplint.rules.runner import lint_file

            profile = precision.of(display)
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
            if progress is not None:
                progress.advance()
        run.files_checked += 1
        run.unchecked += result.unchecked
        run.errors.extend(result.internal_errors)
        run.warnings.extend(result.warnings)
        if result.source is not None and result.diagnostics:
            # Only reports with findings show snippets, one line each: the run keeps those lines.
            run.sources[display] = shown_lines(result.source.text, {d.line for d in result.diagnostics})
            if is_notebook(path):
                run.sources.update(cell_sources(result.source, display))  # a finding in a cell shows its line
        run.diagnostics.extend(_kept(run, settings, result.diagnostics, path))
    if store is not None and store.warning is not None:
        run.warnings.append(store.warning)


def _fix_file(
    run: CheckRun, path: Path, rules: list[type[Rule]], display: str, *, write: bool, unsafe: bool, limit: int
) -> FileResult:
    try:
        source = read_source(path, limit)
    except SourceError as exc:
        return unreadable(path, display, exc)
    return _fixed(run, source, path, rules, display, unsafe=unsafe, diff=not write, write=write)


def _fixed(
    run: CheckRun,
    source: SourceFile,
    path: Path,
    rules: list[type[Rule]],
    display: str,
    *,
    unsafe: bool,
    diff: bool,
    write: bool,
) -> FileResult:
    """Fix `source` (the unsafe fixes too with `unsafe`). With `diff` the diff goes into `run` and
    the result is the code as it is; else the fixed text stands (written to the file with `write`,
    where a refused write leaves the code as it is) and the result holds it and what remains."""
    from amplint.fixing.edits import fix_source, unified_diff, write_atomic
    from amplint.rules.runner import lint_source

    fix, lint = (fix_notebook, lint_notebook) if is_notebook(path) else (fix_source, lint_source)
    profile = run.precision.of(display)
    outcome = fix(source, rules, display, profile=profile, unsafe=unsafe, conditional=run.show_conditional)
    run.errors.extend(outcome.errors)
    if not outcome.changed:
        return outcome.result
    if diff:
        run.fixed += outcome.fixed
        run.applied.extend(outcome.applied)
        marks = outcome.marks() if unsafe else ()  # which hunks change numerics on purpose
        run.diffs.append(unified_diff(display, source.text, outcome.new_text, marks))
        # Report what is there now, not what the fixed text would contain.
        return lint(source, rules, display, profile=profile)
    if write:
        try:
            write_atomic(source, outcome.new_text, was=source.text, roots=run.roots)
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


STDIN = "-"


def check_stdin(
    raw: bytes,
    filename: str | None,
    settings: Settings,
    *,
    fix: bool = False,
    diff: bool = False,
    unsafe_fixes: bool = False,
) -> tuple[CheckRun, bytes | None]:
    """Check code read from standard input as an editor or a formatter hands it over: as the file
    `filename` (its per-file ignores apply and reports name it; `-` without one), which need not
    exist. With `fix`, also the fixed code as bytes in the input's encoding (the input itself when
    nothing was fixed); `diff` adds the diff to the run. Nothing is written, nothing cached."""
    path = Path(filename) if filename else Path(STDIN)
    display = display_path(path) if filename else STDIN
    if len(raw) > settings.max_file_size:
        return _finish(
            CheckRun(files_checked=1, show_conditional=settings.show_conditional),
            too_large(path, display, len(raw), settings.max_file_size),
            settings,
            path,
        ), (raw if fix else None)
    try:
        source = decode_source(raw, path)
    except SourceError as exc:
        return _finish(
            CheckRun(files_checked=1, show_conditional=settings.show_conditional),
            unreadable(path, display, exc),
            settings,
            path,
        ), (raw if fix else None)
    run, fixed = check_source(source, display, settings, fix=fix, diff=diff, unsafe_fixes=unsafe_fixes)
    if not fix:
        return run, None
    return run, raw if fixed is None else source.encode(fixed)


def check_source(
    source: SourceFile,
    display: str,
    settings: Settings,
    *,
    fix: bool = False,
    diff: bool = False,
    unsafe_fixes: bool = False,
) -> tuple[CheckRun, str | None]:
    """Check decoded code as the file `source.path` (which need not exist); with `fix`, also the
    fixed text (None when nothing was fixed). Nothing is written, nothing cached. The language
    server checks an editor's text this way: never through bytes, so no encoding can lose a
    character of it."""
    check_codes(settings)
    path = source.path
    run = CheckRun(files_checked=1, show_conditional=settings.show_conditional)
    data = source.text.encode("utf-8", errors="surrogatepass")
    if len(data) > settings.max_file_size:
        return _finish(run, too_large(path, display, len(data), settings.max_file_size), settings, path), None
    # The project around the file gives it its execution modes, read with this text in its place.
    run.precision = project_precision(settings, [path], {path: data})
    result = _check_text(run, source, path, display, settings, fix=fix, diff=diff, unsafe=unsafe_fixes)
    _finish(run, result, settings, path)
    return run, result.source.text if fix and run.fixed and result.source is not None else None


def _finish(run: CheckRun, result: FileResult, settings: Settings, path: Path) -> CheckRun:
    """`run` with the outcome of its one file."""
    run.errors.extend(result.internal_errors)
    run.warnings.extend(result.warnings)
    if result.source is not None and result.diagnostics:
        run.sources[result.display] = result.source.text
    run.diagnostics = sort_diagnostics(_kept(run, settings, result.diagnostics, path))
    return run


def _check_text(
    run: CheckRun,
    source: SourceFile,
    path: Path,
    display: str,
    settings: Settings,
    *,
    fix: bool,
    diff: bool,
    unsafe: bool,
) -> FileResult:
    """Lint `source`; with `fix` fix it in memory (the result holds the fixed text and what remains),
    with `diff` put the diff into `run` (the result is the code as it is)."""
    from amplint.rules.runner import lint_source

    profile = run.precision.of(display)
    rules = rules_for(settings, path, profile)
    if fix or diff:
        return _fixed(run, source, path, rules, display, unsafe=unsafe, diff=diff, write=False)
    return (lint_notebook if is_notebook(path) else lint_source)(source, rules, display, profile=profile)


def add_noqa(run: CheckRun) -> tuple[int, list[str]]:
    """Suppress every finding of `run` where it is: its codes join the `# noqa` of its line, in
    each file (through the same careful write as `--fix`). How many lines changed, and what was
    left alone, said for the user. Notebooks, files Python rejects and lines that cannot end in a
    comment are left alone."""
    from amplint.fixing.edits import write_atomic
    from amplint.rules.suppression import with_noqa

    by_file: dict[str, dict[int, set[str]]] = {}
    for d in run.diagnostics:
        if d.code != UNPARSABLE:
            by_file.setdefault(d.path, {}).setdefault(d.line, set()).add(d.code)
    changed, left = 0, []
    for display, codes_by_line in by_file.items():
        path = Path(display)
        if is_notebook(path):
            left.append(f"{display}: a notebook; add `# noqa` in its cells by hand")
            continue
        try:
            source = read_source(path)
            text, skipped = with_noqa(source.text, codes_by_line)
            left += [
                f"{display}:{n}: the line cannot end in a comment (a string or a backslash goes on)"
                for n in skipped
            ]
            if text == source.text:
                continue
            compile(text, display, "exec")  # never write a file that no longer parses
            write_atomic(source, text, was=source.text, roots=run.roots)
        except WriteRefused as exc:  # it says why, and that the file is left as it is
            left.append(f"{display}: {exc}")
            continue
        except (SourceError, OSError, SyntaxError) as exc:
            left.append(f"{display}: not changed: {exc}")
            continue
        changed += len(codes_by_line) - len(skipped)
    return changed, left
