"""The Python API: check paths or source text as `amplint check` does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from amplint.config import Settings, load_settings
from amplint.diagnostics import Diagnostic
from amplint.pipeline.check import run_check
from amplint.rules import rules_for
from amplint.static.profile import CALLER, Profile


def check_paths(
    paths: Sequence[str | Path],
    *,
    select: Sequence[str] | None = None,
    ignore: Sequence[str] | None = None,
    config: str | Path | None = None,
    modes: Sequence[str] | None = None,
    show_conditional: bool | None = None,
) -> list[Diagnostic]:
    """Lint files and directories as `amplint check` does, honouring `[tool.amplint]`. `modes`
    (`["autocast-bf16"]`) and `show_conditional` as the command line's `--modes` and
    `--show-conditional`."""
    resolved = [Path(p) for p in paths]
    settings = load_settings(resolved, Path(config) if config else None)
    settings = settings.with_overrides(
        select=select, ignore=ignore, modes=modes, show_conditional=show_conditional
    )
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
    from amplint.rules.runner import lint_text

    settings = Settings().with_overrides(select=list(select), ignore=list(ignore))
    return lint_text(source, rules_for(settings, Path(path), profile), path, profile=profile).diagnostics
