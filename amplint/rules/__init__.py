"""The rule catalogue: every module in this package named `ampNNN_*` defines one rule (its examples
are data in `examples/AMPNNN.toml`); `runner` runs the selected rules over one file and
`suppression` reads `# noqa`. A rule imports the static engine (`amplint.static`), the runtime
graph (`amplint.runtime`) and the rule base (`amplint.rule`), never another rule. The one arrow
back up: AMP110 reads the lockfile's data modules (`amplint.lock.file`, `amplint.lock.diff`),
whose package also holds the `amplint lock` command that runs these rules."""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from pathlib import Path

from amplint.config import Settings
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


def rule_by_code(code: str) -> type[Rule] | None:
    return next((rule for rule in all_rules() if rule.code == code.upper()), None)


def help_uri(rule: type[Rule]) -> str:
    """Where a rule is documented: its page, docs/rules/CODE.md (what `amplint rule CODE` prints)."""
    return f"{RULES_URL}/{rule.code}.md"
