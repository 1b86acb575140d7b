"""The trace's child process: on Linux forked from one process that imported torch once, and set up
as a fresh interpreter would be (its own session, the caller's working folder, environment and
memory limit, the child's own command line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from amplint.runtime.child import ChildError, trace_in_child
from amplint.runtime.target import target_specs

# The factory writes down where it ran, then returns a model small enough to trace at once.
_RECORDS = """\
import json, os, sys

import torch


def factory():
    seen = {
        "pid": os.getpid(),
        "parent": os.getppid(),
        "session": os.getsid(0),
        "cwd": os.getcwd(),
        "mark": os.environ.get("AMPLINT_TEST_MARK"),
        "argv0": os.path.basename(sys.argv[0]),
        "transformers": "transformers.modeling_utils" in sys.modules,
    }
    with open(os.environ["AMPLINT_TEST_RECORD"], "a") as out:
        out.write(json.dumps(seen) + "\\n")
    return torch.nn.Linear(4, 4), (torch.randn(2, 4),)
"""


def _spec(folder: Path, factory: str = "factory") -> dict[str, object]:
    (spec,) = target_specs({}, [f"records.py:{factory}"], folder)
    return spec


def _records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="traces are forked on Linux only")
def test_traces_fork_from_one_process_and_each_is_set_up_as_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "records.py").write_text(_RECORDS, encoding="utf-8")
    record = tmp_path / "seen.jsonl"
    monkeypatch.setenv("AMPLINT_TEST_RECORD", str(record))
    work = tmp_path / "work"
    work.mkdir()
    for mark in ("first", "second"):
        # What the caller has at the time of each trace reaches it, not what it had at the first.
        monkeypatch.setenv("AMPLINT_TEST_MARK", mark)
        monkeypatch.chdir(work if mark == "second" else tmp_path)
        graph = trace_in_child(_spec(tmp_path), timeout=300)
        assert graph.nodes
    first, second = _records(record)
    assert (first["mark"], second["mark"]) == ("first", "second")
    assert (first["cwd"], second["cwd"]) == (str(tmp_path), str(work))
    # Both were forked from one process that is neither this one nor either trace, and each trace
    # leads a session of its own (which a timeout ends whole).
    assert first["parent"] == second["parent"] not in (os.getpid(), first["pid"], second["pid"])
    assert first["session"] == first["pid"] and second["session"] == second["pid"]
    assert first["argv0"] == second["argv0"] == "child.py"


def test_a_crash_in_the_child_is_reported_with_its_output(tmp_path: Path) -> None:
    (tmp_path / "records.py").write_text(
        _RECORDS + "\n\ndef aborts():\n    print('about to abort', flush=True)\n    os.abort()\n",
        encoding="utf-8",
    )
    with pytest.raises(ChildError, match=r"aborted inside torch \(exit status -6\)[\s\S]*about to abort"):
        trace_in_child(_spec(tmp_path, "aborts"), timeout=300)


def test_a_dotted_target_imports_from_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `python -m amplint.runtime.child` would: the working folder first on the path, whatever
    # this process's first entry is (the `amplint` script's folder, for one).
    package = tmp_path / "models"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "records.py").write_text(_RECORDS, encoding="utf-8")
    monkeypatch.setenv("AMPLINT_TEST_RECORD", str(tmp_path / "seen.jsonl"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "elsewhere"), *sys.path[1:]])
    (spec,) = target_specs({}, ["models.records:factory"], tmp_path)
    assert trace_in_child(spec, timeout=300).nodes


# A caller's script with no `if __name__ == "__main__":` guard: it traces once, and with an argument
# has the fork server import transformers (as a run with a transformers config does) and traces again.
_CALLER = """\
import sys
from pathlib import Path

from amplint.runtime.child import prepare, trace_in_child
from amplint.runtime.target import target_specs

with open("ran.txt", "a") as out:
    out.write("ran\\n")
(spec,) = target_specs({}, ["records.py:factory"], Path.cwd())
trace_in_child(spec, timeout=300)
if sys.argv[1:] == ["transformers"]:
    prepare([{"hf_config": "config.json"}])
    trace_in_child(spec, timeout=300)
"""


def _call(folder: Path, *args: str) -> list[dict[str, object]]:
    (folder / "records.py").write_text(_RECORDS, encoding="utf-8")
    (folder / "caller.py").write_text(_CALLER, encoding="utf-8")
    record = folder / "seen.jsonl"
    done = subprocess.run(
        [sys.executable, "caller.py", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        env={**os.environ, "AMPLINT_TEST_RECORD": str(record)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return _records(record)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="traces are forked on Linux only")
def test_a_callers_script_without_a_main_guard_is_not_run_again_by_a_trace(tmp_path: Path) -> None:
    # multiprocessing would run the caller's main script again in each process it starts.
    assert len(_call(tmp_path)) == 1
    assert (tmp_path / "ran.txt").read_text(encoding="utf-8") == "ran\n"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="traces are forked on Linux only")
def test_a_run_that_needs_transformers_starts_a_server_that_imported_it(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    plain, after = _call(tmp_path, "transformers")
    assert (plain["transformers"], after["transformers"]) == (False, True)
    assert plain["parent"] != after["parent"]
