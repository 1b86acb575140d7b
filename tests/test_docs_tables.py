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
