"""The rule catalogue: every module in this package named `ampNNN_*` defines one rule (its examples
are data in `examples/AMPNNN.toml`); `runner` runs the selected rules over one file and
`suppression` reads `# noqa`. A rule imports the static engine (`amplint.static`), the runtime
graph (`amplint.runtime`) and the rule base (`amplint.rule`), never another rule. The one arrow
back up: AMP110 reads the lockfile's data modules (`amplint.lock.file`, `amplint.lock.diff`),
whose package also holds the `amplint lock` command that runs these rules."""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from functools import cache
from pathlib import Path

from amplint.config import ALL, ConfigError, Settings
from amplint.results import UNPARSABLE
from amplint.rule import Rule
from amplint.static.profile import CALLER, Profile

RULES_URL = "https://github.com/amplint/amplint/blob/main/docs/rules"


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code."""
    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("amp"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.extend(
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, Rule)
            and obj is not Rule
            and obj.__module__ == module.__name__
        )
    return tuple(sorted(found, key=lambda rule: rule.code))


def selected_rules(settings: Settings, profile: Profile = CALLER) -> list[type[Rule]]:
    """The static rules select/extend-select/ignore turn on (opt-in ones only where named, or where
    the project's precision `profile` is the one dtype the rule's hazard belongs to)."""
    return [
        rule
        for rule in all_rules()
        if not rule.runtime_only and settings.is_selected(rule.code, opt_in=not _on_by_default(rule, profile))
    ]


def _on_by_default(rule: type[Rule], profile: Profile) -> bool:
    if rule.default_on:
        return True
    return profile.origin != "caller" and bool(profile.half) and profile.half <= rule.default_on_in


def rules_for(settings: Settings, path: Path, profile: Profile = CALLER) -> list[type[Rule]]:
    """The enabled rules for one file, after select/ignore and per-file-ignores."""
    return [
        rule
        for rule in selected_rules(settings, profile)
        if rule.code != UNPARSABLE and not settings.is_ignored_for(rule.code, path)
    ]


@cache
def known_codes() -> list[str]:
    """Every rule's code, from its module's name (`amp008_*`): a run the cache answers imports no rule."""
    return sorted(
        info.name[:6].upper() for info in pkgutil.iter_modules(__path__) if info.name.startswith("amp")
    )


def check_codes(settings: Settings) -> None:
    """Raise ConfigError when `select`, `extend-select`, `ignore` or `per-file-ignores` names a code or
    prefix that matches no rule (`AMP08`, `AMP999`): a typo would otherwise turn rules off, or leave
    them on, without a word. The message says where it was written and names the nearest code."""
    codes = known_codes()
    named = [
        ("select", "select", settings.select),
        ("extend_select", "extend-select", settings.extend_select),
        ("ignore", "ignore", settings.ignore),
        *(("per_file_ignores", f"per-file-ignores {glob!r}", own) for glob, own in settings.per_file_ignores),
    ]
    for field, key, values in named:
        for value in values:
            if value == ALL or any(code.startswith(value) for code in codes):
                continue
            origin = settings.origin(field)
            where = origin if origin.startswith("--") else f"{origin}: '{key}'"
            # The most similar code; of equally similar ones, the one sharing the longest start.
            nearest = max(
                codes,
                key=lambda code: (
                    difflib.SequenceMatcher(None, value, code).ratio(),
                    next(
                        (i for i, (a, b) in enumerate(zip(value, code, strict=False)) if a != b), len(value)
                    ),
                ),
            )
            raise ConfigError(
                f"{where} names {value!r}, which matches no rule; did you mean {nearest!r}? "
                "(`amplint rule --all` lists them)",
                settings.config_path if not origin.startswith("--") else None,
            )


def rule_by_code(code: str) -> type[Rule] | None:
    return next((rule for rule in all_rules() if rule.code == code.upper()), None)


def help_uri(rule: type[Rule]) -> str:
    """Where a rule is documented: its page, docs/rules/CODE.md (what `amplint rule CODE` prints)."""
    return f"{RULES_URL}/{rule.code}.md"
