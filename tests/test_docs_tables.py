"""Each page of docs/ that a benchmark renders is what its committed data renders to today: a number
on the page changes only with the data (measured again) or with the script that renders it.

One row per page: the page, the script in benchmarks/ and the function of it that renders the page
from the script's committed results (as its `report` command does)."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _script(name: str) -> ModuleType:
    if name not in sys.modules:  # version_matrix imports hf_coverage by name
        sys.path.insert(0, str(BENCHMARKS))
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _data(name: str) -> Any:
    return json.loads((BENCHMARKS / name).read_text(encoding="utf-8"))


RENDERED: list[tuple[str, str, Callable[[ModuleType], str]]] = [
    ("cuda-parity.md", "cuda_parity", lambda script: script.report(BENCHMARKS / "cuda_parity.json")),
    (
        "hf-coverage.md",
        "hf_coverage",
        lambda script: script.report(_data("hf_coverage.json")["rows"], _data("hf_coverage.json")["meta"]),
    ),
    ("version-matrix.md", "version_matrix", lambda script: script.report(_data("version_matrix.json"))),
    ("fix_safety.md", "fix_safety", lambda script: script.report(_data("fix_safety.json"))),
]


@pytest.mark.parametrize(("page", "script", "render"), RENDERED, ids=[row[0] for row in RENDERED])
def test_the_page_is_what_its_data_renders(
    page: str, script: str, render: Callable[[ModuleType], str]
) -> None:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    assert text == render(_script(script)), (
        f"regenerate it: python benchmarks/{script}.py report > docs/{page} (or measure again)"
    )


def test_the_rendered_pages_are_listed_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"docs/{page}" in readme for page, _, _ in RENDERED)


def test_pyproject_admits_the_versions_the_matrix_passed_and_no_other_row() -> None:
    # pyproject's torch and transformers ranges say what docs/version-matrix.md measured: every row
    # that passed is inside them, every row with a failure outside.
    from packaging.requirements import Requirement
    from packaging.version import Version

    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = extras["optional-dependencies"]
    ranges = {
        name: next(Requirement(r).specifier for r in extras[extra] if Requirement(r).name == name)
        for name, extra in (("torch", "runtime"), ("transformers", "hf"))
    }
    passes = _script("version_matrix").passes
    rows = _data("version_matrix.json")["rows"]
    assert any(passes(row) for row in rows)
    for row in rows:
        versions = {
            name: Version(row.get("installed", {}).get(name) or row["requested"][name].split("==")[1])
            for name in ranges
        }
        admitted = all(Version(v.base_version) in ranges[name] for name, v in versions.items())
        assert admitted == passes(row), (row["row"], {n: str(v) for n, v in versions.items()})
