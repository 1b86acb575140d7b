"""The README is the first thing a user runs: its commands stay true; so do the rule table and the
JSON schema that the docs show."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

from amplint.diagnostics import Diagnostic, Edit, Fix
from amplint.docs import TABLE_END, TABLE_START, rule_table

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
RULES = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
FORMATS = (ROOT / "docs" / "formats.md").read_text(encoding="utf-8")


def _first_code_block() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_starts_with_the_two_commands() -> None:
    install, tests = _first_code_block()
    assert README.index("```bash") < 600, "the set-up commands must be at the top"
    assert "amplint check fixtures/" in install
    assert tests == "./scripts/test"
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    # The pinned torch, from the index TORCH_INDEX_URL names where it names one; the test extras;
    # then pytest itself.
    assert 'pip install --quiet torch==2.13.0 ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}' in script
    assert '-m pip install --quiet -e ".[runtime,test]"' in script
    assert script.rstrip().endswith('-m pytest -n 2 --dist loadfile "$@"')
    assert (ROOT / "scripts" / "test").stat().st_mode & 0o111, "scripts/test must be executable"


def test_readme_says_how_to_get_the_cpu_build_of_torch_anywhere() -> None:
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in README
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu ./scripts/test" in README


def test_the_test_script_names_what_is_missing_and_fails_where_it_cannot_install_it(tmp_path: Path) -> None:
    # A machine without the tools and without apt-get (PATH holds only Python): no test runs, and
    # the run fails naming the packages, rather than skipping the tests that need them.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    environment = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    done = subprocess.run(
        [shutil.which("bash") or "/bin/bash", str(ROOT / "scripts" / "test")],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "scripts/test: the tests need chromium git patch e2fsprogs util-linux, not installed here: "
        "install them (Debian, Ubuntu: sudo apt-get install chromium git patch e2fsprogs util-linux) "
        "and run scripts/test again"
    )
    assert done.stdout == ""


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, tests = _first_code_block()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in ci.splitlines()


def test_rule_table_is_generated_from_the_catalogue() -> None:
    start = RULES.index(TABLE_START) + len(TABLE_START)
    end = RULES.index(TABLE_END)
    assert RULES[start:end].strip() == rule_table(markdown=True), (
        "docs/rules.md's table is stale: regenerate it with `amplint rule --all --format markdown`"
    )


def test_documented_json_keys_match_the_data_model() -> None:
    block = re.search(r"```json\n(.*?)```", FORMATS, re.S)
    assert block is not None
    text = re.sub(r"^  ", "", block.group(1), flags=re.M)
    documented = json.loads(text)["diagnostics"][0]
    real = Diagnostic(
        "AMP001", "n", "m", "p", 1, 1, 1, 2, fix=Fix("d", (Edit(1, 1, 1, 2, "x"),)), help="h"
    ).to_dict()
    assert set(documented) == set(real)
    assert set(documented["fix"]) == set(real["fix"])
    assert set(documented["fix"]["edits"][0]) == set(real["fix"]["edits"][0])


def test_readme_front_page_is_short_and_its_links_resolve() -> None:
    assert README.count("\n") <= 200
    first_screen = README.splitlines()[:40]
    assert all(command in first_screen for command in _first_code_block())
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), target
    for page in (ROOT / "docs").glob("*.md"):
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if not target.startswith("http"):
                assert (page.parent / target).exists(), f"{page.name}: {target}"


def test_every_rule_has_its_page_as_amplint_rule_prints_it() -> None:
    from amplint.docs import rule_page
    from amplint.rules import all_rules

    pages = {page.stem for page in (ROOT / "docs" / "rules").glob("*.md")}
    assert pages == {rule.code for rule in all_rules()}
    for rule in all_rules():
        text = (ROOT / "docs" / "rules" / f"{rule.code}.md").read_text(encoding="utf-8")
        assert text == rule_page(rule) + "\n", (
            f"regenerate it: amplint rule {rule.code} > docs/rules/{rule.code}.md"
        )
