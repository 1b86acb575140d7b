"""Each page of docs/ that a benchmark renders is what its committed data renders to today: a number
on the page changes only with the data (measured again) or with the script that renders it.

One row per page: the page, the script in benchmarks/ and the function of it that renders the page
from the script's committed results (as its `report` command does). A page with prose around a
script's numbers holds them in blocks between markers (benchmarks/docs_blocks.py): each block is
what the script's `report` renders from its committed JSON."""

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
    if name not in sys.modules:  # benchmarks/ is on the path (pyproject): they import each other by name
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


@pytest.mark.parametrize("name", _script("docs_blocks").SCRIPTS)
def test_the_blocks_of_a_page_are_what_their_data_renders(name: str) -> None:
    try:
        script = _script(name)
    except ModuleNotFoundError as missing:  # training_curves needs torch, lsp_latency pygls
        pytest.skip(f"benchmarks/{name}.py needs {missing.name}")
    docs_blocks = _script("docs_blocks")
    found = docs_blocks.page_blocks(ROOT / "docs" / script.PAGE, name)
    assert found == script.report(docs_blocks.load(script.RESULTS)), (
        f"regenerate them: python benchmarks/{name}.py report --write (or measure again)"
    )


def test_report_write_replaces_a_block_in_place_and_refuses_a_page_without_it() -> None:
    docs_blocks = _script("docs_blocks")
    page = "Prose.\n\n<!-- begin bench:table -->\n\nold\n\n<!-- end bench:table -->\n\nMore prose.\n"
    filled = docs_blocks.fill(page, "bench", {"table": "| new |\n| --- |"})
    assert filled == page.replace("old", "| new |\n| --- |")
    assert docs_blocks.blocks(filled, "bench") == {"table": "| new |\n| --- |"}
    assert docs_blocks.blocks(filled, "other") == {}
    with pytest.raises(SystemExit, match="no block summary of bench"):
        docs_blocks.fill(page, "bench", {"summary": "text"})


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


def test_each_hand_set_config_key_cites_a_line_that_states_it_or_says_unverified() -> None:
    # A cited source is a line of an installed package's file at the version it names, and that
    # line names the key (the last part of `a.b`), or a quoted line of a copy of the checkpoint's
    # config at a commit; everything else is marked unverified.
    import importlib.metadata
    import re

    pytest.importorskip("transformers")
    keys_file = _data("hf_checkpoint_keys.json")
    sourced = [
        (t, key) for t, entry in keys_file.items() for key in entry["keys"] if key["source"] != "unverified"
    ]
    assert sourced
    copies = [(t, key) for t, key in sourced if key["source"].startswith("github ")]
    assert copies
    for model_type, key in copies:
        # A line of a copy of the checkpoint's config at a commit (JSON, or the Python that wrote
        # it), quoted: it names the key and, for a plain value, states the value we use.
        cited = re.fullmatch(r"github [\w.-]+/[\w.-]+@[0-9a-f]{40}, [\w/.-]+:\d+ \(.+\)", key["source"])
        assert cited, (model_type, key)
        quote, value = key["quote"], key["value"]
        name = re.escape(key["key"].split(".")[-1])
        assert re.search(rf"[\"']{name}[\"']\s*:|\b{name}\s*=", quote), (model_type, key)
        if not isinstance(value, (dict, list)):
            spelled = "|".join(re.escape(text) for text in (json.dumps(value), repr(value)))
            assert re.search(rf"[:=]\s*({spelled})\s*,?$", quote), (model_type, key)
    for model_type, key in (row for row in sourced if row not in copies):
        cited = re.fullmatch(r"(\w+) ([\w.]+), ([\w/.]+\.py):(\d+) \(.+\)", key["source"])
        assert cited, (model_type, key)
        package, version, path, line = cited.groups()
        assert importlib.metadata.version(package) == version, (model_type, key["source"])
        files = [f for f in importlib.metadata.files(package) or () if str(f) == path]
        assert files, (model_type, path)
        text = files[0].locate().read_text(encoding="utf-8").splitlines()[int(line) - 1]
        assert key["key"].split(".")[-1] in text, (model_type, key, text)
