"""Regression cases from real public code for the dtype-facts engine.

Each file under `data/real/` is a short excerpt of a pinned public project (its header names the
project, version or commit, path and original lines) with the expectations written into it:

* `# expect: AMP003` at the end of a line: amplint must report that code on that line;
* `# expect-none: AMP001,AMP002` in the header: amplint must report none of those codes anywhere.

A code named in any expectation of a file is also checked the other way: amplint must not report
it on a line that does not expect it. Codes a file does not name are not checked there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from amplint.config import Settings
from amplint.pipeline.check import rules_for
from amplint.rules import all_rules
from amplint.rules.runner import lint_text
from amplint.static.profile import detect

DATA = Path(__file__).parent / "data" / "real"
EXCERPTS = sorted(DATA.glob("*.py"))
STATIC = {rule.code for rule in all_rules() if not rule.runtime_only}

_CODE = r"AMP\d{3}"
_EXPECT = re.compile(rf"#\s*expect:\s*({_CODE}(?:\s*,\s*{_CODE})*)\s*$")
_EXPECT_NONE = re.compile(rf"^#\s*expect-none:\s*({_CODE}(?:\s*,\s*{_CODE})*)\s*$")
_SOURCE = re.compile(r"^#\s*Source:\s*(.+)$")
_HEADER_MORE = re.compile(r"^#\s+(?!Class\b|expect)(.+)$")


@dataclass
class Expectations:
    source: str = ""
    on_line: dict[int, set[str]] = field(default_factory=dict)
    none: set[str] = field(default_factory=set)

    @property
    def named(self) -> set[str]:
        return self.none.union(*self.on_line.values())


def _codes(text: str) -> set[str]:
    return {code.strip() for code in text.split(",")}


def expectations(text: str) -> Expectations:
    found = Expectations()
    in_source = False
    for number, line in enumerate(text.splitlines(), start=1):
        if not found.source and (source := _SOURCE.match(line)):
            found.source, in_source = source.group(1).strip(), True
        elif in_source and (more := _HEADER_MORE.match(line)):
            found.source += " " + more.group(1).strip()
        else:
            in_source = False
        if none := _EXPECT_NONE.match(line):
            found.none |= _codes(none.group(1))
        elif expect := _EXPECT.search(line):
            found.on_line.setdefault(number, set()).update(_codes(expect.group(1)))
    return found


def _report(name: str, source: str, text: str, diagnostics: list, profile: str) -> str:
    lines = text.splitlines()
    shown = "\n".join(
        f"  {d.line}:{d.column} {d.code} {d.message[:110]}\n      | {lines[d.line - 1].strip()[:100]}"
        for d in diagnostics
    )
    return f"{name} ({source})\nprofile: {profile}\namplint reported:\n{shown or '  nothing'}"


@pytest.mark.parametrize("path", EXCERPTS, ids=[p.stem for p in EXCERPTS])
def test_real_code(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    expected = expectations(text)
    # As `amplint check <excerpt>` would: the default rule set, and the precision profile detected
    # from the file itself (an excerpt that sets no precision is library code, run in either half
    # dtype by its caller).
    profile = detect([(path.name, text)])
    everything = Settings(extend_select=tuple(sorted(STATIC)))  # the opt-in rules too
    result = lint_text(text, rules_for(everything, path), path=path.name, profile=profile)
    assert not result.internal_errors, result.internal_errors
    diagnostics = [d for d in result.diagnostics if d.code in expected.named]
    report = _report(path.name, expected.source, text, result.diagnostics, profile.describe())
    lines = text.splitlines()

    problems = []
    for line, codes in sorted(expected.on_line.items()):
        reported = {d.code for d in diagnostics if d.line == line}
        for code in sorted(codes - reported):
            problems.append(f"missed: {code} expected on line {line}: {lines[line - 1].strip()[:100]}")
    for d in diagnostics:
        if d.code in expected.none:
            problems.append(f"false positive: {d.code} on line {d.line} (the file expects none)")
        elif d.code not in expected.on_line.get(d.line, set()):
            problems.append(f"unexpected: {d.code} on line {d.line}, which does not expect it")
    if problems:
        pytest.fail("\n".join(problems) + "\n" + report, pytrace=False)


def test_every_excerpt_names_its_source_and_expectations() -> None:
    assert EXCERPTS, f"no excerpts under {DATA}"
    for path in EXCERPTS:
        expected = expectations(path.read_text(encoding="utf-8"))
        assert expected.source, f"{path.name}: no '# Source:' header line"
        assert expected.named, f"{path.name}: no '# expect:' or '# expect-none:' comment"
        unknown = expected.named - STATIC
        assert not unknown, f"{path.name}: unknown or runtime-only codes {sorted(unknown)}"


def test_a_constant_slice_carries_only_what_was_written_into_it() -> None:
    # The netharn excerpt with its `exp` on the sigmoid's own channel: flagged.
    path = DATA / "netharn_yolo2_sigmoid_and_exp_channels.py"
    text = path.read_text(encoding="utf-8")
    overlapping = text.replace(
        "(coord[:, :, 2, :, :].exp() * anchor_w)", "(coord[:, :, 1, :, :].exp() * anchor_w)"
    )
    assert overlapping != text
    for source, flagged in ((text, False), (overlapping, True)):
        result = lint_text(
            source, rules_for(Settings(), path), path=path.name, profile=detect([(path.name, source)])
        )
        assert any(d.code == "AMP001" for d in result.diagnostics) == flagged
