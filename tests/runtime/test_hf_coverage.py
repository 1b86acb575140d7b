"""A fixed sample of transformers model types across families, run the way
`benchmarks/hf_coverage.py` runs all of them (docs/hf-coverage.md): each must still trace."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "hf_coverage.py"


def _benchmark():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("hf_coverage", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_sample_spans_the_model_types_transformers_has() -> None:
    benchmark = _benchmark()
    assert len(benchmark.SAMPLE) == 25 and set(benchmark.SAMPLE) <= set(benchmark.model_types())


def test_a_sample_across_families_traces(tmp_path: Path) -> None:
    # As the benchmark runs: its own process forks one child per model type (a process that has
    # run torch ops, as pytest's has, must not fork).
    output = tmp_path / "rows.json"
    command = [sys.executable, str(BENCHMARK), "run", "--types", ",".join(_benchmark().SAMPLE), "--jobs", "2"]
    done = subprocess.run(
        [*command, "--timeout", "240", "--output", str(output)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(output.read_text(encoding="utf-8"))["rows"]
    assert {row["type"] for row in rows} == set(_benchmark().SAMPLE)
    failed = {row["type"]: row.get("reason", "")[:400] for row in rows if row["result"] != "traced"}
    assert not failed, failed
    assert all(row["ops"] > 50 and row["head"] for row in rows)
