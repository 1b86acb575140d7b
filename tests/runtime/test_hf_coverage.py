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

    # `--update` measures the named types again and keeps every other row as it was.
    earlier = {row["type"]: row for row in rows}
    again = sorted(earlier)[0]
    update = [sys.executable, str(BENCHMARK), "run", "--types", again, "--update", "--output", str(output)]
    done = subprocess.run([*update, "--timeout", "240"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(output.read_text(encoding="utf-8"))
    assert data["meta"]["updated"] == [again] and data["meta"]["jobs"] == 2
    assert {row["type"]: row for row in data["rows"] if row["type"] != again} == {
        name: row for name, row in earlier.items() if name != again
    }
    assert next(row for row in data["rows"] if row["type"] == again)["result"] == "traced"
    assert "run --types " + again + " --update" in _benchmark().report(data["rows"], data["meta"])


def test_update_without_types_is_refused(tmp_path: Path) -> None:
    command = [sys.executable, str(BENCHMARK), "run", "--update", "--output", str(tmp_path / "rows.json")]
    done = subprocess.run(command, capture_output=True, text=True)
    assert done.returncode == 2 and "--update measures again the model types --types names" in done.stderr
